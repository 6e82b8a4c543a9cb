"""The bounded rings of one instance's state: a GPU's last sample and history, a followed file's tail.

Plain data (no Textual), filled by the frame handlers (``console/core/frame_handlers.py``) and read by the
panes, the instance screen, the metrics and the MCP tools.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Deque, Dict, List, Optional, Tuple, cast

from console.agent.wire.protocol import GpuDevice, GpuHealth

MAX_XIDS = 32  # Xid events kept per GPU
HISTORY_SECONDS = 600  # GPU util history: 10 minutes at 1 Hz
LOG_RING_LINES = 2000  # lines kept per followed file
GAP_MARKER = "[... lines not received while disconnected ...]"


class GpuState:
    """One device: last sample, static fields (kept from ``full`` frames), util/mem history rings."""

    __slots__ = ("error", "health", "health_at", "index", "lost", "mem_hist", "missing", "power_hist", "sample",
                 "static", "temp_hist", "util_hist", "xids")

    def __init__(self, index: int) -> None:
        self.index = index
        self.static: GpuDevice = {"index": index}  # the static fields of the last ``full`` frame
        self.sample: GpuDevice = {"index": index}  # the last record, ``procs`` filled in when left out
        self.util_hist: Deque[int] = deque(maxlen=HISTORY_SECONDS)
        self.mem_hist: Deque[int] = deque(maxlen=HISTORY_SECONDS)
        self.temp_hist: Deque[int] = deque(maxlen=HISTORY_SECONDS)  # °C, -1 unknown (the GPU tab's charts)
        self.power_hist: Deque[int] = deque(maxlen=HISTORY_SECONDS)  # whole watts, -1 unknown
        self.lost = False
        self.missing = False  # was reported before, absent from the latest frame
        self.error: Optional[str] = None
        self.health: GpuHealth = {}  # the last health record (kept while slim frames leave it out)
        self.health_at: Dict[str, float] = {}  # health field -> console time it last changed
        self.xids: List[Dict[str, Any]] = []  # Xid events {xid, time, seen_before?}, oldest first, at most MAX_XIDS

    def get(self, key: str, default: Any = None) -> Any:
        """A field of the last sample, else of the static fields, else ``default``."""
        value = cast(Dict[str, Any], self.sample).get(key)
        if value is None:
            value = cast(Dict[str, Any], self.static).get(key, default)
        return default if value is None else value

    @property
    def util(self) -> Optional[int]:
        return self.sample.get("util")

    @property
    def mem_fraction(self) -> Optional[float]:
        used, total = self.sample.get("mem_used"), self.static.get("mem_total")
        if used is None or not total:
            return None
        return used / total


class LogRing:
    """The tail of one followed file: ``(line_number, text)`` pairs, capped; ``(0, text)`` marks an event.

    A frame's lines replace those the ring holds from its ``first_line`` on (docs/architecture.md).
    """

    __slots__ = ("event", "lines", "missing", "path", "updated")

    def __init__(self, path: str, maxlen: int = LOG_RING_LINES) -> None:
        self.path = path
        self.lines: Deque[Tuple[int, str]] = deque(maxlen=maxlen)
        self.event: Optional[str] = None
        self.missing = False
        self.updated = 0.0

    def add(self, first_line: Optional[int], lines: List[str], event: Optional[str], now: float,
            backlog: bool = False) -> None:
        """``backlog``: the lines a (re)connected agent resends; a gap before them was lost while disconnected."""
        if backlog and lines and first_line is not None and not event:
            last = self.last
            if last is not None and first_line > last[0] + 1:
                self.lines.append((0, GAP_MARKER))
        if event:
            self.event = event
            self.missing = event == "missing"
            if event in ("rotated", "truncated", "created"):
                self.lines.append((0, "--- file %s ---" % event))
        if lines:
            self.missing = False
            if first_line is None:
                first_line = (self.lines[-1][0] + 1) if self.lines else 1
            ring = self.lines
            while ring and ring[-1][0] >= first_line:  # lines sent again replace theirs: a progress line that
                ring.pop()  # moved on (``partial``), or a backlog after a reconnect (a marker, 0, stops it)
            for i, text in enumerate(lines):
                self.lines.append((first_line + i, text))
        self.updated = now

    @property
    def last(self) -> Optional[Tuple[int, str]]:
        for item in reversed(self.lines):
            if item[0]:
                return item
        return None

