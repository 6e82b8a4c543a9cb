"""Words the operator reads: counts agree with their nouns, code names are words, a code is said once, the
regexes of fleet.toml stay out of `history`, "connection lost" is said once (issue 35 item 17)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict

import pytest

from console.agent.diagnosis import diagnose as dg
from console.agent.wire.wording import lost_reason, plural
from console.commands import format_diagnosis
from console.core.state import InstanceState
from console.inventory import Instance
from console.monitor.history_command import format_event
from tests.support.app import make_app, screen_text, wait_until
from widgets.gpu_panel import gpu_tab_lines


def rec(pid: int, ppid: int, cmdline: str, state: str = "S", cpu: float = 0.0) -> Dict[str, Any]:
    return {"pid": pid, "ppid": ppid, "cmdline": cmdline, "name": cmdline.split()[0].rsplit("/", 1)[-1],
            "state": state, "wchan": None, "cpu": cpu, "rss": 1 << 20, "start": time.time() - 600}


def one_bench_facts(tmp_path: Path) -> Dict[str, Any]:
    log = tmp_path / "bench.log"
    log.write_text("proof 1/10 done\n")
    return {
        "now": time.time(),
        "benchmark": {"match": ["cuzk-bench"], "entrypoint": ["entrypoint\\.sh"]},
        "processes": [rec(369, 1, "bash /entrypoint.sh"), rec(401, 369, "/opt/cuzk-bench --run", "R", 300.0)],
        "logs": [{"path": str(log), "first_line": 1, "size": log.stat().st_size, "mtime": time.time(),
                  "lines": log.read_text().splitlines()}],
        "files": [],
        "gpu": {"state": "ok", "devices": [{"index": 0, "util": 97}]},
    }


def test_plural_agrees_with_the_count() -> None:
    assert [plural(1, "GPU"), plural(2, "GPU"), plural(0, "instance"), plural(1, "process"), plural(3, "process")] \
        == ["1 GPU", "2 GPUs", "0 instances", "1 process", "3 processes"]


def test_diagnose_cli_says_healthy_once_and_no_process_es(tmp_path: Path) -> None:
    """`diagnose NAME` on a healthy run with one benchmark process: "healthy" once, "1 benchmark process"."""
    result = dg.analyze(one_bench_facts(tmp_path))
    assert result["verdict"]["code"] == "healthy", result
    text = format_diagnosis("gpu1", result)
    first = text.splitlines()[0]
    assert first.count("healthy") == 1, first
    assert "1 benchmark process running" in first, first
    steps = " | ".join(str(s.get("summary")) for s in result.get("steps") or [])
    assert "(es)" not in steps and "(s)" not in steps and "1 GPU" in steps and "1 GPUs" not in steps, steps


def test_history_prints_no_regexes_and_says_the_code_once() -> None:
    ev = {"ts": time.time(), "instance": "gpu1", "kind": "verdict", "status": "benchmark_not_running",
          "detail": "benchmark_not_running: no process matches (patterns: cuzk-bench, benchmark\\.sh)",
          "data": {"severity": "error", "findings": [
              {"severity": "error", "code": "hung", "summary": "hung: no progress for 4m 14s (patterns: a.*b)",
               "evidence": []}]}}
    text = format_event(ev)
    assert "patterns" not in text and "\\." not in text, text
    assert text.count("benchmark_not_running") == 1 and text.count("hung") == 1, text


def test_gpu_tab_names_the_state_in_words() -> None:
    inst = InstanceState(Instance(name="gpu1", host="localhost"))
    inst.gpu_state = "no_gpu"
    head = gpu_tab_lines(inst, now=time.time())[0][0].plain
    assert "no GPU" in head and "no_gpu" not in head, head


@pytest.mark.parametrize("reason,said", [("Connection lost", "connection lost"),
                                         ("Connection reset by peer", "connection lost: Connection reset by peer"),
                                         ("", "connection lost")])
def test_connection_lost_is_said_once(reason: str, said: str) -> None:
    assert lost_reason(reason) == said


async def test_header_says_1_instance(tmp_path: Path) -> None:
    app = make_app(tmp_path, names=("solo",), gpus=1)
    async with app.run_test(size=(120, 30)) as pilot:
        text = await wait_until(pilot, lambda: "instance" in screen_text(app) and screen_text(app), what="header")
        header = text.splitlines()[0]
        assert " 1 instance " in header + " " and "1 instances" not in header, header
