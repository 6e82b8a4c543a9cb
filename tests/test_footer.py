"""The footer (widgets/footer.py) rebuilds only when the keys it shows change, and then shows the new ones.

Textual rebuilds a footer on every "bindings updated" signal, several per screen switch or focus change even
when the keys stay the same; each rebuild removes, mounts and restyles every key, a good part of opening an
instance and of coming back to the fleet.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets._footer import FooterKey

from tests.support.app import make_app, wait_until
from widgets.footer import Footer
from widgets.instance_screen import InstanceScreen

VISITS = 4


def _keys(screen) -> list[str]:
    return [str(k.description) for k in screen.query(FooterKey)]


@pytest.mark.timeout(120)
async def test_footer_rebuilds_only_when_its_keys_change(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: all(i.link_status == "connected" for i in app.state.instances.values()),
                         timeout=60, what="every instance connected")
        grid = app.screen
        grid_footer = grid.query_one(Footer)
        await pilot.pause(0.3)
        shown = _keys(grid)
        assert "Diagnose" in shown and "Restart" in shown
        before = grid_footer.rebuilds
        inner: list[int] = []
        for _ in range(VISITS):
            app.open_instance(next(iter(app.state.instances)))
            await wait_until(pilot, lambda: isinstance(app.screen, InstanceScreen) and app.screen.is_mounted,
                             what="the instance screen")
            await pilot.pause(0.3)
            inner.append(app.screen.query_one(Footer).rebuilds)
            assert "Back" in _keys(app.screen)
            await pilot.press("escape")
            await wait_until(pilot, lambda: app.screen is grid, what="back on the grid")
            await pilot.pause(0.3)
        assert _keys(grid) == shown  # the same keys, still there
        assert grid_footer.rebuilds - before <= 1, f"grid footer rebuilt {grid_footer.rebuilds - before} times"
        assert max(inner) <= 3, f"instance screen footers rebuilt {inner} times"  # was 4 (and 2 per visit on the grid)
