"""Stopping a rental: ``[actions] stop`` run on this machine (the ops box) for an instance.

The argv comes from the fleet file with ``{vast_id}``, ``{name}`` and ``{host}`` replaced, each inside its own
argument (no shell: ``["vastai", "stop", "instance", "{vast_id}"]`` runs ``vastai`` with four arguments whatever
the values hold). Refused under ``--read-only`` (and audited so); otherwise the intent is audited before the
command runs and the outcome after (console/core/audit.py), as a restart is. ``confirm_text`` is what the
confirmation says: what not stopping costs.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from console.agent.wire.timefmt import fmt_age
from console.core.actions import ActionError, ReadOnlyError
from console.core.audit import AuditLog
from console.core.spend import fmt_money, money
from console.core.text_safety import clean
from console.inventory import Fleet, Instance

STOP_TIMEOUT = 120.0  # seconds the stop command may take (vastai answers in a few)
OUTPUT_CHARS = 2000  # of its output kept in the audit record


def stop_argv(template: tuple[str, ...] | list[str], inst: Instance) -> list[str]:
    """The command for ``inst``: each template argument with the placeholders replaced (one argument each)."""
    if not template:
        raise ActionError("stop: no [actions] stop = [...] in the fleet file (the command that stops an instance)")
    if any("{vast_id}" in arg for arg in template) and not inst.vast_id:
        raise ActionError(f"{inst.name}: stop needs a vast.ai id ({{vast_id}}) and this instance has none "
                          "(it is not from a vast.ai import)")
    values = {"vast_id": inst.vast_id or "", "name": inst.name, "host": inst.host}
    return [arg.format(**values) for arg in template]


def confirm_text(inst_state: Any, now: float, currency: str) -> str:
    """``idle 42m, $0.90/h`` (or ``benchmark running, $0.90/h``): what it costs not to stop."""
    meter, price = inst_state.meter, inst_state.instance.price_per_hour
    rate = f", {fmt_money(price, currency)}/h" if price is not None else ", price not known"
    if meter.mode == "idle":
        spent = money(meter.episode(now), price)
        so_far = f" ({fmt_money(spent, currency)} so far)" if spent is not None else ""
        return f"idle {fmt_age(meter.episode(now))}{so_far}{rate}"
    if meter.mode == "bench":
        return f"benchmark running{rate}"
    return f"{inst_state.status.replace('_', ' ')}{rate}"


async def run_command(argv: list[str], timeout: float = STOP_TIMEOUT) -> dict[str, Any]:
    """Run ``argv`` (no shell, no stdin); its exit status and the end of its output."""
    started = time.monotonic()
    try:
        proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    except OSError as exc:
        return {"argv": argv, "ok": False, "error": f"cannot run {argv[0]}: {exc.strerror or exc}"}
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        return {"argv": argv, "ok": False, "error": f"{argv[0]} did not finish within {timeout:g} s"}
    text = clean(out.decode("utf-8", "replace")[-OUTPUT_CHARS:], keep_newlines=True)
    result: dict[str, Any] = {"argv": argv, "ok": proc.returncode == 0, "returncode": proc.returncode,
                              "output": text, "seconds": round(time.monotonic() - started, 3)}
    if proc.returncode != 0:
        result["error"] = f"{argv[0]} exited with status {proc.returncode}: {text.strip()[-200:]}"
    return result


async def stop_instances(fleet: Fleet, audit: AuditLog, names: list[str], *, read_only: bool, origin: str,
                         reason: str | None = None) -> dict[str, dict[str, Any]]:
    """Stop each of ``names`` with the fleet's ``[actions] stop`` (one after the other); per name its result."""
    instances = {}
    for name in names:
        try:
            instances[name] = fleet.get(name)
        except KeyError:
            raise ActionError(f"{name}: no such instance in {fleet.source}") from None
    if read_only:
        for inst in instances.values():
            audit.record(inst.name, inst.address, "stop", "refused", "read-only", origin=origin, reason=reason)
        raise ReadOnlyError("stop")
    argvs = {name: stop_argv(fleet.actions.stop, inst) for name, inst in instances.items()}  # all, or none runs
    results: dict[str, dict[str, Any]] = {}
    for name, argv in argvs.items():
        inst = instances[name]
        try:
            action_id = audit.intent(name, inst.address, "stop", origin=origin, reason=reason)
        except OSError as exc:
            raise ActionError(f"stop refused: cannot write the audit log {audit.path}: {exc.strerror or exc}") \
                from None
        result = await run_command(argv)
        audit.record(name, inst.address, "stop", "ok" if result["ok"] else "failed", result, origin=origin,
                     reason=reason, action_id=action_id)
        results[name] = result
    return results


def stop_plan(controller: Any, names: list[str]) -> list[str]:
    """The confirmation's lines: per instance the command it runs and what not stopping costs (ActionError:
    nothing to run, or an instance without what the command needs)."""
    fleet, state = controller.fleet, controller.state
    lines = []
    now = state.clock()
    for name in names:
        inst = fleet.get(name)
        argv = stop_argv(fleet.actions.stop, inst)
        view = state.get(name)
        cost = confirm_text(view, now, state.currency) if view is not None else ""
        lines.append(f"{name}: {cost}  ->  {' '.join(argv)}")
    return lines


async def stop_from(controller: Any, names: list[str], origin: str) -> dict[str, dict[str, Any]]:
    """``stop_instances`` with a controller's fleet, audit log and read-only flag (the TUI's, MCP's)."""
    return await stop_instances(controller.fleet, controller.audit, names, read_only=controller.read_only,
                                origin=origin)


__all__ = ["confirm_text", "run_command", "stop_argv", "stop_from", "stop_instances", "stop_plan"]
