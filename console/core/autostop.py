"""The automatic stop: ``[actions] stop_idle_after = "30m"`` stops an instance idle that long, never otherwise.

An idle episode (console/core/spend.py) that reaches ``stop_idle_after - lead`` is announced: the instance's
``stop_due`` is set (the pane says "stops itself in 4m"), the state toasts it, and the alert engine sends an
``AutoStop`` alert to the fleet's webhooks (console/monitor/alerts.py). ``lead`` is a third of the wait, at most
5 minutes; an episode first seen older than that is announced now and stopped ``lead`` later, never at once.
Any activity (the instance leaves the idle mode) cancels it. At ``stop_due`` the stop runs as the operator's
does (audited, origin ``auto``, console/core/stop.py); never under ``--read-only``; once per episode.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from console.agent.wire.timefmt import fmt_age
from console.core.stop import stop_instances

log = logging.getLogger("fleet_console")

MAX_LEAD = 300.0  # seconds between the announcement and the stop, at most


def lead_time(after: float) -> float:
    return min(MAX_LEAD, after / 3.0)


class AutoStop:
    """Evaluated once a second (the monitoring's tick) over the controller's fleet and state."""

    def __init__(self, controller: Any) -> None:
        self.controller = controller
        self.episodes: dict[str, float] = {}  # name -> the idle episode announced (its start)
        self.done: set[tuple[str, float]] = set()  # (name, episode start) already stopped (or tried)
        self.tasks: set[asyncio.Task[None]] = set()

    @property
    def after(self) -> float | None:
        if self.controller.read_only:
            return None
        return self.controller.fleet.actions.stop_idle_after

    def evaluate(self, now: float) -> None:
        after = self.after
        state = self.controller.state
        for name, inst in state.instances.items():
            meter = inst.meter
            episode = meter.mode_since if meter.mode == "idle" else None
            announced = self.episodes.get(name)
            if announced is not None and announced != episode:  # activity: the plan is off
                del self.episodes[name]
                inst.stop_due = None
                state.note(f"{name}: automatic stop cancelled (work resumed)", "information")
                state.mark_dirty([name])
            if after is None or episode is None or (name, episode) in self.done:
                continue
            lead = lead_time(after)
            if announced is None and now - episode >= after - lead:
                self.episodes[name] = episode
                inst.stop_due = max(episode + after, now + lead)
                state.note(f"{name}: idle {fmt_age(now - episode)}; stops itself in {fmt_age(inst.stop_due - now)} "
                           "unless work resumes ([actions] stop_idle_after)", "warning")
                state.mark_dirty([name])
            elif announced is not None and inst.stop_due is not None and now >= inst.stop_due:
                self.done.add((name, episode))
                del self.episodes[name]
                inst.stop_due = None
                task = asyncio.get_running_loop().create_task(self._stop(name, now - episode))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)

    async def _stop(self, name: str, idle: float) -> None:
        controller, state = self.controller, self.controller.state
        reason = f"idle {fmt_age(idle)} (stop_idle_after)"
        try:
            results = await stop_instances(controller.fleet, controller.audit, [name], read_only=controller.read_only,
                                           origin="auto", reason=reason)
        except Exception as exc:  # refused (no vast id, the audit log): said, never raised into the tick
            state.note(f"{name}: automatic stop failed: {exc}", "error")
            return
        result = results[name]
        if result["ok"]:
            state.note(f"{name}: stopped automatically after {reason}", "warning")
        else:
            state.note(f"{name}: automatic stop failed: {result.get('error')}", "error")
        log.warning("automatic stop %s: %s", name, "ok" if result["ok"] else result.get("error"))

    async def close(self) -> None:
        """Wait for a stop under way (its outcome must reach the audit log)."""
        if self.tasks:
            await asyncio.gather(*self.tasks, return_exceptions=True)


__all__ = ["AutoStop", "lead_time"]
