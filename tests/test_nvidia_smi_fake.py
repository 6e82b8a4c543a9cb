"""Agentless mode over a real sshd with the fake ``nvidia-smi`` (tests/fakes/bin) first on the session's PATH:
the commands the console really runs, the CSV the fake prints from the GPU state the test writes."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from console.link import SshLink
from tests.fakes import nvml
from tests.fakes.nvml import FakeNvml, device, state
from tests.recorder import Recorder
from tests.support.sshd import Sshd, ssh_instance

pytest_plugins = ["tests.fakes.conftest_plugin"]

MIB = 1024 * 1024


@pytest.fixture
def workload(gpu_dev: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A GPU workload: holds /dev/nvidia0 (of ``gpu_dev``, the config's ``gpu.dev_dir``) open, as CUDA does."""
    child = nvml.hold_devices(gpu_dev, [0], ["sleep", "120"])
    try:
        yield child
    finally:
        child.kill()
        child.wait()


def _agentless(server: Sshd, rec: Recorder, gpu_dev: Path | None = None) -> SshLink:
    """A link to a host whose python is unusable: the console runs nvidia-smi, /proc and logs itself."""
    extra = {"gpu": {"dev_dir": str(gpu_dev)}} if gpu_dev is not None else {}
    instance = ssh_instance(server, python="/nonexistent/python3", interval=0.5, agent_extra=extra)
    link = SshLink(instance, rec.on_frame, rec.on_status)
    link.start()
    return link


def _gpu_mem(rec: Recorder, pid: int) -> Any:
    found: dict[int, Any] = {}
    for frame in rec.of_type("procs"):
        for record in [*frame.get("procs", []), *frame.get("upsert", [])]:
            found[record["pid"]] = record.get("gpu_mem")
    return found.get(pid)


async def test_agentless_gpus_from_nvidia_smi_then_one_lost(
    fake_nvml: FakeNvml, nvml_sshd: Sshd, workload, gpu_dev: Path
) -> None:
    pid = workload.pid
    healthy = state(
        [
            device(0, processes=[{"pid": pid, "mem_mib": 500}]),
            device(1, name="NVIDIA A100-SXM4-80GB", mem_total_mib=81920, mem_used_mib=4, util=0, fan=None),
        ]
    )
    fake_nvml.write(healthy)
    rec = Recorder()
    link = _agentless(nvml_sshd, rec, gpu_dev)
    try:
        full = await rec.wait_for(lambda: next((f for f in rec.of_type("gpu") if f["full"]), None), what="gpu")
        hello = rec.of_type("hello")[0]
        assert hello["features"]["agentless"] is True and hello["features"]["gpu"] == "ok"
        await rec.wait_for(lambda: _gpu_mem(rec, pid) == 500 * MIB, what="the workload's GPU memory in procs")
        n = len(rec.of_type("gpu"))
        lost_state = state([device(0, processes=[{"pid": pid, "mem_mib": 500}]), device(1, error="GPU_IS_LOST")])
        fake_nvml.write(lost_state)
        lost = await rec.wait_for(
            lambda: next((f for f in rec.of_type("gpu")[n:] if f["devices"][1].get("lost")), None),
            what="GPU 1 lost",
        )
    finally:
        await link.stop()
    assert full["state"] == "ok" and full["driver"] == "550.54.15" and full["simulated"] is False
    d0, d1 = full["devices"]
    assert d0["name"] == "NVIDIA GeForce RTX 3090" and d0["uuid"] == "GPU-00000000-1111-2222-3333-444455556666"
    assert (d0["util"], d0["mem_util"], d0["temp"], d0["fan"]) == (97, 40, 71, 65)
    assert d0["mem_used"] == 1200 * MIB and d0["mem_total"] == 24576 * MIB
    assert d0["power"] == 310.0 and d0["power_limit"] == 350.0 and (d0["sm_clock"], d0["mem_clock"]) == (1695, 9751)
    assert d0["procs"] == [{"pid": pid, "mem": 500 * MIB}] and not d0["lost"]  # its pid checked: it holds nvidia0
    assert full["pid_ns"] is False and full["mapping"] == "pid"
    on_gpu = {r["pid"] for f in rec.of_type("procs") for r in [*f.get("procs", []), *f.get("upsert", [])]
              if r.get("gpu_mem")}
    assert on_gpu == {pid}  # and on no other process
    assert d1["name"] == "NVIDIA A100-SXM4-80GB" and d1["util"] == 0 and d1["fan"] is None
    assert d1["mem_total"] == 81920 * MIB and d1["procs"] == []
    gone = lost["devices"][1]
    assert "GPU is lost" in gone["error"] and gone["util"] is None and gone["procs"] == []
    assert not lost["devices"][0].get("lost")


async def test_agentless_without_driver_is_no_gpu(fake_nvml: FakeNvml, nvml_sshd: Sshd) -> None:
    fake_nvml.write(state([], init_error="DRIVER_NOT_LOADED"))
    rec = Recorder()
    link = _agentless(nvml_sshd, rec)
    try:
        frame = await rec.wait_for(lambda: next(iter(rec.of_type("gpu")), None), what="a gpu frame")
    finally:
        await link.stop()
    assert frame["state"] == "no_gpu" and frame["devices"] == []
    assert "couldn't communicate with the NVIDIA driver" in frame["message"]


async def test_agentless_host_pid_mapped_via_device_fds(fake_nvml: FakeNvml, nvml_sshd: Sshd, gpu_dev: Path) -> None:
    """nvidia-smi reports a pid no process here has (a container's view of the host's): the memory goes to the one
    process holding /dev/nvidia1, GPU 1's minor as ``nvidia-smi -q`` gives it."""
    host_pid = 4194400  # above the default pid_max
    fake_nvml.write(state([device(0), device(1, processes=[{"pid": host_pid, "mem_mib": 900}])]))
    child = nvml.hold_devices(gpu_dev, [1], ["sleep", "120"])
    rec = Recorder()
    link = _agentless(nvml_sshd, rec, gpu_dev)
    try:
        await rec.wait_for(lambda: _gpu_mem(rec, child.pid) == 900 * MIB, what="the GPU memory on the holder")
        frame = next(f for f in reversed(rec.of_type("gpu")) if "procs" in f["devices"][1])
    finally:
        await link.stop()
        child.kill()
        child.wait()
    assert frame["devices"][1]["procs"] == [{"pid": child.pid, "mem": 900 * MIB, "nvml_pid": host_pid}]
    assert rec.of_type("hello")[0]["features"]["gpu_mapping"] in ("pid", "fds")
    assert next(f for f in rec.of_type("gpu") if f["full"])["mapping"] == "fds"
