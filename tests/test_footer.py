"""The footer (widgets/footer.py) rebuilds only when the keys it shows change, and then shows the new ones.

Textual rebuilds a footer on every "bindings updated" signal, several per screen switch or focus change even
when the keys stay the same; each rebuild removes, mounts and restyles every key, a good part of opening an
instance and of coming back to the fleet.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets._footer import FooterKey

from tests.support.app import all_live, make_app, screen_text, wait_until
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
        # built once for the screen (its keys settle as it mounts, focuses its tab and learns its width: at most 4),
        # then never again on a visit that shows the same keys (the screen is reused)
        assert inner[0] <= 4 and inner[-1] == inner[0], f"instance screen footers rebuilt {inner} times"


def footer_row(app) -> str:
    return screen_text(app).splitlines()[-1]


@pytest.mark.timeout(120)
async def test_the_footer_shows_whole_keys_by_priority_at_80_and_120_columns(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="live agents")
        await pilot.pause(0.3)
        row = footer_row(app)
        shown = [(k.key_display, str(k.description)) for k in app.screen.query(FooterKey)]
        # what is shown is whole: the row is the keys one after another, nothing cut at the edge
        assert row.split() == [w for kd, desc in shown for w in (kd, *desc.split())], row
        assert len(row.rstrip()) <= 80
        for entry in ("? Help", "q Quit", "d Diagnose", "r Restart", "/ Filter", ": Command", "s Shell"):
            assert entry in row, f"{entry!r} not in the 80-column footer {row!r}"
        await pilot.resize_terminal(120, 30)
        await wait_until(pilot, lambda: "a Select all" in footer_row(app), what="the 120-column footer")
        row = footer_row(app)
        for entry in ("/ Filter", ": Command", "v View", "s Shell", "y Copy", "a Select all", "d Diagnose"):
            assert entry in row, f"{entry!r} not in the 120-column footer {row!r}"
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, InstanceScreen) and app.screen.is_mounted,
                         what="the instance screen")
        await pilot.resize_terminal(80, 24)
        await wait_until(pilot, lambda: "esc Back" in footer_row(app), what="the instance screen's footer")
        row = footer_row(app)
        for entry in ("esc Back", "? Help", "d Diagnose", "/ Search log"):
            assert entry in row, f"{entry!r} not in the instance screen's 80-column footer {row!r}"
        assert "Accept key" not in row  # no host key waits here


@pytest.mark.timeout(120)
async def test_a_needs_action_host_key_says_A_accept_key_in_the_footer(sshd, tmp_path: Path) -> None:
    from console.core.audit import AuditLog
    from console.core.controller import FleetController
    from console.inventory import Fleet
    from console.ui.app import FleetApp
    from tests.support.sshd import ssh_instance

    known = tmp_path / "kh" / "known_hosts"
    known.parent.mkdir()
    known.write_text("")
    newbox = ssh_instance(sshd, name="newbox", known_hosts=str(known), python="/nonexistent/python3")
    app = FleetApp(FleetController(Fleet([newbox], source=str(tmp_path / "fleet.toml")),
                                   audit=AuditLog(tmp_path / "audit.jsonl")), theme="dark")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: app.state.get("newbox").status == "needs_action", what="NEEDS ACTION")
        await wait_until(pilot, lambda: "A Accept key" in footer_row(app), what="A in the grid's footer")
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, InstanceScreen) and "A Accept key" in footer_row(app),
                         what="A in the instance screen's footer")
        await pilot.press("A")
        await wait_until(pilot, lambda: type(app.screen).__name__ == "ConfirmScreen", what="the accept dialog")
