"""Frames checked at the link against the typed contract (``console/agent/wire/protocol.py``), and bounded.

A host can send anything: a float GPU util, string fields, a list where a record belongs, 5000 GPUs, a
million processes, lines by the megabyte, frames as fast as the wire carries them. Nothing of that may reach
the fleet state or the UI. Each line is decoded straight into its frame's TypedDict by msgspec (one pass,
in C: about three times faster than ``json.loads`` alone for a GPU frame, so checking costs nothing); what
does not fit is dropped, and the instance gets one error for it (then at most one a minute, with a count).

``FloodGuard`` bounds what one host may cost: frames and bytes read per second (beyond them the link stops
reading for a moment: the SSH window closes and the host's agent blocks on its writes, so memory stays
bounded by the channel window), and log lines per second (beyond them log frames are dropped and counted:
"flooding: dropped N frames").
"""

from __future__ import annotations

import time
from typing import Any

import msgspec

from console.agent.wire.protocol import (
    DiagnosisResult,
    ErrorFrame,
    GpuFrame,
    HeartbeatFrame,
    HelloFrame,
    LogFrame,
    ProbeResult,
    ProcsFrame,
    RestartPlan,
    RestartResult,
    ResultFrame,
    StopResult,
    XidFrame,
)

MAX_FRAME_BYTES = 4 * 1024 * 1024  # one line; a legitimate log frame is <= 64 KB, a diagnosis well under this
MAX_GPUS = 64  # devices in one gpu frame
MAX_PROCS = 20000  # records in one procs frame
MAX_LOG_LINES = 2000  # lines in one log frame (the agent sends <= ~500)
MAX_TEXT = 64 * 1024  # an error message

FRAMES_PER_SECOND = 400.0  # read budget (an agent sends a handful a second, a backlog a few hundred at once)
FRAME_BURST = 2000.0
BYTES_PER_SECOND = 16.0 * 1024 * 1024
BYTE_BURST = 32.0 * 1024 * 1024
LOG_LINES_PER_SECOND = 5000.0  # per host; beyond this log frames are dropped
LOG_LINE_BURST = 20000.0  # a reconnect's backlog: 200 lines x up to 32 files, and then some
GPU_PROCS_PER_SECOND = 20.0  # gpu and procs frames (the agent sends at most ~1 a second each)
GPU_PROCS_BURST = 60.0

_TYPED: dict[str, Any] = {
    "hello": HelloFrame,
    "heartbeat": HeartbeatFrame,
    "gpu": GpuFrame,
    "xid": XidFrame,
    "procs": ProcsFrame,
    "log": LogFrame,
    "result": ResultFrame,
    "error": ErrorFrame,
}
_DECODERS = {name: msgspec.json.Decoder(cls) for name, cls in _TYPED.items()}
_ANY = msgspec.json.Decoder()
_PREFIX = b'{"type":"'

# What each op's ``result.data`` must be (ops not listed are not checked: ping, backlog, ...).
OP_RESULTS: dict[str, Any] = {
    "diagnose": DiagnosisResult,
    "restart": RestartResult,
    "restart_plan": RestartPlan,
    "stop_benchmark": StopResult,
    "probe": ProbeResult,
}


class BadFrame(ValueError):
    """A line that is not a frame of the contract, or one over the bounds; the message says which."""


def decode(line: bytes) -> dict[str, Any]:
    """The frame in ``line``, checked against its type's TypedDict and the bounds; BadFrame otherwise."""
    if len(line) > MAX_FRAME_BYTES:
        raise BadFrame(f"frame of {len(line) // 1024} KB (at most {MAX_FRAME_BYTES // 1024} KB)")
    kind = _kind(line)
    try:
        if kind is not None and kind in _DECODERS:
            frame: dict[str, Any] = _DECODERS[kind].decode(line)
        else:  # not in the agent's own key order: find the type, then check
            raw = _ANY.decode(line)
            if not isinstance(raw, dict):
                raise BadFrame("not a JSON object")
            kind = raw.get("type")
            if not isinstance(kind, str) or kind not in _TYPED:
                raise BadFrame(f"unknown frame type {str(kind)[:40]!r}")
            frame = msgspec.convert(raw, _TYPED[kind])
    except msgspec.ValidationError as exc:
        raise BadFrame(f"{kind} frame: {str(exc)[:200]}") from None
    except msgspec.DecodeError as exc:
        raise BadFrame(f"not JSON: {str(exc)[:200]}") from None
    _check_bounds(kind, frame)
    return frame


def check_result(op: str, data: Any) -> Any:
    """``data`` of a successful ``op`` result, checked against the op's result type; BadFrame otherwise."""
    cls = OP_RESULTS.get(op)
    if cls is None:
        return data
    try:
        return msgspec.convert(data, cls)
    except msgspec.ValidationError as exc:
        raise BadFrame(f"{op} result: {str(exc)[:200]}") from None


def _kind(line: bytes) -> str | None:
    if not line.startswith(_PREFIX):
        return None
    end = line.find(b'"', len(_PREFIX), len(_PREFIX) + 16)
    return line[len(_PREFIX):end].decode("ascii", "replace") if end > 0 else None


def _check_bounds(kind: str, frame: dict[str, Any]) -> None:
    if kind == "gpu":
        if len(frame["devices"]) > MAX_GPUS:
            raise BadFrame(f"gpu frame with {len(frame['devices'])} devices (at most {MAX_GPUS})")
    elif kind == "procs":
        n = len(frame.get("procs") or ()) + len(frame.get("upsert") or ()) + len(frame.get("gone") or ())
        if n > MAX_PROCS:
            raise BadFrame(f"procs frame with {n} records (at most {MAX_PROCS})")
    elif kind == "log":
        if len(frame["lines"]) > MAX_LOG_LINES:
            raise BadFrame(f"log frame with {len(frame['lines'])} lines (at most {MAX_LOG_LINES})")
    elif kind == "error" and len(frame.get("message") or "") > MAX_TEXT:
        frame["message"] = frame["message"][:MAX_TEXT] + "…"


class _Bucket:
    """A token bucket: ``take(n)`` spends, ``wait()`` says how long until it is out of debt."""

    __slots__ = ("burst", "level", "rate", "stamp")

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst, self.level, self.stamp = rate, burst, burst, time.monotonic()

    def _refill(self, now: float) -> None:
        self.level = min(self.burst, self.level + (now - self.stamp) * self.rate)
        self.stamp = now

    def take(self, n: float, now: float) -> bool:
        """Spend ``n``; False (nothing spent) when there is not enough."""
        self._refill(now)
        if self.level >= n:
            self.level -= n
            return True
        return False

    def spend(self, n: float, now: float) -> None:
        """Spend ``n`` even into debt (what was read is read)."""
        self._refill(now)
        self.level -= n

    def wait(self) -> float:
        return 0.0 if self.level >= 0 else -self.level / self.rate


class FloodGuard:
    """Per link: when to pause reading, and which frames to drop; counts and reports what it dropped."""

    REPORT_EVERY = 5.0  # seconds between "flooding" errors while it lasts

    def __init__(self) -> None:
        self.frames = _Bucket(FRAMES_PER_SECOND, FRAME_BURST)
        self.bytes = _Bucket(BYTES_PER_SECOND, BYTE_BURST)
        self.log_lines = _Bucket(LOG_LINES_PER_SECOND, LOG_LINE_BURST)
        self.samples = _Bucket(GPU_PROCS_PER_SECOND, GPU_PROCS_BURST)
        self.dropped = 0  # frames dropped since the last report
        self.dropped_total = 0
        self.paused_total = 0.0  # seconds reading was paused
        self._reported_at = 0.0

    def read(self, nbytes: int) -> float:
        """One line of ``nbytes`` was read: the seconds to pause before reading the next (0: go on)."""
        now = time.monotonic()
        self.frames.spend(1, now)
        self.bytes.spend(nbytes, now)
        pause = max(self.frames.wait(), self.bytes.wait())
        self.paused_total += pause
        return pause

    def admit(self, frame: dict[str, Any]) -> bool:
        """Whether to deliver ``frame``; a dropped one is counted."""
        kind = frame["type"]
        now = time.monotonic()
        if kind == "log":
            ok = self.log_lines.take(max(1, len(frame["lines"])), now)
        elif kind in ("gpu", "procs", "xid"):  # an Xid storm costs what samples cost
            ok = self.samples.take(1, now)
        else:
            return True
        if not ok:
            self.dropped += 1
            self.dropped_total += 1
        return ok

    def report(self) -> str | None:
        """"flooding: dropped N frames" when frames were dropped and the last report is old enough."""
        now = time.monotonic()
        if not self.dropped or now - self._reported_at < self.REPORT_EVERY:
            return None
        text = f"flooding: dropped {self.dropped} frames (over {LOG_LINES_PER_SECOND:.0f} log lines or " \
               f"{GPU_PROCS_PER_SECOND:.0f} samples a second)"
        self.dropped, self._reported_at = 0, now
        return text
