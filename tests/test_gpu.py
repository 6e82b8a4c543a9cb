"""GpuSampler over the real pynvml, loaded against the fake ``libnvidia-ml.so.1`` (tests/fakes): values,
failures and frame shapes as on a GPU host. (``nvml_sim`` is the demo's; its own tests are test_nvml_sim.py.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from console.agent.sample import gpu as gpu_mod
from console.agent.sample import gpusummary
from console.agent.sample.gpu import GpuSampler
from console.agent.wire.protocol import encode
from tests.fakes import nvml
from tests.fakes.nvml import FakeNvml, device, state

pytest_plugins = ["tests.fakes.conftest_plugin"]

STATIC = {"name", "uuid", "mem_total", "power_limit"}
DYNAMIC = {"index", "lost", "error", "util", "mem_util", "mem_used", "temp", "power", "sm_clock", "mem_clock", "fan"}
HEALTHY_SMALL = DYNAMIC - {"lost", "error"}  # a healthy device in a non-full frame: no lost:false / error:null
MIB = 1024 * 1024
ROOT = Path(__file__).resolve().parents[1]
REAL = {"gpu": {"simulate": None}}  # the agent's default: pynvml (its /dev: no workload of ours holds a GPU there)


def _procs_view(frames):
    """Per device index, the procs list a consumer holds after these frames (absent = unchanged)."""
    view = {}
    for frame in frames:
        for dev in frame["devices"]:
            if "procs" in dev:
                view[dev["index"]] = dev["procs"]
    return view


@pytest.fixture
def gpus(nvml_in_process: FakeNvml) -> FakeNvml:
    """Two RTX 3090s, one busy (90 %, 20000 MiB used), one idle, in this process's NVML."""
    nvml_in_process.write(state([device(0, util=90, mem_used_mib=20000), device(1, util=0)]))
    return nvml_in_process


@pytest.fixture
def real(gpu_dev: Path) -> dict[str, Any]:
    """The agent's config for the real pynvml with the fake device directory the workloads hold files of."""
    return {"gpu": nvml.gpu_config(gpu_dev)}


@pytest.fixture
def child(gpu_dev: Path):
    """A GPU workload: holds /dev/nvidia0 and /dev/nvidia1 (of ``gpu_dev``) open, as a CUDA process does."""
    proc = nvml.hold_devices(gpu_dev, [0, 1], ["sleep", "60"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _in_subprocess(env: dict[str, str], script: str) -> dict[str, Any]:
    """Run a GpuSampler ``script`` in a fresh python with ``env`` (a library can only be swapped per process)."""
    full_env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", nvml.STATE_ENV)}
    full_env.update(env)
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.splitlines()[-1])


def test_full_then_small_frames(gpus):
    sampler = GpuSampler(REAL)
    assert sampler.state == "ok" and not sampler.simulated
    frame = sampler.sample()
    assert frame["state"] == "ok" and frame["full"] and frame["simulated"] is False and frame["driver"] == "550.54.15"
    d0, d1 = frame["devices"]
    assert set(d0) == DYNAMIC | STATIC | {"procs"}
    assert d0["name"] == "NVIDIA GeForce RTX 3090" and d0["uuid"].startswith("GPU-")
    assert d0["mem_total"] == 24576 * MIB and d0["mem_used"] == 20000 * MIB
    assert isinstance(d0["power"], float) and d0["power"] == 310.0 and d0["power_limit"] == 350.0
    assert d0["util"] == 90 and d1["util"] == 0
    assert all(isinstance(d0[k], int) for k in ("util", "mem_util", "temp", "sm_clock", "mem_clock", "fan"))
    nxt = sampler.sample()
    assert not nxt["full"]
    assert set(nxt) == {"state", "full", "devices"}  # driver/simulated travel in full frames
    # no lost:false, error:null, nulls, or procs while unchanged (both lists stay [] here)
    assert set(nxt["devices"][0]) == HEALTHY_SMALL
    assert nxt["devices"][1]["util"] == 0  # a zero is a value, not a default: it stays
    assert d0["uuid"] != d1["uuid"]


def test_last_sample_is_a_full_view_without_touching_nvml(gpus):
    sampler = GpuSampler(REAL)
    assert sampler.last_sample() is None  # nothing sampled yet
    sampler.sample()
    small = sampler.sample()
    assert not small["full"]
    gpus.write(state([device(0, util=5), device(1, util=77)]))  # NVML changes; the view does not ask it
    view = sampler.last_sample()
    assert view["full"] and view["devices"][0]["name"] == "NVIDIA GeForce RTX 3090"
    assert view["devices"][1]["util"] == small["devices"][1]["util"] == 0
    assert sampler.sample()["full"] is False  # asking for the view does not reschedule full frames


def test_wire_size_eight_gpus(nvml_in_process, gpu_dev, real):
    children = [nvml.hold_devices(gpu_dev, [i], ["sleep", "60"]) for i in range(8)]
    try:
        gpus = [
            device(i, util=95, mem_used_mib=22000, processes=[{"pid": c.pid, "mem_mib": 20000 + i}])
            for i, c in enumerate(children)
        ]
        nvml_in_process.write(state(gpus))
        sampler = GpuSampler(real)
        full = len(encode(dict(type="gpu", ts=time.time(), **sampler.sample())))
        small = len(encode(dict(type="gpu", ts=time.time(), **sampler.sample())))
        assert small < 1150, small  # 8 busy GPUs, one process each (unchanged); it was ~1670 with every field
        assert full < 3000, full  # every 60 s
        nvml_in_process.write(state([*gpus[:7], device(7, util=95, mem_used_mib=22000)]))  # GPU 7's process ends
        frame = sampler.sample()
        assert [d["index"] for d in frame["devices"] if "procs" in d] == [7] and frame["devices"][7]["procs"] == []
    finally:
        for c in children:
            c.kill()
            c.wait()


def test_small_frames_feed_the_console_state(nvml_in_process, child, real):
    """What the console keeps from small frames: procs carried over while absent, nulls and defaults as before."""
    from console.core.state import FleetState
    from console.inventory import Instance

    nvml_in_process.write(
        state(
            [
                device(0, util=90, not_supported=["fan"], processes=[{"pid": child.pid, "mem_mib": 64}]),
                device(1, util=0, not_supported=["fan"]),
            ]
        )
    )
    sampler = GpuSampler(real)
    fleet = FleetState()
    fleet.add_instance(Instance(name="a", host="h"))
    frames = [sampler.sample() for _ in range(3)]
    assert "procs" in frames[0]["devices"][0] and "procs" not in frames[2]["devices"][0]
    assert frames[0]["devices"][0]["fan"] is None and "fan" not in frames[2]["devices"][0]
    for frame in frames:
        fleet.apply_frame("a", dict(frame, type="gpu", ts=time.time()))
    gpu0 = fleet.get("a").gpus[0]
    assert gpu0.sample["procs"] == [{"pid": child.pid, "mem": 64 * MIB}]
    assert not gpu0.lost and gpu0.error is None and gpu0.get("fan") is None and gpu0.util == 90
    assert gpu0.static["name"] == "NVIDIA GeForce RTX 3090" and fleet.get("a").gpu_driver


def test_process_memory_and_dead_pids(nvml_in_process, child, real):
    nvml_in_process.write(
        state(
            [
                device(0, util=90, processes=[{"pid": child.pid, "mem_mib": 1000}]),
                device(1, util=50, processes=[{"pid": child.pid, "mem_mib": 24}, {"pid": 1, "mem_mib": None}]),
            ]
        )
    )
    sampler = GpuSampler(real)
    frame = sampler.sample()
    assert frame["devices"][0]["procs"] == [{"pid": child.pid, "mem": 1000 * MIB}]
    # pid 1 here holds no /dev/nvidia1 and no other local process is left to hold it: NVML's pid is not shown
    # as a local process (it would be another one); NVML's "not available" memory is None
    assert {"pid": None, "mem": None, "nvml_pid": 1} in frame["devices"][1]["procs"]
    by_pid = sampler.memory_by_pid()
    assert by_pid == {child.pid: 1024 * MIB}
    assert frame["mapping"] == "fds" and frame["pid_ns"] is False
    child.kill()
    child.wait()
    # the driver stops listing a process that ended
    nvml_in_process.write(state([device(0, util=90), device(1, util=50, processes=[{"pid": 1, "mem_mib": None}])]))
    frames = [frame, sampler.sample()]
    assert _procs_view(frames)[0] == [] and frames[-1]["devices"][0]["procs"] == []
    assert child.pid not in sampler.memory_by_pid()
    assert "procs" not in sampler.sample()["devices"][0]  # and then not again while unchanged


def test_not_supported_fields_are_null(nvml_in_process):
    nvml_in_process.write(state([device(0, util=50, not_supported=["fan", "power_limit", "clocks"])]))
    frame = GpuSampler(REAL).sample()
    d0 = frame["devices"][0]
    assert d0["fan"] is None and d0["power_limit"] is None and d0["sm_clock"] is None and d0["mem_clock"] is None
    assert d0["util"] is not None and d0["power"] is not None and not d0["lost"]


def test_older_driver_falls_back_to_v2_processes(fake_nvml, child, gpu_dev):
    """A driver without nvmlDeviceGetComputeRunningProcesses_v3 (the symbol is missing, as before 510)."""
    fake_nvml.write(state([device(0, processes=[{"pid": child.pid, "mem_mib": 10}])]))
    old_driver = nvml.build_libnvml(no_v3=True)
    out = _in_subprocess(
        {"LD_LIBRARY_PATH": str(old_driver), nvml.STATE_ENV: str(fake_nvml.state_path)},
        (
            "import json\n"
            "from console.agent.sample.gpu import GpuSampler\n"
            "s = GpuSampler({'gpu': {'simulate': None, 'dev_dir': %r}})\n"
            "frames = [s.sample() for _ in range(3)]\n"
            "print(json.dumps({'frames': frames, 'by_pid': s.memory_by_pid(), 'missing': sorted(s.nvml._missing)}))\n"
        )
        % str(gpu_dev),
    )
    frames = out["frames"]
    assert frames[0]["devices"][0]["procs"] == [{"pid": child.pid, "mem": 10 * MIB}]
    assert _procs_view(frames)[0] == [{"pid": child.pid, "mem": 10 * MIB}]
    assert out["by_pid"] == {str(child.pid): 10 * MIB}  # still listed through the v2 fallback
    assert out["missing"] == ["nvmlDeviceGetComputeRunningProcesses_v3"]  # asked once, then not again


def test_gpu_lost_mid_run_others_go_on(nvml_in_process, monkeypatch):
    healthy = state([device(i, util=90) for i in range(3)])
    nvml_in_process.write(healthy)
    sampler = GpuSampler(REAL)
    assert all(not d["lost"] for d in sampler.sample()["devices"])  # full frame: lost is there, false
    nvml_in_process.write(state([device(0, util=90), device(1, util=90, error="GPU_IS_LOST"), device(2, util=90)]))
    frame = sampler.sample()
    d0, d1, d2 = frame["devices"]
    assert set(d1) == DYNAMIC | {"procs"}  # a lost device's record is complete, even in a small frame
    assert d1["lost"] and "GPU is lost" in d1["error"] and d1["util"] is None and d1["procs"] == []
    assert "lost" not in d0 and "lost" not in d2 and d0["util"] == 90 and d2["util"] == 90
    nvml_in_process.write(healthy)
    for _ in range(3):  # not retried every sample: NVML answers again, the device stays lost until retry_at
        assert sampler.sample()["devices"][1]["lost"]
    # the GPU comes back: retried after LOST_RETRY, and a full frame re-sends static fields
    monkeypatch.setattr(gpu_mod, "LOST_RETRY", 0.0)
    sampler.devices[1].retry_at = 0.0
    frame = sampler.sample()
    assert not frame["devices"][1]["lost"] and frame["full"] and frame["devices"][1]["uuid"]


def test_unknown_error_marks_device_lost(nvml_in_process):
    nvml_in_process.write(state([device(0, error="UNKNOWN"), device(1)]))
    frame = GpuSampler(REAL).sample()
    assert frame["devices"][0]["lost"] and "Unknown" in frame["devices"][0]["error"]
    assert not frame["devices"][1]["lost"]


def test_no_driver_single_frame(nvml_in_process):
    nvml_in_process.write(state([], init_error="DRIVER_NOT_LOADED"))
    sampler = GpuSampler(REAL)
    assert sampler.state == "no_gpu"
    first = sampler.sample()
    assert first["state"] == "no_gpu" and first["devices"] == [] and "Driver Not Loaded" in first["message"]
    assert [sampler.sample() for _ in range(5)] == [None] * 5
    assert sampler.memory_by_pid() == {}


def test_driver_appears_later(nvml_in_process):
    nvml_in_process.write(state([], init_error="DRIVER_NOT_LOADED"))
    sampler = GpuSampler(REAL)
    assert sampler.sample()["state"] == "no_gpu"
    nvml_in_process.write(state([device(0, util=10), device(1, util=10)]))
    sampler._next_init = 0.0
    frame = sampler.sample()
    assert frame["state"] == "ok" and frame["full"] and len(frame["devices"]) == 2


def test_real_pynvml_without_driver_is_no_gpu():
    """The real pynvml with no libnvidia-ml.so.1 at all (a fresh process, no fake): state no_gpu, once."""
    out = _in_subprocess(
        {},
        "import json\n"
        "from console.agent.sample.gpu import GpuSampler\n"
        "s = GpuSampler({'gpu': {'simulate': None}})\n"
        "frames = [s.sample(), s.sample()] if s.state != 'ok' else []\n"
        "print(json.dumps({'state': s.state, 'simulated': s.simulated, 'frames': frames}))\n",
    )
    if out["state"] == "ok":
        pytest.skip("this machine has an NVIDIA driver")
    assert out["state"] == "no_gpu" and not out["simulated"]
    first, second = out["frames"]
    assert first["state"] == "no_gpu" and first["message"]
    assert second is None


# -- which local process holds the GPU (console/agent/sample/gpumap.py) ----------------------------------------------

HOST_PIDS = (4194400, 4194401)  # above the default pid_max: no process here has them (a container's view)


def test_host_pids_mapped_one_to_one_via_device_fds(nvml_in_process, gpu_dev, real):
    """NVML reports pids no local process has (the host's): each device's single entry goes to the single local
    process holding its /dev/nvidiaN."""
    a = nvml.hold_devices(gpu_dev, [0], ["sleep", "60"])
    b = nvml.hold_devices(gpu_dev, [1], ["sleep", "60"])
    try:
        nvml_in_process.write(
            state(
                [
                    device(0, processes=[{"pid": HOST_PIDS[0], "mem_mib": 700}]),
                    device(1, processes=[{"pid": HOST_PIDS[1], "mem_mib": 300}]),
                ]
            )
        )
        sampler = GpuSampler(real)
        frame = sampler.sample()
        d0, d1 = frame["devices"]
        assert d0["procs"] == [{"pid": a.pid, "mem": 700 * MIB, "nvml_pid": HOST_PIDS[0]}]
        assert d1["procs"] == [{"pid": b.pid, "mem": 300 * MIB, "nvml_pid": HOST_PIDS[1]}]
        assert sampler.memory_by_pid() == {a.pid: 700 * MIB, b.pid: 300 * MIB}
        assert frame["mapping"] == "fds" and sampler.features()["gpu_mapping"] == "fds"
        assert "mapping" not in sampler.sample()  # slim frames carry it only when it changes
    finally:
        for p in (a, b):
            p.kill()
            p.wait()


def test_ambiguous_holders_are_a_group_and_no_pid_is_guessed(nvml_in_process, gpu_dev, real):
    """Two entries, two local holders of the same GPU: which is which is unknown, so one "≈" group entry (memory
    summed) and no per-process amount; a local process that merely has NVML's pid number gets nothing."""
    a = nvml.hold_devices(gpu_dev, [0], ["sleep", "60"])
    b = nvml.hold_devices(gpu_dev, [0], ["sleep", "60"])
    bystander = subprocess.Popen(["sleep", "60"])  # NVML's (host) pid happens to be its number; holds no GPU
    try:
        nvml_in_process.write(
            state(
                [
                    device(
                        0, processes=[{"pid": bystander.pid, "mem_mib": 500}, {"pid": HOST_PIDS[0], "mem_mib": 100}]
                    ),
                ]
            )
        )
        sampler = GpuSampler(real)
        [d0] = sampler.sample()["devices"]
        group = sorted([a.pid, b.pid])
        assert d0["procs"] == [
            {"pid": None, "mem": 600 * MIB, "group": group, "nvml_pids": sorted([bystander.pid, HOST_PIDS[0]])}
        ]
        by_pid = sampler.memory_by_pid()
        assert by_pid == {a.pid: None, b.pid: None} and bystander.pid not in by_pid
    finally:
        for p in (a, b, bystander):
            p.kill()
            p.wait()


def test_cuda_holder_preferred_over_an_nvml_only_one(nvml_in_process, gpu_dev, real):
    """nvidia-smi, nvtop (and this agent) hold /dev/nvidiaN but not /dev/nvidia-uvm, which every CUDA process holds."""
    cuda = nvml.hold_devices(gpu_dev, [0], ["sleep", "60"])
    smi = nvml.hold_devices(gpu_dev, [0], ["sleep", "60"], uvm=False)
    try:
        nvml_in_process.write(state([device(0, processes=[{"pid": HOST_PIDS[0], "mem_mib": 800}])]))
        sampler = GpuSampler(real)
        procs = sampler.sample()["devices"][0]["procs"]
        assert procs == [{"pid": cuda.pid, "mem": 800 * MIB, "nvml_pid": HOST_PIDS[0]}]
    finally:
        for p in (cuda, smi):
            p.kill()
            p.wait()


def test_new_gpu_process_found_after_the_first_scan(nvml_in_process, gpu_dev, real):
    """A GPU process starting later (NVML lists it once it holds the device) is found: the entries to explain
    changed, so every candidate is read again, processes already scanned included."""
    sampler = GpuSampler(real)
    other = [{"pid": HOST_PIDS[1], "mem_mib": 50}]  # another container's process on GPU 1: no holder here
    nvml_in_process.write(state([device(0), device(1, processes=other)]))
    first = sampler.sample()
    assert first["devices"][1]["procs"] == [{"pid": None, "mem": 50 * MIB, "nvml_pid": HOST_PIDS[1]}]
    scans = sampler.mapper.scans
    assert sampler.sample() and sampler.mapper.scans == scans  # nothing changed: no fd is read again
    late = nvml.hold_devices(gpu_dev, [0], ["sleep", "60"])  # a process appears and opens GPU 0
    try:
        time.sleep(0.2)
        nvml_in_process.write(
            state([device(0, processes=[{"pid": HOST_PIDS[0], "mem_mib": 10}]), device(1, processes=other)])
        )
        frame = sampler.sample()
        assert frame["devices"][0]["procs"] == [{"pid": late.pid, "mem": 10 * MIB, "nvml_pid": HOST_PIDS[0]}]
        assert sampler.memory_by_pid() == {late.pid: 10 * MIB}
    finally:
        late.kill()
        late.wait()


def test_mig_instances_profile_memory_processes(nvml_in_process, gpu_dev, real):
    """A MIG-enabled A100: its instances with profile, memory and (mapped) processes, not an error."""
    a = nvml.hold_devices(gpu_dev, [0], ["sleep", "60"])
    try:
        mig = {
            "instances": [
                {"profile": "3g.40gb", "mem_total_mib": 40192, "mem_used_mib": 9000,
                 "processes": [{"pid": HOST_PIDS[0], "mem_mib": 8000}]},
                {"profile": "1g.10gb", "mem_total_mib": 9856, "mem_used_mib": 13, "processes": []},
            ]
        }
        nvml_in_process.write(state([device(0, name="NVIDIA A100-SXM4-80GB", mem_total_mib=81920, mig=mig)]))
        sampler = GpuSampler(real)
        frame = sampler.sample()
        [d0] = frame["devices"]
        assert not d0["lost"] and d0["error"] is None and d0["util"] is None  # no utilization under MIG
        assert d0["procs"] == [{"pid": a.pid, "mem": 8000 * MIB, "nvml_pid": HOST_PIDS[0]}]
        i0, i1 = d0["mig"]
        assert (i0["index"], i0["profile"], i0["mem_total"], i0["mem_used"]) == (0, "3g.40gb", 40192 * MIB, 9000 * MIB)
        assert i0["procs"] == [{"pid": a.pid, "mem": 8000 * MIB, "nvml_pid": HOST_PIDS[0]}]
        assert i0["uuid"].startswith("MIG-") and (i1["profile"], i1["procs"]) == ("1g.10gb", [])
        assert "mig" not in sampler.sample()["devices"][0]  # unchanged: left out of slim frames
        mig["instances"][1]["mem_used_mib"] = 500
        nvml_in_process.write(state([device(0, name="NVIDIA A100-SXM4-80GB", mem_total_mib=81920, mig=mig)]))
        assert sampler.sample()["devices"][0]["mig"][1]["mem_used"] == 500 * MIB
    finally:
        a.kill()
        a.wait()


def test_driver_gone_mid_run_is_no_gpu_then_back(nvml_in_process, gpu_dev):
    nvml_in_process.write(state([device(0), device(1)]))
    sampler = GpuSampler({"gpu": nvml.gpu_config(gpu_dev, lost_retry=0.0)})
    assert sampler.sample()["state"] == "ok"
    nvml_in_process.write(state([device(0), device(1)], init_error="DRIVER_NOT_LOADED"))
    frame = sampler.sample()
    assert frame["state"] == "no_gpu" and frame["devices"] == [] and "Driver Not Loaded" in frame["message"]
    assert sampler.state == "no_gpu" and sampler.memory_by_pid() == {}
    nvml_in_process.write(state([device(0), device(1)]))  # the driver is back: NVML is initialized anew
    frame = sampler.sample()
    assert frame["state"] == "ok" and frame["full"] and len(frame["devices"]) == 2


def test_lost_retry_from_config(nvml_in_process, gpu_dev):
    nvml_in_process.write(state([device(0, error="GPU_IS_LOST")]))
    sampler = GpuSampler({"gpu": nvml.gpu_config(gpu_dev, lost_retry=0.0)})
    assert sampler.sample()["devices"][0]["lost"]
    nvml_in_process.write(state([device(0)]))
    frame = sampler.sample()
    assert not frame["devices"][0]["lost"] and frame["full"]


def test_gpu_missing_when_fewer_than_expected(nvml_in_process):
    """An instance rented with ``gpus = 2`` whose driver is gone, or with a GPU lost, is trouble with NVML's words."""
    from console.core.state import FleetState
    from console.inventory import Instance

    fleet = FleetState()
    fleet.add_instance(Instance(name="a", host="h", gpus=2))
    fleet.add_instance(Instance(name="b", host="h"))  # nothing expected: no GPU is not trouble
    for name in ("a", "b"):
        fleet.set_link_status(name, "connected")
    nvml_in_process.write(state([], init_error="DRIVER_NOT_LOADED"))
    frame = dict(GpuSampler(REAL).sample(), type="gpu", ts=time.time())
    for name in ("a", "b"):
        fleet.apply_frame(name, frame)
    a, b = fleet.get("a"), fleet.get("b")
    assert a.status == "failed"
    assert a.status_detail.startswith("gpu_missing: expected 2 GPUs, NVML: Driver Not Loaded")
    assert b.status != "failed"
    nvml_in_process.write(state([device(0), device(1, error="GPU_IS_LOST")]))
    frame = dict(GpuSampler(REAL).sample(), type="gpu", ts=time.time())
    fleet.apply_frame("a", frame)
    assert a.status == "failed" and a.status_detail.startswith("gpu_missing: expected 2 GPUs, found 1, NVML: GPU 1: ")
    nvml_in_process.write(state([device(0), device(1)]))
    fleet.apply_frame("a", dict(GpuSampler(REAL).sample(), type="gpu", ts=time.time()))
    assert a.status != "failed"


def test_gpu_tab_says_how_processes_were_mapped(nvml_in_process, gpu_dev, real):
    """The GPU tab: "mapped via /dev/nvidia fds", a group with "≈", MIG instances with their profile."""
    from console.core.state import FleetState
    from console.inventory import Instance
    from widgets.gpu_panel import gpu_detail

    a = nvml.hold_devices(gpu_dev, [0], ["sleep", "60"])
    b = nvml.hold_devices(gpu_dev, [0], ["sleep", "60"])
    try:
        mig = {"instances": [{"profile": "1g.10gb", "mem_total_mib": 9856, "mem_used_mib": 13, "processes": []}]}
        procs = [{"pid": HOST_PIDS[0], "mem_mib": 100}, {"pid": HOST_PIDS[1], "mem_mib": 200}]
        nvml_in_process.write(state([device(0, processes=procs), device(1, mig=mig)]))
        fleet = FleetState()
        fleet.add_instance(Instance(name="a", host="h"))
        fleet.set_link_status("a", "connected")
        fleet.apply_frame("a", dict(GpuSampler(real).sample(), type="gpu", ts=time.time()))
        text = gpu_detail(fleet.get("a"), width=100).plain
    finally:
        for p in (a, b):
            p.kill()
            p.wait()
    assert "mapped via /dev/nvidia fds" in text
    assert "≈ %d,%d (300" % tuple(sorted([a.pid, b.pid])) in text
    assert "MIG 1g.10gb" in text and "idle" in text


def test_summary_sends_what_the_overview_shows(nvml_in_process, monkeypatch):
    """At detail "summary" a busy 8-GPU host whose GPUs jitter one by one sends nothing until its overview moves:
    a GPU going idle, the mean util, the hottest GPU, the total power, a process starting."""
    from console.core.state import BUSY_UTIL, IDLE_UTIL

    assert (gpusummary.IDLE_UTIL, gpusummary.BUSY_UTIL) == (IDLE_UTIL, BUSY_UTIL)  # agent's = console's
    monkeypatch.setattr(gpusummary, "SUMMARY_EVERY", 3600.0)  # (the at-least-every-5-s frame is not what is tested)

    def fleet(utils, temps=None, power_w=None, procs=None):
        return state([device(i, util=u, temp=(temps or [70] * 8)[i], power_mw=int(1000 * (power_w or [300] * 8)[i]),
                             processes=(procs or {}).get(i, [])) for i, u in enumerate(utils)])

    busy = [90, 92, 88, 91, 89, 93, 90, 91]
    nvml_in_process.write(fleet(busy))
    sampler = GpuSampler(REAL)
    assert sampler.sample()["full"]
    sampler.summary = True
    assert sampler.sample() is None  # nothing moved
    jitter = [98, 84, 95, 83, 97, 88, 84, 91]  # each GPU moved 6-8 points, the mean under 1
    nvml_in_process.write(fleet(jitter, temps=[70, 71, 69, 71, 70, 70, 69, 70],
                                power_w=[320, 280, 318, 283, 315, 290, 300, 295]))
    assert sampler.sample() is None, "one GPU's jitter is not an overview change"

    def sent(utils, **kw):
        nvml_in_process.write(fleet(utils, **kw))
        frame = sampler.sample()
        return frame is not None and not frame["full"] and [d["util"] for d in frame["devices"]] == utils

    assert sent([98, 84, 95, 83, 97, 88, 84, 4]), "a GPU gone idle changes the header's busy/idle counts"
    assert sent([70, 60, 75, 63, 70, 66, 64, 4]), "the mean util moved by more than 5 points"
    assert sent([70, 60, 75, 63, 70, 66, 64, 4], temps=[70, 71, 69, 74, 70, 70, 69, 70]), "the hottest GPU: +3 C"
    assert sent([70, 60, 75, 63, 70, 66, 64, 4], temps=[70, 71, 69, 74, 70, 70, 69, 70],
                power_w=[400] * 8), "the total power moved by a third"
    assert not sent([70, 60, 75, 63, 70, 66, 64, 4], temps=[70, 71, 69, 74, 70, 70, 69, 70], power_w=[400] * 8)
    assert sent([70, 60, 75, 63, 70, 66, 64, 4], temps=[70, 71, 69, 74, 70, 70, 69, 70], power_w=[400] * 8,
                procs={2: [{"pid": 4242, "mem_mib": 100}]}), "a process started on a GPU"


def test_summary_compares_with_what_was_last_sent_also_across_full(nvml_in_process, monkeypatch):
    """Back at "summary" after a stretch at "full", a move is judged against the figures the console last got (the
    full level's), not the last summary's: a host that went from 20 % to 90 % while shown and drops back to 20 %
    once out of view says so at once."""
    monkeypatch.setattr(gpusummary, "SUMMARY_EVERY", 3600.0)

    def at(util):
        nvml_in_process.write(state([device(i, util=util) for i in range(4)]))
        return sampler.sample()

    nvml_in_process.write(state([device(i, util=20) for i in range(4)]))
    sampler = GpuSampler(REAL)
    assert sampler.sample()["full"]
    sampler.summary = True
    assert at(20) is None
    sampler.summary = False  # shown: every sample is sent
    assert at(90) is not None
    sampler.summary = True
    assert at(90) is None, "nothing moved since the last frame sent"
    frame = at(20)
    assert frame is not None and [d["util"] for d in frame["devices"]] == [20] * 4
