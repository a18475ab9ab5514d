"""`certify --migrations DIR` and its schema stage, against real worlds: the reference's own migrations pass,
each planted schema defect fails naming its rule, a bad directory is a one-line error that leaves nothing
behind, and a correct copy certifies end to end through the reference and through a shell-wrapped adapter."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest

from barriers.schema import SCHEMA_RULE
from barriers.schema import READ_COLUMNS
from reports.report import validate
from testhost.runs.schema_stage import check_directory, migrations_digest, run_schema_stage
from testhost.world.processes import pids_with_cwd_or_arg
from testhost.judge.state import TABLES
from testhost.world.store import MigrationFailed

REPO = Path(__file__).resolve().parents[1]
MIGRATIONS = REPO / "reference" / "migrations"
SLICE = ("--scenario", "at-single", "--barrier", "schedule-link-after-commit", "--fault", "kill", "--jobs", "1")


def copy_of_reference(directory: Path) -> Path:
    directory.mkdir()
    for path in MIGRATIONS.glob("*.sql"):
        shutil.copy(path, directory / path.name)
    return directory


def append_migration(directory: Path, name: str, text: str) -> Path:
    """The next numbered migration, whatever the earlier files are called."""
    number = len(list(directory.glob("[0-9][0-9][0-9][0-9]_*.sql"))) + 1
    path = directory / f"{number:04d}_{name}.sql"
    path.write_text(text)
    return path


def failing(case: dict) -> dict[str, list]:
    return {c["name"]: c["evidence"] for c in case["checks"] if not c["ok"]}


# -- pure: what the stage expects stays what the verifier reads ---------------------------------------------

def test_every_table_the_verifier_reads_is_declared_to_the_stage():
    read = {table for sql in TABLES.values() for table in re.findall(r"appsurface_durable\.(\w+)", sql)}
    assert read and read <= set(READ_COLUMNS)


def test_every_row_key_the_checks_read_is_a_declared_column():
    source = "".join((REPO / "testhost" / "judge" / f"{module}.py").read_text() for module in (
        "invariants", "ranges", "fault_checks", "pictures", "expectations", "observations", "pass_windows",
        "clock_samples"))
    keys = set(re.findall(r'\["([a-z_]+)"\]', source)) | set(re.findall(r'\.get\("([a-z_]+)"', source))
    columns = {column for table in READ_COLUMNS.values() for column in table}
    # Keys of the checks' own dictionaries (pictures, expectations, history details), not of table rows.
    own = {"all", "barrier", "cursor", "first", "kind", "last", "lifecycle", "occurrences", "pending", "problem",
           "reason", "rule", "suspension", "type", "works",
           # the answers and fates the runner records, the idle-cursor snapshots, and history detail fields
           "committed", "connection_kept_past_deadline_s", "cursor_instant", "cursors", "deadline_margin_s",
           "deadline_s", "dropped", "error", "faulted", "fenced", "instance", "instants", "op", "outcome",
           "references", "restored", "skipped", "step",
           # the stall's details, the counting windows and the bridge's clock moves the runner records
           "ended_backend", "stall", "takeover_passes", "took_over", "why_not", "after", "answers", "before",
           "during", "faults", "value", "held_from", "moved_at", "shift_s",
           # the requests, lease rows and quiet steps the windows record, and the cancel fault's details
           "cancel", "cancel_after", "cancelled_backend", "claimed", "clean", "leases_after", "leases_before",
           "maximum_schedules", "passes_asked", "processor", "requests", "requeued", "retriable", "server_now",
           # the db-crash's durability comparison and the cancel-pass's count of claims before it
           "crash_durability", "changed", "rows", "cancelled_after_claims",
           # where a cursor was read, whether a pass ran clean, and the generations each step's read saw
           "at", "clean_pass", "generations",
           # each hold the bridge clock offered: after which fault, whether taken, the barriers meanwhile
           "after_fault", "taken", "barriers_meanwhile"}
    assert keys - own and not (keys - own - columns), sorted(keys - own - columns)


def test_every_schema_rule_is_stated_in_the_protocol_page():
    page = (REPO / "barriers" / "PROTOCOL.md").read_text()
    for name, rule in SCHEMA_RULE.items():
        assert f"`{name}`" in page and rule in page


@pytest.mark.parametrize("setup, expected", [
    (lambda d: None, "no such directory"),
    (lambda d: d.mkdir(), "holds no migration"),
    (lambda d: (d.mkdir(), (d / "0001_a.sql").write_text("select 1"), (d / "0003_c.sql").write_text("select 1")),
     "without gaps"),
    (lambda d: (d.mkdir(), (d / "0001_a.sql").write_bytes(b"\xff\xfe")), "0001_a.sql: cannot be read as UTF-8"),
])
def test_a_bad_directory_is_refused_in_one_line(tmp_path, setup, expected):
    directory = tmp_path / "migrations"
    setup(directory)
    with pytest.raises(MigrationFailed) as caught:
        check_directory(directory)
    assert expected in str(caught.value) and "\n" not in str(caught.value)


def test_a_rule_that_examined_nothing_fails():
    from testhost.runs.schema_stage import Findings
    findings = Findings()
    findings.examined("schema-tables", 3)
    checks = {c.name: c for c in findings.checks()}
    assert checks["schema-tables"].ok
    assert not checks["schema-claim-refusals"].ok
    assert checks["schema-claim-refusals"].evidence == ["the rule examined nothing, so it proves nothing"]


@pytest.mark.parametrize("text, held, not_held", [
    ("FOR VALUES FROM ('2031-02-01 00:00:00+00') TO ('2031-03-01 00:00:00+00')", "2031-02-01", "2031-03-01"),
    ("FOR VALUES FROM (MINVALUE) TO ('2031-03-01 00:00:00+00')", "1999-01-01", "2031-03-01"),
    ("DEFAULT", "2031-03-01", None),
])
def test_a_history_partition_bound_holds_its_range(text, held, not_held):
    from datetime import datetime, timezone

    from testhost.runs.schema_stage import _bound, _holds
    instant = lambda day: datetime.fromisoformat(day).replace(tzinfo=timezone.utc)  # noqa: E731
    assert _holds(_bound(text), instant(held))
    assert not_held is None or not _holds(_bound(text), instant(not_held))


# -- the stage against a real world -------------------------------------------------------------------------

def _function_definition(world, name: str) -> str:
    """A function as the reference's migrations define it, from a store built by them."""
    from testhost.world.store import new_store
    store = new_store(world)
    try:
        with psycopg.connect(store.owner_dsn) as conn:
            return conn.execute("select pg_get_functiondef(%s::regproc)", (f"appsurface_durable.{name}",)).fetchone()[0]
    finally:
        store.drop()


def _without_forced_history_rls(world) -> str:
    definition = _function_definition(world, "ensure_schedule_history_partitions")
    planted = re.sub(r"(?im)^.*force row level security.*$", "", definition)
    assert planted != definition
    return planted + ";\n"


def _eleven_minute_claim(world) -> str:
    # The reference's claim computes the lease's end in a helper; a team's may do it anywhere: the stage
    # judges only what the claim accepts.
    definition = _function_definition(world, "lease_expiry")
    planted = definition.replace("interval '10 minutes'", "interval '11 minutes'")
    assert planted != definition
    return planted + ";\n"


DEFECTS = {
    "history-partition-without-forced-rls": (_without_forced_history_rls, {"schema-history-partitions"},
                                             "row level security is not enabled and forced on schedule_history_"),
    "history-partitions-not-made": (
        lambda _: "create or replace function appsurface_durable.ensure_schedule_history_partitions() "
                  "returns setof text language sql as $$ select 'nothing'::text $$;\n",
        {"schema-history-partitions"}, "no schedule_history partition holds"),
    "dispatcher-grant-on-due-time": (
        lambda _: "grant select (due_at_utc) on appsurface_durable.schedule_dispatch_timing "
                  "to appsurface_durable_dispatcher;\n",
        {"schema-grants"}, "extra column grant: appsurface_durable_dispatcher has SELECT on "
                           "schedule_dispatch_timing.due_at_utc"),
    "due-time-in-the-queue": (
        lambda _: "alter table appsurface_durable.schedule_dispatch add column due_at_utc timestamptz;\n",
        {"schema-tables"}, "the dispatch queue holds column due_at_utc"),
    "security-definer-without-search-path": (
        lambda _: "alter function appsurface_durable.scope_for_routing_id(bigint) reset search_path;\n",
        {"schema-security-definer"}, "scope_for_routing_id(p_routing_id bigint) does not pin search_path"),
    "claim-not-security-definer": (
        lambda _: "alter function appsurface_durable.claim_schedule_dispatch(text, interval) security invoker;\n",
        {"schema-security-definer", "schema-claim-refusals"}, "claim_schedule_dispatch must be SECURITY DEFINER"),
    "public-may-claim": (
        lambda _: "grant execute on function appsurface_durable.claim_schedule_dispatch(text, interval) to public;\n",
        {"schema-grants", "schema-security-definer"}, "PUBLIC may execute SECURITY DEFINER "
                                                      "appsurface_durable.claim_schedule_dispatch"),
    "eleven-minute-lease": (_eleven_minute_claim, {"schema-claim-refusals"}, "'probe': 'an eleven-minute lease'"),
}


@pytest.mark.world
def test_the_reference_migrations_pass_every_rule(world, tmp_path):
    case = run_schema_stage(world, copy_of_reference(tmp_path / "migrations"))
    assert case["verdict"] == "pass", failing(case)
    assert [c["name"] for c in case["checks"]] == list(SCHEMA_RULE)
    assert all(c["ok"] and c["rows"] > 0 for c in case["checks"]), case["checks"]


@pytest.mark.world
@pytest.mark.parametrize("defect", DEFECTS)
def test_a_planted_schema_defect_fails_naming_its_rule(world, tmp_path, defect):
    plant, rules, evidence = DEFECTS[defect]
    directory = copy_of_reference(tmp_path / "migrations")
    append_migration(directory, defect.replace("-", "_"), plant(world))
    case = run_schema_stage(world, directory)
    assert case["verdict"] == "fail"
    assert set(failing(case)) == rules, failing(case)
    assert case["reason"] == ", ".join(sorted(rules, key=list(SCHEMA_RULE).index))
    assert all(c["rule"] == SCHEMA_RULE[c["name"]] for c in case["checks"])
    assert any(evidence in str(found) for found in failing(case).values()), failing(case)


# Each catalog mutant of the claim's limits and the local scope, with a finding its failure must show.
SCHEMA_MUTANTS = {
    "claim-cap-on-epoch": "1 mon -30 days 5 min on 15 January",
    "claim-cap-at-whole-seconds": "a lease of ten minutes and one microsecond",
    "claim-admits-zero-end": "a zero lease duration",
    "claim-refuses-ten-minutes": "a lease of exactly ten minutes",
    "owner-blank-by-ascii-only": "a no-break space",
    "owner-format-characters-admitted": "a zero width joiner inside",
    "scope-honoured-at-session-level": "left at session level",
    "scope-bound-to-the-session": "in an earlier, committed transaction on the same connection",
}


@pytest.mark.world
@pytest.mark.parametrize("name", SCHEMA_MUTANTS)
def test_each_schema_mutant_fails_the_stage_naming_its_sentence(world, name):
    from mutants import BY_NAME, migrations_dir
    mutant = BY_NAME[name]
    case = run_schema_stage(world, migrations_dir(mutant))
    found = failing(case)
    assert case["verdict"] == "fail" and len(found) == 1, found
    [(rule_name, evidence)] = found.items()
    assert mutant.rule in SCHEMA_RULE[rule_name] and "schema-stage" in mutant.slice
    assert any(SCHEMA_MUTANTS[name] in str(e) for e in evidence), evidence


@pytest.mark.world
def test_without_clock_control_the_partitions_of_today_are_checked(world, tmp_path):
    from testhost.world.worlds import ExternalWorld
    external = ExternalWorld(world.admin_dsn(), network_optional=True).up()
    try:
        case = run_schema_stage(external, copy_of_reference(tmp_path / "migrations"))
    finally:
        external.down()
    assert case["verdict"] == "pass", failing(case)
    partitions = next(c for c in case["checks"] if c["name"] == "schema-history-partitions")
    assert partitions["rows"] >= 2 + 2  # both months held, and each child's grants and policies examined
    # Unfrozen, the claim probes run at the server's own time (refusals first) and are judged there.
    claims = next(c for c in case["checks"] if c["name"] == "schema-claim-refusals")
    assert claims["rows"] > 80


def _databases(world) -> set[str]:
    with psycopg.connect(world.admin_dsn(), autocommit=True) as conn:
        return {r[0] for r in conn.execute("select datname from pg_database")}


@pytest.mark.world
def test_a_migration_the_server_refuses_names_the_file_and_leaves_no_database(world, tmp_path):
    directory = copy_of_reference(tmp_path / "migrations")
    broken = append_migration(directory, "broken", "create table appsurface_durable.half (id int,);\n")
    before = _databases(world)
    with pytest.raises(MigrationFailed) as caught:
        run_schema_stage(world, directory)
    message = str(caught.value)
    assert str(broken) in message and "syntax error" in message and "\n" not in message
    assert _databases(world) == before


# -- certify --migrations, end to end -----------------------------------------------------------------------

@pytest.fixture
def home():
    root = Path(tempfile.mkdtemp(prefix="crashproof-schema-", dir="/tmp"))
    os.chmod(root, 0o755)
    (root / "tmp").mkdir()
    yield root
    shutil.rmtree(root, ignore_errors=True)


def certify(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "CRASHPROOF_HOME": str(home), "TMPDIR": str(home / "tmp")}
    return subprocess.run([sys.executable, "-m", "testhost.cli", "certify", *args], env=env, capture_output=True,
                          text=True, timeout=300)


WRAPPED = f"sh -c {shlex.quote(f'exec {shlex.quote(sys.executable)} -m reference.adapter')}"


@pytest.mark.world
@pytest.mark.parametrize("impl", [None, WRAPPED], ids=["reference", "shell-wrapped"])
def test_certify_with_a_correct_copy_runs_the_stage_then_the_cases(home, impl):
    migrations = copy_of_reference(home / "migrations")
    report_dir = home / "report"
    result = certify(home, "--migrations", str(migrations), "--report-dir", str(report_dir), *SLICE,
                     *(("--impl", impl) if impl else ()))
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((report_dir / "report.json").read_text())
    stage, *cases = report["cases"]
    assert stage["id"] == "schema-stage" and stage["verdict"] == "pass"
    assert [c["name"] for c in stage["checks"]] == list(SCHEMA_RULE)
    assert [c["id"] for c in cases] == ["at-single", "at-single/schedule-link-after-commit/kill/1"]
    assert all(c["verdict"] == "pass" for c in cases)
    assert report["implementation"]["migrations"] == str(migrations)
    digest = migrations_digest(migrations)
    assert report["implementation"]["migrations_sha256"] == digest
    assert json.loads((report_dir / "certificate.json").read_text())["implementation"]["migrations_sha256"] == digest
    assert validate(report) == []
    assert report["summary"]["passed"] == 3


def test_the_migrations_digest_changes_with_any_migration(tmp_path):
    migrations = copy_of_reference(tmp_path / "migrations")
    before = migrations_digest(migrations)
    assert before == migrations_digest(migrations)
    last = sorted(migrations.glob("*.sql"))[-1]
    last.write_text(last.read_text() + "\n-- changed\n")
    assert migrations_digest(migrations) != before


@pytest.mark.world
@pytest.mark.parametrize("defect, cases_pass", [("dispatcher-grant-on-due-time", True),
                                                 ("claim-not-security-definer", False)])
def test_certify_with_a_schema_defect_fails_the_run_naming_the_rule(home, defect, cases_pass):
    """The cases still run, on the team's schema: a grant the cases cannot see leaves them passing; a claim
    function the dispatcher cannot use fails them (it would not, were they on the reference's schema)."""
    migrations = copy_of_reference(home / "migrations")
    plant, rules, _ = DEFECTS[defect]
    append_migration(migrations, defect.replace("-", "_"), plant(None))
    report_dir = home / "report"
    result = certify(home, "--migrations", str(migrations), "--report-dir", str(report_dir), *SLICE,
                     "--impl", WRAPPED)
    assert result.returncode == 1, result.stdout + result.stderr
    named = ", ".join(sorted(rules, key=list(SCHEMA_RULE).index))
    assert f"fail    schema-stage: {named}" in result.stdout
    for rule in rules:
        assert f"{rule} (rule: {SCHEMA_RULE[rule]})" in result.stdout
    report = json.loads((report_dir / "report.json").read_text())
    stage, *cases = report["cases"]
    assert stage["verdict"] == "fail" and failing(stage).keys() == rules
    assert [c["id"] for c in cases] == ["at-single", "at-single/schedule-link-after-commit/kill/1"] or not cases_pass
    assert cases and all((c["verdict"] == "pass") == cases_pass for c in cases), [c["reason"] for c in cases]


@pytest.mark.world
def test_certify_with_a_migration_that_fails_is_one_line_and_leaves_nothing(home):
    migrations = copy_of_reference(home / "migrations")
    broken = append_migration(migrations, "broken", "select no_such_function();\n")
    report_dir = home / "report"
    result = certify(home, "--migrations", str(migrations), "--report-dir", str(report_dir), *SLICE)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("crashproof: error: migration "), result.stderr
    assert str(broken) in lines[0] and "no_such_function() does not exist" in lines[0]
    # Preflight made sure the folder can be written; nothing of the run is left in it.
    assert not report_dir.exists() or list(report_dir.iterdir()) == []
    assert list((home / "tmp").iterdir()) == []
    assert pids_with_cwd_or_arg(str(home)) == []


def test_certify_with_a_missing_directory_is_one_line(home):
    result = certify(home, "--migrations", str(home / "nowhere"), *SLICE)
    assert result.returncode == 2
    assert result.stderr.strip() == f"crashproof: error: --migrations {home / 'nowhere'}: no such directory"


@pytest.mark.world
def test_fail_fast_stops_at_a_failing_schema_stage_with_a_partial_report(home):
    migrations = copy_of_reference(home / "migrations")
    plant, _, _ = DEFECTS["dispatcher-grant-on-due-time"]  # the cases would pass: only the stage fails
    append_migration(migrations, "dispatcher_grant_on_due_time", plant(None))
    report_dir = home / "report"
    result = certify(home, "--migrations", str(migrations), "--report-dir", str(report_dir), *SLICE, "--fail-fast")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "stopped at the first failed case (schema-stage ended fail)" in result.stdout
    report = json.loads((report_dir / "report.json").read_text())
    assert report["partial"] is True and report["run"]["stopped_by"] == "--fail-fast: schema-stage ended fail"
    assert [(c["id"], c["verdict"]) for c in report["cases"]] == [("schema-stage", "fail"), ("at-single", "not-run")]
