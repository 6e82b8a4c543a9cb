"""Agent frames as the console receives them (``FleetState.apply_frame``), for tests that feed a state by hand.

Each builder returns the frame's dict with the fields a test usually leaves alone filled in; keyword
arguments add or override fields. The wire contract itself is ``console/agent/wire/protocol.py``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

Frame = dict[str, Any]


def hello(ts: float = 0, **fields: Any) -> Frame:
    """The agent's first frame (protocol version 1)."""
    return {"type": "hello", "ts": ts, "v": 1, **fields}


def gpu(devices: Iterable[dict[str, Any]], ts: float = 0, full: bool = True, **fields: Any) -> Frame:
    """A GPU sample in state ``ok``; ``full`` frames carry the static fields (name, uuid, totals)."""
    return {"type": "gpu", "ts": ts, "state": "ok", "full": full, "devices": list(devices), **fields}


def procs(table: Iterable[dict[str, Any]], ts: float = 0) -> Frame:
    """The whole process table."""
    return {"type": "procs", "ts": ts, "full": True, "procs": list(table)}


def procs_delta(upsert: Iterable[dict[str, Any]] = (), gone: Iterable[int] = (), ts: float = 0) -> Frame:
    """A change to the process table: records added or changed, pids gone."""
    return {"type": "procs", "ts": ts, "full": False, "upsert": list(upsert), "gone": list(gone)}


def heartbeat(ts: float = 0, seq: int = 1, samples: int = 1, sent: int = 1, **fields: Any) -> Frame:
    return {"type": "heartbeat", "ts": ts, "seq": seq, "samples": samples, "sent": sent, **fields}


def log(lines: list[str], ts: float = 0, path: str = "/tmp/bench.log", first_line: int = 1, **fields: Any) -> Frame:
    """New lines of one followed log (no backlog, no event)."""
    return {"type": "log", "ts": ts, "path": path, "first_line": first_line, "lines": lines, "backlog": False,
            "event": None, **fields}
