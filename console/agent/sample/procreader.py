"""Reading one process for the sampler: ``/proc/PID/stat`` (and ``schedstat``, ``wchan``) at the least cost.

On Linux both backends read the per-sample fields (state, ppid, cpu ticks, rss) from ``/proc/PID/stat`` with one
read, and take the static fields (name, cmdline, start) once per (pid, start time): from psutil when that is the
backend (``procpsutil.py``), else from ``/proc/PID/cmdline``.  Without ``/proc`` psutil does everything.
What a reading costs:

- a single-threaded process is read through its ``schedstat`` first (a third of a ``stat`` read): when
  that is byte-identical to the previous reading the process has not run, and nothing else is read;
  a ``stat`` byte-identical to the previous reading of that process is not parsed;
- ``stat`` and ``schedstat`` of up to ``HOLD_FDS / 2`` processes stay open and are re-read with
  ``pread`` (see ``ProcReader``);
- ``wchan`` is read again only when the state letter changed, or the cached one is ``WCHAN_MAX_AGE``
  seconds old and the ``stat`` changed (every third sample for a hot sleeping process), or it is
  ``WCHAN_IDLE_AGE`` seconds old and the process may have run (an identical ``stat`` means no CPU
  tick, page fault or CPU change since, so it most likely still waits where it did); never while
  running, never for a process that did not run;
- name and cmdline are read only when the process is new or exec'd (comm or start time changed), and again
  at its next changed reading while the last read was in its first ``EXEC_SETTLE`` s (seen between fork and
  exec, it shows its parent's; at any sampling period: a process sampled every 5 s is read once more).
"""

from __future__ import annotations

import errno
import os
from typing import Iterable, Optional, Tuple

from ..wire.frames import CLK_TCK, PF_KTHREAD, cap_cmdline, cpu_percent, name_from, start_epoch, wchan_text
from ..wire.frames import parse_stat as _parse_stat  # a module global here: tests count the parses through it
from . import procpsutil
from .procentry import EXEC_SETTLE, ProcEntry
from .procfs import PROC, boot_time, read_cmdline, thread_count

WCHAN_MAX_AGE = 2.5  # seconds a process's wchan is reused while its state letter stays the same
WCHAN_IDLE_AGE = 30.0  # ... while the process did not run (or its whole /proc/PID/stat stayed byte-identical)
STAT_MAX_AGE = 60.0  # a single-threaded process that did not run (schedstat): its stat is read at least this often
HOLD_FDS = 1024  # /proc/PID/{stat,schedstat} files kept open between readings (at most a quarter of RLIMIT_NOFILE)


def _hold_limit() -> int:
    """How many /proc files a reader may hold open: ``HOLD_FDS``, at most a quarter of RLIMIT_NOFILE."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except Exception:  # no resource module, or no limit to read
        return 0
    if soft == resource.RLIM_INFINITY or soft < 0:
        soft = 1 << 20
    return max(0, min(HOLD_FDS, soft // 4))


class Starved(Exception):
    """Out of file descriptors (EMFILE/ENFILE) while reading a process: try it again later."""


class ProcReader:
    """Reads one process into a ``ProcEntry``; static fields once per (pid, start).

    A single-threaded process whose ``/proc/PID/schedstat`` (time on CPU in ns, times scheduled) is
    byte-identical to its previous reading has not run since: its ``stat`` is not read (a third of the
    cost), except every ``STAT_MAX_AGE`` seconds (its rss can shrink without it running) and when the
    sampler forgets that reading (``entry.sched = b""``: its parent went away, or a child came or went).
    (``schedstat`` shows the main thread only, so a process with threads always has its ``stat`` read.)

    ``/proc/PID/stat`` and ``schedstat`` of up to ``hold_limit / 2`` processes stay open between readings
    and are read again with ``pread`` at offset 0 (the kernel regenerates them): about half the cost of
    open + read + close, for ~4 KB of kernel memory per open file (its seq_file buffer); ``wchan``, read
    far less often, is opened each time.  A held file belongs to that process, not to its pid number:
    once the process is reaped the read fails (ESRCH), also when the pid is in use again, and the entry
    is dropped like any process that went away.
    """

    def __init__(self, backend: str, hold_limit: Optional[int] = None) -> None:
        self.use_psutil = backend == "psutil"
        self.have_proc = os.path.isdir(PROC + "/self")
        self.have_schedstat = os.path.exists(PROC + "/self/schedstat")  # not without CONFIG_SCHED_INFO
        self.btime = boot_time()
        self.hold_limit = _hold_limit() if hold_limit is None else hold_limit
        self.held: set = set()

    def _read(self, fd: int, path: str, size: int, hold: bool = True) -> Tuple[int, Optional[bytes]]:
        """(the fd to keep, or -1; the file's bytes, or None when unreadable / the process is gone).

        Raises ``Starved`` when out of file descriptors: that says nothing about the process.
        """
        if fd >= 0:
            try:
                return fd, os.pread(fd, size, 0)
            except OSError:
                return fd, None
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                self.hold_limit = len(self.held) // 2  # the sampler releases files down to it (``trim``)
                raise Starved() from None
            return -1, None
        try:
            data = os.pread(fd, size, 0)
        except OSError:
            os.close(fd)
            return -1, None
        if hold and len(self.held) < self.hold_limit:
            self.held.add(fd)
            return fd, data
        os.close(fd)
        return -1, data

    def release(self, entry: ProcEntry) -> None:
        """Close the files held for ``entry`` (it went away, or is not read often enough to hold them)."""
        for fd in (entry.stat_fd, entry.sched_fd):
            if fd >= 0:
                self.held.discard(fd)
                try:
                    os.close(fd)
                except OSError:
                    pass
        entry.stat_fd = entry.sched_fd = -1

    def trim(self, entries: Iterable[ProcEntry]) -> None:
        """Release held files until at most ``hold_limit`` remain."""
        for entry in entries:
            if len(self.held) <= self.hold_limit:
                return
            self.release(entry)

    def close(self) -> None:
        held, self.held = self.held, set()
        for fd in held:
            try:
                os.close(fd)
            except OSError:
                pass

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the process exit closes them anyway
            pass

    def read(self, entry: ProcEntry, now: float, wall: float, with_cpu: bool = True) -> bool:
        """Refresh ``entry``; False when the process is gone."""
        if not self.have_proc:
            return procpsutil.read_process(entry, now, wall, with_cpu)
        if entry.threads == 1 and self.have_schedstat and now - entry.stat_at < STAT_MAX_AGE:
            entry.sched_fd, sched = self._read(entry.sched_fd, entry.sched_path, 128)
            if sched and sched == entry.sched:  # it did not run: nothing in its stat or wchan moved
                self._unchanged(entry, now, wall, with_cpu, ran=False)
                return True
            entry.sched = sched or b""  # changed, or unreadable: the stat read tells whether it is gone
        entry.stat_fd, data = self._read(entry.stat_fd, entry.stat_path, 4096)
        if not data:
            return False
        entry.stat_at = now
        if data == entry.raw:  # nothing in stat changed: same process, state, parent, cpu ticks and rss
            self._unchanged(entry, now, wall, with_cpu, ran=True)
            return True
        entry.changed = True
        entry.unchanged = 0
        st = _parse_stat(data, entry.pid)
        if st is None:
            return False
        entry.raw = data
        entry.threads = thread_count(data)
        comm, state, ppid, flags, ticks, start_ticks, rss, _ = st
        exec_seen = comm != entry.comm and start_ticks == entry.start_ticks
        if exec_seen:  # exec'd: new name and cmdline
            entry.comm = comm
            self._static(entry, comm)
        if start_ticks != entry.start_ticks:  # new process (or pid reused): static fields again
            entry.start_ticks = start_ticks
            entry.comm = comm
            entry.kthread = bool(flags & PF_KTHREAD)  # not "pid 2": in a PID namespace (a container) it is a process
            entry.start = start_epoch(self.btime, start_ticks)
            entry.cpu = None
            entry.read_at = 0.0
            entry.first_seen = now
            entry.wchan_at = -1e9
            if entry.kthread:
                self.release(entry)  # read every OUTSIDE_PERIOD only: not worth a held file
            self._static(entry, comm)
            entry.settling = not entry.kthread and wall - entry.start < EXEC_SETTLE
        elif entry.settling:  # read when young: it may have exec'd into the same program since
            if not exec_seen:
                self._static(entry, comm)
            entry.settling = wall - entry.start < EXEC_SETTLE
        state_changed = state != entry.state
        entry.ppid, entry.state, entry.rss = ppid, state, rss
        seconds = ticks / CLK_TCK
        if with_cpu:
            entry.cpu = cpu_percent(seconds, entry.ticks, now - entry.read_at if entry.read_at > 0.0 else 0.0,
                                    wall - entry.start)
        entry.ticks = seconds
        entry.read_at = now
        self._wchan(entry, now, state_changed)
        return True

    def _unchanged(self, entry: ProcEntry, now: float, wall: float, with_cpu: bool, ran: bool) -> None:
        """A reading that found nothing new: no CPU since the last one.

        ``ran``: it may have run (an identical ``stat``): wchan is read again every ``WCHAN_IDLE_AGE`` s;
        not at all when it surely did not (an identical ``schedstat``)."""
        cpu, wchan = entry.cpu, entry.wchan
        if with_cpu:
            if entry.read_at > 0.0 and now > entry.read_at:
                entry.cpu = 0.0  # no tick since the last reading
            else:  # its first reading: the average over its lifetime
                entry.cpu = cpu_percent(entry.ticks, 0.0, 0.0, wall - entry.start)
        entry.read_at = now
        entry.unchanged += 1
        if ran and entry.state != "R" and not entry.kthread and now - entry.wchan_at >= WCHAN_IDLE_AGE:
            self._wchan(entry, now, False)
        entry.changed = entry.cpu != cpu or entry.wchan != wchan

    def _wchan(self, entry: ProcEntry, now: float, state_changed: bool) -> None:
        """Read wchan unless running / a kernel thread, or the cached one is recent and the state the same."""
        if entry.state == "R" or entry.kthread:
            entry.wchan = None
        elif state_changed or now - entry.wchan_at >= WCHAN_MAX_AGE:
            entry.wchan = wchan_text(self._read(-1, entry.wchan_path, 256, hold=False)[1])
            entry.wchan_at = now

    def _static(self, entry: ProcEntry, comm: str) -> None:
        """Name and cmdline, read anew (a kernel thread's: its comm)."""
        if entry.kthread:
            entry.name, entry.cmdline = comm, ""
        elif self.use_psutil:
            procpsutil.read_names(entry, comm)
        else:
            argv = read_cmdline(entry.pid)
            entry.name, entry.cmdline = name_from(comm, argv), cap_cmdline(" ".join(argv))
