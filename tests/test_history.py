"""The history file: it survives a console restart (``serve`` twice on a real sshd fleet, then
``fleet-console history``), GPU minutes keep min/avg/max, and the file stays bounded by age and size."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from console.monitor.history import History, HistoryReader, pack_gpus, parse_since, unpack_gpus
from tests.support.sshd import Sshd
from tests.support.wait import until_sync

ROOT = Path(__file__).resolve().parents[1]


def env(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, FLEET_CONSOLE_STATE_DIR=str(tmp_path / "state"), PYTHONPATH=str(ROOT))


def serve_until(tmp_path: Path, fleet: Path, pattern: str, timeout: float = 60) -> str:
    """Run ``serve`` until its log matches ``pattern``, then TERM it; its log."""
    log = tmp_path / f"serve-{time.monotonic_ns()}.err"
    with log.open("w") as err:
        argv = [sys.executable, "-m", "console", "serve", "--fleet", str(fleet), "--metrics-port", "0"]
        proc = subprocess.Popen(argv,
                                stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL, env=env(tmp_path),
                                cwd=tmp_path)
        try:
            def logged() -> bool:
                if re.search(pattern, log.read_text()):
                    return True
                assert proc.poll() is None, log.read_text()
                return False

            until_sync(logged, timeout, f"{pattern!r} in serve's log", interval=0.2, detail=log.read_text)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return log.read_text()


def test_history_survives_a_restart(sshd: Sshd, tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(
        f'[[instance]]\nname = "box1"\nhost = "127.0.0.1"\nport = {sshd.port}\nuser = "{sshd.user}"\n'
        f'key = "{sshd.client_key_path}"\nknown_hosts = "{sshd.known_hosts}"\nwatch_dirs = []\n'
        '[benchmark]\nmatch = ["fleet-obs-never-matches-this"]\n'
    )
    for _ in range(2):
        serve_until(tmp_path, fleet, r"verdict box1: benchmark_not_running")  # auto-diagnosed, so in the history
    out = subprocess.run([sys.executable, "-m", "console", "history", "box1", "--json", "--since", "1h"],
                         capture_output=True, text=True, env=env(tmp_path), timeout=30)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    transitions = [e for e in data["events"] if e["kind"] == "transition" and e["status"] == "benchmark_down"]
    assert len(transitions) == 2 and transitions[0]["ts"] < transitions[1]["ts"]
    assert transitions[0]["detail"] == "no benchmark process running"
    verdicts = [e for e in data["events"] if e["kind"] == "verdict"]
    assert [v["status"] for v in verdicts] == ["benchmark_not_running"] * 2
    text = subprocess.run([sys.executable, "-m", "console", "history", "--since", "1h"],
                          capture_output=True, text=True, env=env(tmp_path), timeout=30)
    assert text.returncode == 0 and text.stdout.count("-> benchmark_down") == 2, text.stdout
    assert text.stdout.count("verdict benchmark_not_running (warning)") == 2
    bad = subprocess.run([sys.executable, "-m", "console", "history", "--since", "soon"],
                         capture_output=True, text=True, env=env(tmp_path), timeout=30)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--since" in bad.stderr


def gpu(index: int, util: int, temp: int, power: float, mem_mib: int) -> dict:
    return {"index": index, "util": util, "temp": temp, "power": power, "mem_used": mem_mib * 1048576}


def test_gpu_minutes_min_avg_max_across_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    t0 = 1_700_000_040.0  # a minute boundary
    h = History(path, clock=lambda: t0)
    for i, (u, temp, p, m) in enumerate([(10, 50, 100.0, 1000), (30, 60, 200.5, 3000), (20, 55, 150.0, 2000)]):
        h.gpu_sample(t0 + i, "box1", [gpu(0, u, temp, p, m), {"index": 1, "lost": True}])
    h.transition(t0 + 5, "box1", "ok", "failed", "oom")
    h.verdict(t0 + 6, "box1", {"verdict": {"code": "oom", "severity": "error", "summary": "out of memory"},
                               "findings": [{"code": "oom", "severity": "error", "summary": "out of memory",
                                             "evidence": [{"path": "/tmp/b.log", "line": 7, "text": "OOM"}]}]})
    h.restart(t0 + 7, "box1", "ok", {"started": {"pid": 5}})
    h.probe(t0 + 8, "box1", "disk", {"title": "Disk", "lines": ["a", "b"]})
    h.flush(t0 + 61)  # the next minute: the first one's GPU row is written
    h.close()
    r = HistoryReader(path)
    try:
        ((minute, gpus),) = list(r.gpu_minutes("box1"))
        assert minute == t0
        assert gpus == [{"gpu": 0, "util": {"min": 10, "avg": 20, "max": 30}, "temp": {"min": 50, "avg": 55, "max": 60},
                         "power": {"min": 100, "avg": 150, "max": 200}, "mem": {"min": 1000, "avg": 2000, "max": 3000}}]
        kinds = [e["kind"] for e in r.events("box1")]
        assert kinds == ["transition", "verdict", "restart", "probe"]
        verdict = r.events("box1", kinds=["verdict"])[0]
        assert verdict["status"] == "oom" and verdict["data"]["findings"][0]["evidence"][0]["line"] == 7
    finally:
        r.close()


def test_flaps_are_recorded_once_per_episode(tmp_path: Path) -> None:
    h = History(tmp_path / "h.sqlite3", clock=lambda: 1e9)
    for i in range(6):
        h.transition(1e9 + 10 * i, "box1", "ok" if i % 2 else "unreachable", "unreachable" if i % 2 else "ok", "")
    h.flush(1e9 + 100)
    h.close()
    r = HistoryReader(tmp_path / "h.sqlite3")
    assert [e["detail"].split(" ")[0] for e in r.events(kinds=["flap"])] == ["4"]
    r.close()


@pytest.mark.slow
def test_bounded_by_age_and_size(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    now = [1_700_000_000.0]
    h = History(path, max_days=1, max_bytes=2 * 1024 * 1024, clock=lambda: now[0])
    devices = [gpu(i, 50, 60, 250.0, 10000) for i in range(8)]
    for minute in range(3 * 24 * 60):  # three days of one 8-GPU instance (a sample a minute)
        now[0] = 1_700_000_000.0 + minute * 60
        for n in range(5):
            h.gpu_sample(now[0], f"box{n}", devices)
        if minute % 60 == 0:
            h.transition(now[0], "box0", "ok", "stale", "no data")
        h.flush(now[0] + 1)
    h.prune(now[0])
    assert h.size_bytes() <= 2 * 1024 * 1024
    oldest = h.db.execute("SELECT min(minute) FROM gpu_minutes").fetchone()[0] * 60
    assert oldest >= now[0] - 86400 - 60
    h.close()
    assert path.stat().st_size <= 3 * 1024 * 1024  # the file itself gives the pages back


def test_pack_roundtrip_and_since() -> None:
    assert unpack_gpus(pack_gpus({})) == []
    assert parse_since("2h") == 7200 and parse_since("90s") == 90 and parse_since("7d") == 7 * 86400
    for bad in ("", "0", "-1h", "2x", "nan"):
        with pytest.raises(ValueError):
            parse_since(bad)
