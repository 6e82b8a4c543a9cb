"""The console's own commands: the TUI (``run``), ``check``, ``status``, ``diagnose``, ``restart``.

Errors become one line on stderr and exit status 2. The other commands have their own modules (``cli.py``
says which).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from console.agent.wire.wording import code_and_summary
from console.core.actions import ActionError
from console.core.controller import FleetController, describe_restart
from console.core.gpu_health import health_json
from console.core.restart_plan import plan_lines
from console.fleet_file import fail, load_fleet_file
from console.inventory import ConfigError, Fleet
from console.monitor.monitoring import tui_controller
from console.ui.app import FleetApp
from console.ui.hangup import HANGUP_EXIT_CODE

SEVERITY_ORDER = {"critical": 0, "error": 1, "warning": 2, "info": 3}


def dispatch(args: argparse.Namespace) -> int:
    """Run one of this module's commands; a bad fleet file or a refused action is one line and exit 2."""
    handlers = {
        "run": cmd_run,
        "check": cmd_check,
        "status": cmd_status,
        "diagnose": cmd_diagnose,
        "restart": cmd_restart,
        "stop": cmd_stop,
    }
    try:
        return handlers[args.command](args)
    except ConfigError as exc:
        return fail(str(exc))
    except ActionError as exc:
        return fail(str(exc))


# -- interactive ----------------------------------------------------------------------------------


def cmd_run(args: argparse.Namespace) -> int:
    fleet = load_fleet_file(args.fleet)
    try:  # history, alerts, and --metrics-port / --record when asked
        controller = tui_controller(args, fleet, read_only=args.read_only, watch=True)
    except ValueError as exc:
        return fail(str(exc))
    app = FleetApp(controller, theme=args.theme, bell=args.bell)
    controller.monitoring.bell = app.bell  # for alert rules with bell = true
    app.run()
    return HANGUP_EXIT_CODE if app.hangup.hung_up else 0


# -- one-shot -------------------------------------------------------------------------------------


def cmd_check(args: argparse.Namespace) -> int:
    fleet = load_fleet_file(args.fleet)
    print(f"{fleet.source}: ok, {len(fleet.instances)} instances, {len(fleet.probes)} custom probes")
    if getattr(args, "connect", False):
        return asyncio.run(_check_connect(fleet, args.timeout))
    for inst in fleet.instances:
        tags = f"  [{', '.join(inst.tags)}]" if inst.tags else ""
        print(f"  {inst.name:<24} {inst.transport:<5} {inst.address}{tags}")
    unwatched = [i.name for i in fleet.instances if not (i.benchmark.match or i.benchmark.entrypoint)]
    if unwatched:  # BENCH DOWN can never show for these (issue 35)
        print(f"  benchmark not watched on {len(unwatched)} of {len(fleet.instances)}: no [benchmark] match "
              f"({', '.join(unwatched[:8])}{', …' if len(unwatched) > 8 else ''})")
    return 0


async def _check_connect(fleet: Fleet, timeout: float) -> int:
    """Log in to every instance in parallel (starting nothing there): one line each, exit 1 unless all are ok."""
    from console.core.status import LINK_LABELS
    from console.link import SshLink

    def ignore(*_: Any) -> None:
        return None

    async def one(inst: Any) -> tuple[str, str]:
        if inst.transport == "local":
            return "ok", "local (no SSH)"
        try:
            return await asyncio.wait_for(SshLink(inst, ignore, ignore).check_login(), timeout)
        except TimeoutError:
            return "unreachable", f"{inst.address}: no answer within {timeout:g} s"

    controller = FleetController(fleet, read_only=True)
    await controller.watch.start(watch_file=False)  # the imports' instances are checked too
    await controller.watch.stop()
    for line in controller.fleet_errors.values():
        print(f"fleet-console: {line}", file=sys.stderr)
    instances = list(controller.fleet.instances)
    results = await asyncio.gather(*(one(inst) for inst in instances))
    for inst, (status, detail) in zip(instances, results, strict=True):
        label = "ok" if status == "ok" else LINK_LABELS.get(status, status)
        print(f"  {inst.name:<24} {label:<17} {detail}")
    return 0 if all(status == "ok" for status, _ in results) else 1


async def _with_controller(fleet: Fleet, names: list[str] | None, read_only: bool, body: Any) -> int:
    controller = FleetController(fleet, read_only=read_only)
    try:
        await controller.start(names)
        return await body(controller)
    finally:
        await controller.stop()


def cmd_diagnose(args: argparse.Namespace) -> int:
    fleet = load_fleet_file(args.fleet)
    try:
        fleet.get(args.name)
    except KeyError:
        return fail(f"{args.name}: no such instance in {fleet.source}")

    async def body(controller: FleetController) -> int:
        await controller.wait_ready(args.name, args.timeout)
        data = await controller.diagnose(args.name)
        if args.json:
            print(json.dumps({"instance": args.name, **data}, indent=2))
        else:
            print(format_diagnosis(args.name, data))
        return 0 if data.get("verdict", {}).get("code") in ("healthy", "starting", "finished") else 1

    return asyncio.run(_with_controller(fleet, [args.name], True, body))


def format_diagnosis(name: str, data: dict[str, Any]) -> str:
    verdict = data.get("verdict") or {}
    out = [f"{name}: {code_and_summary(str(verdict.get('code') or '?'), str(verdict.get('summary') or ''))}"]
    findings = sorted(data.get("findings") or [], key=lambda f: SEVERITY_ORDER.get(f.get("severity"), 9))
    for finding in findings:
        said = code_and_summary(str(finding.get("code") or "?"), str(finding.get("summary") or ""))
        out.append(f"  [{finding.get('severity', '?')}] {said}")
        for ev in finding.get("evidence") or []:
            where = f"{ev.get('path')}:{ev.get('line')}" if ev.get("line") else str(ev.get("path") or "")
            out.append(f"      {where}: {ev.get('text', '')}".rstrip())
    for alt in data.get("alternatives") or []:  # top-3: the other explanations worth a look
        out.append(f"  also possible: {code_and_summary(str(alt.get('code') or '?'), str(alt.get('summary') or ''))}"
                   .rstrip())
        for ev in (alt.get("evidence") or [])[:1]:
            where = f"{ev.get('path')}:{ev.get('line')}" if ev.get("line") else str(ev.get("path") or "")
            out.append(f"      {where}: {ev.get('text', '')}".rstrip())
    return "\n".join(out)


def cmd_restart(args: argparse.Namespace) -> int:
    fleet = load_fleet_file(args.fleet)
    for name in args.names:
        try:
            fleet.get(name)
        except KeyError:
            return fail(f"{name}: no such instance in {fleet.source}")
    if args.read_only:
        audit = FleetController(fleet, read_only=True).audit
        for name in args.names:
            audit.record(name, fleet.get(name).address, "restart", "refused", "read-only", origin="cli")
        return fail("restart refused: --read-only")
    if not args.yes and not sys.stdin.isatty():
        return fail("restart needs confirmation: pass --yes")

    async def body(controller: FleetController) -> int:
        ready = []
        for name in args.names:
            try:
                await controller.wait_ready(name, args.timeout)
                ready.append(name)
            except ActionError as exc:
                print(f"{name}: not restarted: {exc}", file=sys.stderr)
        plans = await controller.restart_plans(ready) if ready else {}
        for name, outcome in plans.items():  # what it stops, before asking (and with --yes, for the record)
            print("\n".join(plan_lines(name, outcome)), file=sys.stdout if outcome["ok"] else sys.stderr)
        confirmed = {n: o["plan"] for n, o in plans.items() if o["ok"] and "plan" in o}
        if confirmed and not args.yes:
            try:
                answer = await asyncio.to_thread(input, f"Restart the benchmark on {', '.join(confirmed)}? [y/N] ")
            except EOFError:
                answer = ""
            if answer.strip().lower() not in ("y", "yes"):
                print("nothing restarted")
                return 1
        results = await controller.restart(list(confirmed), origin="cli", plans=confirmed) if confirmed else {}
        for name, result in results.items():
            # a benchmark that died right after its start is a failure, shown with its log's last lines
            print("\n".join(describe_restart(name, result)), file=sys.stdout if result["ok"] else sys.stderr)
        return 0 if len(confirmed) == len(args.names) and all(r["ok"] for r in results.values()) else 1

    return asyncio.run(_with_controller(fleet, args.names, False, body))


def cmd_stop(args: argparse.Namespace) -> int:
    """``stop NAME... [--yes]``: run ``[actions] stop`` for each (asked first unless --yes; audited)."""
    import shlex

    from console.core.audit import AuditLog
    from console.core.stop import stop_argv, stop_instances

    fleet = load_fleet_file(args.fleet)
    audit = AuditLog()
    if not args.read_only:
        argvs = {}
        for name in args.names:
            try:
                argvs[name] = stop_argv(fleet.actions.stop, fleet.get(name))
            except KeyError:
                return fail(f"{name}: no such instance in {fleet.source}")
        if not args.yes:
            if not sys.stdin.isatty():
                return fail("stop needs confirmation: pass --yes")
            for name, argv in argvs.items():
                price = fleet.get(name).price_per_hour
                cost = f" ({fleet.currency}{price:.2f}/h)" if price is not None else ""
                print(f"{name}{cost}: {shlex.join(argv)}")
            try:
                answer = input(f"Stop {', '.join(argvs)}? [y/N] ")
            except EOFError:
                answer = ""
            if answer.strip().lower() not in ("y", "yes"):
                print("nothing stopped")
                return 1
    results = asyncio.run(stop_instances(fleet, audit, list(args.names), read_only=args.read_only, origin="cli"))
    for name, result in results.items():
        if result["ok"]:
            print(f"{name}: stopped ({shlex.join(result['argv'])})")
        else:
            print(f"{name}: not stopped: {result.get('error')}", file=sys.stderr)
    return 0 if all(r["ok"] for r in results.values()) else 1


def cmd_status(args: argparse.Namespace) -> int:
    fleet = load_fleet_file(args.fleet)

    async def body(controller: FleetController) -> int:
        for line in controller.fleet_errors.values():
            print(f"fleet-console: {line}", file=sys.stderr)
        names = [i.name for i in controller.fleet.instances]  # with the instances the imports found
        await controller.wait_settled(names, args.timeout)
        controller.state.tick()
        rows = [status_row(controller, n) for n in names]
        if args.json:
            print(json.dumps({"instances": rows, "totals": controller.state.totals()}, indent=2))
        else:
            for row in rows:
                gpus = " ".join(f"{g['util'] if g['util'] is not None else '?'}%" for g in row["gpus"]) or "-"
                print(f"{row['name']:<24} {row['status']:<15} gpus {gpus:<24} {row['detail']}")
        return 0 if all(r["status"] == "ok" for r in rows) else 1

    return asyncio.run(_with_controller(fleet, None, True, body))


def status_row(controller: FleetController, name: str) -> dict[str, Any]:
    inst = controller.state.get(name)
    assert inst is not None
    status, detail = inst.status, inst.status_detail
    if status == "connecting" and inst.settled_status:  # caught mid-retry: say what the last attempt found
        status, detail = inst.settled_status, inst.settled_detail
    return {
        "name": name,
        "address": controller.instance(name).address,
        "status": status,
        "detail": detail,
        "link": inst.link_status,
        "gpus": [
            {"index": g.index, "name": g.get("name"), "util": g.util, "mem_used": g.get("mem_used"),
             "mem_total": g.get("mem_total"), "lost": g.lost, "health": health_json(g)}
            for g in sorted(inst.gpus.values(), key=lambda g: g.index)
        ],
    }
