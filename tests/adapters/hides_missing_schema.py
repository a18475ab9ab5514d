"""An outside implementation that never looks at the schema: `process-due` reports a claim barrier and answers
`ok` with zero counts, so on a store without 0004 it hides the missing migration (a wrong runtime)."""

import json
import sys

send = lambda message: (sys.stdout.write(json.dumps(message) + "\n"), sys.stdout.flush())  # noqa: E731
send({"type": "hello", "protocol": 1, "implementation": "hides-missing-schema", "operations": ["process-due"]})
for line in sys.stdin:
    message = json.loads(line)
    if message.get("type") == "shutdown":
        break
    if message.get("type") != "request":
        continue
    send({"type": "barrier", "name": "schedule-claim-before-commit", "context": {}})
    sys.stdin.readline()  # the host's barrier-reply
    send({"type": "response", "id": message["id"], "outcome": "ok",
          "value": {"claimed": 0, "occurrences": 0, "materialized": 0, "suspended": 0}})
