"""Agentless GPUs: nvidia-smi's CSV turned into the agent's ``gpu`` frames (the agent's ``gpu.py`` over NVML).

``gpu_command`` runs ``nvidia-smi --query-gpu=... --format=csv,noheader,nounits`` plus ``--query-compute-apps``
for the per-process memory. ``[N/A]``/``[Not Supported]`` are null, MiB become bytes. A row whose utilization or
memory reads ``[Unknown Error]``, ``ERR!``, ``[GPU is lost]``... and a line "Unable to determine the device handle
for GPU...: ..." in place of a row are lost devices (a line takes the next index). No nvidia-smi, "NVIDIA-SMI has
failed..." or "No devices were found" is state ``no_gpu``: one frame, then one a minute. ``GpuFrames`` sends
full and slim frames as the agent's sampler does.

Processes are mapped onto the host's ``/proc`` as the agent maps them (its ``sample/gpumap.py``): when nvidia-smi
lists compute apps, the same exec lists the ``/proc/*/fd`` links to ``DEV/nvidia*`` (``ls -l``, ``grep -F``), and
reads ``/proc/2/stat`` (kthreadd there: the root PID namespace); each device's minor number comes once from
``nvidia-smi -q`` ("Minor Number"). An nvidia-smi pid is kept when that process holds the device's
``/dev/nvidiaN``; the others go to the holders, one to one or as a "≈" group (``wire/gpuholders.py``).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any, cast

from console.agent.wire.frames import (
    FULL_EVERY,
    LOST_RETRY,
    STATE_REPEAT,
    STATIC_GPU_FIELDS,
    gpu_frame,
    gpu_record,
    lost_gpu_record,
    slim_gpu_frame,
    slim_gpu_record,
    static_of,
    sum_memory_by_pid,
    with_static,
)
from console.agent.wire.gpuholders import DEV_DIR, UVM, attribute, compute_holders, holds
from console.agent.wire.protocol import GpuDevice, GpuProc
from console.agentless.host import MARK, section_fn, sections

MIB = 1024 * 1024
GPU_TIMEOUT = 15.0  # a hung nvidia-smi (a GPU falling off the bus) is a GPU error, not a dead link

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



def gpu_command(nonce: str, dev_dir: str | None = None, minors: bool = False) -> str:
    """nvidia-smi's GPUs and compute apps; with apps, the /dev/nvidia fds of every process and whether this is
    the root PID namespace; ``minors``: also each device's minor number (``nvidia-smi -q``, asked once)."""
    query = ",".join(GPU_FIELDS)
    apps = ",".join(APP_FIELDS)
    link = shlex.quote(" -> " + (dev_dir or DEV_DIR).rstrip("/") + "/nvidia")
    ask_minors = "S minors; nvidia-smi -q 2>/dev/null | grep -e '^GPU ' -e 'Minor Number'; " if minors else ""
    return (
        f": {MARK}; " + section_fn(nonce)
        + "if command -v nvidia-smi >/dev/null 2>&1; then "
        f"S gpu; nvidia-smi --query-gpu={query} --format=csv,noheader,nounits 2>&1; S rc $?; "
        f"A=$(nvidia-smi --query-compute-apps={apps} --format=csv,noheader,nounits 2>&1); R=$?; "
        "S apps; printf '%s\\n' \"$A\"; S rc $R; "
        'case "$A" in *[0-9]*) '
        f"S fds; ls -l /proc/[0-9]*/fd 2>/dev/null | grep -F -e /proc/ -e {link}; "
        "S pidns; head -c 300 /proc/2/stat 2>/dev/null; S pids; (cd /proc && echo [0-9]*);; esac; "
        + ask_minors
        + "else S missing; fi; S end; exit 0"
    )


_FD_DIR_RE = re.compile(r"^/proc/(\d+)/fd:$")


def parse_fds(text: str, dev_dir: str | None = None) -> dict[int, frozenset[int]]:
    """``ls -l /proc/*/fd`` (filtered) as ``{pid: minors held}`` (``UVM`` for nvidia-uvm); every listed process is
    there (an empty set: it holds none), one whose fds could not be read is not."""
    prefix = (dev_dir or DEV_DIR).rstrip("/") + "/nvidia"
    out: dict[int, set[int]] = {}
    current: set[int] | None = None
    for line in text.splitlines():
        m = _FD_DIR_RE.match(line.strip())
        if m:
            current = out.setdefault(int(m.group(1)), set())
            continue
        target = line.partition(" -> ")[2].strip()
        if current is None or not target.startswith(prefix):
            continue
        rest = target[len(prefix):]
        if rest.isdigit():
            current.add(int(rest))
        elif rest == "-uvm":
            current.add(UVM)
    return {pid: frozenset(held) for pid, held in out.items()}


def parse_minors(text: str) -> dict[int, int]:
    """``nvidia-smi -q`` (the "GPU ..." and "Minor Number" lines) as ``{index: minor}``, GPUs in index order."""
    out: dict[int, int] = {}
    index = -1
    for line in text.splitlines():
        if line.startswith("GPU "):
            index += 1
        elif "Minor Number" in line and index >= 0:
            value = line.partition(":")[2].strip()
            if value.isdigit():
                out[index] = int(value)
    return out


def in_pid_namespace(stat: str) -> bool:
    """From ``/proc/2/stat`` (empty when absent): not kthreadd there means a PID namespace of its own."""
    return not stat.startswith("2 (kthreadd)")


def map_processes(
    records: list[GpuDevice], held_by: dict[int, frozenset[int]], minors: dict[int, int], pid_ns: bool,
    live: set[int],
) -> bool:
    """Each record's nvidia-smi pids as the host's processes (``gpuholders.attribute``); whether any needed fds.

    ``held_by``: what each process whose fds were listed holds; ``live``: every pid in the host's /proc."""
    cuda = {pid: held for pid, held in held_by.items() if held}
    used = False
    for record in records:
        procs = record.get("procs") or []
        if not procs:
            continue
        minor = minors.get(record["index"])
        # a live pid whose fds could not be listed (another user's) is the host's own only outside a PID namespace
        trusted = {
            pid for pid in (p["pid"] for p in procs)
            if pid is not None
            and (holds(held_by.get(pid), minor) or (pid in live and pid not in held_by and not pid_ns))
        }
        if all(p["pid"] in trusted for p in procs):
            continue
        record["procs"], via_fds = attribute(procs, trusted, compute_holders(cuda, minor))
        used = used or via_fds
    return used


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
    devices: list[GpuDevice]
    pid_ns: bool | None = None  # known when compute apps were listed
    minors: dict[int, int] | None = None  # from ``nvidia-smi -q`` when asked
    via_fds: bool = False  # some process was mapped through the /dev/nvidia holders


def parse_gpu_rows(text: str) -> tuple[list[GpuDevice], str | None, list[str]]:
    """Device records (static fields included) from ``--query-gpu`` CSV; (records, driver, other lines)."""
    records: list[GpuDevice] = []
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
                records.append(with_static(lost_gpu_record(nxt, line), None))
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
            record = lost_gpu_record(int(index), "nvidia-smi reports " + ", ".join(broken))
        else:
            record = gpu_record(
                int(idx or index),
                util=_int(util),
                mem_util=_int(mem_util),
                mem_used=_mib(used),
                temp=_int(temp),
                power=_watts(power),
                sm_clock=_int(sm),
                mem_clock=_int(memclk),
                fan=_int(fan),
                procs=[],
            )
        records.append(with_static(record, static))
    return records, driver, other


def parse_compute_apps(text: str) -> dict[str, list[GpuProc]]:
    """``{gpu uuid: [{pid, mem (bytes|None)}]}`` from ``--query-compute-apps`` CSV (other lines ignored)."""
    out: dict[str, list[GpuProc]] = {}
    for raw in text.splitlines():
        parts = [p.strip() for p in raw.split(",")]
        if len(parts) != len(APP_FIELDS) or not parts[1].isdigit():
            continue
        out.setdefault(parts[0], []).append({"pid": int(parts[1]), "mem": _mib(_value(parts[2]))})
    return out


def parse_gpu_output(
    output: bytes, nonce: str, dev_dir: str | None = None, minors: dict[int, int] | None = None
) -> GpuReading:
    """The reading from ``gpu_command``'s output (``minors``: the device minors known from an earlier reading)."""
    gpu_text, apps_text, rc = None, "", None
    fds_text, pidns_text, minors_text, pids_text = None, "", None, ""
    for kind, args, payload in sections(output, nonce):
        text = payload.decode("utf-8", "replace")
        if kind == "missing":
            return GpuReading("no_gpu", "nvidia-smi not found on the host", None, [])
        if kind == "gpu":
            gpu_text = text
        elif kind == "apps":
            apps_text = text
        elif kind == "fds":
            fds_text = text
        elif kind == "pidns":
            pidns_text = text
        elif kind == "pids":
            pids_text = text
        elif kind == "minors":
            minors_text = text
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
        if not record.get("lost"):
            record["procs"] = apps.get(record.get("uuid") or "", [])
    if minors_text is not None:
        minors = parse_minors(minors_text)
    reading = GpuReading("ok", None, driver, records, minors=minors if minors_text is not None else None)
    if fds_text is not None:
        reading.pid_ns = in_pid_namespace(pidns_text)
        live = {int(w) for w in pids_text.split() if w.isdigit()}
        reading.via_fds = map_processes(records, parse_fds(fds_text, dev_dir), minors or {}, reading.pid_ns, live)
    return reading


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
        self._sent_procs: dict[int, list[GpuProc]] = {}
        self.mem_by_pid: dict[int, int | None] = {}
        self.minors: dict[int, int] | None = None  # device minors (``nvidia-smi -q``), asked once a session
        self.pid_ns: bool | None = None
        self.used_fds = False  # sticky, as the agent's ``mapping``
        self._sent_mapping: str | None = None

    @property
    def mapping(self) -> str:
        return "fds" if self.used_fds else "pid"

    def features(self) -> dict[str, Any]:
        """The hello's GPU mapping fields (``pid_ns`` once known)."""
        out: dict[str, Any] = {"gpu_mapping": self.mapping}
        if self.pid_ns is not None:
            out["pid_ns"] = self.pid_ns
        return out

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
        if reading.minors is not None:
            self.minors = reading.minors
        if reading.pid_ns is not None:
            self.pid_ns = reading.pid_ns
        self.used_fds = self.used_fds or reading.via_fds
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
        records: list[GpuDevice] = []
        lost_now = set()
        for dev in reading.devices:
            index = dev["index"]
            if dev.get("lost"):
                lost_now.add(index)
            else:
                if index in self._lost or index not in self._static:
                    full = True  # a device that came (back): static fields again for everyone
                self._static[index] = static_of(dev)
            records.append(cast(GpuDevice, {k: v for k, v in dev.items() if k not in STATIC_GPU_FIELDS}))
        self._lost = lost_now
        self.mem_by_pid = sum_memory_by_pid(rec.get("procs", []) for rec in records)
        if full:
            self._next_full = now + FULL_EVERY
            for rec in records:
                with_static(rec, self._static.get(rec["index"]))
                self._sent_procs[rec["index"]] = rec.get("procs", [])
            self._sent_mapping = self.mapping
            return self._frame(True, records)
        slim = []
        for rec in records:
            slim.append(slim_gpu_record(rec, self._sent_procs.get(rec["index"])))
            self._sent_procs[rec["index"]] = rec.get("procs", [])
        changed, self._sent_mapping = self.mapping != self._sent_mapping, self.mapping
        return slim_gpu_frame(slim, self.mapping if changed else None)

    def _frame(self, full: bool, devices: list[GpuDevice]) -> dict[str, Any]:
        return gpu_frame(self.state, False, self.driver, self.message, full, devices, pid_ns=self.pid_ns,
                         mapping=self.mapping)
