"""Full collections wait for a pause in the operator's keys (console/ui/idle_gc.py): a 25-80 ms collection at 1000
hosts otherwise lands inside the key it answers (an open of ~80 ms took 150-180 ms)."""

from __future__ import annotations

import gc
import time
import weakref
from pathlib import Path

from console.ui.app import FREEZE_AFTER
from console.ui.idle_gc import MAX_GAP, MIN_GAP, QUIET, SWEEP_EVERY, IdleCollector
from tests.support.app import make_app
from tests.support.wait import until


class Cycle:
    """Cyclic garbage: only a collection frees it."""

    def __init__(self) -> None:
        self.me = self


def garbage_in_the_oldest_generation() -> weakref.ref:
    """An object cycle that became garbage after it reached generation 2 (so only a full collection frees it)."""
    obj = Cycle()
    gc.collect(1)  # survives the young generations: now in generation 2
    ref = weakref.ref(obj)
    del obj
    return ref


def make_due() -> None:
    while gc.get_count()[2] < 10:  # CPython's own threshold for a full collection
        gc.collect(1)  # each young collection counts towards the full one, as the allocator's would


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_it_collects_in_a_pause_of_the_keys_and_not_while_they_come() -> None:
    clock = Clock()
    collector = IdleCollector(clock)
    before = gc.get_threshold()
    collector.install()
    try:
        assert gc.get_threshold()[:2] == before[:2] and gc.get_threshold()[2] > 1_000_000  # the counter no longer does
        ref = garbage_in_the_oldest_generation()
        make_due()
        clock.now += MIN_GAP + 1
        collector.saw_input()
        clock.now += QUIET / 2
        assert not collector.tick() and ref() is not None  # a key half a second ago: not now
        clock.now += QUIET
        assert collector.tick() and ref() is None  # quiet: collected
        assert collector.collections == 1 and collector.pause_ms >= 0

        ref = garbage_in_the_oldest_generation()
        make_due()
        clock.now += QUIET + 0.5
        assert not collector.tick() and ref() is not None  # quiet, but one ran MIN_GAP ago at most
        # keys without a pause: still one every MAX_GAP
        while clock.now - collector.collected_at < MAX_GAP:
            collector.saw_input()
            assert not collector.tick() and ref() is not None
            clock.now += 1.0
        collector.saw_input()
        assert collector.tick() and ref() is None
    finally:
        collector.uninstall()
    assert gc.get_threshold() == before


def test_survivors_leave_the_collectors_way_and_a_sweep_still_frees_their_cycles() -> None:
    """What survives a full collection is frozen (the next one scans only what came since), yet a cycle among
    frozen objects that becomes garbage later is freed by the next sweep, SWEEP_EVERY seconds on: not kept for good."""
    clock = Clock()
    collector = IdleCollector(clock)
    collector.install()
    try:
        alive = Cycle()  # long-lived state: survives the collection below
        make_due()
        clock.now += MIN_GAP + QUIET + 1
        assert collector.tick() and collector.sweeps == 0
        assert gc.is_tracked(alive) and not any(alive is o for o in gc.get_objects(2)), "survivor not frozen"
        ref = weakref.ref(alive)
        del alive  # garbage now, but frozen: plain full collections do not see it
        make_due()
        clock.now += MIN_GAP + QUIET + 1
        assert collector.tick() and ref() is not None
        clock.now = collector.swept_at + SWEEP_EVERY
        make_due()
        assert collector.tick() and collector.sweeps == 1 and ref() is None
        assert collector.pause_total_ms >= collector.pause_ms >= 0
    finally:
        collector.uninstall()
        gc.unfreeze()


def test_nothing_due_nothing_collected() -> None:
    clock = Clock()
    collector = IdleCollector(clock)
    collector.install()
    try:
        gc.collect()  # the counter starts from zero
        clock.now += MAX_GAP + 1
        assert not collector.tick() and collector.collections == 0
    finally:
        collector.uninstall()


async def test_the_app_holds_full_collections_while_keys_come_and_gives_the_collector_back(tmp_path: Path) -> None:
    before = gc.get_threshold()
    app = make_app(tmp_path, gpus=1)
    async with app.run_test(size=(120, 40)) as pilot:
        assert gc.get_threshold()[2] > 1_000_000
        await pilot.pause(FREEZE_AFTER + 0.5)  # after the start-up objects were frozen (collected first)
        ref = garbage_in_the_oldest_generation()
        make_due()
        app.idle_gc.collected_at = time.monotonic() - MIN_GAP - 1
        typing_until = time.monotonic() + 3.0
        while time.monotonic() < typing_until:  # an operator moving through the grid
            await pilot.press("down" if int(time.monotonic() * 4) % 2 else "up")
            await pilot.pause(0.2)
            assert ref() is not None, "a full collection ran between keys 0.2 s apart"
        await until(lambda: ref() is None, QUIET + 5.0, "a full collection in a pause of the keys", interval=0.2,
                    sleep=pilot.pause)
    assert gc.get_threshold() == before
