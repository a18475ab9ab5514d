"""The reference adapter, except that every pass claims with a ten-minute lease whatever the host asks: a lease the
host's clock move does not expire, so no other processor can take it over."""

import os
import sys

from reference.adapter import Adapter


class LongLease(Adapter):
    def handle(self, op, args):
        return super().handle(op, {**args, "lease_seconds": 600} if op == "process-due" else args)


sys.exit(LongLease(sys.stdin, sys.stdout, dict(os.environ)).run())
