"""Every row of the tables a client command may write, read whole in one statement, and what changed between two
such reads: a refused command must change none, and a crash must lose none that committed."""

from __future__ import annotations

import json

# Every table a client command may write, read whole before and after a step the scenario expects refused, in the one
# statement the bridge-role checks read with too.
from barriers.schema import ROWS_SQL, WRITABLE_TABLES as WRITTEN_BY_COMMANDS


def rows(conn) -> dict[str, set[str]]:
    """Every row of the tables a command may write, each as canonical JSON text, in one statement."""
    found = conn.execute(ROWS_SQL).fetchone()["rows"]
    return {table: {json.dumps(row, sort_keys=True) for row in found[table]} for table in WRITTEN_BY_COMMANDS}


def changed(before: dict[str, set[str]], after: dict[str, set[str]]) -> dict[str, dict[str, list]]:
    """Per table, the rows a step added and the rows it removed (an update is one of each); empty: nothing."""
    out = {}
    for table in WRITTEN_BY_COMMANDS:
        added, removed = after[table] - before[table], before[table] - after[table]
        if added or removed:
            out[table] = {"added": [json.loads(r) for r in sorted(added)],
                          "removed": [json.loads(r) for r in sorted(removed)]}
    return out
