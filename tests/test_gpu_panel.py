"""The GPUs tab: one coloured line per GPU (8 fit 80x24), charts with a time axis, gaps and older points.

The rendering tests feed real frames through ``FleetState.apply_frame`` (the console's own path) and read the
Rich text the panel makes; the Pilot test runs the console on a real sshd whose agent loads the fake
``libnvidia-ml.so.1`` (tests/fakes), with older GPU minutes written by console/monitor/history.py's writer.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from rich.text import Text

from console.core.state import FleetState, InstanceState
from console.inventory import Instance
from tests.support import frames
from widgets.gpu_chart import chart_columns, chart_lines, gaps, time_axis
from widgets.gpu_panel import LEVELS, RowLayout, gpu_detail, gpu_row, gpu_tab_lines, level_style

pytest_plugins = ["tests.fakes.conftest_plugin"]

GIB = 1024**3
NOW = 1_800_000_000.0


def device(index: int, t: float, full: bool, **fields: Any) -> dict[str, Any]:
    """One GPU record as the agent sends it (static fields in a full frame)."""
    rec: dict[str, Any] = {
        "index": index, "lost": False, "error": None, "util": 50, "mem_util": 20, "mem_used": 6 * GIB, "temp": 60,
        "power": 200.0, "sm_clock": 1695, "mem_clock": 9751, "fan": 50,
        "procs": [{"pid": 4000 + index, "mem": GIB}],
    }
    if full:
        rec.update(name="NVIDIA GeForce RTX 3090", uuid="GPU-%08x" % index, mem_total=24 * GIB, power_limit=350.0)
    rec.update(fields)
    return rec


def fed(count: int = 8, seconds: int = 120, skip: range = range(0), per_gpu: Any = None) -> InstanceState:
    """An instance fed one gpu frame a second for ``seconds`` up to NOW, none for the seconds in ``skip``."""
    state = FleetState(clock=lambda: NOW)
    state.add_instance(Instance(name="box", host="h"))
    state.set_link_status("box", "connected")
    for k in range(seconds):
        if k in skip:
            continue
        t = NOW - seconds + k + 1
        devices = [device(i, t, k == 0, **(per_gpu(i, k) if per_gpu else {})) for i in range(count)]
        state.apply_frame("box", frames.gpu(devices, t, full=k == 0), now=t)
    return state.get("box")


def style_at(line: Text, needle: str | int) -> str:
    """The style of the span that covers ``needle``'s first character (or the cell at an index)."""
    at = needle if isinstance(needle, int) else line.plain.index(needle)
    styles = [str(s.style) for s in line.spans if s.start <= at < s.end]
    return styles[-1] if styles else str(line.style)


def test_eight_gpus_fit_80_columns_and_the_tabs_rows() -> None:
    inst = fed(8)
    lines, rows = gpu_tab_lines(inst, 78, NOW)  # 80 columns less the scroll bar
    assert lines[0].plain.startswith("GPU state: ok")
    gpu_lines = [lines[i] for i in sorted(rows)]
    assert len(gpu_lines) == 8 and sorted(rows.values()) == list(range(8))
    assert max(rows) + 1 <= 12  # state line, header, 8 GPUs: room left for the charts in ~16 rows
    for line in [*gpu_lines, lines[1]]:
        assert line.cell_len <= 78, line.plain
    first = gpu_lines[0].plain
    assert first.startswith("0 RTX 3090 ") and " 50% " in first and "6.0/24G" in first
    assert " 60°" in first and "200/350W" in first and "1695/9751" in first and "4000" in first
    assert "█" in first  # bars
    # and the charts follow in the same text, with a time axis and min/avg/max under each
    plain = gpu_detail(inst, 78, NOW).plain
    for label in ("util %", "mem %", "temp °C", "power W"):
        assert label in plain
    assert plain.count("-10m") == 4 and plain.count("now") >= 4
    assert "min 50%  avg 50%  max 50%" in plain and "min 200W  avg 200W  max 200W" in plain
    # wider terminals widen the bars; a long process list is cut with +N
    many = fed(1, 5, per_gpu=lambda i, k: {"procs": [{"pid": 10000 + n, "mem": GIB} for n in range(30)]})
    line = gpu_row(many.gpus[0], RowLayout(78, 1))
    assert line.cell_len <= 78 and "+" in line.plain


def test_figures_are_coloured_by_level_from_one_table() -> None:
    assert level_style("util", 10) == "green" and level_style("util", 60) == "yellow"
    assert level_style("util", 95) == "bold red" and level_style("util", None) == ""
    assert level_style("temp", LEVELS["temp"][1]) == "bold red" and level_style("temp", 40) == "green"

    def levels(i: int, k: int) -> dict[str, Any]:
        return [
            {"util": 5, "mem_used": 2 * GIB, "temp": 40, "power": 50.0},
            {"util": 65, "mem_used": 17 * GIB, "temp": 75, "power": 250.0},
            {"util": 99, "mem_used": 23 * GIB, "temp": 90, "power": 340.0},
        ][i]

    inst = fed(3, 3, per_gpu=levels)
    layout = RowLayout(78, 3)
    cool, warm, hot = (gpu_row(inst.gpus[i], layout) for i in range(3))
    assert style_at(cool, "  5%") == "green" and style_at(cool, " 40°") == "green"
    assert style_at(cool, "50/350W") == "green" and style_at(cool, "2.0/24G") == "green"
    assert style_at(warm, " 65%") == "yellow" and style_at(warm, " 75°") == "yellow"
    assert style_at(warm, "250/350W") == "yellow" and style_at(warm, "17/24G") == "yellow"
    assert style_at(hot, " 99%") == "bold red" and style_at(hot, " 90°") == "bold red"
    assert style_at(hot, "340/350W") == "bold red" and style_at(hot, "23/24G") == "bold red"
    # the charts' columns take the same colours
    chart = chart_lines([5.0, 65.0, 99.0], 2, 100.0, lambda v: level_style("util", v))
    bottom = chart[-1]
    n = len(bottom.plain)
    assert [style_at(bottom, i) for i in range(n - 3, n)] == ["green", "yellow", "bold red"]


def test_a_lost_gpu_says_lost_not_zeros() -> None:
    def lose(i: int, k: int) -> dict[str, Any]:
        if i == 1 and k >= 50:
            return {"lost": True, "error": "GPU is lost", "util": None, "mem_used": None, "temp": None,
                    "power": None, "sm_clock": None, "mem_clock": None, "procs": []}
        return {}

    inst = fed(2, 60, per_gpu=lose)
    lines, rows = gpu_tab_lines(inst, 78, NOW, selected=1)
    row = next(lines[i] for i, index in rows.items() if index == 1).plain
    assert "LOST" in row and "GPU is lost" in row
    assert "0%" not in row and "0/" not in row and "°" not in row and "W" not in row
    assert "reverse" in style_at(next(lines[i] for i, x in rows.items() if x == 1), "LOST")
    plain = Text("\n").join(lines).plain
    assert "GPU 1 RTX 3090" in plain and "LOST" in plain.split("GPU 1 RTX 3090", 1)[1].splitlines()[0]
    # the charts stop where the GPU was lost: blank columns, not a fall to zero
    util_chart = plain.split("util %\n", 1)[1].splitlines()[:3]
    assert util_chart[-1].rstrip().endswith("█")  # before: 50 % (the util is 50 everywhere)
    assert util_chart[-1].endswith(" ")  # the last 10 s are blank (the last column: lost)


def test_a_pause_in_the_samples_is_a_gap_not_a_line_across_it() -> None:
    # 120 s at 1 Hz with nothing from 40 s to 80 s (a frozen agent): a 10-minute window at 60 columns is 10 s a
    # column, so the 40 s freeze blanks three whole columns; the chart's other columns are filled
    inst = fed(1, 120, skip=range(40, 80))
    lines, _ = gpu_tab_lines(inst, 66, NOW)  # 60 chart columns
    plain = Text("\n").join(lines).plain
    assert "gap: no samples for 41s" in plain
    util = plain.split("util %\n", 1)[1].splitlines()[2]  # the bottom row
    body = util[5:]
    assert len(body) == 60
    recent = body[-12:]  # the last 120 s
    assert recent[:4].strip() and recent[-4:].strip() == "████"
    assert recent[5:8] == "   "  # the freeze
    # the same through the pure function: nothing interpolated, a held value only between close samples
    ts = [0.0, 1.0, 2.0, 30.0, 31.0]
    cols = chart_columns(ts, [10, 10, 10, 90, 90], [], 0.0, 32.0, 32, 1.0)
    assert cols[:3] == [10, 10, 10] and cols[3:30] == [None] * 27 and cols[30:] == [90, 90]
    assert gaps(ts, 0.0, 32.0, 1.0) == [(2.0, 30.0)]
    assert gaps(ts, 0.0, 40.0, 1.0)[-1] == (31.0, 40.0)  # nothing since: a gap going on until now
    # a sampling interval wider than a column holds the value (not a gap); a freeze of > 2 intervals does not
    slow = [0.0, 5.0, 10.0, 30.0]
    cols = chart_columns(slow, [50, 50, 50, 50], [], 0.0, 31.0, 31, 5.0)
    assert all(v == 50 for v in cols[:11]) and cols[11:30] == [None] * 19 and cols[30] == 50


def test_older_points_fill_the_columns_before_the_ring() -> None:
    older = [(0.0, 10, 20, 30), (60.0, 40, 50, 60)]  # two minutes from the history file
    ts = [170.0 + k for k in range(10)]
    cols = chart_columns(ts, [90] * 10, older, 0.0, 180.0, 18, 1.0)  # 10 s a column
    assert cols[:6] == [20.0] * 6 and cols[6:12] == [50.0] * 6
    assert cols[12:17] == [None] * 5  # minute 2: neither history nor ring (e.g. the console was closed)
    assert cols[17] == 90
    axis = time_axis(180.0, 18).plain
    assert axis.strip().startswith("-3m") and axis.rstrip().endswith("now")


# -- the console, on a real sshd with the fake NVML library ----------------------------------------------------


async def test_gpu_tab_on_a_real_agent_with_history(fake_nvml: Any, nvml_sshd: Any, tmp_path: Path) -> None:
    from console.monitor.history import History
    from console.monitor.monitoring import MonitoredController, Monitoring
    from console.ui.app import FleetApp
    from tests.fakes import nvml
    from tests.support.app import screen_text, wait_until
    from tests.support.sshd import ssh_instance
    from widgets.gpu_panel import GpuPanel
    from widgets.instance_screen import InstanceScreen

    devices = [nvml.device(i, util=97, temp=71) for i in range(8)]
    devices[5] = nvml.device(5, error="GPU_IS_LOST")
    fake_nvml.write(nvml.state(devices))
    history_path = tmp_path / "history.sqlite3"
    writer = History(history_path)  # a previous console run: minutes from 40 to 2 minutes ago, util 13 %
    start = time.time() - 40 * 60
    for k in range(0, 38 * 60, 20):
        writer.gpu_sample(start + k, "box1", [{"index": i, "util": 13, "temp": 55, "power": 120.0,
                                               "mem_used": 2048 * 1048576} for i in range(8)])
    writer.close()

    from console.inventory import Fleet

    inst = ssh_instance(nvml_sshd, "box1", interval=0.5, agent_extra={"heartbeat_interval": 0.5, "interval": 0.5})
    fleet = Fleet([inst], source=str(tmp_path / "fleet.toml"))
    app = FleetApp(MonitoredController(fleet, Monitoring(fleet, history=history_path)), theme="dark")
    async with app.run_test(size=(80, 24)) as pilot:
        state = app.state
        await wait_until(pilot, lambda: len(state.get("box1").gpus) == 8 and len(state.get("box1").gpu_ts) >= 3,
                         timeout=60, what="8 GPUs from the agent")
        app.open_instance("box1")
        await wait_until(pilot, lambda: isinstance(app.screen, InstanceScreen) and app.screen.is_mounted,
                         what="instance screen")
        panel = app.screen.query_one(GpuPanel)
        await wait_until(pilot, lambda: "older points from the history file" in panel.older_note, timeout=30,
                         what="the history read")
        await wait_until(pilot, lambda: "min 13%" in screen_text(app) or "min 13%" in panel.text.plain,
                         timeout=15, what="the older points in the charts")
        text = screen_text(app)
        lines = text.splitlines()
        assert len(lines) == 24
        gpu_lines = [line for line in lines if re.match(r"\s*[0-7] ", line) and ("LOST" in line or "%" in line)]
        assert len(gpu_lines) == 8, text  # all 8 on the first screen, with the charts' start below
        assert any("LOST" in line for line in gpu_lines)
        assert any(" 97%" in line and " 71°" in line and "310/350W" in line for line in gpu_lines)
        assert "GPU 0 RTX 3090 · last 10m" in text and "util %" in text
        rendered = panel.text.plain
        assert "min 13%" in rendered and "max 97%" in rendered and "-10m" in rendered
        # the keys: down picks the next GPU's charts, z zooms out (the history read again for the hour)
        panel.focus()
        await pilot.press("down")
        await wait_until(pilot, lambda: "GPU 1 RTX 3090" in panel.text.plain, what="GPU 1's charts")
        row = next(y for y, index in panel._rows.items() if index == 3)
        await pilot.click(GpuPanel, offset=(4, row))  # a click on a GPU's line picks it too
        await wait_until(pilot, lambda: "GPU 3 RTX 3090" in panel.text.plain, what="GPU 3's charts")
        await pilot.press("z")
        await wait_until(pilot, lambda: "last 1h" in panel.text.plain and "-1h" in panel.text.plain,
                         what="the 1h window")
        await wait_until(pilot, lambda: panel._loaded_window >= 3600 and not panel._loading, what="the hour read")

        def minutes() -> int:
            found = re.search(r"older points from the history file \((\d+) minutes\)", panel.text.plain)
            return int(found.group(1)) if found else 0

        # 38 minutes from 40 minutes ago (39 when they straddle a minute more; this run's own minutes may join)
        await wait_until(pilot, lambda: minutes() >= 38, timeout=15, what="the older minutes of the hour")


async def test_the_gpus_tab_has_the_keys_its_hint_offers_as_soon_as_it_shows(tmp_path: Path) -> None:
    """Issue 35 item 11: "↑↓ GPU · z zoom" works on the GPUs tab as it opens (Enter on the grid, each time, and
    back from another tab with tab / shift+tab), without pressing 1 first."""
    from tests.support.app import all_live, make_app, open_screen, wait_until
    from widgets.gpu_panel import GpuPanel

    app = make_app(tmp_path, gpus=3)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="three live agents")
        async def keys_work_at_once() -> None:
            screen = await open_screen(pilot, app)
            panel = screen.query_one(GpuPanel)
            await wait_until(pilot, lambda: panel.has_focus, timeout=5, what="the GPU lines focused")
            await pilot.press("down")
            await wait_until(pilot, lambda: panel.selected == 1 and "GPU 1 " in panel.text.plain, what="GPU 1's charts")
            await pilot.press("z")
            await wait_until(pilot, lambda: "last 1h" in panel.text.plain, what="zoomed out to the hour")
            await pilot.press("tab", "shift+tab")  # Processes, then back on GPUs
            await wait_until(pilot, lambda: panel.has_focus, timeout=5, what="the GPU lines focused again")
            await pilot.press("escape")
            await wait_until(pilot, lambda: app.screen is not screen, what="back on the grid")

        await keys_work_at_once()  # the first open of the session
        await keys_work_at_once()  # the screen shown again
