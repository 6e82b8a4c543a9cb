"""The detail pane (>= 160 columns): its lines as a pure function over a real FleetState, then in the app
through Pilot on the real controller with local agents (simulated GPUs): it follows the cursor, in the grid
and in the table, and shows or hides itself as the terminal is resized."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from console.core.state import FleetState
from console.inventory import Instance
from tests.support import frames
from tests.support.app import all_live, make_app, wait_until
from themes import THEMES
from widgets.detail_pane import MIN_COLUMNS, DetailPane, detail_lines, pane_width
from widgets.fleet_table import FleetTable
from widgets.palette import Palette

pytestmark = pytest.mark.usefixtures("config_dir")  # (tests/conftest.py)


def fed_state(now: float, lines: list) -> FleetState:
    state = FleetState(clock=lambda: now)
    state.add_instance(Instance(name="box-1", host="10.0.0.1", port=2222, user="root", tags=("3090",)))
    state.set_link_status("box-1", "connected")
    state.apply_frame("box-1", frames.hello(now, pid=1), now)
    devices = [
        {"index": i, "name": "NVIDIA GeForce RTX 3090", "util": 90, "mem_used": 12 << 30, "mem_total": 24 << 30,
         "temp": 70 + i, "power": 300.0, "procs": []}
        for i in range(3)
    ]
    state.apply_frame("box-1", frames.gpu(devices, now), now)
    state.apply_frame("box-1", frames.log(lines, now, path="/tmp/bench.log"), now)
    return state


def test_lines_show_header_gpus_benchmark_and_the_last_log_lines_cleaned() -> None:
    now = time.time()
    lines = ["step %d" % k for k in range(1, 30)] + ["evil \x1b]0;TITLE\x07[link=x]y[/link]\ttab"]
    inst = fed_state(now, lines).instances["box-1"]
    pal = Palette.from_theme(THEMES["dark"])
    out = [line.plain for line in detail_lines(inst, pal, 50, 40, now)]
    assert out[0].startswith("box-1") and "OK" in out[0].upper()
    assert "root@10.0.0.1:2222" in out[1] and "[3090]" in out[1]
    gpu_rows = [t for t in out if "°" in t and "%" in t]
    assert len(gpu_rows) == 3 and gpu_rows[0].startswith("0 ")
    assert any(t.startswith("benchmark ") for t in out) and any(t.startswith("verdict none yet") for t in out)
    assert any(t.startswith("log bench.log") for t in out)
    assert out[-1].startswith("30 evil ") and "\x1b" not in out[-1] and "\x07" not in out[-1] and "\t" not in out[-1]
    assert "[link=x]y[/link]" in out[-1]  # shown as text, never markup
    assert sum(1 for t in out if t.split(" ", 1)[0].isdigit() and "step" in t) == 9  # 10 lines in all
    assert all(len(t) <= 50 for t in out)
    short = detail_lines(inst, pal, 50, 12, now)  # a short terminal: fewer log lines, never past the height
    assert len(short) <= 12


def test_the_pane_takes_what_whole_grid_columns_leave() -> None:
    assert pane_width(200) == 49  # three boxed grid panes of 50 still fit beside it
    assert pane_width(160) == 59 and pane_width(170) == 69 and pane_width(190) == 70
    for columns in range(MIN_COLUMNS, 300):
        assert 48 <= pane_width(columns) <= 70


async def test_detail_pane_follows_the_cursor_and_hides_below_160_columns(tmp_path: Path) -> None:
    app = make_app(tmp_path, gpus=2)
    async with app.run_test(size=(170, 50)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="three live agents")
        pane = app.query_one(DetailPane)
        grid = app.grid
        assert pane.display and pane.outer_size.width == pane_width(170)
        await wait_until(pilot, lambda: grid.cursor_name and pane.name_shown == grid.cursor_name
                         and "step 40" in pane.text, what="the pane on the cursor's instance")
        first = grid.cursor_name
        text = pane.text
        assert text.splitlines()[0].startswith(first)
        assert len([t for t in text.splitlines() if "°" in t and "%" in t]) == 2  # a line per GPU
        assert "%s step 40" % first in text  # its own log's last line

        # the grid's cursor moves: the pane follows. The fleet's order may have put the cursor on the last row,
        # where "down" has nowhere to go, so move up from there.
        row = grid._names.index(first) // grid.columns
        await pilot.press("up" if row > 0 else "down")
        await wait_until(pilot, lambda: grid.cursor_name != first and pane.name_shown == grid.cursor_name,
                         what="the pane following the cursor")
        second = grid.cursor_name
        assert pane.text.splitlines()[0].startswith(second) and "%s step 40" % second in pane.text

        renders = pane.renders  # cheap: rebuilt on a version change or a second, not on every frame
        await pilot.pause(1.0)
        assert pane.renders - renders <= 2 * 2 + 2  # two instance versions a second at most (0.5 s agents)

        await pilot.press("v")  # the table shares the cursor
        table = app.query_one(FleetTable)
        await wait_until(pilot, lambda: table.display and table.has_focus, what="the table")
        await pilot.press("home")
        await wait_until(pilot, lambda: pane.name_shown == table.visible_names[0], what="the pane on the top row")

        await pilot.resize_terminal(120, 50)
        await wait_until(pilot, lambda: not pane.display, what="the pane hidden at 120 columns")
        assert table.size.width == 120
        await pilot.resize_terminal(MIN_COLUMNS, 50)
        await wait_until(pilot, lambda: pane.display and pane.outer_size.width == pane_width(MIN_COLUMNS),
                         what="the pane back at 160 columns")
        await wait_until(pilot, lambda: pane.name_shown == grid.cursor_name and pane.text, what="its lines again")
