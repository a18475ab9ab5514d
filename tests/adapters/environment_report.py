"""The reference adapter, which first writes its argv and environment to standard error (one JSON line); with
`--no-clock` its hello reports no clock_utc, as an implementation that does not say what its clock reads."""

import json
import os
import sys

from reference.adapter import Adapter

print(json.dumps({"argv": sys.argv, "environment": dict(os.environ)}), file=sys.stderr, flush=True)


class Reporting(Adapter):
    def send(self, message: dict) -> None:
        if "--no-clock" in sys.argv[1:] and message.get("type") == "hello":
            message = {k: v for k, v in message.items() if k != "clock_utc"}
        super().send(message)


sys.exit(Reporting(sys.stdin, sys.stdout, dict(os.environ)).run())
