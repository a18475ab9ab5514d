"""Reports how it was started (one JSON line), echoes stdin lines back, and ends as its arguments say."""

import json
import os
import sys

if __name__ != "__main__":
    raise SystemExit("run me as a program, not as an import")

send = lambda message: (sys.stdout.write(json.dumps(message) + "\n"), sys.stdout.flush())  # noqa: E731
send({"argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0], "probe": os.environ.get("PROBE"),
      "session_leader": os.getsid(0) == os.getpid(), "own_modules": sorted(m for m in sys.modules if m.startswith("tests")),
      "psycopg_loaded": "psycopg" in sys.modules})
for line in sys.stdin:
    if line.strip() == "raise":
        raise RuntimeError("the probe was asked to fail")
    if line.strip().startswith("exit"):
        sys.exit(int(line.split()[1]))
    send({"echo": line.strip()})
