"""``fleet-console demo``: start the demo fleet (console/demo/fleet.py), run the console on it, clean up."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path
from typing import Any

from console.demo.fleet import DemoFleet, start_demo
from console.fleet_file import fail
from console.monitor.monitoring import MonitoredController, Monitoring
from console.ui.app import FleetApp


def demo_controller(demo: DemoFleet, record: Path | None = None, read_only: bool = False) -> MonitoredController:
    """The console's controller on the demo fleet, as the TUI's on a fleet file (the history: the event timeline,
    e; with ``record`` every frame to a file ``fleet-console replay`` opens), but its history and audit log in the
    demo's own state dir: the real fleet's timeline, ``history`` and audit never see the demo, and quitting
    removes them with the demo."""
    state = demo.state_dir
    state.mkdir(parents=True, exist_ok=True)
    monitoring = Monitoring(demo.fleet, history=state / "history.sqlite3", record=record)
    monitoring.audit.path = state / "audit.jsonl"  # (its pending intents beside it)
    return MonitoredController(demo.fleet, monitoring, read_only=read_only, demo=True)


def run_demo(args: argparse.Namespace) -> int:
    """Start the demo fleet, run the console on it, clean up whatever happens."""
    if not 1 <= args.instances <= 64:
        return fail(f"--instances must be from 1 to 64, not {args.instances}")
    instances = int(getattr(args, "instances", 6) or 6)

    async def main() -> int:
        loop = asyncio.get_running_loop()
        main_task = asyncio.current_task()
        app: Any = None

        def on_signal() -> None:  # hangup or kill: leave the app, and let the finally below clean up
            if app is not None and app.is_running:
                app.exit(1)
            elif main_task is not None:
                main_task.cancel()

        for sig in (signal.SIGTERM, signal.SIGHUP):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, on_signal)
        print(f"fleet-console demo: starting {instances} demo instances on 127.0.0.1 ...", file=sys.stderr)
        demo = await start_demo(instances)
        controller: Any = None
        try:
            record = getattr(args, "record", None)
            controller = demo_controller(demo, Path(record).expanduser() if record else None,
                                         read_only=bool(getattr(args, "read_only", False)))
            kwargs: dict[str, Any] = {"theme": getattr(args, "theme", None)}
            if getattr(args, "bell", False):
                kwargs["bell"] = True
            app = FleetApp(controller, **kwargs)
            await app.run_async()
            return int(app.return_code or 0)
        finally:
            if controller is not None:
                with contextlib.suppress(BaseException):
                    await asyncio.shield(controller.stop())
            await asyncio.shield(demo.stop())

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        return 130
