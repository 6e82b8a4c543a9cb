"""Fleet state: frames from the contract (docs/architecture.md) and from the real agent."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from console.agent.wire import config as agent_config
from console.core.state import HISTORY_SECONDS, LOG_RING_LINES, MAX_LOG_FILES, FleetState
from console.inventory import BenchmarkSpec, Instance
from tests.support import frames

ROOT = Path(__file__).resolve().parent.parent


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_state(*names: str, **extra) -> tuple[FleetState, Clock]:
    clock = Clock()
    state = FleetState(clock=clock)
    for name in names:
        state.add_instance(Instance(name=name, host="10.0.0.1", tags=("a100", "eu"), **extra))
    return state, clock


def gpu_frame(utils, full=False, lost=(), mem_used=2**30):
    devices = []
    for i, u in enumerate(utils):
        dev = {
            "index": i,
            "lost": i in lost,
            "error": "GPU is lost" if i in lost else None,
            "util": u,
            "mem_util": 10,
            "mem_used": mem_used,
            "temp": 50,
            "power": 100.0,
            "sm_clock": 1500,
            "mem_clock": 900,
            "fan": None,
            "procs": [],
        }
        if full:
            dev.update(name="NVIDIA H100", uuid="GPU-%d" % i, mem_total=80 * 2**30, power_limit=700.0)
        devices.append(dev)
    return {
        "type": "gpu",
        "ts": 0,
        "state": "ok",
        "simulated": False,
        "driver": "550",
        "message": None,
        "full": full,
        "devices": devices,
    }


def proc(pid, ppid=1, name="python3", cmdline="python3 bench.py", cpu=1.0, gpu_mem=None):
    return {
        "pid": pid,
        "ppid": ppid,
        "name": name,
        "cmdline": cmdline,
        "state": "S",
        "wchan": None,
        "cpu": cpu,
        "rss": 10**6,
        "start": 1.0,
        "gpu_mem": gpu_mem,
    }


def connect(state: FleetState, name: str) -> None:
    state.set_link_status(name, "connected", "")
    state.apply_frame(name, {"type": "hello", "ts": 0, "v": 1, "features": {"gpu": "ok"}})


def test_gpu_static_fields_are_kept_from_full_frames_by_index() -> None:
    state, _ = make_state("a")
    connect(state, "a")
    state.apply_frame("a", gpu_frame([10, 20], full=True))
    state.apply_frame("a", gpu_frame([30, 40]))
    gpu = state.get("a").gpus[1]
    assert gpu.static["name"] == "NVIDIA H100" and gpu.static["mem_total"] == 80 * 2**30
    assert gpu.util == 40 and list(gpu.util_hist) == [20, 40]
    assert abs(gpu.mem_fraction - 1 / 80) < 1e-9


def test_lost_and_missing_gpus_are_marked_and_counted() -> None:
    state, _ = make_state("a")
    connect(state, "a")
    state.apply_frame("a", gpu_frame([50, 50, 50], full=True))
    state.apply_frame("a", gpu_frame([50, 50, 50], lost=(1,)))
    inst = state.get("a")
    assert inst.lost_gpus == [1] and "lost GPU 1" in inst.flags()
    state.apply_frame("a", gpu_frame([50]))  # devices 1, 2 vanished
    assert inst.lost_gpus == [1, 2]
    assert state.totals()["lost"] == 2


def test_the_header_totals_follow_every_change_after_they_were_read() -> None:
    """totals() keeps each instance's counts between paints: a frame, a status or a GPU gone changes them."""
    state, _ = make_state("a", "b")
    connect(state, "a")
    connect(state, "b")
    state.apply_frame("a", gpu_frame([90, 90], full=True))
    state.apply_frame("b", gpu_frame([0, 0, 0], full=True))
    t = state.totals()
    assert (t["gpus"], t["busy"], t["idle"], t["lost"]) == (5, 2, 3, 0)
    state.apply_frame("a", gpu_frame([90, 0]))  # one of a's GPUs goes idle
    state.apply_frame("b", gpu_frame([50]))  # two of b's vanish, one gets busy
    t = state.totals()
    assert (t["gpus"], t["busy"], t["idle"], t["lost"]) == (5, 2, 1, 2)
    state.set_link_status("b", "unreachable", "connection refused")
    t = state.totals()
    assert t["unreachable"] == 1 and t["failing"] == 1 and t["instances"] == 2
    assert state.totals() == t, "read again without a change: the same"


def test_the_header_totals_stay_exact_through_a_random_fleet_life() -> None:
    """The running sums against a count from scratch after every step of a random mix of frames, link changes,
    the clock passing (stale), hosts added and hosts a reload took out (popped from the state, as
    fleet_watch.apply does)."""
    import random

    from console.core.state import BUSY_UTIL

    def recount(state: FleetState) -> dict:
        out = {"instances": len(state.instances), "gpus": 0, "busy": 0, "lost": 0, "simulated": 0}
        for inst in state.instances.values():
            out[inst.status] = out.get(inst.status, 0) + 1
            out["gpus"] += len(inst.gpus)
            out["lost"] += sum(1 for g in inst.gpus.values() if g.lost or g.missing)
            out["busy"] += sum(1 for g in inst.gpus.values()
                               if not (g.lost or g.missing) and (g.util or 0) >= BUSY_UTIL)
            out["simulated"] += inst.simulated
        out["idle"] = out["gpus"] - out["busy"] - out["lost"]
        return out

    rng = random.Random(7)
    names = ["h%d" % i for i in range(12)]
    state, clock = make_state(*names[:8])
    for step in range(600):
        name = rng.choice(names)
        roll = rng.random()
        if name not in state.instances:
            if roll < 0.3:
                state.add_instance(Instance(name=name, host="10.0.0.2"))
        elif roll < 0.45:
            connect(state, name)
        elif roll < 0.75:
            n = rng.randint(1, 4)
            state.apply_frame(name, gpu_frame([rng.choice((0, 3, 50, 100)) for _ in range(n)],
                                              full=rng.random() < 0.3, lost=(0,) if rng.random() < 0.1 else ()))
        elif roll < 0.85:
            state.set_link_status(name, rng.choice(("unreachable", "connecting", "connected")), "x")
        elif roll < 0.93:
            clock.now += rng.choice((1, 20, 120))
            state.tick()
        elif roll < 0.97:
            state.apply_frame(name, {"type": "hello", "ts": 0, "v": 1, "features": {"gpu": "ok",
                                                                                      "simulated_gpu": True}})
        else:
            state.instances.pop(name)  # a reload took it out
        if step % 3 == 0:
            got = state.totals()
            want = recount(state)
            assert {k: got.get(k, 0) for k in want} == want, "step %d" % step
            assert all(got[k] == 0 for k in got if k not in want and k != "failing")


def test_history_and_log_rings_stay_bounded() -> None:
    state, _ = make_state("a")
    connect(state, "a")
    state.apply_frame("a", gpu_frame([1] * 8, full=True))
    for i in range(HISTORY_SECONDS + 500):
        state.apply_frame("a", gpu_frame([i % 100] * 8))
    inst = state.get("a")
    assert all(len(g.util_hist) == HISTORY_SECONDS for g in inst.gpus.values())
    for i in range(5):
        lines = ["line %d" % (i * 1000 + k) for k in range(1000)]
        state.apply_frame(
            "a",
            {
                "type": "log",
                "ts": 0,
                "path": "/tmp/b.log",
                "lines": lines,
                "first_line": i * 1000 + 1,
                "backlog": False,
                "event": None,
            },
        )
    ring = inst.logs["/tmp/b.log"]
    assert len(ring.lines) == LOG_RING_LINES
    assert ring.lines[-1] == (5000, "line 4999")
    assert inst.last_log == ("/tmp/b.log", 5000, "line 4999")
    for i in range(MAX_LOG_FILES + 10):
        state.apply_frame(
            "a",
            {
                "type": "log",
                "ts": 0,
                "path": "/tmp/f%d.log" % i,
                "lines": ["x"],
                "first_line": 1,
                "backlog": True,
                "event": None,
            },
        )
    assert len(inst.logs) == MAX_LOG_FILES


def test_log_events_are_recorded() -> None:
    state, _ = make_state("a")
    connect(state, "a")
    state.apply_frame(
        "a",
        {
            "type": "log",
            "ts": 0,
            "path": "/x.log",
            "lines": ["a", "b"],
            "first_line": 1,
            "backlog": True,
            "event": None,
        },
    )
    state.apply_frame(
        "a",
        {
            "type": "log",
            "ts": 0,
            "path": "/x.log",
            "lines": ["c"],
            "first_line": 1,
            "backlog": False,
            "event": "truncated",
        },
    )
    ring = state.get("a").logs["/x.log"]
    assert [n for n, _ in ring.lines] == [1, 2, 0, 1]
    assert ring.event == "truncated"


def test_a_progress_line_and_a_reconnect_backlog_replace_lines_not_repeat_them(tmp_path: Path, monkeypatch) -> None:
    from console.agent.sample.logs import LogFollower
    from console.agent.wire import loglines

    monkeypatch.setattr(loglines, "PARTIAL_AFTER", 0.0)  # send the line being written at once
    log = tmp_path / "setup.log"
    log.write_text("[setup] fetching proof parameters\n")
    cfg = {"logs": [str(log)], "watch_dirs": [], "backlog_lines": 200, "max_line_chars": 4096}
    state, _ = make_state("a")
    connect(state, "a")

    def feed(follower: LogFollower) -> None:
        for frame in follower.poll():
            state.apply_frame("a", dict(frame, type="log", ts=0))

    follower = LogFollower(cfg)
    feed(follower)
    for step in ("\r###  12.6%", "\r##########  75.5%", "\r############# 100.0%\n[setup] parameters ok\n"):
        with log.open("a") as fh:
            fh.write(step)
        feed(follower)
    ring = state.get("a").logs[str(log)]
    expected = [
        (1, "[setup] fetching proof parameters"),
        (2, "############# 100.0%"),
        (3, "[setup] parameters ok"),
    ]
    assert list(ring.lines) == expected
    feed(LogFollower(cfg))  # the agent again after a reconnect: its backlog of the same lines
    assert list(ring.lines) == expected


def test_procs_full_then_upsert_and_gone() -> None:
    state, _ = make_state("a")
    connect(state, "a")
    state.apply_frame("a", frames.procs([proc(1, 0, "init"), proc(10), proc(11)]))
    state.apply_frame(
        "a", frames.procs_delta([proc(10, cpu=99.0), proc(12)], [11])
    )
    procs = state.get("a").procs
    assert sorted(procs) == [1, 10, 12] and procs[10]["cpu"] == 99.0
    state.apply_frame("a", frames.procs([proc(1, 0, "init")]))
    assert sorted(procs) == [1]


def test_busiest_process_prefers_gpu_memory() -> None:
    state, _ = make_state("a")
    connect(state, "a")
    state.apply_frame(
        "a",
        frames.procs([proc(10, cpu=300.0), proc(11, cpu=5.0, gpu_mem=10 * 2**30)]),
    )
    assert state.get("a").busiest_process()["pid"] == 11
    state.apply_frame("a", {"type": "hello", "v": 1, "pid": 11})
    assert state.get("a").busiest_process()["pid"] == 10, "the agent itself is never the busiest process"


def test_statuses_ordering_and_worse_events() -> None:
    state, clock = make_state("ok1", "idle", "down", "dead", "sick", "slow")
    for name in ("ok1", "idle", "down", "sick", "slow"):
        connect(state, name)
    state.set_link_status("dead", "hostkey_mismatch", "host key changed")
    for _ in range(40):
        clock.now += 1
        for name in ("ok1", "down", "sick", "slow"):
            state.apply_frame(name, gpu_frame([90, 80]))
        state.apply_frame("idle", gpu_frame([0, 1]))
    state.set_diagnosis(
        "sick",
        {
            "verdict": {"code": "broken_pipe", "severity": "error", "summary": "broken pipe"},
            "findings": [],
            "steps": [],
        },
    )
    state.set_diagnosis(
        "down",
        {
            "verdict": {"code": "benchmark_not_running", "severity": "warning", "summary": "benchmark is not running"},
            "findings": [],
            "steps": [],
        },
    )
    clock.now += 20  # "slow" gets nothing from now on
    for name in ("ok1", "idle", "down", "sick"):
        state.apply_frame(name, frames.heartbeat())
    state.tick()
    got = {n: i.status for n, i in state.instances.items()}
    assert got == {
        "ok1": "ok",
        "idle": "gpu_idle",
        "down": "benchmark_down",
        "dead": "needs_action",  # a changed host key: the operator must act, retrying will not help (issue 13)
        "sick": "failed",
        "slow": "stale",
    }
    assert "host key mismatch" in state.get("dead").status_detail
    assert state.get("slow").status_detail.startswith("no data for 2")
    assert [i.name for i in state.ordered()] == ["sick", "dead", "down", "slow", "idle", "ok1"]
    events = {(n, old, new) for n, old, new, _ in state.take_events()}
    assert ("sick", "ok", "failed") in events and ("slow", "ok", "stale") in events
    assert ("idle", "ok", "gpu_idle") in events and ("dead", "connecting", "needs_action") in events
    assert state.take_events() == []
    totals = state.totals()
    assert totals["instances"] == 6 and totals["failing"] == 3 and totals["gpus"] == 10
    assert totals["busy"] == 8 and totals["idle"] == 2


def test_a_host_that_keeps_failing_to_reconnect_is_reported_once() -> None:
    state, clock = make_state("flappy")
    connect(state, "flappy")
    state.apply_frame("flappy", gpu_frame([90]))
    state.take_events()
    for _ in range(5):  # the link retries: connecting -> unreachable, again and again
        clock.now += 3
        state.set_link_status("flappy", "connecting", "127.0.0.1:22")
        state.set_link_status("flappy", "unreachable", "Connection refused (retry in 2 s)")
    events = state.take_events()
    assert [(old, new) for _, old, new, _ in events] == [("ok", "unreachable")]
    connect(state, "flappy")
    state.apply_frame("flappy", gpu_frame([90]))
    clock.now += 3
    state.set_link_status("flappy", "unreachable", "Connection lost")
    assert [(old, new) for _, old, new, _ in state.take_events()] == [("ok", "unreachable")]


def test_benchmark_down_from_process_patterns() -> None:
    state, _ = make_state("a", benchmark=BenchmarkSpec(match=(r"bench\.py",)))
    connect(state, "a")
    state.apply_frame("a", frames.procs([proc(10)]))
    assert state.get("a").status == "ok"
    state.apply_frame("a", frames.procs_delta([], [10]))
    assert state.get("a").status == "benchmark_down"


def test_a_young_entrypoint_is_starting_until_its_benchmark_has_run() -> None:
    spec = BenchmarkSpec(match=(r"bench\.py",), entrypoint=(r"entrypoint\.sh",))
    state, clock = make_state("a", benchmark=spec)
    connect(state, "a")
    host_now = 5000.0  # the host's clock differs from the console's: process start times are the host's
    entry = dict(proc(5, name="bash", cmdline="bash /entrypoint.sh"), start=host_now - 10)
    curl = dict(proc(6, ppid=5, name="curl", cmdline="curl -o c1.json"), start=host_now - 9)
    state.apply_frame("a", frames.procs([entry, curl], host_now))
    inst = state.get("a")
    assert inst.status == "ok" and inst.status_detail == "benchmark starting: entrypoint up 10s"

    def later(seconds: int) -> None:
        for _ in range(seconds):
            clock.now += 1
            state.apply_frame("a", frames.heartbeat())
        state.tick()

    later(75)
    assert inst.status == "ok" and inst.status_detail == "benchmark starting: entrypoint up 85s"
    later(10)  # past the grace and still no benchmark: down
    assert inst.status == "benchmark_down"
    # a new entrypoint (a restart) gets its grace again; once its benchmark ran and exited, it is down at once
    fresh = dict(entry, pid=7, start=host_now + 95)
    state.apply_frame("a", frames.procs([fresh], host_now + 96))
    assert inst.status == "ok"
    bench = dict(proc(8, ppid=7, cmdline="python3 bench.py"), start=host_now + 97)
    state.apply_frame("a", frames.procs_delta([bench], [], ts=host_now + 98))
    assert inst.status == "ok" and inst.status_detail == ""
    state.apply_frame("a", frames.procs_delta([], [8], ts=host_now + 99))
    assert inst.status == "benchmark_down"


def test_dirty_set_names_only_changed_instances() -> None:
    state, _ = make_state("a", "b", "c")
    state.take_dirty()
    connect(state, "a")
    state.apply_frame("b", gpu_frame([1]))
    assert state.take_dirty() == {"a", "b"}
    assert state.take_dirty() == set()
    state.apply_frame("zzz", gpu_frame([1]))  # unknown instance: ignored
    assert state.take_dirty() == set()


def test_filter_matches_name_tag_host_and_status() -> None:
    state, _ = make_state("alpha", "beta")
    state.get("beta").tags = ["h100"]
    assert [i.name for i in state.ordered("alp")] == ["alpha"]
    assert [i.name for i in state.ordered("tag:h100")] == ["beta"]
    assert [i.name for i in state.ordered("10.0.0")] == ["alpha", "beta"]
    assert state.ordered("status:connecting") and not state.ordered("status:failed")


def test_no_gpu_agentless_and_simulated_flags() -> None:
    state, _ = make_state("a", "b")
    connect(state, "a")
    state.apply_frame(
        "a",
        {
            "type": "gpu",
            "ts": 0,
            "state": "no_gpu",
            "simulated": False,
            "driver": None,
            "message": "no NVIDIA driver",
            "full": True,
            "devices": [],
        },
    )
    assert "no GPU" in state.get("a").flags() and state.get("a").status == "ok"
    state.set_link_status("b", "connected", "agentless (no python3)")
    state.apply_frame("b", {"type": "hello", "ts": 0, "features": {"gpu": "ok", "simulated_gpu": True}})
    assert {"agentless", "simulated GPUs"} <= set(state.get("b").flags())


def test_apply_frame_is_cheap_at_fleet_scale() -> None:
    state, _ = make_state(*("i%03d" % i for i in range(100)))
    for name in state.instances:
        connect(state, name)
        state.apply_frame(name, gpu_frame([50] * 8, full=True))
    frames = [gpu_frame([(k * 7) % 100] * 8) for k in range(10)]
    t0 = time.perf_counter()
    for k in range(10):
        for name in state.instances:
            state.apply_frame(name, frames[k])
    per_frame = (time.perf_counter() - t0) / 1000
    assert per_frame < 0.0005, per_frame  # 100 x 8 GPUs at 1 Hz costs well under 5 % of a core


def test_real_agent_frames_feed_the_state(tmp_path: Path) -> None:
    log = tmp_path / "bench.log"
    log.write_text("".join("step %d\n" % i for i in range(1, 31)))
    cfg = agent_config.encode(
        {
            "interval": 0.2,
            "heartbeat_interval": 0.5,
            "logs": [str(log)],
            "watch_dirs": [],
            "gpu": {"simulate": {"gpus": 2}},
        }
    )
    proc_ = subprocess.Popen(
        [sys.executable, "-m", "console.agent", "--config", cfg],
        cwd=str(ROOT),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    state = FleetState()
    state.add_instance(Instance(name="local", host="localhost", transport="local"))
    state.set_link_status("local", "connected", "")
    try:
        deadline = time.time() + 20
        seen = set()
        assert proc_.stdout is not None
        while time.time() < deadline and not {"hello", "gpu", "procs", "log", "heartbeat"} <= seen:
            line = proc_.stdout.readline()
            if not line:
                break
            frame = json.loads(line)
            seen.add(frame["type"])
            state.apply_frame("local", frame)
    finally:
        proc_.terminate()
        proc_.wait(10)
    inst = state.get("local")
    assert {"hello", "gpu", "procs", "log"} <= seen
    assert sorted(inst.gpus) == [0, 1] and inst.gpus[0].static.get("name")
    assert inst.simulated and "simulated GPUs" in inst.flags()
    assert inst.procs and inst.logs[str(log)].lines[-1] == (30, "step 30")
    assert inst.last_log == (str(log), 30, "step 30")


def test_problems_to_fix_on_this_side_are_needs_action_not_unreachable() -> None:
    state, _ = make_state("keyless", "unknown", "down")
    state.set_link_status("keyless", "needs_action", "key file /root/.ssh/missing not found")
    state.set_link_status("unknown", "hostkey_unknown", "ssh-ed25519 SHA256:abc")
    state.set_link_status("down", "unreachable", "Connection refused")
    got = {n: (i.status, i.status_detail) for n, i in state.instances.items()}
    assert got["keyless"] == ("needs_action", "needs action: key file /root/.ssh/missing not found")
    assert got["unknown"] == ("needs_action", "unknown host key: ssh-ed25519 SHA256:abc")
    assert got["down"][0] == "unreachable"
    assert state.totals()["needs_action"] == 2 and state.totals()["failing"] == 3
    assert [i.name for i in state.ordered()] == ["keyless", "unknown", "down"]


def test_an_instance_without_a_benchmark_section_says_its_benchmark_is_not_watched(tmp_path: Path) -> None:
    """Issue 35 item 23: without [benchmark], BENCH DOWN can never show and nothing said so. Its OK badge's detail
    (the instance screen's header, ``status``'s detail) says it once, and so does ``check``."""
    state, _ = make_state("plain")
    state.add_instance(Instance(name="watched", host="10.0.0.2", benchmark=BenchmarkSpec(match=("prover",))))
    for name in ("plain", "watched"):
        connect(state, name)
        state.apply_frame(name, gpu_frame([90], full=True))
        state.apply_frame(name, frames.procs([proc(7, name="prover", cmdline="prover --run")]))
    plain, watched = state.get("plain"), state.get("watched")
    assert plain is not None and watched is not None
    assert (plain.status, plain.status_detail) == ("ok", "benchmark not watched: no [benchmark] match in fleet.toml")
    assert (watched.status, watched.status_detail) == ("ok", "")

    fleet = tmp_path / "fleet.toml"
    fleet.write_text('[[instance]]\nname = "plain"\nhost = "10.0.0.1"\n\n'
                     '[[instance]]\nname = "watched"\nhost = "10.0.0.2"\n[instance.benchmark]\nmatch = ["prover"]\n')
    out = subprocess.run([sys.executable, "-m", "console", "check", "--fleet", str(fleet)], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "benchmark not watched on 1 of 2: no [benchmark] match (plain)" in out.stdout, out.stdout
