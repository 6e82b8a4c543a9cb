"""The fleet table (``v``): row values, sort and column layout as pure functions over a real FleetState, then
the view in the app through Pilot, on the real controller with local agents (simulated GPUs)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from console.core.state import FleetState
from console.inventory import Instance
from tests.support import frames
from tests.support.app import all_live, make_app, screen_text, wait_until
from themes import THEMES, load_settings
from widgets.fleet_grid import FleetGrid
from widgets.fleet_table import FleetTable
from widgets.instance_screen import InstanceScreen
from widgets.palette import Palette
from widgets.table_rows import layout, row_line, row_values, sort_names

pytestmark = pytest.mark.usefixtures("config_dir")  # (tests/conftest.py)


def fed_state(now: float) -> FleetState:
    state = FleetState(clock=lambda: now)
    for name, util, temp in (("b-box", 90, 70), ("a-box", 10, 88), ("c-box", None, None)):
        state.add_instance(Instance(name=name, host="h-" + name))
        state.set_link_status(name, "connected")
        state.apply_frame(name, frames.hello(now, pid=1), now)
        if util is not None:
            devices = [
                {"index": i, "name": "NVIDIA GeForce RTX 3090", "util": util if i else 0, "mem_used": 12 << 30,
                 "mem_total": 24 << 30, "temp": temp - i, "power": 300.0, "procs": []}
                for i in range(2)
            ]
            state.apply_frame(name, frames.gpu(devices, now), now)
            state.apply_frame(name, frames.log(["proof 7 done"], now, path="/tmp/b.log"), now - 30)
    return state


def test_row_values_and_sorts() -> None:
    now = time.time()
    state = fed_state(now)
    values = {n: row_values(i, now) for n, i in state.instances.items()}
    b = values["b-box"]
    assert (b["gpu"], b["busy"], b["total"], b["util"], b["mem"], b["temp"], b["power"]) == (
        "RTX 3090", 1, 2, 45.0, 50.0, 70, 600.0)
    assert b["progress_text"] == "proof 7 done"
    assert values["c-box"]["util"] is None and values["c-box"]["total"] == 0
    assert sort_names(values, "util") == ["b-box", "a-box", "c-box"]  # biggest first, unknown last
    assert sort_names(values, "util", reverse=True) == ["a-box", "b-box", "c-box"]  # unknown still last
    assert sort_names(values, "temp") == ["a-box", "b-box", "c-box"]
    assert sort_names(values, "name") == ["a-box", "b-box", "c-box"]
    assert sort_names(values, "name", reverse=True) == ["c-box", "b-box", "a-box"]


def test_layout_fits_and_drops_columns_when_narrow() -> None:
    for width in (60, 80, 120, 200):
        cols = layout(width, 10, 8)
        assert 1 + sum(w + 1 for _k, w, _r in cols) == width
        keys = [k for k, _w, _r in cols]
        assert keys[:2] == ["name", "status"] and keys[-1] == "progress" and "util" in keys
    wide = [k for k, _w, _r in layout(200, 10, 8)]
    assert {"gpu", "power", "uptime", "verdict", "temp", "mem", "busy"} <= set(wide)
    narrow = [k for k, _w, _r in layout(80, 10, 8)]
    assert "power" not in narrow and "gpu" not in narrow and "verdict" in narrow


def test_rows_are_aligned_and_fit_their_width() -> None:
    now = time.time()
    state = fed_state(now)
    pal = Palette.from_theme(THEMES["dark"])
    cols = layout(120, 5, 8)
    lines = [row_line(row_values(i, now), cols, pal, i.status).plain for i in state.instances.values()]
    assert len({len(line) for line in lines}) == 1, lines  # every row the same width: aligned columns
    starts = {line.index("RTX") for line in lines if "RTX" in line}
    assert len(starts) == 1
    assert all(len(line) == 120 for line in lines)


async def test_v_toggles_to_the_table_sorts_and_is_remembered(tmp_path: Path, config_dir: Path) -> None:
    app = make_app(tmp_path, gpus=2)
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="three live agents")
        await pilot.press("v")
        table = app.query_one(FleetTable)
        await wait_until(pilot, lambda: table.display and table.has_focus, what="the table shown and focused")
        assert not app.query_one(FleetGrid).display
        await pilot.pause(0.6)
        lines = screen_text(app).splitlines()
        header = next(line for line in lines if "NAME" in line)
        assert "STATUS" in header and "UTIL" in header and "LAST PROGRESS" in header and "STATUS▲" in header
        rows = [line for line in lines if any(n in line for n in ("alpha", "beta", "gamma"))]
        assert len(rows) == 3 and all("2/2" in r or "/2" in r for r in rows)
        assert all("step 40" in r for r in rows)  # the last log line, with its age
        assert load_settings().get("view") == "table"

        await pilot.press("o")  # status -> name
        await pilot.pause(0.3)
        assert table.sort_key == "name" and table.visible_names == ["alpha", "beta", "gamma"]
        assert "NAME▲" in screen_text(app)
        await pilot.press("O")
        await pilot.pause(0.3)
        assert table.visible_names == ["gamma", "beta", "alpha"] and "NAME▼" in screen_text(app)
        assert load_settings()["table_sort"] == "name" and load_settings()["table_reverse"] is True

        # the cursor row is shared with the grid: enter opens it, s/y/d act on it
        await pilot.press("home", "down")
        assert app.grid.cursor_name == "beta"
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, InstanceScreen), what="instance screen")
        assert app.screen.instance_name == "beta"
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, InstanceScreen), what="back")

        # selection from the table is the app's selection
        await pilot.press("space")
        assert app.targets() == ["beta"]
        await pilot.press("escape")  # clears it (the app's esc)
        await pilot.pause(0.3)
        assert not app.grid.selected

    # remembered: a new console opens on the table, sorted as left
    app = make_app(tmp_path, gpus=2)
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="three live agents")
        await pilot.pause(0.5)
        table = app.query_one(FleetTable)
        assert table.display and table.sort_key == "name" and table.reverse
        assert table.visible_names == ["gamma", "beta", "alpha"]
        await pilot.press("v")
        await pilot.pause(0.3)
        assert app.query_one(FleetGrid).display and not table.display
    assert json.loads((config_dir / "settings.json").read_text())["view"] == "grid"


async def test_held_order_never_reshuffles_rows_under_the_cursor(tmp_path: Path) -> None:
    app = make_app(tmp_path, gpus=2)
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="three live agents")
        await pilot.press("v")
        table = app.query_one(FleetTable)
        await pilot.press("o", "o")  # status -> name -> util: a live figure, re-sorted every second
        assert table.sort_key == "util"
        await pilot.press("S")
        assert table.stable
        await pilot.pause(0.2)
        before = table.visible_names
        assert "[held: S]" in screen_text(app)
        for _ in range(8):  # simulated utilisation jitters: a live sort would move rows
            await pilot.pause(0.5)
            assert table.visible_names == before
        await pilot.press("S")
        assert not table.stable
        values = {n: row_values(app.state.instances[n], time.time()) for n in before}
        await pilot.pause(0.3)
        assert table.visible_names == sort_names(values, "util") or len(table.visible_names) == 3


async def test_the_table_at_80x24_fits(tmp_path: Path) -> None:
    app = make_app(tmp_path, gpus=2)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="three live agents")
        await pilot.press("v")
        await pilot.pause(0.6)
        lines = screen_text(app).splitlines()
        assert len(lines) == 24 and all(len(line) <= 80 for line in lines)
        assert any("NAME" in line and "UTIL" in line for line in lines)
        assert sum(1 for line in lines if any(n in line for n in ("alpha", "beta", "gamma"))) == 3


CURL_METER = " 37 4980M   37 1843M    0     0      0      0  0:01:40  0:06:14  0:00:55     0"


def test_last_progress_reads_the_meter_and_says_the_stall_and_unreachable_rows_are_dim() -> None:
    """LAST PROGRESS shows what the meter says done (not its raw columns), and once the diagnosis calls the
    download stalled, the stall with its percentage; an unreachable row shows its last figures dimmed."""
    now = time.time()
    state = fed_state(now)
    state.apply_frame("b-box", frames.log([CURL_METER], now, path="/tmp/dl.log", first_line=2), now)
    pal = Palette.from_theme(THEMES["dark"])
    cols = layout(120, 5, 8)
    row = row_line(row_values(state.instances["b-box"], now), cols, pal, "ok").plain
    assert "37 % (1843M of 4980M)" in row and "0:01:40" not in row, row
    state.set_diagnosis("b-box", {"verdict": {"code": "download_stalled", "severity": "error",
                                              "summary": "download stalled at 37.2 %: /tmp/dl.log has not moved",
                                              "brief": "download stalled at 37.2 % for 6m"},
                                  "findings": [], "steps": [], "time": now})
    values = row_values(state.instances["b-box"], now)
    assert values["progress_text"] == "download stalled at 37.2 % for 6m"
    assert "download stalled at 37.2 % for 6m" in row_line(values, layout(200, 5, 8), pal, "ok").plain
    assert "37.2% stalled 6m" in row_line(values, cols, pal, "ok").plain
    assert row_line(values, layout(80, 5, 8), pal, "ok").plain.rstrip().endswith("37.2% stalled 6m")  # narrow

    state.set_link_status("a-box", "unreachable", "connection lost")
    inst = state.instances["a-box"]
    assert inst.status == "unreachable"
    line = row_line(row_values(inst, now), cols, pal, inst.status, dim=True)
    styles = {text.strip(): style for text, style in line.parts if text.strip()}
    assert styles["a-box"] == pal.dim, "the name keeps its live colour"
    live = [text for text, style in line.parts[3:] if text.strip() and style != pal.dim]  # (the badge keeps its colour)
    assert live == [], "figures in live colours on an unreachable row: %r" % live
