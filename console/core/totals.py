"""The fleet totals for the header: instances per status, GPUs busy / idle / lost, simulated instances.

Running sums kept by ``FleetTotals``: ``FleetState`` (``console/core/state.py``) notes each instance it
changes, and a read counts again only those, so a paint of a 1000-host fleet costs what changed, not the fleet.
"""

from __future__ import annotations

from typing import Dict, Optional, Set, Tuple

from console.core.instance import InstanceState
from console.core.status import FAILING, STATUSES

BUSY_UTIL = 10  # % from which a GPU counts as busy in the fleet totals


class FleetTotals:
    """Running sums over a fleet's instances, recounted per changed instance."""

    def __init__(self) -> None:
        self._counted: Dict[str, Tuple[str, int, int, int, int]] = {}  # status, gpus, busy, lost, sim
        self._changed: Set[str] = set()  # instances changed since the last read
        self._sums: Dict[str, int] = dict.fromkeys(("gpus", "busy", "lost", "simulated", *STATUSES), 0)

    def note_changed(self, name: str) -> None:
        """``name`` changed: the next read counts it again."""
        self._changed.add(name)

    def read(self, instances: Dict[str, InstanceState]) -> Dict[str, int]:
        """The totals over ``instances``; instances a reload took out of the state (``fleet_watch.apply`` pops
        them) are found by the count of instances counted."""
        counted, sums = self._counted, self._sums
        changed, self._changed = self._changed, set()
        for name in changed:
            self._count(name, instances.get(name))
        if len(counted) != len(instances):
            for name in [n for n in counted if n not in instances]:
                self._count(name, None)
            for name, inst in instances.items():
                if name not in counted:
                    self._count(name, inst)
        out = {"instances": len(instances), **sums}
        out["idle"] = sums["gpus"] - sums["busy"] - sums["lost"]
        out["failing"] = sum(sums[status] for status in FAILING)
        return out

    def _count(self, name: str, inst: Optional[InstanceState]) -> None:
        """Take ``name``'s last counts out of the running sums and, while it is in the state, its new ones in
        (nothing to do when they did not change: the common case, a GPU's figures moving within busy/idle)."""
        counted, sums = self._counted, self._sums
        rec = None if inst is None else (inst.status, *gpu_counts(inst), int(inst.simulated))
        old = counted.get(name)
        if old == rec:
            return
        if old is not None:
            sums[old[0]] -= 1
            sums["gpus"] -= old[1]
            sums["busy"] -= old[2]
            sums["lost"] -= old[3]
            sums["simulated"] -= old[4]
            del counted[name]
        if rec is not None:
            counted[name] = rec
            sums[rec[0]] += 1
            sums["gpus"] += rec[1]
            sums["busy"] += rec[2]
            sums["lost"] += rec[3]
            sums["simulated"] += rec[4]


def gpu_counts(inst: InstanceState) -> Tuple[int, int, int]:
    """``(gpus, busy, lost)`` of one instance (a GPU missing from the last frame counts as lost)."""
    busy = lost = 0
    for gpu in inst.gpus.values():
        if gpu.lost or gpu.missing:
            lost += 1
        elif (gpu.util or 0) >= BUSY_UTIL:
            busy += 1
    return len(inst.gpus), busy, lost
