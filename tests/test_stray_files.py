"""Stray files do not decide the verdict (issue 35.2): the watch dirs are searched at their top only (``DIR/**``
for below), files found there and last written before the run began are not its evidence, and a stray file's
"done" never makes the ``[benchmark] log``'s own failure history. The gatherer on real files and a real process,
and ``fleet-console diagnose --json`` against the real agent over a real sshd."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest

from console.agent.diagnosis import gather as gather_mod
from console.agent.wire import config as agent_config
from tests.fixtures.chains.harness import Harness, wait_for
from tests.support.sshd import Sshd
from tests.test_cli_over_sshd import cli, diagnose_until, instance_table, toml, write_fleet

OTHER_PROGRAM = "2026-01-01T00:00:00Z ERROR open /tmp/x/cache.lock: Permission denied (os error 13)\n"


def age(path: Path, seconds: float) -> None:
    when = time.time() - seconds
    os.utime(path, (when, when))


@pytest.fixture
def entrypoint(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A real entrypoint (``bash stray-entry.sh TMP``) that has just started and runs no benchmark yet."""
    script = tmp_path / "stray-entry.sh"
    script.write_text("#!/bin/bash\nsleep 100000 &\nwait\n")
    proc = subprocess.Popen(["bash", str(script), str(tmp_path)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        yield proc
    finally:
        os.killpg(proc.pid, 9)
        proc.wait(timeout=10)


def entry_pattern(tmp_path: Path) -> str:
    return r"stray-entry\.sh " + re.escape(str(tmp_path))


def logs_read(config: Dict[str, Any]) -> set[str]:
    facts = gather_mod.gather(agent_config.merged(config), include_dmesg=False, measure_seconds=0.0)
    return {log["path"] for log in facts["logs"]}


# -- the gatherer on real files ------------------------------------------------------------------------
def test_a_watch_dir_is_searched_at_its_top_unless_it_ends_in_double_star(tmp_path: Path) -> None:
    watch = tmp_path / "watch"
    (watch / "other-program").mkdir(parents=True)
    mine, stray = watch / "run.log", watch / "other-program" / "out.log"
    mine.write_text("step 1\n")
    stray.write_text(OTHER_PROGRAM)
    assert logs_read({"watch_dirs": [str(watch)]}) == {str(mine)}
    assert logs_read({"watch_dirs": [str(watch) + "/**"]}) == {str(mine), str(stray)}


def test_files_last_written_before_the_run_began_are_not_read(
    tmp_path: Path, entrypoint: subprocess.Popen[bytes]
) -> None:
    watch = tmp_path / "watch"
    watch.mkdir()
    old, fresh, named = watch / "old.log", watch / "fresh.log", watch / "bench.log"
    for path in (old, fresh, named):
        path.write_text(OTHER_PROGRAM)
    age(old, 31 * 60)
    age(named, 31 * 60)  # the operator named it: read whatever its age
    config = {"watch_dirs": [str(watch)], "benchmark": {"entrypoint": [entry_pattern(tmp_path)], "log": str(named)}}
    assert wait_for(lambda: logs_read(config) == {str(fresh), str(named)}, timeout=10)
    config["benchmark"]["entrypoint"] = []  # no run known: every recent file counts
    assert logs_read(config) == {str(old), str(fresh), str(named)}


# -- diagnose over a real sshd --------------------------------------------------------------------------
def test_a_stray_in_a_subdirectory_does_not_fail_a_healthy_run(sshd: Sshd, chains: Harness, tmp_path: Path) -> None:
    chains.start("run")
    assert wait_for(chains.bench_pids, timeout=30)
    stray = chains.logdir / "other-program" / "out.log"
    stray.parent.mkdir()
    stray.write_text(OTHER_PROGRAM)  # written during the run, by something else
    fleet = write_fleet(tmp_path, chains, "run", instance_table(sshd, chains))
    _, data = diagnose_until(tmp_path, fleet, "healthy", "gpu_idle", "permission_denied")
    assert data["verdict"]["code"] != "permission_denied", data["verdict"]
    assert str(stray) not in str(data)


def fleet_file(tmp_path: Path, sshd: Sshd, watch: Path, bench: Dict[str, Any]) -> Path:
    lines = ["[benchmark]"] + [f"{k} = {toml(v)}" for k, v in bench.items()] + [""]
    lines.append(instance_table(sshd, Harness(tmp_path), watch_dirs=[str(watch)], logs=[]))
    path = tmp_path / "fleet.toml"
    path.write_text("\n".join(lines))
    assert cli(tmp_path, "check", "--fleet", str(path)).returncode == 0
    return path


def diagnose(tmp_path: Path, fleet: Path) -> tuple[int, Dict[str, Any]]:
    result = cli(tmp_path, "diagnose", "box1", "--json", "--fleet", str(fleet), "--timeout", "20")
    assert result.returncode in (0, 1), result.stderr
    return result.returncode, json.loads(result.stdout)


def test_an_old_stray_does_not_fail_a_run_that_is_starting(
    sshd: Sshd, tmp_path: Path, entrypoint: subprocess.Popen[bytes]
) -> None:
    watch = tmp_path / "watch"
    watch.mkdir()
    stray = watch / "other.log"
    stray.write_text(OTHER_PROGRAM)
    age(stray, 31 * 60)  # another program's output, from before this run
    fleet = fleet_file(tmp_path, sshd, watch, {"match": [r"no-such-bench " + re.escape(str(tmp_path))],
                                                "entrypoint": [entry_pattern(tmp_path)]})
    status, data = diagnose(tmp_path, fleet)
    assert (status, data["verdict"]["code"]) == (0, "starting"), data["verdict"]
    assert str(stray) not in str(data["findings"])


def test_a_stray_done_does_not_make_the_benchmark_logs_disk_full_history(sshd: Sshd, tmp_path: Path) -> None:
    watch = tmp_path / "watch"
    watch.mkdir()
    bench_log = watch / "benchmark-full.log"
    bench_log.write_text("proof 1 done\nwriting proof 2 to /data/out\n"
                         "Error: failed to write /data/out/proof-2.bin: No space left on device (os error 28)\n")
    age(bench_log, 5)
    stray = watch / "other-tool.log"
    stray.write_text("syncing mirrors\nAll done.\n")  # another program finished, just after
    fleet = fleet_file(tmp_path, sshd, watch, {"match": [r"no-such-bench " + re.escape(str(tmp_path))],
                                                "log": str(bench_log)})
    status, data = diagnose(tmp_path, fleet)
    assert (status, data["verdict"]["code"]) == (1, "disk_full"), data["verdict"]
    assert "before the run finished" not in data["verdict"]["summary"]
    evidence = next(f for f in data["findings"] if f["code"] == "disk_full")["evidence"]
    assert any(e["path"] == str(bench_log) and e["line"] == 3 for e in evidence)
