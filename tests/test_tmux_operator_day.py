"""Issue 35's operator's day, end to end in a real terminal against a real sshd host: the console starts on a fleet
file without ``[benchmark]``; ``[benchmark]`` is added to fleet.toml while it runs; the benchmark is killed and the
grid says BENCH DOWN with the diagnosis's verdict within 10 s; ``r`` confirms with what it stops ("will only
start" while nothing runs), ``y`` restarts, and the benchmark runs again; a second ``r`` lists the running one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.sshd import Sshd
from tests.support.tmux import Tmux
from tests.support.wait import until_sync

BENCH = 'i=0\nwhile :; do i=$((i+1)); echo "step $i done"; sleep 0.5; done\n'  # a stand-in with progress lines
DOWN_WITHIN = 10.0  # seconds from the kill to BENCH DOWN and its verdict on the grid


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    term = Tmux(120, 40)
    try:
        yield term
    finally:
        term.close()


def pids_of(needle: str) -> list[int]:
    """Live processes whose command line holds ``needle`` (a path only this test uses)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            if needle in cmd and state not in ("Z", "X"):
                out.append(int(entry))
    return sorted(out)


def kill_all(needle: str) -> None:
    for pid in pids_of(needle):
        try:
            os.killpg(os.getpgid(pid), signal.SIGKILL)
        except OSError:
            pass


def test_an_operators_day_on_a_real_sshd_host(tmux: Tmux, sshd: Sshd, tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    remote.mkdir()
    token = "fcday" + uuid.uuid4().hex[:8]
    script = remote / f"{token}-bench.sh"
    script.write_text(BENCH)
    log = remote / "bench.log"
    base = f"""\
[defaults]
user = "{sshd.user}"
key = "{sshd.client_key_path}"
known_hosts = "{sshd.known_hosts}"
watch_dirs = ["{remote}"]
"""
    box = f"""
[[instance]]
name = "box1"
host = "127.0.0.1"
port = {sshd.port}
logs = ["{log}"]
"""
    benchmark = f"""
[benchmark]
start = ["bash", "{script}"]
match = ["{token}-bench"]
log = "{log}"
stop_timeout = 2
"""
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(base + box)
    state = tmp_path / "state"
    env = {"FLEET_CONSOLE_CONFIG_DIR": str(tmp_path / "cfg"), "FLEET_CONSOLE_STATE_DIR": str(state)}
    with log.open("ab") as out:
        bench = subprocess.Popen(["bash", str(script)], stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        tmux.start([sys.executable, "-m", "console", "--fleet", str(fleet), "--theme", "dark"], env=env)
        tmux.wait_for(lambda s: "box1" in s and "step " in s, timeout=40, what="box1 live, its log's progress shown")

        # [benchmark] added while the console runs: it is watched from then on
        fleet.write_text(base + benchmark + box)
        tmux.wait_for(lambda s: "reloaded" in s.lower(), timeout=15, what="the reload said")
        os.killpg(bench.pid, signal.SIGKILL)
        bench.wait(10)
        killed = time.monotonic()
        verdict = "no benchmark process is running · verdict "  # the diagnosis's verdict, with its age
        screen = tmux.wait_for(lambda s: "BENCH DOWN" in s and verdict in s, timeout=DOWN_WITHIN + 5,
                               what="BENCH DOWN and the verdict on box1's pane")
        assert time.monotonic() - killed <= DOWN_WITHIN, screen

        # r: nothing runs, so the confirmation says it will only start; y starts it
        tmux.keys("r")
        tmux.wait_for(lambda s: "no benchmark running: will only start: bash " in s and "Restart (y)" in s,
                      timeout=20, what="the confirmation: will only start")
        tmux.keys("y")
        first = until_sync(lambda: pids_of(str(script)), 30, "the benchmark running again")[0]
        tmux.wait_for(lambda s: "BENCH DOWN" not in s and "box1" in s, timeout=20, what="box1 out of BENCH DOWN")

        # r again: the confirmation lists the process group it stops
        tmux.keys("r")
        tmux.wait_for(lambda s: f"stop {token}-bench.sh (pid {first}, up " in s and "then start: bash " in s,
                      timeout=20, what="the confirmation listing what it stops")
        tmux.keys("y")
        until_sync(lambda: pids_of(str(script)) and first not in pids_of(str(script)), 30,
                   "the old benchmark stopped and a new one running")

        def restarts() -> list[dict]:
            records = [json.loads(x) for x in (state / "audit.jsonl").read_text().splitlines()]
            return [r for r in records if r["action"] == "restart"]

        until_sync(lambda: len(restarts()) == 2, 20, "both restarts in the audit log")
        first_restart, second_restart = restarts()
        assert first_restart["outcome"] == second_restart["outcome"] == "ok"
        assert first_restart["result"]["plan"]["groups"] == []  # it only started
        assert [g["targets"][0]["pid"] for g in second_restart["result"]["plan"]["groups"]] == [first]

        tmux.keys("q")
        tmux.wait_dead(20, "q to quit the console")
    finally:
        kill_all(str(script))
        if bench.poll() is None:
            bench.kill()
            bench.wait()
