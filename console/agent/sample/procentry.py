"""One process as the process sampler knows it: its last reading, its schedule and what was last sent of it."""

from __future__ import annotations

from typing import Optional

from ..wire.frames import proc_record
from ..wire.protocol import ProcRecord
from .procfs import PROC

# A process first read in its first moments may not have exec'd yet: between fork and exec it shows its parent's
# cmdline, and exec into the same program (bash -> bash benchmark.sh, python -> python bench.py) leaves comm as it
# was, so nothing says it changed. Its name and cmdline are read again at its next changed reading (exec changes
# its stat) while the previous read was within this many seconds of its start, however far apart the samples
# (2 s, and a second for a start that is a second early where the boot time falls back to /proc/stat's btime).
EXEC_SETTLE = 3.0


class ProcEntry:
    """One process as the sampler last read it, with what its reader keeps between readings."""

    __slots__ = (
        "changed",
        "cmdline",
        "comm",
        "cpu",
        "first_seen",
        "kthread",
        "name",
        "next_read",
        "pid",
        "ppid",
        "raw",
        "read_at",
        "rss",
        "sched",
        "sched_fd",
        "sched_path",
        "sent",
        "sent_at",
        "settling",
        "start",
        "start_ticks",
        "stat_at",
        "stat_fd",
        "stat_path",
        "state",
        "threads",
        "ticks",
        "unchanged",
        "wchan",
        "wchan_at",
        "wchan_path",
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
        self.settling = False  # (EXEC_SETTLE) name and cmdline were read before the process was EXEC_SETTLE s old
        self.kthread = False
        self.sent: Optional[ProcRecord] = None
        self.sent_at = 0.0
        self.raw = b""  # the last /proc/PID/stat read
        self.sched = b""  # the last /proc/PID/schedstat read (b"": none to compare with: read stat)
        self.threads = 0  # from the last stat
        self.stat_at = -1e9
        self.wchan_at = -1e9
        self.stat_path = "%s/%d/stat" % (PROC, pid)
        self.sched_path = "%s/%d/schedstat" % (PROC, pid)
        self.wchan_path = "%s/%d/wchan" % (PROC, pid)
        self.stat_fd = self.sched_fd = -1  # held open by the reader (-1: opened and closed per reading)
        self.changed = True  # the last reading changed something a record carries
        self.unchanged = 0  # readings in a row that found nothing new (schedstat or stat byte-identical)

    def record(self, gpu_mem: Optional[int]) -> ProcRecord:
        """The ``procs`` record of this process as last read (``gpu_mem``: its GPU memory, None: not on one)."""
        return proc_record(
            self.pid, self.ppid, self.name, self.cmdline, self.state, self.wchan, self.cpu, self.rss, self.start,
            gpu_mem,
        )
