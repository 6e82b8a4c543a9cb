"""Agentless GPUs: nvidia-smi's CSV turned into the agent's ``gpu`` frames (the agent's ``gpu.py`` over NVML).

``gpu_command`` runs ``nvidia-smi --query-gpu=... --format=csv,noheader,nounits`` plus ``--query-compute-apps``
for the per-process memory. ``[N/A]``/``[Not Supported]`` are null, MiB become bytes. A row whose utilization or
memory reads ``[Unknown Error]``, ``ERR!``, ``[GPU is lost]``... and a line "Unable to determine the device handle
for GPU...: ..." in place of a row are lost devices (a line takes the next index). No nvidia-smi, "NVIDIA-SMI has
failed..." or "No devices were found" is state ``no_gpu``: one frame, then one a minute. ``GpuFrames`` sends
full and slim frames as the agent's sampler does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, cast

from console.agent.frames import (
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
from console.agent.protocol import GpuDevice, GpuProc
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



def gpu_command(nonce: str) -> str:
    query = ",".join(GPU_FIELDS)
    apps = ",".join(APP_FIELDS)
    return (
        f": {MARK}; " + section_fn(nonce)
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
    devices: list[GpuDevice]


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
        if not record.get("lost"):
            record["procs"] = apps.get(record.get("uuid") or "", [])
    return GpuReading("ok", None, driver, records)


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
            return self._frame(True, records)
        slim = []
        for rec in records:
            slim.append(slim_gpu_record(rec, self._sent_procs.get(rec["index"])))
            self._sent_procs[rec["index"]] = rec.get("procs", [])
        return slim_gpu_frame(slim)

    def _frame(self, full: bool, devices: list[GpuDevice]) -> dict[str, Any]:
        return gpu_frame(self.state, False, self.driver, self.message, full, devices)
