"""The process sampler's psutil backend: names and cmdlines, or whole readings where there is no ``/proc``.

``psutil`` is None when it is not importable (the sampler then reads ``/proc`` alone, ``procreader.py``).
"""

from __future__ import annotations

from ..wire.frames import cap_cmdline, cpu_percent
from .procentry import EXEC_SETTLE, ProcEntry

try:  # optional
    import psutil
except Exception:  # ImportError or a broken install
    psutil = None

PSUTIL_STATES = {
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


def read_names(entry: ProcEntry, comm: str) -> None:
    """``entry``'s name and cmdline through psutil (``comm`` when it cannot say)."""
    try:
        proc = psutil.Process(entry.pid)
        with proc.oneshot():
            name = proc.name()
            argv = proc.cmdline()
    except psutil.Error:
        name, argv = comm, []
    entry.name, entry.cmdline = name or comm, cap_cmdline(" ".join(argv))


def read_process(entry: ProcEntry, now: float, wall: float, with_cpu: bool) -> bool:
    """Refresh ``entry`` through psutil alone (no /proc: not Linux); False when the process is gone."""
    if psutil is None:
        return False
    try:
        proc = psutil.Process(entry.pid)
        with proc.oneshot():
            start = proc.create_time()
            if start != entry.start_ticks or entry.settling:  # new, or read when young (EXEC_SETTLE)
                if start != entry.start_ticks:
                    entry.read_at, entry.cpu, entry.first_seen = 0.0, None, now
                entry.settling = wall - start < EXEC_SETTLE
                entry.start_ticks = start
                entry.start = round(start, 2)
                entry.name = proc.name()
                try:
                    entry.cmdline = cap_cmdline(" ".join(proc.cmdline()))
                except psutil.Error:
                    entry.cmdline = ""
            entry.ppid = proc.ppid()
            entry.state = PSUTIL_STATES.get(proc.status(), "?")
            times = proc.cpu_times()
            entry.rss = int(proc.memory_info().rss)
    except psutil.Error:
        return False
    seconds = float(times.user + times.system)
    if with_cpu:
        entry.cpu = cpu_percent(seconds, entry.ticks, now - entry.read_at if entry.read_at > 0.0 else 0.0,
                                wall - entry.start)
    entry.ticks = seconds
    entry.read_at = now
    entry.wchan = None
    entry.changed = True
    return True
