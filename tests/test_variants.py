"""The legal variants (variants/): each is the reference taking another way the contract allows. Each certifies on
its slice (the cases where its difference shows), and the difference does show there, in the slice's report or in
the server's statement log of one pass: a variant whose difference never showed would prove nothing. The catalog
itself (edits, the sentence or note each names, the wording of a harness defect) is checked without a database."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from mutants import MUTANTS
from variants import BY_NAME, VARIANTS, Edit, Variant, VariantError, materialize
from testhost.runs.variation import judge, line, select_variants

ROOT = Path(__file__).parent.parent
SPEC = ROOT / "docs" / "spec" / "durable-schedule-protocol-v1.txt"


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_the_catalog_has_the_variants_the_docs_promise():
    names = [v.name for v in VARIANTS]
    assert len(set(names)) == len(names) and not set(names) & {m.name for m in MUTANTS}
    assert {"idle-cursor-to-cutoff", "bridge-on-new-session", "one-session-per-part", "other-lease-and-owner",
            "other-retry-backoff", "claim-ahead", "process-due-only", "other-read-order"} <= set(names)
    page = (ROOT / "docs" / "variants.md").read_text()
    for variant in VARIANTS:
        assert f"`{variant.name}`" in page, f"docs/variants.md does not list {variant.name}"


def test_every_variant_names_the_sentence_or_note_that_allows_it_and_where_its_difference_shows():
    spec, protocol = _flat(SPEC.read_text()), _flat((ROOT / "barriers" / "PROTOCOL.md").read_text())
    notes = (ROOT / "docs" / "protocol-notes.md").read_text()
    for variant in VARIANTS:
        allowed = variant.exercises
        if allowed.startswith("docs/protocol-notes.md "):
            number = allowed.split()[1].rstrip(":")
            assert re.search(rf"^{re.escape(number)}\. \*\*", notes, re.M), (variant.name, number)
        else:
            assert _flat(allowed) in spec or _flat(allowed) in protocol, variant.name
        assert variant.slice and variant.differs and "\n" not in variant.differs, variant.name
        assert (variant.shows is None) != (variant.probe is None), f"{variant.name}: a report reading or a probe"


def test_certification_md_lists_each_variant_under_the_spec_sentence_it_exercises():
    from testhost.runs.coverage import entries
    cited = {entry.sentence: entry.names("variants") for entry in entries()}
    for variant in VARIANTS:
        if variant.exercises in cited:
            assert variant.name in cited[variant.exercises], f"{variant.name} is not listed under its sentence"


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
def test_each_variant_applies_exactly_once_and_leaves_the_schema_alone(variant, tmp_path):
    root = materialize(variant, tmp_path)
    from mutants import reference_root
    reference = reference_root()
    changed = sorted(str(p.relative_to(root / "reference")) for p in (root / "reference").rglob("*")
                     if p.is_file() and (reference / p.relative_to(root / "reference")).read_bytes() != p.read_bytes())
    assert changed == sorted({e.path for e in variant.edits})
    assert not any(path.startswith("migrations/") for path in changed)
    assert materialize(variant, tmp_path) == root  # made once per content


def test_a_variant_may_not_edit_the_normative_schema(tmp_path):
    schema = Variant("schema", "x", "edits a migration", (Edit("migrations/0002_scopes.sql", "a", "b"),), ("x",),
                     probe="nothing")
    with pytest.raises(VariantError, match="may not edit the normative schema"):
        materialize(schema, tmp_path)


def test_the_launcher_lists_the_catalog_and_refuses_an_unknown_variant():
    listing = subprocess.run([sys.executable, "-m", "variants", "--list"], capture_output=True, text=True, check=True)
    assert [entry.split(":")[0] for entry in listing.stdout.splitlines()] == [v.name for v in VARIANTS]
    unknown = subprocess.run([sys.executable, "-m", "variants", "no-such"], capture_output=True, text=True)
    assert unknown.returncode == 2 and "no variant named 'no-such'" in unknown.stderr
    with pytest.raises(ValueError, match="no variant matches 'no-such-\\*'"):
        select_variants("no-such-*")


def _case(case_id, verdict="pass", checks=(), timeline=(), **more):
    return {"id": case_id, "verdict": verdict, "reason": checks[0]["name"] if checks else "", "checks": list(checks),
            "timeline": list(timeline), **more}


def test_a_failing_variant_is_reported_as_a_harness_defect_with_its_checks():
    variant = BY_NAME["process-due-only"]
    failed = _case("at-single/x/kill/1", "fail", [{"name": "model-agreement", "ok": False, "rule": "r"}],
                   operations=["process-due"], fallbacks=["create"])
    verdict = judge(variant, 1, {"cases": [_case("at-single", operations=["process-due"], fallbacks=["create"]),
                                           failed], "run": {"problems": []}})
    assert not verdict["certified"] and verdict["failed_checks"] == ["model-agreement"]
    text = line(verdict)
    assert text.startswith("harness defect: legal variant process-due-only failed 1 of 2 cases (checks "
                           "model-agreement; first at-single/x/kill/1)")
    assert "difference seen in 2 cases" in text
    passing = judge(variant, 0, {"cases": [_case("at-single", operations=["process-due"], fallbacks=["create"])],
                                 "run": {"problems": []}}, {"profile": "ci", "code": 0, "found": ""})
    assert line(passing).startswith("certified: legal variant process-due-only passed its 1 case")
    assert line(passing).endswith("explore ci: nothing found")
    # a run in which the difference never showed proved nothing, and says so
    vacuous = judge(variant, 0, {"cases": [_case("at-single", operations=["process-due", "create"])],
                                 "run": {"problems": []}})
    assert vacuous["vacuous"] and "VACUOUS" in line(vacuous)
    # an explore find is a defect too
    found = judge(variant, 0, {"cases": [], "run": {"problems": []}}, {"profile": "ci", "code": 1, "found": "x/1"})
    assert "explore ci found x/1" in line(found)


def _barrier(t, name, schedule="s1", instance="A"):
    return {"t": t, "event": "barrier", "instance": instance, "name": name, "context": {"schedule_id": schedule}}


def test_the_report_readings_tell_the_variant_from_the_reference():
    fault = [_barrier(0.1, "schedule-decision-after-commit"),
             {"t": 0.11, "event": "fault", "fault": "disconnect", "barrier": "schedule-decision-after-commit",
              "instance": "A"}, {"t": 0.12, "event": "fault-injected"}]
    redone = _case("c", timeline=fault + [_barrier(0.13, "schedule-decision-before-commit"),
                                          _barrier(0.14, "schedule-work-after-acceptance")])
    alone = _case("c", timeline=fault + [_barrier(0.3, "schedule-work-after-acceptance")])
    assert BY_NAME["bridge-on-new-session"].shows(redone) is None
    assert "retried alone" in BY_NAME["bridge-on-new-session"].shows(alone)
    assert BY_NAME["other-retry-backoff"].shows(redone) is None  # retried at once
    assert "0.18 s after it" in BY_NAME["other-retry-backoff"].shows(alone)
    interleaved = _case("c", timeline=[{"t": 0, "event": "step"}] + [
        _barrier(0.1 * i, name, s) for i, (name, s) in enumerate([
            ("schedule-claim-after-commit", "s1"), ("schedule-decision-before-commit", "s1"),
            ("schedule-claim-after-commit", "s2"), ("schedule-decision-before-commit", "s2")])])
    ahead = _case("c", timeline=[{"t": 0, "event": "step"}] + [
        _barrier(0.1 * i, name, s) for i, (name, s) in enumerate([
            ("schedule-claim-after-commit", "s1"), ("schedule-claim-after-commit", "s2"),
            ("schedule-decision-before-commit", "s1")])])
    assert BY_NAME["claim-ahead"].shows(interleaved) is None
    assert "claimed 2 schedules" in BY_NAME["claim-ahead"].shows(ahead)
    assert BY_NAME["process-due-only"].shows(_case("c", operations=["create", "process-due"], fallbacks=[])) is None
    idle = [{"name": "idle-pass-keeps-cursor", "ok": True, "rule": "r", "evidence": []}]
    assert BY_NAME["idle-cursor-to-cutoff"].shows(_case("c", checks=idle)) is None


# -- each variant on its slice (real worlds) -----------------------------------------------------------------------

@pytest.mark.world
@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
def test_each_variant_certifies_on_its_slice_where_its_difference_shows(variant, tmp_path, capsys):
    from testhost.runs.options import Options
    from testhost.runs.variation import run_variants
    code, summary = run_variants(Options(report_dir=tmp_path, jobs=1, progress=lambda text: None), variant.name,
                                 slice_only=True)
    [verdict] = summary["variants"]
    printed = capsys.readouterr().out
    assert verdict["certified"], printed
    assert verdict["cases"] >= len(variant.slice) and not verdict["run_problems"], printed
    if variant.shows is not None:
        assert verdict["difference_seen_in"], f"{variant.name}: its difference showed in no case of its slice"
    assert code == 0 and printed.splitlines()[0].startswith(f"certified: legal variant {variant.name} passed")
    if variant.name == "idle-cursor-to-cutoff":  # the reference's choice, done otherwise: a note, not a failure
        assert verdict["differs_from_reference"] == ["idle-pass-keeps-cursor"], printed
    if variant.name == "bridge-on-new-session":  # the hold taken after the lost connection met the lone bridge
        report = json.loads((tmp_path / variant.name / "certify" / "report.json").read_text())
        [case] = [c for c in report["cases"] if c["id"] == variant.slice[0]]
        events = [e for e in case["timeline"] if e["event"].startswith("bridge-clock")]
        assert events[0]["event"] == "bridge-clock-hold" and events[0]["after_fault"] == "disconnect", events
        assert events[1]["moved"] is True, events
        [clock] = [c for c in case["checks"] if c["name"] == "work-own-clock"]
        assert clock["ok"] and clock["rows"] == 1 and not clock.get("skipped"), clock


# -- the differences a report cannot show, in the server's statement log of one pass ------------------------------

ENTRY = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \w+ \[(\d+)\] (\w+):  (.*)$")
RUNTIME, DISPATCHER = "appsurface_durable_runtime", "appsurface_durable_dispatcher"
CLAIM = "claim_schedule_dispatch("
FENCES = "-- The fences, and the cutoff"
PENDING = "select o.* from appsurface_durable.schedule_occurrences o"
WORK = "-- The transaction writer"


def _transactions(entries: list[list]) -> list[dict]:
    """The logged transactions (BEGIN to COMMIT or ROLLBACK) in order of their BEGIN: pid, statements, parameters."""
    open_by_pid: dict[int, dict] = {}
    done: list[dict] = []
    for pid, level, text in entries:
        if level == "DETAIL":
            if pid in open_by_pid and open_by_pid[pid]["statements"]:
                open_by_pid[pid]["parameters"][-1] = text
            continue
        statement = text.split(": ", 1)[1] if text.startswith("execute") else text
        if statement.strip() == "begin":
            open_by_pid[pid] = {"pid": pid, "statements": [], "parameters": []}
            done.append(open_by_pid[pid])
        elif statement.strip() in ("commit", "rollback"):
            open_by_pid.pop(pid, None)
        elif pid in open_by_pid:
            open_by_pid[pid]["statements"].append(statement)
            open_by_pid[pid]["parameters"].append("")
    return done


def _statement_log(world, store, command: str, requests: list[tuple[str, dict]]) -> tuple[list[dict], list[dict]]:
    """Run `command` over the adapter protocol (no barriers): create an After schedule due in a second, move the
    server clock past it, then send `requests`; the answers, and the transactions its sessions logged."""
    with world.admin() as admin:
        for role in (RUNTIME, DISPATCHER):
            admin.execute(f"alter role {role} in database {store.dbname} set log_statement = 'all'")
    log = world.cluster.log_path
    offset = log.stat().st_size
    env = {**os.environ, "CRASHPROOF_RUNTIME_DSN": store.dsn(RUNTIME), "CRASHPROOF_DISPATCHER_DSN": store.dsn(DISPATCHER),
           "CRASHPROOF_SCOPE": "tenant-a"}
    env.pop("CRASHPROOF_BARRIERS", None)
    proc = subprocess.Popen(shlex.split(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        answers = [json.loads(proc.stdout.readline())]
        send = [("create", {"spec": {"kind": "after", "after_s": 1, "target": {"command": "probe"}}})] + requests
        for number, (op, args) in enumerate(send):
            if number == 1:
                world.clock.shift(timedelta(seconds=5))
            proc.stdin.write(json.dumps({"type": "request", "id": number, "op": op, "args": args}) + "\n")
            proc.stdin.flush()
            answers.append(json.loads(proc.stdout.readline()))
        proc.stdin.write(json.dumps({"type": "shutdown"}) + "\n")
        proc.stdin.flush()
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
        with world.admin() as admin:
            for role in (RUNTIME, DISPATCHER):
                admin.execute(f"alter role {role} in database {store.dbname} reset log_statement")
    entries: list[list] = []
    with open(log, errors="replace") as f:
        f.seek(offset)
        for text in f:
            found = ENTRY.match(text.rstrip("\n"))
            if found:
                entries.append([int(found.group(1)), found.group(2), found.group(3)])
            elif entries:
                entries[-1][2] += "\n" + text.rstrip("\n")
    return answers, _transactions(entries)


def _pass(transactions: list[dict]) -> dict:
    """The first pass's claim, decision and bridge: the claim that returned a schedule, then the next scoped
    transaction (the decision) and the one that accepted Work (the bridge)."""
    claims = [i for i, t in enumerate(transactions) if any(CLAIM in s for s in t["statements"])]
    assert claims, "no claim was logged"
    first = claims[0]
    scoped = [t for t in transactions[first + 1:] if any("set_local_scope" in s for s in t["statements"])]
    bridge = next(t for t in scoped if any(WORK in s for s in t["statements"]))
    return {"claim": transactions[first], "decision": scoped[0], "bridge": bridge}


def _order(transaction: dict, *needles: str) -> list[int]:
    return [next(i for i, s in enumerate(transaction["statements"]) if needle in s) for needle in needles]


@pytest.mark.world
def test_the_statement_log_shows_each_probed_variant_differ_from_the_reference(world, store):
    process = [("process-due", {"maximum_schedules": 1})]  # no lease_seconds: the implementation's default lease
    reference_answers, reference_log = _statement_log(world, store, f"{shlex.quote(sys.executable)} -m reference.adapter",
                                                      process)
    assert all(a.get("outcome", "ok") == "ok" for a in reference_answers[1:]), reference_answers
    reference = _pass(reference_log)

    def probe(name: str) -> dict:
        from testhost.world.store import new_store
        fresh = new_store(world)
        fresh.ensure_partitions()
        fresh.create_scope("tenant-a")
        try:
            answers, log = _statement_log(world, fresh, BY_NAME[name].command, process)
        finally:
            fresh.drop()
        assert all(a.get("outcome", "ok") == "ok" for a in answers[1:]), (name, answers)
        assert answers[-1]["value"]["materialized"] == 1, (name, answers)
        return _pass(log)

    # one-session-per-part: the reference decides and bridges on one session; the variant on two
    sessions = probe("one-session-per-part")
    assert reference["decision"]["pid"] == reference["bridge"]["pid"]
    assert sessions["decision"]["pid"] != sessions["bridge"]["pid"]
    assert sessions["claim"]["pid"] not in (sessions["decision"]["pid"], sessions["bridge"]["pid"])

    # other-read-order: the fences come after the pending occurrences, the dispatch row first in both
    fences, pending = _order(reference["decision"], FENCES, PENDING)
    assert fences < pending
    reordered = probe("other-read-order")
    fences, pending = _order(reordered["decision"], FENCES, PENDING)
    assert fences > pending
    assert "-- The processor's read of a claimed schedule" in reordered["decision"]["statements"][1]

    # other-lease-and-owner: the claim's owner and its default lease
    owner_param = re.compile(r"\$1 = '([^']*)', \$2 = '([^']*)'")
    reference_owner, reference_lease = owner_param.search(reference["claim"]["parameters"][0]).groups()
    owner, lease = owner_param.search(probe("other-lease-and-owner")["claim"]["parameters"][0]).groups()
    assert reference_lease == "00:00:30" and lease == "00:10:00"
    assert owner.startswith("vériant wörker · ") and owner != reference_owner and len(owner) <= 200
