"""What a restart will stop, asked before it is confirmed: the agent's plan, and the lines that show it.

``fetch_plans`` asks each instance's agent for its ``restart_plan`` (nothing is stopped): the process groups a
restart would stop (pid, program, age, the parent entrypoint), the entrypoint matches it leaves running, and the
command it starts. The TUI's dialog, the CLI and the MCP tool show ``describe_plan``'s lines before the restart;
the plan then goes with the restart request, so the host stops nothing the operator was not shown (a process
that appeared since refuses the restart), and the result the audit records carries the plan it acted on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, NotRequired, TypedDict

from console.agent.wire.protocol import RestartPlan
from console.agent.wire.timefmt import fmt_age
from console.core.actions import ActionError
from console.core.text_safety import clean

PLAN_TIMEOUT = 30.0  # seconds for the agent's answer (it reads the process table once)
MAX_SHOWN = 20  # groups (and processes left running) listed per instance; the rest is counted
NOTHING_RUNNING = "no benchmark running: will only start"


class PlanOutcome(TypedDict):
    """One instance's plan, or why there is none (the restart is then not offered for it)."""

    ok: bool
    plan: NotRequired[RestartPlan]
    error: NotRequired[str]


Request = Callable[[str, str, dict[str, Any], float], Awaitable[Any]]


async def fetch_plans(request: Request, names: list[str], timeout: float = PLAN_TIMEOUT) -> dict[str, PlanOutcome]:
    """Each instance's restart plan, asked concurrently (``request``: the controller's, raising ActionError); an
    instance that cannot answer has ``error``."""

    async def one(name: str) -> PlanOutcome:
        try:
            plan = await request(name, "restart_plan", {}, timeout)
        except ActionError as exc:
            return {"ok": False, "error": str(exc)}
        return {"ok": True, "plan": plan}

    results = await asyncio.gather(*(one(n) for n in names))
    return dict(zip(names, results, strict=True))


def _proc(proc: Any) -> str:
    return f"{clean(str(proc.get('program') or '?'))[:60]} (pid {proc.get('pid')}, up {fmt_age(proc.get('age') or 0)})"


def group_line(group: Any) -> str:
    """``stop cuzk-bench (pid 12, up 4m 05s) under entrypoint.sh (pid 9): group 12, 3 processes``."""
    targets = list(group.get("targets") or [])
    head = _proc(targets[0]) if targets else "?"
    parent = group.get("parent")
    where = f" under {clean(str(parent))[:60]}" if parent else ""
    members = int(group.get("members") or len(targets))
    scope = (f"pid {targets[0].get('pid')} alone (shares the agent's group)" if group.get("alone") and targets
             else f"group {group.get('pgid')}, {members} process{'' if members == 1 else 'es'}")
    more = [clean(str(t.get("program") or "?"))[:40] for t in targets[1:4]]
    also = f" with {', '.join(more)}{' ...' if len(targets) > 4 else ''}" if more else ""
    return f"stop {head}{where}{also}: {scope}"


def describe_plan(plan: RestartPlan | None) -> list[str]:
    """The plan as lines: what it stops (or that nothing runs), what it leaves running, what it starts."""
    if plan is None:
        return []
    groups = list(plan.get("groups") or [])
    start = " ".join(clean(str(a)) for a in plan.get("start") or [])[:200] or "(no start command configured)"
    lines = [group_line(g) for g in groups[:MAX_SHOWN]]
    if len(groups) > MAX_SHOWN:
        lines.append(f"... and {len(groups) - MAX_SHOWN} more process groups")
    spared = list(plan.get("spared") or [])
    for proc in spared[:MAX_SHOWN]:
        lines.append(f"leave running {_proc(proc)}: it matches the entrypoint pattern only")
    if len(spared) > MAX_SHOWN:
        lines.append(f"... and {len(spared) - MAX_SHOWN} more left running")
    lines.append(f"{NOTHING_RUNNING}: {start}" if not groups else f"then start: {start}")
    return lines


def plan_lines(name: str, outcome: PlanOutcome) -> list[str]:
    """``name:`` and its plan's lines indented, or the reason it has no plan."""
    if not outcome["ok"]:
        return [f"{name}: cannot tell what a restart would stop: {outcome.get('error')}"]
    return [f"{name}:", *("  " + line for line in describe_plan(outcome.get("plan")))]


__all__ = ["NOTHING_RUNNING", "PlanOutcome", "describe_plan", "fetch_plans", "group_line", "plan_lines"]
