"""Full garbage collections while the operator is not typing, not in the middle of a key's answer.

CPython starts a full (generation 2) collection when enough objects survived the younger ones; at 1000 hosts the
console's long-lived state makes each one 25-80 ms, and they came every few seconds. Work that allocates a lot
(opening an instance builds its tabs' lines) is what tips the counter, so the pause landed inside the very key
it was answering: opens of 72-87 ms took 149-181 ms when one did (bench/scale.py, docs/benchmarks.md).

``IdleCollector`` takes generation 2 off the allocation counter (``gc.set_threshold``: the youngest two
generations keep theirs) and runs it from the app's clock instead: when a collection is due by the counter
CPython keeps (``gc.get_count()[2]``) and no key or mouse event came for ``QUIET`` seconds, at most every
``MIN_GAP`` seconds; an operator who never stops typing still gets one every ``MAX_GAP`` seconds. Cyclic garbage
therefore lives seconds longer; memory stays bounded by the same rule, only its timing moved.

What survives a full collection is moved out of the collector's way (``gc.freeze``, as at start-up): the state
of a thousand hosts is long-lived, and scanning all of it again every few seconds to find the little garbage
made since was most of a collection's cost (a full collection then scans only what came since the last one).
Cyclic garbage among frozen objects (a closed screen's widgets) is found by a collection of everything
(``gc.unfreeze`` first) every ``SWEEP_EVERY`` seconds, so it lives minutes at most, never for good.
"""

from __future__ import annotations

import gc
import time
from typing import Callable, Optional, Tuple

QUIET = 1.0  # seconds without input before a full collection may run
MIN_GAP = 5.0  # seconds between idle full collections at least
MAX_GAP = 30.0  # seconds: a full collection runs even while keys keep coming
SWEEP_EVERY = 120.0  # seconds between collections of everything, frozen objects included
OFF = 1 << 30  # a generation-2 threshold the counter never reaches


class IdleCollector:
    """Owns generation 2 while installed; ``tick`` (about once a second) decides whether to collect now."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.input_at = clock()
        self.collected_at = clock()
        self.collections = 0  # full collections this collector ran
        self.pause_ms = 0.0  # the last one's duration
        self.pause_total_ms = 0.0  # all of them (bench/scale.py reports its rate)
        self.sweeps = 0  # of which collections of everything (frozen objects included)
        self.swept_at = clock()
        self._saved: Optional[Tuple[int, int, int]] = None

    @property
    def installed(self) -> bool:
        return self._saved is not None

    def install(self) -> None:
        if self._saved is None:
            self._saved = gc.get_threshold()
            gc.set_threshold(self._saved[0], self._saved[1], OFF)

    def uninstall(self) -> None:
        """Give generation 2 back to the counter (tests run many apps in one process)."""
        if self._saved is not None:
            gc.set_threshold(*self._saved)
            self._saved = None

    def freeze(self) -> None:
        """Once the screens are built: collect, then move every object left into the permanent generation, so
        that full collections scan only what came later (``gc.freeze``; collecting first keeps the garbage of
        start-up out of the frozen objects, which only a sweep, ``SWEEP_EVERY``, looks at again)."""
        gc.collect()
        gc.freeze()
        self.collected_at = self.swept_at = self.clock()

    def saw_input(self) -> None:
        self.input_at = self.clock()

    def due(self) -> bool:
        """Would CPython's own counter have asked for a full collection by now?"""
        threshold = self._saved[2] if self._saved else gc.get_threshold()[2]
        return gc.get_count()[2] >= threshold

    def tick(self) -> bool:
        """Collect if due and the operator is quiet (or MAX_GAP passed); True when it collected."""
        if not self.installed or not self.due():
            return False
        now = self.clock()
        since = now - self.collected_at
        if since < MIN_GAP or (now - self.input_at < QUIET and since < MAX_GAP):
            return False
        started = time.perf_counter()
        sweep = now - self.swept_at >= SWEEP_EVERY
        if sweep:
            gc.unfreeze()  # (the start-up objects too: what became garbage among them since is found now)
        gc.collect()
        gc.freeze()  # the survivors are long-lived: the next full collection scans only what comes after them
        self.pause_ms = (time.perf_counter() - started) * 1000
        self.pause_total_ms += self.pause_ms
        self.collected_at = self.clock()
        if sweep:
            self.swept_at = self.collected_at
            self.sweeps += 1
        self.collections += 1
        return True


__all__ = ["MAX_GAP", "MIN_GAP", "QUIET", "SWEEP_EVERY", "IdleCollector"]
