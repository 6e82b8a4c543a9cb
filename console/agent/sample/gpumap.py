"""Which local process holds a GPU: NVML's pids checked against this ``/proc``, or found by /dev/nvidiaN fds.

NVML reports pids as the driver sees them: the host's PID namespace. An agent in a container (its own PID
namespace: Vast.ai and the like) sees other numbers, so a host pid matches nothing here, or worse an unrelated
process with the same number. So an NVML pid is trusted only when that pid in this ``/proc`` has
``/dev/nvidiaN`` open (N: the device's ``nvmlDeviceGetMinorNumber``). A device's other entries go to the local
processes holding its ``/dev/nvidiaN``, by the rules agentless mode shares (``wire/gpuholders.py``: one to one,
a "≈" group, or unattributed; CUDA holders preferred). This module reads what each process holds from /proc.

Cost: an NVML pid's fds are read when it is first listed and again every ``RECHECK`` s. The holders are looked
for only while some entry does not check out: every candidate's fds (kernel threads and zombies skipped) when
NVML's entries change (a GPU process came or went), and new pids' every ``RESCAN`` s; between those a sample
only checks that the holders found are still there.
"""

from __future__ import annotations

import errno
import os
import time
from typing import Dict, FrozenSet, List, Optional, Set, Tuple

from ..wire.frames import PF_KTHREAD, parse_stat
from ..wire.gpuholders import DEV_DIR, UVM, Held, attribute, compute_holders, holds
from ..wire.protocol import GpuProc

PROC = "/proc"
RECHECK = 30.0  # seconds before an NVML pid's fds are read again
RESCAN = 60.0  # seconds between full holder scans while some entry is unexplained


def in_pid_namespace(proc: str = PROC) -> bool:
    """Whether ``proc`` shows a PID namespace other than the root one: the root one always has kthreadd as
    pid 2 (a kernel thread); a container's (or ``unshare --pid --mount-proc``'s) does not."""
    if not os.path.isdir(proc + "/self"):
        return False
    try:
        with open(proc + "/2/stat", "rb") as f:
            data = f.read(1024)
    except OSError:
        return True
    st = parse_stat(data, 2)
    return st is None or not (st[3] & PF_KTHREAD)


def held_devices(pid: int, prefix: str, proc: str = PROC) -> Held:
    """The /dev/nvidia minors (and ``UVM``) process ``pid`` has open; None when its fds are not readable.

    ``prefix`` is the device directory plus "/nvidia". A process that is gone holds nothing."""
    fd_dir = "%s/%d/fd" % (proc, pid)
    try:
        names = os.listdir(fd_dir)
    except OSError as exc:
        return None if exc.errno in (errno.EACCES, errno.EPERM) else frozenset()
    out: Set[int] = set()
    cut = len(prefix)
    for name in names:
        try:
            target = os.readlink(fd_dir + "/" + name)
        except OSError:
            continue
        if target.startswith(prefix):
            rest = target[cut:]
            if rest.isdigit():
                out.add(int(rest))
            elif rest == "-uvm":
                out.add(UVM)
    return frozenset(out)


class PidMapper:
    """Maps each device's NVML entries onto this ``/proc`` (see the module doc); keeps its caches between samples.

    ``trust_unverified``: entries that do not check out keep their pid (the simulator's processes are local by
    construction and hold no device)."""

    def __init__(self, dev_dir: Optional[str] = None, proc: str = PROC, trust_unverified: bool = False) -> None:
        self.proc = proc
        self.prefix = (dev_dir or DEV_DIR).rstrip("/") + "/nvidia"
        self.pid_ns = in_pid_namespace(proc)
        self.trust_unverified = trust_unverified
        self.used_fds = False  # some entry was attributed through the holders (sticky: the frame's ``mapping``)
        self._own = os.getpid()
        self._checked: Dict[int, Tuple[float, Held]] = {}  # NVML pid -> (when read, what it holds)
        self._held: Dict[int, FrozenSet[int]] = {}  # local pid -> what it holds (candidates only)
        self._skip: Set[int] = set()  # kernel threads, zombies, unreadable: not candidates
        self._holding: Dict[int, FrozenSet[int]] = {}  # the last scan's holders
        self._entries: FrozenSet[Tuple[int, int]] = frozenset()  # NVML's entries at the last holder scan
        self._next_rescan = 0.0
        self.scans = 0  # fd reads of candidates (tests and benchmarks)

    @property
    def mapping(self) -> str:
        """``fds`` once some entry was attributed through /dev/nvidia holders, else ``pid``."""
        return "fds" if self.used_fds else "pid"

    def _check(self, pid: int, now: float) -> Held:
        hit = self._checked.get(pid)
        if hit is not None and now - hit[0] < RECHECK:
            return hit[1]
        held = held_devices(pid, self.prefix, self.proc)
        self._checked[pid] = (now, held)
        return held

    def map(self, devices: List[Tuple[Optional[int], List[GpuProc]]]) -> List[List[GpuProc]]:
        """``[(minor, NVML entries)]`` per device -> the entries per device as local processes."""
        now = time.monotonic()
        listed: Set[int] = set()
        trusted: List[Set[int]] = []
        unexplained: Set[Tuple[int, int]] = set()
        seen: Set[Tuple[int, int]] = set()  # every (device, NVML pid): a change means a GPU process came or went
        for index, (minor, entries) in enumerate(devices):
            ok: Set[int] = set()
            for e in entries:
                pid = e["pid"]
                if pid is None:
                    continue
                listed.add(pid)
                seen.add((index, pid))
                if pid == self._own:
                    continue
                held = self._check(pid, now)
                # fds unreadable (another user's process): its pid is ours only outside a PID namespace
                if holds(held, minor) or (held is None and not self.pid_ns) or self.trust_unverified:
                    ok.add(pid)
                else:
                    unexplained.add((index, pid))
            trusted.append(ok)
        for pid in [p for p in self._checked if p not in listed]:
            del self._checked[pid]
        if not unexplained:
            return [entries for _minor, entries in devices]
        held_by = self._holders(now, frozenset(seen))
        out = []
        for (minor, entries), ok in zip(devices, trusted):
            mapped, via_fds = attribute(entries, ok, compute_holders(held_by, minor))
            self.used_fds = self.used_fds or via_fds
            out.append(mapped)
        return out

    def _holders(self, now: float, entries: FrozenSet[Tuple[int, int]]) -> Dict[int, FrozenSet[int]]:
        """Local pids holding some /dev/nvidia device. Every candidate is read again when NVML's entries changed
        (a GPU process came or went: NVML lists a process once it holds the device); every ``RESCAN`` s otherwise,
        new pids only. Between those, the cached holders that are still there."""
        changed = entries != self._entries
        self._entries = entries
        if not changed and now < self._next_rescan:
            gone = [pid for pid in self._holding if not os.path.exists("%s/%d" % (self.proc, pid))]
            for pid in gone:  # a holder that went away (nvidia-smi) is nobody's pid any more
                del self._holding[pid]
                self._held.pop(pid, None)
            return self._holding
        self._next_rescan = now + RESCAN
        try:
            live = {int(n) for n in os.listdir(self.proc) if n.isdigit()}
        except OSError:
            live = set()
        self._skip &= live
        for pid in [p for p in self._held if p not in live]:
            del self._held[pid]
        for pid in live:
            if pid in self._skip or (not changed and pid in self._held):
                continue
            if pid == self._own or (pid not in self._held and not self._candidate(pid)):
                self._skip.add(pid)
                continue
            held = held_devices(pid, self.prefix, self.proc)
            self.scans += 1
            if held is None:
                self._skip.add(pid)  # not ours to read: never a holder we can name
                continue
            self._held[pid] = held
        self._holding = {pid: held for pid, held in self._held.items() if held}
        return self._holding

    def _candidate(self, pid: int) -> bool:
        """A process that could use a GPU: not a kernel thread, not a zombie."""
        try:
            with open("%s/%d/stat" % (self.proc, pid), "rb") as f:
                st = parse_stat(f.read(1024), pid)
        except OSError:
            return False
        return st is not None and not (st[3] & PF_KTHREAD) and st[1] not in ("Z", "X")

