"""A host whose login shell prints on stdout before the command (an ``echo`` in ``~/.bashrc``, a welcome text,
conda's activation message) is watched all the same: the lines before the agent's hello are the shell's.

A real sshd whose ``ForceCommand`` prints a banner, then runs the command, as such a shell does."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.recorder import watched_link
from tests.support.sshd import Sshd, ssh_instance

ROOT = Path(__file__).resolve().parents[1]
BANNER = "Welcome to your vast.ai container! Have fun."


@pytest.fixture(scope="module")
def noisy_sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sshd]:
    server = Sshd(tmp_path_factory.mktemp("noisy") / "sshd", login_banner=BANNER)
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_the_agent_connects_through_a_login_banner_and_answers(noisy_sshd: Sshd, tmp_path: Path) -> None:
    log = tmp_path / "bench.log"
    log.write_text("step 1\n")
    link, rec, state = watched_link(ssh_instance(noisy_sshd, logs=(str(log),), interval=0.5))
    link.start()
    try:
        await rec.wait_for(lambda: link.status == "connected", what="connected", timeout=40)
        assert rec.of_type("hello")[0]["agent_version"] != "agentless"  # the real agent, not the fallback
        await rec.wait_for(lambda: rec.of_type("log"), what="the log's backlog")
        assert not [f for f in rec.of_type("error") if "bad frame" in f.get("message", "")]
        answer = await link.request("ping", timeout=10)
        assert answer["ok"]
        inst = state.get("box1")
        assert inst is not None and inst.status not in ("unreachable", "needs_action")
    finally:
        await link.stop()


async def test_agentless_mode_reads_its_polls_through_a_login_banner(noisy_sshd: Sshd) -> None:
    sleeper = subprocess.Popen(["sleep", "600.%d" % (os.getpid() % 1000)])
    link, rec, state = watched_link(ssh_instance(noisy_sshd, python="/nonexistent/bin/python3", interval=0.5))
    link.start()
    try:
        await rec.wait_for(lambda: link.status == "connected", what="connected", timeout=40)
        assert rec.of_type("hello")[0]["agent_version"] == "agentless"
        inst = state.get("box1")
        assert inst is not None
        found = await rec.wait_for(lambda: inst.procs.get(sleeper.pid), what="the sleep in procs")
        assert found["name"] == "sleep"
    finally:
        sleeper.kill()
        sleeper.wait()
        await link.stop()


def test_diagnose_on_the_command_line_through_a_login_banner(noisy_sshd: Sshd, tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(
        "[[instance]]\n"
        'name = "box1"\nhost = "127.0.0.1"\n'
        f'port = {noisy_sshd.port}\nuser = "{noisy_sshd.user}"\nkey = "{noisy_sshd.client_key_path}"\n'
        f'known_hosts = "{noisy_sshd.known_hosts}"\nwatch_dirs = ["{tmp_path}"]\n'
    )
    env = dict(os.environ, FLEET_CONSOLE_STATE_DIR=str(tmp_path / "state"), PYTHONPATH=str(ROOT))
    t0 = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "console", "diagnose", "box1", "--fleet", str(fleet)],
        capture_output=True, text=True, timeout=90, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("box1: healthy") and "Traceback" not in result.stderr
    assert time.monotonic() - t0 < 30
