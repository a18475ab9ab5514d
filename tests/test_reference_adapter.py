"""The reference adapter over real pipes: hello, operations, outcomes, barrier hits and replies."""

import json
import os
import subprocess
import sys
from datetime import timedelta

import psycopg

from protocol_helpers import rows


def _start(store, **env):
    environment = {**os.environ, "CRASHPROOF_RUNTIME_DSN": store.dsn("appsurface_durable_runtime", proxied=True),
                   "CRASHPROOF_DISPATCHER_DSN": store.dsn("appsurface_durable_dispatcher", proxied=True),
                   "CRASHPROOF_SCOPE": "tenant-a", **env}
    return subprocess.Popen([sys.executable, "-m", "reference.adapter"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=environment, bufsize=1)


def _send(proc, message):
    proc.stdin.write(json.dumps(message) + "\n")
    proc.stdin.flush()


def _read(proc):
    return json.loads(proc.stdout.readline())


def test_operations_and_outcomes(store, world):
    proc = _start(store)
    try:
        hello = _read(proc)
        assert hello["type"] == "hello" and "process-due" in hello["operations"]
        _send(proc, {"type": "request", "id": 1, "op": "create",
                     "args": {"spec": {"kind": "every", "every_s": 60, "target": {"command": "report"}}}})
        created = _read(proc)
        assert created["outcome"] == "ok" and created["id"] == 1
        _send(proc, {"type": "request", "id": 2, "op": "create", "args": {"spec": {"kind": "cron", "cron": "* * * * *"}}})
        refused = _read(proc)
        assert refused["outcome"] == "fail" and refused["problem"]["status"] == 422
        world.clock.shift(timedelta(seconds=61))
        _send(proc, {"type": "request", "id": 3, "op": "process-due", "args": {"maximum_schedules": 4}})
        processed = _read(proc)
        assert processed["outcome"] == "ok" and processed["value"]["materialized"] == 1
        work_id = str(rows(store, "work_items")[0]["work_id"])
        _send(proc, {"type": "request", "id": 4, "op": "complete-work", "args": {"work_id": work_id, "state": "succeeded"}})
        assert _read(proc)["outcome"] == "ok"
        with psycopg.connect(store.owner_dsn) as conn:  # client, processor and Work store: one runtime session
            assert conn.execute("select usename, count(*) from pg_stat_activity where datname = current_database() "
                                "and usename like 'appsurface_durable_%%' and pid <> pg_backend_pid() "
                                "group by usename order by usename").fetchall() == [
                ("appsurface_durable_dispatcher", 1), ("appsurface_durable_runtime", 1)]
        _send(proc, {"type": "request", "id": 5, "op": "fly", "args": {}})
        assert _read(proc)["error"]["kind"] == "unknown-operation"
        proc.stdin.write("{not json\n")
        proc.stdin.flush()
        assert _read(proc)["error"]["kind"] == "bad-json"
        _send(proc, {"type": "shutdown"})
        assert proc.wait(10) == 0
    finally:
        proc.kill()


def test_barriers_are_reported_and_wait_for_the_reply(store, world):
    proc = _start(store, CRASHPROOF_BARRIERS="stdio")
    try:
        _read(proc)
        _send(proc, {"type": "request", "id": 1, "op": "create",
                     "args": {"spec": {"kind": "every", "every_s": 10, "target": {"command": "report"}}}})
        assert _read(proc)["outcome"] == "ok"
        world.clock.shift(timedelta(seconds=11))
        _send(proc, {"type": "request", "id": 2, "op": "process-due", "args": {}})
        seen = []
        while True:
            message = _read(proc)
            if message["type"] == "response":
                break
            seen.append(message["name"])
            _send(proc, {"type": "barrier-reply", "action": "continue"})
        assert seen == ["schedule-claim-before-commit", "schedule-claim-after-commit", "schedule-decision-before-commit",
                        "schedule-decision-after-commit", "schedule-work-after-acceptance",
                        "schedule-bridge-before-commit", "schedule-link-after-commit"]
        assert message["outcome"] == "ok" and message["value"]["materialized"] == 1
    finally:
        proc.kill()


def test_process_due_cancelled_after_one_schedule_starts_no_further_lease(store, world):
    proc = _start(store)
    try:
        _read(proc)
        for n in (1, 2):
            _send(proc, {"type": "request", "id": n, "op": "create",
                         "args": {"spec": {"kind": "every", "every_s": 60, "target": {"command": "report"}}}})
            assert _read(proc)["outcome"] == "ok"
        world.clock.shift(timedelta(seconds=61))
        _send(proc, {"type": "request", "id": 3, "op": "process-due", "args": {"maximum_schedules": 5, "cancel_after": 1}})
        first = _read(proc)["value"]
        assert first["claimed"] == 1 and first["materialized"] == 1
        assert len(rows(store, "schedule_dispatch", "lease_state = 'leased'")) == 0
        _send(proc, {"type": "request", "id": 4, "op": "process-due", "args": {"maximum_schedules": 5}})
        assert _read(proc)["value"]["claimed"] == 1
    finally:
        proc.kill()
