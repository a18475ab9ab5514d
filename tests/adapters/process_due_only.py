"""The reference adapter, except that its hello declares `process-due` alone: the harness's fallbacks run
every other operation, as for an outside implementation that offers only what PROTOCOL.md makes mandatory."""

import os
import sys

import reference.adapter
from reference.adapter import Adapter

reference.adapter.OPERATIONS = ("process-due",)
sys.exit(Adapter(sys.stdin, sys.stdout, dict(os.environ)).run())
