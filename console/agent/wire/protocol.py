"""The wire protocol: one JSON object per line, each with a ``type``.

Agent -> console frames: ``hello`` (always first), ``heartbeat``, ``gpu``, ``procs``, ``log``,
``result`` (answer to a request, echoing its ``id``) and ``error``.
Console -> agent requests: ``{"id": N, "op": NAME, "args": {...}}``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import IO, Any, Dict, List, Literal, Optional, TypedDict  # both in typing since 3.8, the agent's floor

PROTOCOL_VERSION = 1
FRAME_TYPES = ("hello", "heartbeat", "gpu", "xid", "procs", "log", "result", "error")
MAX_LINE_BYTES = 8 * 1024 * 1024
# The line a restart writes into the benchmark's log; the console takes it as "the run began again here".
RESTART_MARKER = "[fleet-agent] benchmark restarted at "


# -- The wire contract -------------------------------------------------------------------------------------------
# Every frame and result as a TypedDict: the types document the JSON, they cost nothing at run time. A ``total=False``
# class holds the keys that may be absent (slim frames leave out what the consumer already has; see
# docs/architecture.md). Python 3.8's typing has no NotRequired, hence the base/extension pairs.

GpuStateName = Literal["ok", "no_gpu", "error"]
LogEvent = Literal["created", "rotated", "truncated", "missing"]
Severity = Literal["info", "warning", "error", "critical"]


class _GpuProcBase(TypedDict):
    pid: Optional[int]  # a local process (see console/agent/sample/gpumap.py); None: not one process here
    mem: Optional[int]  # bytes; None when NVML does not know it


class GpuProc(_GpuProcBase, total=False):
    """One compute process on a device, its pid mapped onto the agent's /proc (gpumap.py): NVML's own pid when
    that process holds the device; else ``nvml_pid`` is NVML's (host) pid and ``pid`` the one local holder, or
    null with ``group`` (the local holders of several entries, memory summed: shown with "≈") or alone (no
    local process found)."""

    nvml_pid: int  # NVML's pid, when ``pid`` is not it
    group: List[int]  # several entries held by these local processes, which one is which unknown
    nvml_pids: List[int]  # NVML's pids of a group's entries


class GpuMig(TypedDict, total=False):
    """One MIG instance of a MIG-enabled GPU (the device record's ``mig``)."""

    index: int  # MIG device index on its GPU
    profile: Optional[str]  # "1g.10gb"
    uuid: Optional[str]
    mem_total: Optional[int]  # bytes
    mem_used: Optional[int]  # bytes
    procs: List[GpuProc]


class RemappedRows(TypedDict):
    corrected: int  # rows remapped for correctable errors
    uncorrected: int  # rows remapped for uncorrectable errors
    pending: bool  # a remap waits for the next GPU reset
    failure: bool  # a remap failed: the GPU needs service


class RetiredPages(TypedDict, total=False):
    count: int  # pages retired (single-bit storms and double-bit errors)
    pending: bool  # a retirement waits for the next reboot


class PcieLink(TypedDict, total=False):
    gen: int
    width: int
    max_gen: int
    max_width: int
    replays: int  # the PCIe replay counter (link errors the GPU retried)


class NvLinkState(TypedDict):
    up: int
    down: int


class GpuHealth(TypedDict, total=False):
    """A device's health through NVML (issue 30; ``console/agent/sample/gpuhealth.py``). A field the card does
    not support (or that the container may not read) is absent. Counters are read every ~10 s."""

    ecc_mode: bool
    ecc_corrected: int  # volatile (since the driver loaded)
    ecc_uncorrected: int  # volatile
    ecc_corrected_agg: int  # aggregate (the card's lifetime)
    ecc_uncorrected_agg: int
    retired_pages: RetiredPages
    remapped_rows: RemappedRows
    clock_events: List[str]  # active trouble reasons: sw_power_cap, hw_slowdown, sw_thermal, hw_thermal, hw_power_brake
    clock_since: Dict[str, float]  # reason -> epoch it became active (as the agent saw it)
    pcie: PcieLink
    pstate: int  # 0 (P0, full speed) .. 15
    persistence: bool
    nvlink: NvLinkState


class _GpuDeviceBase(TypedDict):
    index: int


class GpuDevice(_GpuDeviceBase, total=False):
    """One device in a ``gpu`` frame. Slim frames leave out ``lost``/``error``/null fields/unchanged ``procs``."""

    lost: bool
    error: Optional[str]
    util: Optional[int]  # %
    mem_util: Optional[int]  # %
    mem_used: Optional[int]  # bytes
    temp: Optional[int]  # degrees C
    power: Optional[float]  # watts, 0.1 W
    sm_clock: Optional[int]  # MHz
    mem_clock: Optional[int]  # MHz
    fan: Optional[int]  # %
    procs: List[GpuProc]
    # static fields, present in ``full`` frames only
    name: Optional[str]
    uuid: Optional[str]
    mem_total: Optional[int]  # bytes
    power_limit: Optional[float]  # watts
    mig: List[GpuMig]  # MIG-enabled GPUs: their instances (slim frames: only when changed)
    health: GpuHealth  # full frames and when it changed; absent: unchanged (or none supported)


class _FrameBase(TypedDict):
    type: str
    ts: float


class Features(TypedDict, total=False):
    psutil: bool
    gpu: GpuStateName
    simulated_gpu: bool
    ops: List[str]
    agentless: bool
    pid_ns: bool  # the agent's /proc is not the root PID namespace (a container): NVML pids are the host's
    gpu_mapping: str  # how GPU processes were mapped: "pid" (NVML's pids checked) | "fds" (via /dev/nvidia fds)


class HelloFrame(_FrameBase, total=False):
    v: int
    agent_version: str
    host: str
    pid: Optional[int]
    python: Optional[str]
    features: Features
    heartbeat_interval: float


class HeartbeatFrame(_FrameBase, total=False):
    seq: int
    samples: int
    sent: int
    level: str  # only while not "full": the detail level the console asked for (op ``detail``)


class _GpuFrameBase(_FrameBase):
    state: GpuStateName
    full: bool
    devices: List[GpuDevice]


class GpuFrame(_GpuFrameBase, total=False):
    simulated: bool
    driver: Optional[str]
    message: Optional[str]
    pid_ns: bool  # full frames: the agent is in a PID namespace of its own (a container)
    mapping: str  # full frames and when it changes: "pid" | "fds" (see Features.gpu_mapping)


class _XidFrameBase(_FrameBase):
    gpu: int  # device index
    xid: int
    time: float  # epoch seconds the agent took it from NVML


class XidFrame(_XidFrameBase, total=False):
    """One NVML Xid critical-error event (``console/agent/sample/gpuxid.py``), sent before the gpu frame of its
    sample; ``seen_before``: an earlier agent on this host saw it (sent again by a new agent)."""

    uuid: str
    seen_before: bool


class ProcRecord(TypedDict):
    """One process in a ``procs`` frame (kernel threads are never sent)."""

    pid: int
    ppid: int
    name: str
    cmdline: str
    state: str  # one letter, e.g. "S"
    wchan: Optional[str]
    cpu: Optional[float]  # percent; None in one-shot snapshots
    rss: Optional[int]  # bytes
    start: float  # epoch seconds (the host's clock)
    gpu_mem: Optional[int]  # bytes


class ProcsFrame(_FrameBase, total=False):
    full: bool
    procs: List[ProcRecord]  # when full
    upsert: List[ProcRecord]  # when not full
    gone: List[int]
    subset: bool  # with full: only the benchmark's (match/entrypoint) and GPU processes (detail "summary")


class _LogFrameBase(_FrameBase):
    path: str
    lines: List[str]
    first_line: Optional[int]
    backlog: bool
    event: Optional[LogEvent]


class LogFrame(_LogFrameBase, total=False):
    partial: bool
    skipped: int


class _ResultFrameBase(_FrameBase):
    id: int
    ok: bool


class ResultFrame(_ResultFrameBase, total=False):
    data: Any  # one of the op results below, by the request's op
    error: str


class ErrorFrame(_FrameBase, total=False):
    message: str
    id: int


Frame = Dict[str, Any]  # any decoded frame, before it is narrowed by its ``type``


class _RequestBase(TypedDict):
    id: int
    op: str


class Request(_RequestBase, total=False):
    args: Dict[str, Any]


# -- op results (``result.data``) ---------------------------------------------------------------------------------
class Evidence(TypedDict):
    path: str
    line: Optional[int]
    text: str


class _VerdictBase(TypedDict):
    code: str
    severity: Severity
    summary: str


class Verdict(_VerdictBase, total=False):
    label: str  # the code in words ("download stalled")
    explanation: str  # what the code means, what to do
    brief: str  # one short line for the grid ("download stalled at 37.2 % for 6m")
    followed_by: List[str]  # the codes of the current findings this verdict explains (its symptoms)


class _FindingBase(TypedDict):
    code: str
    severity: Severity
    summary: str
    evidence: List[Evidence]


class Finding(_FindingBase, total=False):
    explanation: str
    caused_by: str  # the verdict's code, on a symptom it explains
    time: float  # when it happened (estimated, the host's epoch seconds); absent for a present state


class Step(TypedDict):
    name: str
    status: str
    summary: str
    lines: List[str]


class _DiagnosisBase(TypedDict):
    verdict: Verdict
    findings: List[Finding]
    steps: List[Step]


class Alternative(TypedDict):
    """Another explanation besides the verdict (top-3), with the evidence that points at it."""

    code: str
    label: str
    summary: str
    evidence: List[Evidence]


class DiagnosisResult(_DiagnosisBase, total=False):
    time: float
    alternatives: List[Alternative]  # up to two other codes, most likely first (diagnosis/alternatives.py)


class ProbeResult(TypedDict, total=False):
    title: str
    lines: List[str]
    error: str


class PlanProc(TypedDict):
    """One process a restart stops (``pid``, ``start`` rule out a reused pid), or leaves running."""

    pid: int
    program: str
    start: float  # epoch seconds (the host's clock)
    age: float  # seconds it has run, by the host's clock


class PlanGroup(TypedDict):
    """One process group a restart stops (TERM, then KILL): its targets, the top one first."""

    pgid: int
    alone: bool  # it shares the agent's group: its targets are signalled by pid, not the group
    targets: List[PlanProc]
    members: int  # live processes in the group (all of them are stopped)
    parent: Optional[str]  # the top target's nearest entrypoint ancestor, "entrypoint.sh (pid 12)"
    why: str  # "benchmark" | "its entrypoint" | "the last start's entrypoint"


class SparedProc(PlanProc):
    """A process that matches the entrypoint pattern only; a restart leaves it running (``why``)."""

    why: str


class RestartPlan(TypedDict):
    """``restart_plan``: what a restart would stop now, what it leaves running, and what it starts."""

    groups: List[PlanGroup]
    spared: List[SparedProc]  # match the entrypoint pattern only: not the benchmark's, not stopped
    start: List[str]  # the argv it starts
    log: Optional[str]


class _StartedBase(TypedDict):
    pid: int
    pgid: int
    argv: List[str]
    alive: bool


class Started(_StartedBase, total=False):
    returncode: int
    log_tail: List[str]


class _StopResultBase(TypedDict):
    stopped: List[int]
    killed: List[int]
    survivors: List[int]
    groups: List[int]


class StopResult(_StopResultBase, total=False):
    matched: List[int]
    plan: RestartPlan  # what it stopped (the confirmed plan, checked again on the host)


class RestartResult(StopResult, total=False):
    started: Started
    log: Optional[str]
    error: str  # set when the started benchmark died at once


class _LogReadBase(TypedDict):
    path: str
    lines: List[List[Any]]  # [[lineno, text], ...], oldest first
    first_line: int  # lines[0]'s number (before_line when nothing comes before it)


class LogReadResult(_LogReadBase, total=False):
    """``read {path, before_line, n}`` (console/agent/sample/logread.py)."""

    total_lines: int  # when the whole file was counted (before_line null)


class _LogGrepBase(TypedDict):
    path: str
    hits: List[List[Any]]  # [[lineno, text], ...]
    truncated: bool  # stopped at max_hits, the output budget or the time limit
    lines: int  # lines scanned


class LogGrepResult(_LogGrepBase, total=False):
    """``grep {path, pattern, max_hits, regex}`` (console/agent/sample/logread.py)."""

    timed_out: bool


class SignalResult(TypedDict):
    """Op ``signal`` (console/agent/actions/signals.py): TERM or KILL sent to one process, checked against pid reuse."""

    pid: int
    signal: str  # "TERM" | "KILL"
    sent: bool
    alive_after: bool  # still there after the agent watched it briefly


class DetailResult(TypedDict):
    """Op ``detail {level}``: the level the agent now sends at ("full" | "summary"; agentless: always "full")."""

    level: str


class ProtocolError(ValueError):
    """A line that is not a valid frame or request."""


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)  # one, not one per frame


def encode(frame: Dict[str, Any]) -> bytes:
    """One frame as one compact JSON line."""
    return (_ENCODER.encode(frame) + "\n").encode("utf-8")


def decode(line: bytes | str) -> Dict[str, Any]:
    """Parse one line into a frame dict; raise ProtocolError on anything else."""
    if isinstance(line, bytes):
        line = line.decode("utf-8", errors="replace")
    try:
        obj = json.loads(line)
    except ValueError as exc:
        raise ProtocolError("not JSON: %s" % exc) from None
    if not isinstance(obj, dict):
        raise ProtocolError("not a JSON object")
    return obj


def decode_frame(line: bytes | str) -> Dict[str, Any]:
    """Parse an agent frame, checking its ``type``."""
    frame = decode(line)
    if frame.get("type") not in FRAME_TYPES:
        raise ProtocolError("unknown frame type %r" % (frame.get("type"),))
    return frame


def decode_request(line: bytes | str) -> Dict[str, Any]:
    """Parse a console request, checking ``id`` and ``op``."""
    req = decode(line)
    if not isinstance(req.get("op"), str):
        raise ProtocolError("request without op")
    if "id" not in req:
        raise ProtocolError("request without id")
    args = req.setdefault("args", {})
    if not isinstance(args, dict):
        raise ProtocolError("args must be an object")
    return req


class FrameWriter:
    """Thread-safe writer of frames to a binary stream; counts the bytes it sent, notes when (monotonic)."""

    def __init__(self, stream: Optional[IO[bytes]] = None) -> None:
        self._stream = stream if stream is not None else sys.stdout.buffer
        self._lock = threading.Lock()
        self.bytes_sent = 0
        self.sent_at = 0.0
        # the last frame the console passes on to its state: all but the answers to id-0 requests (its pings),
        # which it drops; what its stale check sees (the heartbeat at detail "summary" goes by it)
        self.delivered_at = 0.0
        self.closed = False

    def send(self, frame_type: str, **fields: Any) -> None:
        frame = {"type": frame_type, "ts": round(time.time(), 3)}
        frame.update(fields)
        data = encode(frame)
        with self._lock:
            if self.closed:
                return
            try:
                self._stream.write(data)
                self._stream.flush()
            except (BrokenPipeError, OSError, ValueError):
                self.closed = True
                return
            self.bytes_sent += len(data)
            self.sent_at = time.monotonic()
            if frame_type != "result" or fields.get("id") != 0:
                self.delivered_at = self.sent_at
