"""Issue 35 item 9: start-up (CONNECTING -> OK -> BENCH DOWN -> FAILED as the facts arrive) and config reloads are
not "flapping"; a host that keeps dropping still is.

The monitoring (history file, its flap rule) runs for real on a fleet state fed as the links feed it: link
statuses, the agent's frames, a verdict. A reload goes through the controller's own reload path (``fleet_watch``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any, Dict, List

from console.core import fleet_watch
from console.core.observed import ObservedState
from console.inventory import BenchmarkSpec, Fleet, Instance
from console.monitor.history import HistoryReader
from console.monitor.monitoring import MonitoredController, Monitoring
from tests.support import frames


class Clock:
    def __init__(self) -> None:
        self.now = time.time()  # (the history keeps 30 days back from now)

    def __call__(self) -> float:
        return self.now


def failed_verdict() -> Dict[str, Any]:
    return {"verdict": {"code": "oom", "severity": "error", "summary": "out of memory"}, "findings": []}


def start_up(state: ObservedState, clock: Clock, name: str = "box") -> None:
    """What a first connection brings, a second apart: the link, the agent's hello and processes, a verdict."""
    for step in (
        lambda: state.set_link_status(name, "connecting", "127.0.0.1:22"),
        lambda: state.set_link_status(name, "connected", "agent 1 pid 7"),
        lambda: state.apply_frame(name, frames.hello()),
        lambda: state.apply_frame(name, frames.procs([])),  # no benchmark process: BENCH DOWN
        lambda: state.set_diagnosis(name, failed_verdict()),  # FAILED
    ):
        clock.now += 1
        step()


def flaps(history: Path) -> List[Dict[str, Any]]:
    reader = HistoryReader(history)
    try:
        return list(reader.events(kinds=["flap"]))
    finally:
        reader.close()


def run_monitored(tmp_path: Path, body: Any) -> Path:
    clock = Clock()
    history = tmp_path / "history.sqlite3"
    inst = Instance("box", "10.0.0.1", benchmark=BenchmarkSpec(match=("prover",)))
    state = ObservedState(clock=clock)
    state.add_instance(inst)  # (an empty state is falsy: Monitoring would make its own, on the wall clock)
    monitoring = Monitoring(Fleet([inst]), history=history, alerts=False, state=state)

    async def run() -> None:
        controller = MonitoredController(Fleet([inst]), monitoring)
        await monitoring.start(controller)
        try:
            await body(controller, clock, inst)
        finally:
            monitoring.history.flush(clock.now)
            await monitoring.stop()

    asyncio.run(run())
    return history


def test_start_up_settling_is_not_a_flap(tmp_path: Path) -> None:
    async def body(controller: Any, clock: Clock, inst: Instance) -> None:
        start_up(controller.state, clock)
        assert controller.state.get("box").status == "failed"

    assert flaps(run_monitored(tmp_path, body)) == []


def test_config_reloads_are_not_flaps_and_do_not_count_as_reconnects(tmp_path: Path) -> None:
    async def body(controller: Any, clock: Clock, inst: Instance) -> None:
        state = controller.state
        start_up(state, clock)
        clock.now += 120  # long settled
        for interval in (2.0, 3.0, 4.0):  # three edits of fleet.toml, a minute apart
            clock.now += 60
            await fleet_watch.apply(controller, [dataclasses.replace(inst, interval=interval)])
            for status, detail in (("closed", "stopped"), ("connecting", "127.0.0.1:22"), ("connected", "agent")):
                clock.now += 1  # the old link stops, the new one connects
                state.set_link_status("box", status, detail)
            state.apply_frame("box", frames.procs([]))
        box = state.get("box")
        assert box.flaps(clock.now) == 0, "a reload is no reconnect (the pane's 'flapped Nx')"
        news = [new for _name, _old, new, _detail in state.take_events()]
        assert news == ["benchmark_down", "failed"], news  # start-up's, no "link closed" notice per reload

    assert flaps(run_monitored(tmp_path, body)) == []


def test_a_host_that_keeps_dropping_is_still_flapping(tmp_path: Path) -> None:
    async def body(controller: Any, clock: Clock, inst: Instance) -> None:
        state = controller.state
        start_up(state, clock)
        clock.now += 120
        for _ in range(3):
            clock.now += 20
            state.set_link_status("box", "unreachable", "Connection reset")
            clock.now += 5
            state.set_link_status("box", "connected", "agent")

    assert len(flaps(run_monitored(tmp_path, body))) == 1
