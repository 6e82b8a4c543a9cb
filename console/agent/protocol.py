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
from typing import IO, Any, Dict, Optional

PROTOCOL_VERSION = 1
FRAME_TYPES = ("hello", "heartbeat", "gpu", "procs", "log", "result", "error")
MAX_LINE_BYTES = 8 * 1024 * 1024


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
    """Thread-safe writer of frames to a binary stream; counts the bytes it sent."""

    def __init__(self, stream: Optional[IO[bytes]] = None) -> None:
        self._stream = stream if stream is not None else sys.stdout.buffer
        self._lock = threading.Lock()
        self.bytes_sent = 0
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
