"""Instance-screen visits do not keep memory (issue 15 item 11): screens, their widgets and timers go on close.

The console runs for days on an ops box and the operator opens instances all day: a visit that keeps even
half a megabyte (Textual's footer did, through its key watchers) is a slow leak. Measured after a warm-up
(Textual's bounded caches fill on the first visits): the widgets alive after a collection, by class (the
footer's leak: 20 FooterKeys per visit), and the rendered lines of removed widgets (Textual's StylesCache
lru kept ~1.5 MB a visit, widgets/styles_cache.py). Bytes are measured by bench/soak.py over 10 minutes (RSS), since
the live fleet's own rings fill meanwhile and make a byte count here depend on the box's speed.
"""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import pytest
from textual._styles_cache import StylesCache
from textual.widget import Widget

from tests.support.app import make_app, wait_until
from widgets.instance_screen import InstanceScreen

WARMUP, MEASURED = 3, 10


async def _visit(app, pilot, name: str) -> None:
    app.open_instance(name)
    await wait_until(pilot, lambda: isinstance(app.screen, InstanceScreen) and app.screen.is_mounted,
                     timeout=30, what="the instance screen")
    for tab in ("3", "2", "4", "1"):
        await pilot.press(tab)
        await pilot.pause(0.05)
    await pilot.press("escape")
    await wait_until(pilot, lambda: not isinstance(app.screen, InstanceScreen), timeout=30, what="back on the grid")


def _lines_of_removed_widgets() -> int:
    """Rendered lines still held for widgets that are gone (Textual's lru_cache keeps their StylesCache)."""
    owned = {id(obj._styles_cache) for obj in gc.get_objects() if isinstance(obj, Widget)}
    return sum(len(obj._cache) for obj in gc.get_objects() if type(obj) is StylesCache and id(obj) not in owned)


def _live_widgets() -> dict[str, int]:
    counts: dict[str, int] = {}
    for obj in gc.get_objects():
        if isinstance(obj, Widget):
            counts[type(obj).__name__] = counts.get(type(obj).__name__, 0) + 1
    return counts


@pytest.mark.timeout(300)
async def test_instance_screen_visits_release_their_widgets(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: all(i.link_status == "connected" for i in app.state.instances.values()),
                         timeout=60, what="every instance connected")
        names = list(app.state.instances)
        for k in range(WARMUP):
            await _visit(app, pilot, names[k % len(names)])
        await asyncio.sleep(0.3)
        gc.collect()
        before = _live_widgets()
        for k in range(MEASURED):
            await _visit(app, pilot, names[k % len(names)])
        await asyncio.sleep(0.3)
        gc.collect()
        after = _live_widgets()
        grown = {name: after[name] - before.get(name, 0) for name in after if after[name] > before.get(name, 0)}
        assert sum(grown.values()) <= 3, f"widgets kept after {MEASURED} visits: {grown}"
        kept = _lines_of_removed_widgets()
        assert kept <= 40, f"{kept} rendered lines of removed widgets kept after {MEASURED} visits"
