"""Restore drills: every row of a case's store taken in a snapshot with the model as it stands, put back as an
operator restores a backup, and what that did to each instant's Work identity measured for the report."""

from __future__ import annotations

import copy

from testhost.world.store import Snapshot, reset_store


class Snapshots:
    """A case's snapshots by name, and its restores."""

    def __init__(self, case) -> None:  # the case (runner.py CaseRun) this part of it serves
        self.case = case
        self.taken: dict[str, tuple] = {}  # name -> (store snapshot, model)

    def take(self, name: str) -> None:
        """Every row of the store in one snapshot, with the model as it stands, for a later restore."""
        case = self.case
        self.taken[name] = (Snapshot.of(case.store), copy.deepcopy(case.model))
        case.note("snapshot", name=name, rows={table: len(rows) for table, rows in self.taken[name][0].rows.items()})

    def restore(self, name: str) -> None:
        """As an operator restores a backup: the processors stop, the store's rows go back to the snapshot, the
        model with them; the clock goes on. What each instant's Work identity was before is kept for the drill's
        measurement."""
        case = self.case
        snapshot, model = self.taken[name]
        before = case.reads.instant_identities()
        for label, impl in list(case.impls.items()):
            impl.stop()
        case.client.close()
        reset_store(case.store, snapshot)
        case.model = copy.deepcopy(model)
        case.partitioned_month = None
        case.ensure_partitions()
        case.reads.restored_at_step = True
        case.facts.restores.append({"snapshot": name, "before": before})
        for label in list(case.impls):
            case.impls[label] = case.start_implementation(label)
        case.note("restore", name=name, instants_with_work=len(before))

    def measurements(self) -> list[dict]:
        """For each restore: of the instants that had Work before it, how many have Work under another identity
        now, the same identity, or none (the spec accepts a changed identity after a restore; auditors count it)."""
        case = self.case
        if not case.facts.restores:
            return []
        now = case.reads.instant_identities()
        out = []
        for restore in case.facts.restores:
            before = restore["before"]
            same = sum(1 for key, work in before.items() if now.get(key) == work)
            other = sorted(key for key, work in before.items() if key in now and now[key] != work)
            out.append({"snapshot": restore["snapshot"], "instants_with_work_before_restore": len(before),
                        "same_work_identity": same, "another_work_identity": len(other),
                        "without_work_now": len(before) - same - len(other),
                        "reidentified": [{"schedule": k[0], "instant": k[1]} for k in other[:20]]})
        return out
