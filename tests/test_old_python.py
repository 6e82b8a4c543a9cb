"""The agent on the oldest python it claims (3.8: Ubuntu 20.04's, the base of many CUDA images) and 3.9, over a
real sshd, with its bundled nvidia-ml-py against the fake ``libnvidia-ml.so.1``: GPUs, processes and a diagnosis,
as on such a rented host. Skipped where no such python is installed (pyenv's or the system's)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from console.link import SshLink
from tests.fakes.nvml import FakeNvml
from tests.recorder import Recorder
from tests.support.sshd import Sshd, ssh_instance

pytest_plugins = ["tests.fakes.conftest_plugin"]


def _python(version: str) -> str | None:
    pyenv = sorted(Path("~/.pyenv/versions").expanduser().glob(version + ".*/bin/python" + version))
    return str(pyenv[-1]) if pyenv else shutil.which("python" + version)


@pytest.mark.parametrize("version", ["3.8", "3.9"])
async def test_the_agent_runs_on_an_old_python(version: str, fake_nvml: FakeNvml, nvml_sshd: Sshd) -> None:
    python = _python(version)
    if python is None:
        pytest.skip(f"no python{version} here")
    rec = Recorder()
    link = SshLink(ssh_instance(nvml_sshd, python=python, agent_extra={"interval": 0.5, "heartbeat_interval": 0.5}),
                   rec.on_frame, rec.on_status)
    link.start()
    try:
        await rec.wait_for(lambda: rec.of_type("hello"), timeout=60, what="the agent's hello")
        hello = rec.of_type("hello")[0]
        assert hello["agent_version"] != "agentless" and hello["python"].startswith(version + "."), hello
        assert hello["features"]["gpu"] == "ok"
        gpu = await rec.wait_for(lambda: [f for f in rec.of_type("gpu") if f.get("devices")], what="GPU devices")
        assert len(gpu[0]["devices"]) == 2 and gpu[0]["devices"][0]["name"]
        await rec.wait_for(lambda: rec.of_type("procs"), what="the process table")
        answer = await link.request("diagnose", timeout=30)
        assert answer["ok"], answer
        assert answer["data"]["verdict"]["code"]
        plan = await link.request("restart_plan", timeout=10)
        assert plan["ok"], plan
    finally:
        await link.stop()
