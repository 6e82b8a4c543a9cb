"""``s`` in a real terminal: the console suspends, ``ssh`` logs in to a real sshd with the instance's settings,
the operator runs a command and exits, and the console comes back with its grid; ``y`` copies the ssh command
through OSC 52 (a tmux paste buffer); both are in the audit log, also under ``--read-only``."""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.sshd import Sshd
from tests.support.tmux import Tmux
from tests.support.wait import until_sync


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    term = Tmux(80, 24)
    try:
        yield term
    finally:
        term.close()


def test_shell_into_a_real_sshd_and_back(tmux: Tmux, sshd: Sshd, tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(
        f"""\
[[instance]]
name = "gpu-box"
host = "127.0.0.1"
port = {sshd.port}
user = "{sshd.user}"
key = "{sshd.client_key_path}"
known_hosts = "{sshd.known_hosts}"
watch_dirs = ["{tmp_path}"]
"""
    )
    state = tmp_path / "state"
    env = {"FLEET_CONSOLE_CONFIG_DIR": str(tmp_path / "cfg"), "FLEET_CONSOLE_STATE_DIR": str(state),
           "PS1": "$ ", "ENV": ""}
    tmux.start([sys.executable, "-m", "console", "--fleet", str(fleet), "--theme", "dark", "--read-only"], env=env)
    tmux._tmux("set-option", "-g", "set-clipboard", "on", check=False)  # OSC 52 fills a paste buffer
    tmux.wait_for(lambda s: "gpu-box" in s and "no GPU" in s, timeout=40, what="the grid with gpu-box connected")

    tmux.keys("y")

    def ssh_in_buffer() -> str | None:  # tmux's paste buffer, once y put the ssh command there
        buffer = tmux._tmux("show-buffer", check=False).stdout
        return buffer if "ssh" in buffer else None

    copied = until_sync(ssh_in_buffer, 10, "the ssh command in tmux's buffer", interval=0.2)
    argv = shlex.split(copied)
    assert argv[0] == "ssh" and argv[-1] == "127.0.0.1" and str(sshd.port) in argv, copied
    assert f"UserKnownHostsFile={sshd.known_hosts}" in argv and "StrictHostKeyChecking=yes" in argv

    tmux.keys("s")
    tmux.wait_for(lambda s: "gpu-box" not in s, timeout=20, what="the console suspended (its grid gone)")
    time.sleep(1.0)  # the remote shell's prompt
    tmux.keys("echo hello-from-", "shell", "Enter")
    tmux.wait_for(lambda s: any(line.strip() == "hello-from-shell" for line in s.splitlines()), timeout=20,
                  what="the command's output in the remote shell")
    tmux.keys("exit", "Enter")
    screen = tmux.wait_for(lambda s: "gpu-box" in s and "Quit" in s.splitlines()[-1], timeout=20,
                           what="the console back with its grid")
    assert "hello-from-shell" not in screen
    assert "READ-ONLY" in screen
    tmux.wait_for(lambda s: "shell closed" in s, timeout=10, what="the shell's end said")

    records = [json.loads(line) for line in (state / "audit.jsonl").read_text().splitlines()]
    shells = [r for r in records if r["action"] == "shell"]
    assert [r["outcome"] for r in shells] == ["started", "ended"]
    assert shells[0]["instance"] == "gpu-box" and shells[0]["origin"] == "tui"
    assert shells[0]["result"]["argv"] == argv
    assert shells[1]["result"] == {"returncode": 0}

    # the console still works: it answers keys and quits cleanly
    tmux.keys("?")
    tmux.wait_for(lambda s: "keys" in s and "ssh into" in s, what="help screen")
    tmux.keys("Escape")
    tmux.wait_for(lambda s: "gpu-box" in s and "keys" not in s, what="grid again")
    tmux.keys("q")
    tmux.wait_dead(15, "q to quit the console")
