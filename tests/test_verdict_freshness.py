"""Issue 35 item 5: a verdict taken too early is taken again, and wherever it is shown it says how old it is.

The automatic diagnosis ran at 30 s of GPU idle while a download still moved ("missing input"), and was never
redone, so the grid kept that while ``d`` said "download stalled at 37.2 %". The rule (console/core/autodiag.py)
is read on a real controller and fleet state fed with the agent's frames; the panes and the table row are
rendered as the grid and the table draw them.
"""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List

from console.core.controller import FleetController
from console.core.state import FleetState, InstanceState
from console.inventory import BenchmarkSpec, Fleet, Instance
from tests.support import frames
from themes import DARK
from widgets.palette import Palette
from widgets.pane import pane_height, pane_strips
from widgets.table_rows import layout, row_line, row_values

STALL = 60.0
STALL_MARGIN = 5.0  # the rule looks again a little past the stall time (autodiag.STALL_MARGIN)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def gpu(util: int, ts: float) -> Dict[str, Any]:
    return frames.gpu([{"index": 0, "util": util, "mem_used": 2**30, "temp": 40, "procs": []}], ts=ts, full=False)


def proc(pid: int, cmdline: str) -> Dict[str, Any]:
    return {"pid": pid, "ppid": 1, "name": cmdline.split()[0], "cmdline": cmdline, "state": "S", "wchan": None,
            "cpu": 1.0, "rss": 10**6, "start": 1.0, "gpu_mem": None}


def verdict(code: str, severity: str, brief: str) -> Dict[str, Any]:
    return {"verdict": {"code": code, "severity": severity, "summary": brief, "brief": brief}, "findings": []}


def idle_instance(clock: Clock, seconds: int) -> tuple[FleetController, InstanceState]:
    """A connected instance whose benchmark runs (a download first) and whose GPU has idled ``seconds``."""
    state = FleetState(clock=clock)
    bench = BenchmarkSpec(match=("fetch-and-prove",))
    inst = Instance("box", "10.0.0.1", benchmark=bench, stall_seconds=STALL)
    ctl = FleetController(Fleet([inst]), state=state)
    ctl.links = {"box": None}  # type: ignore[dict-item]  # no link is started: the rule reads the state
    state.set_link_status("box", "connected", "")
    state.apply_frame("box", frames.hello())
    state.apply_frame("box", frames.procs([proc(10, "fetch-and-prove --download")]))
    for t in range(seconds + 1):
        clock.now += 1
        state.apply_frame("box", gpu(0, ts=float(t)))
    return ctl, state.instances["box"]


def test_a_verdict_taken_before_the_stall_time_is_taken_again_once_it_is_crossed() -> None:
    async def run() -> None:
        clock = Clock()
        ctl, inst = idle_instance(clock, 31)
        auto = ctl.autodiag
        assert inst.status == "gpu_idle"
        assert auto.candidates(now=clock.now) == ["box"]  # entered trouble: diagnosed
        auto.last["box"] = clock.now
        ctl.state.set_diagnosis("box", verdict("missing_input", "error", "missing input"))  # the download moved
        assert inst.status == "failed"
        for _ in range(int(STALL)):  # still in trouble, nothing new yet: no second diagnosis
            clock.now += 1
            assert auto.candidates(now=clock.now) == [], clock.now
        clock.now += STALL_MARGIN + 1  # the trouble is older than the stall time, the verdict is not
        assert auto.candidates(now=clock.now) == ["box"]
        auto.last["box"] = clock.now
        ctl.state.set_diagnosis("box", verdict("download_stalled", "error", "download stalled at 37.2 % for 1m"))
        for _ in range(200):
            clock.now += 1
            assert auto.candidates(now=clock.now) == []  # a verdict taken after the crossing stands

    asyncio.run(run())


def test_a_verdict_is_taken_again_when_the_trouble_changes() -> None:
    async def run() -> None:
        clock = Clock()
        ctl, inst = idle_instance(clock, 31)
        auto = ctl.autodiag
        assert auto.candidates(now=clock.now) == ["box"]
        auto.last["box"] = clock.now
        ctl.state.set_diagnosis("box", verdict("waiting", "warning", "waiting for input"))
        clock.now += 1
        assert inst.status == "gpu_idle" and auto.candidates(now=clock.now) == []
        clock.now += 40
        ctl.state.apply_frame("box", frames.procs([]))  # the benchmark is gone now: another trouble
        assert inst.status == "benchmark_down"
        assert auto.candidates(now=clock.now) == ["box"]

    asyncio.run(run())


def text_of(strips: List[Any]) -> str:
    return "\n".join(s.text for s in strips)


def test_the_grid_pane_and_the_table_row_say_how_old_the_verdict_is() -> None:
    clock = Clock()
    ctl, inst = idle_instance(clock, 31)
    ctl.state.set_diagnosis("box", verdict("missing_input", "error", "missing input"))
    clock.now += 254
    pal = Palette.from_theme(DARK)
    for compact in (True, False):
        strips = pane_strips(inst, pal, 100, pane_height(inst, compact), clock.now, compact=compact)
        assert "missing input · verdict 4m 14s ago" in text_of(strips), text_of(strips)
    row = row_line(row_values(inst, clock.now), layout(200, 8, 12), pal, inst.status).plain
    assert "missing input (4m 14s)" in row, row
