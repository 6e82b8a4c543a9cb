"""What a sent action did when its answer never came: the agent's journal, asked once the link is back.

A destructive action is sent with its ``action_id``; the agent journals it before it acts. When the link drops
(or the answer is late) the console cannot know whether the host acted, so it asks the journal, within what is
left of the action's own time budget: an answer then, or "outcome unknown" (audited as such), never a wait far
beyond what the action itself takes on the host.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from console.core.actions import ActionError
from console.link import LinkError
from console.link.validate import BadFrame, check_result

if TYPE_CHECKING:
    from console.core.controller import FleetController

RESTART_MARGIN = 15.0  # seconds over the benchmark's stop_timeout: the KILL wait, the start check, the link
MIN_RECOVERY = 5.0  # seconds the journal gets at least after a drop (one reconnect and one question)


def restart_budget(stop_timeout: float) -> float:
    """Seconds a restart may take in all: the agent's TERM-to-KILL wait, then the kill, the start and its check."""
    return max(0.0, stop_timeout) + RESTART_MARGIN


def recovery_time(deadline: float) -> float:
    """What the journal gets after a drop: what is left until ``deadline`` (monotonic), at least MIN_RECOVERY."""
    return max(MIN_RECOVERY, deadline - time.monotonic())


async def recover_action(controller: FleetController, name: str, op: str, action_id: str, timeout: float) -> Any:
    """What the agent's journal says ``action_id`` did, once the link is back (it may still be running).

    ActionError when the journal cannot say within ``timeout`` seconds, keeps no journal, never got the action,
    or says the action failed."""
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ActionError(f"{name}: no answer from the agent's journal within {timeout:g} s")
        try:
            link = await controller.wait_ready(name, remaining)
            answer = await link.request("journal", {"ids": [action_id]}, timeout=min(20.0, remaining))
        except LinkError:
            await asyncio.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
            continue
        entries = (answer.get("data") or {}).get("entries") if answer.get("ok") else None
        entry = entries.get(action_id) if isinstance(entries, dict) else None
        if not answer.get("ok"):
            raise ActionError(f"{name}: the agent keeps no journal: {answer.get('error')}")
        if entry is None:
            raise ActionError(f"{name}: {op} not received by the host (not in the agent's journal)")
        if entry.get("state") == "done":
            if not entry.get("ok"):
                raise ActionError(f"{name}: {op} failed: {entry.get('error')}")
            try:
                return check_result(op, entry.get("data"))
            except BadFrame as exc:
                raise ActionError(f"{name}: bad journal entry: {exc}") from None
        await asyncio.sleep(min(1.0, max(0.0, deadline - time.monotonic())))  # still running on the host
