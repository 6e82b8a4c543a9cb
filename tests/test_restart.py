"""Benchmark restarts on real process chains: stop by process group (TERM, then KILL), start detached."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from console.agent.actions import restart as rs
from console.agent.ops import OPS
from tests.fixtures.chains.harness import Harness, alive, cmdline, process_group, wait_for


def _running(chains: Harness) -> bool:
    return len(chains.bench_pids()) >= 2 and len(chains.entry_pids()) >= 1


def test_restart_stops_the_chain_by_group_and_starts_it_with_new_pids(chains: Harness) -> None:
    chains.start("run")
    assert wait_for(lambda: _running(chains), timeout=30)
    old = set(chains.bench_pids() + chains.entry_pids())
    old_groups = {process_group(p) for p in old}
    config = chains.config("run")

    result = rs.restart(config)

    assert old <= set(result["stopped"]) | set(result["killed"])
    assert all(not alive(p) for p in old)
    started = result["started"]
    assert started["alive"] and started["argv"] == chains.argv("run")
    assert started["pgid"] == started["pid"]  # a new session and group
    assert started["pgid"] not in old_groups
    assert result["log"] == str(chains.logdir / "restart.log")
    assert "benchmark restarted" in chains.log_text("restart.log")
    assert wait_for(lambda: _running(chains), timeout=30)
    new = set(chains.bench_pids() + chains.entry_pids())
    assert not (new & old)
    assert all(alive(p) for p in new)
    assert all(process_group(p) == started["pgid"] for p in new)
    assert result["killed"] == []


def test_stop_escalates_to_kill_for_a_process_that_ignores_term(chains: Harness) -> None:
    chains.start("stubborn")
    assert wait_for(lambda: _running(chains), timeout=30)
    # wait until the daemon has installed its SIGTERM handler (it logs after that)
    assert wait_for(lambda: "listening" in chains.log_text("cuzk-bench-daemon.log"), timeout=30)
    daemon = [p for p in chains.bench_pids() if "cuzk-daemon" in cmdline(p)]
    assert daemon
    config = chains.config("stubborn", stop_timeout=1.0)

    result = rs.stop_benchmark(config)

    assert set(daemon) <= set(result["killed"])
    assert result["survivors"] == []
    assert chains.bench_pids() == [] and chains.entry_pids() == []
    assert all(not alive(p) for p in daemon)


def test_a_process_in_the_agents_own_group_is_signalled_alone(chains: Harness) -> None:
    # started without a new session: it shares this (the "agent's") process group
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).parent / "fixtures" / "chains" / "cuzk-daemon"), "run",
         str(chains.logdir)],
        stdin=subprocess.DEVNULL,
    )
    chains.procs.append(proc)
    assert wait_for(lambda: proc.pid in chains.bench_pids(), timeout=30)
    assert os.getpgid(proc.pid) == os.getpgrp()
    result = rs.stop_benchmark(chains.config())
    assert proc.pid in result["stopped"]
    assert result["groups"] == []  # no killpg on our own group
    assert proc.wait(timeout=10) is not None
    assert alive(os.getpid())


def test_restart_with_a_start_string_through_sh(chains: Harness) -> None:
    start = " ".join(shlex.quote(a) for a in chains.argv("run"))
    result = rs.restart(chains.config(start=start))
    assert result["stopped"] == [] and result["killed"] == []
    assert result["started"]["argv"] == ["/bin/sh", "-c", start]
    assert wait_for(lambda: _running(chains), timeout=30)


def test_restart_without_a_start_command_is_refused_before_stopping(chains: Harness) -> None:
    chains.start("run")
    assert wait_for(lambda: _running(chains), timeout=30)
    before = chains.bench_pids()
    with pytest.raises(ValueError, match="no benchmark start command"):
        rs.restart(chains.config(start=None))
    assert set(before) <= set(chains.bench_pids())


def test_a_start_that_dies_at_once_is_reported(chains: Harness) -> None:
    result = rs.restart(chains.config(start=["/bin/sh", "-c", "echo cannot start; exit 3"]), check_seconds=5.0)
    assert result["started"]["alive"] is False
    assert result["started"]["returncode"] == 3
    assert "exited right after start" in result["error"]
    assert "cannot start" in chains.log_text("restart.log")


def test_never_targets_protected_pids(chains: Harness) -> None:
    protected = rs.protected_pids()
    assert {1, os.getpid(), os.getppid()} <= protected
    procs = [{"pid": os.getpid(), "ppid": os.getppid(), "cmdline": "cuzk-daemon run " + str(chains.logdir),
              "state": "S"},
             {"pid": 1, "ppid": 0, "cmdline": "cuzk-bench run " + str(chains.logdir), "state": "S"}]
    assert rs.find_targets(chains.config(), procs) == []
    assert rs.stop_processes(procs, timeout=0.1) == {"stopped": [], "killed": [], "survivors": [], "groups": []}


def test_restart_and_stop_ops(chains: Harness) -> None:
    class FakeAgent:
        config = chains.config("run")

    assert {"restart", "stop_benchmark"} <= set(OPS)
    data = OPS["restart"](FakeAgent(), {})
    assert data["started"]["alive"]
    assert wait_for(lambda: _running(chains), timeout=30)
    pids = set(chains.bench_pids())
    data = OPS["stop_benchmark"](FakeAgent(), {})
    assert pids <= set(data["stopped"])
    assert wait_for(lambda: not chains.bench_pids(), timeout=10)


def test_a_start_that_dies_at_once_brings_the_tail_of_its_log(chains: Harness) -> None:
    (chains.logdir / "restart.log").write_text("a line from an older run\n")
    start = ["/bin/sh", "-c", "echo loading params; echo 'error: /data/params missing' >&2; exit 3"]
    result = rs.restart(chains.config(start=start), check_seconds=5.0)
    started = result["started"]
    assert started["alive"] is False and started["returncode"] == 3
    # this start's lines only: not the older run's, not the agent's own restart marker
    assert started["log_tail"] == ["loading params", "error: /data/params missing"]
    assert "died" in result["error"]
