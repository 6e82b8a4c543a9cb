"""Applying agent frames to an instance's record: one handler per frame type (``FRAME_HANDLERS``).

The hot path (hundreds of instances x 8 GPUs at 1 Hz): each handler stays a handful of dict updates and
deque appends. Host text is cleaned here, where it enters the state. ``FleetState.apply_frame``
(``console/core/state.py``) picks the handler, then re-derives the status.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Tuple, cast

from console.agent.wire.frames import STATIC_GPU_FIELDS  # the fields a full gpu frame adds, as the agent writes them
from console.agent.wire.protocol import (
    RESTART_MARKER,
    ErrorFrame,
    Frame,
    GpuDevice,
    GpuFrame,
    HeartbeatFrame,
    HelloFrame,
    LogFrame,
    ProcRecord,
    ProcsFrame,
    ResultFrame,
    XidFrame,
)
from console.core.instance import InstanceState
from console.core.rings import MAX_XIDS, GpuState, LogRing
from console.core.text_safety import clean, clean_deep, clean_lines, clean_opt

MAX_LOG_FILES = 32  # files kept per instance (least recently active dropped)
IDLE_UTIL = 5  # % at or under which a GPU counts as idle

FrameHandler = Callable[[InstanceState, Frame, float], None]


def _on_hello(inst: InstanceState, raw: Frame, now: float) -> None:
    frame = cast(HelloFrame, clean_deep(raw))  # once a session: agent version, host, python are host text
    inst.hello = frame
    features = frame.get("features") or {}
    # Each session says again whether it is agentless: a host that got python3 since runs the agent.
    inst.agentless = (
        bool(features.get("agentless"))
        or bool(getattr(inst.instance, "agentless", False))
        or "agentless" in inst.link_detail
    )
    if features.get("simulated_gpu"):
        inst.gpu_simulated = True
    # A new session says again what GPUs it has: an old session's "no GPU" is not this one's (issue 35); its
    # hello may say it already ("no_gpu": no NVML, no nvidia-smi)
    inst.gpu_state, inst.gpu_message = ("no_gpu" if features.get("gpu") == "no_gpu" else None), None
    hb = frame.get("heartbeat_interval")
    if isinstance(hb, (int, float)) and hb > 0:
        inst.heartbeat_interval = float(hb)


def _on_heartbeat(inst: InstanceState, raw: Frame, now: float) -> None:
    inst.last_heartbeat = cast(HeartbeatFrame, raw)
    inst.detail_level = "summary" if raw.get("level") == "summary" else "full"


_INTS = tuple(range(2048))  # shared int objects: a 10-minute ring of watts costs a pointer a sample, not an int


def _small_int(value: Any) -> int:
    """A GPU reading (°C, W) as a whole number for the history rings; -1 when unknown."""
    if not isinstance(value, (int, float)) or not -1e9 < value < 1e9:  # (NaN and inf fail the range too)
        return -1
    n = int(value + 0.5)
    return _INTS[n] if 0 <= n < 2048 else n


def _on_gpu(inst: InstanceState, raw: Frame, now: float) -> None:
    frame = cast(GpuFrame, raw)
    inst.gpu_state = frame.get("state")
    inst.gpu_simulated = bool(frame.get("simulated")) or inst.gpu_simulated
    inst.gpu_driver = clean_opt(frame.get("driver")) or inst.gpu_driver
    inst.gpu_message = clean_opt(frame.get("message"))
    devices: Iterable[GpuDevice] = frame.get("devices") or ()
    full = frame.get("full")
    gpus = inst.gpus
    seen = set()
    all_idle = bool(devices)
    for dev in devices:
        index = dev.get("index")
        if index is None:
            continue
        seen.add(index)
        err = dev.get("error")
        if full or (err is not None and not (type(err) is str and err.isprintable())):
            dev = _safe_device(dev)  # static fields come in full frames only; a slim one may carry an error
        gpu = gpus.get(index)
        if gpu is None:
            gpu = gpus[index] = GpuState(index)
        if full:
            static, given = cast(Dict[str, Any], gpu.static), cast(Dict[str, Any], dev)
            for key in STATIC_GPU_FIELDS:
                if key in given:
                    static[key] = given[key]
        if "procs" not in dev:  # the agent leaves out a device's procs while they are unchanged
            dev = cast(GpuDevice, dict(dev, procs=gpu.sample.get("procs") or []))
        health = dev.get("health")
        if health is not None and health != gpu.health:
            _note_health(gpu, health, now)
        gpu.sample = dev
        gpu.lost = bool(dev.get("lost"))
        gpu.missing = False
        gpu.error = dev.get("error")
        util = dev.get("util")
        gpu.util_hist.append(util if util is not None else -1)
        mem_used, total = dev.get("mem_used"), gpu.static.get("mem_total")
        gpu.mem_hist.append(int(100 * mem_used / total) if mem_used is not None and total else -1)
        temp, power = dev.get("temp"), dev.get("power")
        gpu.temp_hist.append(_small_int(temp))
        gpu.power_hist.append(_small_int(power))
        if gpu.lost or (util is not None and util > IDLE_UTIL):
            all_idle = False
    if len(seen) != len(gpus):
        for index, gpu in gpus.items():
            if index not in seen:
                gpu.missing = True
                for ring in (gpu.util_hist, gpu.mem_hist, gpu.temp_hist, gpu.power_hist):
                    ring.append(-1)  # absent from this frame: the rings stay in step with ``gpu_ts``
    if devices:
        inst.gpu_ts.append(now)
    if devices:
        # seconds of idleness (IDLE_WINDOW): a frame counts for the time since the previous one on the host's
        # clock (sampled on a steady clock there, whatever the console's delays), 1 to 10 s (an instance at
        # detail "summary" sends one every 5 s while nothing moves)
        ts, last = frame.get("ts"), inst.gpu_host_ts
        step = 1 if not ts or not last else min(10, max(1, int(ts - last + 0.5)))
        inst.idle_seconds = inst.idle_seconds + step if all_idle else 0
    inst.gpu_at = now
    inst.gpu_host_ts = frame.get("ts")


def _note_health(gpu: GpuState, health: Any, now: float) -> None:
    """A changed health record: kept, with when each of its fields changed (the GPUs tab says it)."""
    if not isinstance(health, dict):
        return
    old = cast(Dict[str, Any], gpu.health)
    for key in set(old) | set(health):
        if old.get(key) != health.get(key):
            gpu.health_at[key] = now
    gpu.health = cast(Any, clean_deep(health))


def _on_xid(inst: InstanceState, raw: Frame, now: float) -> None:
    """One NVML Xid event: kept on its GPU (the same one sent again by a new agent is not kept twice)."""
    frame = cast(XidFrame, raw)
    index = frame["gpu"]
    gpu = inst.gpus.get(index)
    if gpu is None:
        gpu = inst.gpus[index] = GpuState(index)
    when = float(frame["time"])
    for seen in gpu.xids:
        if seen["xid"] == frame["xid"] and abs(seen["time"] - when) < 5.0:
            return
    event: Dict[str, Any] = {"xid": int(frame["xid"]), "time": when}
    if frame.get("seen_before"):
        event["seen_before"] = True
    gpu.xids.append(event)
    gpu.xids.sort(key=lambda e: e["time"])
    del gpu.xids[:-MAX_XIDS]
    gpu.health_at["xids"] = now
    inst.xid_version += 1


def _on_procs(inst: InstanceState, raw: Frame, now: float) -> None:
    frame = cast(ProcsFrame, raw)
    procs = inst.procs
    if frame.get("full"):
        procs.clear()
        for rec in frame.get("procs") or ():
            procs[rec["pid"]] = _safe_proc(rec)
    else:
        for rec in frame.get("upsert") or ():
            procs[rec["pid"]] = _safe_proc(rec)
        for pid in frame.get("gone") or ():
            procs.pop(pid, None)
    inst.procs_version += 1
    if frame.get("full"):
        inst.procs_subset = bool(frame.get("subset"))
    inst.match_benchmark()
    if inst.bench_patterns or inst.entry_patterns:
        ts = frame.get("ts")
        if isinstance(ts, (int, float)) and ts:
            inst.clock_offset = float(ts) - now  # the host's clock minus ours: process start times are theirs


def _on_log(inst: InstanceState, raw: Frame, now: float) -> None:
    frame = cast(LogFrame, raw)
    path = clean_opt(frame.get("path")) or "?"  # a file name is host text too
    ring = inst.logs.get(path)
    if ring is None:
        if len(inst.logs) >= MAX_LOG_FILES:
            oldest = min(inst.logs.values(), key=lambda r: r.updated)
            del inst.logs[oldest.path]
        ring = inst.logs[path] = LogRing(path)
    lines = clean_lines(frame.get("lines"))
    event = frame.get("event")
    ring.add(frame.get("first_line"), lines, event, now, backlog=bool(frame.get("backlog")))
    if (inst.diagnosis is not None and path == inst.bench_log and not frame.get("backlog")
            and (event in ("created", "rotated", "truncated") or any(t.startswith(RESTART_MARKER) for t in lines))):
        inst.log_moved_on = True  # the benchmark's log started over: the verdict is history
    if lines:
        last = ring.last
        if last is not None:
            inst.last_log = (path, last[0], last[1])
    inst.logs_version += 1


def _on_result(inst: InstanceState, raw: Frame, now: float) -> None:
    inst.results.append(cast(ResultFrame, clean_deep(raw)))


def _on_error(inst: InstanceState, raw: Frame, now: float) -> None:
    frame = cast(ErrorFrame, raw)
    inst.errors.append((now, clean(frame.get("message") or "", keep_newlines=True)))


# -- host text (console/core/text_safety.py): cleaned here, where frames enter the state, so that no widget
# ever gets an escape sequence. Printable text (the common case) costs one ``isprintable`` per field.
_PROC_TEXT = ("name", "cmdline", "wchan", "state")
_GPU_TEXT = ("name", "uuid", "error")


def _cleaned(given: Dict[str, Any], keys: Tuple[str, ...]) -> Dict[str, Any]:
    """``given``, or a copy with its ``keys`` text fields cleaned when one holds a control character."""
    for key in keys:
        value = given.get(key)
        if value is not None and not (type(value) is str and value.isprintable()):
            return {k: (clean_opt(v) if k in keys else v) for k, v in given.items()}
    return given


def _safe_proc(rec: ProcRecord) -> ProcRecord:
    return cast(ProcRecord, _cleaned(cast(Dict[str, Any], rec), _PROC_TEXT))


def _safe_device(dev: GpuDevice) -> GpuDevice:
    return cast(GpuDevice, _cleaned(cast(Dict[str, Any], dev), _GPU_TEXT))


FRAME_HANDLERS: Dict[str, FrameHandler] = {
    "hello": _on_hello,
    "heartbeat": _on_heartbeat,
    "gpu": _on_gpu,
    "xid": _on_xid,
    "procs": _on_procs,
    "log": _on_log,
    "result": _on_result,
    "error": _on_error,
}
