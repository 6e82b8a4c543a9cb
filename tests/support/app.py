"""The console app on a small local fleet, for tests that drive it through Textual's Pilot.

``make_app`` builds the real app on the real controller over ``make_fleet``'s instances: local agents
(``transport="local"``, no SSH) with simulated GPUs and a 40-line log each. ``wait_until`` is
``tests.support.wait.until`` pausing through the Pilot (the app repaints between checks).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from console.core.audit import AuditLog
from console.core.controller import FleetController
from console.inventory import BenchmarkSpec, Fleet, Instance
from console.ui.app import FleetApp
from tests.support.wait import until
from widgets.instance_screen import InstanceScreen

NAMES = ("alpha", "beta", "gamma")


def make_fleet(tmp_path: Path, names=NAMES, gpus: int = 2, marker: str = "") -> Fleet:
    """Local instances named ``names``, ``gpus`` simulated GPUs each; with ``marker``, a benchmark (a 6 s sleep
    whose command line holds the marker) that the restart action can start and stop."""
    instances = []
    for i, name in enumerate(names):
        log = tmp_path / ("%s.log" % name)
        log.write_text("".join("%s step %d\n" % (name, k) for k in range(1, 41)))
        bench = BenchmarkSpec()
        if marker:
            bench = BenchmarkSpec(
                start=(sys.executable, "-c", "import time; time.sleep(6)", marker), match=(marker,), stop_timeout=2.0
            )
        instances.append(
            Instance(
                name=name,
                host="localhost",
                transport="local",
                tags=("gpu", "eu" if i % 2 else "us"),
                logs=(str(log),),
                watch_dirs=(),
                interval=0.5,
                benchmark=bench,
                agent_extra={
                    "heartbeat_interval": 0.5,
                    "log_interval": 0.2,
                    "gpu": {"simulate": {"gpus": gpus, "jitter": True}},
                },
            )
        )
    return Fleet(instances, source=str(tmp_path / "fleet.toml"))


def make_app(
    tmp_path: Path, read_only: bool = False, demo: bool = False, theme: str | None = "dark", **fleet_kw
) -> FleetApp:
    controller = FleetController(
        make_fleet(tmp_path, **fleet_kw), read_only=read_only, demo=demo, audit=AuditLog(tmp_path / "audit.jsonl")
    )
    return FleetApp(controller, theme=theme)


async def wait_until(pilot, predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
    """``until(predicate)`` with the Pilot's ``pause`` between checks; returns the first truthy value."""
    return await until(predicate, timeout, what, sleep=pilot.pause)


async def open_screen(pilot, app: FleetApp) -> InstanceScreen:
    """Enter on the grid's cursor: the instance screen, mounted."""
    await pilot.press("enter")
    await wait_until(
        pilot, lambda: isinstance(app.screen, InstanceScreen) and app.screen.is_mounted, what="instance screen"
    )
    await pilot.pause(0.3)
    return app.screen


def screen_text(app: FleetApp) -> str:
    """The screen as the terminal would show it, one line per row."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def all_live(app: FleetApp) -> bool:
    """Every instance connected, with GPUs and a log line."""
    state = app.state
    return all(i.link_status == "connected" and i.gpus and i.last_log for i in state.instances.values())
