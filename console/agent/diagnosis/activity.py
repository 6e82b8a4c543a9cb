"""Liveness measured by the diagnose op itself: is anything of the benchmark moving right now?

Gathering only (no analysis): the benchmark's processes (its ``match`` and ``entrypoint`` programs and every
process below them) are read twice, at the start of ``gather`` and again at its end, at least
``MEASURE_SECONDS`` apart (the wait overlaps the log reading that happens anyway, and is skipped when there is
no such process): their CPU time (``/proc/PID/stat`` utime + stime) and their I/O counters (``/proc/PID/io``:
rchar, wchar, read_bytes, write_bytes; unreadable without the same user or ptrace rights: then unknown).
At the end, the TCP ports they listen on: ``/proc/PID/fd`` links ``socket:[inode]`` matched to the LISTEN rows
of ``/proc/PID/net/tcp`` and ``tcp6`` (the process's own network namespace).

Nothing here runs in the agent's steady sampling: only a diagnosis pays for it (a few small /proc reads per
process, ``MAX_PIDS`` processes at most).
"""

from __future__ import annotations

import os
import time
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

from ..sample.procfs import read_all, read_bytes
from ..wire.config import compile_patterns
from ..wire.frames import CLK_TCK, parse_stat
from ..wire.procmatch import matches_program

PROC = "/proc"
MEASURE_SECONDS = 1.0  # the readings are at least this far apart
MAX_PIDS = 64
IO_FIELDS = ("rchar", "wchar", "read_bytes", "write_bytes")
EPHEMERAL_DEFAULT = (32768, 60999)


def _alive(rec: Dict[str, Any]) -> bool:
    return (rec.get("state") or "S") not in ("Z", "X", "x")


def targets(benchmark: Dict[str, Any], processes: List[Any], self_pids: Iterable[int]) -> List[int]:
    """The pids to measure: the benchmark's and the entrypoint's processes and all below them (benchmark first)."""
    skip = set(int(p) for p in self_pids)
    match_pats = compile_patterns(benchmark.get("match"))
    entry_pats = compile_patterns(benchmark.get("entrypoint"))
    live = [r for r in processes if int(r["pid"]) not in skip and _alive(r)]
    bench = [int(r["pid"]) for r in live if match_pats and matches_program(r, match_pats)]
    entry = [int(r["pid"]) for r in live if entry_pats and matches_program(r, entry_pats)]
    if not bench and not entry:
        return []
    kids: Dict[int, List[int]] = {}
    for r in live:
        kids.setdefault(int(r.get("ppid") or 0), []).append(int(r["pid"]))
    out: List[int] = []
    seen: Set[int] = set()
    for roots in (bench, entry):
        todo = sorted(roots)
        while todo and len(out) < MAX_PIDS:
            pid = todo.pop(0)
            if pid in seen or pid in skip:
                continue
            seen.add(pid)
            out.append(pid)
            todo.extend(sorted(kids.get(pid, ())))
    return out


def read_counters(pid: int) -> Optional[Dict[str, Any]]:
    """``{"cpu": seconds of CPU used so far, "io": {field: bytes} or None}``; None when the process is gone."""
    stat = read_bytes("%s/%d/stat" % (PROC, pid), 4096)
    parsed = parse_stat(stat, pid) if stat else None
    if parsed is None:
        return None
    io: Optional[Dict[str, int]] = None
    data = read_bytes("%s/%d/io" % (PROC, pid), 4096)
    if data:
        io = {}
        for line in data.splitlines():
            key, _, value = line.partition(b":")
            name = key.strip().decode("ascii", "replace")
            if name in IO_FIELDS:
                try:
                    io[name] = int(value.strip())
                except ValueError:
                    pass
        if not io:
            io = None
    return {"cpu": parsed[4] / CLK_TCK, "start": parsed[5], "io": io}


def _socket_inodes(pid: int) -> Set[str]:
    fd_dir = "%s/%d/fd" % (PROC, pid)
    out: Set[str] = set()
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return out
    for name in names:
        try:
            target = os.readlink(fd_dir + "/" + name)
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(target[8:-1])
    return out


def _listen_table(pid: int) -> Dict[str, int]:
    """inode -> port of the TCP sockets in LISTEN state, as process ``pid``'s network namespace sees them."""
    out: Dict[str, int] = {}
    for name in ("tcp", "tcp6"):
        data = read_all("%s/%d/net/%s" % (PROC, pid, name))  # every page: a busy host lists thousands
        if not data:
            continue
        for line in data.splitlines()[1:]:
            fields = line.split()
            if len(fields) < 10 or fields[3] != b"0A":  # 0A: TCP_LISTEN
                continue
            try:
                port = int(fields[1].rsplit(b":", 1)[1], 16)
            except (IndexError, ValueError):
                continue
            out[fields[9].decode("ascii", "replace")] = port
    return out


def listening(pids: Iterable[int]) -> Dict[int, List[int]]:
    """The TCP ports each process listens on (only processes that listen on one)."""
    tables: Dict[str, Dict[str, int]] = {}
    out: Dict[int, List[int]] = {}
    for pid in pids:
        inodes = _socket_inodes(pid)
        if not inodes:
            continue
        try:
            netns = os.readlink("%s/%d/ns/net" % (PROC, pid))
        except OSError:
            netns = "pid:%d" % pid
        if netns not in tables:
            tables[netns] = _listen_table(pid)
        ports = sorted({tables[netns][i] for i in inodes if i in tables[netns]})
        if ports:
            out[pid] = ports
    return out


def ephemeral_range() -> Tuple[int, int]:
    data = read_bytes(PROC + "/sys/net/ipv4/ip_local_port_range", 128)
    try:
        low, high = (int(x) for x in (data or b"").split()[:2])
        return low, high
    except ValueError:
        return EPHEMERAL_DEFAULT


class Meter:
    """``Meter(pids)`` takes the first reading; ``finish()`` the second (waiting out ``MEASURE_SECONDS``)."""

    def __init__(self, pids: List[int], seconds: float = MEASURE_SECONDS) -> None:
        self.pids = pids
        self.seconds = seconds
        self.started = time.monotonic()
        self.first = {pid: read_counters(pid) for pid in pids}

    def finish(self) -> Dict[str, Any]:
        """The ``activity`` facts: per process the CPU seconds and I/O bytes of the window, and its ports."""
        if not self.pids:
            return {"seconds": 0.0, "procs": [], "ephemeral": list(ephemeral_range())}
        left = self.seconds - (time.monotonic() - self.started)
        if left > 0:
            time.sleep(left)
        second = {pid: read_counters(pid) for pid in self.pids}
        window = max(1e-3, time.monotonic() - self.started)
        ports = listening(self.pids)
        procs: List[Dict[str, Any]] = []
        for pid in self.pids:
            a, b = self.first.get(pid), second.get(pid)
            if a is None or b is None or a.get("start") != b.get("start"):
                continue  # gone (or a new process under an old number)
            io: Optional[Dict[str, int]] = None
            if a.get("io") is not None and b.get("io") is not None:
                io = {k: max(0, b["io"].get(k, 0) - a["io"].get(k, 0)) for k in IO_FIELDS}
            procs.append({"pid": pid, "cpu": round(max(0.0, b["cpu"] - a["cpu"]), 3), "io": io,
                          "listen": ports.get(pid, [])})
        return {"seconds": round(window, 3), "procs": procs, "ephemeral": list(ephemeral_range())}
