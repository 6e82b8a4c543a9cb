"""Frame rules shared by the agent's samplers and agentless mode (``console.agentless``): one home for each.

What a ``gpu``, ``procs`` or ``log`` frame holds and when a change is worth sending is decided here, so the
agent (NVML, ``/proc``, open files) and agentless mode (nvidia-smi, ``cat /proc/*/stat``, ``tail`` over SSH)
cannot drift apart; each side only reads its source and keeps its own timing (docs/architecture.md has the
contract, ``protocol.py`` its types).

- GPU: the device record, the lost-device record, the static fields a ``full`` frame adds, the slim rule of
  the other frames, the frame envelope, GPU memory per pid;
- processes: ``/proc/PID/stat`` parsing, start time, cpu percent, name from comm and argv, the cmdline cap, the
  wchan text, subtree walks, the record, the resend rules (``structural``: at once; ``changed``: at most every
  ``RESEND`` s), the full and change frames;
- logs: the ``log`` frame envelope (the follower rules shared by both sides are in ``loglines.py``).

The process functions sit in the agent's per-process loop: they are the loop's own functions (moved here, not
wrapped), taking plain values, so sharing them costs the agent no extra call.
"""

from __future__ import annotations

import os
import posixpath
from typing import Any, Dict, Iterable, List, Mapping, Optional, Set, Tuple, cast

from .protocol import GpuDevice, GpuProc, ProcRecord

# -- GPUs -------------------------------------------------------------------------------------------------------

STATIC_GPU_FIELDS = ("name", "uuid", "mem_total", "power_limit")  # in full frames only; consumers keep the last
FULL_EVERY = 60.0  # seconds between frames carrying the static fields
STATE_REPEAT = 60.0  # a no_gpu / error frame is repeated (and the GPUs looked for again) at most this often
LOST_RETRY = 30.0  # a lost device is probed again after this many seconds
_SLIM_DROP = frozenset(("lost", "error", "procs", "mig", "health"))  # procs, mig, health: added back when changed
_NO_STATIC: Dict[str, Any] = dict.fromkeys(STATIC_GPU_FIELDS)


def gpu_record(
    index: int,
    util: Optional[int],
    mem_util: Optional[int],
    mem_used: Optional[int],
    temp: Optional[int],
    power: Optional[float],
    sm_clock: Optional[int],
    mem_clock: Optional[int],
    fan: Optional[int],
    procs: List[GpuProc],
) -> GpuDevice:
    """A healthy device's complete record (units: % ints, bytes, degrees C, watts at 0.1 W, MHz)."""
    return {
        "index": index,
        "lost": False,
        "error": None,
        "util": util,
        "mem_util": mem_util,
        "mem_used": mem_used,
        "temp": temp,
        "power": power,
        "sm_clock": sm_clock,
        "mem_clock": mem_clock,
        "fan": fan,
        "procs": procs,
    }


def lost_gpu_record(index: int, error: Optional[str]) -> GpuDevice:
    """A lost device's record: always complete (``lost``, ``error``, the dynamic fields null, no procs)."""
    return {
        "index": index,
        "lost": True,
        "error": error,
        "util": None,
        "mem_util": None,
        "mem_used": None,
        "temp": None,
        "power": None,
        "sm_clock": None,
        "mem_clock": None,
        "fan": None,
        "procs": [],
    }


def with_static(record: GpuDevice, static: Optional[Mapping[str, Any]]) -> GpuDevice:
    """``record`` with the static fields of a ``full`` frame (``STATIC_GPU_FIELDS``; null when unknown)."""
    s = _NO_STATIC if static is None else static
    record["name"] = s.get("name")
    record["uuid"] = s.get("uuid")
    record["mem_total"] = s.get("mem_total")
    record["power_limit"] = s.get("power_limit")
    return record


def static_of(record: Mapping[str, Any]) -> Dict[str, Any]:
    """The static fields of a record that has them."""
    return {key: record.get(key) for key in STATIC_GPU_FIELDS}


def slim_gpu_record(
    record: GpuDevice, sent_procs: Optional[List[GpuProc]], sent_mig: Optional[List[Any]] = None,
    sent_health: Optional[Mapping[str, Any]] = None,
) -> GpuDevice:
    """A record in a frame that is not ``full``: a healthy device leaves out ``lost`` (false), ``error`` (null),
    every null field, ``procs`` when it equals ``sent_procs`` (the list the last frame carried), ``mig`` when it
    equals ``sent_mig`` and ``health`` when it equals ``sent_health``; a lost device's record is complete. The
    caller remembers them as sent."""
    if record.get("lost"):
        return record
    out = {k: v for k, v in record.items() if v is not None and k not in _SLIM_DROP}
    procs = record.get("procs")
    if procs != sent_procs:
        out["procs"] = procs
    mig = record.get("mig")
    if mig is not None and mig != sent_mig:
        out["mig"] = mig
    health = record.get("health")
    if health is not None and health != sent_health:
        out["health"] = health
    return cast(GpuDevice, out)  # a subset of a GpuDevice's keys (index is never null) is a GpuDevice


def gpu_frame(
    state: str,
    simulated: bool,
    driver: Optional[str],
    message: Optional[str],
    full: bool,
    devices: List[GpuDevice],
    pid_ns: Optional[bool] = None,
    mapping: Optional[str] = None,
) -> Dict[str, Any]:
    """A complete ``gpu`` frame's fields: the first, the periodic full ones, and every one whose state is not ok;
    ``pid_ns`` and ``mapping`` (how GPU processes are mapped, ``gpumap.py``) when known."""
    frame = {
        "state": state,
        "simulated": simulated,
        "driver": driver,
        "message": message,
        "full": full,
        "devices": devices,
    }
    if pid_ns is not None:
        frame["pid_ns"] = pid_ns
    if mapping is not None:
        frame["mapping"] = mapping
    return frame


def slim_gpu_frame(devices: List[GpuDevice], mapping: Optional[str] = None) -> Dict[str, Any]:
    """A ``gpu`` frame of state ok that is not full: ``simulated``/``driver``/``message`` left out (kept);
    ``mapping`` only when it changed since the last frame that carried it."""
    frame: Dict[str, Any] = {"state": "ok", "full": False, "devices": devices}
    if mapping is not None:
        frame["mapping"] = mapping
    return frame


def xid_frame(event: Mapping[str, Any]) -> Dict[str, Any]:
    """An ``xid`` frame's fields (``protocol.XidFrame``) for one event ``{gpu, xid, time, uuid?, seen_before?}``."""
    frame = {"gpu": event["gpu"], "xid": event["xid"], "time": event["time"]}
    for key in ("uuid", "seen_before"):
        if event.get(key):
            frame[key] = event[key]
    return frame


def sum_memory_by_pid(proc_lists: Iterable[List[GpuProc]]) -> Dict[int, Optional[int]]:
    """GPU memory per local pid summed over devices (``[{pid, mem}]`` each); None: on a GPU, amount unknown
    (the members of a group entry: which of them holds how much is not known; an entry with no local process
    counts for nobody)."""
    mem: Dict[int, Optional[int]] = {}
    for procs in proc_lists:
        for proc in procs:
            pid, used = proc["pid"], proc["mem"]
            if pid is None:
                for member in proc.get("group") or ():
                    mem.setdefault(member, None)
            elif used is None:
                mem.setdefault(pid, None)
            else:
                mem[pid] = (mem.get(pid) or 0) + used
    return mem


# -- processes --------------------------------------------------------------------------------------------------

MAX_CMDLINE = 1024
PF_KTHREAD = 0x00200000  # /proc/PID/stat flags: a kernel thread (left out of the frames)
CPU_STEP = 1.0  # percentage points of cpu worth a resend
RSS_STEP = 1024 * 1024  # bytes of rss worth a resend (or 5 %)
RESEND = 5.0  # cpu/rss/wchan-only changes (and R<->S flips) of one process: at most one upsert per RESEND s

try:
    CLK_TCK = float(os.sysconf("SC_CLK_TCK"))
    PAGE_SIZE = int(os.sysconf("SC_PAGE_SIZE"))
except (AttributeError, ValueError, OSError):
    CLK_TCK, PAGE_SIZE = 100.0, 4096

Stat = Tuple[str, str, int, int, int, float, int, int]


def parse_stat(data: bytes, pid: int, page_size: int = PAGE_SIZE) -> Optional[Stat]:
    """(comm, state, ppid, flags, cpu_ticks, start_ticks, rss_bytes, pid) from a /proc/PID/stat; None if garbled.

    ``page_size`` is the host's (agentless mode reads another machine's /proc)."""
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
            int(fields[21]) * page_size,
            pid,
        )
    except (IndexError, ValueError):
        return None


def start_epoch(btime: float, start_ticks: float, clk_tck: float = CLK_TCK) -> float:
    """A process's start (epoch seconds, 0.01 s) from its stat's start ticks and the boot time."""
    return round(btime + start_ticks / clk_tck, 2)


def cpu_percent(seconds: float, last_seconds: float, since_last: float, age: float) -> float:
    """Percent of one core: over the ``since_last`` seconds since the reading that said ``last_seconds`` (when
    > 0), else the average over the process's ``age`` (its first reading); 0.1 point."""
    if since_last > 0.0:
        value = (seconds - last_seconds) / since_last * 100.0
    else:
        value = seconds / age * 100.0 if age > 0.5 else 0.0
    return round(max(0.0, value), 1)


def cap_cmdline(text: str) -> str:
    return text if len(text) <= MAX_CMDLINE else text[: MAX_CMDLINE - 1] + "…"


def name_from(comm: str, argv: List[str]) -> str:
    """Like psutil: comm is cut at 15 chars; extend it from argv[0] when that matches."""
    if len(comm) >= 15 and argv:
        base = posixpath.basename(argv[0])
        if base.startswith(comm):
            return base
    return comm


def wchan_text(data: Optional[bytes]) -> Optional[str]:
    """A /proc/PID/wchan's content as the record's ``wchan``: None when unknown (empty, "0", unreadable)."""
    text = data.strip().decode("ascii", "replace") if data else ""
    return None if text in ("", "0") else text


def subtree(links: Iterable[Tuple[int, int]], roots: Iterable[int]) -> Set[int]:
    """``roots`` and every process under them, from ``(pid, ppid)`` pairs."""
    children: Dict[int, List[int]] = {}
    for pid, ppid in links:
        children.setdefault(ppid, []).append(pid)
    out: Set[int] = set()
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in out:
            continue
        out.add(pid)
        todo.extend(children.get(pid, ()))
    return out


def proc_record(
    pid: int,
    ppid: int,
    name: str,
    cmdline: str,
    state: str,
    wchan: Optional[str],
    cpu: Optional[float],
    rss: int,
    start: float,
    gpu_mem: Optional[int],
) -> ProcRecord:
    return {
        "pid": pid,
        "ppid": ppid,
        "name": name,
        "cmdline": cmdline,
        "state": state,
        "wchan": wchan,
        "cpu": cpu,
        "rss": rss,
        "start": start,
        "gpu_mem": gpu_mem,
    }


def structural(
    old: ProcRecord, ppid: int, start: float, gpu_mem: Optional[int], name: str, cmdline: str, state: str
) -> bool:
    """A change sent at once: identity, parent, GPU memory, or a state beyond running/sleeping."""
    if (
        old["ppid"] != ppid
        or old["start"] != start
        or old["gpu_mem"] != gpu_mem
        or old["name"] != name
        or old["cmdline"] != cmdline
    ):
        return True
    return old["state"] != state and not (old["state"] in "RS" and state in "RS")


def changed(old: ProcRecord, state: str, wchan: Optional[str], cpu: Optional[float], rss: Optional[int]) -> bool:
    """Any change worth a record once RESEND has passed (identity and GPU memory are checked before)."""
    if old["state"] != state or old["wchan"] != wchan:
        return True
    oc, nc = old["cpu"] or 0.0, cpu or 0.0
    if (oc == 0.0) != (nc == 0.0) or abs(oc - nc) >= CPU_STEP:
        return True
    old_rss = old["rss"] or 0
    return abs(old_rss - (rss or 0)) > max(RSS_STEP, old_rss * 0.05)


def full_procs_frame(records: List[ProcRecord]) -> Dict[str, Any]:
    """The whole tree (the first frame, and after ``full_procs``)."""
    return {"full": True, "procs": records}


def procs_changes_frame(upsert: List[ProcRecord], gone: List[int]) -> Optional[Dict[str, Any]]:
    """Changed and new records, and the pids that went away; None when there is nothing to send."""
    if not upsert and not gone:
        return None
    return {"full": False, "upsert": upsert, "gone": gone}


# -- logs -------------------------------------------------------------------------------------------------------


def log_frame(
    f: Any,
    lines: List[str],
    first_line: int,
    backlog: bool = False,
    event: Optional[str] = None,
    partial: bool = False,
    skipped: int = 0,
) -> Dict[str, Any]:
    """A ``log`` frame's fields for file ``f`` (anything with a ``path``); ``partial``/``skipped`` only when set."""
    frame: Dict[str, Any] = {
        "path": f.path, "lines": lines, "first_line": first_line, "backlog": backlog, "event": event,
    }
    if partial:
        frame["partial"] = True
    if skipped:
        frame["skipped"] = skipped
    return frame
