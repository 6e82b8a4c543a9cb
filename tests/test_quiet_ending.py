"""A run whose benchmark is gone and whose log ends quietly, in closing words no table knows, is ``finished`` with
"benchmark not running" as the alternative; a log that ends mid-work or in a failure of any wording is not
(console/agent/diagnosis/quiet_ending.py). Pure: ``analyze`` on built facts, real files for the logs."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from console.agent.diagnosis import diagnose as dg
from console.agent.diagnosis.alternatives import alternatives
from tests.test_diagnose import logs_of, rec

# closing words of programs the completion table does not name (a report's note, a summary of files, a plot)
QUIET_ENDINGS = [
    "Matrix done for 6 devices.\n\nNOTE: The reported results may not reflect the full capabilities of the "
    "platform.\nPerformance can vary with software drivers, hardware clocks, and system topology.\n",
    "[render] frame 0240 -> out/0240.exr\n[render] sequence out/0001-0240.exr, 240 frames, 41m12s\n",
    "Peak memory 61.2 GiB; 0 errors, no warnings\nPlots in results/plots/, tables in results/tables/\n",
    "mAP@0.5: 0.612  mAP@0.5:0.95: 0.431\nReport: runs/val/exp7/report.html\n",
]
# the same logs' endings when the work stopped in the middle, or in a failure worded as no signature words it
NOT_QUIET = {
    "an announced step": "Matrix done for 6 devices.\nLoading checkpoint shards...\n",
    "a step short of its total": "step 1200/5000 | loss 2.311 | lr 3.0e-4\n",
    "a training step's figures": "[train] it 8400 loss=1.982 grad_norm=0.71\n",
    "a refusal in other words": "Matrix done for 6 devices.\nE1207 12:00:01 upload to s3://b/x refused by peer\n",
    "a level word": "Matrix done for 6 devices.\nW1207 the writer crashed, results may be partial\n",
}


def _facts(tmp_path: Path, text: str, procs: Optional[List[Dict[str, Any]]] = None) -> Dict[str, Any]:
    log = tmp_path / "bench.log"
    log.write_text(text)
    now = time.time()
    os.utime(log, (now - 30, now - 30))
    return {"now": now, "benchmark": {"match": [r"bench\.py"], "entrypoint": [r"entrypoint\.sh"]},
            "stall_seconds": 60, "processes": procs or [], "logs": logs_of(tmp_path), "files": [],
            "gpu": {"state": "ok", "devices": [{"index": 0, "util": 0, "mem_used": 0, "power": 20.0}]}}


@pytest.mark.parametrize("text", QUIET_ENDINGS)
def test_a_quiet_ending_is_finished_with_not_running_as_the_alternative(tmp_path: Path, text: str) -> None:
    result = dg.analyze(_facts(tmp_path, text))
    assert result["verdict"]["code"] == "finished", result["verdict"]
    assert "ends quietly" in result["verdict"]["summary"]
    last = [line for line in text.splitlines() if line.strip()][-1]
    assert last in result["findings"][0]["evidence"][-1]["text"]
    assert "benchmark_not_running" in [a["code"] for a in alternatives(result)]


@pytest.mark.parametrize("why", sorted(NOT_QUIET))
def test_an_ending_mid_work_or_in_a_failure_is_not_finished(tmp_path: Path, why: str) -> None:
    assert dg.analyze(_facts(tmp_path, NOT_QUIET[why]))["verdict"]["code"] != "finished"


def test_an_entrypoint_still_alive_is_not_a_finished_run(tmp_path: Path) -> None:
    procs = [rec(369, 1, "bash /entrypoint.sh", wchan="do_wait", start=time.time() - 900)]
    assert dg.analyze(_facts(tmp_path, QUIET_ENDINGS[0], procs))["verdict"]["code"] != "finished"


def test_no_log_at_all_is_not_a_finished_run(tmp_path: Path) -> None:
    facts = _facts(tmp_path, QUIET_ENDINGS[0])
    facts["logs"] = []
    assert dg.analyze(facts)["verdict"]["code"] == "benchmark_not_running"
