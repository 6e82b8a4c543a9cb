"""Process sampler: the process tree as a full frame first, then changes only.

Backends: psutil when importable (``uses_psutil``), else a plain ``/proc`` reader; force one with
``ProcSampler(config, backend="proc")`` or config ``"proc_backend": "proc" | "psutil" | "auto"``.
On Linux both read the per-sample fields (state, ppid, cpu ticks, rss) from ``/proc/PID/stat`` with
one read - the file psutil parses too, at a sixth of psutil's per-call cost (psutil's ``oneshot()`` of
ppid/status/cpu_times/create_time/memory_info is ~85 us a process) - and take the static fields
(name, cmdline, start) once per (pid, start time): from psutil when it is there.  Without ``/proc``
(not Linux) psutil does everything.

Cost: a process is re-read every sample while it is "hot" (used CPU in its last reading, is running
or in disk sleep, is new, holds GPU memory, or its parent just exited); an idle sleeping process is
re-read about every ``COLD_PERIOD`` seconds (staggered), and one that found nothing new in
``DORMANT_AFTER`` readings in a row (it did not run for ~15 s) about every ``DORMANT_PERIOD`` seconds,
so 500 idle ``sleep`` processes cost ~50 readings a sample instead of 500.  A process is also re-read
(with its wchan) at the next sample when a child of it appears or goes away: it forked, or it reaps.
Kernel threads are left out (and read every ``OUTSIDE_PERIOD``).
What one sample costs on top of, and inside, those readings:

- ``/proc`` is listed only when ``/proc/loadavg`` says a task was created or reaped since the last
  listing (its thread count and last pid; see ``task_signature``), when a reading found a process gone,
  and at least every ``LIST_EVERY`` seconds whatever it says (a listing costs ~1 ms per 600 processes at
  1 Hz); should such a listing find a new process that the signature missed, /proc is listed every
  sample from then on;
- a single-threaded process is read through its ``schedstat`` first (a third of a ``stat`` read): when
  that is byte-identical to the previous reading the process has not run, and nothing else is read
  (``_Reader``); a ``stat`` byte-identical to the previous reading of that process is not parsed;
- ``stat`` and ``schedstat`` of up to ``HOLD_FDS / 2`` processes stay open and are re-read with
  ``pread`` (see ``_Reader``);
- ``wchan`` is read again only when the state letter changed, or the cached one is ``WCHAN_MAX_AGE``
  seconds old and the ``stat`` changed (every third sample for a hot sleeping process), or it is
  ``WCHAN_IDLE_AGE`` seconds old and the process may have run (an identical ``stat`` means no CPU
  tick, page fault or CPU change since, so it most likely still waits where it did); never while
  running, never for a process that did not run;
- name and cmdline are read only when the process is new or exec'd (comm or start time changed), and again
  at its next changed reading while the last read was in its first ``EXEC_SETTLE`` s (seen between fork and
  exec, it shows its parent's; at any sampling period: a process sampled every 5 s is read once more);
- only processes whose reading changed a record field, that are on a GPU, or that have a change held
  back by ``RESEND`` are compared with the record last sent; a record is built only to be sent.

``cpu`` is percent of one core over the time between two readings of that process (the first
reading gives the average over the process's lifetime).  In change frames a process is re-sent at once
when its identity, parent, GPU memory or state (other than running <-> sleeping) changes; a change of
cpu (>= 1 point, or to/from 0), rss (> max(1 MiB, 5 %)), wchan, or a running <-> sleeping flip at most
once per ``RESEND`` seconds (a busy process would otherwise cost a record every sample on the wire).
"""

from __future__ import annotations

import errno
import os
import random
import time
from typing import Any, Dict, Iterable, List, Optional, Tuple

from ..wire.frames import (
    CLK_TCK,
    PF_KTHREAD,
    RESEND,
    Stat,
    cap_cmdline,
    changed,
    cpu_percent,
    full_procs_frame,
    name_from,
    proc_record,
    procs_changes_frame,
    start_epoch,
    structural,
    subtree,
    wchan_text,
)
from ..wire.frames import parse_stat as _parse_stat  # a module global here: tests count the parses through it
from ..wire.procmatch import matches_program
from ..wire.protocol import ProcRecord

try:  # optional
    import psutil
except Exception:  # ImportError or a broken install
    psutil = None

PROC = "/proc"
COLD_PERIOD = 5.0  # seconds between readings of an idle sleeping process
DORMANT_PERIOD = 10.0  # ... and of one whose last DORMANT_AFTER readings found nothing new
DORMANT_AFTER = 3
HOT_NEW = 10.0  # a process is hot for this many seconds after it appears
OUTSIDE_PERIOD = 30.0  # processes outside proc_root's subtree (for ppid changes / pid reuse)
LIST_EVERY = 30.0  # /proc is listed at least this often even when /proc/loadavg says nothing changed
WCHAN_MAX_AGE = 2.5  # seconds a process's wchan is reused while its state letter stays the same
WCHAN_IDLE_AGE = 30.0  # ... while the process did not run (or its whole /proc/PID/stat stayed byte-identical)
STAT_MAX_AGE = 60.0  # a single-threaded process that did not run (schedstat): its stat is read at least this often
# A process first read in its first moments may not have exec'd yet: between fork and exec it shows its parent's
# cmdline, and exec into the same program (bash -> bash benchmark.sh, python -> python bench.py) leaves comm as it
# was, so nothing says it changed. Its name and cmdline are read again at its next changed reading (exec changes
# its stat) while the previous read was within this many seconds of its start, however far apart the samples
# (2 s, and a second for a start that is a second early where the boot time falls back to /proc/stat's btime).
EXEC_SETTLE = 3.0
SUMMARY_RESEND = 30.0  # detail "summary": the subset frame comes again this often (fresh cpu/rss) if unchanged
HOLD_FDS = 1024  # /proc/PID/{stat,schedstat} files kept open between readings (at most a quarter of RLIMIT_NOFILE)

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
    """When this host booted (epoch seconds, to 0.01 s): now minus ``/proc/uptime``.

    ``/proc/stat``'s ``btime`` is whole seconds (truncated), which put a process's start up to a second before
    it began: before a diagnosis that never saw it (a verdict read just before a restart then kept counting).
    ``btime`` is the answer where ``/proc/uptime`` disagrees with it by more than that second (an uptime
    virtualised for a container, as LXCFS does, while process start ticks count from the host's boot)."""
    btime: Optional[float] = None
    for line in (_read_bytes(PROC + "/stat", 1 << 16) or b"").splitlines():
        if line.startswith(b"btime "):
            btime = float(line.split()[1])
            break
    uptime = _read_bytes(PROC + "/uptime", 128)
    if uptime:
        try:
            precise = time.time() - float(uptime.split()[0])
        except (IndexError, ValueError):
            precise = None
        if precise is not None and (btime is None or -0.05 <= precise - btime < 1.05):
            return round(precise, 2)
    if btime is not None:
        return btime
    if psutil is not None:
        return float(psutil.boot_time())
    return 0.0


def _hold_limit() -> int:
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except Exception:  # no resource module, or no limit to read
        return 0
    if soft == resource.RLIM_INFINITY or soft < 0:
        soft = 1 << 20
    return max(0, min(HOLD_FDS, soft // 4))


def read_stat(pid: int) -> Optional[Stat]:
    """(comm, state, ppid, flags, cpu_ticks, start_ticks, rss_bytes, pid) from /proc/PID/stat."""
    data = _read_bytes("%s/%d/stat" % (PROC, pid))
    return _parse_stat(data, pid) if data else None


def _threads(data: bytes) -> int:
    """num_threads (field 20) of a /proc/PID/stat; 0 when unreadable."""
    try:
        return int(data[data.rfind(b")") + 2 :].split()[17])
    except (IndexError, ValueError):
        return 0


def task_signature() -> Optional[bytes]:
    """``nr_threads last_pid`` from /proc/loadavg; None when unreadable.

    Unchanged between two readings means no task was created in this pid namespace (a new pid would
    change last_pid) and, then, none was reaped either (nr_threads would drop): the set of processes is
    the same, so ``/proc`` need not be listed again.  Tasks created in another namespace while ours
    exit could cancel out in nr_threads; the periodic listing and the failed reads of the dead cover it.
    """
    data = _read_bytes(PROC + "/loadavg", 128)
    if not data:
        return None
    parts = data.split()
    if len(parts) < 5 or b"/" not in parts[3]:
        return None
    return parts[3].partition(b"/")[2] + b" " + parts[4]


def read_wchan(pid: int) -> Optional[str]:
    """The kernel function a sleeping process waits in; None when unknown ("0", empty, unreadable)."""
    return wchan_text(_read_bytes("%s/%d/wchan" % (PROC, pid), 256))


def read_cmdline(pid: int) -> List[str]:
    data = _read_bytes("%s/%d/cmdline" % (PROC, pid), 1 << 16) or b""
    parts = data.rstrip(b"\0").split(b"\0") if data else []
    return [p.decode("utf-8", "replace") for p in parts]


def _list_pids() -> List[int]:
    try:
        return [int(name) for name in os.listdir(PROC) if name.isdigit()]
    except OSError:
        return [int(p) for p in psutil.pids()] if psutil is not None else []


class _Entry:
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
        return proc_record(
            self.pid, self.ppid, self.name, self.cmdline, self.state, self.wchan, self.cpu, self.rss, self.start,
            gpu_mem,
        )


class Starved(Exception):
    """Out of file descriptors (EMFILE/ENFILE) while reading a process: try it again later."""


class _Reader:
    """Reads one process into an _Entry; static fields once per (pid, start).

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

    def release(self, entry: _Entry) -> None:
        """Close the files held for ``entry`` (it went away, or is not read often enough to hold them)."""
        for fd in (entry.stat_fd, entry.sched_fd):
            if fd >= 0:
                self.held.discard(fd)
                try:
                    os.close(fd)
                except OSError:
                    pass
        entry.stat_fd = entry.sched_fd = -1

    def trim(self, entries: Iterable[_Entry]) -> None:
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

    def read(self, entry: _Entry, now: float, wall: float, with_cpu: bool = True) -> bool:
        """Refresh ``entry``; False when the process is gone."""
        if not self.have_proc:
            return self._read_psutil(entry, now, wall, with_cpu)
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
        entry.threads = _threads(data)
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

    def _unchanged(self, entry: _Entry, now: float, wall: float, with_cpu: bool, ran: bool) -> None:
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

    def _wchan(self, entry: _Entry, now: float, state_changed: bool) -> None:
        """Read wchan unless running / a kernel thread, or the cached one is recent and the state the same."""
        if entry.state == "R" or entry.kthread:
            entry.wchan = None
        elif state_changed or now - entry.wchan_at >= WCHAN_MAX_AGE:
            entry.wchan = wchan_text(self._read(-1, entry.wchan_path, 256, hold=False)[1])
            entry.wchan_at = now

    def _static(self, entry: _Entry, comm: str) -> None:
        if entry.kthread:
            entry.name, entry.cmdline = comm, ""
        elif self.use_psutil:
            self._static_psutil(entry, comm)
        else:
            argv = read_cmdline(entry.pid)
            entry.name, entry.cmdline = name_from(comm, argv), cap_cmdline(" ".join(argv))

    def _static_psutil(self, entry: _Entry, comm: str) -> None:
        try:
            proc = psutil.Process(entry.pid)
            with proc.oneshot():
                name = proc.name()
                argv = proc.cmdline()
        except psutil.Error:
            name, argv = comm, []
        entry.name, entry.cmdline = name or comm, cap_cmdline(" ".join(argv))

    def _read_psutil(self, entry: _Entry, now: float, wall: float, with_cpu: bool) -> bool:
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
                entry.state = _PSUTIL_STATES.get(proc.status(), "?")
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


def _choose_backend(config: Dict[str, Any], backend: Optional[str]) -> str:
    wanted = backend or config.get("proc_backend") or "auto"
    if wanted == "psutil" and psutil is None:
        wanted = "proc"
    if wanted == "auto":
        wanted = "psutil" if psutil is not None else "proc"
    return wanted


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
        self._visible: set = set()
        self._keep: set = set()  # proc_root's subtree (pids)
        self._pending: set = set()  # changed, but sent less than RESEND seconds ago: looked at again each sample
        self._members_changed = True  # entries came or went (or, under proc_root, a parent changed)
        self._task_sig: Optional[bytes] = None
        self._trust_sig = True
        self._next_list = 0.0
        self._full = True
        self._primed = False
        self._random = random.Random(os.getpid()).random
        self._summary_key: Optional[tuple] = None  # the subset last sent at detail "summary" (``summary``)
        self._summary_next = 0.0
        self._matched: Dict[int, Tuple[str, float, bool]] = {}  # pid -> (cmdline, start, matches the benchmark)
        self.reads = 0  # stat reads done (for benchmarks and tests)
        self.listings = 0  # listings of /proc done (for benchmarks and tests)

    def reset(self) -> None:
        """Send the whole tree again on the next sample."""
        self._full = True
        self._summary_key = None

    def summary(self, patterns: List[Any], gpu_mem_by_pid: Optional[Dict[int, Any]] = None) -> Optional[Dict[str, Any]]:
        """Detail "summary" (an instance the console does not show), after ``sample()``: the benchmark's processes
        (``patterns``: its match and entrypoint) and the GPU's, as one ``full`` frame marked ``subset``, when that
        set changed (or every SUMMARY_RESEND s); None otherwise. The console's "benchmark up/down" stays true;
        the next sample after ``reset()`` (back to "full") sends the whole tree again."""
        gpu_mem = gpu_mem_by_pid or {}
        now = time.monotonic()
        old, matched = self._matched, {}
        keep: List[_Entry] = []
        for pid in sorted(self._visible):
            e = self._entries.get(pid)
            if e is None:
                continue
            hit = old.get(pid)
            if hit is None or hit[0] != e.cmdline or hit[1] != e.start:
                rec = {"name": e.name, "cmdline": e.cmdline}
                hit = (e.cmdline, e.start, bool(patterns) and matches_program(rec, patterns))
            matched[pid] = hit
            if hit[2] or pid in gpu_mem:
                keep.append(e)
        self._matched = matched
        key = tuple((e.pid, e.start, e.cmdline) for e in keep)
        if key == self._summary_key and now < self._summary_next:
            return None
        self._summary_key, self._summary_next = key, now + SUMMARY_RESEND
        frame = full_procs_frame([e.record(gpu_mem.get(e.pid)) for e in keep])
        frame["subset"] = True
        return frame

    def close(self) -> None:
        """Close the /proc files held open between readings."""
        self._reader.close()
        for e in self._entries.values():
            e.stat_fd = e.sched_fd = -1

    def _list(self, now: float) -> int:
        """List /proc: new pids get an entry (read this sample), vanished ones are dropped; -> new pids."""
        self.listings += 1
        self._next_list = now + LIST_EVERY
        entries = self._entries
        live = _list_pids()
        live_set = set(live)
        dead = [entries.pop(p) for p in [p for p in entries if p not in live_set]]
        release = self._reader.release
        for entry in dead:
            release(entry)
        self._went_away(dead)
        new = 0
        for pid in live:
            if pid not in entries:
                entries[pid] = _Entry(pid)
                new += 1
        if new:
            self._members_changed = True
        return new

    def _went_away(self, dead: List[_Entry]) -> None:
        """Processes went away: read their children (reparented) and parents (reaping) at the next sample."""
        if not dead:
            return
        self._members_changed = True
        dead_set = {e.pid for e in dead}
        for e in self._entries.values():
            if e.ppid in dead_set:  # reparented without running: its stat must be read
                e.next_read = 0.0
                e.sched = b""
        for e in dead:
            self._wake(e.ppid)

    def _wake(self, pid: int) -> None:
        """Read ``pid`` and its wchan at the next sample (a child of it came or went: it forked or reaps)."""
        entry = self._entries.get(pid)
        if entry is not None and not entry.kthread:
            entry.next_read = 0.0
            entry.sched = b""
            entry.wchan_at = -1e9

    def sample(self, gpu_mem_by_pid: Optional[Dict[int, Any]] = None) -> Optional[Dict[str, Any]]:
        gpu_mem = gpu_mem_by_pid or {}
        now, wall = time.monotonic(), time.time()
        sig = task_signature() if self._reader.have_proc and self._trust_sig else None
        if sig is None or sig != self._task_sig or now >= self._next_list:
            unchanged = sig is not None and sig == self._task_sig and self._primed
            self._task_sig = sig  # read before listing: a change after it shows at the next sample
            if self._list(now) and unchanged and task_signature() == sig:
                self._trust_sig = False  # a new process the signature did not show: list every sample
        entries = self._entries
        read = self._reader.read
        touched: List[int] = []  # read, and something a record carries changed
        read_pids: List[int] = []  # read (kept under proc_root only)
        dead: List[_Entry] = []
        track_parents = self.root is not None
        primed = self._primed
        for entry in list(entries.values()):
            pid = entry.pid
            if now < entry.next_read and pid not in gpu_mem:
                continue
            self.reads += 1
            ppid, kthread = entry.ppid, entry.kthread
            try:
                alive = read(entry, now, wall)
            except Starved:
                continue  # unknown this time; read again at the next sample
            if not alive:
                self._reader.release(entry)
                dead.append(entries.pop(pid))
                self._next_list = 0.0  # list at the next sample: its pid may be in use again already
                continue
            if entry.changed:
                touched.append(pid)
            if track_parents:
                read_pids.append(pid)
                if entry.ppid != ppid:
                    self._members_changed = True
            if entry.kthread != kthread:
                self._members_changed = True
            if not primed:
                entry.first_seen = -1e9  # already there when we started: not "new"
            elif entry.first_seen == now:
                self._wake(entry.ppid)  # its first reading: the parent just forked it
            entry.next_read = self._next_read(entry, now)
        self._went_away(dead)  # read at the next sample
        self._primed = True
        members_changed = self._members_changed
        if members_changed:
            self._members_changed = False
            if self.root is not None:
                self._keep = keep = subtree(((e.pid, e.ppid) for e in entries.values()), (self.root,))
                for e in entries.values():
                    if e.pid not in keep and e.next_read < now + OUTSIDE_PERIOD:
                        e.next_read = now + OUTSIDE_PERIOD
                        self._reader.release(e)  # read every OUTSIDE_PERIOD: not worth held files
                self._visible = {pid for pid in keep if pid in entries and not entries[pid].kthread}
            else:
                self._visible = {pid for pid, e in entries.items() if not e.kthread}
        elif track_parents:
            keep = self._keep
            for pid in read_pids:  # outside proc_root's subtree: only for ppid changes and pid reuse
                if pid not in keep:
                    entries[pid].next_read = now + OUTSIDE_PERIOD
                    self._reader.release(entries[pid])
        if len(self._reader.held) > self._reader.hold_limit:  # short of descriptors (EMFILE) at some point
            self._reader.trim(list(entries.values()))
        return self._frame(self._visible, touched, gpu_mem, now, members_changed)

    def _next_read(self, e: _Entry, now: float) -> float:
        if e.kthread:
            return now + OUTSIDE_PERIOD
        hot = (e.cpu or 0.0) > 0.0 or e.state in ("R", "D") or now - e.first_seen < HOT_NEW
        if hot:
            return 0.0
        period = DORMANT_PERIOD if e.unchanged >= DORMANT_AFTER else COLD_PERIOD
        return now + period * (0.6 + 0.8 * self._random())  # staggered over 0.6-1.4 periods

    def _frame(
        self, visible: set, touched: List[int], gpu_mem: Dict[int, Any], now: float, members_changed: bool
    ) -> Optional[Dict[str, Any]]:
        entries = self._entries
        if self._full:
            self._full = False
            records = []
            for pid in sorted(visible):
                e = entries[pid]
                e.sent, e.sent_at = e.record(gpu_mem.get(pid)), now
                records.append(e.sent)
            self._sent_pids = set(visible)
            self._gpu_pids = {pid for pid, mem in gpu_mem.items() if mem is not None and pid in visible}
            self._pending = set()
            return full_procs_frame(records)
        candidates = set(touched)
        candidates.update(gpu_mem)
        candidates.update(self._gpu_pids)
        candidates.update(self._pending)
        candidates &= visible
        sent_pids = self._sent_pids
        if members_changed:
            candidates |= visible - sent_pids
        upsert = []
        pending = set()
        for pid in sorted(candidates):
            e = entries[pid]
            mem = gpu_mem.get(pid)
            old = e.sent
            if old is None or pid not in sent_pids or structural(old, e.ppid, e.start, mem, e.name, e.cmdline, e.state):
                pass
            elif not changed(old, e.state, e.wchan, e.cpu, e.rss):
                continue
            elif now - e.sent_at < RESEND:
                pending.add(pid)  # unread processes are not candidates: remember to send it later
                continue
            e.sent, e.sent_at = e.record(mem), now
            upsert.append(e.sent)
        self._pending = pending
        gone: List[int] = []
        if members_changed:
            gone = sorted(sent_pids - visible)
            self._sent_pids = set(visible)
        self._gpu_pids = {pid for pid, mem in gpu_mem.items() if mem is not None and pid in visible}
        return procs_changes_frame(upsert, gone)


def read_process_table(config: Dict[str, Any], backend: Optional[str] = None) -> List[ProcRecord]:
    """A one-shot snapshot of the process table (same record fields; ``cpu`` is None).

    Honors ``proc_root``; kernel threads are left out.  GPU memory is not known here (``gpu_mem`` None).
    """
    reader = _Reader(_choose_backend(config, backend), hold_limit=0)  # one reading each: nothing to hold
    now, wall = time.monotonic(), time.time()
    entries: Dict[int, _Entry] = {}
    for pid in _list_pids():
        entry = _Entry(pid)
        try:
            if reader.read(entry, now, wall, with_cpu=False):
                entries[pid] = entry
        except Starved:
            continue
    root = config.get("proc_root")
    keep = subtree(((e.pid, e.ppid) for e in entries.values()), (int(root),)) if root not in (None, "") else None
    out = []
    for pid in sorted(entries):
        e = entries[pid]
        if e.kthread or (keep is not None and pid not in keep):
            continue
        out.append(e.record(None))
    return out
