"""What a case records of the implementation for a failed run's diagnosis (report.json's `facts`, read by
reports/diagnosis.py, which reads report.json alone): how it answered, which of its transactions it reported
committed, whether it ever logged in where its DSN points, its last stderr error line, the cancels it was sent and
the Every grids anchored in the future. Facts describe; they judge nothing (the checks do)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from barriers import BY_NAME

from testhost.judge.identity import instant_text

# The client commands an implementation may offer: each commits a scoped transaction when it answers `ok`.
CLIENT_COMMANDS = ("create", "update", "delete", "release-after-recovery", "complete-work")
CLAIM_COMMITTED = "schedule-claim-after-commit"
# A stderr line that reads as an error (any runtime's words for it), and how much of one a report keeps.
ERROR_LINE = re.compile(r"error|exception|fail|fatal|panic|denied|refused|unknown|could not|cannot|can't|invalid|"
                        r"not registered|not found|timed? ?out|traceback", re.IGNORECASE)
LINE_LIMIT = 300
STDERR_READ = 65536  # the tail of each stderr log read for it
# log_connections (testhost/world/workspace.py SERVER_SETTINGS): one line per session the server let in.
AUTHORIZED = re.compile(r"connection authorized: user=(\S+) database=(\S+)")


def scoped_barrier(name: str) -> bool:
    """An after-commit barrier of a scoped runtime transaction (a decision, a bridge, a Work's terminal one)."""
    barrier = BY_NAME.get(name)
    return (barrier is not None and barrier.position == "after-commit"
            and not barrier.transaction.startswith("dispatcher"))


def stderr_error(logs: dict[str, Path]) -> dict | None:
    """The last line of an instance's stderr that reads as an error: instance A's first, then the others'."""
    for label in sorted(logs, key=lambda label: (label != "A", label)):
        try:
            with open(logs[label], "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - STDERR_READ))
                lines = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            continue
        found = [line.strip() for line in lines if line.strip() and ERROR_LINE.search(line)]
        if found:
            line = found[-1]
            return {"instance": label, "line": line if len(line) <= LINE_LIMIT else line[:LINE_LIMIT - 1] + "…"}
    return None


def log_offset(world) -> int | None:
    """Where the world's own server log ends now (None: the server is not the world's own, its log unread)."""
    path = getattr(getattr(world, "cluster", None), "log_path", None)
    try:
        return path.stat().st_size if path is not None else None
    except OSError:
        return None


def sessions_logged_in(world, offset: int | None, users, database: str) -> int | None:
    """How many sessions the server let in as one of `users` to `database` since `offset` (None: not known)."""
    if offset is None:
        return None
    try:
        with open(world.cluster.log_path, "rb") as log:
            log.seek(offset)
            text = log.read().decode("utf-8", "replace")
    except OSError:
        return None
    return sum(1 for m in AUTHORIZED.finditer(text) if m.group(1) in users and m.group(2) == database)


def _error_text(answer: dict) -> str:
    """An answer's error or problem in one line: `kind: message`, or the problem's type and detail."""
    error, problem = answer.get("error") or {}, answer.get("problem") or {}
    if error:
        return f"{error.get('kind') or 'error'}: {error.get('message') or ''}".strip()
    if problem:
        return f"{problem.get('type') or 'problem'}: {problem.get('detail') or problem.get('title') or ''}".strip()
    return "no error given"


def cancels(timeline: list[dict]) -> list[dict]:
    """Each `cancel-pass` reply the host sent, and the claims the pass still committed after it (before its answer)."""
    found = []
    for i, event in enumerate(timeline):
        if event["event"] != "cancel-pass":
            continue
        label, after = event.get("instance"), 0
        for later in timeline[i + 1:]:
            if later.get("instance") != label:
                continue
            if later["event"] == "response" and later.get("op") == "process-due":
                break
            after += later["event"] == "barrier" and later.get("name") == CLAIM_COMMITTED
        found.append({"instance": label, "barrier": event.get("barrier"), "claims_after": after})
    return found


def future_anchors(state, schedule_names: dict[str, str]) -> list[dict]:
    """Every generation of an Every schedule whose anchor lies after its acceptance: its grid has instants before
    the anchor (protocol note 6)."""
    if state is None:
        return []
    return [{"schedule": schedule_names.get(str(g["schedule_id"]), str(g["schedule_id"])),
             "schedule_id": str(g["schedule_id"]), "generation": g["generation"],
             "anchor": instant_text(g["anchor_utc"]), "accepted_at_utc": instant_text(g["accepted_at_utc"])}
            for g in state.generations if g["schedule_kind"] == "every" and g["anchor_utc"] is not None
            and g["anchor_utc"] > g["accepted_at_utc"]]


def gather(*, answers: list[dict], timeline: list[dict], logs: dict[str, Path], dispatcher_sessions: int | None,
           runtime_sessions: int | None = None, state=None,
           schedule_names: dict[str, str] | None = None) -> dict[str, Any]:
    """The case's facts (documented in docs/report-format.md under `facts`)."""
    asked: dict[str, int] = {}
    for answer in answers:
        asked[answer["op"]] = asked.get(answer["op"], 0) + 1
    # A pass that answered fail or unknown on its own: not the host's `unknown` for a process that died, not a pass
    # the scenario expects refused, not one answered between the case's fault and its recovery.
    own = [a for a in answers if a["outcome"] in ("fail", "unknown") and not a.get("died")
           and not a.get("expected_refusal") and a.get("faulted") is None and not a.get("in_fault")]
    refused = [a for a in own if a["op"] == "process-due"]
    reported = [e for e in timeline if e["event"] == "barrier"]
    claims = sum(1 for e in reported if e.get("name") == CLAIM_COMMITTED)
    client_asked = sum(asked.get(op, 0) for op in CLIENT_COMMANDS)
    client_ok = sum(1 for a in answers if a["op"] in CLIENT_COMMANDS and a["outcome"] == "ok")
    return {"asked": asked,
            "passes_refused": len(refused), "last_pass_error": _error_text(refused[-1]) if refused else None,
            # the last request of any operation answered so (a client step may expect its refusal: not judged here)
            "last_refusal": {"op": own[-1]["op"], "outcome": own[-1]["outcome"], "error": _error_text(own[-1])}
            if own else None,
            "claims_reported": claims,
            # work that needs a scoped transaction: a claimed schedule's decision, a client command
            "scoped_asked": claims + client_asked,
            "scoped_commits": sum(1 for e in reported if scoped_barrier(e.get("name", ""))) + client_ok,
            "dispatcher_sessions": dispatcher_sessions, "runtime_sessions": runtime_sessions,
            "stderr_error": stderr_error(logs),
            "cancels": cancels(timeline),
            "future_anchors": future_anchors(state, schedule_names or {})}
