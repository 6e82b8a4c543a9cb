"""The instance screen is built once and shown for each instance opened (opening costs a paint, not ~50
widgets built and styled): nothing of the instance shown before may stay on it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.support.app import all_live, make_app, open_screen, screen_text, wait_until
from widgets.gpu_panel import GpuPanel
from widgets.instance_screen import InstanceScreen
from widgets.process_panel import ProcessPanel
from widgets.process_tree import ProcessTree


async def test_the_next_instance_opened_shows_none_of_the_last_ones_logs_views_or_choices(tmp_path: Path) -> None:
    app = make_app(tmp_path, gpus=2)
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="three live agents")
        grid = app.grid
        first = grid.cursor_name
        screen = await open_screen(pilot, app)
        assert screen.instance_name == first

        # what an operator leaves behind on the first instance: its log read, processes flat and filtered,
        # the second GPU chosen
        await pilot.press("3")
        await wait_until(pilot, lambda: "%s step 40" % first in screen_text(app), what="the first one's log")
        await pilot.press("2")
        tree = screen.query_one(ProcessTree)
        await pilot.press("t", "slash", *"zzz-no-such-process", "enter")
        await wait_until(pilot, lambda: tree.flat and tree.filter_text == "zzz-no-such-process"
                         and "filter zzz-no-such-process" in screen_text(app), what="the filtered flat view")
        await pilot.press("1")
        panel = screen.query_one(GpuPanel)
        await wait_until(pilot, lambda: panel.has_focus, what="the GPU lines")
        await pilot.press("down")
        await wait_until(pilot, lambda: panel.selected == 1, what="the second GPU chosen")
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is not screen, what="back on the grid")
        await wait_until(pilot, lambda: grid.has_focus, what="the grid focused again (its keys move the cursor)")

        await pilot.press("right" if grid._names.index(first) + 1 < len(grid._names) else "left")
        await wait_until(pilot, lambda: grid.cursor_name != first, what="the cursor on another instance")
        second = grid.cursor_name
        again = await open_screen(pilot, app)
        assert again is screen, "the screen is reused, not built again"
        assert again.instance_name == second
        await wait_until(pilot, lambda: screen_text(app).lstrip().startswith(second), what="the header's name")
        assert panel.selected is None, "no GPU chosen on an instance the operator has not looked at"

        await pilot.press("3")
        await wait_until(pilot, lambda: "%s step 40" % second in screen_text(app), what="the second one's log")
        text = screen_text(app)
        assert "%s.log" % second in text and "%s.log" % first not in text, "only its own log files are tabs"
        assert "%s step" % first not in text

        await pilot.press("2")
        await wait_until(pilot, lambda: not tree.flat and tree.filter_text == "" and tree.shown > 0,
                         what="the process tree, unfiltered")
        text = screen_text(app)
        assert "[tree]" in text and "zzz-no-such-process" not in text


async def test_the_screen_is_built_before_the_first_open_and_shows_the_instance_opened(tmp_path: Path) -> None:
    """The first Enter of a session costs a paint too: the screen was built in the background at start (for
    whichever instance came first), off the screen stack; opening another instance shows only that one."""
    app = make_app(tmp_path, gpus=2)
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="three live agents")
        screens = app.instance_screens
        await wait_until(pilot, lambda: screens.screen is not None and screens.screen.is_mounted,
                         what="the instance screen built in the background")
        warm = app.instance_screens.screen
        built_for = warm.instance_name
        grid = app.grid
        await wait_until(pilot, lambda: warm._compositor.size == app.size, timeout=5,
                         what="the screen laid out at the terminal's size, off the stack")
        assert warm not in app.screen_stack and app.screen is app.screen_stack[0], "nothing shown but the grid"
        assert built_for not in screen_text(app).splitlines()[0], "the grid's header, not the screen's"
        # the keys still go to the grid (on a loaded box its first focus may come after the screen was built)
        await wait_until(pilot, lambda: grid.has_focus, timeout=10, what="the grid holding the keys")
        for key in ("right", "down", "left"):  # onto an instance the screen was not built for
            if grid.cursor_name != built_for:
                break
            await pilot.press(key)
        target = grid.cursor_name
        assert target != built_for
        screen = await open_screen(pilot, app)
        assert screen is warm and screen.instance_name == target
        assert screen.query_one(ProcessPanel).instance_name == target
        await wait_until(pilot, lambda: screen_text(app).lstrip().startswith(target), what="the header's name")
        await pilot.press("3")
        await wait_until(pilot, lambda: "%s step 40" % target in screen_text(app), what="its log")
        assert "%s.log" % built_for not in screen_text(app)


async def test_an_open_while_the_screen_is_still_being_built_shows_the_instance_opened(tmp_path: Path) -> None:
    app = make_app(tmp_path, gpus=2)
    async with app.run_test(size=(140, 45)) as pilot:
        names = list(app.state.instances)
        app.warm_instance_screen()  # built for names[0] ...
        app.open_instance(names[-1])  # ... and opened for another before its widgets are mounted
        await wait_until(pilot, lambda: isinstance(app.screen, InstanceScreen) and app.screen.is_mounted,
                         what="the instance screen")
        screen = app.screen
        assert screen is app.instance_screens.screen and screen.instance_name == names[-1]
        assert screen.query_one(ProcessPanel).instance_name == names[-1]
        await wait_until(pilot, lambda: screen_text(app).lstrip().startswith(names[-1]), what="the header's name")


async def test_a_theme_changed_while_the_screen_was_away_shows_on_it(tmp_path: Path) -> None:
    """Shown again, the screen skips Textual's restyle of its nodes unless the CSS changed since; a theme
    picked on the grid is such a change: the next open shows the new colours."""
    app = make_app(tmp_path, gpus=2)
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="three live agents")
        screen = await open_screen(pilot, app)
        header = screen.query_one("#inst-header")
        dark = (screen.styles.background, header.styles.color, header.styles.background)
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is not screen, what="back on the grid")
        await pilot.press("t")
        assert app.theme == "light"
        await pilot.pause(0.3)
        assert await open_screen(pilot, app) is screen
        light = (screen.styles.background, header.styles.color, header.styles.background)
        assert light != dark, "the light theme's colours on the instance screen"
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is not screen, what="back on the grid")
        await pilot.press("t", "t")  # high-contrast, then dark again
        assert app.theme == "dark"
        await pilot.pause(0.3)
        await open_screen(pilot, app)
        assert (screen.styles.background, header.styles.color, header.styles.background) == dark


async def test_a_quit_while_the_screen_is_being_built_ends_cleanly(tmp_path: Path) -> None:
    """Quitting (q, or the end of run_test) in the ~0.1 s the background build takes: without the wait in
    FleetApp._shutdown about one quit in three here raised from Textual's tabs ("No Tab with id ...")."""
    for step in range(6):
        (tmp_path / str(step)).mkdir()
        app = make_app(tmp_path / str(step), gpus=1)
        async with app.run_test(size=(80, 24)):
            app.warm_instance_screen()
            await asyncio.sleep(step * 0.015)
        assert app.return_code in (0, None)  # run_test re-raises what the app died of: reaching here is the test


async def test_a_resize_and_a_theme_change_before_the_first_open_show_on_it(tmp_path: Path) -> None:
    """The screen was laid out and rendered off the stack at the start's size and theme; the first open after
    a resize and a theme change shows the screen at the new size in the new colours."""
    app = make_app(tmp_path, gpus=2)
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="three live agents")
        await wait_until(pilot, lambda: app.instance_screens.screen is not None
                         and app.instance_screens.screen._compositor.size == app.size,
                         what="the screen laid out in the background")
        warm = app.instance_screens.screen
        header = warm.query_one("#inst-header")
        dark = (warm.styles.background, header.styles.color, header.styles.background)
        await pilot.resize_terminal(100, 30)
        await pilot.press("t")
        assert app.theme == "light"
        await pilot.pause(0.3)
        screen = await open_screen(pilot, app)
        assert screen is warm and screen._compositor.size == app.size == (100, 30)
        assert (screen.styles.background, header.styles.color, header.styles.background) != dark
        target = screen.instance_name
        await wait_until(pilot, lambda: screen_text(app).lstrip().startswith(target), what="the header's name")
        lines = screen_text(app).splitlines()
        assert len(lines) == 30 and all(len(line) <= 100 for line in lines)



async def test_an_activation_of_a_log_tab_that_is_gone_is_dropped_not_fatal() -> None:
    """A pane added to empty log tabs is activated a moment later (Textual posts ``Tabs.TabActivated``); when the
    screen has moved on to another instance by then, the message names a tab that is gone. TabbedContent raised
    "No Tab with id" on it and the console ended (about half the runs of bench/soak.py): the log tabs drop it."""
    from textual.app import App, ComposeResult
    from textual.widgets import Static, Tab, TabPane, Tabs
    from textual.widgets._tabbed_content import ContentTabs

    from widgets.instance_screen import LogTabs

    class Host(App[None]):
        def compose(self) -> ComposeResult:
            yield LogTabs(id="log-tabs")

    app = Host()
    async with app.run_test() as pilot:
        tabs = app.query_one(LogTabs)
        await tabs.add_pane(TabPane("first.log", Static("a"), id="log-1"))
        await tabs.add_pane(TabPane("second.log", Static("b"), id="log-2"))
        await pilot.pause()
        content_tabs = tabs.get_child_by_type(ContentTabs)
        gone = content_tabs.query_one("#--content-tab-log-1", Tab)
        await tabs.clear_panes()  # the screen shows another instance
        await tabs.add_pane(TabPane("other.log", Static("c"), id="log-3"))
        content_tabs.post_message(Tabs.TabActivated(content_tabs, gone))  # the late activation
        await pilot.pause()
        await pilot.pause()
        assert tabs.active == "log-3"
    # (a crash in a message handler ends the test app: run_test raises it on the way out)


async def test_the_first_colon_open_of_a_session_shows_the_log_on_the_logs_tab(tmp_path: Path) -> None:
    """Issue 35 item 7: ``:open`` an instance other than the one the screen was built for, then ``2``, ``3``:
    a log tab is active and its lines show (emptying the last instance's tabs deactivated the new one)."""
    app = make_app(tmp_path, gpus=2)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="three live agents")
        screens = app.instance_screens
        await wait_until(pilot, lambda: screens.screen is not None and screens.screen.is_mounted
                         and screens.screen._log_ids, what="the screen built in the background, with a log tab")
        built_for = screens.screen.instance_name
        target = next(n for n in reversed(list(app.state.instances)) if n != built_for)
        await pilot.press("colon", *("open %s" % target), "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, InstanceScreen) and app.screen.is_mounted
                         and app.screen.instance_name == target, what="the opened instance's screen")
        await pilot.press("2")
        await pilot.press("3")
        await wait_until(pilot, lambda: "%s step 40" % target in screen_text(app), timeout=10,
                         what="the log's lines on the Logs tab")
        assert app.screen.active_log() is not None, "a log tab is active"
