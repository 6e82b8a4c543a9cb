"""The agent's action journal: bounded on disk, and never the reason an action goes unanswered.

A host's journal collects one entry per restart, from every console, for the host's life. It must be cut back when
it passes its bound (it once could not be: from then on every restart on that host hung unanswered).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from console.agent.actions import journal as journal_mod
from console.agent.actions.journal import Journal

ROOT = Path(__file__).resolve().parent.parent
BIG = {"stopped": list(range(100, 140)), "log": "/tmp/benchmark-full.log", "note": "x" * 400}


def _grow_past_the_bound(path: Path, count: int) -> None:
    """Entries appended the way an old agent wrote them, without any compaction: past ``MAX_BYTES``."""
    with path.open("a") as fh:
        for i in range(count):
            entry = {"id": "old%05d" % i, "op": "restart", "state": "done", "ok": True, "data": BIG}
            fh.write(json.dumps(entry) + "\n")
    assert path.stat().st_size > journal_mod.MAX_BYTES


def test_a_journal_past_its_bound_is_cut_back_to_the_last_ids(tmp_path: Path) -> None:
    path = tmp_path / "journal-box1.jsonl"
    _grow_past_the_bound(path, 700)
    journal = Journal(str(path))
    journal.begin("new1", "restart")
    journal.finish("new1", "restart", True, data={"started": {"pid": 4242, "alive": True}})

    assert path.stat().st_size <= journal_mod.MAX_BYTES
    fresh = Journal(str(path))  # what the next agent (or a console asking after a link drop) reads
    got = fresh.get(["new1", "old00699", "old%05d" % (700 - journal_mod.KEEP + 1), "old00000"])
    assert got["new1"] is not None and got["new1"]["data"]["started"]["pid"] == 4242
    assert got["old00699"] is not None and got["old00699"]["data"] == BIG
    assert got["old%05d" % (700 - journal_mod.KEEP + 1)] is not None
    assert got["old00000"] is None  # beyond the last KEEP ids


def test_many_actions_keep_the_file_bounded(tmp_path: Path) -> None:
    path = tmp_path / "journal-box1.jsonl"
    journal = Journal(str(path))
    for i in range(900):
        journal.begin("a%04d" % i, "restart")
        journal.finish("a%04d" % i, "restart", True, data=BIG)
        assert path.stat().st_size <= journal_mod.MAX_BYTES + 2048
    assert Journal(str(path)).get(["a0899"])["a0899"]["state"] == "done"


def test_an_agent_with_a_journal_past_its_bound_still_answers_its_actions(tmp_path: Path) -> None:
    """A real agent process, its journal grown by months of restarts: the action is run, answered and journaled."""
    state = tmp_path / "agent"
    state.mkdir()
    _grow_past_the_bound(state / "journal-box1.jsonl", 700)
    config = {"benchmark": {"match": ["no-such-benchmark-program-here"]}}
    requests = [
        {"id": 1, "op": "stop_benchmark", "args": {"action_id": "act-1"}},
        {"id": 2, "op": "journal", "args": {"ids": ["act-1"]}},
        {"id": 3, "op": "stop", "args": {}},
    ]
    stdin = "".join(json.dumps(r) + "\n" for r in [config, requests[0]])
    proc = subprocess.Popen(
        [sys.executable, "-m", "console.agent", "--config-stdin", "--state-dir", str(state), "--journal", "box1",
         "--max-seconds", "20"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(stdin.encode())
        proc.stdin.flush()
        results = {}
        for line in proc.stdout:
            frame = json.loads(line)
            if frame.get("type") != "result":
                continue
            results[frame["id"]] = frame
            if frame["id"] == 1:
                proc.stdin.write((json.dumps(requests[1]) + "\n").encode())
                proc.stdin.flush()
            elif frame["id"] == 2:
                proc.stdin.write((json.dumps(requests[2]) + "\n").encode())
                proc.stdin.flush()
                break
        assert results.get(1, {}).get("ok") is True, (results, proc.stderr)
        assert results[1]["data"]["stopped"] == []
        entry = results[2]["data"]["entries"]["act-1"]
        assert entry["state"] == "done" and entry["ok"] is True
        assert (state / "journal-box1.jsonl").stat().st_size <= journal_mod.MAX_BYTES
    finally:
        proc.kill()
        proc.wait()
