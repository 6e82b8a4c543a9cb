"""The Logs tab at 80x24 (a tmux pane), on the real console with local agents: the last log line is never under
the FOLLOW/PAUSED badge (the badge has a row of its own), a visible line cursor marks the line ``y`` copies, and a
toast never covers the search box the operator types into."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.app import all_live, make_app, open_screen, screen_text, wait_until
from widgets.log_view import LogView

LONG = "alpha step %d " + "payload " * 7 + "END-%d"  # reaches past the 80th column


pytestmark = pytest.mark.usefixtures("config_dir")  # (tests/conftest.py)


def rows(app) -> list[str]:
    return screen_text(app).splitlines()


def row_of(app, needle: str) -> str:
    return next((r for r in rows(app) if needle in r), "")


@pytest.mark.timeout(120)
async def test_log_cursor_badge_row_and_toasts_at_80x24(tmp_path: Path) -> None:
    app = make_app(tmp_path, names=("alpha",))
    async with app.run_test(size=(80, 24), notifications=True) as pilot:  # (toasts shown, as in a terminal)
        await wait_until(pilot, lambda: all_live(app), what="a live agent")
        with (tmp_path / "alpha.log").open("a") as fh:
            fh.write("".join(LONG % (k, k) + "\n" for k in range(41, 44)))
        screen = await open_screen(pilot, app)
        await pilot.press("3")
        view = await wait_until(pilot, lambda: screen.active_log(), what="the log view")
        assert isinstance(view, LogView)
        await wait_until(pilot, lambda: "    43" in screen_text(app), what="the new lines on screen")
        await pilot.pause(0.2)
        # the last line is whole: the badge is on a row of its own, below it
        last = row_of(app, "    43")
        assert "alpha step 43" in last and "FOLLOW" not in last, last
        box = view.scrollable_content_region
        assert "FOLLOW" in rows(app)[box.y + box.height - 1]
        # the cursor: on the tail while following, marked; up moves it and y copies that line
        assert "43▸" in last
        await pilot.press("up", "up")
        await pilot.pause(0.1)
        assert "41▸" in row_of(app, "    41"), row_of(app, "    41")
        assert "43▸" not in row_of(app, "    43")
        await pilot.press("y")
        await wait_until(pilot, lambda: app.clipboard == LONG % (41, 41), what="line 41 copied")
        assert any("copied log line 41" in m for _, _, m in app.notices)
        # a toast (here: paused) stands above the search box, not on it
        await pilot.press("f")  # follow again, then pause: a toast each
        await pilot.press("slash")
        box = screen.query_one("#log-search")
        await wait_until(pilot, lambda: box.has_focus, what="the search box")
        await pilot.press(*"payload")
        await pilot.pause(0.2)
        typed = rows(app)[box.region.y]
        assert typed.strip().startswith("payload") and "follow" not in typed.lower(), typed
