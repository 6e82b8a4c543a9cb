"""``fleet-console serve``: the fleet with no UI: links, history, alerts, /metrics, optionally MCP.

For systemd or a container (docs/monitoring.md). The wiring is the TUI's (console/monitor/monitoring.py) and
the headless run is console/headless.py; this module is the command only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal

from console.core.controller import FleetController
from console.core.fleet_watch import DAEMON_RELOAD_SIGNALS
from console.fleet_file import fail, load_fleet_file
from console.headless import run_fleet_headless, setup_logging
from console.inventory import ConfigError, Fleet
from console.monitor.metrics import DEFAULT_PORT
from console.monitor.monitoring import MonitoredController, Monitoring, metrics_from_args, monitoring_from_args
from console.web.auth import HttpSecurity, security_from_args

log = logging.getLogger("fleet_console")


def run_serve(args: argparse.Namespace) -> int:
    """``fleet-console serve``: links, state, history, alerts, exporter; until SIGTERM/SIGINT."""
    setup_logging()
    fleet: Fleet | None = None
    if not args.demo:
        try:
            fleet = load_fleet_file(args.fleet)
        except ConfigError as exc:
            return fail(str(exc))
    elif not 1 <= args.instances <= 64:
        return fail(f"--instances must be from 1 to 64, not {args.instances}")
    try:  # the port, and its rules: a token (when set) and the Host allowlist; a non-loopback bind needs a token
        metrics_from_args(args, DEFAULT_PORT)
    except ValueError as exc:
        return fail(str(exc))
    monitorings: list[Monitoring] = []
    mcp_at: tuple[str, int] | None = None
    mcp_security: HttpSecurity | None = None
    if args.mcp:
        from console.mcp.http import parse_http

        try:
            mcp_at = parse_http(args.mcp)
        except ValueError as exc:
            return fail(str(exc).replace("--http", "--mcp"))
        try:
            mcp_security = security_from_args(args, mcp_at[0], "MCP")
        except ValueError as exc:
            return fail(str(exc))

    def make(fleet: Fleet, demo: bool) -> FleetController:
        monitoring = monitoring_from_args(args, fleet, DEFAULT_PORT, history=True, log_transitions=True)
        monitorings.append(monitoring)
        # as the TUI: the fleet file is followed (edits, SIGHUP: systemd's ExecReload=kill -HUP $MAINPID)
        controller = MonitoredController(fleet, monitoring, read_only=args.read_only, demo=demo, watch=not demo)
        controller.watch.reload_signals = DAEMON_RELOAD_SIGNALS  # a daemon: SIGHUP reloads (the TUI quits on it)
        controller.auto_diagnose = not args.no_auto_diagnose  # the one rule (console/core/autodiag.py)
        controller.autodiag.report = lambda name, why: log.warning("diagnose %s: %s", name, why)
        return controller

    # a fleet file: SIGHUP reloads it (console/core/fleet_watch.py takes the signal once the links start; until
    # then it is ignored, not fatal); the demo has no file, so there SIGHUP stops serve as TERM does
    stop_signals = (signal.SIGTERM, signal.SIGINT) + ((signal.SIGHUP,) if args.demo else ())

    async def main() -> int:
        if not args.demo:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                asyncio.get_running_loop().add_signal_handler(
                    signal.SIGHUP, lambda: log.info("SIGHUP while starting: the fleet file is read already"))
        try:
            async with run_fleet_headless(fleet, make, args.instances if args.demo else None,
                                          stop_signals=stop_signals) as (controller, stop):
                log.info("serving %d instances from %s%s", len(controller.fleet.instances),
                         controller.fleet.source, " (read-only)" if args.read_only else "")
                if mcp_at is None:
                    await stop.wait()
                else:  # the MCP server on these links and this state (no second set of connections)
                    from console.mcp.http import serve_http_until
                    from console.mcp.server import Options

                    options = Options(allow_restart=bool(args.allow_restart), read_only=bool(args.read_only),
                                      timeout=30.0)
                    assert mcp_security is not None
                    log.info("MCP on %s://%s:%d/mcp%s (%s)", mcp_security.scheme, mcp_at[0], mcp_at[1],
                             "" if options.allow_restart and not options.read_only else " (restart refused)",
                             mcp_security.describe())
                    await serve_http_until(controller, options, mcp_at[0], mcp_at[1], stop, mcp_security)
                log.info("stopping")
        except OSError as exc:  # the metrics port taken, the record file not writable
            log.error("%s", exc)
            return 2
        log.info("stopped")
        return 0

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        return 130
