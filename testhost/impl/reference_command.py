"""The harness's own reference implementation as a command line, and where its package lives."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

REFERENCE_COMMAND = f"{shlex.quote(sys.executable)} -m reference.adapter"
# The folder holding the harness's own `reference` package, beside `testhost`: the reference's census beside another
# --impl starts REFERENCE_COMMAND there, so it runs that package whatever the run's working directory or
# PYTHONPATH hold (`python -m` looks in the working directory first).
REFERENCE_ROOT = str(Path(__file__).resolve().parents[2])
