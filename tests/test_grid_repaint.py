"""Line-level repaints: when an instance changes, the grid and the detail pane refresh only the lines that look
different, and the screen (Textual's compositor output) shows every change. The app runs on the real
controller with local agents (simulated GPUs); the agents are then paused with SIGSTOP (real processes, the
links stay up), so the only changes are the frames this test applies, in the agent's own frame format."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.support.app import all_live, make_app, screen_text, wait_until
from widgets.detail_pane import DetailPane
from widgets.fleet_grid import FleetGrid
from widgets.render import changed_runs

pytestmark = pytest.mark.usefixtures("config_dir")  # (tests/conftest.py)


def pane_rows(app, grid: FleetGrid, name: str) -> list[str]:
    """What the screen shows of ``name``'s pane, a line each."""
    x, y, w, h = grid._pos[name]
    left, top = grid.content_region.x + x, grid.content_region.y + y - int(grid.scroll_offset.y)
    lines = screen_text(app).splitlines()
    return [lines[top + i][left:left + w] for i in range(h)]


async def test_a_changed_figure_repaints_only_its_line_and_the_screen_shows_it(tmp_path: Path) -> None:
    app = make_app(tmp_path, gpus=4)
    async with app.run_test(size=(200, 60)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="three live agents")
        grid = app.query_one(FleetGrid)
        detail = app.query_one(DetailPane)
        pids = [inst.hello["pid"] for inst in app.state.instances.values()]
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            await pilot.pause(1.0)  # what was in flight lands and is painted
            name = next(n for n in grid.visible_names if n != grid.cursor_name)
            inst = app.state.instances[name]
            height = grid._pos[name][3]
            assert height >= 8  # title, address, 4 GPUs, top process, last log, border

            # a log line: only the pane's last-log line is refreshed
            path, number = inst.last_log[0], inst.last_log[1]
            before = grid.lines_refreshed
            app.state.apply_frame(name, {"type": "log", "ts": time.time(), "path": path, "first_line": number + 1,
                                         "lines": ["proof 41 done in 12.5 s"], "backlog": False, "event": None},
                                  time.time())
            await wait_until(pilot, lambda: any("proof 41 done" in row for row in pane_rows(app, grid, name)),
                             timeout=5, what="the new log line on screen")
            assert 1 <= grid.lines_refreshed - before <= 2  # (2: the second ticked over an age on the pane)

            # one GPU's utilisation moves: the GPU lines change (each one's history moves on a sample), the
            # title, address, process, log and border lines are not refreshed
            devices = [{k: v for k, v in inst.gpus[i].sample.items() if k != "procs"} for i in sorted(inst.gpus)]
            devices[2]["util"] = 37 if devices[2].get("util") != 37 else 38
            want = "%d%%" % devices[2]["util"]
            rows_before = pane_rows(app, grid, name)
            before = grid.lines_refreshed
            app.state.apply_frame(name, {"type": "gpu", "ts": time.time(), "state": "ok", "full": False,
                                         "devices": devices}, time.time())
            await wait_until(pilot, lambda: want in [r for r in pane_rows(app, grid, name) if "°" in r][2],
                             timeout=5, what="the GPU line on screen")
            rows = pane_rows(app, grid, name)
            assert [r for r in rows if "°" not in r] == [r for r in rows_before if "°" not in r]
            assert 4 <= grid.lines_refreshed - before <= 5 < height

            # the detail pane beside the grid: the cursor's instance; a new log line is shown there too
            shown = detail.name_shown
            assert shown == grid.cursor_name and shown is not None
            cur = app.state.instances[shown]
            path, number = cur.last_log[0], cur.last_log[1]
            app.state.apply_frame(shown, {"type": "log", "ts": time.time(), "path": path, "first_line": number + 1,
                                          "lines": ["checkpoint 9 written"], "backlog": False, "event": None},
                                  time.time())
            await wait_until(pilot, lambda: "checkpoint 9 written" in screen_text(app)
                             and "checkpoint 9 written" in detail.text, timeout=5, what="the detail pane's new line")
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)


def test_changed_runs_name_each_run_of_lines_that_differ() -> None:
    assert changed_runs(list("abcdef"), list("abcdef")) == []
    assert changed_runs(list("abcdef"), list("aXcYZf")) == [(1, 1), (3, 2)]
    assert changed_runs(list("abc"), list("abcde")) == [(3, 2)]  # lines only the new render has
    assert changed_runs(list("abcde"), list("aX")) == [(1, 4)]  # and lines it no longer has


async def test_panes_that_change_every_frame_do_not_starve_the_ones_after_them(tmp_path: Path) -> None:
    """Ten visible panes, every one changing between any two frames, a repaint budget of six a frame: each pane
    still shows its latest line within a few frames (the longest waiting are repainted first)."""
    names = ["n%02d" % i for i in range(10)]
    app = make_app(tmp_path, names=names, gpus=1)
    async with app.run_test(size=(200, 60)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="ten live agents")
        grid = app.query_one(FleetGrid)
        assert all(grid._is_visible(n) for n in names)
        pids = [inst.hello["pid"] for inst in app.state.instances.values()]
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            await pilot.pause(1.0)
            for tick in range(30):  # ~3 s, every pane changes every 0.1 s
                for name in names:
                    inst = app.state.instances[name]
                    app.state.apply_frame(name, {"type": "log", "ts": time.time(), "path": inst.last_log[0],
                                                 "first_line": inst.last_log[1] + 1, "lines": ["tick %02d" % tick],
                                                 "backlog": False, "event": None}, time.time())
                await pilot.pause(0.1)
            shown = {n: next((r for r in pane_rows(app, grid, n) if "tick " in r), "") for n in names}
            late = {n: row for n, row in shown.items() if not any("tick %02d" % t in row for t in range(20, 30))}
            assert not late, late  # each pane repainted within the last second of changes
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)


async def test_a_large_fleet_repaints_at_2_hz_but_the_cursor_and_an_open_instance_do_not_wait(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past LARGE_FLEET instances the fleet view repaints one frame of four (1 Hz); the detail pane still follows a key
    at once, and an open instance whose figures changed is painted at the next frame. (Three live agents stand
    for the large fleet: the threshold is lowered to two once the small fleet's frame rate was seen.)"""
    import console.ui.app as app_mod
    from tests.support.app import open_screen

    app = make_app(tmp_path, gpus=2)
    async with app.run_test(size=(200, 60)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="three live agents")
        painted, held = app.frames_painted, app.frames_held
        await pilot.pause(3.0)
        assert app.frames_held == held and app.frames_painted - painted >= 8  # 4 Hz: nothing held

        monkeypatch.setattr(app_mod, "LARGE_FLEET", 2)
        painted, held = app.frames_painted, app.frames_held
        await pilot.pause(3.0)
        painted, held = app.frames_painted - painted, app.frames_held - held
        assert painted <= 5 and held >= 6, (painted, held)  # one tick of four of the 4 Hz clock

        grid = app.query_one(FleetGrid)
        detail = app.query_one(DetailPane)
        for key in ("right", "right", "left"):
            before = grid.cursor_name
            await pilot.press(key)
            await pilot.pause()
            assert grid.cursor_name != before and detail.name_shown == grid.cursor_name  # not half a second later

        # an open instance with news is painted at the next tick, never held: a log line for it, six times
        screen = await open_screen(pilot, app)
        name = screen.instance_name
        inst = app.state.instances[name]
        for k in range(6):
            held, painted = app.frames_held, app.frames_painted
            app.state.apply_frame(name, {"type": "log", "ts": time.time(), "path": inst.last_log[0],
                                         "first_line": inst.last_log[1] + 1, "lines": ["open view line %d" % k],
                                         "backlog": False, "event": None}, time.time())
            await wait_until(pilot, lambda p=painted: app.frames_painted != p, timeout=5, what="the next paint")
            assert app.frames_held == held, "a tick was held while the open instance had news"
            await pilot.pause(0.3 * (k % 3))  # (at different phases of the clock)


def hostkey_fleet_app(sshd, tmp_path: Path):
    """Two local agents (alpha, beta) and zz-newbox, a real sshd whose key is unknown: NEEDS ACTION once settled,
    so it sorts above the other two although it is last by name (the order every instance has while connecting)."""
    from console.core.audit import AuditLog
    from console.core.controller import FleetController
    from console.inventory import Fleet
    from console.ui.app import FleetApp
    from tests.support.app import make_fleet
    from tests.support.sshd import ssh_instance

    known = tmp_path / "kh" / "known_hosts"
    known.parent.mkdir()
    known.write_text("")
    local = make_fleet(tmp_path, names=("alpha", "beta")).instances
    newbox = ssh_instance(sshd, name="zz-newbox", known_hosts=str(known), python="/nonexistent/python3")
    fleet = Fleet([*local, newbox], source=str(tmp_path / "fleet.toml"))
    return FleetApp(FleetController(fleet, audit=AuditLog(tmp_path / "audit.jsonl")), theme="dark")


async def test_after_start_up_the_cursor_is_on_the_top_row_until_the_operator_moves_it(sshd, tmp_path: Path) -> None:
    app = hostkey_fleet_app(sshd, tmp_path)
    async with app.run_test(size=(120, 30)) as pilot:
        state = app.state
        await wait_until(pilot, lambda: state.get("zz-newbox").status == "needs_action"
                         and all(state.get(n).status == "ok" for n in ("alpha", "beta")), what="statuses settled")
        grid = app.query_one(FleetGrid)
        await wait_until(pilot, lambda: grid.visible_names[0] == "zz-newbox", what="the NEEDS ACTION pane on top")
        await pilot.pause(0.3)
        assert grid.cursor_name == "zz-newbox", "the cursor stayed on the row that was first while connecting"
        await pilot.press("down")  # the operator moves it: from now on it stays where they put it
        moved = grid.cursor_name
        assert moved != "zz-newbox"
        grid.relayout()  # a relayout (a resize, a reorder) keeps the operator's row
        assert grid.cursor_name == moved
