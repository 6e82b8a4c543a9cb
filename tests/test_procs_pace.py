"""The agent reads the process table every ``procs_interval`` s (the GPUs every ``interval``), and at once when a
process starts or ends: a new process shows within a sample, any other change within the table's period.

Run in a PID namespace with its own /proc: there only this test's processes start and end (on the host, other
tests' processes would rightly make the agent read the table at every sample)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from console.agent.wire import config as agent_config
from tests.support.procs import pid_namespace_argv

ROOT = Path(__file__).resolve().parent.parent
# works (~10 % of a core) for 4.5 s, then stops itself (state T): no process starts or ends for it
WORKING = ("import os, signal, time\nend = time.monotonic() + 4.5\nwhile time.monotonic() < end:\n"
           "    time.sleep(0.05)\n    sum(range(300000))\nos.kill(os.getpid(), signal.SIGSTOP)\n")


@pytest.mark.slow
def test_a_new_process_shows_at_once_and_other_changes_at_the_table_pace() -> None:
    cfg = {"interval": 0.25, "procs_interval": 5.0, "log_interval": 0.25, "heartbeat_interval": 1.0, "logs": [],
           "watch_dirs": [], "gpu": {"simulate": {"gpus": 1}}}
    script = (
        f"(sleep 1; exec {sys.executable} -c {shlex.quote(WORKING)}) & "  # (new: the sampler reads it every sample)
        "(sleep 3; exec sleep 300) & "  # a new process 3 s in, long after the first reading of the table
        f"exec {sys.executable} -m console.agent --no-stdin --max-seconds 20 --config {agent_config.encode(cfg)}"
    )
    try:
        proc = subprocess.Popen([*pid_namespace_argv(), "sh", "-c", script], cwd=str(ROOT), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    except FileNotFoundError:
        pytest.skip("no unshare (util-linux)")
    frames: list[dict] = []

    def read() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            frames.append(json.loads(line))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        time.sleep(12.0)
    finally:
        proc.kill()
        proc.wait()
        reader.join(5)
    if not frames and b"unshare" in proc.stderr.read():  # type: ignore[union-attr]
        pytest.skip("cannot make a PID namespace here")
    gpu = [f for f in frames if f["type"] == "gpu"]
    procs = [f for f in frames if f["type"] == "procs"]
    assert procs and procs[0]["full"], frames[:3]
    working = next(r["pid"] for f in procs[1:] for r in f.get("upsert", []) if "sum(range" in r["cmdline"])
    seconds = gpu[-1]["ts"] - procs[0]["ts"]
    assert len([f for f in gpu if f["ts"] >= procs[0]["ts"]]) >= seconds / 0.25 * 0.7  # the GPUs: every 0.25 s
    # the new process (started ~3 s in): at the next sample, not at the table's next reading (~6 s in)
    shown = next(f["ts"] - procs[0]["ts"] for f in procs[1:] for r in f.get("upsert", [])
                 if r["cmdline"] == "sleep 300")
    assert shown < 4.0, shown
    # a change with no process started or ended (the working one stopping itself ~5.5 s in): at the table's
    # next reading, within its 5 s
    working = next(r["pid"] for f in procs[1:] for r in f.get("upsert", []) if "sum(range" in r["cmdline"])
    stopped = next((f["ts"] - procs[0]["ts"] for f in procs[1:] for r in f.get("upsert", [])
                    if r["pid"] == working and r["state"] == "T"), None)
    assert stopped is not None and stopped < 5.5 + 5.0 + 0.5, (stopped, [f for f in procs[1:]])
