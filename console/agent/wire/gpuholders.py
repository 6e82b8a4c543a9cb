"""Which local processes a GPU's entries belong to: the attribution rules the agent and agentless mode share.

NVML (and nvidia-smi) report pids as the driver sees them: the host's PID namespace. A pid is trusted when that
process here holds the device's ``/dev/nvidiaN``; the other entries go to the local processes holding it
(``attribute``): one to one when one entry and one holder are left, else as one group entry (``pid`` null,
``group`` the holders' pids, shown with "≈"), else unattributed (``pid`` null, ``nvml_pid`` kept). Holders that
also hold ``/dev/nvidia-uvm`` (every CUDA process) are preferred (``compute_holders``): NVML users (the agent,
nvidia-smi, nvtop) hold /dev/nvidiaN without it.

What a process holds is a set of minor numbers (``UVM`` for nvidia-uvm); reading it is the agent's
``sample/gpumap.py`` (its /proc) or agentless mode's ``console/agentless/gpu.py`` (``ls -l`` over SSH).
"""

from __future__ import annotations

from typing import Dict, FrozenSet, Iterable, List, Optional, Set, Tuple

from .protocol import GpuProc

DEV_DIR = "/dev"  # where the /dev/nvidia* devices are (agent config gpu.dev_dir; tests point it elsewhere)
UVM = -1  # /dev/nvidia-uvm in a held-device set

Held = Optional[FrozenSet[int]]  # minors held (UVM for nvidia-uvm); None: fds not readable (another user's)


def holds(held: Held, minor: Optional[int]) -> bool:
    """Whether ``held`` includes the device (any /dev/nvidiaN when its minor is unknown)."""
    if not held:
        return False
    if minor is None:
        return any(m >= 0 for m in held)
    return minor in held


def attribute(entries: List[GpuProc], trusted: Set[int], holders: Iterable[int]) -> Tuple[List[GpuProc], bool]:
    """One device's NVML entries as local processes: (entries, whether any needed the holders).

    ``trusted``: entry pids that are local processes holding this device (kept as they are); ``holders``: the
    local pids holding the device. The rest go one to one when one entry and one unmatched holder are left,
    else as one group entry (``pid`` null, ``mem`` their sum or null, ``group``, ``nvml_pids``), else each
    unattributed (``pid`` null, ``nvml_pid``)."""
    out: List[GpuProc] = []
    rest: List[Tuple[int, Optional[int]]] = []
    for e in entries:
        pid = e["pid"]
        if pid is None or pid in trusted:
            out.append(e)
        else:
            rest.append((pid, e["mem"]))
    if not rest:
        return out, False
    taken = {e["pid"] for e in out}
    free = sorted(set(holders) - taken)
    if len(rest) == 1 and len(free) == 1:
        out.append({"pid": free[0], "mem": rest[0][1], "nvml_pid": rest[0][0]})
    elif free:
        mems = [mem for _pid, mem in rest]
        total = None if any(m is None for m in mems) else sum(m for m in mems if m is not None)
        out.append({"pid": None, "mem": total, "group": free, "nvml_pids": sorted(pid for pid, _mem in rest)})
    else:
        out.extend({"pid": None, "mem": mem, "nvml_pid": pid} for pid, mem in rest)
    return out, True


def compute_holders(held_by: Dict[int, FrozenSet[int]], minor: Optional[int]) -> List[int]:
    """The pids holding the device; those that also hold nvidia-uvm (CUDA) when there are any."""
    pids = [pid for pid, held in held_by.items() if holds(held, minor)]
    cuda = [pid for pid in pids if UVM in held_by[pid]]
    return cuda or pids
