"""The crash matrix as pytest items: `pytest --crashproof [--crashproof-impl CMD]`.

Each scenario is a collector `crashproof/SCENARIO` and each of its cases an item in it:
`crashproof/at-single::schedule-link-after-commit[kill-1]`, the fault-free run `crashproof/at-single::fault-free`
(in a JUnit file: classname `crashproof.at-single`, name `schedule-link-after-commit[kill-1]`), so `-k`, `-x`,
`--lf`, `--junitxml` and pytest-xdist (`-n`) work as usual. Each pytest process (each xdist worker) owns a world
of its own, started at its first case. The faulted cases come from the fault-free census, taken once per run
(under xdist by the first worker, kept in CRASHPROOF_HOME for the others until the run ends), so every worker
collects the same items; `--collect-only` lists the fault-free runs alone and says so, without starting a world.
It runs cases; it writes no report and no certificate, and does not hold an implementation to the barriers the
reference reaches (certify does).

Nothing is written into the folder pytest runs in (typically the implementation's source tree): pytest's cache
(`--lf`) goes under CRASHPROOF_HOME unless a configuration file sets `cache_dir`, and with no path on the command
line the folder's own files are not collected (name paths to run tests of your own beside the matrix).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from scenarios.matrix import CasePlan
from testhost.impl.reference_command import REFERENCE_COMMAND


def pytest_addoption(parser):
    group = parser.getgroup("crashproof", "crash-matrix certification")
    group.addoption("--crashproof", action="store_true", help="collect the crash matrix as test items")
    group.addoption("--crashproof-impl", default=REFERENCE_COMMAND, help="the implementation's command line")
    group.addoption("--crashproof-scenario", help="only scenarios matching this glob")
    group.addoption("--crashproof-barrier", help="only this barrier")
    group.addoption("--crashproof-fault", help="only this fault")
    group.addoption("--crashproof-impl-clock-offset", metavar="DURATION", help="every implementation process's OS "
                    "clock skewed by DURATION (+1d, -36h, 90s), as certify --impl-clock-offset")


def _clock_offset(config):
    """--crashproof-impl-clock-offset as a timedelta (None when not given); a bad duration is a usage error."""
    value = config.getoption("crashproof_impl_clock_offset")
    if value is None:
        return None
    from scenarios.instances import DurationError, parse_duration
    try:
        return parse_duration(value)
    except DurationError as exc:
        raise pytest.UsageError(f"--crashproof-impl-clock-offset: {exc}") from None


@pytest.hookimpl(tryfirst=True)  # before the cache provider's (also tryfirst, registered earlier) reads cache_dir
def pytest_configure(config):
    if config.getoption("crashproof", False):
        _clock_offset(config)  # refused before the census starts a world
        if config.pluginmanager.hasplugin("cacheprovider") and config.getini("cache_dir") == DEFAULT_CACHE_DIR:
            # pytest has no public way to set an ini value from a plugin; the cache of its values is the one place
            # (tests/test_pytest_plugin.py fails when a pytest release moves it: the folder gets a .pytest_cache).
            config._inicache["cache_dir"] = str(cache_dir(config.rootpath))


DEFAULT_CACHE_DIR = ".pytest_cache"


def cache_dir(rootpath: Path) -> Path:
    """pytest's cache (`--lf`) for runs in `rootpath`: under CRASHPROOF_HOME, one per folder, never in it."""
    from testhost.world.workspace import Workspace
    return Workspace().root / "pytest-cache" / hashlib.sha256(str(rootpath).encode()).hexdigest()[:16]


def _matrix_only(config) -> bool:
    """--crashproof with no path on the command line: the matrix alone, none of the folder's own files."""
    return bool(config.getoption("crashproof", False)) and config.args_source != pytest.Config.ArgsSource.ARGS


def pytest_ignore_collect(collection_path, config):
    if _matrix_only(config) and collection_path not in config.invocation_params.dir.parents \
            and collection_path != config.invocation_params.dir:
        return True  # importing the folder's test files would write __pycache__ into it, and run them
    return None


def pytest_report_header(config):
    """Which code the cases run (the same block certify prints): resolved once, where this run starts it."""
    if not config.getoption("crashproof", False):
        return None
    from reports.report import which_code_text

    from testhost.impl.provenance import resolve
    command = config.getoption("crashproof_impl")
    return which_code_text({"command": command, "code": resolve(command)})


def _item_name(plan: CasePlan) -> str:
    """The case's name inside its scenario: `BARRIER[FAULT-HIT]` (`-REPEAT` after a repeat), or `fault-free`."""
    if plan.fault is None:
        return "fault-free"
    return f"{plan.barrier}[{plan.fault}-{plan.hit}{'' if plan.repeat == 1 else f'-{plan.repeat}'}]"


def _census_rows(config) -> list[list]:
    from testhost.runs.options import Options
    from testhost.runs.stages import census
    command, scenario, barrier, fault = (config.getoption(o) for o in (
        "crashproof_impl", "crashproof_scenario", "crashproof_barrier", "crashproof_fault"))
    plans, _ = census(Options(command=command, scenario=scenario, barrier=barrier, fault=fault))
    rows = [[s, None, None, None, 1] for s in _scenarios(scenario)]
    return rows + [[p.scenario, p.barrier, p.fault, p.hit, p.repeat] for p in sorted(plans, key=lambda p: p.id)]


def _census_file(config) -> Path | None:
    """Where the xdist workers of one run share its census (None outside xdist: the census stays in memory)."""
    run = getattr(config, "workerinput", {}).get("testrunuid")
    if not run:
        return None
    from testhost.world.workspace import Workspace
    root = Workspace().root
    root.mkdir(parents=True, exist_ok=True)
    return root / f"pytest-census-{run}.json"


def _planned(config) -> list[CasePlan]:
    """The fault-free runs and the planned faulted cases, from this run's census (taken afresh each run: the
    implementation may have changed since the last one); with --collect-only the fault-free runs alone (the faulted
    cases need the census, which runs the implementation: `crashproof scenarios --matrix` lists them)."""
    if config.getoption("collectonly"):
        return [CasePlan(name) for name in _scenarios(config.getoption("crashproof_scenario"))]
    path = _census_file(config)
    if path is None:
        return [CasePlan(*row) for row in _census_rows(config)]
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the first xdist worker takes the census; the others wait and read it
        if not path.exists():
            path.write_text(json.dumps(_census_rows(config)))
    return [CasePlan(*row) for row in json.loads(path.read_text())]


def _scenarios(pattern: str | None) -> list[str]:
    from scenarios.matrix import select
    from scenarios.scenario import load_catalog
    return [s.name for s in select(load_catalog(), pattern)]


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    """The session collects one ScenarioCollector per scenario (pytest counts, selects and reports their items as
    any others)."""
    report = yield
    config = collector.config
    if isinstance(collector, pytest.Session) and config.getoption("crashproof") and report.passed:
        plans: dict[str, list[CasePlan]] = {}
        for plan in _planned(config):
            plans.setdefault(plan.scenario, []).append(plan)
        report.result.extend(ScenarioCollector.from_parent(collector, name=scenario,
                                                           nodeid=_node_id(f"crashproof/{scenario}"), plans=cases)
                             for scenario, cases in plans.items())
    return report


def pytest_report_collectionfinish(config, start_path, items):
    if config.getoption("crashproof") and config.getoption("collectonly"):
        return ("crashproof: --collect-only lists each scenario's fault-free run alone: its faulted cases are planned "
                "from the barriers that run reaches (the census, which starts a world and runs the implementation); "
                "`crashproof scenarios --matrix` lists them")
    return None


def _node_id(text: str):
    """A node id as pytest compares it: `crashproof/SCENARIO` for a scenario, `…::BARRIER[FAULT-HIT]` for a case
    (the params kept apart from the name, as --lf parses them back)."""
    try:
        from _pytest.nodeid import NodeId  # pytest 9.2+: structured ids, compared part by part
    except ImportError:
        return text
    return NodeId.parse(text)


class ScenarioCollector(pytest.Collector):
    """One scenario: its fault-free run, then its faulted cases in id order."""

    def __init__(self, *, plans: list[CasePlan], **kwargs):
        super().__init__(**kwargs)
        self.plans = plans

    def collect(self):
        for plan in self.plans:
            name = _item_name(plan)
            yield CaseItem.from_parent(self, name=name, nodeid=_node_id(f"{self.nodeid}::{name}"), plan=plan)

    def reportinfo(self):
        return Path("crashproof"), None, self.name


class CaseFailed(Exception):
    """A case's checks failed: the message lists each failed check, its rule and its first evidence rows."""


class CaseItem(pytest.Item):
    def __init__(self, *, plan: CasePlan, **kwargs):
        super().__init__(**kwargs)
        self.plan = plan

    def runtest(self):
        outcome = _Session.get(self.config).run(self.plan)
        if outcome.verdict == "not-run":
            pytest.skip(outcome.reason)
        if outcome.verdict == "error":
            raise RuntimeError(f"harness error: {outcome.reason}")
        if outcome.verdict != "pass":
            lines = [f"{self.plan.id}: {outcome.reason}"]
            for check in outcome.checks:
                data = check.to_json()
                if not data["ok"]:
                    lines.append(f"  {data['name']} (rule: {data['rule']})")
                    lines += [f"    {json.dumps(row, default=str)[:400]}" for row in data["evidence"][:5]]
            raise CaseFailed("\n".join(lines))

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, CaseFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return Path("crashproof") / self.plan.scenario, None, self.plan.id


class _Session:
    """This process's world and the fault-free baselines its faulted cases are judged against."""

    key = pytest.StashKey["_Session"]()

    def __init__(self, config):
        self.config = config
        self.world = None
        self.baselines: dict[str, dict] = {}
        from testhost.world.workspace import Workspace
        root = Workspace().root
        root.mkdir(parents=True, exist_ok=True)
        self.log_dir = Path(tempfile.mkdtemp(prefix="pytest-logs-", dir=root))  # removed at session finish
        from scenarios.scenario import load_catalog
        self.scenarios = {s.name: s for s in load_catalog()}

    @classmethod
    def get(cls, config) -> "_Session":
        if cls.key not in config.stash:
            config.stash[cls.key] = cls(config)
        return config.stash[cls.key]

    def run(self, plan: CasePlan):
        from testhost.case.runner import CASE_SEED, run_case
        from testhost.world.worlds import World
        if self.world is None:
            worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
            self.world = World(f"pytest-{worker}", network_optional=True, seed=CASE_SEED).up()
        command = self.config.getoption("crashproof_impl")
        if plan.fault is not None and plan.scenario not in self.baselines:
            self.run(CasePlan(plan.scenario))
        outcome = run_case(self.world, self.scenarios[plan.scenario], plan, command, self.log_dir,
                           self.baselines.get(plan.scenario), clock_offset=_clock_offset(self.config))
        if plan.fault is None and outcome.baseline is not None:
            self.baselines[plan.scenario] = outcome.baseline
        return outcome


def pytest_sessionfinish(session, exitstatus):
    # Not unconfigure: an xdist worker ends without it.
    config = session.config
    own = config.stash.get(_Session.key, None)
    if own is not None and own.world is not None:
        own.world.down()
        own.world = None
    if own is not None:
        if session.testsfailed:  # the failed cases' logs are what a reader goes to next
            line = f"crashproof: the cases' logs are kept in {own.log_dir}"
            reporter = config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(line)
            else:
                print(line, flush=True)
        else:
            shutil.rmtree(own.log_dir, ignore_errors=True)
    path = _census_file(config) if config.getoption("crashproof") else None
    if path is not None:  # every worker collected before any test ran, so none still needs it
        path.unlink(missing_ok=True)
        path.with_suffix(".lock").unlink(missing_ok=True)
