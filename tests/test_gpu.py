"""GpuSampler over the simulated NVML (scripted values and failures) and over the real pynvml."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from console.agent import gpu as gpu_mod
from console.agent import nvml_sim
from console.agent.gpu import GpuSampler
from console.agent.protocol import encode

STATIC = {"name", "uuid", "mem_total", "power_limit"}
DYNAMIC = {"index", "lost", "error", "util", "mem_util", "mem_used", "temp", "power", "sm_clock", "mem_clock", "fan"}
HEALTHY_SMALL = DYNAMIC - {"lost", "error"}  # a healthy device in a non-full frame: no lost:false / error:null
MIB = 1024 * 1024


def _procs_view(frames):
    """Per device index, the procs list a consumer holds after these frames (absent = unchanged)."""
    view = {}
    for frame in frames:
        for dev in frame["devices"]:
            if "procs" in dev:
                view[dev["index"]] = dev["procs"]
    return view


def _config(state_file, gpus=2, **extra):
    sim = {"gpus": gpus, "name": "NVIDIA GeForce RTX 3090", "mem_total_mib": 24576, "state_file": str(state_file)}
    sim.update(extra)
    return {"gpu": {"simulate": sim}}


def _write(path, state):
    nvml_sim.write_state(str(path), state)
    nvml_sim._state_checked = 0.0


@pytest.fixture
def state_file(tmp_path):
    path = tmp_path / "gpu-state.json"
    _write(path, {"gpus": [{"load": 90, "mem_used_mib": 20000}, {"load": 0}]})
    yield path
    nvml_sim.configure({})


def test_full_then_small_frames(state_file):
    sampler = GpuSampler(_config(state_file))
    assert sampler.state == "ok" and sampler.simulated
    frame = sampler.sample()
    assert frame["state"] == "ok" and frame["full"] and frame["simulated"] and frame["driver"]
    d0, d1 = frame["devices"]
    assert set(d0) == DYNAMIC | STATIC | {"procs"}
    assert d0["name"] == "NVIDIA GeForce RTX 3090" and d0["uuid"].startswith("GPU-")
    assert d0["mem_total"] == 24576 * MIB and d0["mem_used"] == 20000 * MIB
    assert isinstance(d0["power"], float) and d0["power_limit"] == 350.0
    assert 80 <= d0["util"] <= 100 and d1["util"] == 0
    assert all(isinstance(d0[k], int) for k in ("util", "mem_util", "temp", "sm_clock", "mem_clock", "fan"))
    nxt = sampler.sample()
    assert not nxt["full"]
    assert set(nxt) == {"state", "full", "devices"}  # driver/simulated travel in full frames
    # no lost:false, error:null, nulls, or procs while unchanged (both lists stay [] here)
    assert set(nxt["devices"][0]) == HEALTHY_SMALL
    assert nxt["devices"][1]["util"] == 0  # a zero is a value, not a default: it stays
    assert d0["uuid"] != d1["uuid"]


def test_last_sample_is_a_full_view_without_touching_nvml(state_file):
    sampler = GpuSampler(_config(state_file))
    assert sampler.last_sample() is None  # nothing sampled yet
    sampler.sample()
    small = sampler.sample()
    assert not small["full"]
    view = sampler.last_sample()
    assert view["full"] and view["devices"][0]["name"] == "NVIDIA GeForce RTX 3090"
    assert view["devices"][1]["util"] == small["devices"][1]["util"] == 0
    assert sampler.sample()["full"] is False  # asking for the view does not reschedule full frames


def test_wire_size_eight_gpus(state_file):
    children = [subprocess.Popen(["sleep", "60"]) for _ in range(8)]
    try:
        gpus = [{"load": 95, "processes": [{"pid": c.pid, "mem_mib": 20000 + i}]} for i, c in enumerate(children)]
        _write(state_file, {"gpus": gpus})
        sampler = GpuSampler(_config(state_file, gpus=8))
        full = len(encode(dict(type="gpu", ts=time.time(), **sampler.sample())))
        small = len(encode(dict(type="gpu", ts=time.time(), **sampler.sample())))
        assert small < 1150, small  # 8 busy GPUs, one process each (unchanged); it was ~1670 with every field
        assert full < 3000, full  # every 60 s
        _write(state_file, {"gpus": [*gpus[:7], {"load": 95}]})  # GPU 7's process goes away
        frame = sampler.sample()
        assert [d["index"] for d in frame["devices"] if "procs" in d] == [7] and frame["devices"][7]["procs"] == []
    finally:
        for c in children:
            c.kill()
            c.wait()


def test_small_frames_feed_the_console_state(state_file):
    """What the console keeps from small frames: procs carried over while absent, nulls and defaults as before."""
    from console.inventory import Instance
    from console.state import FleetState

    child = subprocess.Popen(["sleep", "60"])
    try:
        _write(
            state_file,
            {
                "gpus": [{"load": 90, "processes": [{"pid": child.pid, "mem_mib": 64}]}, {"load": 0}],
                "failures": {"not_supported": ["fan"]},
            },
        )
        sampler = GpuSampler(_config(state_file))
        fleet = FleetState()
        fleet.add_instance(Instance(name="a", host="h"))
        frames = [sampler.sample() for _ in range(3)]
        assert "procs" in frames[0]["devices"][0] and "procs" not in frames[2]["devices"][0]
        assert frames[0]["devices"][0]["fan"] is None and "fan" not in frames[2]["devices"][0]
        for frame in frames:
            fleet.apply_frame("a", dict(frame, type="gpu", ts=time.time()))
        gpu0 = fleet.get("a").gpus[0]
        assert gpu0.sample["procs"] == [{"pid": child.pid, "mem": 64 * MIB}]
        assert not gpu0.lost and gpu0.error is None and gpu0.get("fan") is None and gpu0.util >= 80
        assert gpu0.static["name"] == "NVIDIA GeForce RTX 3090" and fleet.get("a").gpu_driver
    finally:
        child.kill()
        child.wait()


def test_process_memory_and_dead_pids(state_file):
    child = subprocess.Popen(["sleep", "60"])
    try:
        _write(
            state_file,
            {
                "gpus": [
                    {"load": 90, "processes": [{"pid": child.pid, "mem_mib": 1000}]},
                    {"load": 50, "processes": [{"pid": child.pid, "mem_mib": 24}, {"pid": 1, "mem_mib": None}]},
                ]
            },
        )
        sampler = GpuSampler(_config(state_file))
        frame = sampler.sample()
        assert frame["devices"][0]["procs"] == [{"pid": child.pid, "mem": 1000 * MIB}]
        assert {"pid": 1, "mem": None} in frame["devices"][1]["procs"]
        by_pid = sampler.memory_by_pid()
        assert by_pid[child.pid] == 1024 * MIB and by_pid[1] is None
    finally:
        child.kill()
        child.wait()
    deadline = time.monotonic() + 10
    frames = [frame]
    while _procs_view(frames)[0] and time.monotonic() < deadline:
        frames.append(sampler.sample())  # procs come again only when they change
        time.sleep(0.1)  # the sim re-checks a pid's liveness at most every 0.5 s
    assert frames[-1]["devices"][0]["procs"] == [] and child.pid not in sampler.memory_by_pid()
    assert "procs" not in sampler.sample()["devices"][0]  # and then not again while unchanged


def test_not_supported_fields_are_null(state_file):
    _write(state_file, {"gpus": [{"load": 50}], "failures": {"not_supported": ["fan", "power_limit", "clocks"]}})
    frame = GpuSampler(_config(state_file)).sample()
    d0 = frame["devices"][0]
    assert d0["fan"] is None and d0["power_limit"] is None and d0["sm_clock"] is None and d0["mem_clock"] is None
    assert d0["util"] is not None and d0["power"] is not None and not d0["lost"]


def test_older_driver_falls_back_to_v2_processes(state_file):
    child = subprocess.Popen(["sleep", "60"])
    try:
        _write(
            state_file,
            {
                "gpus": [{"processes": [{"pid": child.pid, "mem_mib": 10}]}],
                "failures": {"function_not_found": ["nvmlDeviceGetComputeRunningProcesses_v3"]},
            },
        )
        sampler = GpuSampler(_config(state_file))
        frames = [sampler.sample() for _ in range(3)]
        assert frames[0]["devices"][0]["procs"] == [{"pid": child.pid, "mem": 10 * MIB}]
        assert _procs_view(frames)[0] == [{"pid": child.pid, "mem": 10 * MIB}]
        assert sampler.memory_by_pid() == {child.pid: 10 * MIB}  # still listed through the v2 fallback
    finally:
        child.kill()
        child.wait()


def test_gpu_lost_mid_run_others_go_on(state_file, monkeypatch):
    sampler = GpuSampler(_config(state_file, gpus=3))
    assert all(not d["lost"] for d in sampler.sample()["devices"])  # full frame: lost is there, false
    _write(state_file, {"gpus": [{"load": 90}, {"load": 90}, {"load": 90}], "failures": {"lost": [1]}})
    calls = []
    real = nvml_sim.nvmlDeviceGetUtilizationRates
    monkeypatch.setattr(nvml_sim, "nvmlDeviceGetUtilizationRates", lambda h: calls.append(h.index) or real(h))
    frame = sampler.sample()
    d0, d1, d2 = frame["devices"]
    assert set(d1) == DYNAMIC | {"procs"}  # a lost device's record is complete, even in a small frame
    assert d1["lost"] and "GPU is lost" in d1["error"] and d1["util"] is None and d1["procs"] == []
    assert "lost" not in d0 and "lost" not in d2 and d0["util"] >= 80 and d2["util"] >= 80
    calls.clear()
    for _ in range(3):  # not retried every sample
        assert sampler.sample()["devices"][1]["lost"]
    assert 1 not in calls
    # the GPU comes back: retried after LOST_RETRY, and a full frame re-sends static fields
    _write(state_file, {"gpus": [{"load": 90}, {"load": 90}, {"load": 90}]})
    monkeypatch.setattr(gpu_mod, "LOST_RETRY", 0.0)
    sampler.devices[1].retry_at = 0.0
    frame = sampler.sample()
    assert not frame["devices"][1]["lost"] and frame["full"] and frame["devices"][1]["uuid"]


def test_unknown_error_marks_device_lost(state_file):
    _write(state_file, {"failures": {"unknown": [0]}})
    frame = GpuSampler(_config(state_file)).sample()
    assert frame["devices"][0]["lost"] and "Unknown" in frame["devices"][0]["error"]
    assert not frame["devices"][1]["lost"]


def test_no_driver_single_frame(state_file):
    _write(state_file, {"no_driver": True})
    sampler = GpuSampler(_config(state_file))
    assert sampler.state == "no_gpu"
    first = sampler.sample()
    assert first["state"] == "no_gpu" and first["devices"] == [] and "Driver Not Loaded" in first["message"]
    assert [sampler.sample() for _ in range(5)] == [None] * 5
    assert sampler.memory_by_pid() == {}


def test_driver_appears_later(state_file, monkeypatch):
    _write(state_file, {"no_driver": True})
    sampler = GpuSampler(_config(state_file))
    assert sampler.sample()["state"] == "no_gpu"
    _write(state_file, {"gpus": [{"load": 10}]})
    sampler._next_init = 0.0
    frame = sampler.sample()
    assert frame["state"] == "ok" and frame["full"] and len(frame["devices"]) == 2


def test_real_pynvml_without_driver_is_no_gpu():
    """The real pynvml on a machine without the NVIDIA driver: state no_gpu, once."""
    sampler = GpuSampler({"gpu": {"simulate": None}})
    if sampler.state == "ok":
        pytest.skip("this machine has an NVIDIA driver")
    assert sampler.state == "no_gpu" and not sampler.simulated
    frame = sampler.sample()
    assert frame["state"] == "no_gpu" and frame["message"]
    assert sampler.sample() is None
    json.dumps(frame)
