"""A terminal program ends with its terminal: a killed tmux pane (SIGHUP, then a dead tty) ends the TUI within
seconds and its agents with it; SIGUSR1, the TUI's reload signal, does not (console/ui/hangup.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.ui.hangup import CHECK_SECONDS, LAST_RESORT_SECONDS
from tests.support.sshd import Sshd
from tests.support.tmux import Tmux
from tests.support.wait import until_sync
from tests.test_tmux_e2e import write_fleet


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    term = Tmux(100, 30)
    try:
        yield term
    finally:
        term.close()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] if Path(f"/proc/{pid}").exists() else "X"
    return state not in ("Z", "X")


def start_console(tmux: Tmux, sshd: Sshd, tmp_path: Path) -> tuple[int, Path]:
    logdir = tmp_path / "remote-tmp"
    logdir.mkdir()
    (logdir / "benchmark-full.log").write_text("Running warmup proof...\n")
    fleet = write_fleet(tmp_path, sshd, logdir)
    env = {"FLEET_CONSOLE_CONFIG_DIR": str(tmp_path / "cfg"), "FLEET_CONSOLE_STATE_DIR": str(tmp_path / "state")}
    tmux.start([sys.executable, "-m", "console", "--fleet", str(fleet)], env=env)
    tmux.wait_for(lambda s: "gpu-box" in s and "warmup proof" in s, timeout=40, what="the live instance")
    until_sync(lambda: bool(sshd.session_pids()), 15, "the agent's SSH session", interval=0.2)
    pid = int(tmux._tmux("display-message", "-p", "-t", "main", "#{pane_pid}").stdout.strip())
    return pid, fleet


def stop_if_alive(pid: int) -> None:
    """A console that outlived the test (the bug this file is about) is stopped, not left spinning."""
    if alive(pid):
        os.kill(pid, signal.SIGKILL)


def test_killed_tmux_pane_ends_the_console_and_its_agents(tmux: Tmux, sshd: Sshd, tmp_path: Path) -> None:
    pid, _ = start_console(tmux, sshd, tmp_path)
    try:
        subprocess.run(["tmux", "-L", tmux.socket, "kill-pane", "-t", "main"], check=False, timeout=20)
        # a clean quit takes about a second; a quit that hangs is ended by the last-resort timer, which this waits
        # out (a bound of exactly that timer lost the race once on a loaded box)
        until_sync(lambda: not alive(pid), LAST_RESORT_SECONDS + CHECK_SECONDS + 5,
                   "the console to end when its pane is killed", interval=0.2)
        until_sync(lambda: not sshd.session_pids(), 15, "the agent's SSH session to end with the console",
                   interval=0.2)
    finally:
        stop_if_alive(pid)


def test_sighup_quits_and_sigusr1_does_not(tmux: Tmux, sshd: Sshd, tmp_path: Path) -> None:
    """SIGUSR1 is the TUI's reload signal: it reloads, says so, and the console stays."""
    pid, _ = start_console(tmux, sshd, tmp_path)
    try:
        os.kill(pid, signal.SIGUSR1)
        tmux.wait_for(lambda s: "fleet.toml: reloaded: 2 instances" in s, what="the reload's toast after SIGUSR1")
        assert alive(pid) and sshd.session_pids()
        os.kill(pid, signal.SIGHUP)  # the terminal hung up: quit, links closed
        until_sync(lambda: not alive(pid), 10, "the console to end on SIGHUP", interval=0.2)
        until_sync(lambda: not sshd.session_pids(), 15, "the agent's SSH session to end with the console",
                   interval=0.2)
    finally:
        stop_if_alive(pid)
