"""``fleet-console web``: the console in a browser, one app process per browser session (console/web/server.py).

The server checks the options (the token, TLS, the bind: console/web/auth.py), starts the demo fleet with
``--demo`` (once: every session connects to its hosts), and runs each session as ``fleet-console web --session``:
the console's own app (console/ui/web.py), read-only unless ``--allow-actions``, never offering a shell.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shlex
import signal
import sys
from pathlib import Path
from typing import Any

from console.fleet_file import fail, load_fleet_file
from console.inventory import ConfigError, Fleet
from console.mcp.http import parse_http, url_host
from console.web.auth import TOKEN_ENV, HttpSecurity, security_from_args

DEMO_FLEET_FILE = "web-session-fleet.json"


def run_web(args: argparse.Namespace) -> int:
    """The server (default) or, with the hidden ``--session``, one browser session's app."""
    if args.session:
        return run_session(args)
    try:
        host, port = parse_http(args.bind, any_port=True)
    except ValueError as exc:
        return fail(str(exc).replace("--http", "--bind"), prog="fleet-console web")
    if args.demo and not 1 <= args.instances <= 64:
        return fail(f"--instances must be from 1 to 64, not {args.instances}", prog="fleet-console web")
    try:
        security = security_from_args(args, host, "the web console", login_paths=frozenset({"/"}))
    except ValueError as exc:
        return fail(str(exc), prog="fleet-console web")
    os.environ.pop(TOKEN_ENV, None)  # the sessions' processes inherit the environment: the token stays here
    fleet_path: str | None = None
    if not args.demo:
        try:
            fleet_path = str(Path(load_fleet_file(args.fleet).source).resolve())
        except ConfigError as exc:
            return fail(str(exc), prog="fleet-console web")
    try:
        return asyncio.run(_serve(args, host, port, security, fleet_path))
    except KeyboardInterrupt:
        return 130


def session_command(args: argparse.Namespace, fleet_path: str | None, demo_json: Path | None) -> str:
    """The shell command textual-serve runs for each browser session (``exec``: the app is the process killed)."""
    argv = [sys.executable, "-m", "console", "web", "--session"]
    argv += ["--session-fleet", str(demo_json)] if demo_json else ["--fleet", str(fleet_path)]
    if not args.allow_actions or args.read_only:
        argv.append("--read-only")
    if args.theme:
        argv += ["--theme", args.theme]
    return "exec " + shlex.join(argv)


async def _serve(args: argparse.Namespace, host: str, port: int, security: HttpSecurity,
                 fleet_path: str | None) -> int:
    from console.web.server import ConsoleServer

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
    demo: Any = None
    try:
        demo_json = None
        if args.demo:
            import msgspec

            from console.demo.fleet import start_demo

            print(f"fleet-console web: starting {args.instances} demo instances on 127.0.0.1 ...", file=sys.stderr)
            demo = await start_demo(args.instances)
            demo.state_dir.mkdir(parents=True, exist_ok=True)
            demo_json = demo.dir / DEMO_FLEET_FILE  # in the demo's private directory (0700), removed with it
            demo_json.write_bytes(msgspec.json.encode({"fleet": demo.fleet, "state": str(demo.state_dir)}))
        server = ConsoleServer(session_command(args, fleet_path, demo_json), security, host, port)
        task = asyncio.create_task(server.run(stop))
        started = asyncio.create_task(server.started.wait())
        await asyncio.wait({task, started}, return_when=asyncio.FIRST_COMPLETED)
        if server.started.is_set():
            mode = "actions allowed" if args.allow_actions and not args.read_only else "read-only"
            print(f"fleet-console web: serving {security.scheme}://{url_host(host)}:{server.bound_port}/ "
                  f"({security.describe()}; {mode})", file=sys.stderr, flush=True)
            if security.policy.token:
                print("fleet-console web: open it once with ?token=YOUR_TOKEN (a session cookie keeps you in)",
                      file=sys.stderr, flush=True)
        started.cancel()
        await task
    except OSError as exc:  # the port taken, an address not here
        print(f"fleet-console web: {url_host(host)}:{port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    finally:
        if demo is not None:
            await asyncio.shield(demo.stop())
    return 0


def run_session(args: argparse.Namespace) -> int:
    """One browser session: the console's app on the fleet file, or on the demo fleet the server started."""
    from console.monitor.monitoring import MonitoredController, Monitoring, tui_controller
    from console.ui.web import WebApp

    read_only = bool(args.read_only)
    if args.session_fleet:
        import msgspec

        data = msgspec.json.decode(Path(args.session_fleet).read_bytes(), type=dict[str, Any])
        fleet = msgspec.convert(data["fleet"], type=Fleet)
        state = Path(data["state"])
        monitoring = Monitoring(fleet, history=state / "history.sqlite3")
        monitoring.audit.path = state / "audit.jsonl"
        os.environ["FLEET_CONSOLE_STATE_DIR"] = str(state)
        controller: Any = MonitoredController(fleet, monitoring, read_only=read_only, demo=True)
    else:
        controller = tui_controller(args, load_fleet_file(args.fleet), read_only=read_only, watch=True)
    app = WebApp(controller, theme=args.theme)
    app.run()
    return 0
