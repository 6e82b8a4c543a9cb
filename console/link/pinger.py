"""The console's pings to its agents, every session on one event loop from one timer.

An agent exits when it heard nothing from the console for a few pings (its watchdog: an orphan left by a lost
connection goes away), so each session gets a ping every ``every`` seconds. A task per session sleeping that
long cost a timer, a future and a task step per ping (200 wake-ups a second at 1000 hosts, each leaving objects
for the garbage collector to walk); here sessions are spread over ``SLOTS`` groups in turn and one timer pings
one group each ``every / SLOTS`` seconds, running only while there are sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from typing import Any

from console.agent.wire.protocol import encode

SLOTS = 5
PING = encode({"id": 0, "op": "ping", "args": {}})  # id 0: the agent answers it only when it sent nothing lately


class Pinger:
    """``add(session)`` / ``discard(session)``: the sessions pinged every ``every`` seconds (the first ping within
    that long); anything with ``write(bytes)`` is a session; a write that fails is the session's reader's news."""

    def __init__(self, every: float) -> None:
        self.every = every  # (the loop is not held: this pinger goes with it, see ``pinger``)
        self.slots: list[dict[Any, None]] = [{} for _ in range(SLOTS)]  # insertion-ordered sets
        self._slot_of: dict[Any, int] = {}
        self._next_slot = 0  # where the next session goes (round robin: the groups stay even)
        self._turn = 0  # the group pinged at the next tick
        self._timer: asyncio.TimerHandle | None = None
        self._due = 0.0  # the loop time of the next tick (ticks keep to their schedule, late ones do not add up)

    def add(self, session: Any) -> None:
        if session in self._slot_of:
            return
        slot = self._next_slot
        self._next_slot = (slot + 1) % SLOTS
        self.slots[slot][session] = None
        self._slot_of[session] = slot
        if self._timer is None:
            loop = asyncio.get_running_loop()
            self._due = loop.time() + self.every / SLOTS
            self._timer = loop.call_at(self._due, self._tick)

    def discard(self, session: Any) -> None:
        slot = self._slot_of.pop(session, None)
        if slot is not None:
            self.slots[slot].pop(session, None)
        if not self._slot_of and self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def __len__(self) -> int:
        return len(self._slot_of)

    def _tick(self) -> None:
        group = self.slots[self._turn]
        self._turn = (self._turn + 1) % SLOTS
        for session in list(group):
            with contextlib.suppress(Exception):
                session.write(PING)
        if not self._slot_of:
            self._timer = None
            return
        loop = asyncio.get_running_loop()
        self._due = max(self._due + self.every / SLOTS, loop.time())
        self._timer = loop.call_at(self._due, self._tick)


_PINGERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Pinger] = weakref.WeakKeyDictionary()


def pinger(every: float) -> Pinger:
    """The running loop's pinger (made at first use; forgotten with the loop, which alone holds it)."""
    loop = asyncio.get_running_loop()
    found = _PINGERS.get(loop)
    if found is None:
        found = _PINGERS[loop] = Pinger(every)
    return found
