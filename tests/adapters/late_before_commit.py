"""The reference adapter, except that it reports its scoped before-commit barriers only once the transaction has
committed (right before the after-commit one): where it says a transaction is open, none is."""

import os
import sys

import barriers
from reference.adapter import Adapter

LATE = {"schedule-decision-after-commit": "schedule-decision-before-commit",
        "schedule-link-after-commit": "schedule-bridge-before-commit"}
adapter = Adapter(sys.stdin, sys.stdout, dict(os.environ))
report = adapter._barrier


def sink(name, context):
    if name in LATE.values():
        return
    if name in LATE:
        report(LATE[name], context)
    report(name, context)


barriers.enable(sink)
sys.exit(adapter.run())
