"""A rented GPU box as it really is: the agent (or agentless mode) in a container's own PID namespace, NVML
reporting the host's pids.

A real sshd and a GPU "workload" run in a new PID namespace (``unshare --pid --fork --mount-proc``, as root). The
workload holds the fake ``/dev/nvidia0`` (a file in the temporary device directory the agent config names as
``gpu.dev_dir``); the fake NVML library (and fake nvidia-smi) report it under its *host* pid, which means nothing
inside the namespace. The console, a ``FleetState`` fed by the real link, must show the GPU memory on the
workload's pid as the namespace numbers it, and on no other process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from console.core.state import FleetState
from console.inventory import Instance
from console.link import SshLink
from tests.fakes import nvml
from tests.fakes.nvml import FakeNvml
from tests.recorder import Recorder
from tests.support.sshd import Sshd, find_sshd, ssh_instance
from tests.support.wait import until_sync

pytest_plugins = ["tests.fakes.conftest_plugin"]

MIB = 1024 * 1024
WORKLOAD = "3141"  # `sleep 3141`: the GPU workload, found by its command line
BYSTANDER = "2718"  # `sleep 2718`: a process in the namespace that holds no GPU


def _unshare_works() -> str | None:
    """Why the test cannot run here (None: it can)."""
    if os.geteuid() != 0:
        return "needs root (unshare --pid --mount-proc)"
    if shutil.which("unshare") is None:
        return "no unshare(1)"
    if find_sshd() is None:
        return "no sshd"
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, text=True, timeout=30
    )
    if probe.returncode != 0:
        return f"unshare --pid --mount-proc not permitted here: {probe.stderr.strip()[:200]}"
    return None


class NamespacedSshd(Sshd):
    """An sshd that is the init of a new PID namespace (with its own /proc), with a GPU workload and a bystander
    started beside it; ``stop()`` kills the lot (the namespace dies with its init)."""

    def __init__(self, workdir: Path, env: dict[str, str], dev_dir: Path) -> None:
        super().__init__(workdir, env=env)
        self.dev_dir = dev_dir

    def start(self) -> None:
        sshd = find_sshd()
        assert sshd is not None
        held = nvml.device_paths(self.dev_dir, [0])
        script = (
            f'sleep {WORKLOAD} 3<"$1" 4<"$2" 5<"$3" & sleep {BYSTANDER} & '
            'exec "$4" -D -e -f "$5"'
        )
        self.proc = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "sh", "-c", script, "sh",
             *map(str, held), sshd, str(self.config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(self.dir / "sshd.log", "ab"),  # noqa: SIM115 (closed by the child's exit)
            start_new_session=True,
        )
        self.wait_listening()


def ns_pids(argv_tail: str) -> tuple[int, int]:
    """(host pid, namespace pid) of the process running ``sleep ARGV_TAIL`` in a nested PID namespace."""

    def found() -> tuple[int, int] | None:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if (entry / "cmdline").read_bytes() != f"sleep\0{argv_tail}\0".encode():
                    continue
                status = (entry / "status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("NSpid:") and len(line.split()) == 3:
                    return int(line.split()[1]), int(line.split()[2])
        return None

    return until_sync(found, 10, f"`sleep {argv_tail}` in a nested PID namespace", interval=0.05)


@pytest.fixture
def namespace_host(fake_nvml: FakeNvml, gpu_dev: Path, tmp_path: Path):
    reason = _unshare_works()
    if reason:
        pytest.skip(reason)
    server = NamespacedSshd(tmp_path / "sshd-ns", env=fake_nvml.env, dev_dir=gpu_dev)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("mode", ["agent", "agentless"])
async def test_gpu_memory_on_the_right_process_in_a_pid_namespace(
    fake_nvml: FakeNvml, gpu_dev: Path, namespace_host: Sshd, mode: str
) -> None:
    host_pid, ns_pid = ns_pids(WORKLOAD)
    bystander_host, bystander_ns = ns_pids(BYSTANDER)
    assert host_pid != ns_pid
    # NVML's answer, as a driver gives it to a container: the host's pids (GPU 1 idle)
    fake_nvml.write(nvml.state([nvml.device(0, processes=[{"pid": host_pid, "mem_mib": 7000}]), nvml.device(1)]))
    extra = {"interval": 0.5, "heartbeat_interval": 0.5, "gpu": {"dev_dir": str(gpu_dev)}}
    fields: dict[str, object] = {"agent_extra": extra}
    if mode == "agentless":
        fields.update(python="/nonexistent/python3", interval=0.5)
    instance: Instance = ssh_instance(namespace_host, **fields)
    fleet = FleetState()
    fleet.add_instance(instance)
    rec = Recorder()

    def on_frame(name: str, frame: dict) -> None:
        rec.on_frame(name, frame)
        fleet.apply_frame(name, frame)

    def on_status(name: str, status: str, detail: str) -> None:
        rec.on_status(name, status, detail)
        fleet.set_link_status(name, status, detail)

    link = SshLink(instance, on_frame, on_status)
    link.start()
    inst = fleet.get(instance.name)
    assert inst is not None
    try:
        await rec.wait_for(
            lambda: (inst.procs.get(ns_pid) or {}).get("gpu_mem") == 7000 * MIB, timeout=60,
            what="the workload's GPU memory on its namespace pid",
        )
        await rec.wait_for(lambda: bystander_ns in inst.procs, what="the bystander listed")
    finally:
        await link.stop()
    on_gpu = {pid: rec_["gpu_mem"] for pid, rec_ in inst.procs.items() if rec_.get("gpu_mem")}
    assert on_gpu == {ns_pid: 7000 * MIB}  # on the right process, and on no other
    assert host_pid not in inst.procs or not inst.procs[host_pid].get("gpu_mem")
    procs = inst.gpus[0].sample["procs"]
    assert procs == [{"pid": ns_pid, "mem": 7000 * MIB, "nvml_pid": host_pid}]
    assert inst.gpus[1].sample.get("procs") == []
    assert inst.procs[ns_pid]["cmdline"] == f"sleep {WORKLOAD}"
    full = next(f for f in rec.of_type("gpu") if f["full"])
    assert full["pid_ns"] is True and full["mapping"] == "fds"
    assert bystander_host != bystander_ns
