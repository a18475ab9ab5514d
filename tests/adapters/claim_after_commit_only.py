"""An outside implementation whose `process-due` reports `schedule-claim-after-commit` and then starts no
transaction: a cancel planned there finds no statement waiting (the fault must then fail the case)."""

import json
import sys

send = lambda message: (sys.stdout.write(json.dumps(message) + "\n"), sys.stdout.flush())  # noqa: E731
send({"type": "hello", "protocol": 1, "implementation": "claim-after-commit-only", "operations": ["process-due"]})
for line in sys.stdin:
    message = json.loads(line)
    if message.get("type") == "shutdown":
        break
    if message.get("type") != "request":
        continue
    send({"type": "barrier", "name": "schedule-claim-after-commit", "context": {}})
    sys.stdin.readline()  # the host's barrier-reply
    send({"type": "response", "id": message["id"], "outcome": "ok", "value": {"claimed": 0}})
