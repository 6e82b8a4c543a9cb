"""The automatic diagnosis: one rule for the TUI, ``serve`` and the demo.

An instance is diagnosed by itself, so that its pane shows the cause without a key press, when

- it *enters* trouble (``benchmark_down`` or ``gpu_idle``) from a status that was neither trouble nor
  ``failed`` (a verdict is already there for those), or
- it is ``failed`` while its benchmark runs again (the failed verdict may be stale: look again);

both only when it was not diagnosed automatically in the last ``AUTO_DIAGNOSE_EVERY``. A verdict taken early
is taken again (issue 35: "missing input" at 30 s of GPU idle, while a download still moved, stayed for
minutes though the download had stalled since), at most once per ``AUTO_REDIAGNOSE_GAP``, when

- its trouble changes (``gpu_idle`` <-> ``benchmark_down``) after the verdict, or
- the trouble grows older than the stall time (``stall_seconds``, the agent's: a download that moved at the
  verdict and stopped has stalled by then) while the verdict is younger than that.

Always only when it is connected with an agent (agentless hosts cannot diagnose) and no diagnosis is in
flight on its host. The rule reads the fleet state once a second (``AUTO_POLL``), so it holds for any state,
observed or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from console.agent.wire.config import DEFAULTS as AGENT_DEFAULTS
from console.core.actions import ActionError
from console.core.state import FleetState, InstanceState
from console.link import LinkError

AUTO_TROUBLE = frozenset(("benchmark_down", "gpu_idle"))  # statuses that get a diagnosis by themselves
AUTO_DIAGNOSE_EVERY = 300.0  # seconds: at most one automatic diagnosis of an instance in this long
AUTO_POLL = 1.0  # seconds between looks at the fleet state
AUTO_REDIAGNOSE_GAP = 30.0  # seconds: a verdict taken again (trouble changed, stall time crossed) at most this often
STALL_MARGIN = 5.0  # seconds past the stall time before looking again (the agent counts "stuck for > stall")


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
        self.trouble_since: dict[str, float] = {}  # name -> state clock when its present trouble began
        self.changed_at: dict[str, float] = {}  # name -> state clock when its trouble last changed kind
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
            again = self._outdated(name, inst, before)
            if not (entered or stale_failure or again) or inst.link_status != "connected":
                continue
            gap = AUTO_REDIAGNOSE_GAP if again else AUTO_DIAGNOSE_EVERY
            if now - self.last.get(name, -gap) < gap:
                continue
            if not self.controller.can_diagnose(name):
                continue
            out.append(name)
        return out

    def _outdated(self, name: str, inst: InstanceState, before: str | None) -> bool:
        """The verdict in hand predates a change of trouble or the stall time's crossing (state clock)."""
        clock = self.controller.state.clock()
        if inst.status not in AUTO_TROUBLE and inst.status != "failed":
            self.trouble_since.pop(name, None)
            self.changed_at.pop(name, None)
            return False
        since = self.trouble_since.setdefault(name, clock)
        if before in AUTO_TROUBLE and inst.status in AUTO_TROUBLE and before != inst.status:
            self.changed_at[name] = clock
        at = inst.diagnosis_at
        if at is None or not inst.diagnosis:
            return False
        changed = self.changed_at.get(name)
        if changed is not None and at < changed:
            return True
        stall = stall_seconds(inst) + STALL_MARGIN
        return at - since < stall <= clock - since

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


def stall_seconds(inst: InstanceState) -> float:
    """The instance's stall time as its agent has it (``stall_seconds`` in fleet.toml), or the agent's default."""
    agent_config = getattr(inst.instance, "agent_config", None)
    value = agent_config().get("stall_seconds") if callable(agent_config) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    return float(AGENT_DEFAULTS["stall_seconds"])
