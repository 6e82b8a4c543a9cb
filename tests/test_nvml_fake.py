"""The agent's real nvidia-ml-py path over a real sshd, against the fake ``libnvidia-ml.so.1`` (tests/fakes)."""

from __future__ import annotations

import os
from pathlib import Path

import asyncssh

from tests.sshd import Sshd


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
