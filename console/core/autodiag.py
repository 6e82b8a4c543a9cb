"""The automatic diagnosis: one rule for the TUI, ``serve`` and the demo.

An instance is diagnosed by itself, so that its pane shows the cause without a key press, when

- it *enters* trouble (``benchmark_down`` or ``gpu_idle``) from a status that was neither trouble nor
  ``failed`` (a verdict is already there for those), or
- it is ``failed`` while its benchmark runs again (the failed verdict may be stale: look again);

and in both cases only when it is connected with an agent (agentless hosts cannot diagnose), no diagnosis
is in flight on its host, and it was not diagnosed automatically in the last ``AUTO_DIAGNOSE_EVERY``.
The rule reads the fleet state once a second (``AUTO_POLL``), so it holds for any state, observed or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from console.core.actions import ActionError
from console.core.state import FleetState
from console.link import LinkError

AUTO_TROUBLE = frozenset(("benchmark_down", "gpu_idle"))  # statuses that get a diagnosis by themselves
AUTO_DIAGNOSE_EVERY = 300.0  # seconds: at most one automatic diagnosis of an instance in this long
AUTO_POLL = 1.0  # seconds between looks at the fleet state


class Diagnoser(Protocol):
    """What the rule needs of the controller."""

    state: FleetState

    def can_diagnose(self, name: str) -> bool:
        """Has an agent link (not agentless) and no diagnosis in flight on its host."""

    def diagnose(self, name: str, timeout: float = ...) -> Awaitable[dict[str, Any]]:
        """Run the agent's diagnosis; the verdict lands in the state."""


class AutoDiagnosis:
    """Runs the rule above against one controller: ``start()`` in the event loop, ``stop()`` at the end."""

    def __init__(self, controller: Diagnoser, report: Callable[[str, str], None] | None = None) -> None:
        self.controller = controller
        self.report = report  # (name, reason) of a diagnosis that could not run; serve logs it
        self.seen: dict[str, str] = {}  # name -> the status when last looked at
        self.last: dict[str, float] = {}  # name -> monotonic time of its last automatic diagnosis
        self._task: asyncio.Task[None] | None = None
        self._running: set[asyncio.Task[None]] = set()

    def candidates(self, now: float | None = None) -> list[str]:
        """The instances the rule says to diagnose now (and it notes the statuses it saw)."""
        now = time.monotonic() if now is None else now
        out = []
        for name, inst in self.controller.state.instances.items():
            before = self.seen.get(name)
            self.seen[name] = inst.status
            entered = inst.status in AUTO_TROUBLE and before not in AUTO_TROUBLE and before != "failed"
            stale_failure = inst.status == "failed" and inst.bench_running
            if not (entered or stale_failure) or inst.link_status != "connected":
                continue
            if now - self.last.get(name, -AUTO_DIAGNOSE_EVERY) < AUTO_DIAGNOSE_EVERY:
                continue
            if not self.controller.can_diagnose(name):
                continue
            out.append(name)
        return out

    async def _one(self, name: str) -> None:
        self.last[name] = time.monotonic()
        try:
            await self.controller.diagnose(name)
        except (ActionError, TimeoutError, LinkError) as exc:
            if self.report is not None:
                self.report(name, str(exc) or type(exc).__name__)

    async def _loop(self) -> None:
        while True:
            for name in self.candidates():
                task = asyncio.get_running_loop().create_task(self._one(name))
                self._running.add(task)
                task.add_done_callback(self._running.discard)
            await asyncio.sleep(AUTO_POLL)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name="auto-diagnosis")

    async def stop(self) -> None:
        task, self._task = self._task, None
        tasks = [t for t in (task, *self._running) if t is not None]
        for t in tasks:
            t.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*tasks, return_exceptions=True)
