"""Adapters that break the protocol on purpose, one way each (chosen by the first argument)."""

import json
import sys
import time

mode = sys.argv[1]


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


if mode == "crash-at-start":
    print("broken: giving up at start", file=sys.stderr)
    sys.exit(3)
if mode == "never-hello":
    time.sleep(3600)
if mode == "future-contract":
    send({"type": "hello", "protocol": 1, "contract": 99, "implementation": "broken", "operations": ["process-due"]})
    time.sleep(60)
if mode == "no-process-due":
    send({"type": "hello", "protocol": 1, "implementation": "broken", "operations": ["create"]})
    sys.exit(0)
send({"type": "hello", "protocol": 1, "implementation": f"broken-{mode}", "operations": ["process-due"]})
if mode == "hello-then-exit":
    print("broken: said hello, now exiting with status 3", file=sys.stderr)
    sys.exit(3)
for line in sys.stdin:
    request = json.loads(line)
    if mode == "bad-json":
        sys.stdout.write("this is not json\n")
        sys.stdout.flush()
    elif mode == "hang":
        time.sleep(3600)
    elif mode == "unknown-message":
        send({"type": "gossip", "about": "the weather"})
    elif mode == "wrong-id":
        send({"type": "response", "id": 9999, "outcome": "ok", "value": {}})
