"""A replay shows ages as they were at that point of the recording, not as seen from today: a recording made an
hour ago (written by console/monitor/record.py's own ``Recorder`` from an ``ObservedState`` on that hour-old clock)
replays with small ages, nothing STALE, the recorded transitions at their recorded times, also paused, at
another speed and after a seek; the shifted state is the state fed shifted, field for field."""

from __future__ import annotations

import math
import time
from collections import deque
from pathlib import Path
from typing import Any

from console.core.observed import ObservedState
from console.inventory import BenchmarkSpec, Fleet, Instance
from console.monitor.record import Recorder
from console.monitor.replay import ReplaySource
from console.ui.replay import make_replay_app
from tests.support import wait

HOST_AHEAD = 7.0  # the recorded host's clock runs this far ahead of the console's
BENCH_DOWN = (20, 30)  # seconds into the recording the benchmark is gone


def write_recording(path: Path, start: float, seconds: int = 40) -> list[tuple[float, str, str, str]]:
    """box1 for ``seconds`` from ``start``: up, benchmark down and back, a verdict, a probe, an error, a
    reconnect; returns the transitions the live state saw."""
    inst = Instance(name="box1", host="10.0.0.1", tags=("old",), benchmark=BenchmarkSpec(match=("bench",)))
    fleet = Fleet(instances=[inst], source="an hour ago")
    clock = [start]
    state = ObservedState(clock=lambda: clock[0])
    state.add_instance(inst)
    recorder = Recorder(path, fleet, clock=lambda: clock[0])
    state.observe(recorder)
    live: list[tuple[float, str, str, str]] = []

    class Watch:
        def on_transition(self, name: str, old: str, new: str, detail: str, now: float) -> None:
            live.append((now, name, old, new))

    state.observe(Watch())

    def at(t: float) -> float:
        clock[0] = start + t
        return clock[0]

    at(0.2)
    state.set_link_status("box1", "connected")
    now = at(0.5)
    state.apply_frame("box1", {"type": "hello", "ts": now + HOST_AHEAD, "heartbeat_interval": 1.0}, now)
    bench = {"pid": 42, "ppid": 1, "name": "python3", "cmdline": "bench --steps 100", "state": "R", "wchan": None,
             "cpu": 90.0, "rss": 1 << 30, "start": start + HOST_AHEAD, "gpu_mem": None}  # a record of the contract
    for k in range(1, seconds + 1):
        now = at(k)
        gpu = {"index": 0, "util": 80, "mem_used": 1000, "mem_total": 24000, "name": "NVIDIA GeForce RTX 3090"}
        state.apply_frame("box1", {"type": "gpu", "ts": now + HOST_AHEAD, "state": "ok", "full": True,
                                   "devices": [gpu]}, now)
        procs = [] if BENCH_DOWN[0] <= k < BENCH_DOWN[1] else [bench]
        state.apply_frame("box1", {"type": "procs", "full": True, "ts": now + HOST_AHEAD, "procs": procs}, now)
        state.apply_frame("box1", {"type": "log", "ts": now + HOST_AHEAD, "path": "/w/bench.log", "first_line": k,
                                   "lines": [f"step {k}"], "backlog": False, "event": None}, now)
        state.apply_frame("box1", {"type": "heartbeat", "ts": now + HOST_AHEAD}, now)
        if k == 10:
            state.set_diagnosis("box1", {"verdict": {"code": "healthy", "severity": "info", "summary": "fine"},
                                         "findings": [], "steps": []})
        if k == 11:
            state.set_probe_result("box1", "disk", {"title": "disk", "lines": ["/ 10% used"]})
        if k == 12:
            state.apply_frame("box1", {"type": "error", "ts": now + HOST_AHEAD, "message": "nvml hiccup"}, now)
        if k == 35:
            at(35.2)
            state.set_link_status("box1", "connecting", "reconnecting")
            at(35.6)
            state.set_link_status("box1", "connected")
        state.tick(at(k + 0.5))
    recorder.close()
    return live


async def test_a_replay_of_an_hour_ago_shows_the_ages_of_then(tmp_path: Path) -> None:
    path = tmp_path / "old.jsonl.gz"
    start = float(int(time.time()) - 3600)
    live = write_recording(path, start)
    assert [t[2:] for t in live] == [("connecting", "ok"), ("ok", "benchmark_down"), ("benchmark_down", "ok")]

    check = ReplaySource(path)  # `replay --check`: the transitions at their recorded times
    check.run_to_end()
    assert check.transitions == live == check.recorded

    source = ReplaySource(path, start_at=15.0)
    app = make_replay_app(source)

    async def until(pred: Any, what: str, timeout: float = 30.0) -> None:  # the replay's offset said on a time-out
        await wait.until(pred, timeout, what, interval=0.05, sleep=pilot.pause,
                         detail=lambda: f"(offset {source.offset:.1f})")

    def box() -> Any:
        return source.state.instances["box1"]

    async with app.run_test(size=(140, 40)) as pilot:
        await until(lambda: source.offset >= 16, "playing")
        app.state.tick(time.time())  # what the app's frame clock does each second
        inst = box()
        assert inst.status == "ok" and not inst.is_stale(time.time())
        assert inst.age() is not None and inst.age() < 5, inst.age()  # "last data 1s ago", not "1h ago"
        assert inst.flaps(time.time()) == 0
        assert abs(time.time() - inst.probes["disk"]["at"] - (source.offset - 11)) < 5  # "(disk, 5s ago)"

        await pilot.press("z")  # paused: the ages stand still while the wall clock runs on
        await until(lambda: source.paused, "paused")
        before = box().age()
        wall = time.monotonic()
        await until(lambda: time.monotonic() - wall > 1.2, "a second and more")
        await until(lambda: box().age() < before + 0.5, "the ages stand still")
        assert box().status == "ok"

        await pilot.press("plus", "plus", "plus", "z")  # x8, playing again: through the benchmark's gap
        await until(lambda: source.speed == 8.0 and source.offset >= 37, "past the reconnect at x8")
        app.state.tick(time.time())
        inst = box()
        assert inst.status == "ok" and inst.age() < 5
        assert inst.flaps(time.time()) == 1  # the reconnect at 35 s, within the flap window as it was then
        assert source.transitions == live  # the same, at the recorded times (the first one fed before 15 s)
        await until(lambda: any(n == "box1" for _, n, _ in app.session_events), "the timeline's entries")
        for ts, name, _text in app.session_events:  # the timeline (e) says when it happened in the recording
            if name == "box1":
                assert start <= ts <= start + 41, (ts - start, _text)

        await pilot.press("z", "left_curly_bracket")  # paused, back to the start (rebuilt from the file)
        await until(lambda: source.paused and source.offset < 1 and box().age() is None, "rebuilt at the start")
        await pilot.press("right_square_bracket")  # then 10 s on
        await until(lambda: source.offset >= 10, "seeked")
        inst = box()
        assert inst.status == "ok" and inst.age() is not None and inst.age() < 5
        await pilot.press("q")


def snapshot(obj: Any, path: str = "", out: dict[str, Any] | None = None, depth: int = 0) -> dict[str, Any]:
    """Every leaf value under ``obj`` by its path (objects, slots, dicts, sequences)."""
    out = {} if out is None else out
    if depth > 8:
        return out
    if isinstance(obj, dict):
        for k, v in obj.items():
            snapshot(v, f"{path}[{k!r}]", out, depth + 1)
    elif isinstance(obj, (list, tuple, deque)):
        out[f"{path}#len"] = len(obj)
        for i, v in enumerate(obj):
            snapshot(v, f"{path}[{i}]", out, depth + 1)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type) and not callable(obj):
        for k, v in vars(obj).items():
            snapshot(v, f"{path}.{k}", out, depth + 1)
    elif hasattr(obj, "__slots__") and not isinstance(obj, type):
        for k in obj.__slots__:
            snapshot(getattr(obj, k, None), f"{path}.{k}", out, depth + 1)
    else:
        out[path] = obj
    return out


def test_a_shifted_state_is_the_state_fed_shifted(tmp_path: Path) -> None:
    """Moving a replayed state's times (pause, speed, seek) leaves it as if it had been fed at the new shift: a
    time field added to InstanceState that ``console.monitor.replay.shift_instance`` does not move shows here
    by name."""
    path = tmp_path / "old.jsonl.gz"
    start = float(int(time.time()) - 3600)
    write_recording(path, start)
    moved, fed = ReplaySource(path), ReplaySource(path)
    moved.state.reshift(100.0)
    moved.seek_to(start + 37)
    moved.state.reshift(250.0 - moved.state.shift + 100.0)  # seek_to aligned it to the wall clock: undo, then move
    fed.state.reshift(350.0 - fed.state.shift)
    fed.feed_until(start + 37)
    assert moved.state.shift == fed.state.shift == 350.0
    a, b = snapshot(moved.state.instances), snapshot(fed.state.instances)
    assert a.keys() == b.keys()
    differ = [k for k in a if not (a[k] == b[k] or (isinstance(a[k], float) and isinstance(b[k], float)
                                                     and math.isclose(a[k], b[k], abs_tol=1e-6)))]
    assert not differ, {k: (a[k], b[k]) for k in differ}
    inst = fed.state.instances["box1"]
    assert inst.last_frame == start + 37 + 350.0 and inst.reconnects and inst.errors and inst.probes
    # the rental's meter watched the 37 s replayed so far, not the time since 1970 (issue 31's spend in a replay)
    assert 30.0 <= inst.meter.watched(start + 37 + 350.0) <= 37.0 + 1e-6


async def test_the_replay_footer_offers_its_own_keys_and_not_the_refused_ones(tmp_path: Path) -> None:
    """Issue 35 item 20: at 80 columns the footer shows z, [ ], { }, - + and none of what a recording cannot do
    (diagnose, probes, reload: no host, no fleet file), on the grid and on an instance's screen."""
    from widgets.instance_screen import InstanceScreen

    path = tmp_path / "old.jsonl.gz"
    write_recording(path, float(int(time.time()) - 3600))
    source = ReplaySource(path, start_at=15.0)
    app = make_replay_app(source)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait.until(lambda: "box1" in source.state.instances and source.offset > 1, 30, "playing",
                         sleep=pilot.pause)
        await pilot.pause(0.6)  # the footer looks again twice a second
        footer = app.screen._compositor.render_strips()[-1].text
        for entry in ("z Pause/play", "[ ] ±10s", "{ } ±60s", "- + Speed"):
            assert entry in footer, footer
        for refused in ("Diagnose", "Probes", "Reload"):
            assert refused not in footer, footer
        await pilot.press("d")
        await pilot.pause(0.3)
        assert not any("diagnos" in m for _, _, m in app.notices), app.notices

        app.open_instance("box1")
        await wait.until(lambda: isinstance(app.screen, InstanceScreen) and app.screen.is_mounted, 30,
                         "the instance screen", sleep=pilot.pause)
        await pilot.pause(0.6)
        footer = app.screen._compositor.render_strips()[-1].text
        assert "Diagnose" not in footer and "Probes" not in footer, footer  # (z, [ ] are the GPUs' and logs' here)
