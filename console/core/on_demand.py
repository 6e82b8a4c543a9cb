"""SSH on demand for the instances a Prometheus source covers: opened for an action, closed when idle.

Why: a fleet behind DCGM-exporter already has its GPU figures in Prometheus; a thousand SSH sessions that
only repeat them cost the console (and every host) for nothing. With ``[[source]] ... ssh = "on_demand"`` (the
default), a fleet-file instance whose GPUs the source's last good answer carried gets no SSH session until
the operator needs one: opening its instance screen, diagnose, restart, a probe, log reading, a signal (the
shell key runs ``ssh`` itself). A session opened so closes once nothing used it for ``IDLE_CLOSE`` seconds
and its instance screen is not open. Instances the source does not cover keep their SSH link as always,
and so do all of them while every on-demand source is down: a Prometheus that fails never leaves a host
unwatched (the links start; they close again once it answers and they sit idle).

At start the console waits for the sources' first answer (at most ``FIRST_ANSWER_WAIT`` s) before it opens
SSH to the instances they do not cover, so a covered fleet never sees a connect storm.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from console.core.controller import FleetController
    from console.link import Link

IDLE_CLOSE = 120.0  # seconds without use before an on-demand session closes
FIRST_ANSWER_WAIT = 15.0  # seconds at most before instances are judged against the sources
CHECK_EVERY = 1.0  # seconds between looks


class OnDemand:
    """The controller's policy for which SSH links run; ``demand(name)`` is the door to a link."""

    def __init__(self, controller: FleetController) -> None:
        self.controller = controller
        self.sources: list[Any] = []  # the on-demand PrometheusSources (``watch``)
        self.last_used: dict[str, float] = {}  # name -> monotonic time of its last use
        self.pinned: str | None = None  # the instance whose screen is open
        self.opened = 0  # sessions opened on demand (for the operator's curiosity and the tests)
        self.closed = 0
        self._started_at = time.monotonic()
        self._task: asyncio.Task[None] | None = None

    # -- what is covered ------------------------------------------------------------------------------
    @property
    def settled(self) -> bool:
        """Every on-demand source answered (or failed) once, or it is past FIRST_ANSWER_WAIT."""
        return (all(s.status != "starting" for s in self.sources)
                or time.monotonic() - self._started_at >= FIRST_ANSWER_WAIT)

    def covered(self) -> dict[str, str]:
        """name -> the key of the source (up now) that covers it."""
        out: dict[str, str] = {}
        for source in self.sources:
            if source.status == "ok":
                for name in source.covered:
                    out.setdefault(name, source.key)
        return out

    # -- the door -------------------------------------------------------------------------------------
    def demand(self, name: str) -> Link | None:
        """The link of ``name``, opened now when it had none (None: no such instance in the fleet)."""
        controller = self.controller
        self.last_used[name] = time.monotonic()
        link = controller.links.get(name)
        if link is not None:
            return link
        inst = next((i for i in controller.fleet.instances if i.name == name), None)
        if inst is None or inst.transport not in ("ssh", "local"):
            return None
        controller.state.expect_connect(name)  # an open on demand, not a reconnect (the flap counter)
        link = controller.new_link(inst)
        controller.links[name] = link
        link.start()
        self.opened += 1
        return link

    def pin(self, name: str | None) -> None:
        """The instance screen open now (kept open while it is), or None."""
        if name is not None:
            self.last_used[name] = time.monotonic()
        self.pinned = name

    def used(self, name: str) -> None:
        """An action on ``name`` just ended: its idle time starts now."""
        self.last_used[name] = time.monotonic()

    # -- the loop -------------------------------------------------------------------------------------
    def watch(self, sources: list[Any]) -> None:
        """Start judging the fleet against ``sources`` (those with ``ssh = "on_demand"``)."""
        self.sources = [s for s in sources if getattr(s.spec, "ssh", "on_demand") == "on_demand"]
        self._started_at = time.monotonic()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="ssh-on-demand")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            await self.check()
            await asyncio.sleep(CHECK_EVERY)

    async def check(self) -> None:
        """Start the links of instances no source covers; close idle on-demand ones of covered instances."""
        if not self.settled:
            return
        controller = self.controller
        covered = self.covered()
        now = time.monotonic()
        closing = []
        for inst in controller.fleet.instances:
            name = inst.name
            if inst.transport not in ("ssh", "local"):
                continue
            link = controller.links.get(name)
            if name not in covered:
                if link is None:
                    self.demand(name)  # not in Prometheus (or it is down): watched over SSH as always
                continue
            if link is None:
                current = controller.state.get(name)
                if current is not None and current.link_status != "connected":
                    self._via(name, covered[name])
                continue
            if name != self.pinned and now - self.last_used.get(name, 0.0) >= IDLE_CLOSE \
                    and not controller.busy(name):
                closing.append((name, controller.links.pop(name)))
        for name, link in closing:
            await link.stop()
            self.closed += 1
            if name not in controller.links:  # not demanded again meanwhile
                self._via(name, covered[name])

    def _via(self, name: str, source: str) -> None:
        state = self.controller.state
        state.expect_connect(name)  # the figures come from the source now: not a reconnect either
        state.set_link_status(name, "connected", f"via {source} (SSH on demand)")
