"""Soak: the demo fleet (``--instances``, default 20) in the headless console, ``--visits`` instance-screen
visits (default 100) spread over ``--minutes`` (default 10); RSS at the start and at the end.

Goal (issue 15): the console's RSS grows by < 10 MB over 10 minutes. The start is taken once every instance
has answered and the first visit is done (imports, caches and the first screen are not growth).

    .venv/bin/python bench/soak.py [--minutes 10] [--instances 20] [--visits 100] [--json]
"""

from __future__ import annotations

import asyncio
import gc
import sys
import time

from common import bench_parser, print_json, private_dir, rss_mb

from console.core.controller import FleetController
from console.demo.fleet import start_demo
from console.ui.app import FleetApp
from widgets.instance_screen import InstanceScreen

private_dir("FLEET_CONSOLE_CONFIG_DIR", "fleet-soak-")  # the themes read it when the app starts


async def visit(app: FleetApp, pilot, name: str) -> None:
    """Open an instance, look at its tabs, go back."""
    app.open_instance(name)
    deadline = time.monotonic() + 20
    while not (isinstance(app.screen, InstanceScreen) and app.screen.is_mounted) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    for tab in ("3", "2", "4", "1"):
        await pilot.press(tab)
        await asyncio.sleep(0.2)
    await pilot.press("escape")
    while isinstance(app.screen, InstanceScreen) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


async def run(minutes: float, instances: int, visits: int) -> dict:
    demo = await start_demo(instances)
    controller = FleetController(demo.fleet, read_only=True, demo=True)
    app = FleetApp(controller, theme="dark")
    names = [i.name for i in demo.fleet.instances]
    out: dict = {"instances": instances, "visits": visits, "minutes": minutes}
    try:
        async with app.run_test(size=(160, 50)) as pilot:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not all(
                i.link_status == "connected" for i in app.state.instances.values()
            ):
                await asyncio.sleep(0.5)
            await visit(app, pilot, names[0])
            gc.collect()
            start, t0 = rss_mb(), time.monotonic()
            out["rss_start_mb"] = round(start, 1)
            print("start: RSS %.1f MB" % start, file=sys.stderr, flush=True)
            period = minutes * 60.0 / visits
            for k in range(visits):
                await visit(app, pilot, names[k % len(names)])
                wait = t0 + (k + 1) * period - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if (k + 1) % 10 == 0:
                    print("%3d visits, %5.0f s: RSS %.1f MB" % (k + 1, time.monotonic() - t0, rss_mb()),
                          file=sys.stderr, flush=True)
            gc.collect()
            end = rss_mb()
            out.update(rss_end_mb=round(end, 1), growth_mb=round(end - start, 1),
                       seconds=round(time.monotonic() - t0), frames=app.state.frames)
    finally:
        await controller.stop()
        await demo.stop()
    return out


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--instances", type=int, default=20)
    parser.add_argument("--visits", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(run(args.minutes, args.instances, args.visits))
    if args.json:
        print_json(result)
    else:
        print("RSS start %(rss_start_mb).1f MB, end %(rss_end_mb).1f MB: %(growth_mb)+.1f MB over %(seconds)d s, "
              "%(visits)d visits, %(instances)d instances" % result)
    return 0 if result["growth_mb"] < 10 else 1


if __name__ == "__main__":
    sys.exit(main())
