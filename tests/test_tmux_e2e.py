"""End to end in a real terminal: the installed console in an 80x24 tmux pane, read with capture-pane."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.sshd import Sshd, free_port
from tests.support.tmux import Tmux
from tests.support.wait import until_sync


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    term = Tmux(80, 24)
    try:
        yield term
    finally:
        term.close()


def leftover_processes(marker: str) -> list[str]:
    """Command lines of live processes that mention ``marker`` (a path only this test uses)."""
    out = subprocess.run(["pgrep", "-af", marker], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "pgrep" not in line]


def wait_gone(marker: str, timeout: float = 15.0) -> list[str]:
    deadline = time.monotonic() + timeout
    left = leftover_processes(marker)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = leftover_processes(marker)
    return left


def write_fleet(tmp_path: Path, sshd: Sshd, logdir: Path) -> Path:
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(
        f"""\
[defaults]
user = "{sshd.user}"
key = "{sshd.client_key_path}"
known_hosts = "{sshd.known_hosts}"
watch_dirs = ["{logdir}"]

[[instance]]
name = "gpu-box"
host = "127.0.0.1"
port = {sshd.port}
tags = ["h200"]
logs = ["{logdir}/benchmark-full.log"]

[[instance]]
name = "dead-box"
host = "127.0.0.1"
port = {free_port()}
tags = ["3090"]
"""
    )
    return fleet


def test_console_in_an_80x24_tmux_pane_against_a_real_sshd_fleet(tmux: Tmux, sshd: Sshd, tmp_path: Path) -> None:
    logdir = tmp_path / "remote-tmp"
    logdir.mkdir()
    (logdir / "benchmark-full.log").write_text("Running warmup proof...\n")
    fleet = write_fleet(tmp_path, sshd, logdir)
    env = {"FLEET_CONSOLE_CONFIG_DIR": str(tmp_path / "cfg"), "FLEET_CONSOLE_STATE_DIR": str(tmp_path / "state")}
    tmux.start([sys.executable, "-m", "console", "--fleet", str(fleet), "--theme", "dark"], env=env)

    # trouble first: the unreachable host sorts above the live one, which shows its state and last log line
    screen = tmux.wait_for(
        lambda s: "UNREACHABLE" in s and "gpu-box" in s and "no GPU" in s and "warmup proof" in s,
        timeout=40, what="grid with a live and an unreachable instance",
    )
    assert screen.index("dead-box") < screen.index("gpu-box")
    assert "no GPU no GPU" not in screen  # said once, as a flag
    assert "Connection refused" in screen
    assert "2 instances" in screen
    assert "Quit" in screen.splitlines()[-1]  # the footer fits in the last row
    assert len(screen.splitlines()) <= 24 and all(len(line) <= 80 for line in screen.splitlines())

    # a new log line reaches the pane (tail -F over SSH)
    with (logdir / "benchmark-full.log").open("a") as fh:
        fh.write("Error: status: Unavailable, message: \"error sending request: broken pipe\"\n")
    tmux.wait_for(lambda s: "Error: status: Unavailable" in s, timeout=15, what="the new log line")

    tmux.keys("?")
    tmux.wait_for(lambda s: "keys" in s and "diagnose the selected" in s and "filter by name" in s, what="help screen")
    tmux.keys("Escape")
    tmux.wait_for(lambda s: "dead-box" in s and "gpu-box" in s, what="grid again")

    tmux.keys("/")
    tmux.keys(*"h200", "Enter")
    tmux.wait_for(lambda s: "gpu-box" in s and "dead-box" not in s, what="filtered grid (tag h200)")

    tmux.keys("Enter")  # open the only visible instance
    tmux.wait_for(lambda s: "Processes" in s and "Logs" in s and "Diagnosis" in s, what="instance screen")
    tmux.keys("3")
    tmux.wait_for(lambda s: "benchmark-full.log" in s and "broken pipe" in s, what="log tab")
    tmux.keys("Escape")
    tmux.wait_for(lambda s: "h200" in s and "Quit" in s, what="back on the grid")

    tmux.keys("q")
    tmux.wait_dead(15, "q to quit the console")
    # the agent the console started over SSH went away with it: sshd has no session left
    until_sync(lambda: not sshd.session_pids(), 15, "the SSH session (the agent) to end with the console",
               interval=0.2)


def tmux_wait_file(path: Path, needle: str, after: float, timeout: float) -> float:
    """Wait until ``needle`` is in ``path``; the monotonic time it was first seen."""
    start = path.stat().st_size if path.exists() else 0

    def seen() -> float | None:
        with path.open("rb") as fh:
            fh.seek(start)
            return time.monotonic() if needle.encode() in fh.read() else None

    return until_sync(seen, timeout, "%r in %s" % (needle, path), interval=0.2)


def row(screen: str, name: str) -> str:
    """The grid row that names ``name`` (compact rows pad names and badges into columns)."""
    return next((line for line in screen.splitlines() if " %s " % name in line), "")


def test_demo_in_an_80x24_tmux_pane(tmux: Tmux, tmp_path: Path) -> None:
    env = {
        "FLEET_CONSOLE_CONFIG_DIR": str(tmp_path / "cfg"),
        "FLEET_CONSOLE_STATE_DIR": str(tmp_path / "state"),
        "TMPDIR": str(tmp_path),  # the demo's instance dirs land here, so leftovers are easy to spot
    }
    tmux.start([sys.executable, "-m", "console", "demo", "--instances", "4"], env=env)
    screen = tmux.wait_for(
        lambda s: all(n in s for n in ("healthy-01", "idle-02", "dlstall-03", "warmup-04")) and "%" in s,
        timeout=60, what="four demo instances with GPU figures",
    )
    assert "DEMO" in screen and "simulated" in screen
    assert "Quit" in screen.splitlines()[-1]
    # the seed's failure shows up by itself: no benchmark process while the entrypoint waits (BENCH DOWN), and
    # the console's own diagnosis on entering trouble may already have turned that into its cause (FAILED)
    tmux.wait_for(lambda s: "BENCH DOWN" in row(s, "warmup-04") or "FAILED" in row(s, "warmup-04"), timeout=60,
                  what="warmup-04 benchmark down")

    tmux.keys("/")
    tmux.keys(*"warmup", "Enter")
    tmux.wait_for(lambda s: "warmup-04" in s and "healthy-01" not in s, what="filtered to warmup-04")
    tmux.keys("d")
    screen = tmux.wait_for(lambda s: "FAILED" in row(s, "warmup-04"), timeout=40, what="diagnosis verdict on the pane")
    assert "transport error" in screen

    # the operator's loop: restart, and the old verdict goes with the run it described
    tmux.keys("r")
    # the dialog opens once the host said what the restart stops (its plan), with its buttons
    tmux.wait_for(lambda s: "Restart (y)" in s and "then start:" in s, what="confirm dialog with the plan")
    tmux.keys("y")
    log = next(tmp_path.glob("fleet-demo-*/warmup-04/tmp/benchmark-full.log"))
    restarted_at = time.monotonic()
    screen = tmux.wait_for(lambda s: "warmup-04" in s and "FAILED" not in s and "restarted" in s, timeout=30,
                           what="warmup-04 out of FAILED after the restart")
    assert "failed" not in screen.splitlines()[0].lower()  # the header no longer counts it
    proof = tmux_wait_file(log, "proof done", after=restarted_at, timeout=90)
    assert time.monotonic() - proof < 20 or "FAILED" not in tmux.screen()
    tmux.keys("Enter")
    tmux.wait_for(lambda s: "Processes" in s and "Logs" in s, what="instance screen")
    tmux.keys("3")
    screen = tmux.wait_for(lambda s: "[benchmark]" in s and "FOLLOW" in s, what="the benchmark log tab")
    last_lines = [line.strip() for line in log.read_text().splitlines()[-3:] if line.strip()]
    assert any(line[:40] in screen for line in last_lines), "the log's last line is on screen at opening"
    tmux.keys("q")  # back to the grid (q quits only from the grid)
    tmux.wait_for(lambda s: "warmup-04" in s and "Quit" in s.splitlines()[-1], what="grid again")

    tmux.keys("q")
    tmux.wait_dead(20, "q to quit the demo")
    assert not wait_gone(str(tmp_path)), "demo processes outlived the console"
