"""Backpressure in the link workers (console/link/coalesce.py, shard_process.py): what the console cannot use yet
is merged, never queued without bound, and a recording still gets every frame.

What an operator would notice: an instance out of view shows its newest state a second later at most (not a
backlog of stale frames), one in view gets every frame, a console that falls behind does not take the worker's
memory with it, and ``--record`` writes every frame whatever the screen shows.
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from console.core.state import FleetState
from console.inventory import Fleet, Instance
from console.link.coalesce import LOG_CAP, Held
from console.link.shard_process import HIGH_WATER, Worker, read_message
from console.monitor.monitoring import MonitoredController, Monitoring
from console.monitor.record import read_records
from tests.support.sshd import Sshd, ssh_instance
from tests.support.wait import until

GPU = {"util": 50, "mem_util": 10, "mem_used": 1 << 30, "temp": 40, "power": 100.0, "sm_clock": 1000,
       "mem_clock": 5000, "fan": 30}


def _dev(index: int, **fields: Any) -> dict[str, Any]:
    return {"index": index, **GPU, **fields}


def _frames() -> list[dict[str, Any]]:
    """An instance's stream: a full GPU frame, slim ones (procs and health left out while unchanged), a process
    table and its deltas, log lines (a partial line sent again, complete)."""
    static = {"name": "NVIDIA H100", "uuid": "GPU-1", "mem_total": 80 << 30, "power_limit": 700.0}
    return [
        {"type": "gpu", "ts": 1.0, "state": "ok", "full": True, "simulated": True, "driver": "550.1", "message": None,
         "devices": [_dev(0, lost=False, error=None, procs=[{"pid": 10, "mem": 5}], **static),
                     _dev(1, lost=False, error=None, procs=[], **dict(static, uuid="GPU-2"))]},
        {"type": "procs", "ts": 1.0, "full": True, "procs": [_proc(1), _proc(10), _proc(11)]},
        {"type": "log", "ts": 1.0, "path": "/b.log", "lines": ["a", "b", "progress 1"], "first_line": 1,
         "backlog": False, "event": None, "partial": True},
        {"type": "gpu", "ts": 2.0, "state": "ok", "full": False,
         "devices": [_dev(0, util=90, procs=[{"pid": 10, "mem": 7}, {"pid": 12, "mem": 1}],
                          health={"ecc_uncorrected": 0}), _dev(1, util=5)]},
        {"type": "procs", "ts": 2.0, "full": False, "upsert": [_proc(12), dict(_proc(10), cpu=99.0)], "gone": [11]},
        {"type": "heartbeat", "ts": 2.0, "seq": 1, "samples": 2, "sent": 100},
        {"type": "log", "ts": 2.0, "path": "/b.log", "lines": ["progress 2", "c"], "first_line": 3,
         "backlog": False, "event": None},
        {"type": "gpu", "ts": 3.0, "state": "ok", "full": False, "devices": [_dev(0, util=70), _dev(1, util=6)]},
        {"type": "procs", "ts": 3.0, "full": False, "upsert": [], "gone": [12]},
        {"type": "heartbeat", "ts": 3.0, "seq": 2, "samples": 3, "sent": 200},
    ]


def _proc(pid: int, **fields: Any) -> dict[str, Any]:
    rec = {"pid": pid, "ppid": 1, "name": "p%d" % pid, "cmdline": "p%d --x" % pid, "state": "S", "wchan": None,
           "cpu": 1.0, "rss": 1 << 20, "start": 100.0, "gpu_mem": None}
    rec.update(fields)
    return rec


def _view(state: FleetState) -> dict[str, Any]:
    """What the panes and the instance screen read of an instance."""
    inst = state.instances["box"]
    gpus = {i: (g.static, g.sample.get("util"), g.sample.get("procs"), g.health, g.lost) for i, g in inst.gpus.items()}
    return {"gpus": gpus, "procs": dict(inst.procs), "logs": {p: list(r.lines) for p, r in inst.logs.items()},
            "driver": inst.gpu_driver, "simulated": inst.gpu_simulated, "status": inst.status}


def _state() -> FleetState:
    state = FleetState(clock=lambda: 1000.0)
    state.add_instance(Instance(name="box", host="127.0.0.1"))
    return state


def test_merged_frames_leave_the_state_as_every_frame_does() -> None:
    frames = _frames()
    every, merged = _state(), _state()
    for frame in frames:
        every.apply_frame("box", frame)
    held = Held()
    for frame in frames:
        held.add(frame)
    out = held.take()
    assert sorted(f["type"] for f in out) == ["gpu", "heartbeat", "log", "procs"]  # ten frames, four applied
    for frame in out:
        merged.apply_frame("box", frame)
    assert _view(merged) == _view(every)
    box = merged.instances["box"]
    assert box.gpus[0].sample["procs"] == [{"pid": 10, "mem": 7}, {"pid": 12, "mem": 1}]  # kept from the 2nd frame
    assert box.gpus[0].static["name"] == "NVIDIA H100" and box.gpus[0].sample["util"] == 70  # static + newest
    assert sorted(box.procs) == [1, 10] and box.procs[10]["cpu"] == 99.0
    assert [t for _n, t in box.logs["/b.log"].lines] == ["a", "b", "progress 2", "c"]


def test_a_log_flood_is_capped_to_its_newest_lines() -> None:
    held = Held()
    for i in range(50):  # 50 frames of 100 lines: 5000 lines in one hold
        held.add({"type": "log", "ts": float(i), "path": "/b.log", "lines": ["line %d" % (i * 100 + k + 1)
                  for k in range(100)], "first_line": i * 100 + 1, "backlog": False, "event": None})
    (frame,) = held.take()
    assert len(frame["lines"]) == LOG_CAP + 1 and frame["lines"][0] == "[... 4800 lines skipped ...]"
    assert frame["lines"][-1] == "line 5000"
    state = _state()
    state.apply_frame("box", frame)
    ring = state.instances["box"].logs["/b.log"]
    assert ring.last == (5000, "line 5000")


async def test_a_console_that_falls_behind_costs_the_worker_a_bounded_amount() -> None:
    """Nobody reads the worker's output for a while: it holds the newest state of each instance (in view or not)
    instead of queueing frames; once read again, that newest state comes."""
    loop = asyncio.get_running_loop()
    rfd, wfd = os.pipe()
    transport, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(wfd, "wb", buffering=0))
    worker = Worker(transport)
    names = ["h%d" % i for i in range(10)]
    worker.set_view(frozenset(names))  # all in view: only the console's lag makes it hold
    big = {"type": "gpu", "ts": 0.0, "state": "ok", "full": False,
           "devices": [_dev(i, procs=[{"pid": p, "mem": p} for p in range(40)]) for i in range(8)]}
    try:
        for n in range(3000):
            for name in names:
                worker.on_frame(name, dict(big, ts=float(n)))
            if n % 5 == 0:
                worker.flush()
                await asyncio.sleep(0)
        worker.flush()
        queued = transport.get_write_buffer_size()
        assert queued < 2 * HIGH_WATER, queued  # 30,000 frames of a few KB went in; about HIGH_WATER waits
        assert worker.behind and sorted(worker.held.held) == names
        reader = asyncio.StreamReader(limit=2**20)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(rfd, "rb"))
        rfd = -1
        newest: dict[str, float] = {}

        async def read_all() -> None:
            while len(newest) < len(names) or min(newest.values()) < 2999.0:
                for event in await read_message(reader):
                    if event[0] == "frame":
                        newest[event[1]] = event[2]["ts"]

        await asyncio.wait_for(read_all(), 30)
        assert newest == {name: 2999.0 for name in names}
        assert worker.delivered < 3000 * len(names) / 2  # most of the flood was merged away
    finally:
        await worker.stop()
        transport.close()
        if rfd >= 0:
            os.close(rfd)


# -- through a real sshd, real agents and a real link worker ----------------------------------------------------

@pytest.fixture(scope="module")
def fleet_sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    server = Sshd(tmp_path_factory.mktemp("sshd"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


class Count:
    """Frames the fleet state was fed, per instance and type (an observer, as the monitoring's are)."""

    def __init__(self) -> None:
        self.frames: Counter[tuple[str, str]] = Counter()

    def on_frame(self, name: str, frame: Any, now: float) -> None:
        self.frames[(name, frame.get("type"))] += 1


async def _write_lines(paths: list[Path], counter: list[int]) -> None:
    while True:
        n = counter[0]
        for path in paths:
            with path.open("a") as fh:
                fh.write("".join("line %d\n" % (n + k + 1) for k in range(5)))
        counter[0] = n + 5
        await asyncio.sleep(0.05)  # (the load: 100 lines a second per host)


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_out_of_view_merged_in_view_every_frame_recording_every_frame(
        fleet_sshd: Sshd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_CONSOLE_LINK_WORKERS", "1")
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    logs = {n: tmp_path / f"{n}.log" for n in ("seen", "unseen")}
    for path in logs.values():
        path.write_text("")
    extra = {"log_interval": 0.2, "heartbeat_interval": 1.0, "gpu": {"simulate": {"gpus": 2}}}
    fleet = Fleet([ssh_instance(fleet_sshd, n, interval=0.2, logs=(str(p),), agent_extra=extra)
                   for n, p in logs.items()], source="fleet.toml")
    record = tmp_path / "rec.jsonl.gz"
    monitoring = Monitoring(fleet, record=record, alerts=False)
    count = Count()
    monitoring.state.observe(count)
    controller = MonitoredController(fleet, monitoring, read_only=True)
    written = [0]
    writer = asyncio.get_running_loop().create_task(_write_lines(list(logs.values()), written))
    try:
        await controller.start()
        controller.set_view(["seen"])
        state = controller.state
        await until(lambda: all(len(state.instances[n].gpus) == 2 for n in logs), 60, "both instances' GPUs")
        start = Counter(count.frames)
        await until(lambda: count.frames[("seen", "gpu")] - start[("seen", "gpu")] >= 15, 30, "15 GPU frames in view")
        got = count.frames - start
        # in view: every sample (0.2 s); out of view: the newest state once a second (~3 s went by)
        assert got[("unseen", "gpu")] <= 6, got
        assert got[("unseen", "log")] <= 6 < got[("seen", "log")], got
        writer.cancel()
        last = written[0]
        for name in logs:  # the newest line arrives, out of view too, and none is lost in the merge
            await until(lambda n=name: (state.instances[n].last_log or ("", 0))[1] == last, 10, f"{name}'s last line")
            numbers = [no for no, _t in state.instances[name].logs[str(logs[name])].lines if no]
            assert numbers == list(range(numbers[0], last + 1)), name

        controller.set_view(["seen", "unseen"])  # scrolled into view: its frames come as they come
        start = Counter(count.frames)
        await until(lambda: count.frames[("unseen", "gpu")] - start[("unseen", "gpu")] >= 10, 10,
                    "10 GPU frames once in view", detail=lambda: count.frames - start)
    finally:
        writer.cancel()
        await controller.stop()
    recorded = Counter(r["n"] for r in read_records(record) if r.get("k") == "frame" and r["f"]["type"] == "gpu")
    applied = {n: count.frames[(n, "gpu")] for n in logs}
    assert recorded["unseen"] >= applied["unseen"] + 8, (recorded, applied)  # every frame, not what was applied
    assert abs(recorded["seen"] - applied["seen"]) <= 2, (recorded, applied)
