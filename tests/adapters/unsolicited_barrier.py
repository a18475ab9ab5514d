"""The reference adapter, except that after answering its first `process-due` it reports a claim barrier of its
own, with no request in flight (as a processor on a timer would), and waits for the host's reply."""

import os
import sys

from reference.adapter import Adapter


class Unsolicited(Adapter):
    reported = False

    def respond(self, request):
        response = super().respond(request)
        if request.get("op") == "process-due" and not self.reported:
            self.reported = True
            self.send(response)
            self._barrier("schedule-claim-before-commit", {"schedule_id": "on-its-own"})
            return None
        return response

    def send(self, message):
        if message is not None:
            super().send(message)


sys.exit(Unsolicited(sys.stdin, sys.stdout, dict(os.environ)).run())
