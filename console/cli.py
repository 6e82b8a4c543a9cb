"""The command line: ``fleet-console [run|demo|check|status|diagnose|restart|mcp|agent]``."""

from __future__ import annotations

import argparse
import importlib
import os
import runpy
import sys
from collections.abc import Callable
from typing import cast

from console import __version__

COMMANDS = ("run", "demo", "check", "status", "diagnose", "restart", "stop", "mcp", "serve", "web", "replay",
            "history", "report", "notify", "agent")


def http_options() -> argparse.ArgumentParser:
    """The options of every HTTP listener (web, MCP over HTTP, /metrics): console/web/auth.py applies them."""
    http = argparse.ArgumentParser(add_help=False)
    http.add_argument("--token-file", metavar="PATH",
                      help="the token clients send (Authorization: Bearer); else $FLEET_CONSOLE_TOKEN")
    http.add_argument("--allow-host", action="append", metavar="NAME",
                      help="a Host/Origin name to accept besides localhost, IPs and this machine's names (repeat)")
    http.add_argument("--tls-cert", metavar="PATH", help="serve HTTPS with this certificate (PEM; with --tls-key)")
    http.add_argument("--tls-key", metavar="PATH", help="the certificate's private key (PEM)")
    http.add_argument("--insecure-no-auth", action="store_true",
                      help="allow a non-loopback bind without a token (anyone who reaches the port gets in)")
    return http


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--fleet", metavar="FILE", help="fleet file (default ./fleet.toml, then ~/.config/fleet-console/fleet.toml)"
    )
    common.add_argument("--read-only", action="store_true", help="disable restarts and other destructive actions")

    ui = argparse.ArgumentParser(add_help=False)
    ui.add_argument("--theme", help="colour theme: dark, light, high-contrast (remembered)")
    ui.add_argument("--bell", action="store_true", help="ring the terminal bell when an instance gets worse")

    parser = argparse.ArgumentParser(
        prog="fleet-console",
        description="Watch, diagnose and restart GPU benchmarks across a fleet of SSH-reachable instances.",
    )
    parser.add_argument("--version", action="version", version=f"fleet-console {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    http = http_options()
    monitor = argparse.ArgumentParser(add_help=False)  # console/serve.py: exporter and recording
    monitor.add_argument("--metrics-port", type=int, metavar="PORT", help="serve Prometheus /metrics on this port")
    monitor.add_argument("--metrics-bind", metavar="HOST", help="address for /metrics (default 127.0.0.1)")
    monitor.add_argument("--record", metavar="FILE", help="record every frame to FILE (gzip JSON lines) for replay")

    sub.add_parser("run", parents=[common, ui, monitor, http],
                   help="open the console on a fleet file (the default command)")
    demo = sub.add_parser("demo", parents=[ui], help="open the console on a local demo fleet (simulated GPUs)")
    demo.add_argument("--instances", type=int, default=6, help="demo instances, 1 to 64 (default 6)")
    demo.add_argument("--read-only", action="store_true", help="disable restarts")
    demo.add_argument("--record", metavar="FILE", help="record every frame to FILE (gzip JSON lines) for replay")

    check = sub.add_parser("check", parents=[common], help="validate the fleet file; exit 2 with file:line on errors")
    check.add_argument("--connect", action="store_true", help="also log in to every instance, in parallel")
    check.add_argument("--timeout", type=float, default=20.0, help="seconds to wait for the instances with --connect")

    status = sub.add_parser("status", parents=[common], help="connect to every instance and print its state")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument("--timeout", type=float, default=20.0, help="seconds to wait for the instances")

    diag = sub.add_parser("diagnose", parents=[common], help="diagnose one instance (exit 0 healthy, 1 findings)")
    diag.add_argument("name")
    diag.add_argument("--json", action="store_true", help="print the verdict and findings as JSON")
    diag.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the connection")

    restart = sub.add_parser("restart", parents=[common], help="restart the benchmark on instances")
    restart.add_argument("names", nargs="+", metavar="NAME")
    restart.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    restart.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for the connection")

    stop = sub.add_parser("stop", parents=[common],
                          help="stop rentals: run [actions] stop for each instance (audited; not with --read-only)")
    stop.add_argument("names", nargs="+", metavar="NAME")
    stop.add_argument("--yes", action="store_true", help="do not ask for confirmation")

    mcp = sub.add_parser(
        "mcp", parents=[common, http], help="serve the fleet to an AI assistant over MCP (stdio, or --http HOST:PORT)"
    )
    mcp.add_argument("--demo", action="store_true", help="serve the demo fleet (local, simulated GPUs; no UI)")
    mcp.add_argument("--instances", type=int, default=6, help="demo instances with --demo, 1 to 64 (default 6)")
    mcp.add_argument(
        "--http", metavar="HOST:PORT", help="streamable HTTP instead of stdio; a bare PORT binds 127.0.0.1"
    )
    mcp.add_argument("--allow-restart", action="store_true", help="let the restart tool restart (off by default)")
    mcp.add_argument("--timeout", type=float, default=30.0, help="seconds a tool call waits on a host (default 30)")

    serve = sub.add_parser("serve", parents=[common, monitor, http],
                           help="no UI: links, history, alerts and /metrics (port 9847), for systemd or a container")
    serve.add_argument("--demo", action="store_true", help="serve the demo fleet (local, simulated GPUs)")
    serve.add_argument("--instances", type=int, default=6, help="demo instances with --demo, 1 to 64 (default 6)")
    serve.add_argument("--no-history", action="store_true", help="do not write the history file")
    serve.add_argument("--history-days", type=float, metavar="DAYS", help="history kept this long (default 14)")
    serve.add_argument("--no-auto-diagnose", action="store_true",
                       help="do not diagnose instances whose benchmark went down by themselves")
    serve.add_argument("--mcp", metavar="HOST:PORT",
                       help="also serve MCP (streamable HTTP, 127.0.0.1 unless HOST says) on these links and state")
    serve.add_argument("--allow-restart", action="store_true", help="let MCP clients restart benchmarks (audited)")

    web = sub.add_parser("web", parents=[common, http],
                         help="the console in a browser (textual-serve; one app process per browser session)")
    web.add_argument("--demo", action="store_true", help="serve the demo fleet (local, simulated GPUs)")
    web.add_argument("--instances", type=int, default=6, help="demo instances with --demo, 1 to 64 (default 6)")
    web.add_argument("--bind", default="127.0.0.1:8080", metavar="HOST:PORT",
                     help="address to listen on (default 127.0.0.1:8080; port 0: any free one)")
    web.add_argument("--allow-actions", action="store_true",
                     help="let browser sessions restart, stop and signal (read-only by default; never a shell)")
    web.add_argument("--theme", help="colour theme of the sessions: dark, light, high-contrast")
    web.add_argument("--session", action="store_true", help=argparse.SUPPRESS)  # one browser session's app
    web.add_argument("--session-fleet", metavar="JSON", help=argparse.SUPPRESS)  # the demo's fleet, for a session

    replay = sub.add_parser("replay", parents=[ui], help="open the console on a recording (--record FILE)")
    replay.add_argument("file", metavar="FILE")
    replay.add_argument("--speed", type=float, default=1.0, help="playback speed (default 1; keys - and + change it)")
    replay.add_argument("--start", type=float, default=0.0, metavar="SECONDS", help="start this far into it")
    replay.add_argument("--paused", action="store_true", help="open paused (key z plays)")
    replay.add_argument("--check", action="store_true", help="no UI: replay to the end, print the transitions")

    history = sub.add_parser("history", help="what happened: transitions, verdicts, restarts, probes, flaps")
    history.add_argument("name", nargs="?", metavar="NAME", help="one instance (default: all)")
    history.add_argument("--since", default="2h", help="how far back: 90s, 30m, 2h, 7d (default 2h)")
    history.add_argument("--json", action="store_true", help="machine-readable output")

    notify = sub.add_parser("notify", parents=[common], help="the [[notify]] sinks: `notify test [SINK]` sends a test")
    notify.add_argument("action", choices=["test"], help="test: send a test message, print what each sink answered")
    notify.add_argument("sink", nargs="?", metavar="SINK", help="one sink by its name (default: all)")
    notify.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for each sink (default 10)")

    report = sub.add_parser("report", parents=[common], help="the rental bill: spend and idle spend per instance")
    report.add_argument("--since", default="24h", help="how far back: 30m, 24h, 7d (default 24h)")
    form = report.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="machine-readable output")
    form.add_argument("--csv", action="store_true", help="CSV (cells safe to open in a spreadsheet)")

    sub.add_parser("agent", help="run the agent here (JSON lines on stdout); agent options follow", add_help=False)
    return parser


# Each command's module and function, imported only when that command runs (the TUI's Textual stays unloaded
# for `status`, MCP's SDK for `check`). No entry point imports another: this table is the one door.
ENTRY_POINTS = {
    "run": ("console.commands", "dispatch"),
    "check": ("console.commands", "dispatch"),
    "status": ("console.commands", "dispatch"),
    "diagnose": ("console.commands", "dispatch"),
    "restart": ("console.commands", "dispatch"),
    "demo": ("console.demo.run", "run_demo"),
    "serve": ("console.serve", "run_serve"),
    "replay": ("console.ui.replay", "run_replay"),
    "history": ("console.monitor.history_command", "run_history"),
    "report": ("console.monitor.report_command", "run_report"),
    "stop": ("console.commands", "dispatch"),
    "mcp": ("console.mcp.command", "main"),
    "notify": ("console.notify.command", "run_notify"),
    "web": ("console.web.command", "run_web"),
}


def entry_point(command: str) -> Callable[[argparse.Namespace], int]:
    module, function = ENTRY_POINTS[command]
    return cast(Callable[[argparse.Namespace], int], getattr(importlib.import_module(module), function))


def run_agent(argv: list[str]) -> int:
    """`fleet-console agent ...`: the agent program itself, as ``python -m console.agent`` runs it."""
    saved = sys.argv
    sys.argv = ["fleet-console agent", *argv]
    try:
        runpy.run_module("console.agent", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = saved
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "agent":
        return run_agent(argv[1:])
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version")):
        argv.insert(0, "run")
    args = build_parser().parse_args(argv)
    if args.command == "mcp":  # stdout is the protocol there: no flush dance, no BrokenPipe exit code
        if args.demo and not 1 <= args.instances <= 64:
            print(f"fleet-console: --instances must be from 1 to 64, not {args.instances}", file=sys.stderr)
            return 2
        return entry_point("mcp")(args)
    from console.core.actions import ActionError
    from console.fleet_file import fail
    from console.inventory import ConfigError

    try:
        code = entry_point(args.command)(args)
        sys.stdout.flush()  # a reader that left (``| head``) shows here, inside the try
        return code
    except (ConfigError, ActionError) as exc:  # a bad fleet file, a refused action: one line
        return fail(str(exc))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away: not our error, and no traceback. Point stdout at /dev/null so the interpreter's
        # final flush does not raise again, and exit as a program killed by SIGPIPE would.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13
