"""The command line end to end: ``python -m console ...`` as a subprocess, against a real OpenSSH sshd on
127.0.0.1 and the fake benchmark chains in tests/fixtures/chains (each test starts its own and cleans it up)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from tests.fixtures.chains.harness import Harness, alive, wait_for
from tests.support.sshd import Sshd, free_port

ROOT = Path(__file__).resolve().parents[1]
# On a host with real NVIDIA GPUs the agent samples them, and they sit idle under the fake benchmark.
REAL_GPUS = Path("/dev/nvidiactl").exists()
CLI = [sys.executable, "-m", "console"]



def toml(value: Any) -> str:
    """A TOML value for a string or a list of strings (JSON string syntax is valid TOML)."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(json.dumps(v) for v in value) + "]"
    return json.dumps(value)


def instance_table(server: Sshd, chains: Harness, name: str = "box1", **over: Any) -> str:
    fields: dict[str, Any] = {
        "name": name,
        "host": "127.0.0.1",
        "port": server.port,
        "user": server.user,
        "key": str(server.client_key_path),
        "known_hosts": str(server.known_hosts),
        "watch_dirs": [str(chains.logdir)],
        "logs": [str(chains.logdir / "benchmark-full.log")],
    }
    fields.update(over)
    body = "\n".join(f"{k} = {v if isinstance(v, (int, float)) else toml(v)}" for k, v in fields.items())
    return "[[instance]]\n" + body + "\n"


def write_fleet(tmp_path: Path, chains: Harness, mode: str, *tables: str, start: list[str] | None = None) -> Path:
    """A fleet.toml whose [benchmark] finds, stops and starts this test's chain (and nothing else)."""
    bench = "\n".join(
        [
            "[benchmark]",
            f"start = {toml(start or chains.argv(mode))}",
            f"match = {toml(chains.match)}",
            f"entrypoint = {toml(chains.entrypoint)}",
            f"log = {toml(str(chains.logdir / 'restart.log'))}",
            f"cwd = {toml(str(chains.logdir))}",
            "stop_timeout = 5",
            f"env = {{ FAKE_PYTHON = {toml(sys.executable)} }}",
        ]
    )
    path = tmp_path / "fleet.toml"
    path.write_text(bench + "\n\n" + "\n".join(tables))
    check = cli(tmp_path, "check", "--fleet", str(path))
    assert check.returncode == 0, check.stderr
    return path


def cli(tmp_path: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, FLEET_CONSOLE_STATE_DIR=str(tmp_path / "state"), PYTHONPATH=str(ROOT))
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL
    )


def diagnose_json(tmp_path: Path, fleet: Path, name: str = "box1") -> tuple[int, dict[str, Any]]:
    result = cli(tmp_path, "diagnose", name, "--json", "--fleet", str(fleet), "--timeout", "20")
    assert result.returncode in (0, 1), f"exit {result.returncode}: {result.stderr}"
    return result.returncode, json.loads(result.stdout)


def diagnose_until(tmp_path: Path, fleet: Path, *codes: str, timeout: float = 30) -> tuple[int, dict[str, Any]]:
    """Run ``diagnose --json`` until the verdict is one of ``codes`` (the chain may still be getting there)."""
    last: list[tuple[int, dict[str, Any]]] = []

    def attempt() -> bool:
        last[:] = [diagnose_json(tmp_path, fleet)]
        return last[0][1]["verdict"]["code"] in codes

    if not wait_for(attempt, timeout=timeout, interval=0.2):
        pytest.fail(f"verdict {last[0][1]['verdict']}, wanted {codes}: {last[0][1]['findings']}")
    return last[0]


def by_code(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["code"]: f for f in data["findings"]}


def audit_records(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "state" / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    err = result.stderr.strip()
    assert "Traceback" not in err and "\n" not in err, err
    assert err.startswith("fleet-console: "), err
    return err


# -- diagnose -----------------------------------------------------------------------------------------
def test_diagnose_the_seed_failure_over_ssh(sshd: Sshd, chains: Harness, tmp_path: Path) -> None:
    """Warmup proof dies on a broken pipe, the entrypoint is left waiting: the verdict and its evidence."""
    chains.start("seed")
    assert wait_for(lambda: "benchmark exited" in chains.log_text("setup.log"), timeout=30)
    fleet = write_fleet(tmp_path, chains, "seed", instance_table(sshd, chains))

    status, data = diagnose_until(tmp_path, fleet, "transport_error")

    assert status == 1
    assert data["instance"] == "box1"
    verdict = data["verdict"]
    assert verdict["severity"] in ("error", "critical")
    assert "warmup proof" in verdict["summary"].lower() and "broken pipe" in verdict["summary"].lower()
    found = by_code(data)
    log = str(chains.logdir / "benchmark-full.log")
    lines = Path(log).read_bytes().decode("utf-8", "replace").split("\n")  # numbered by \n; \r stays in a line
    evidence = found["transport_error"]["evidence"]
    assert evidence and all(e["path"] == log for e in evidence)
    for e in evidence:  # each evidence text is (an excerpt of) the file's line under that number
        excerpt = e["text"].strip().strip(".…").strip()
        assert excerpt and excerpt in lines[e["line"] - 1].split("\r")[-1], (e, lines[e["line"] - 1])
    texts = [e["text"] for e in evidence]
    assert any("broken pipe" in t.lower() for t in texts), texts
    assert "warmup proof failed, aborting benchmark" in texts
    # what the operator sees next: nothing runs, and the entrypoint sits in wait on an idle child (their
    # severity depends on the entrypoint's age, which is seconds here and minutes on a real instance)
    entry = chains.entry_pids()
    assert entry and str(entry[0]) in found["benchmark_not_running"]["summary"]
    assert str(entry[0]) in found["waiting_on_child"]["summary"]
    assert found["missing_input"]["severity"] == "info"  # c1.json was missing, then downloaded


def test_diagnose_cuda_oom_over_ssh(sshd: Sshd, chains: Harness, tmp_path: Path) -> None:
    chains.start("oom")
    assert wait_for(lambda: "benchmark exited" in chains.log_text("setup.log"), timeout=30)
    fleet = write_fleet(tmp_path, chains, "oom", instance_table(sshd, chains))

    status, data = diagnose_until(tmp_path, fleet, "cuda_oom")

    assert status == 1
    assert "out of memory" in data["verdict"]["summary"].lower()
    oom = by_code(data)["cuda_oom"]["evidence"][0]
    assert oom["path"] == str(chains.logdir / "cuzk-bench-daemon.log") and oom["line"] >= 1
    assert "CUDA_ERROR_OUT_OF_MEMORY" in oom["text"]
    assert {"transport_error", "benchmark_not_running"} <= set(by_code(data))


def test_diagnose_a_stalled_download_over_ssh(sshd: Sshd, chains: Harness, tmp_path: Path) -> None:
    """``stall_seconds`` in fleet.toml reaches the agent: a progress bar stuck that long (5 s, the minimum) stalls."""
    chains.start("stall")
    assert wait_for(lambda: "33.9%" in chains.log_text("benchmark-full.log"), timeout=30)
    fleet = write_fleet(tmp_path, chains, "stall", instance_table(sshd, chains, stall_seconds=5))

    status, data = diagnose_until(tmp_path, fleet, "download_stalled")

    assert status == 1
    assert "33.9%" in data["verdict"]["summary"]
    last = by_code(data)["download_stalled"]["evidence"][-1]
    assert last["path"] == str(chains.logdir / "benchmark-full.log") and last["line"] == 3
    assert last["text"].endswith("33.9%")


def test_diagnose_a_healthy_chain_over_ssh(sshd: Sshd, chains: Harness, tmp_path: Path) -> None:
    chains.start("run")
    assert wait_for(lambda: len(chains.bench_pids()) >= 2, timeout=30)
    fleet = write_fleet(tmp_path, chains, "run", instance_table(sshd, chains))

    status, data = diagnose_until(tmp_path, fleet, "healthy", *(("gpu_idle",) if REAL_GPUS else ()))

    problems = {f["code"] for f in data["findings"] if f["severity"] in ("warning", "error", "critical")}
    if data["verdict"]["code"] == "gpu_idle":  # real GPUs here, which the fake benchmark leaves idle
        assert status == 1 and problems == {"gpu_idle"}, data["findings"]
        return
    assert status == 0
    assert data["verdict"]["severity"] == "info"
    assert "2 benchmark process" in data["verdict"]["summary"]
    assert not problems, data["findings"]
    human = cli(tmp_path, "diagnose", "box1", "--fleet", str(fleet))
    assert human.returncode == 0, human.stderr
    assert human.stdout.startswith("box1: healthy")


def test_host_key_mismatch_fails_diagnose_in_one_line(sshd: Sshd, chains: Harness, tmp_path: Path) -> None:
    sshd.write_known_hosts(asyncssh.generate_private_key("ssh-ed25519"))  # someone else's key
    fleet = write_fleet(tmp_path, chains, "run", instance_table(sshd, chains))

    started = time.monotonic()
    result = cli(tmp_path, "diagnose", "box1", "--json", "--fleet", str(fleet), "--timeout", "20")

    assert result.returncode == 2
    assert time.monotonic() - started < 15, "a host key mismatch is final: no waiting for the timeout"
    assert result.stdout == ""
    err = one_line_error(result)
    assert "HOST KEY MISMATCH" in err and f"[127.0.0.1]:{sshd.port}" in err


# -- restart ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["run", "seed"])
def test_restart_over_ssh_replaces_the_chain_and_is_audited(
    sshd: Sshd, chains: Harness, tmp_path: Path, mode: str
) -> None:
    chains.start(mode)
    if mode == "run":
        assert wait_for(lambda: len(chains.bench_pids()) >= 2 and chains.entry_pids(), timeout=30)
    else:  # the failed chain: benchmark gone, entrypoint left waiting
        assert wait_for(lambda: "benchmark exited" in chains.log_text("setup.log"), timeout=30)
    old = set(chains.bench_pids() + chains.entry_pids())
    assert old
    fleet = write_fleet(tmp_path, chains, mode, instance_table(sshd, chains))

    refused = cli(tmp_path, "restart", "box1", "--yes", "--read-only", "--fleet", str(fleet))
    assert refused.returncode == 2 and "read-only" in one_line_error(refused)
    assert all(alive(p) for p in old), "a refused restart touches nothing"

    result = cli(tmp_path, "restart", "box1", "--yes", "--fleet", str(fleet))

    assert result.returncode == 0, result.stderr
    # what it stops first (the plan, for the record), then the outcome as the last line
    last = result.stdout.strip().splitlines()[-1]
    m = re.fullmatch(r"box1: restarted: stopped (\d+) processes, started pid (\d+)", last)
    assert m, result.stdout
    new_pid = int(m.group(2))
    assert int(m.group(1)) >= 1
    assert new_pid not in old
    assert wait_for(lambda: all(not alive(p) for p in old), timeout=10), [p for p in old if alive(p)]
    new_entry = wait_for(chains.entry_pids, timeout=30)
    assert new_entry and not set(new_entry) & old
    assert all(os.getpgid(p) == new_pid for p in new_entry), "the new chain runs in the started process group"
    if mode == "run":
        assert wait_for(lambda: len(chains.bench_pids()) >= 2, timeout=30)
        assert not set(chains.bench_pids()) & old
    assert "benchmark restarted" in chains.log_text("restart.log")

    records = [r for r in audit_records(tmp_path) if r["action"] == "restart"]
    assert [(r["instance"], r["outcome"]) for r in records] == [("box1", "refused"), ("box1", "ok")]
    ok = records[-1]
    assert ok["host"] == f"{sshd.user}@127.0.0.1:{sshd.port}"
    assert [r["origin"] for r in records] == ["cli", "cli"]  # who asked: the command line (tui, mcp elsewhere)
    assert ok["result"]["started"]["pid"] == new_pid
    assert old <= set(ok["result"]["stopped"]) | set(ok["result"]["killed"])


def test_restart_whose_benchmark_dies_at_once_says_so_with_its_log_and_exits_1(
    sshd: Sshd, chains: Harness, tmp_path: Path
) -> None:
    start = ["/bin/sh", "-c", "echo loading params; echo 'error: /data/params missing' >&2; exit 3"]
    fleet = write_fleet(tmp_path, chains, "run", instance_table(sshd, chains), start=start)

    result = cli(tmp_path, "restart", "box1", "--yes", "--fleet", str(fleet))

    assert result.returncode == 1, result.stdout + result.stderr
    assert "restarted" not in result.stdout
    err = result.stderr
    assert "Traceback" not in err
    assert "box1: restart failed: the benchmark died at once" in err and "exit code 3" in err, err
    assert "loading params\n" in err and "error: /data/params missing\n" in err, err
    records = [r for r in audit_records(tmp_path) if r["action"] == "restart"]
    assert [(r["instance"], r["outcome"]) for r in records] == [("box1", "failed")]
    assert records[0]["result"]["started"]["alive"] is False
    assert records[0]["result"]["started"]["returncode"] == 3


# -- status -------------------------------------------------------------------------------------------
def test_status_reports_a_dead_host_without_stalling_the_live_one(sshd: Sshd, chains: Harness, tmp_path: Path) -> None:
    chains.start("run")
    assert wait_for(lambda: len(chains.bench_pids()) >= 2, timeout=30)
    closed = free_port()  # nothing listens there
    fleet = write_fleet(
        tmp_path,
        chains,
        "run",
        instance_table(sshd, chains, "live"),
        instance_table(sshd, chains, "dead", port=closed),
    )
    timeout = 5.0

    started = time.monotonic()
    result = cli(tmp_path, "status", "--json", "--fleet", str(fleet), "--timeout", str(timeout))
    elapsed = time.monotonic() - started

    assert result.returncode == 1, result.stderr  # not every instance is ok
    assert elapsed < timeout + 10, f"status took {elapsed:.1f} s with --timeout {timeout:g}"
    rows = {row["name"]: row for row in json.loads(result.stdout)["instances"]}
    assert set(rows) == {"live", "dead"}
    assert rows["live"]["link"] == "connected"
    assert rows["live"]["status"] == "ok", rows["live"]
    assert rows["dead"]["status"] == "unreachable", rows["dead"]
    assert rows["dead"]["address"] == f"{sshd.user}@127.0.0.1:{closed}"
    assert "refused" in rows["dead"]["detail"].lower(), rows["dead"]
