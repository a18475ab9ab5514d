"""The reference adapter, except that after answering its first `process-due` it reports a claim barrier of its
own, with no request in flight (as a processor on a timer would), and waits for the host's reply. The barrier is
written with the response, in one write, so it reaches the host however the machine schedules this process."""

import json
import os
import sys

from reference.adapter import Adapter


class Unsolicited(Adapter):
    reported = False

    def respond(self, request):
        response = super().respond(request)
        if request.get("op") == "process-due" and not self.reported:
            self.reported = True
            barrier = {"type": "barrier", "name": "schedule-claim-before-commit",
                       "context": {"schedule_id": "on-its-own"}}
            self.stdout.write(json.dumps(response, default=str) + "\n" + json.dumps(barrier) + "\n")
            self.stdout.flush()
            reply = json.loads(self.stdin.readline())
            if reply.get("type") != "barrier-reply":
                raise SystemExit(f"expected a barrier-reply, got {reply!r}")
            return None
        return response

    def send(self, message):
        if message is not None:
            super().send(message)


sys.exit(Unsolicited(sys.stdin, sys.stdout, dict(os.environ)).run())
