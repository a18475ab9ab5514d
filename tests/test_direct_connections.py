"""The implementation reaches the server through Toxiproxy exactly in the cases whose fault acts on the network."""

import json
import sys
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict

from scenarios.matrix import CasePlan
from scenarios.scenario import load_catalog
from testhost.faults.catalog import FAULTS
from testhost.case.runner import run_case
from testhost.world.worlds import NETWORK

COMMAND = f"{sys.executable} -m tests.adapters.environment_report"


def _ports_seen(outcome) -> set[str]:
    """The ports of the runtime and dispatcher DSNs every start of instance A was given, in both forms (keyword/value
    and URI: a URI that went elsewhere than its DSN would add a port)."""
    ports = set()
    for line in Path(outcome.logs["A"]).read_text().splitlines():
        if line.startswith('{"argv"'):
            environment = json.loads(line)["environment"]
            ports |= {conninfo_to_dict(environment[name])["port"]
                      for name in ("CRASHPROOF_RUNTIME_DSN", "CRASHPROOF_DISPATCHER_DSN",
                                   "CRASHPROOF_RUNTIME_DSN_URI", "CRASHPROOF_DISPATCHER_DSN_URI")}
    return ports


def test_only_a_network_fault_puts_the_proxy_between_implementation_and_server(fresh_world, tmp_path):
    scenario = {s.name: s for s in load_catalog()}["at-single"]
    direct, proxied = str(fresh_world.cluster.port), str(fresh_world.proxy.port)
    assert {name for name, fault in FAULTS.items() if NETWORK in fault.needs} == {"disconnect", "lost-commit-reply"}
    baseline = run_case(fresh_world, scenario, CasePlan(scenario.name), COMMAND, tmp_path / "free")
    assert baseline.verdict == "pass", baseline.reason
    assert _ports_seen(baseline) == {direct}
    for fault, port in (("kill", direct), ("db-crash", direct), ("disconnect", proxied),
                        ("lost-commit-reply", proxied)):
        plan = CasePlan(scenario.name, "schedule-decision-before-commit", fault, 1)
        outcome = run_case(fresh_world, scenario, plan, COMMAND, tmp_path / fault, baseline.baseline)
        assert outcome.verdict == "pass", (fault, outcome.reason)
        assert any(e["event"] == "fault-injected" for e in outcome.timeline), fault
        assert _ports_seen(outcome) == {port}, fault
