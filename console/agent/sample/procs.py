"""Process sampler: the process tree as a full frame first, then changes only.

Backends: psutil when importable (``uses_psutil``), else a plain ``/proc`` reader; force one with
``ProcSampler(config, backend="proc")`` or config ``"proc_backend": "proc" | "psutil" | "auto"``.
On Linux both read the per-sample fields (state, ppid, cpu ticks, rss) from ``/proc/PID/stat`` with
one read - the file psutil parses too, at a sixth of psutil's per-call cost (psutil's ``oneshot()`` of
ppid/status/cpu_times/create_time/memory_info is ~85 us a process) - and take the static fields
(name, cmdline, start) once per (pid, start time): from psutil when it is there.  Without ``/proc``
(not Linux) psutil does everything.  The modules: ``procfs.py`` (/proc files), ``procentry.py`` (one
process), ``procreader.py`` (reading one), ``procpsutil.py`` (the psutil backend); this one decides when
to read which process and what to send.

Cost: a process is re-read every sample while it is "hot" (used CPU in its last reading, is running
or in disk sleep, is new, holds GPU memory, or its parent just exited); an idle sleeping process is
re-read about every ``COLD_PERIOD`` seconds (staggered), and one that found nothing new in
``DORMANT_AFTER`` readings in a row (it did not run for ~15 s) about every ``DORMANT_PERIOD`` seconds,
and one that did not run for ``ASLEEP_AFTER`` readings (about two minutes) every ``ASLEEP_PERIOD`` s, so
500 idle ``sleep`` processes cost ~25 readings a sample instead of 500.  A process on a GPU is read every
sample whatever its past, so the benchmark's daemon never waits for its turn.  A process is also re-read
(with its wchan) at the next sample when a child of it appears or goes away: it forked, or it reaps.
Kernel threads are left out (and read every ``OUTSIDE_PERIOD``).
What one sample costs on top of, and inside, those readings:

- ``/proc`` is listed only when ``/proc/loadavg`` says a task was created or reaped since the last
  listing (its thread count and last pid; see ``task_signature``), when a reading found a process gone,
  and at least every ``LIST_EVERY`` seconds whatever it says (a listing costs ~1 ms per 600 processes at
  1 Hz); should such a listing find a new process that the signature missed, /proc is listed every
  sample from then on;
- a reading itself skips what did not change (``schedstat`` first, unchanged ``stat`` not parsed, files held
  open, ``wchan``, name and cmdline seldom): see ``procreader.py``;
- only processes whose reading changed a record field, that are on a GPU, or that have a change held
  back by ``RESEND`` are compared with the record last sent; a record is built only to be sent.

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
from typing import Any, Dict, List, Optional, Tuple

from ..wire.frames import RESEND, changed, full_procs_frame, procs_changes_frame, structural, subtree
from ..wire.procmatch import matches_program
from ..wire.protocol import ProcRecord
from .procentry import ProcEntry
from .procfs import list_pids, task_signature
from .procpsutil import psutil
from .procreader import ProcReader, Starved

COLD_PERIOD = 5.0  # seconds between readings of an idle sleeping process
DORMANT_PERIOD = 10.0  # ... and of one whose last DORMANT_AFTER readings found nothing new
DORMANT_AFTER = 3
ASLEEP_PERIOD = 20.0  # ... and of one whose last ASLEEP_AFTER readings found nothing new (idle ~2 min)
ASLEEP_AFTER = 12
HOT_NEW = 10.0  # a process is hot for this many seconds after it appears
OUTSIDE_PERIOD = 30.0  # processes outside proc_root's subtree (for ppid changes / pid reuse)
LIST_EVERY = 30.0  # /proc is listed at least this often even when /proc/loadavg says nothing changed
SUMMARY_RESEND = 30.0  # detail "summary": the subset frame comes again this often (fresh cpu/rss) if unchanged


def _choose_backend(config: Dict[str, Any], backend: Optional[str]) -> str:
    """``backend``, else config ``proc_backend``: "psutil" where importable, else "proc"."""
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
        self._reader = ProcReader(self.backend)
        root = config.get("proc_root")
        self.root: Optional[int] = int(root) if root not in (None, "") else None
        self._entries: Dict[int, ProcEntry] = {}
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
        keep: List[ProcEntry] = []
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
        live = list_pids()
        live_set = set(live)
        dead = [entries.pop(p) for p in [p for p in entries if p not in live_set]]
        release = self._reader.release
        for entry in dead:
            release(entry)
        self._went_away(dead)
        new = 0
        for pid in live:
            if pid not in entries:
                entries[pid] = ProcEntry(pid)
                new += 1
        if new:
            self._members_changed = True
        return new

    def _went_away(self, dead: List[ProcEntry]) -> None:
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
        dead: List[ProcEntry] = []
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

    def _next_read(self, e: ProcEntry, now: float) -> float:
        if e.kthread:
            return now + OUTSIDE_PERIOD
        hot = (e.cpu or 0.0) > 0.0 or e.state in ("R", "D") or now - e.first_seen < HOT_NEW
        if hot:
            return 0.0
        if e.unchanged >= ASLEEP_AFTER:
            period = ASLEEP_PERIOD
        elif e.unchanged >= DORMANT_AFTER:
            period = DORMANT_PERIOD
        else:
            period = COLD_PERIOD
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
    reader = ProcReader(_choose_backend(config, backend), hold_limit=0)  # one reading each: nothing to hold
    now, wall = time.monotonic(), time.time()
    entries: Dict[int, ProcEntry] = {}
    for pid in list_pids():
        entry = ProcEntry(pid)
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
