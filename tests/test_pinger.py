"""One timer pings every session of an event loop: each gets a ping every PING_EVERY, the first within that long;
a session that goes is no longer pinged; the timer stops with the last one (nothing left running)."""

from __future__ import annotations

import asyncio
import itertools
import json

from console.link.pinger import SLOTS, pinger


class Pipe:
    """The write end of a session: what went out, when (the loop's clock)."""

    def __init__(self) -> None:
        self.at: list[float] = []

    def write(self, data: bytes) -> None:
        assert json.loads(data) == {"id": 0, "op": "ping", "args": {}}
        self.at.append(asyncio.get_running_loop().time())


class Broken:
    def write(self, data: bytes) -> None:
        raise BrokenPipeError("gone")


async def test_every_session_is_pinged_every_period_from_one_timer() -> None:
    every = 0.5
    pings = pinger(every)
    assert pinger(every) is pings  # one per loop
    t0 = asyncio.get_running_loop().time()
    sessions = [Pipe() for _ in range(12)]
    for s in sessions:
        pings.add(s)
    broken = Broken()
    pings.add(broken)  # a dead session's write fails: the others are pinged all the same
    await asyncio.sleep(every * 3.1)
    for s in sessions:
        assert 2 <= len(s.at) <= 4 and s.at[0] - t0 <= every + 0.15, s.at
        assert all(abs((b - a) - every) < 0.15 for a, b in itertools.pairwise(s.at)), s.at
    assert len({round(s.at[0] - t0, 1) for s in sessions}) == SLOTS  # spread over the period, not all at once

    gone = sessions.pop()
    pings.discard(gone)
    before = [len(s.at) for s in [gone, *sessions]]
    await asyncio.sleep(every * 1.2)
    assert len(gone.at) == before[0] and all(len(s.at) > n for s, n in zip(sessions, before[1:], strict=True))
    for s in [*sessions, broken]:
        pings.discard(s)
    assert len(pings) == 0 and pings._timer is None  # nothing left scheduled


async def test_a_session_added_twice_is_pinged_once_and_goes_with_one_discard() -> None:
    pings = pinger(0.2)
    pipe = Pipe()
    pings.add(pipe)
    pings.add(pipe)
    await asyncio.sleep(0.5)
    assert 2 <= len(pipe.at) <= 3 and all(b - a > 0.1 for a, b in itertools.pairwise(pipe.at)), pipe.at
    pings.discard(pipe)
    n = len(pipe.at)
    await asyncio.sleep(0.3)
    assert len(pipe.at) == n and len(pings) == 0


def test_a_loop_that_is_gone_leaves_no_pinger() -> None:
    """Each ``asyncio.run`` (the command line, tests) is a loop of its own: its pinger does not keep it alive."""
    import gc
    import weakref

    from console.link.pinger import _PINGERS

    loops = []

    async def use() -> None:
        loop = asyncio.get_running_loop()
        loops.append(weakref.ref(loop))
        pings = pinger(1.0)
        pipe = Pipe()
        pings.add(pipe)
        pings.discard(pipe)
        assert _PINGERS.get(loop) is pings

    for _ in range(3):
        asyncio.run(use())
    gc.collect()
    assert [ref() for ref in loops] == [None, None, None]  # gone, and with them their registry entries
