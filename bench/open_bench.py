"""Opening and leaving the instance screen on the ui_bench fleet (100 instances x 8 GPUs, no links).

Eight visits, each on the next instance: the first builds the screen, the next ones reuse it. Prints each
visit's open / back in ms (key event to the first refresh after the screen changed) and the medians of
visits 3-8.

    .venv/bin/python bench/open_bench.py
"""

from __future__ import annotations

import asyncio
import statistics

from common import key_latency
from ui_bench import BenchFleet

from console.ui.app import FleetApp
from widgets.instance_screen import InstanceScreen


async def main() -> None:
    app = FleetApp(BenchFleet(100, 8))
    opens: list[float] = []
    backs: list[float] = []
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.pause(2.0)
        grid_screen = app.screen
        for _ in range(8):
            opens.append(await key_latency(app, "enter", lambda: isinstance(app.screen, InstanceScreen)) or 0.0)
            await asyncio.sleep(0.5)
            backs.append(await key_latency(app, "escape", lambda: app.screen is grid_screen) or 0.0)
            await asyncio.sleep(0.3)
            await key_latency(app, "down", lambda: True)
            await asyncio.sleep(0.3)
    print("open ms", [round(1000 * t) for t in opens], "median of 3-8", round(1000 * statistics.median(opens[2:])))
    print("back ms", [round(1000 * t) for t in backs], "median of 3-8", round(1000 * statistics.median(backs[2:])))


if __name__ == "__main__":
    asyncio.run(main())
