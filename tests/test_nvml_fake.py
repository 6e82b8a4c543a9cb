"""The agent's real nvidia-ml-py path over a real sshd, against the fake ``libnvidia-ml.so.1`` (tests/fakes).

The agent is uploaded and started over SSH as on any host; the only fake is the NVIDIA library its bundled
pynvml loads through ``LD_LIBRARY_PATH`` (set by sshd for the session), answering from a JSON file the test
rewrites while the agent runs.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from console.link import SshLink
from tests.fakes import nvml
from tests.fakes.nvml import FakeNvml
from tests.recorder import Recorder
from tests.support.sshd import Sshd, ssh_instance

pytest_plugins = ["tests.fakes.conftest_plugin"]

MIB = 1024 * 1024
FAST = {"heartbeat_interval": 0.5, "interval": 0.5}


async def test_sshd_env_reaches_remote_commands(tmp_path: Path) -> None:
    """``Sshd(env=...)`` is what a command started over SSH sees (how fakes get on the agent's paths)."""
    env = {
        "LD_LIBRARY_PATH": str(tmp_path / "fake lib"),
        "FAKE_NVML_STATE": "/x.json",
        "PATH": f"/fakebin:{os.defpath}",
    }
    server = Sshd(tmp_path / "sshd", env=env)
    server.start()
    try:
        async with asyncssh.connect(
            "127.0.0.1",
            port=server.port,
            username=server.user,
            client_keys=[str(server.client_key_path)],
            known_hosts=str(server.known_hosts),
        ) as conn:
            script = "import os; print(os.environ['LD_LIBRARY_PATH']); print(os.environ['FAKE_NVML_STATE'])"
            result = await conn.run(f'python3 -c "{script}"; echo "$PATH"', check=True)
    finally:
        server.stop()
    lines = str(result.stdout).splitlines()
    assert lines[:2] == [env["LD_LIBRARY_PATH"], "/x.json"]
    assert "/fakebin" in lines[2].split(":")  # a login's rc files may prepend to PATH, never drop it


# -- helpers ---------------------------------------------------------------------------------------------------


@pytest.fixture
def workload(gpu_dev: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A real process for NVML to report: it holds /dev/nvidia0 and /dev/nvidia1 of ``gpu_dev`` (the agent's
    ``gpu.dev_dir``) open, as a CUDA process does, so the agent takes NVML's pid as this process."""
    child = nvml.hold_devices(gpu_dev, [0, 1], ["sleep", "120"])
    try:
        yield child
    finally:
        child.kill()
        child.wait()


def gpu_view(rec: Recorder) -> dict[int, dict[str, Any]]:
    """Per device index, what a consumer knows after every gpu frame so far (small frames merged in)."""
    view: dict[int, dict[str, Any]] = {}
    for frame in rec.of_type("gpu"):
        if frame["full"]:
            view = {}
        for dev in frame["devices"]:
            merged = view.setdefault(dev["index"], {})
            if not dev.get("lost") and "lost" not in dev:
                merged.update(lost=False, error=None)
            merged.update(dev)
    return view


def gpu_mem_of(rec: Recorder, pid: int) -> Any:
    """The latest ``gpu_mem`` the procs frames gave ``pid`` (KeyError if never listed)."""
    found: dict[int, Any] = {}
    for frame in rec.of_type("procs"):
        for record in [*frame.get("procs", []), *frame.get("upsert", [])]:
            found[record["pid"]] = record.get("gpu_mem")
    return found[pid]


async def run_agent(server: Sshd, rec: Recorder, gpu_dev: Path | None = None, **gpu: Any) -> SshLink:
    extra: dict[str, Any] = dict(FAST)
    if gpu_dev is not None or gpu:
        extra["gpu"] = {**({"dev_dir": str(gpu_dev)} if gpu_dev is not None else {}), **gpu}
    link = SshLink(ssh_instance(server, agent_extra=extra), rec.on_frame, rec.on_status)
    link.start()
    await rec.wait_for(lambda: rec.of_type("hello"), timeout=60, what="the agent's hello")
    return link


# -- through the agent -----------------------------------------------------------------------------------------


async def test_healthy_two_gpus_every_field(fake_nvml: FakeNvml, nvml_sshd: Sshd, workload, gpu_dev: Path) -> None:
    pid = workload.pid
    fake_nvml.write(
        nvml.state(
            [
                nvml.device(0, processes=[{"pid": pid, "mem_mib": 500}]),
                nvml.device(
                    1,
                    name="NVIDIA A100-SXM4-80GB",
                    mem_total_mib=81920,
                    mem_used_mib=300,
                    util=0,
                    mem_util=1,
                    temp=35,
                    power_mw=61500,
                    power_limit_mw=400000,
                    sm_clock=210,
                    mem_clock=1593,
                    fan=None,
                    processes=[{"pid": pid, "mem_mib": 24}],
                ),
            ]
        )
    )
    rec = Recorder()
    link = await run_agent(nvml_sshd, rec, gpu_dev)
    try:
        hello = rec.of_type("hello")[0]
        assert hello["features"]["gpu"] == "ok" and hello["features"]["simulated_gpu"] is False
        full = await rec.wait_for(lambda: next((f for f in rec.of_type("gpu") if f["full"]), None), what="gpu frame")
        await rec.wait_for(lambda: len(rec.of_type("gpu")) >= 3, what="small gpu frames")
        await rec.wait_for(lambda: gpu_mem_of_or_none(rec, pid) == 524 * MIB, what="gpu memory on the workload")
    finally:
        await link.stop()
    assert full["state"] == "ok" and full["driver"] == "550.54.15" and full["simulated"] is False
    assert full["pid_ns"] is False and full["mapping"] == "pid"  # NVML's pid is the workload's, checked
    d0, d1 = full["devices"]
    assert d0 == {
        "index": 0,
        "lost": False,
        "error": None,
        "name": "NVIDIA GeForce RTX 3090",
        "uuid": "GPU-00000000-1111-2222-3333-444455556666",
        "mem_total": 24576 * MIB,
        "mem_used": 1200 * MIB,
        "power_limit": 350.0,
        "util": 97,
        "mem_util": 40,
        "temp": 71,
        "power": 310.0,
        "sm_clock": 1695,
        "mem_clock": 9751,
        "fan": 65,
        "procs": [{"pid": pid, "mem": 500 * MIB}],
    } | {k: v for k, v in d0.items() if k not in _KNOWN}  # fields added later by the agent are not judged here
    assert d1["name"] == "NVIDIA A100-SXM4-80GB" and d1["uuid"] == "GPU-00000001-1111-2222-3333-444455556666"
    assert d1["mem_total"] == 81920 * MIB and d1["mem_used"] == 300 * MIB and d1["util"] == 0
    assert d1["power"] == 61.5 and d1["power_limit"] == 400.0 and d1["fan"] is None and d1["temp"] == 35
    assert d1["procs"] == [{"pid": pid, "mem": 24 * MIB}]
    view = gpu_view(rec)
    assert view[0]["util"] == 97 and view[1]["util"] == 0 and not view[0]["lost"]
    assert only_gpu_process(rec) == pid  # no other process is given GPU memory


_KNOWN = {
    "index",
    "lost",
    "error",
    "name",
    "uuid",
    "mem_total",
    "mem_used",
    "power_limit",
    "util",
    "mem_util",
    "temp",
    "power",
    "sm_clock",
    "mem_clock",
    "fan",
    "procs",
}


def only_gpu_process(rec: Recorder) -> int | None:
    """The one pid the procs frames give GPU memory (AssertionError when several)."""
    found: dict[int, Any] = {}
    for frame in rec.of_type("procs"):
        for record in [*frame.get("procs", []), *frame.get("upsert", [])]:
            found[record["pid"]] = record.get("gpu_mem")
    on_gpu = [pid for pid, mem in found.items() if mem]
    assert len(on_gpu) <= 1, on_gpu
    return on_gpu[0] if on_gpu else None


def gpu_mem_of_or_none(rec: Recorder, pid: int) -> Any:
    try:
        return gpu_mem_of(rec, pid)
    except KeyError:
        return None


async def test_gpu_lost_mid_run_then_back_in_full(fake_nvml: FakeNvml, nvml_sshd: Sshd) -> None:
    healthy = nvml.state([nvml.device(0), nvml.device(1, util=55)])
    fake_nvml.write(healthy)
    rec = Recorder()
    link = await run_agent(nvml_sshd, rec, lost_retry=1.0)  # a lost device is probed again after 1 s (not 30)
    try:
        await rec.wait_for(lambda: gpu_view(rec).get(1, {}).get("util") == 55, what="GPU 1 busy")
        lost_state = nvml.state([nvml.device(0, util=12), nvml.device(1, util=55, error="GPU_IS_LOST")])
        fake_nvml.write(lost_state)
        await rec.wait_for(lambda: gpu_view(rec)[1]["lost"], what="GPU 1 lost")
        lost = next(f for f in rec.of_type("gpu") if any(d.get("lost") for d in f["devices"]))
        d1 = next(d for d in lost["devices"] if d["index"] == 1)
        assert "GPU is lost" in d1["error"] and d1["util"] is None and d1["mem_used"] is None and d1["procs"] == []
        await rec.wait_for(lambda: gpu_view(rec)[0]["util"] == 12, what="GPU 0 still sampled")
        n_before = len(rec.of_type("gpu"))
        fake_nvml.write(healthy)  # back; the agent probes a lost device again after gpu.lost_retry
        back = await rec.wait_for(
            lambda: next((f for f in rec.of_type("gpu")[n_before:] if not f["devices"][1].get("lost")), None),
            timeout=20,
            what="GPU 1 back",
        )
    finally:
        await link.stop()
    assert back["full"]  # a device coming back re-sends every static field
    assert back["devices"][1]["uuid"] == "GPU-00000001-1111-2222-3333-444455556666"
    assert back["devices"][1]["util"] == 55 and back["devices"][1]["mem_total"] == 24576 * MIB


async def test_driver_not_loaded_is_no_gpu(fake_nvml: FakeNvml, nvml_sshd: Sshd) -> None:
    fake_nvml.write(nvml.state([], init_error="DRIVER_NOT_LOADED"))
    rec = Recorder()
    link = await run_agent(nvml_sshd, rec)
    try:
        frame = await rec.wait_for(lambda: next(iter(rec.of_type("gpu")), None), what="a gpu frame")
    finally:
        await link.stop()
    assert rec.of_type("hello")[0]["features"]["gpu"] == "no_gpu"
    assert frame["state"] == "no_gpu" and frame["devices"] == [] and "Driver Not Loaded" in frame["message"]


async def test_not_supported_fields_are_null(fake_nvml: FakeNvml, nvml_sshd: Sshd) -> None:
    dev = nvml.device(0, not_supported=["fan", "power", "power_limit", "clocks", "temp"])
    fake_nvml.write(nvml.state([dev]))
    rec = Recorder()
    link = await run_agent(nvml_sshd, rec)
    try:
        full = await rec.wait_for(lambda: next((f for f in rec.of_type("gpu") if f["full"]), None), what="gpu")
        await rec.wait_for(lambda: len(rec.of_type("gpu")) >= 3, what="small gpu frames")
    finally:
        await link.stop()
    d0 = full["devices"][0]
    assert [d0[k] for k in ("fan", "power", "power_limit", "sm_clock", "mem_clock", "temp")] == [None] * 6
    assert d0["util"] == 97 and d0["mem_used"] == 1200 * MIB and not d0["lost"]
    small = rec.of_type("gpu")[-1]["devices"][0]
    assert "fan" not in small and small["util"] == 97  # nulls stay out of small frames


async def test_driver_without_v3_processes_falls_back_to_v2(
    fake_nvml: FakeNvml, tmp_path: Path, workload, gpu_dev: Path
) -> None:
    """A driver older than nvmlDeviceGetComputeRunningProcesses_v3 (no such symbol): v2 lists the processes."""
    pid = workload.pid
    fake_nvml.write(nvml.state([nvml.device(0, processes=[{"pid": pid, "mem_mib": 10}])]))
    old_driver = nvml.build_libnvml(no_v3=True)
    server = Sshd(tmp_path / "sshd-old", env=nvml.remote_env(old_driver, fake_nvml.state_path))
    server.start()
    rec = Recorder()
    try:
        link = await run_agent(server, rec, gpu_dev)
        try:
            frames = await rec.wait_for(lambda: len(rec.of_type("gpu")) >= 3 and rec.of_type("gpu"), what="gpu")
            await rec.wait_for(lambda: gpu_mem_of_or_none(rec, pid) == 10 * MIB, what="gpu memory via v2")
        finally:
            await link.stop()
    finally:
        server.stop()
    assert frames[0]["devices"][0]["procs"] == [{"pid": pid, "mem": 10 * MIB}]
    assert gpu_view(rec)[0]["procs"] == [{"pid": pid, "mem": 10 * MIB}]


# -- the fake library itself, through the real pynvml in this process --------------------------------------


def test_fake_library_mig_and_errors_through_pynvml(nvml_in_process: FakeNvml) -> None:
    """What a MIG-aware agent will call: MIG mode, instance handles, their memory and processes."""
    import pynvml

    mig = {
        "instances": [
            {
                "profile": "1g.10gb",
                "mem_total_mib": 9856,
                "mem_used_mib": 100,
                "processes": [{"pid": 4242, "mem_mib": 90}],
            }
        ]
    }
    nvml_in_process.write(nvml.state([nvml.device(0, name="NVIDIA A100-SXM4-80GB", mig=mig), nvml.device(1)]))
    pynvml.nvmlInit()
    try:
        a100, rtx = pynvml.nvmlDeviceGetHandleByIndex(0), pynvml.nvmlDeviceGetHandleByIndex(1)
        assert pynvml.nvmlDeviceGetMigMode(a100) == [1, 1] and pynvml.nvmlDeviceGetMigMode(rtx) == [0, 0]
        assert pynvml.nvmlDeviceGetMaxMigDeviceCount(a100) == 7
        inst = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(a100, 0)
        assert pynvml.nvmlDeviceIsMigDeviceHandle(inst) and not pynvml.nvmlDeviceIsMigDeviceHandle(a100)
        assert pynvml.nvmlDeviceGetName(inst) == "NVIDIA A100-SXM4-80GB MIG 1g.10gb"
        assert pynvml.nvmlDeviceGetMemoryInfo(inst).total == 9856 * MIB
        [proc] = pynvml.nvmlDeviceGetComputeRunningProcesses(inst)
        assert (proc.pid, proc.usedGpuMemory, proc.gpuInstanceId) == (4242, 90 * MIB, 1)
        with pytest.raises(pynvml.NVMLError_NotFound):
            pynvml.nvmlDeviceGetMigDeviceHandleByIndex(a100, 1)
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceGetUtilizationRates(a100)  # as real NVML answers with MIG enabled
        assert pynvml.nvmlDeviceGetMinorNumber(rtx) == 1
        nvml_in_process.write(nvml.state([nvml.device(0, error="GPU_IS_LOST"), nvml.device(1)]))
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            pynvml.nvmlDeviceGetMemoryInfo(a100)
        assert pynvml.nvmlDeviceGetUUID(a100)  # static identity still answers
        nvml_in_process.write(nvml.state([nvml.device(0)]))
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            pynvml.nvmlDeviceGetTemperature(rtx, 0)  # gone from the bus
    finally:
        pynvml.nvmlShutdown()
