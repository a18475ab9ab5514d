"""Hostile inputs against an implementation: each drawn call (scenarios/hostile.py) is sent through the adapter
protocol (or the host's fallback, for an operation the implementation does not offer; the claim function as the
dispatcher), and must be refused, clearly, with every protocol table byte-identical before and after."""

from __future__ import annotations

import json
import re
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

from barriers.protocol import BY_PROBLEM, problem_name

from testhost.judge.rules import CheckResult
from testhost.judge.stage_rules import HOSTILE_CLAIM as CLAIM_RULE, HOSTILE_CLIENT as CLIENT_RULE

# Every table of the schema, each row as its text, ordered by that text: two snapshots compare byte for byte.
TABLES_SQL = ("select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace "
              "where n.nspname = 'appsurface_durable' and c.relkind in ('r', 'p') and not c.relispartition "
              "order by c.relname")
CLAIM_SQL = "select * from appsurface_durable.claim_schedule_dispatch(%s, %s::interval)"
ARGUMENT_WORDS = {"lease_owner": ("lease owner", "lease_owner", "p_lease_owner"),
                  "lease_duration": ("lease duration", "lease_duration", "p_lease_duration")}
# Fixed, so a seed draws the same calls in every run (each run has a store of its own).
BASE_SCHEDULE = "5e1f2c3d-4b5a-4f6e-8d7c-9b0a1f2e3d4c"
BASE_SPEC = {"kind": "every", "every_s": 60, "target": {"command": "hostile-base"}}


# The case the calls run in: its one step is never run (the base schedule is created under BASE_SCHEDULE).
SCENARIO = ('description = "Hostile inputs."\n[[steps]]\nop = "create"\nschedule = "base"\n'
            'spec = { kind = "every", every_s = 60, target = { command = "hostile-base" } }\n')


def snapshot_sql(tables: list[str]) -> str:
    """One statement rendering every row of these tables as text, in a fixed order."""
    return " union all ".join(
        f"select '{t}' as tbl, coalesce(string_agg(r::text, E'\\n' order by r::text), '') as rows "
        f"from appsurface_durable.{t} r" for t in tables)


def snapshot(conn, tables: list[str]) -> dict[str, str]:
    return {row["tbl"]: row["rows"] for row in conn.execute(snapshot_sql(tables)).fetchall()}


def changed(before: dict[str, str], after: dict[str, str]) -> dict[str, dict[str, list[str]]]:
    """Per table, the rows (as text) that appeared and the ones that went: empty when byte-identical."""
    out = {}
    for table in sorted(set(before) | set(after)):
        if before.get(table) == after.get(table):
            continue
        old, new = set((before.get(table) or "").splitlines()), set((after.get(table) or "").splitlines())
        out[table] = {"added": sorted(new - old)[:5], "removed": sorted(old - new)[:5]}
    return out


def _tokens(text: str) -> set[str]:
    return {t.strip(".") for t in re.split(r"[\s,:;()'\"`]+", text or "") if t.strip(".")}


def candidates(name: str) -> set[str]:
    """The names a refusal may give an argument: its dotted path, every dotted suffix, each without `_s`."""
    parts = name.split(".")
    suffixes = {".".join(parts[i:]) for i in range(len(parts))}
    return suffixes | {s[:-2] for s in suffixes if s.endswith("_s")}


def names_field(problem: dict, name: str) -> bool:
    """Whether a validation problem names the argument: a key of `errors` or a word of `detail`, as the
    argument's path, a suffix of it, or a field under it (a definition's fields also relative to `spec`)."""
    errors = problem.get("errors") if isinstance(problem.get("errors"), dict) else {}
    named = set(errors) | _tokens(problem.get("detail", "")) | _tokens(problem.get("title", ""))
    named |= {f"spec.{n}" for n in named}  # a definition's own check may name its fields relative to it
    wanted = candidates(name)
    return any(n in wanted or any(n.startswith(c + ".") for c in wanted) for n in named)


@dataclass
class Answer:
    """What came back: a response's parts, or the claim's rows or error, or what went wrong getting it."""

    outcome: str  # ok, fail, unknown; "crash" (the implementation died or broke the protocol), "harness"
    problem: dict | None = None
    error: dict | None = None
    value: Any = None

    def to_json(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None}


def judge(hostile, answer: Answer, rows_changed: dict) -> list[str]:
    """What is wrong with the answer to a hostile call ([]: refused as it must be)."""
    wrong = []
    if rows_changed:
        wrong.append(f"rows changed in {', '.join(rows_changed)}")
    if answer.outcome == "crash":
        return wrong + [f"the implementation crashed or broke the protocol: {(answer.error or {}).get('message')}"]
    if answer.outcome != "fail":
        return wrong + [f"answered {answer.outcome}, not fail"]
    if hostile.op == "claim":
        error = answer.error or {}
        if not str(error.get("sqlstate", "")).startswith("22"):
            wrong.append(f"the claim's error is SQLSTATE {error.get('sqlstate')}, not class 22 (data exception)")
        message = (error.get("message") or "").lower()
        if not any(word in message for word in ARGUMENT_WORDS[hostile.field]):
            wrong.append(f"the claim's error does not name the {hostile.field.replace('_', ' ')}: {message[:200]!r}")
        return wrong
    if answer.error and (answer.error.get("retriable") or answer.outcome == "unknown"):
        wrong.append("a retriable error: the input will not get better by retrying")
    problem = answer.problem
    if not isinstance(problem, dict):
        return wrong + [f"no problem result (error: {answer.error})"]
    name = problem_name(str(problem.get("type", "")))
    if name not in BY_PROBLEM:
        wrong.append(f"problem type {problem.get('type')!r} is none of PROTOCOL.md's problem types")
    elif name not in hostile.problems:
        wrong.append(f"problem {name!r}, where this input allows {', '.join(hostile.problems)}")
    if not isinstance(problem.get("detail"), str) or not problem["detail"].strip():
        wrong.append("the problem has no detail")
    elif name == "validation" and not names_field(problem, hostile.field):
        wrong.append(f"the validation problem does not name {hostile.field}")
    return wrong


def request_line(hostile) -> str:
    """The exact line the host sends (for the claim: the SQL and its parameters)."""
    if hostile.op == "claim":
        return json.dumps({"sql": CLAIM_SQL, "params": [hostile.args["lease_owner"], hostile.args["lease_duration"]]})
    return json.dumps({"type": "request", "id": 1, "op": hostile.op, "args": hostile.args})


def _short(value: Any, limit: int = 300) -> Any:
    """A value for the report: a long string cut, saying how long it was."""
    if isinstance(value, str) and len(value) > limit:
        return value[:limit] + f"... ({len(value)} characters)"
    if isinstance(value, dict):
        return {k: _short(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_short(v, limit) for v in value]
    return value


# Where a hostile call goes: the implementation (an operation its hello declares), the harness's fallback (the
# reference client, for a client operation it does not declare), or the claim function (called as the dispatcher,
# never through the implementation).
TARGETS = {"implementation": "the implementation", "fallback": "the harness's fallback client",
           "claim": "the claim function"}


def targets_text(to: dict[str, int]) -> str:
    """`to the implementation 0, the harness's fallback client 849, the claim function 150`: every target named,
    so a run whose calls all bypassed the implementation says so."""
    return "to " + ", ".join(f"{label} {to.get(key, 0)}" for key, label in TARGETS.items())


@dataclass
class HostileStats:
    inputs: int = 0
    by_op: dict[str, int] = field(default_factory=dict)
    to: dict[str, int] = field(default_factory=dict)  # calls per target (TARGETS)
    failures: int = 0
    shrinks: int = 0
    seconds: float = 0.0


class HostileRun:
    """One store, one running implementation and one claimable schedule, which every hostile call is sent to."""

    def __init__(self, world, command: str, log_dir: Path, migrations: Path | None = None):
        self.world, self.command, self.log_dir, self.migrations = world, command, log_dir, migrations
        self.case = None
        self.tables: list[str] = []
        self.schedule_id = ""
        self.identity = ""  # the implementation's, as its first hello said (kept after close)

    def start(self) -> None:
        from scenarios.scenario import T0, parse

        from scenarios.matrix import CasePlan
        from testhost.case.runner import SCOPE, CaseRun, store_pool

        self.close()
        scenario = parse("hostile-inputs", SCENARIO)
        case = self.case = CaseRun(self.world, scenario, CasePlan("hostile-inputs"), self.command, self.log_dir,
                                   self.migrations)
        case.store = store_pool(self.world, self.migrations).take()
        with case.owner() as conn:
            conn.execute("select appsurface_durable.create_scope(%s)", (SCOPE,))
            self.tables = [r["relname"] for r in conn.execute(TABLES_SQL).fetchall()]
        self.world.clock.set_time(T0)
        case.ensure_partitions()
        if self.world.proxy is not None:
            self.world.proxy.heal()
        case.impls["A"] = case.start_implementation("A")
        self.identity = self.identity or (case.impls["A"].hello or {}).get("implementation", "")
        self.schedule_id = BASE_SCHEDULE
        response = case.client.op("create", {"schedule_id": self.schedule_id, "spec": BASE_SPEC})
        if response.outcome != "ok":
            from testhost.errors import TestHostError
            raise TestHostError(f"the hostile phase could not create its schedule: {response}")
        # Past its first instant, so a claim that wrongly grants a lease has a row to take (and shows it).
        case.advance(timedelta(seconds=120))

    def target(self, hostile) -> str:
        """Where this call goes (TARGETS)."""
        if hostile.op == "claim":
            return "claim"
        return "implementation" if self.case.impls["A"].supports(hostile.op) else "fallback"

    @property
    def implementation(self) -> str:
        return (self.case.impls["A"].hello or {}).get("implementation", "") if self.case else ""

    def revision(self) -> int:
        with self.case.owner() as conn:
            row = conn.execute("select revision from appsurface_durable.schedule_definitions where schedule_id = %s",
                               (self.schedule_id,)).fetchone()
        return row["revision"] if row else 1

    def snapshot(self) -> dict[str, str]:
        with self.case.owner() as conn:
            return snapshot(conn, self.tables)

    def send(self, hostile) -> tuple[Answer, dict]:
        """The call and the rows it changed; a crash restarts the implementation for the next call."""
        before = self.snapshot()
        answer = self._claim(hostile) if hostile.op == "claim" else self._client(hostile)
        return answer, changed(before, self.snapshot())

    def _claim(self, hostile) -> Answer:
        import psycopg

        try:
            with psycopg.connect(self.case.store.dispatcher_dsn, autocommit=True) as conn:
                rows = conn.execute(CLAIM_SQL, (hostile.args["lease_owner"], hostile.args["lease_duration"])).fetchall()
        except psycopg.Error as exc:
            return Answer("fail", error={"sqlstate": exc.sqlstate, "message": str(exc).splitlines()[0] if str(exc)
                                         else ""})
        return Answer("ok", value=[list(map(str, r)) for r in rows])

    def _client(self, hostile) -> Answer:
        from testhost.impl.implementation import AdapterProtocolError

        case = self.case
        impl = case.impls["A"]
        if impl.supports(hostile.op):
            try:
                response = impl.request(hostile.op, hostile.args)
            except AdapterProtocolError as exc:
                case.impls["A"] = case.start_implementation("A")
                return Answer("crash", error={"message": str(exc)})
            if response.died:
                case.impls["A"] = case.start_implementation("A")
                return Answer("crash", error={"message": "the implementation ended before it answered"})
        else:
            case.fallbacks.add(hostile.op)
            try:
                response = case.client.call(hostile.op, hostile.args, uuid.uuid4())
            except Exception as exc:  # noqa: BLE001 - the fallback is the reference client: its crash is a finding
                case.client.close()
                return Answer("crash", error={"message": f"the fallback (reference client) raised "
                                                         f"{type(exc).__name__}: {str(exc)[:300]}"})
        return Answer(response.outcome, response.problem, response.error, response.value)

    def close(self) -> None:
        if self.case is not None:
            case, self.case = self.case, None
            case.teardown()


class HostileSearch:
    """Hypothesis draws hostile calls, the run sends them; the first wrong answer is shrunk to the smallest."""

    def __init__(self, run: HostileRun, shrink_s: float = 30.0,
                 report: Callable[[HostileStats], None] = lambda stats: None, share: tuple[int, int] | None = None):
        self.run_, self.shrink_s, self.report = run, shrink_s, report
        self.share = share  # (this job, of how many): its part of the sweep; None: no sweep
        self.stats = HostileStats()
        self.failure: dict | None = None
        self.shrink_until: float | None = None
        self.dirty = False  # a wrong answer may have changed the store: the next call gets a fresh one
        self.failed: dict[str, tuple[Answer, dict]] = {}  # request line -> its wrong answer, for replays

    def check(self, hostile, answer: Answer, rows_changed: dict) -> None:
        wrong = judge(hostile, answer, rows_changed)
        if not wrong:
            return
        self.dirty = True
        if self.failure is None:
            self.stats.failures += 1
            self.shrink_until = time.monotonic() + self.shrink_s
        rule = CLAIM_RULE if hostile.op == "claim" else CLIENT_RULE
        self.failure = {"check": "hostile-claim-inputs" if hostile.op == "claim" else "hostile-client-inputs",
                        "rule": rule, "input": hostile.to_json(), "request": request_line(hostile),
                        "answer": answer.to_json(), "changed": rows_changed, "wrong": wrong,
                        "implementation": self.run_.implementation}
        raise AssertionError("; ".join(wrong))

    def _count(self, hostile) -> None:
        """One hostile call sent: counted by operation and by where it goes (before it is sent: a crash restarts
        the implementation, and the call went where the running one sent it)."""
        self.stats.inputs += 1
        self.stats.by_op[hostile.op] = self.stats.by_op.get(hostile.op, 0) + 1
        target = self.run_.target(hostile)
        self.stats.to[target] = self.stats.to.get(target, 0) + 1

    def _ready(self) -> None:
        if self.dirty or self.run_.case is None:
            self.run_.start()
            self.dirty = False

    def sweep(self) -> None:
        """This job's part of every tabled hostile call, each once; each is one argument from a lawful call, so
        a failure needs no shrinking."""
        from scenarios.hostile import sweep

        index, jobs = self.share
        self._ready()
        for hostile in sweep(self.run_.schedule_id, self.run_.revision())[index::jobs]:
            self._count(hostile)
            answer, rows_changed = self.run_.send(hostile)
            self.report(self.stats)
            try:
                self.check(hostile, answer, rows_changed)
            except AssertionError:
                return

    def body(self, data) -> None:
        from scenarios.hostile import hostile_inputs

        revision = self.run_.revision() if self.run_.case is not None and not self.dirty else 1
        hostile = data.draw(hostile_inputs(self.run_.schedule_id or BASE_SCHEDULE, revision), label="hostile")
        key = request_line(hostile)
        if key in self.failed:  # Hypothesis replays a failing call: it fails the same way, without a resend
            self.check(hostile, *self.failed[key])
        if self.shrink_until is not None and time.monotonic() > self.shrink_until:
            return  # the shrinking time is spent: the smallest failure so far stands
        self._ready()
        if self.shrink_until is None:
            self._count(hostile)
        else:
            self.stats.shrinks += 1
        answer, rows_changed = self.run_.send(hostile)
        if judge(hostile, answer, rows_changed):
            self.failed[key] = (answer, rows_changed)
        self.report(self.stats)
        self.check(hostile, answer, rows_changed)

    def run(self, seed: int, max_examples: int) -> None:
        from hypothesis import HealthCheck, Phase, given, seed as hypothesis_seed, settings
        from hypothesis import strategies as st

        search = self
        started = time.monotonic()

        @hypothesis_seed(seed)
        @settings(max_examples=max(1, max_examples), deadline=None, database=None, derandomize=False,
                  report_multiple_bugs=False, suppress_health_check=list(HealthCheck),
                  phases=(Phase.generate, Phase.shrink))
        @given(st.data())
        def hostile(data):
            search.body(data)

        try:
            if self.share is not None:
                self.sweep()
            if self.failure is None and max_examples > 0:
                hostile()
        except AssertionError:
            if self.failure is None:
                raise
        finally:
            self.run_.close()
            self.stats.seconds = round(time.monotonic() - started, 2)

    def result(self) -> CheckResult:
        """The phase as one check (its rule the failing input's; the client rule when nothing failed)."""
        if self.failure is None:
            return CheckResult("hostile-client-inputs", CLIENT_RULE, True, [], self.stats.inputs)
        return CheckResult(self.failure["check"], self.failure["rule"], False, [self.printable()], self.stats.inputs)

    def printable(self) -> dict:
        """The failure with long strings cut (the file under --out keeps them whole)."""
        return _short(self.failure) if self.failure else {}


def replay(path: Path, command: str | None = None) -> int:
    """A written hostile call sent again in a world of its own: 0 when refused as it must be, 1 when not. The
    command is the file's own unless another is given; when it is the file's and runs other code than the code
    the file recorded (another folder, an edit since), a note on standard error says what differs."""
    from scenarios.hostile import Hostile

    from testhost.impl import provenance
    from testhost.impl.reference_command import REFERENCE_COMMAND
    from testhost.world.worlds import World

    written = json.loads(path.read_text())
    command = command or written.get("impl") or REFERENCE_COMMAND
    if written.get("code") and written.get("impl") == command:
        differs = provenance.differences(written["code"], provenance.resolve(command))
        if differs:
            print(f"note: {path} was found with this --impl running other code: {'; '.join(differs)}",
                  file=sys.stderr, flush=True)
    hostile = Hostile(**{k: tuple(v) if k == "problems" else v for k, v in written["input"].items()})
    with World("hostile-replay") as world:
        run = HostileRun(world, command, path.parent / "replay-logs")
        try:
            run.start()
            answer, rows_changed = run.send(hostile)
        finally:
            run.close()
    wrong = judge(hostile, answer, rows_changed)
    print(json.dumps({"input": _short(hostile.to_json()), "answer": _short(answer.to_json()),
                      "changed": rows_changed, "wrong": wrong}, indent=1))
    return 1 if wrong else 0
