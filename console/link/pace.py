"""Pacing a fleet's connections: a bound on handshakes in flight, and reconnect storms spread out.

A thousand SSH handshakes at once (start-up, or every link after a network blip) cost key exchanges,
probes and uploads on the one event loop that also answers keys and paints: ``ConnectLimiter`` lets at
most ``slots`` links through the connect + auth + agent-start phase at once (peers use 32-64); the others
wait, shown as "connecting (queued)". ``DropRecord`` counts the sessions that ended lately, so that when
many drop together each one's first retry gets a random spread that grows with the storm (a lone drop
still reconnects within about a second).

Both are per event loop (``for_loop()``): asyncio primitives belong to one loop, and each test runs its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
import weakref
from collections import deque
from collections.abc import AsyncIterator

DEFAULT_CONNECT_SLOTS = 48
SLOTS_ENV = "FLEET_CONSOLE_CONNECT_SLOTS"  # benches and operators: another bound without a code change
STORM_WINDOW = 10.0  # seconds: drops within this long of each other count as one storm
STORM_RATE = 200.0  # reconnects per second a storm is spread to (1000 drops: over 5 s)
STORM_MAX_SPREAD = 5.0


def default_slots() -> int:
    """``FLEET_CONSOLE_CONNECT_SLOTS`` when it is a positive integer, else ``DEFAULT_CONNECT_SLOTS``."""
    raw = os.environ.get(SLOTS_ENV, "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    return DEFAULT_CONNECT_SLOTS


class ConnectLimiter:
    """At most ``slots`` links in their connect phase at once; counters say what it is doing.

    ``in_flight`` (holding a slot now), ``peak`` (the most at once so far), ``waiting`` (queued now) and
    ``entered`` (slots taken in all) are plain attributes: the UI, benches and tests read them.
    """

    def __init__(self, slots: int | None = None) -> None:
        self.slots = slots if slots is not None else default_slots()
        if self.slots < 1:
            raise ValueError("a connect limiter needs at least one slot")
        self._sem = asyncio.Semaphore(self.slots)
        self.in_flight = 0
        self.peak = 0
        self.waiting = 0
        self.entered = 0

    @property
    def full(self) -> bool:
        """Would a new link have to wait?"""
        return self._sem.locked()

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold a slot for the body (released on any exit, cancellation included)."""
        self.waiting += 1
        try:
            await self._sem.acquire()
        finally:
            self.waiting -= 1
        self.in_flight += 1
        self.entered += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            yield
        finally:
            self.in_flight -= 1
            self._sem.release()


class DropRecord:
    """When sessions ended lately: how big the current storm is, and the spread a retry gets from it."""

    def __init__(self, window: float = STORM_WINDOW) -> None:
        self.window = window
        self._drops: deque[float] = deque()

    def add(self, now: float | None = None) -> None:
        self._drops.append(time.monotonic() if now is None else now)

    def recent(self, now: float | None = None) -> int:
        now = time.monotonic() if now is None else now
        while self._drops and now - self._drops[0] > self.window:
            self._drops.popleft()
        return len(self._drops)

    def spread(self, now: float | None = None) -> float:
        """A random extra delay, uniform in 0 .. min(5 s, recent drops / 200 per s)."""
        return random.uniform(0.0, min(STORM_MAX_SPREAD, self.recent(now) / STORM_RATE))


_limiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, ConnectLimiter] = weakref.WeakKeyDictionary()
_drops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, DropRecord] = weakref.WeakKeyDictionary()


def connect_limiter() -> ConnectLimiter:
    """The running loop's limiter (made on first use, with ``default_slots()``)."""
    loop = asyncio.get_running_loop()
    limiter = _limiters.get(loop)
    if limiter is None:
        limiter = _limiters[loop] = ConnectLimiter()
    return limiter


def set_connect_slots(slots: int) -> ConnectLimiter:
    """Give the running loop a limiter of ``slots`` (links that hold a slot of the old one keep it)."""
    limiter = _limiters[asyncio.get_running_loop()] = ConnectLimiter(slots)
    return limiter


def drop_record() -> DropRecord:
    """The running loop's record of recent session drops."""
    loop = asyncio.get_running_loop()
    record = _drops.get(loop)
    if record is None:
        record = _drops[loop] = DropRecord()
    return record
