"""``fleet-console mcp``: the fleet as an MCP server (stdio by default, or streamable HTTP with ``--http``).

It starts the controller (on the fleet file, or on the demo fleet with ``--demo``) as ``serve`` does
(console/headless.py), serves until the client goes away (stdio) or a signal comes (HTTP), then stops every
link and demo process it started.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from typing import Any

from console.core.controller import FleetController
from console.fleet_file import NoFleetFile, load_fleet_file
from console.fleet_file import fail as fail_line
from console.headless import run_fleet_headless
from console.inventory import ConfigError
from console.mcp.http import parse_http, serve_http_until, url_host
from console.web.auth import HttpSecurity, security_from_args

MISSING = "no fleet file: pass --fleet FILE (or --demo), or create ./fleet.toml"


def fail(message: str) -> int:
    return fail_line(message, prog="fleet-console mcp")


def main(args: argparse.Namespace) -> int:
    """Run the server; 0 when the client or a signal ended it, 2 on a bad fleet file or option."""
    http = None
    security: HttpSecurity | None = None
    if args.http:
        try:
            http = parse_http(args.http)
            # the token, TLS and Host/Origin rules (console/web/auth.py); a non-loopback bind needs a token
            security = security_from_args(args, http[0], "MCP")
        except ValueError as exc:
            return fail(str(exc))
    if args.allow_restart and args.read_only:
        print("fleet-console mcp: --read-only wins: restart stays refused", file=sys.stderr)
    fleet = None
    if not args.demo:
        try:
            fleet = load_fleet_file(args.fleet, missing=MISSING)
        except NoFleetFile as exc:
            return fail(exc.reason)
        except ConfigError as exc:
            return fail(str(exc))
    try:
        return asyncio.run(_serve(args, fleet, http, security))
    except KeyboardInterrupt:
        return 130


async def _serve(args: argparse.Namespace, fleet: Any, http: tuple[str, int] | None,
                 security: HttpSecurity | None = None) -> int:
    """Start the fleet as ``serve`` does (``run_fleet_headless``: signals, demo, shielded clean-up), then serve
    MCP on it until the client leaves (stdio) or a signal comes (both)."""
    from console.mcp.server import McpAudit, Options, build_server

    options = Options(allow_restart=bool(args.allow_restart), read_only=bool(args.read_only),
                      timeout=float(args.timeout))

    def make(fleet: Any, demo: bool) -> FleetController:
        return FleetController(fleet, read_only=options.read_only, demo=demo, audit=McpAudit())

    if args.demo:
        print(f"fleet-console mcp: starting {args.instances} demo instances on 127.0.0.1 ...", file=sys.stderr)
    # stdio: a hangup or TERM ends the session like EOF does, and the clean-up runs
    signals = (signal.SIGTERM, signal.SIGHUP) if http is None else (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    async with run_fleet_headless(fleet, make, args.instances if args.demo else None, signals) as (controller, stop):
        if http is not None:
            host, port = http
            assert security is not None
            print(f"fleet-console mcp: serving {security.scheme}://{url_host(host)}:{port}/mcp "
                  f"({security.describe()})", file=sys.stderr, flush=True)
            await serve_http_until(controller, options, host, port, stop, security)
            return 0
        session = asyncio.create_task(build_server(controller, options).run_stdio_async())
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait({session, stopped}, return_when=asyncio.FIRST_COMPLETED)
        for task in (session, stopped):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    return 0


