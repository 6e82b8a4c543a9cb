"""The audit when the console dies or the link drops mid-restart (issue 36 item 7), end to end: the real CLI as
a subprocess, a real sshd on 127.0.0.1, a real benchmark restarted by the real agent, and a fault proxy."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.faultproxy import FaultProxy
from tests.support.sshd import Sshd
from tests.support.wait import until, until_sync

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "console"]
SLOW_BENCH = "trap 'sleep 3; exit 0' TERM\nwhile :; do sleep 0.2; done\n"


def fleet_file(tmp_path: Path, sshd: Sshd, port: int | None = None) -> Path:
    """One instance whose benchmark (a script in tmp_path) takes 3 s to stop; ``port``: reach sshd there."""
    script = tmp_path / "slowbench.sh"
    script.write_text(SLOW_BENCH)
    known_hosts = sshd.known_hosts
    if port is not None:
        known_hosts = tmp_path / "known_hosts_proxy"
        known_hosts.write_text(f"[127.0.0.1]:{port} {sshd.host_key.export_public_key().decode().strip()}\n")
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f"""\
[benchmark]
start = ["/bin/sh", "{script}"]
match = ["{script}"]
stop_timeout = 3

[[instance]]
name = "box1"
host = "127.0.0.1"
port = {port or sshd.port}
user = "{sshd.user}"
key = "{sshd.client_key_path}"
known_hosts = "{known_hosts}"
""")
    return fleet


def env(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, FLEET_CONSOLE_STATE_DIR=str(tmp_path / "state"), PYTHONPATH=str(ROOT))


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=60, env=env(tmp_path),
                          stdin=subprocess.DEVNULL)


def audit_records(tmp_path: Path) -> list[dict]:
    path = tmp_path / "state" / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def open_intents(tmp_path: Path) -> list[str]:
    path = tmp_path / "state" / "audit.pending.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    done = {item["done"] for item in lines if "done" in item}
    return [item["intent"] for item in lines if "intent" in item and item["intent"] not in done]


def stopping(bench: subprocess.Popen[bytes]) -> bool:
    """The benchmark got its SIGTERM: its trap's ``sleep 3`` runs."""
    try:
        return any(child.cmdline() == ["sleep", "3"] for child in psutil.Process(bench.pid).children())
    except psutil.Error:
        return bench.poll() is not None


def stop_benchmarks(tmp_path: Path) -> None:
    subprocess.run(["pkill", "-KILL", "-f", str(tmp_path / "slowbench.sh")], check=False)


def test_a_restart_whose_console_was_killed_is_audited_by_the_next_start(sshd: Sshd, tmp_path: Path) -> None:
    fleet = fleet_file(tmp_path, sshd)
    bench = subprocess.Popen(["/bin/sh", str(tmp_path / "slowbench.sh")], start_new_session=True)
    restart = subprocess.Popen([*CLI, "restart", "box1", "--yes", "--fleet", str(fleet)], env=env(tmp_path),
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        until_sync(lambda: open_intents(tmp_path), 30, "the restart's intent in the pending file", interval=0.1)
        # the request sent (the intent is written first, then the request: a stop in between would keep it here)
        until_sync(lambda: stopping(bench), 30, "the agent to start stopping the old benchmark", interval=0.1)
        restart.send_signal(signal.SIGSTOP)  # the console still exists: its intent is pending, not unknown
        shown = cli(tmp_path, "history")
        assert "box1" in shown.stdout and "restart sent" in shown.stdout and "outcome not known yet" in shown.stdout
        assert not any(r["action"] == "restart" for r in audit_records(tmp_path))
        restart.kill()  # the console dies before the outcome
        restart.wait(10)
        until_sync(lambda: bench.poll() is not None, 20, "the agent to stop the old benchmark", interval=0.2)
        status = cli(tmp_path, "status", "--fleet", str(fleet), "--timeout", "15")  # anything that opens the audit
        assert "Traceback" not in status.stderr, status.stderr
        records = [r for r in audit_records(tmp_path) if r["action"] == "restart"]
        assert [(r["instance"], r["outcome"], r["origin"]) for r in records] == [("box1", "unknown", "cli")], records
        assert "stopped before the outcome was known" in records[0]["note"]
        assert not open_intents(tmp_path)
        assert "outcome not known yet" not in cli(tmp_path, "history").stdout
    finally:
        if restart.poll() is None:
            restart.kill()
            restart.wait()
        bench.kill()
        bench.wait()
        stop_benchmarks(tmp_path)


async def test_a_link_cut_mid_restart_answers_outcome_unknown_within_the_restarts_time(
        sshd: Sshd, tmp_path: Path) -> None:
    proxy = FaultProxy(sshd.port)
    await proxy.start()
    fleet = fleet_file(tmp_path, sshd, port=proxy.port)
    bench = subprocess.Popen(["/bin/sh", str(tmp_path / "slowbench.sh")], start_new_session=True)
    proc = await asyncio.create_subprocess_exec(
        *CLI, "restart", "box1", "--yes", "--fleet", str(fleet), env=env(tmp_path), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        await until(lambda: open_intents(tmp_path), 30, what="the restart's intent in the pending file")
        await asyncio.sleep(0.5)  # sent: the agent is stopping the benchmark (it takes 3 s)
        cut_at = time.monotonic()
        proxy.blackhole = True  # the host is unreachable from here on: no reconnect, no journal
        proxy.forget()
        out, err = await asyncio.wait_for(proc.communicate(), 90)
        answered_in = time.monotonic() - cut_at
        text = (out + err).decode()
        assert proc.returncode == 1, text
        assert "outcome unknown" in text and "Traceback" not in text, text
        assert answered_in < 3 + 15 + 10, f"answered {answered_in:.0f} s after the cut: {text}"  # stop + margin
        records = [r for r in audit_records(tmp_path) if r["action"] == "restart"]
        assert [(r["outcome"], r["origin"]) for r in records] == [("unknown", "cli")], records
        until_sync(lambda: bench.poll() is not None, 20, "the host to have restarted all the same", interval=0.2)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await proxy.stop()
        bench.kill()
        bench.wait()
        stop_benchmarks(tmp_path)
