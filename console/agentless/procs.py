"""Agentless processes: ``/proc`` (or ``ps``) read with one exec a poll, as the agent's ``procs`` frames.

``procs_command`` runs ``cat /proc/[0-9]*/stat`` plus ``head -v -c`` of every ``cmdline`` and ``wchan`` (only
``cat`` and ``head`` needed, which images without python3 still have, unlike ``ps``): the fields the agent's
``/proc`` backend reads; ``cpu`` is the share of a core between two polls. Without ``/proc``, ``ps`` (``cpu`` is
then the average over the process's life, ``wchan`` null). The poll commands themselves (marked with ``MARK``)
and their children are left out. ``ProcFrames`` sends a full frame first, then upsert/gone with the agent's
resend rules.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Any

from console.agent.wire.frames import (
    PF_KTHREAD,
    RESEND,
    cap_cmdline,
    changed,
    cpu_percent,
    full_procs_frame,
    name_from,
    parse_stat,
    proc_record,
    procs_changes_frame,
    start_epoch,
    structural,
    subtree,
    wchan_text,
)
from console.agent.wire.protocol import ProcRecord
from console.agentless.host import MARK, HostFacts, section_fn, sections


def procs_command(nonce: str, have_proc: bool) -> str:
    if have_proc:
        body = (
            "cd /proc || exit 3; S uptime; cat uptime; "
            "S stat; cat [0-9]*/stat 2>/dev/null; "
            "S cmdline; head -v -c 4096 [0-9]*/cmdline 2>/dev/null; "
            "S wchan; head -v -c 64 [0-9]*/wchan 2>/dev/null; "
        )
    else:
        body = (
            "S now; date +%s; "
            "S ps; ps -eo pid=,ppid=,stat=,pcpu=,rss=,etime=,args= || exit 3; "
            "S comm; ps -eo pid=,comm= 2>/dev/null; "
        )
    return f": {MARK}; " + section_fn(nonce) + body + "S end; exit 0"


_HEAD_RE = re.compile(rb"(?:\A|\n)==> (?:/proc/)?(\d+)/[a-z]+ <==\n")


def _split_head(payload: bytes) -> dict[int, bytes]:
    """``head -v`` output of many ``PID/FILE`` as ``{pid: content}``."""
    parts = _HEAD_RE.split(payload)
    return {int(parts[i]): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


@dataclass
class ProcRow:
    pid: int
    ppid: int
    comm: str
    state: str
    cpu_seconds: float | None  # cumulative CPU time (/proc); None with ps
    pcpu: float | None  # ps: percent over the process's life
    rss: int
    start: float  # epoch
    cmdline: str
    wchan: str | None
    kthread: bool


def parse_proc_snapshot(output: bytes, nonce: str, facts: HostFacts) -> tuple[float | None, list[ProcRow]]:
    """(host uptime, rows) from the ``/proc`` variant of ``procs_command``."""
    uptime = None
    stats: list[bytes] = []
    cmdlines: dict[int, bytes] = {}
    wchans: dict[int, bytes] = {}
    for kind, _args, payload in sections(output, nonce):
        if kind == "uptime":
            try:
                uptime = float(payload.split()[0])
            except (IndexError, ValueError):
                uptime = None
        elif kind == "stat":
            stats = payload.split(b"\n")
        elif kind == "cmdline":
            cmdlines = _split_head(payload)
        elif kind == "wchan":
            wchans = _split_head(payload)
    rows = []
    for line in stats:
        left = line.find(b" (")
        if left < 0 or line.rfind(b")") < 0 or not line[:left].isdigit():
            continue
        pid = int(line[:left])
        st = parse_stat(line, pid, facts.page_size)
        if st is None:
            continue
        comm, state, ppid, flags, ticks, start_ticks, rss, _ = st
        argv = [a.decode("utf-8", "replace") for a in cmdlines.get(pid, b"").rstrip(b"\0").split(b"\0") if a]
        rows.append(ProcRow(
            pid=pid, ppid=ppid, comm=name_from(comm, argv), state=state, cpu_seconds=ticks / facts.clk_tck, pcpu=None,
            rss=rss, start=start_epoch(facts.btime, start_ticks, facts.clk_tck), cmdline=cap_cmdline(" ".join(argv)),
            wchan=wchan_text(wchans.get(pid)), kthread=bool(flags & PF_KTHREAD),
        ))
    return uptime, rows


def parse_etime(text: str) -> int | None:
    """POSIX ``etime``: ``[[dd-]hh:]mm:ss`` -> seconds."""
    days = 0
    if "-" in text:
        d, _, text = text.partition("-")
        if not d.isdigit():
            return None
        days = int(d)
    parts = text.split(":")
    if not 2 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        return None
    seconds = 0
    for p in parts:
        seconds = seconds * 60 + int(p)
    return days * 86400 + seconds


def parse_ps_snapshot(output: bytes, nonce: str) -> tuple[float | None, list[ProcRow]]:
    """(host clock, rows) from the ``ps`` variant of ``procs_command``."""
    now = None
    table: list[str] = []
    comms: dict[int, str] = {}
    for kind, _args, payload in sections(output, nonce):
        text = payload.decode("utf-8", "replace")
        if kind == "now":
            try:
                now = float(text.split()[0])
            except (IndexError, ValueError):
                now = None
        elif kind == "ps":
            table = text.splitlines()
        elif kind == "comm":
            for line in text.splitlines():
                pid_text, _, comm = line.strip().partition(" ")
                if pid_text.isdigit():
                    comms[int(pid_text)] = comm.strip()
    rows = []
    for line in table:
        parts = line.split(None, 6)
        if len(parts) < 6 or not (parts[0].isdigit() and parts[1].isdigit()):
            continue
        pid, ppid = int(parts[0]), int(parts[1])
        try:
            pcpu, rss_kib = float(parts[3]), int(parts[4])
        except ValueError:
            continue
        elapsed = parse_etime(parts[5])
        args = parts[6].strip() if len(parts) > 6 else ""
        comm = comms.get(pid) or (posixpath.basename(args.split(" ", 1)[0]) if args else "")
        kthread = args.startswith("[") and args.endswith("]") and rss_kib == 0  # as ps shows kernel threads
        rows.append(ProcRow(
            pid=pid, ppid=ppid, comm=comm or "?", state=parts[2][:1] or "?",
            cpu_seconds=None, pcpu=round(pcpu, 1), rss=rss_kib * 1024,
            start=float(round((now or 0.0) - (elapsed or 0), 2)), cmdline=cap_cmdline(args), wchan=None,
            kthread=kthread,
        ))
    return now, rows


def _own_pids(rows: list[ProcRow]) -> set[int]:
    """The poll commands (their command line carries MARK) and everything under them."""
    return subtree(((row.pid, row.ppid) for row in rows), [row.pid for row in rows if MARK in row.cmdline])


class ProcFrames:
    """Snapshots -> ``procs`` frame fields: full first (and after ``reset``), then upsert/gone like the agent."""

    def __init__(self) -> None:
        self._full = True
        self._sent: dict[int, ProcRecord] = {}
        self._sent_at: dict[int, float] = {}
        self._ticks: dict[tuple[int, float], tuple[float, float]] = {}  # (pid, start) -> (cpu s, host clock)

    def reset(self) -> None:
        self._full = True

    def records(
        self, clock: float | None, rows: list[ProcRow], gpu_mem: dict[int, Any], boot: float = 0.0
    ) -> dict[int, ProcRecord]:
        """Records keyed by pid; ``clock`` is the host's uptime (``/proc``) and ``boot`` its boot time (epoch)."""
        own = _own_pids(rows)
        ticks: dict[tuple[int, float], tuple[float, float]] = {}
        out: dict[int, ProcRecord] = {}
        for row in rows:
            if row.kthread or row.pid in own:
                continue
            cpu = row.pcpu
            if row.cpu_seconds is not None and clock is not None:
                key = (row.pid, row.start)
                ticks[key] = (row.cpu_seconds, clock)
                prev = self._ticks.get(key)  # none: its first reading, the average over its life
                last, since = (prev[0], clock - prev[1]) if prev is not None else (0.0, 0.0)
                cpu = cpu_percent(row.cpu_seconds, last, since, clock - (row.start - boot))
            out[row.pid] = proc_record(
                row.pid, row.ppid, row.comm, row.cmdline, row.state, row.wchan, cpu, row.rss, row.start,
                gpu_mem.get(row.pid),
            )
        if clock is not None:
            self._ticks = ticks
        return out

    def frame(self, records: dict[int, ProcRecord], now: float) -> dict[str, Any] | None:
        if self._full:
            self._full = False
            self._sent = dict(records)
            self._sent_at = dict.fromkeys(records, now)
            return full_procs_frame([records[pid] for pid in sorted(records)])
        upsert = []
        for pid in sorted(records):
            rec, old = records[pid], self._sent.get(pid)
            if (
                old is not None  # held unless structural; then only a change, at most every RESEND s
                and not structural(old, rec["ppid"], rec["start"], rec["gpu_mem"], rec["name"], rec["cmdline"],
                                   rec["state"])
                and (not changed(old, rec["state"], rec["wchan"], rec["cpu"], rec["rss"])
                     or now - self._sent_at.get(pid, 0.0) < RESEND)
            ):
                continue
            self._sent[pid], self._sent_at[pid] = rec, now
            upsert.append(rec)
        gone = sorted(pid for pid in self._sent if pid not in records)
        for pid in gone:
            self._sent.pop(pid, None)
            self._sent_at.pop(pid, None)
        return procs_changes_frame(upsert, gone)
