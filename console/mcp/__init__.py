"""`fleet-console mcp`: the fleet as an MCP server (stdio by default, or streamable HTTP with ``--http``).

- ``safe.py``: host text made safe (escapes stripped, sizes capped);
- ``tools.py``: the tools' results as pure functions of the fleet state;
- ``schemas.py``: their output schemas;
- ``server.py``: the MCPServer (tools, resources, the hunt prompt) over a ``FleetController``.

``main(args)`` starts the controller (on the fleet file, or on the demo fleet with ``--demo``), serves until
the client goes away (stdio) or a signal comes (HTTP), then stops every link and demo process it started.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from typing import Any


def parse_http(value: str) -> tuple[str, int]:
    """``PORT`` or ``HOST:PORT`` (``[v6]:PORT``); the host defaults to 127.0.0.1."""
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "", value
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--http wants HOST:PORT or PORT, not {value!r}")
    return host, int(port)


def fail(message: str) -> int:
    print(f"fleet-console mcp: {message}", file=sys.stderr)
    return 2


def main(args: argparse.Namespace) -> int:
    """Run the server; 0 when the client or a signal ended it, 2 on a bad fleet file or option."""
    from console.inventory import ConfigError, find_fleet_file, load_fleet

    http = None
    if args.http:
        try:
            http = parse_http(args.http)
        except ValueError as exc:
            return fail(str(exc))
    if args.allow_restart and args.read_only:
        print("fleet-console mcp: --read-only wins: restart stays refused", file=sys.stderr)
    fleet = None
    if not args.demo:
        path = find_fleet_file(args.fleet)
        if path is None:
            return fail("no fleet file: pass --fleet FILE (or --demo), or create ./fleet.toml")
        try:
            fleet = load_fleet(path)
        except ConfigError as exc:
            return fail(str(exc))
    try:
        return asyncio.run(_serve(args, fleet, http))
    except KeyboardInterrupt:
        return 130


async def _serve(args: argparse.Namespace, fleet: Any, http: tuple[str, int] | None) -> int:
    """Start the fleet as ``serve`` does (``run_fleet_headless``: signals, demo, shielded clean-up), then serve
    MCP on it until the client leaves (stdio) or a signal comes (both)."""
    from console.core.controller import FleetController
    from console.mcp.server import McpAudit, Options, build_server
    from console.serve import run_fleet_headless

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
            print(f"fleet-console mcp: serving http://{_url_host(host)}:{port}/mcp", file=sys.stderr, flush=True)
            await serve_http_until(controller, options, host, port, stop)
            return 0
        session = asyncio.create_task(build_server(controller, options).run_stdio_async())
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait({session, stopped}, return_when=asyncio.FIRST_COMPLETED)
        for task in (session, stopped):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    return 0


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


async def serve_http_until(controller: Any, options: Any, host: str, port: int, stop: asyncio.Event) -> None:
    """Serve MCP over streamable HTTP on ``controller`` (its links and state, not a second set) until ``stop``.

    For ``fleet-console serve --mcp``: the service owns the signals, so uvicorn is kept from taking them.
    """
    import uvicorn

    from console.mcp.server import build_server

    class _Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Any:  # the service's own handlers set ``stop``
            yield

    app = build_server(controller, options).streamable_http_app(host=host)
    server = _Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve())
    stopped = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        server.should_exit = True
        stopped.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    if task.done() and task.exception() is not None:
        raise OSError(f"MCP on {_url_host(host)}:{port}: {task.exception()}")
