"""The implementation's own OS clock: [instances.X] tables, --impl-clock-offset, and the evidence that a skew took
effect (PROTOCOL.md, "Your own clock"). The real-world tests run the reference under libfaketime."""

import json
import os
import shlex
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from scenarios.instances import DurationError, format_offset, parse_duration
from scenarios.matrix import CasePlan
from scenarios.scenario import ScenarioError, load_catalog, parse
from testhost.impl import skew
from testhost.runs.certify import certify
from testhost.runs.options import Options
from testhost.world.components import find_libfaketime
from testhost.case.runner import REFERENCE_COMMAND, run_case

ADAPTERS = Path(__file__).resolve().parent / "adapters"
STEPS = '[[steps]]\nop = "drain"\n'
DAY = timedelta(days=1)


# -- durations and instance tables (pure) ----------------------------------------------------------------------

@pytest.mark.parametrize("text, seconds", [("+1d", 86400), ("-36h", -129600), ("90s", 90), ("-1d2h", -93600),
                                           ("+1d2h3m4s", 93784), ("5m", 300)])
def test_durations_take_days_hours_minutes_and_seconds_with_a_sign(text, seconds):
    assert parse_duration(text).total_seconds() == seconds
    assert parse_duration(format_offset(parse_duration(text))) == parse_duration(text)


@pytest.mark.parametrize("text", ["1x", "+", "", "1.5d", "d", "+1h1d", "0s", "-0d", "1 d", "+3651d", "+90"])
def test_bad_durations_are_refused(text):
    with pytest.raises(DurationError):
        parse_duration(text)


def _refused(text: str, *fragments: str) -> str:
    with pytest.raises(ScenarioError) as caught:
        parse("x", text, "/cat/x.toml")
    message = str(caught.value)
    assert "\n" not in message and message.startswith("/cat/x.toml"), message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_bad_instance_tables_are_one_line_naming_file_line_and_field():
    _refused('[instances.C]\nclock_offset = "+1d"\n' + STEPS, "(line 1)", "instances.C", "'C'", "A, B, takeover")
    _refused('description = "d"\n[instances.B]\nclock_offset = "1x"\n' + STEPS, "(line 2)",
             "instances.B.clock_offset", "'1x' is not a duration")
    _refused('[instances.B]\nclock_offset = 5\n' + STEPS, "instances.B.clock_offset", "must be a string, not int")
    _refused('[instances.A]\nenvironment = { KEY = 1 }\n' + STEPS, "instances.A.environment.KEY",
             "must be a string, not int")
    _refused('[instances.A]\nenvironment = { LD_PRELOAD = "x" }\n' + STEPS, "environment.LD_PRELOAD",
             "the harness's to set")
    _refused('[instances.A]\nspeed = 2\n' + STEPS, "instances.A: takes no speed")
    _refused('[instances.takeover]\ncommand = ""\n' + STEPS, "instances.takeover.command: is empty")
    _refused('instances = 3\n' + STEPS, "instances has the wrong type (int; it takes table)")


def test_an_instance_command_is_relative_to_the_scenario_file_and_a_bare_name_stays_for_path():
    scenario = parse("x", '[instances.B]\ncommand = "./bin/adapter --old \'a b\'"\nenvironment = { MODE = "old" }\n'
                     '[instances.A]\ncommand = "my-adapter"\nclock_offset = "-1d2h"\n' + STEPS, "/cat/x.toml")
    assert shlex.split(scenario.instances["B"].command) == ["/cat/bin/adapter", "--old", "a b"]
    assert scenario.instances["B"].environment == {"MODE": "old"}
    assert scenario.instances["A"].command == "my-adapter"
    assert scenario.instances["A"].clock_offset == -timedelta(days=1, hours=2)


def test_the_built_in_catalog_skews_one_instance_in_a_race_behind_and_ahead_and_an_every_pass():
    skewed = {s.name: {label: i.clock_offset for label, i in s.instances.items()} for s in load_catalog()
              if s.instances}
    assert skewed["race-skewed-clocks"] == {"A": DAY, "B": -DAY}
    assert skewed["every-skewed-ahead"] == {"A": DAY, "takeover": -DAY}


# -- the verdict on a skew (pure: the hello and the host's clock) ---------------------------------------------

def _verify(offset: timedelta, clock: datetime | None, pid: int | None = None) -> dict:
    before = datetime.now(timezone.utc)
    after = before + timedelta(seconds=2)
    hello = {} if clock is None else {"clock_utc": clock.isoformat().replace("+00:00", "Z")}
    return skew.verify(offset, hello, before, after, pid, Path("/usr/lib/libfaketime.so.1"))


def test_a_reported_clock_decides_in_effect_not_in_effect_or_too_small_to_tell():
    now = datetime.now(timezone.utc) + timedelta(seconds=1)
    assert _verify(DAY, now + DAY)["in_effect"] == skew.IN_EFFECT
    assert _verify(-DAY, now - DAY)["in_effect"] == skew.IN_EFFECT
    unskewed = _verify(DAY, now)
    assert unskewed["in_effect"] == skew.NOT_IN_EFFECT and "not skewed" in unskewed["why"]
    assert _verify(DAY, now + timedelta(hours=5))["in_effect"] == skew.NOT_IN_EFFECT  # skewed by another amount
    assert _verify(timedelta(seconds=1), now)["in_effect"] == skew.UNVERIFIED


def test_without_a_reported_clock_a_process_that_does_not_map_libfaketime_is_not_in_effect():
    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        record = _verify(DAY, None, child.pid)
    finally:
        child.kill()
        child.wait()
    assert record["in_effect"] == skew.NOT_IN_EFFECT
    assert record["processes"] and not record["processes"][0]["maps_libfaketime"]


def test_an_unreadable_reported_clock_is_said_and_judged_from_proc():
    before = datetime.now(timezone.utc)
    record = skew.verify(DAY, {"clock_utc": "tomorrow"}, before, before, None, Path("/x/libfaketime.so.1"))
    assert record["clock_utc_unreadable"] == "tomorrow" and record["in_effect"] == skew.UNVERIFIED


def test_the_worst_start_of_an_instance_is_what_its_case_reports():
    good, bad = {"in_effect": skew.IN_EFFECT}, {"in_effect": skew.NOT_IN_EFFECT}
    assert skew.worst(skew.worst(None, good), bad) == {**bad, "starts": 2}
    assert skew.worst(skew.worst(None, bad), good)["in_effect"] == skew.NOT_IN_EFFECT


def test_a_skewed_python_process_reads_the_skewed_wall_clock_and_can_still_sleep_and_wait():
    """libfaketime 0.9.10 alone fails Python's time.sleep (EINVAL) under FAKETIME_DONT_FAKE_MONOTONIC; the sleep
    fix preloaded before it passes monotonic sleeps to the kernel, and a lock's timed wait stays short."""
    assert skew.sleep_fix() is not None, "no C compiler: the sleep fix cannot be built here"
    env = {**os.environ, **skew.environment(find_libfaketime(), DAY, os.environ)}
    probe = ("import datetime, threading, time\n"
             "t = time.monotonic(); time.sleep(0.2); slept = time.monotonic() - t\n"
             "lock = threading.Lock(); lock.acquire(); t = time.monotonic(); lock.acquire(timeout=0.2)\n"
             "print(datetime.datetime.now(datetime.timezone.utc).timestamp() - time.time(), slept, "
             "time.monotonic() - t)\n")
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    _, slept, waited = map(float, done.stdout.split())
    assert 0.2 <= slept < 2 and 0.2 <= waited < 2
    read = datetime.fromisoformat(subprocess.run(
        [sys.executable, "-c", "import datetime; print(datetime.datetime.now(datetime.timezone.utc).isoformat())"],
        env=env, capture_output=True, text=True, timeout=30).stdout.strip())
    assert abs((read - datetime.now(timezone.utc) - DAY).total_seconds()) < 30
    without = {**env, "LD_PRELOAD": str(find_libfaketime())}
    broken = subprocess.run([sys.executable, "-c", "import time; time.sleep(0.01)"], env=without,
                            capture_output=True, text=True, timeout=30)
    assert broken.returncode != 0 and "Invalid argument" in broken.stderr  # what the fix is for


# -- real worlds ----------------------------------------------------------------------------------------------

def test_the_reference_racing_a_day_ahead_and_a_day_behind_reports_the_skewed_clocks_and_passes(world, tmp_path):
    scenario = {s.name: s for s in load_catalog()}["race-skewed-clocks"]
    outcome = run_case(world, scenario, CasePlan(scenario.name), REFERENCE_COMMAND, tmp_path)
    assert outcome.verdict == "pass", outcome.reason
    for label, offset in (("A", DAY), ("B", -DAY)):
        record = outcome.clock_skew[label]
        assert record["in_effect"] == skew.IN_EFFECT and record["offset"] == format_offset(offset)
        reported = datetime.fromisoformat(record["clock_utc"].replace("Z", "+00:00"))
        window = [datetime.fromisoformat(t.replace("Z", "+00:00")) for t in record["host_window_utc"]]
        assert window[0] + offset <= reported <= window[1] + offset
    # forked, each from a fork server started under libfaketime with its own offset
    starts = {e["instance"]: e for e in outcome.timeline if e["event"] == "start"}
    assert starts["A"]["launcher"] == starts["B"]["launcher"] == "fork-server"


def test_an_instance_command_and_environment_reach_that_process_only(world, tmp_path):
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    launcher = catalog / "env-adapter.sh"
    launcher.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} {ADAPTERS / 'environment_report.py'} \"$@\"\n")
    launcher.chmod(0o755)
    race = (Path(__file__).resolve().parent.parent / "scenarios" / "catalog" / "race-skewed-clocks.toml").read_text()
    own = race.replace('[instances.A]\nclock_offset = "+1d"\n', "").replace(
        '[instances.B]\nclock_offset = "-1d"\n',
        '[instances.B]\nclock_offset = "-1d"\ncommand = "./env-adapter.sh --no-clock"\n'
        'environment = { PROBE_VALUE = "b-only" }\n')
    assert own.count("[instances.") == 1
    (catalog / "own.toml").write_text(own)
    scenario = load_catalog([catalog])[0]
    outcome = run_case(world, scenario, CasePlan(scenario.name), REFERENCE_COMMAND, tmp_path / "logs")
    assert outcome.verdict == "pass", outcome.reason
    said = json.loads(Path(outcome.logs["B"]).read_text().splitlines()[0])
    assert said["argv"][1:] == ["--no-clock"]
    assert said["environment"]["PROBE_VALUE"] == "b-only"
    assert str(find_libfaketime()) in said["environment"]["LD_PRELOAD"]
    assert said["environment"]["FAKETIME"] == "-86400"
    assert "PROBE_VALUE" not in Path(outcome.logs.get("A", os.devnull)).read_text()
    assert "A" not in outcome.clock_skew  # A runs --impl with the host's clock, forked as usual
    starts = {e["instance"]: e for e in outcome.timeline if e["event"] == "start"}
    assert starts["A"]["launcher"] == "fork-server" and "command" not in starts["A"]
    assert starts["B"]["launcher"] == "spawn" and starts["B"]["command"].endswith("env-adapter.sh --no-clock")
    # no clock_utc in its hello: the host read /proc, where every process preloads and maps libfaketime
    record = outcome.clock_skew["B"]
    assert record["in_effect"] == skew.UNVERIFIED and "no clock_utc" in record["why"]
    assert record["processes"] and all(p["maps_libfaketime"] and p["preloaded"] for p in record["processes"])


def test_a_forked_skewed_start_is_preloaded_from_its_own_server_and_proc_shows_it(world, tmp_path):
    """A `python -m MODULE` start with a skewed clock forks from a fork server started under libfaketime: without
    clock_utc in the hello, the child's /proc (inherited from that server) shows the preload, mapped."""
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    command = f"{sys.executable} -m tests.adapters.environment_report --no-clock"
    (catalog / "own.toml").write_text(f'[instances.A]\nclock_offset = "+2h"\ncommand = "{command}"\n' + STEPS)
    scenario = load_catalog([catalog])[0]
    outcome = run_case(world, scenario, CasePlan(scenario.name), REFERENCE_COMMAND, tmp_path / "logs")
    assert outcome.verdict == "pass", outcome.reason
    start = next(e for e in outcome.timeline if e["event"] == "start")
    assert start["launcher"] == "fork-server" and start["command"] == command
    record = outcome.clock_skew["A"]
    assert record["in_effect"] == skew.UNVERIFIED and record["offset"] == "+2h"
    assert [p["preloaded"] and p["maps_libfaketime"] and p["faketime"] == "+7200" for p in record["processes"]] == [True]
    said = json.loads(Path(outcome.logs["A"]).read_text().splitlines()[0])
    assert said["environment"]["FAKETIME"] == "+7200"


def test_impl_clock_offset_skews_every_process_and_the_certificate_states_it(tmp_path):
    code, report = certify(Options(cases=["at-single/schedule-claim-after-commit/pause/1"],
                                   scenario="at-single", jobs=1, report_dir=tmp_path,
                                   impl_clock_offset=timedelta(hours=-36), progress=lambda line: None))
    assert code == 0, [(c["id"], c["reason"]) for c in report["cases"] if c["verdict"] != "pass"]
    faulted = next(c for c in report["cases"] if c["fault"] == "pause")
    assert {"A", "takeover"} <= set(faulted["clock_skew"])
    assert all(r["offset"] == "-1d12h" and r["in_effect"] == skew.IN_EFFECT for r in faulted["clock_skew"].values())
    certificate = json.loads((tmp_path / "certificate.json").read_text())
    assert certificate["implementation"]["clock_offset"] == "-1d12h"
    assert certificate["clock_skew"]["cases"] == 2 and certificate["clock_skew"]["in_effect"] == 2
    assert certificate["clock_skew"]["not_in_effect_cases"] == []
    assert "-1d12h" in (tmp_path / "report.md").read_text()
    assert "OS clock skew" in (tmp_path / "report.html").read_text()


def test_a_bad_impl_clock_offset_exits_2_with_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-m", "testhost.cli", "certify", "--impl-clock-offset", "tomorrow",
                           "--report-dir", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert done.stderr.startswith("crashproof: error: --impl-clock-offset: 'tomorrow' is not a duration")
    assert not (tmp_path / "report.json").exists()


def test_a_bad_instance_table_in_a_catalog_exits_2_naming_the_file(tmp_path):
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    (catalog / "bad.toml").write_text('[instances.B]\nenvironment = { N = 3 }\n' + STEPS)
    done = subprocess.run([sys.executable, "-m", "testhost.cli", "certify", "--catalog", str(catalog),
                           "--report-dir", str(tmp_path / "r")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0
    assert f"{catalog / 'bad.toml'} (line 1): instances.B.environment.N: must be a string" in done.stderr


def _part(directory: Path, cases: list[dict], offset: str | None = None):
    from reports.report import Loaded, build, clock_skew
    report = build(suite_version="s", implementation={"command": "c", "identity": "i", "clock_offset": offset,
                                                      "clock_skew": clock_skew(cases)},
                   environment={}, run={"started_at": "2026-12-01T00:00:00+00:00", "duration_s": 1,
                                        "selection": {}}, cases=cases)
    return Loaded(directory, report, json.dumps(report).encode())


def _case(case_id: str, **skews: str) -> dict:
    return {"id": case_id, "scenario": case_id, "barrier": None, "fault": None, "hit": None, "verdict": "pass",
            "checks": [], "timeline": [], "duration_s": 0.1,
            "clock_skew": {label: {"offset": "+1d", "in_effect": v} for label, v in skews.items()}}


def test_merge_recounts_the_skew_and_refuses_parts_run_with_other_offsets(tmp_path):
    from reports import ReportError
    from reports.compare import merge
    first = _part(tmp_path / "a", [_case("x", A=skew.IN_EFFECT, B=skew.NOT_IN_EFFECT), _case("y")])
    second = _part(tmp_path / "b", [_case("z", A=skew.UNVERIFIED)])
    merged = merge([first, second])["implementation"]["clock_skew"]
    assert merged["cases"] == 2 and merged["in_effect"] == 0
    assert merged["not_in_effect_cases"] == ["x"] and merged["unverified_cases"] == ["z"]
    assert "not in effect in 1" in merged["note"]
    from reports.certificate import statement
    assert statement(second)["clock_skew"]["unverified_cases"] == ["z"]
    assert "clock_skew" not in statement(_part(tmp_path / "d", [_case("y")]))  # reads as before the skew existed
    with pytest.raises(ReportError, match="clock offsets"):
        merge([first, _part(tmp_path / "c", [_case("w")], offset="+2h")])


def test_an_instance_command_that_cannot_start_is_refused_before_any_world(tmp_path):
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    (catalog / "own.toml").write_text('[instances.B]\ncommand = "./missing-adapter --v1"\n' + STEPS)
    done = subprocess.run([sys.executable, "-m", "testhost.cli", "certify", "--catalog", str(catalog),
                           "--report-dir", str(tmp_path / "r")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
    assert (f"{catalog / 'own.toml'}: instances.B.command: program {catalog / 'missing-adapter'} does not exist"
            in done.stderr)
