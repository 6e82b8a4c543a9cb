"""``?`` help lists every key, matches the footer and fits 80x24 (it scrolls), on the real console (local
agents, simulated GPUs): for the fleet grid, the fleet table and every tab of the instance screen, each key
the focus chain answers to (``Screen.active_bindings``: the focused widget, its screen, the app) is in the
help's keys column, and each key the footer shows is in help with the footer's description."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Tuple

import pytest
from textual.widgets._footer import FooterKey

from console.ui.app import FleetApp
from tests.support.app import all_live, make_app, screen_text, wait_until
from widgets.fleet_table import FleetTable
from widgets.help_screen import KEY_W, HelpScreen
from widgets.instance_screen import InstanceScreen

pytestmark = pytest.mark.usefixtures("config_dir")  # (tests/conftest.py)


def help_rows(text: str) -> List[Tuple[List[str], str]]:
    """The help's rows as (keys, descriptions before the note): keys in the first ``KEY_W`` columns after
    two spaces (a key list that goes on ends its line with ","), the rest beside them."""
    rows: List[Tuple[List[str], str]] = []
    going_on = False
    for line in text.splitlines():
        if not line.startswith("  "):
            going_on = False
            continue
        keys, body = line[2:2 + KEY_W].strip(), line[3 + KEY_W:].strip()
        if keys and not going_on:
            rows.append(([], ""))
        if not rows:
            continue
        row_keys, row_body = rows[-1]
        row_keys += [k.strip() for k in keys.split(",") if k.strip()]  # (no key shows as ",")
        rows[-1] = (row_keys, (row_body + " " + body).strip())
        going_on = keys.endswith(",")
    return rows


def descriptions(body: str) -> List[str]:
    return [d.strip() for d in body.split(" — ", 1)[0].split(" / ")]


async def check_help(pilot, app: FleetApp, where: str) -> Dict[str, str]:
    """Open help over the screen as it is and check it against that screen's keys and footer."""
    screen = app.screen
    active = screen.active_bindings
    assert active, where
    keys = {app.get_key_display(ab.binding) for ab in active.values()}
    footer = [(k.key_display, k.description) for k in screen.query(FooterKey)]
    assert footer, "%s: the footer shows keys" % where
    await pilot.press("question_mark")
    await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help over " + where)
    text = app.screen.plain
    rows = help_rows(text)
    listed = {k for row_keys, _ in rows for k in row_keys}
    missing = sorted(keys - listed)
    assert not missing, "%s: keys not in help: %s\n%s" % (where, missing, text)
    for shown, said in footer:
        assert any(shown in row_keys and said in descriptions(body) for row_keys, body in rows), (
            "%s: footer %r %r not in help with that description\n%s" % (where, shown, said, text))
    await pilot.press("escape")
    await wait_until(pilot, lambda: app.screen is screen, what="help closed over " + where)
    return {k: b for row_keys, b in rows for k in row_keys}


async def test_help_lists_every_key_of_the_grid_table_and_instance_screen_as_the_footer_says(tmp_path: Path) -> None:
    app = make_app(tmp_path, names=("alpha", "beta"))
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="live agents")
        await pilot.pause(0.3)
        assert app.focused is app.grid
        rows = await check_help(pilot, app, "the fleet grid")
        assert "restart the benchmark" in rows["r"]  # the long note beside the footer's word

        await pilot.press("v")
        table = app.query_one(FleetTable)
        await wait_until(pilot, lambda: table.has_focus, what="the table")
        await pilot.pause(0.3)
        rows = await check_help(pilot, app, "the fleet table")
        assert rows["o"].startswith("Sort") and rows["S"].startswith("Hold order")

        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, InstanceScreen) and app.screen.is_mounted,
                         what="the instance screen")
        for tab in "12345":
            await pilot.press(tab)
            await pilot.pause(0.4)  # (the tab's content takes the focus after a refresh)
            await check_help(pilot, app, "the instance screen, tab %s (focus: %r)" % (tab, app.focused))


async def test_help_fits_80x24_and_scrolls_to_its_last_line(tmp_path: Path) -> None:
    app = make_app(tmp_path, names=("alpha",))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        await wait_until(pilot, lambda: isinstance(app.screen, HelpScreen), what="help")
        await pilot.pause(0.2)
        help_screen = app.screen
        lines = help_screen.plain.splitlines()
        assert len(lines) > 24 and all(len(line) <= 76 for line in lines)  # no line wraps in the box
        shown = screen_text(app).splitlines()
        assert len(shown) == 24 and "restart the benchmark" in screen_text(app)
        assert lines[-1] not in screen_text(app)
        await pilot.press("end")
        await wait_until(pilot, lambda: lines[-1] in screen_text(app), what="the last line scrolled into view")
        assert lines[0] not in screen_text(app)
        await pilot.press("home")
        await wait_until(pilot, lambda: lines[0] in screen_text(app), what="back at the top")
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
