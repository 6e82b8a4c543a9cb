"""Process sampler: the process tree as a full frame first, then changes only.

Backends: psutil when importable (``uses_psutil``), else a plain ``/proc`` reader; force one with
``ProcSampler(config, backend="proc")`` or config ``"proc_backend": "proc" | "psutil" | "auto"``.
On Linux both read the per-sample fields (state, ppid, cpu ticks, rss) from ``/proc/PID/stat`` with
one ``os.read`` - the file psutil parses too, at a sixth of psutil's per-call cost - and take the
static fields (name, cmdline, start) once per (pid, start time): from psutil when it is there.
Without ``/proc`` (not Linux) psutil does everything.

Cost: a process is re-read every sample while it is "hot" (used CPU in its last reading, is running
or in disk sleep, is new, holds GPU memory, or its parent just exited); an idle sleeping process is
re-read about every ``COLD_PERIOD`` seconds (staggered), so 500 idle ``sleep`` processes cost ~100
stat reads a sample instead of 500.  Kernel threads are left out.

``cpu`` is percent of one core over the time between two readings of that process (the first
reading gives the average over the process's lifetime).  In change frames a process is re-sent at once
when its identity, parent, GPU memory or state (other than running <-> sleeping) changes; a change of
cpu (>= 1 point, or to/from 0), rss (> max(1 MiB, 5 %)), wchan, or a running <-> sleeping flip at most
once per ``RESEND`` seconds (a busy process would otherwise cost a record every sample on the wire).
"""

from __future__ import annotations

import os
import random
import time
from typing import Any, Dict, Iterable, List, Optional, Tuple

try:  # optional
    import psutil  # type: ignore[import-not-found]
except Exception:  # ImportError or a broken install
    psutil = None  # type: ignore[assignment]

PROC = "/proc"
MAX_CMDLINE = 1024
COLD_PERIOD = 5.0  # seconds between readings of an idle sleeping process
HOT_NEW = 10.0  # a process is hot for this many seconds after it appears
OUTSIDE_PERIOD = 30.0  # processes outside proc_root's subtree (for ppid changes / pid reuse)
PF_KTHREAD = 0x00200000
CPU_STEP = 1.0
RSS_STEP = 1024 * 1024
RESEND = 5.0  # cpu/rss/wchan-only changes (and R<->S flips) of one process: at most one upsert per RESEND s

_PSUTIL_STATES = {
    "running": "R",
    "sleeping": "S",
    "disk-sleep": "D",
    "stopped": "T",
    "tracing-stop": "t",
    "zombie": "Z",
    "dead": "X",
    "wake-kill": "K",
    "waking": "W",
    "idle": "I",
    "locked": "L",
    "waiting": "W",
    "parked": "P",
}

try:
    CLK_TCK = float(os.sysconf("SC_CLK_TCK"))
    PAGE_SIZE = int(os.sysconf("SC_PAGE_SIZE"))
except (AttributeError, ValueError, OSError):
    CLK_TCK, PAGE_SIZE = 100.0, 4096


def _read_bytes(path: str, size: int = 4096) -> Optional[bytes]:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, size)
    except OSError:
        return None
    finally:
        os.close(fd)


def boot_time() -> float:
    data = _read_bytes(PROC + "/stat", 1 << 16) or b""
    for line in data.splitlines():
        if line.startswith(b"btime "):
            return float(line.split()[1])
    if psutil is not None:
        return float(psutil.boot_time())
    return 0.0


def read_stat(pid: int) -> Optional[Tuple[str, str, int, int, int, float, int, int]]:
    """(comm, state, ppid, flags, cpu_ticks, start_ticks, rss_bytes, pid) from /proc/PID/stat."""
    data = _read_bytes("%s/%d/stat" % (PROC, pid))
    if not data:
        return None
    right = data.rfind(b")")
    fields = data[right + 2 :].split()
    try:
        return (
            data[data.find(b"(") + 1 : right].decode("utf-8", "replace"),
            fields[0].decode("ascii", "replace"),
            int(fields[1]),
            int(fields[6]),
            int(fields[11]) + int(fields[12]),
            float(fields[19]),
            int(fields[21]) * PAGE_SIZE,
            pid,
        )
    except (IndexError, ValueError):
        return None


def read_wchan(pid: int) -> Optional[str]:
    """The kernel function a sleeping process waits in; None when unknown ("0", empty, unreadable)."""
    data = _read_bytes("%s/%d/wchan" % (PROC, pid), 256)
    if not data:
        return None
    text = data.strip().decode("ascii", "replace")
    return None if text in ("", "0") else text


def read_cmdline(pid: int) -> List[str]:
    data = _read_bytes("%s/%d/cmdline" % (PROC, pid), 1 << 16) or b""
    parts = data.rstrip(b"\0").split(b"\0") if data else []
    return [p.decode("utf-8", "replace") for p in parts]


def _cap(text: str) -> str:
    return text if len(text) <= MAX_CMDLINE else text[: MAX_CMDLINE - 1] + "…"


def _name_from(comm: str, argv: List[str]) -> str:
    """Like psutil: comm is cut at 15 chars; extend it from argv[0] when that matches."""
    if len(comm) >= 15 and argv:
        base = os.path.basename(argv[0])
        if base.startswith(comm):
            return base
    return comm


def _list_pids() -> List[int]:
    try:
        return [int(name) for name in os.listdir(PROC) if name.isdigit()]
    except OSError:
        return [int(p) for p in psutil.pids()] if psutil is not None else []


class _Entry:
    __slots__ = (
        "cmdline",
        "comm",
        "cpu",
        "first_seen",
        "kthread",
        "name",
        "next_read",
        "pid",
        "ppid",
        "read_at",
        "rss",
        "sent",
        "sent_at",
        "start",
        "start_ticks",
        "state",
        "ticks",
        "wchan",
    )

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.start_ticks = -1.0
        self.name = ""
        self.comm = ""
        self.cmdline = ""
        self.start = 0.0
        self.ppid = 0
        self.state = "?"
        self.wchan: Optional[str] = None
        self.ticks = 0.0
        self.rss = 0
        self.cpu: Optional[float] = None
        self.read_at = 0.0
        self.next_read = 0.0
        self.first_seen = 0.0
        self.kthread = False
        self.sent: Optional[Dict[str, Any]] = None
        self.sent_at = 0.0

    def record(self, gpu_mem: Optional[int]) -> Dict[str, Any]:
        return {
            "pid": self.pid,
            "ppid": self.ppid,
            "name": self.name,
            "cmdline": self.cmdline,
            "state": self.state,
            "wchan": self.wchan,
            "cpu": self.cpu,
            "rss": self.rss,
            "start": self.start,
            "gpu_mem": gpu_mem,
        }


class _Reader:
    """Reads one process into an _Entry; static fields once per (pid, start)."""

    def __init__(self, backend: str) -> None:
        self.use_psutil = backend == "psutil"
        self.have_proc = os.path.isdir(PROC + "/self")
        self.btime = boot_time()

    def read(self, entry: _Entry, now: float, wall: float, with_cpu: bool = True) -> bool:
        """Refresh ``entry``; False when the process is gone."""
        if not self.have_proc:
            return self._read_psutil(entry, now, wall, with_cpu)
        st = read_stat(entry.pid)
        if st is None:
            return False
        comm, state, ppid, flags, ticks, start_ticks, rss, _ = st
        if comm != entry.comm and start_ticks == entry.start_ticks:  # exec'd: new name and cmdline
            entry.comm = comm
            self._static(entry, comm)
        if start_ticks != entry.start_ticks:  # new process (or pid reused): static fields again
            entry.start_ticks = start_ticks
            entry.comm = comm
            entry.kthread = bool(flags & PF_KTHREAD) or ppid == 2 or entry.pid == 2
            entry.start = round(self.btime + start_ticks / CLK_TCK, 2)
            entry.cpu = None
            entry.read_at = 0.0
            entry.first_seen = now
            self._static(entry, comm)
        entry.ppid, entry.state, entry.rss = ppid, state, rss
        if with_cpu:
            self._cpu(entry, ticks / CLK_TCK, now, wall)
        entry.ticks = ticks / CLK_TCK
        entry.read_at = now
        entry.wchan = None if state == "R" or entry.kthread else read_wchan(entry.pid)
        return True

    def _static(self, entry: _Entry, comm: str) -> None:
        if entry.kthread:
            entry.name, entry.cmdline = comm, ""
        elif self.use_psutil:
            self._static_psutil(entry, comm)
        else:
            argv = read_cmdline(entry.pid)
            entry.name, entry.cmdline = _name_from(comm, argv), _cap(" ".join(argv))

    @staticmethod
    def _cpu(entry: _Entry, seconds: float, now: float, wall: float) -> None:
        if entry.read_at > 0 and now > entry.read_at:
            value = (seconds - entry.ticks) / (now - entry.read_at) * 100.0
        else:
            age = wall - entry.start
            value = seconds / age * 100.0 if age > 0.5 else 0.0
        entry.cpu = round(max(0.0, value), 1)

    def _static_psutil(self, entry: _Entry, comm: str) -> None:
        try:
            proc = psutil.Process(entry.pid)
            with proc.oneshot():
                name = proc.name()
                argv = proc.cmdline()
        except psutil.Error:
            name, argv = comm, []
        entry.name, entry.cmdline = name or comm, _cap(" ".join(argv))

    def _read_psutil(self, entry: _Entry, now: float, wall: float, with_cpu: bool) -> bool:
        if psutil is None:
            return False
        try:
            proc = psutil.Process(entry.pid)
            with proc.oneshot():
                start = proc.create_time()
                if start != entry.start_ticks:
                    entry.start_ticks = start
                    entry.start = round(start, 2)
                    entry.name = proc.name()
                    try:
                        entry.cmdline = _cap(" ".join(proc.cmdline()))
                    except psutil.Error:
                        entry.cmdline = ""
                    entry.read_at, entry.cpu, entry.first_seen = 0.0, None, now
                entry.ppid = proc.ppid()
                entry.state = _PSUTIL_STATES.get(proc.status(), "?")
                times = proc.cpu_times()
                entry.rss = int(proc.memory_info().rss)
        except psutil.Error:
            return False
        seconds = float(times.user + times.system)
        if with_cpu:
            self._cpu(entry, seconds, now, wall)
        entry.ticks = seconds
        entry.read_at = now
        entry.wchan = None
        return True


def _choose_backend(config: Dict[str, Any], backend: Optional[str]) -> str:
    wanted = backend or config.get("proc_backend") or "auto"
    if wanted == "psutil" and psutil is None:
        wanted = "proc"
    if wanted == "auto":
        wanted = "psutil" if psutil is not None else "proc"
    return wanted


def _subtree(entries: Iterable[_Entry], root: int) -> set:
    children: Dict[int, List[int]] = {}
    for e in entries:
        children.setdefault(e.ppid, []).append(e.pid)
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid in out:
            continue
        out.add(pid)
        todo.extend(children.get(pid, ()))
    return out


def _structural(old: Dict[str, Any], new: Dict[str, Any]) -> bool:
    """A change sent at once: identity, parent, GPU memory, or a state beyond running/sleeping."""
    for key in ("ppid", "name", "cmdline", "start", "gpu_mem"):
        if old[key] != new[key]:
            return True
    return old["state"] != new["state"] and not (old["state"] in "RS" and new["state"] in "RS")


def _changed(old: Optional[Dict[str, Any]], new: Dict[str, Any]) -> bool:
    if old is None:
        return True
    for key in ("ppid", "name", "cmdline", "state", "wchan", "start", "gpu_mem"):
        if old[key] != new[key]:
            return True
    oc, nc = old["cpu"] or 0.0, new["cpu"] or 0.0
    if (oc == 0.0) != (nc == 0.0) or abs(oc - nc) >= CPU_STEP:
        return True
    return abs(old["rss"] - new["rss"]) > max(RSS_STEP, old["rss"] * 0.05)


class ProcSampler:
    """``sample(gpu_mem_by_pid)`` -> ``procs`` frame fields (full, then changes), or None if unchanged."""

    def __init__(self, config: Dict[str, Any], backend: Optional[str] = None) -> None:
        self.config = config
        self.backend = _choose_backend(config, backend)
        self.uses_psutil = self.backend == "psutil"
        self._reader = _Reader(self.backend)
        root = config.get("proc_root")
        self.root: Optional[int] = int(root) if root not in (None, "") else None
        self._entries: Dict[int, _Entry] = {}
        self._sent_pids: set = set()
        self._gpu_pids: set = set()
        self._full = True
        self._primed = False
        self._rand = random.Random(os.getpid())
        self.reads = 0  # stat reads done (for benchmarks and tests)

    def reset(self) -> None:
        """Send the whole tree again on the next sample."""
        self._full = True

    def sample(self, gpu_mem_by_pid: Optional[Dict[int, Any]] = None) -> Optional[Dict[str, Any]]:
        gpu_mem = gpu_mem_by_pid or {}
        now, wall = time.monotonic(), time.time()
        live = _list_pids()
        entries = self._entries
        live_set = set(live)
        touched: set = set()
        dead = [p for p in entries if p not in live_set]
        for pid in dead:
            del entries[pid]
        if dead:
            dead_set = set(dead)
            for e in entries.values():  # orphans get reparented: read them now
                if e.ppid in dead_set:
                    e.next_read = 0.0
        for pid in live:
            entry = entries.get(pid)
            if entry is None:
                entry = _Entry(pid)
                entries[pid] = entry
            elif now < entry.next_read and pid not in gpu_mem:
                continue
            self.reads += 1
            touched.add(pid)
            if not self._reader.read(entry, now, wall):
                entries.pop(pid, None)
                continue
            if not self._primed:
                entry.first_seen = -1e9  # already there when we started: not "new"
            entry.next_read = self._next_read(entry, now)
        self._primed = True
        if self.root is not None:
            keep = _subtree(entries.values(), self.root)
            for e in entries.values():
                if e.pid not in keep and e.next_read < now + OUTSIDE_PERIOD:
                    e.next_read = now + OUTSIDE_PERIOD
            visible = {pid for pid in keep if pid in entries and not entries[pid].kthread}
        else:
            visible = {pid for pid, e in entries.items() if not e.kthread}
        return self._frame(visible, touched, gpu_mem, now)

    def _next_read(self, e: _Entry, now: float) -> float:
        if e.kthread:
            return now + OUTSIDE_PERIOD
        hot = (e.cpu or 0.0) > 0.0 or e.state in ("R", "D") or now - e.first_seen < HOT_NEW
        if hot:
            return 0.0
        return now + COLD_PERIOD * self._rand.uniform(0.6, 1.4)

    def _frame(self, visible: set, touched: set, gpu_mem: Dict[int, Any], now: float) -> Optional[Dict[str, Any]]:
        entries = self._entries
        if self._full:
            self._full = False
            records = []
            for pid in sorted(visible):
                e = entries[pid]
                e.sent, e.sent_at = e.record(gpu_mem.get(pid)), now
                records.append(e.sent)
            self._sent_pids = set(visible)
            self._gpu_pids = {pid for pid in visible if gpu_mem.get(pid) is not None}
            return {"full": True, "procs": records}
        candidates = ((touched | set(gpu_mem) | self._gpu_pids) & visible) | (visible - self._sent_pids)
        upsert = []
        for pid in sorted(candidates):
            e = entries[pid]
            rec = e.record(gpu_mem.get(pid))
            if e.sent is None or pid not in self._sent_pids or _structural(e.sent, rec):
                pass
            elif now - e.sent_at < RESEND or not _changed(e.sent, rec):
                continue
            e.sent, e.sent_at = rec, now
            upsert.append(rec)
        gone = sorted(self._sent_pids - visible)
        self._sent_pids = set(visible)
        self._gpu_pids = {pid for pid in visible if gpu_mem.get(pid) is not None}
        if not upsert and not gone:
            return None
        return {"full": False, "upsert": upsert, "gone": gone}


def read_process_table(config: Dict[str, Any], backend: Optional[str] = None) -> List[Dict[str, Any]]:
    """A one-shot snapshot of the process table (same record fields; ``cpu`` is None).

    Honors ``proc_root``; kernel threads are left out.  GPU memory is not known here (``gpu_mem`` None).
    """
    reader = _Reader(_choose_backend(config, backend))
    now, wall = time.monotonic(), time.time()
    entries: Dict[int, _Entry] = {}
    for pid in _list_pids():
        entry = _Entry(pid)
        if reader.read(entry, now, wall, with_cpu=False):
            entries[pid] = entry
    root = config.get("proc_root")
    keep = _subtree(entries.values(), int(root)) if root not in (None, "") else None
    out = []
    for pid in sorted(entries):
        e = entries[pid]
        if e.kthread or (keep is not None and pid not in keep):
            continue
        out.append(e.record(None))
    return out
