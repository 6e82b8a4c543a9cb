"""Running a fleet without a screen: the signals, the demo or the fleet file, the controller, the clean-up.

Shared by ``serve``, ``fleet-console mcp`` and anything else that watches a fleet headless. Logs go to
stderr, one line each: ``2024-05-01T12:00:00Z INFO  transition box1: ok -> benchmark_down (...)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable

from console.core.controller import FleetController
from console.inventory import Fleet

log = logging.getLogger("fleet_console")


def setup_logging(level: int = logging.INFO) -> None:
    """One line per record on stderr, UTC timestamps."""
    handler = logging.StreamHandler(sys.stderr)
    fmt = logging.Formatter("%(asctime)s %(levelname)-5s %(message)s", "%Y-%m-%dT%H:%M:%SZ")
    fmt.converter = time.gmtime
    handler.setFormatter(fmt)
    root = logging.getLogger("fleet_console")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


@contextlib.asynccontextmanager
async def run_fleet_headless(
    fleet: Fleet | None,
    make_controller: Callable[[Fleet, bool], FleetController],
    demo_instances: int | None = None,
    stop_signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP),
) -> AsyncIterator[tuple[FleetController, asyncio.Event]]:
    """Start the fleet (the demo fleet when ``demo_instances``), yield ``(controller, stop_event)``.

    The signals set ``stop_event``; on the way out, further signals are ignored while every link and demo
    process is stopped (shielded: a second TERM does not cut the clean-up short).
    """
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in stop_signals:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stopping.set)
    demo = None
    controller: FleetController | None = None
    try:
        if demo_instances is not None:
            from console.demo.fleet import start_demo

            log.info("starting %d demo instances on 127.0.0.1", demo_instances)
            demo = await start_demo(demo_instances)
            fleet = demo.fleet
            # the demo's history and audit log go with it (issue 35 item 6): the real fleet's never see it
            demo.state_dir.mkdir(parents=True, exist_ok=True)
            os.environ["FLEET_CONSOLE_STATE_DIR"] = str(demo.state_dir)
        assert fleet is not None
        controller = make_controller(fleet, demo is not None)
        await controller.start()
        yield controller, stopping
    finally:
        if controller is not None:  # the fleet file's watch first: its SIGHUP handler goes, and is ignored below
            with contextlib.suppress(BaseException):
                await asyncio.shield(controller.watch.stop())
        for sig in dict.fromkeys((*stop_signals, signal.SIGHUP)):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(sig)
                signal.signal(sig, signal.SIG_IGN)
        if controller is not None:
            with contextlib.suppress(BaseException):
                await asyncio.shield(controller.stop())
        if demo is not None:
            with contextlib.suppress(BaseException):
                await asyncio.shield(demo.stop())
