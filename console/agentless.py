"""Agentless mode: the agent's frames built from plain commands run over SSH (no python3 on the host).

Pure: this module builds the shell commands (fixed text, every path through ``shlex.quote``) and turns
their output into the same ``hello``/``gpu``/``procs``/``log``/``heartbeat`` frames the agent sends
(docs/architecture.md); ``console.link`` runs the commands on exec channels and delivers the frames.

- host facts (once per connection): hostname, clock ticks, page size, boot time, whether ``/proc`` is there;
- GPUs: ``nvidia-smi --query-gpu=... --format=csv,noheader,nounits`` plus ``--query-compute-apps`` for the
  per-process memory. ``[N/A]``/``[Not Supported]`` are null, MiB become bytes. A row whose utilization or
  memory reads ``[Unknown Error]``, ``ERR!``, ``[GPU is lost]``... and a line "Unable to determine the device
  handle for GPU...: ..." in place of a row are lost devices (a line takes the next index). No nvidia-smi,
  "NVIDIA-SMI has failed..." or "No devices were found" is state ``no_gpu``: one frame, then one a minute;
- processes: ``cat /proc/[0-9]*/stat`` (+ ``head -v -c`` of ``cmdline`` and ``wchan``), the fields the agent's
  ``/proc`` backend reads (cpu is the share of a core between two polls); without ``/proc``, ``ps``.
  The poll commands themselves (marked with ``MARK``) and their children are left out;
- logs: the configured ``logs`` only (no ``watch_dirs`` discovery): one exec a poll stats every file and
  sends the bytes appended since the last poll (``tail -c +OFFSET | head -c N``); ``created``/``missing``/
  ``rotated``/``truncated`` as the agent reports them (a rotated file's last lines are not drained).
"""

from __future__ import annotations

import posixpath
import re
import secrets
import shlex
from collections import deque
from dataclasses import dataclass
from typing import Any

from console.agent.gpu import FULL_EVERY, LOST_RETRY, STATE_REPEAT, sum_memory_by_pid
from console.agent.logs import BATCH_LINES, backlog_frame, batch_frames, clean_line, keep_partial, log_frame
from console.agent.procs import CPU_STEP, MAX_CMDLINE, PF_KTHREAD, RESEND, RSS_STEP

AGENT_VERSION = "agentless"
MARK = "fleet-console-agentless"  # in every command this module builds: its processes are left out of `procs`
MIN_INTERVAL = 2.0  # seconds between polls, whatever the instance's interval
MAX_INTERVAL = 10.0  # heartbeats come with the polls: keep them well inside the link's silence timeout
NEEDS_PYTHON = "needs python3 on the host (agentless mode)"
OPS = ("full_procs", "ping", "stop")  # answered without python; every other op fails with NEEDS_PYTHON
MIN_PYTHON = (3, 8)
MIB = 1024 * 1024
GPU_TIMEOUT = 15.0  # a hung nvidia-smi (a GPU falling off the bus) is a GPU error, not a dead link
POLL_TIMEOUT = 20.0  # procs and logs: past this the poll failed and the session reconnects
LOG_READ_MAX = 1 << 20  # bytes read per file and poll (the rest comes with the next polls)
LOG_TAIL_BYTES = 512 * 1024  # read from the end of an existing file for its backlog

GPU_FIELDS = (
    "index", "name", "uuid", "utilization.gpu", "utilization.memory", "memory.used", "memory.total",
    "temperature.gpu", "power.draw", "power.limit", "clocks.sm", "clocks.mem", "fan.speed", "driver_version",
)
APP_FIELDS = ("gpu_uuid", "pid", "used_memory")
_NULLS = frozenset(("", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown]", "unknown"))
_ERROR_RE = re.compile(r"err!|unknown error|gpu is lost|requires reset", re.I)
_LOST_LINE_RE = re.compile(r"unable to determine the device handle|gpu is lost|requires reset", re.I)
_NO_GPU_RE = re.compile(
    r"nvidia-smi has failed|couldn't communicate with the nvidia driver|no devices were found|"
    r"driver not loaded|nvml shared library not found|command not found",
    re.I,
)


# -- sections: commands print "\n@@NONCE kind args\n" before each part of their output ------------------------


def new_nonce() -> str:
    return secrets.token_hex(8)


def _section_fn(nonce: str) -> str:
    return "S() { printf '\\n@@%s %s\\n' " + shlex.quote(nonce) + ' "$*"; }; '


def sections(output: bytes, nonce: str) -> list[tuple[str, list[str], bytes]]:
    """``(kind, args, payload)`` for each section of a command's output, in order."""
    out = []
    for part in (b"\n" + output).split(b"\n@@" + nonce.encode() + b" ")[1:]:
        head, _, payload = part.partition(b"\n")
        words = head.decode("utf-8", "replace").split()
        if words:
            out.append((words[0], words[1:], payload))
    return out


# -- host facts -----------------------------------------------------------------------------------------------


def probe_command(python: str, agent_path: str) -> str:
    """What the link runs first: is ``python`` there and 3.8+, is the agent uploaded, the host's name."""
    py = shlex.quote(python)
    version = shlex.quote('import sys; sys.stdout.write("%d.%d.%d" % tuple(sys.version_info[:3]))')
    return (
        f": {MARK}; "
        f"if command -v {py} >/dev/null 2>&1; then "
        f"if v=$({py} -c {version} 2>/dev/null); then echo \"@@fleet python $v\"; "
        "else echo '@@fleet python broken'; fi; "
        "else echo '@@fleet python none'; fi; "
        f"test -s {shlex.quote(agent_path)} && echo '@@fleet agent present'; "
        'echo "@@fleet host $(uname -n 2>/dev/null)"; '
        "exit 0"
    )


@dataclass
class HostProbe:
    python: str  # "ok" | "none" | "broken" | "old" | "unknown" (the probe printed nothing readable)
    python_version: str | None
    agent_present: bool
    host: str

    @property
    def python_ok(self) -> bool:
        return self.python == "ok"


def parse_probe(text: str) -> HostProbe:
    python, version, present, host = "unknown", None, False, ""
    for line in text.splitlines():
        if not line.startswith("@@fleet "):
            continue
        words = line.split()[1:]
        if words[:1] == ["python"] and len(words) >= 2:
            value = words[1]
            if value in ("none", "broken"):
                python = value
            else:
                version = value
                try:
                    parts = tuple(int(x) for x in value.split(".")[:2])
                except ValueError:
                    python = "broken"
                else:
                    python = "ok" if parts >= MIN_PYTHON else "old"
        elif words[:2] == ["agent", "present"]:
            present = True
        elif words[:1] == ["host"]:
            host = " ".join(words[1:])
    return HostProbe(python, version, present, host)


def agentless_reason(probe: HostProbe, python: str) -> str:
    """Why this host runs without the agent, for the link's status detail."""
    if probe.python == "old":
        return f"{python} on the host is {probe.python_version}, the agent needs {'.'.join(map(str, MIN_PYTHON))}+"
    if probe.python == "broken":
        return f"{python} on the host does not run"
    if python == "python3":
        return "no python3 on the host"
    return f"no python3 on the host: {python} not found"


FACTS_COMMAND = (
    f": {MARK}; "
    'echo "@@fleet clk $(getconf CLK_TCK 2>/dev/null)"; '
    'echo "@@fleet page $(getconf PAGESIZE 2>/dev/null || getconf PAGE_SIZE 2>/dev/null)"; '
    "if [ -r /proc/self/stat ] && [ -r /proc/uptime ]; then echo '@@fleet proc yes'; "
    "sed -n 's/^btime /@@fleet btime /p' /proc/stat 2>/dev/null; fi; "
    "exit 0"
)


@dataclass
class HostFacts:
    clk_tck: float = 100.0
    page_size: int = 4096
    have_proc: bool = False
    btime: float = 0.0


def parse_facts(text: str) -> HostFacts:
    facts = HostFacts()
    for line in text.splitlines():
        words = line.split()
        if len(words) < 3 or words[0] != "@@fleet":
            continue
        key, value = words[1], words[2]
        try:
            if key == "clk" and int(value) > 0:
                facts.clk_tck = float(int(value))
            elif key == "page" and int(value) > 0:
                facts.page_size = int(value)
            elif key == "btime":
                facts.btime = float(value)
        except ValueError:
            continue
        if key == "proc" and value == "yes":
            facts.have_proc = True
    return facts


def poll_interval(config: dict[str, Any]) -> float:
    try:
        interval = float(config.get("interval") or 1.0)
    except (TypeError, ValueError):
        interval = 1.0
    return min(MAX_INTERVAL, max(MIN_INTERVAL, interval))


# -- GPUs -----------------------------------------------------------------------------------------------------


def gpu_command(nonce: str) -> str:
    query = ",".join(GPU_FIELDS)
    apps = ",".join(APP_FIELDS)
    return (
        f": {MARK}; " + _section_fn(nonce)
        + "if command -v nvidia-smi >/dev/null 2>&1; then "
        f"S gpu; nvidia-smi --query-gpu={query} --format=csv,noheader,nounits 2>&1; S rc $?; "
        f"S apps; nvidia-smi --query-compute-apps={apps} --format=csv,noheader,nounits 2>&1; S rc $?; "
        "else S missing; fi; S end; exit 0"
    )


def _value(text: str) -> str | None:
    text = text.strip()
    return None if text.lower() in _NULLS else text


def _is_error(text: str | None) -> bool:
    return bool(text) and bool(_ERROR_RE.search(text or ""))


def _num(text: str | None) -> float | None:
    if text is None or _is_error(text):
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _int(text: str | None) -> int | None:
    value = _num(text)
    return None if value is None else round(value)


def _mib(text: str | None) -> int | None:
    value = _num(text)
    return None if value is None else int(value * MIB)


def _watts(text: str | None) -> float | None:
    value = _num(text)
    return None if value is None else round(value, 1)


@dataclass
class GpuReading:
    """One nvidia-smi reading: ``state`` "ok" | "no_gpu" | "error", devices (records with static fields)."""

    state: str
    message: str | None
    driver: str | None
    devices: list[dict[str, Any]]


def _lost_record(index: int, error: str) -> dict[str, Any]:
    return {
        "index": index, "lost": True, "error": error, "util": None, "mem_util": None, "mem_used": None,
        "temp": None, "power": None, "sm_clock": None, "mem_clock": None, "fan": None, "procs": [],
    }


def parse_gpu_rows(text: str) -> tuple[list[dict[str, Any]], str | None, list[str]]:
    """Device records (static fields included) from ``--query-gpu`` CSV; (records, driver, other lines)."""
    records: list[dict[str, Any]] = []
    other: list[str] = []
    driver = None
    n = len(GPU_FIELDS)
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        parts = [p.strip() for p in line.split(",")]
        index = parts[0] if parts else ""
        if len(parts) < n or not index.isdigit():
            if _LOST_LINE_RE.search(line):  # "Unable to determine the device handle for GPU...": the next index
                nxt = records[-1]["index"] + 1 if records else 0
                records.append(dict(_lost_record(nxt, line), name=None, uuid=None, mem_total=None, power_limit=None))
            else:
                other.append(line)
            continue
        extra = len(parts) - n  # a name with commas in it
        name = ",".join(parts[1 : 2 + extra]).strip()
        v = [_value(p) for p in [parts[0], name, *parts[2 + extra :]]]
        (idx, name_v, uuid, util, mem_util, used, total, temp, power, plimit, sm, memclk, fan, drv) = v
        static = {
            "name": None if _is_error(name_v) else name_v,
            "uuid": None if _is_error(uuid) else uuid,
            "mem_total": _mib(total),
            "power_limit": _watts(plimit),
        }
        if drv and not _is_error(drv):
            driver = drv
        broken = ["%s %s" % (f, val) for f, val in (("utilization.gpu", util), ("memory.used", used)) if _is_error(val)]
        if broken:
            record = _lost_record(int(index), "nvidia-smi reports " + ", ".join(broken))
        else:
            record = {
                "index": int(idx or index),
                "lost": False,
                "error": None,
                "util": _int(util),
                "mem_util": _int(mem_util),
                "mem_used": _mib(used),
                "temp": _int(temp),
                "power": _watts(power),
                "sm_clock": _int(sm),
                "mem_clock": _int(memclk),
                "fan": _int(fan),
                "procs": [],
            }
        record.update(static)
        records.append(record)
    return records, driver, other


def parse_compute_apps(text: str) -> dict[str, list[dict[str, Any]]]:
    """``{gpu uuid: [{pid, mem (bytes|None)}]}`` from ``--query-compute-apps`` CSV (other lines ignored)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for raw in text.splitlines():
        parts = [p.strip() for p in raw.split(",")]
        if len(parts) != len(APP_FIELDS) or not parts[1].isdigit():
            continue
        out.setdefault(parts[0], []).append({"pid": int(parts[1]), "mem": _mib(_value(parts[2]))})
    return out


def parse_gpu_output(output: bytes, nonce: str) -> GpuReading:
    """The reading from ``gpu_command``'s output."""
    gpu_text, apps_text, rc = None, "", None
    for kind, args, payload in sections(output, nonce):
        text = payload.decode("utf-8", "replace")
        if kind == "missing":
            return GpuReading("no_gpu", "nvidia-smi not found on the host", None, [])
        if kind == "gpu":
            gpu_text = text
        elif kind == "apps":
            apps_text = text
        elif kind == "rc" and rc is None and args and args[0].lstrip("-").isdigit():
            rc = int(args[0])
    if gpu_text is None:
        return GpuReading("error", "nvidia-smi gave no answer", None, [])
    records, driver, other = parse_gpu_rows(gpu_text)
    if not records:
        message = " ".join(other)[:300] or ("nvidia-smi exited with status %s" % rc)
        if _NO_GPU_RE.search(message) or rc == 127:
            return GpuReading("no_gpu", message, None, [])
        return GpuReading("error", message, None, [])
    apps = parse_compute_apps(apps_text)
    for record in records:
        if not record["lost"]:
            record["procs"] = apps.get(record.get("uuid") or "", [])
    return GpuReading("ok", None, driver, records)


_STATIC = ("name", "uuid", "mem_total", "power_limit")


class GpuFrames:
    """Readings -> ``gpu`` frame fields as the agent's sampler sends them (full / slim / no_gpu once a minute)."""

    def __init__(self) -> None:
        self.state = "no_gpu"
        self.message: str | None = None
        self.driver: str | None = None
        self._last_state: tuple[str, str | None] | None = None
        self._next_state_frame = 0.0
        self._next_full = 0.0
        self._next_poll = 0.0
        self._static: dict[int, dict[str, Any]] = {}
        self._lost: set[int] = set()
        self._sent_procs: dict[int, list[dict[str, Any]]] = {}
        self.mem_by_pid: dict[int, int | None] = {}

    def due(self, now: float) -> bool:
        """Whether nvidia-smi should run now (every poll while ok; once a minute without GPUs; less when hung)."""
        return now >= self._next_poll

    def timed_out(self, now: float, seconds: float) -> dict[str, Any] | None:
        self._next_poll = now + LOST_RETRY
        return self.feed(GpuReading("error", "nvidia-smi did not answer within %g s" % seconds, None, []), now)

    def feed(self, reading: GpuReading, now: float) -> dict[str, Any] | None:
        """The frame for a reading (None when nothing needs sending)."""
        if self._next_poll <= now:
            self._next_poll = 0.0 if reading.state == "ok" else now + STATE_REPEAT
        self.state, self.message = reading.state, reading.message
        if reading.driver:
            self.driver = reading.driver
        if reading.state != "ok":
            self.mem_by_pid = {}
            key = (reading.state, reading.message)
            if key == self._last_state and now < self._next_state_frame:
                return None
            self._last_state, self._next_state_frame = key, now + STATE_REPEAT
            self._next_full = 0.0  # when the GPUs come back, the first frame is full
            return self._frame(False, [])
        self._last_state = None
        full = now >= self._next_full
        records = []
        lost_now = set()
        for dev in reading.devices:
            index = dev["index"]
            static = {k: dev.get(k) for k in _STATIC}
            if dev["lost"]:
                lost_now.add(index)
            else:
                if index in self._lost or index not in self._static:
                    full = True  # a device that came (back): static fields again for everyone
                self._static[index] = static
            records.append({k: v for k, v in dev.items() if k not in _STATIC})
        self._lost = lost_now
        self.mem_by_pid = sum_memory_by_pid(rec["procs"] for rec in records)
        if full:
            self._next_full = now + FULL_EVERY
            for rec in records:
                rec.update(self._static.get(rec["index"]) or dict.fromkeys(_STATIC))
                self._sent_procs[rec["index"]] = rec["procs"]
            return self._frame(True, records)
        slim = []
        for rec in records:
            if rec["lost"]:
                self._sent_procs[rec["index"]] = rec["procs"]
                slim.append(rec)
                continue
            out = {k: v for k, v in rec.items() if v is not None and k not in ("lost", "error", "procs")}
            if rec["procs"] != self._sent_procs.get(rec["index"]):
                out["procs"] = self._sent_procs[rec["index"]] = rec["procs"]
            slim.append(out)
        return {"state": "ok", "full": False, "devices": slim}

    def _frame(self, full: bool, devices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "state": self.state,
            "simulated": False,
            "driver": self.driver,
            "message": self.message,
            "full": full,
            "devices": devices,
        }


# -- processes ------------------------------------------------------------------------------------------------


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
    return f": {MARK}; " + _section_fn(nonce) + body + "S end; exit 0"


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


def _cap(text: str) -> str:
    return text if len(text) <= MAX_CMDLINE else text[: MAX_CMDLINE - 1] + "…"


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
        right = line.rfind(b")")
        left = line.find(b" (")
        if right < 0 or left < 0 or not line[:left].isdigit():
            continue
        fields = line[right + 2 :].split()
        try:
            pid = int(line[:left])
            state = fields[0].decode("ascii", "replace")
            ppid, flags = int(fields[1]), int(fields[6])
            ticks = int(fields[11]) + int(fields[12])
            start_ticks = float(fields[19])
            rss = int(fields[21]) * facts.page_size
        except (IndexError, ValueError):
            continue
        comm = line[left + 2 : right].decode("utf-8", "replace")
        argv = [a.decode("utf-8", "replace") for a in cmdlines.get(pid, b"").rstrip(b"\0").split(b"\0") if a]
        name = comm
        if len(comm) >= 15 and argv and posixpath.basename(argv[0]).startswith(comm):
            name = posixpath.basename(argv[0])
        wchan = wchans.get(pid, b"").strip().decode("ascii", "replace")
        rows.append(ProcRow(
            pid=pid, ppid=ppid, comm=name, state=state, cpu_seconds=ticks / facts.clk_tck, pcpu=None, rss=rss,
            start=round(facts.btime + start_ticks / facts.clk_tck, 2), cmdline=_cap(" ".join(argv)),
            wchan=None if wchan in ("", "0") else wchan,
            kthread=bool(flags & PF_KTHREAD),
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
                pid, _, comm = line.strip().partition(" ")
                if pid.isdigit():
                    comms[int(pid)] = comm.strip()
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
            start=float(round((now or 0.0) - (elapsed or 0), 2)), cmdline=_cap(args), wchan=None, kthread=kthread,
        ))
    return now, rows


def _own_pids(rows: list[ProcRow]) -> set[int]:
    """The poll commands (their command line carries MARK) and everything under them."""
    children: dict[int, list[int]] = {}
    for row in rows:
        children.setdefault(row.ppid, []).append(row.pid)
    todo = [row.pid for row in rows if MARK in row.cmdline]
    out: set[int] = set()
    while todo:
        pid = todo.pop()
        if pid not in out:
            out.add(pid)
            todo.extend(children.get(pid, ()))
    return out


def _structural(old: dict[str, Any], new: dict[str, Any]) -> bool:
    for key in ("ppid", "start", "gpu_mem", "name", "cmdline"):
        if old[key] != new[key]:
            return True
    return old["state"] != new["state"] and not (old["state"] in "RS" and new["state"] in "RS")


def _changed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    if old["state"] != new["state"] or old["wchan"] != new["wchan"]:
        return True
    oc, nc = old["cpu"] or 0.0, new["cpu"] or 0.0
    if (oc == 0.0) != (nc == 0.0) or abs(oc - nc) >= CPU_STEP:
        return True
    return abs(old["rss"] - new["rss"]) > max(RSS_STEP, old["rss"] * 0.05)


class ProcFrames:
    """Snapshots -> ``procs`` frame fields: full first (and after ``reset``), then upsert/gone like the agent."""

    def __init__(self) -> None:
        self._full = True
        self._sent: dict[int, dict[str, Any]] = {}
        self._sent_at: dict[int, float] = {}
        self._ticks: dict[tuple[int, float], tuple[float, float]] = {}  # (pid, start) -> (cpu s, host clock)

    def reset(self) -> None:
        self._full = True

    def records(
        self, clock: float | None, rows: list[ProcRow], gpu_mem: dict[int, Any], boot: float = 0.0
    ) -> dict[int, dict[str, Any]]:
        """Records keyed by pid; ``clock`` is the host's uptime (``/proc``) and ``boot`` its boot time (epoch)."""
        own = _own_pids(rows)
        ticks: dict[tuple[int, float], tuple[float, float]] = {}
        out = {}
        for row in rows:
            if row.kthread or row.pid in own:
                continue
            cpu = row.pcpu
            if row.cpu_seconds is not None and clock is not None:
                key = (row.pid, row.start)
                ticks[key] = (row.cpu_seconds, clock)
                prev = self._ticks.get(key)
                if prev is not None and clock > prev[1]:
                    cpu = (row.cpu_seconds - prev[0]) / (clock - prev[1]) * 100.0
                else:  # first reading: the average over the process's life, as the agent does
                    age = clock - (row.start - boot)
                    cpu = row.cpu_seconds / age * 100.0 if age > 0.5 else 0.0
                cpu = round(max(0.0, cpu), 1)
            out[row.pid] = {
                "pid": row.pid, "ppid": row.ppid, "name": row.comm, "cmdline": row.cmdline, "state": row.state,
                "wchan": row.wchan, "cpu": cpu, "rss": row.rss, "start": row.start, "gpu_mem": gpu_mem.get(row.pid),
            }
        if clock is not None:
            self._ticks = ticks
        return out

    def frame(self, records: dict[int, dict[str, Any]], now: float) -> dict[str, Any] | None:
        if self._full:
            self._full = False
            self._sent = dict(records)
            self._sent_at = dict.fromkeys(records, now)
            return {"full": True, "procs": [records[pid] for pid in sorted(records)]}
        upsert = []
        for pid in sorted(records):
            rec, old = records[pid], self._sent.get(pid)
            held = old is not None and not _structural(old, rec)
            if held and (not _changed(old, rec) or now - self._sent_at.get(pid, 0.0) < RESEND):
                continue
            self._sent[pid], self._sent_at[pid] = rec, now
            upsert.append(rec)
        gone = sorted(pid for pid in self._sent if pid not in records)
        for pid in gone:
            self._sent.pop(pid, None)
            self._sent_at.pop(pid, None)
        if not upsert and not gone:
            return None
        return {"full": False, "upsert": upsert, "gone": gone}


# -- logs -----------------------------------------------------------------------------------------------------


class _RemoteFile:
    def __init__(self, path: str) -> None:
        self.path = path
        self.opened = False  # found at least once since the start or the last reset
        self.ident = ""  # "dev:inode" from stat, "-" when stat is not there
        self.offset = 0
        self.line_no = 0
        self.partial = b""
        self.partial_since = 0.0
        self.partial_sent: str | None = None
        self.partial_sent_at = 0.0
        self.pending_event: str | None = None
        self.missing_reported = False

    def reset(self) -> None:
        self.opened = False
        self.ident = ""
        self.offset = self.line_no = 0
        self.partial = b""
        self.partial_since = 0.0
        self.partial_sent = None


class RemoteLogs:
    """The configured logs, followed with one exec a poll: ``command(nonce)`` then ``parse(output, nonce, now)``."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.max_chars = int(config.get("max_line_chars", 4096))
        self.backlog_lines = int(config.get("backlog_lines", 200))
        paths = config.get("logs") or []
        if isinstance(paths, str):
            paths = [paths]
        self.files = [_RemoteFile(posixpath.normpath(str(p))) for p in dict.fromkeys(paths)]
        self._started = False

    def command(self, nonce: str) -> str | None:
        if not self.files:
            return None
        parts = [f": {MARK}; ", _section_fn(nonce)]
        for i, f in enumerate(self.files):
            q = shlex.quote(f.path)
            backlog = not f.opened and f.pending_event is None
            parts.append(
                f"if s=$(stat -L -c '%d:%i %s' -- {q} 2>/dev/null); then :; "
                f"elif [ -r {q} ]; then s=\"- $(wc -c < {q})\"; else s=missing; fi; "
                f"S st {i} $s; set -- $s; "
            )
            if backlog:  # newlines up to the size, then the last bytes before it
                parts.append(
                    'if [ "$1" != missing ]; then '
                    f"S count {i} $(head -c \"$2\" -- {q} | wc -l); "
                    f"t=$2; [ \"$t\" -gt {LOG_TAIL_BYTES} ] && t={LOG_TAIL_BYTES}; "
                    f"S tail {i} $(($2 - t)); "
                    f"[ \"$t\" -gt 0 ] && tail -c +$(($2 - t + 1)) -- {q} | head -c \"$t\"; "
                    "fi; "
                )
            else:  # from the offset when it is the same file and not shorter, else from the start
                ident = shlex.quote(f.ident or "none")
                parts.append(
                    'if [ "$1" != missing ]; then '
                    f'if [ "$1" = {ident} ] && [ "$2" -ge {f.offset} ]; then o={f.offset}; else o=0; fi; '
                    f"n=$(($2 - o)); [ \"$n\" -gt {LOG_READ_MAX} ] && n={LOG_READ_MAX}; "
                    f"S data {i} $o; [ \"$n\" -gt 0 ] && tail -c +$((o + 1)) -- {q} | head -c \"$n\"; "
                    "fi; "
                )
        parts.append("S end; exit 0")
        return "".join(parts)

    def parse(self, output: bytes, nonce: str, now: float) -> list[dict[str, Any]]:
        first = not self._started
        self._started = True
        found: dict[int, dict[str, Any]] = {}
        for kind, args, payload in sections(output, nonce):
            if not args or not args[0].isdigit() or int(args[0]) >= len(self.files):
                continue
            entry = found.setdefault(int(args[0]), {})
            if kind == "st":
                entry["st"] = args[1:]
            elif kind == "count" and len(args) > 1 and args[1].isdigit():
                entry["count"] = int(args[1])
            elif kind in ("tail", "data") and len(args) > 1 and args[1].isdigit():
                entry[kind] = (int(args[1]), payload)
        frames: list[dict[str, Any]] = []
        for i, f in enumerate(self.files):
            entry = found.get(i)
            if entry is None or not entry.get("st"):
                continue
            frames.extend(self._file(f, entry, now, first))
        return frames

    def _file(self, f: _RemoteFile, entry: dict[str, Any], now: float, first: bool) -> list[dict[str, Any]]:
        st = entry["st"]
        if st[0] == "missing" or len(st) < 2 or not st[1].isdigit():
            frames = []
            if f.opened:
                f.reset()
                frames.append(log_frame(f, [], 1, event="missing"))
            elif first and not f.missing_reported:
                frames.append(log_frame(f, [], 1, event="missing"))
            f.missing_reported = True
            f.pending_event = "created"
            return frames
        ident, size = st[0], int(st[1])
        if "count" in entry and "tail" in entry:
            return [self._backlog(f, ident, size, entry["count"], *entry["tail"], now)]
        if "data" not in entry:
            return []  # a stale command (state changed in between): the next poll reads it
        start, data = entry["data"]
        event = f.pending_event
        if f.opened and start == 0 and f.offset > 0:
            event = "rotated" if ident != f.ident and "-" not in (ident, f.ident) else "truncated"
            f.reset()
        elif f.opened and start == 0 and ident != f.ident and "-" not in (ident, f.ident):
            event = "rotated"
            f.reset()
        f.opened, f.ident, f.pending_event, f.missing_reported = True, ident, None, False
        if start != f.offset:
            return []  # not what this state asked for
        return self._read(f, data, now, event)

    def _keep_partial(self, f: _RemoteFile, data: bytes, now: float) -> None:
        keep_partial(f, data, now, self.max_chars)

    def _read(self, f: _RemoteFile, chunk: bytes, now: float, event: str | None) -> list[dict[str, Any]]:
        kept: deque[bytes] = deque(maxlen=BATCH_LINES)
        start_no = f.line_no + 1
        total = 0
        f.offset += len(chunk)
        last_nl = chunk.rfind(b"\n")
        if last_nl < 0:
            if chunk:
                self._keep_partial(f, f.partial + chunk, now)
        else:
            pieces = (f.partial + chunk[: last_nl + 1]).split(b"\n")
            pieces.pop()
            total = len(pieces)
            kept.extend(pieces[-BATCH_LINES:])
            f.partial = b""
            self._keep_partial(f, chunk[last_nl + 1 :], now)
        return batch_frames(f, kept, total, start_no, now, self.max_chars, event)

    def _backlog(self, f: _RemoteFile, ident: str, size: int, count: int, tail_at: int, tail: bytes,
                 now: float) -> dict[str, Any]:
        f.opened, f.ident, f.offset, f.line_no = True, ident, size, count
        f.pending_event, f.missing_reported = None, False
        tail = tail[: max(0, size - tail_at)]
        last_nl = tail.rfind(b"\n")
        self._keep_partial(f, tail[last_nl + 1 :], now)
        pieces = tail[: last_nl + 1].split(b"\n")[:-1] if last_nl >= 0 else []
        if tail_at > 0 and pieces:
            pieces = pieces[1:]  # the first piece may be the end of a longer line
        keep = pieces[-self.backlog_lines :] if self.backlog_lines > 0 else []
        lines = [clean_line(raw, self.max_chars) for raw in keep]
        first_line = count - len(lines) + 1
        return backlog_frame(f, lines, first_line, self.max_chars)

