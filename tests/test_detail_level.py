"""Detail on demand (issue #19 item 2): an instance off screen sends a summary, and catches up when shown.

Real parts: the agent through a real sshd (``SshLink``), its simulated NVML (``nvml_sim``, the GPU boundary),
a real benchmark process and a growing log file; the Pilot test drives the real app on a real controller.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from console.agent.sample import nvml_sim
from console.agent.sample.logs import LogFollower
from console.core.controller import FleetController
from console.core.detail import SUMMARY_AFTER
from console.core.state import FleetState
from console.inventory import BenchmarkSpec, Fleet
from console.link import SshLink
from console.ui.app import FleetApp
from tests.support.sshd import Sshd, ssh_instance
from tests.support.wait import until


@pytest.fixture
def bench_proc(tmp_path: Path):
    """A benchmark process whose program is ``fake-bench-<pid>.sh`` (matched on the program, as the agent does)."""
    script = tmp_path / ("fake-bench-%d.sh" % os.getpid())
    script.write_text("sleep 600\n")
    proc = subprocess.Popen(["bash", str(script)])
    yield proc, script.name
    proc.kill()
    proc.wait()


@pytest.mark.timeout(150)
async def test_summary_level_over_sshd(sshd: Sshd, tmp_path: Path, bench_proc) -> None:
    proc, program = bench_proc
    gpu_state = tmp_path / "gpu.json"
    nvml_sim.write_state(str(gpu_state), {"gpus": [{"load": 40}]})
    log = tmp_path / "bench.log"
    log.write_text("boot 1\nboot 2\n")
    inst = ssh_instance(
        sshd, "box1", logs=(str(log),), interval=1.0, benchmark=BenchmarkSpec(match=(program,)),
        agent_extra={"log_interval": 0.5, "gpu": {"simulate": {"gpus": 1, "state_file": str(gpu_state),
                                                               "jitter": False}}},
    )
    state = FleetState()
    state.add_instance(inst)
    frames: list[tuple[float, dict[str, Any]]] = []

    def on_frame(name: str, frame: dict[str, Any]) -> None:
        frames.append((time.monotonic(), frame))
        state.apply_frame(name, frame)

    link = SshLink(inst, on_frame, state.set_link_status)
    link.start()
    try:
        box = state.get("box1")
        assert box is not None
        await until(lambda: link.status == "connected" and box.bench_running and box.logs, 60, "the first frames")
        assert "detail" in box.hello["features"]["ops"]

        asked = time.monotonic()
        answer = await link.request("detail", {"level": "summary"}, timeout=30)
        assert answer["ok"] and answer["data"] == {"level": "summary"}
        t0 = time.monotonic() + 1.0  # the loop takes the level within a log interval; frames already on the way
        await until(lambda: time.monotonic() > t0, 5, "the level to settle")
        with open(log, "a") as fh:
            for i in range(1, 31):
                fh.write("missed %d\n" % i)
                fh.flush()
                await asyncio.sleep(0.2)
                state.tick()
                assert box.status != "stale", box.status_detail
        # a GPU figure that moves beyond its threshold comes at once; the rest only every 5 s
        nvml_sim.write_state(str(gpu_state), {"gpus": [{"load": 95}]})
        await until(lambda: any(f["type"] == "gpu" and f["devices"][0].get("util", 0) > 90 for t, f in frames
                                if t > t0), 15, "the GPU frame of a moved figure")
        t_move = time.monotonic()
        await until(lambda: time.monotonic() > t_move + 11, 20, "a quiet GPU for 11 s")
        for _ in range(3):
            state.tick()
            assert box.status != "stale"
        quiet = [t for t, f in frames if f["type"] == "gpu" and t > t_move + 0.5]
        assert 1 <= len(quiet) <= 4, "unchanged figures: a frame every 5 s, got %d in 11 s" % len(quiet)
        after = [f for t, f in frames if t > t0]
        assert not [f for f in after if f["type"] == "log"], "no log lines at summary"
        assert all(f.get("subset") for f in after if f["type"] == "procs"), "only the benchmark's processes"
        assert any(f.get("level") == "summary" for t, f in frames if t > asked and f["type"] == "heartbeat")
        assert box.bench_running and box.detail_level == "summary" and box.procs_subset
        assert any(program in (r.get("cmdline") or "") for r in box.procs.values())

        # the benchmark goes down while off screen: the console knows within a summary period or two
        proc.kill()
        proc.wait()
        await until(lambda: box.bench_running is False, 30, "benchmark down at summary")
        assert box.status == "benchmark_down"

        # back to full: the missed lines arrive, numbered on from the ones before, and the whole tree
        t1 = time.monotonic()
        answer = await link.request("detail", {"level": "full"}, timeout=30)
        assert answer["data"] == {"level": "full"}
        ring = box.logs[str(log)]
        await until(lambda: ring.last is not None and ring.last[1] == "missed 30", 15, "the missed lines")
        assert [t for n, t in ring.lines if n] == ["boot 1", "boot 2"] + ["missed %d" % i for i in range(1, 31)]
        assert [n for n, _ in ring.lines] == list(range(1, 33))
        await until(lambda: any(f["type"] == "procs" and f.get("full") and not f.get("subset")
                                for t, f in frames if t > t1), 15, "the whole process tree")
        assert not box.procs_subset
        with open(log, "a") as fh:
            fh.write("live again\n")
        await until(lambda: ring.last is not None and ring.last[1] == "live again", 15, "live lines")
    finally:
        await link.stop()


def test_held_lines_are_bounded_and_marked(tmp_path: Path) -> None:
    """At summary a file's held lines stay under backlog_lines; what was cut is a skipped marker, numbered."""
    log = tmp_path / "a.log"
    log.write_text("")
    follower = LogFollower({"logs": [str(log)], "watch_dirs": [], "backlog_lines": 10})
    try:
        follower.poll()
        with open(log, "a") as fh:
            for i in range(1, 26):
                fh.write("l%d\n" % i)
                fh.flush()
                follower.hold(follower.poll())
        assert follower.held_lines == 11  # ten lines and the marker
        frames = follower.release()
        assert len(frames) == 1 and follower.release() == []
        frame = frames[0]
        assert frame["lines"] == ["[... 15 lines skipped ...]"] + ["l%d" % i for i in range(16, 26)]
        assert frame["first_line"] == 15 and frame["skipped"] == 15
        with open(log, "a") as fh:
            fh.write("l26\n")
        assert follower.poll()[0]["first_line"] == 26
    finally:
        follower.close()


def _fleet(sshd: Sshd, count: int) -> Fleet:
    instances = [
        ssh_instance(sshd, "node%02d" % i, interval=1.0,
                     agent_extra={"proc_root": os.getpid(),  # busy GPUs: no gpu_idle, the grid keeps its order
                                  "gpu": {"simulate": {"gpus": 1, "jitter": False, "state": {"gpus": [{"load": 60}]}}}})
        for i in range(count)
    ]
    return Fleet(instances, source="test")


@pytest.mark.timeout(240)
async def test_off_screen_instances_go_to_summary_and_back(sshd: Sshd) -> None:
    """12 instances at 80x16: those out of view are asked for summary; scrolled into view, full again."""
    controller = FleetController(_fleet(sshd, 12), read_only=True)
    app = FleetApp(controller)
    state = controller.state
    async with app.run_test(size=(80, 16)) as pilot:
        try:
            await until(lambda: all(i.link_status == "connected" and i.gpus for i in state.instances.values()),
                        120, "every instance connected")
            grid = app.grid
            tracker = app.detail
            assert tracker is not None

            def settled() -> bool:  # the agents themselves say so (their heartbeat), not the console's bookkeeping
                shown = grid.on_screen_names()
                return all((i.detail_level == "full") == (n in shown) for n, i in state.instances.items())

            await until(settled, 60, "the agents off screen at summary, the others at full")
            on_screen = grid.on_screen_names()
            off = [n for n in state.instances if n not in on_screen]
            assert on_screen and off, on_screen
            for inst in state.instances.values():
                assert inst.status != "stale"
            asked = tracker.requests
            assert asked <= len(state.instances) + 2, "one request per instance, not one per tick"

            await pilot.press("end")  # the last instances come into view
            await until(lambda: set(grid.on_screen_names()) != set(on_screen), 15, "the grid to scroll")
            shown = [n for n in grid.on_screen_names() if n in off]
            assert shown
            await until(lambda: all(tracker.level(n) == "full" for n in shown), 5, "full asked at once")
            await until(lambda: all(state.instances[n].detail_level == "full" for n in shown), 30,
                        "the agents shown at full")
            gone = [n for n in on_screen if n not in grid.on_screen_names()]
            assert gone
            await until(lambda: all(state.instances[n].detail_level == "summary" for n in gone), 30,
                        "the agents scrolled away at summary (after %g s)" % SUMMARY_AFTER)

            await pilot.press("enter")  # the instance screen opens: it is full whatever the grid shows
            await until(lambda: tracker.level(grid.cursor_name or "") == "full", 5, "the opened one at full")
        finally:
            await controller.stop()


def test_small_fleet_stays_full() -> None:
    """Everything in view: nothing is asked (and an instance that is not connected is never asked)."""
    from console.core.detail import DetailTracker
    from console.inventory import Instance

    state = FleetState()
    for name in ("a", "b"):
        state.add_instance(Instance(name=name, host="127.0.0.1"))
    sent: list[tuple[str, str]] = []
    now = [0.0]
    tracker = DetailTracker(state, lambda n, lv: sent.append((n, lv)) or True, clock=lambda: now[0])
    for _ in range(20):
        now[0] += 1.0
        tracker.update(["a", "b"])
        tracker.update(["a"])  # "b" out of view, but "b" is not connected: nothing to ask
    assert sent == []


def test_idleness_counts_seconds_at_summary() -> None:
    """An idle GPU that sends a frame every 5 s (summary) is gpu_idle after ~30 s, as one sending every second."""
    from console.core.state import IDLE_WINDOW
    from console.inventory import Instance

    clock = [1000.0]
    state = FleetState(clock=lambda: clock[0])
    state.add_instance(Instance(name="a", host="127.0.0.1"))
    state.set_link_status("a", "connected")
    frames = 0
    while state.get("a").status != "gpu_idle":  # type: ignore[union-attr]
        assert frames <= IDLE_WINDOW // 5 + 1, "idle for %d s and still not gpu_idle" % (frames * 5)
        state.apply_frame("a", {"type": "gpu", "ts": 50.0 + 5 * frames, "state": "ok", "full": frames == 0,
                                "devices": [{"index": 0, "util": 0, "mem_used": 1, "procs": []}]})
        state.apply_frame("a", {"type": "heartbeat", "ts": 50.0 + 5 * frames, "seq": frames, "level": "summary"})
        frames += 1
        clock[0] += 5.0
        state.tick()
        assert state.get("a").status != "stale"  # type: ignore[union-attr]
    assert frames >= IDLE_WINDOW // 5


def test_the_tracker_follows_hosts_it_stopped_looking_at() -> None:
    """Out-of-view hosts whose agents said they took "summary" are not re-decided at every look, yet: one scrolled
    into view is asked for "full" at once, one that reconnected (its agent starts at full) and one whose agent's
    heartbeat says "full" again are asked for "summary" again."""
    from console.core.detail import RECHECK, SUMMARY_AFTER, DetailTracker
    from console.inventory import Instance

    clock = [1000.0]
    state = FleetState(clock=lambda: clock[0])
    names = ["h%02d" % i for i in range(40)]
    for name in names:
        state.add_instance(Instance(name=name, host="127.0.0.1"))

    def connect(name: str) -> None:
        state.set_link_status(name, "connected", "")
        state.apply_frame(name, {"type": "hello", "ts": 0, "v": 1, "pid": 1, "features": {"ops": ["detail"]}})

    def beat(name: str, level: str) -> None:
        frame = {"type": "heartbeat", "ts": clock[0], "seq": 1, "samples": 1, "sent": 0}
        state.apply_frame(name, dict(frame, level=level) if level == "summary" else frame)

    for name in names:
        connect(name)
    sent: list[tuple[str, str]] = []
    tracker = DetailTracker(state, lambda n, lv: sent.append((n, lv)) or True, clock=lambda: clock[0])
    view = names[:4]

    def look(seconds: float, view: list[str]) -> list[tuple[str, str]]:
        start = len(sent)
        end = clock[0] + seconds
        while clock[0] < end:
            clock[0] += 0.5
            tracker.update(view)
            for name, level in sent[start:]:
                beat(name, level)  # the agents take what they are asked
        return sent[start:]

    asked = look(SUMMARY_AFTER + 2, view)
    assert sorted(asked) == sorted((n, "summary") for n in names[4:])
    look(RECHECK + 2, view)  # the agents' heartbeats agree: settled
    assert len(tracker.settled) == len(names) - 4 and look(5, view) == []

    assert look(0.5, names[10:14]) == [(n, "full") for n in names[10:14]]  # scrolled into view: at once

    state.set_link_status("h20", "unreachable", "gone")
    clock[0] += 1
    connect("h20")  # a new session: its agent sends everything again
    beat("h20", "full")
    assert ("h20", "summary") in look(2, names[10:14])

    beat("h30", "full")  # its agent lost the level (same session): asked again once RECHECK says so
    assert ("h30", "summary") in look(2, names[10:14])
