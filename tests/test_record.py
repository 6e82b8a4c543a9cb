"""Record and replay: a recording of a real sshd fleet (the benchmark stops and comes back) replays to the
same transitions; the replay console opens on it with pause, seek and speed; a cut file still reads."""

from __future__ import annotations

import asyncio
import gzip
import subprocess
from pathlib import Path
from typing import Any

from console.inventory import BenchmarkSpec, Fleet
from console.monitor.monitoring import MonitoredController, Monitoring
from console.monitor.record import read_records
from console.monitor.replay import ReplaySource
from console.ui.replay import make_replay_app
from tests.support.sshd import Sshd, ssh_instance
from tests.support.wait import until, until_sync
from tests.test_serve import bench_process, simulated, statuses  # noqa: F401 (a fixture)


async def record_a_failure(sshd: Sshd, tmp_path: Path, bench: Any) -> tuple[Path, list[tuple[str, str, str]]]:
    """Record box1 going ok -> benchmark_down -> ok (and a host that is down); the live transitions."""
    proc, token, argv = bench
    inst = ssh_instance(sshd, "box1", tags=("rec",), benchmark=BenchmarkSpec(match=(token,)),
                        agent_extra=simulated(proc.pid))
    down = ssh_instance(sshd, "gone", port=1)
    fleet = Fleet(instances=[inst, down], source="test")
    path = tmp_path / "rec.jsonl.gz"
    monitoring = Monitoring(fleet, record=path)
    live: list[tuple[str, str, str]] = []

    class Watch:
        def on_transition(self, name: str, old: str, new: str, detail: str, now: float) -> None:
            live.append((name, old, new))

    monitoring.state.observe(Watch())
    controller = MonitoredController(fleet, monitoring, read_only=True)
    await controller.start()
    again = None
    try:
        box = controller.state.instances["box1"]
        state = controller.state  # (a timeout names what each instance showed)
        await until(lambda: box.status == "ok" and box.bench_running and len(box.gpus) == 2, detail=statuses(state))
        proc.kill()
        proc.wait()
        await until(lambda: box.status == "benchmark_down", detail=statuses(state))
        again = subprocess.Popen(argv)
        await until(lambda: box.status == "ok", detail=statuses(state))
        await asyncio.sleep(1.5)
    finally:
        await controller.stop()
        if again is not None:
            again.kill()
            again.wait()
    return path, live


async def test_a_replay_shows_the_recorded_transitions(sshd: Sshd, tmp_path: Path, bench_process: Any) -> None:  # noqa: F811
    path, live = await record_a_failure(sshd, tmp_path, bench_process)
    box1 = [t[1:] for t in live if t[0] == "box1"]
    assert ("ok", "benchmark_down") in box1 and box1[-1] == ("benchmark_down", "ok"), live
    assert ("gone", "connecting", "unreachable") in live

    source = ReplaySource(path)
    source.run_to_end()
    assert [t[1:] for t in source.transitions] == live
    assert [t[1:] for t in source.recorded] == live
    assert [t[0] for t in source.transitions] == [t[0] for t in source.recorded]  # at the recorded times
    box = source.state.instances["box1"]
    assert box.status == "ok" and box.tags == ["rec"] and len(box.gpus) == 2
    assert box.gpus[0].static.get("name") == "NVIDIA GeForce RTX 3090"
    kinds = {r["k"] for r in read_records(path)}
    assert {"header", "frame", "link", "tick", "tr"} <= kinds

    # seek back and forth: the same state at the same point, however it got there
    middle = next(t for t, n, o, s in source.recorded if n == "box1" and s == "benchmark_down") + 0.01
    source.seek_to(source.started_at)
    assert source.transitions == [] and source.state.instances["box1"].status == "connecting"
    source.seek_to(middle)
    assert source.state.instances["box1"].status == "benchmark_down"
    source.seek(-1e6)
    source.seek_to(middle)
    assert source.state.instances["box1"].status == "benchmark_down"

    # the console on it: opens paused, plays, seeks and changes speed by keys
    app = make_replay_app(ReplaySource(path, paused=True))
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause(0.3)
        src = app.controller
        assert "REPLAY" in app.header_text().plain and "PAUSED" in app.header_text().plain
        await pilot.press("z")
        await pilot.pause(0.5)
        assert not src.paused and 0.2 < src.offset < 5
        await pilot.press("plus", "plus")
        assert src.speed == 4.0
        await pilot.press("right_square_bracket")  # past the end of this short recording
        await pilot.pause(0.2)
        assert src.finished and src.state.instances["box1"].status == "ok"
        await pilot.press("left_curly_bracket")  # back to the start: rebuilt from the file
        await pilot.pause(0.1)
        assert src.offset < 2 and not src.finished
        await pilot.press("r")  # restart: refused (read-only), nothing breaks
        await pilot.pause(0.2)
        await pilot.press("q")


def test_a_cut_recording_reads_up_to_the_cut(tmp_path: Path) -> None:
    path = tmp_path / "r.gz"
    with gzip.open(path, "wt") as fh:
        for i in range(2000):
            fh.write('{"t": %d, "k": "tick"}\n' % i)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    got = list(read_records(path))
    assert 0 < len(got) < 2000 and all(r["k"] == "tick" for r in got)


def test_the_demo_records_itself(tmp_path: Path) -> None:
    """``fleet-console demo --record FILE`` in a real terminal (tmux) for a few seconds, quit with q: the replay
    of the file has the demo's instances with their data and statuses."""
    import sys

    from tests.support.tmux import Tmux

    path = tmp_path / "demo.jsonl.gz"
    env = {"FLEET_CONSOLE_CONFIG_DIR": str(tmp_path / "cfg"), "FLEET_CONSOLE_STATE_DIR": str(tmp_path / "state"),
           "TMPDIR": str(tmp_path)}
    term = Tmux(120, 30)
    try:
        term.start([sys.executable, "-m", "console", "demo", "--instances", "2", "--record", str(path)], env=env)
        term.wait_for(lambda s: "healthy-01" in s and "idle-02" in s and "%" in s, timeout=60,
                      what="two demo instances with GPU figures")

        def recorded() -> set[str]:  # the instances with GPU frames in the file so far (flushed every 2 s)
            if not path.exists():
                return set()
            return {r["n"] for r in read_records(path) if r.get("k") == "frame" and r["f"].get("type") == "gpu"}

        until_sync(lambda: recorded() == {"healthy-01", "idle-02"}, 60, "GPU frames of both instances in the file",
                   interval=0.5, detail=lambda: f"GPU frames recorded for {recorded()} only:\n{term.screen()}")
        term.keys("q")
        term.wait_dead(30, "q to quit the demo")
    finally:
        term.close()
    source = ReplaySource(path)
    assert [i.name for i in source.instances] == ["healthy-01", "idle-02"]
    source.run_to_end()
    replayed = source.state.instances
    assert set(replayed) == {"healthy-01", "idle-02"}
    assert all(inst.ever_connected and inst.gpus for inst in replayed.values())
    assert {t[1] for t in source.transitions if t[2] == "connecting"} == {"healthy-01", "idle-02"}  # settled
    assert [t[1:] for t in source.transitions] == [t[1:] for t in source.recorded]
