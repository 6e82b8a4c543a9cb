"""Agent cost benchmark: CPU per sample, RSS and wire bytes with 500 extra idle processes and 8 simulated GPUs.

Runs the real agent (``python -m console.agent``) at 1 Hz against the whole host's process table, once per
process backend (psutil, /proc), and compares with the per-poll way: a fresh ``python3 -c`` that imports
psutil and samples the process table once, per sample.  Takes about 70 s.

    .venv/bin/python bench/agent_bench.py [--samples 20] [--extra 500]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from console.agent import config as agent_config  # noqa: E402
from console.agent import nvml_sim  # noqa: E402

PER_POLL = (
    "import psutil; "
    "[p.info for p in psutil.process_iter(['pid','ppid','name','cmdline','status','cpu_times',"
    "'memory_info','create_time'])]"
)


def run_agent(backend: str, samples: int, warmup: int, state_file: str) -> dict:
    cfg = {
        "interval": 1.0,
        "heartbeat_interval": 5.0,
        "watch_dirs": [],
        "logs": [],
        "proc_backend": backend,
        "gpu": {"simulate": {"gpus": 8, "state_file": state_file}},
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "console.agent", "--config", agent_config.encode(cfg), "--no-stdin"],
        cwd=str(ROOT),
        stdout=subprocess.PIPE,
    )
    lines: queue.Queue = queue.Queue()

    def reader() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.put((time.monotonic(), len(line), json.loads(line)["type"]))
        lines.put(None)

    threading.Thread(target=reader, daemon=True).start()
    ps = psutil.Process(proc.pid)
    gpu_frames = 0
    window_bytes = 0
    t0 = cpu0 = None
    try:
        while True:
            item = lines.get(timeout=30)
            if item is None:
                raise RuntimeError("agent exited")
            when, size, kind = item
            if t0 is not None:
                window_bytes += size
            if kind != "gpu":
                continue
            gpu_frames += 1
            if gpu_frames == warmup:
                t0, window_bytes = when, 0
                times = ps.cpu_times()
                cpu0 = times.user + times.system
            elif gpu_frames == warmup + samples:
                times = ps.cpu_times()
                cpu1 = times.user + times.system
                elapsed = when - t0
                rss = ps.memory_info().rss
                break
    finally:
        proc.terminate()
        proc.wait(10)
    return {
        "backend": backend,
        "cpu_ms_per_sample": (cpu1 - cpu0) / samples * 1000.0,
        "rss_mb": rss / 1e6,
        "bytes_per_s": window_bytes / elapsed,
    }


def per_poll_cost(runs: int) -> float:
    """CPU ms of one fresh `python3 -c` that imports psutil and samples the process table once."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(runs):
        subprocess.run([sys.executable, "-c", PER_POLL], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu / runs * 1000.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--extra", type=int, default=500, help="idle sleep processes to add to the host")
    parser.add_argument("--backends", default="psutil,proc")
    args = parser.parse_args()
    sleepers = [subprocess.Popen(["sleep", "600"]) for _ in range(args.extra)]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            state_file = os.path.join(tmp, "gpus.json")
            # 8 busy GPUs, one benchmark process each (some of the sleepers stand in for them)
            gpus = [{"load": 95, "processes": [{"pid": sleepers[i].pid, "mem_mib": 20000 + i}]} for i in range(8)]
            nvml_sim.write_state(state_file, {"gpus": gpus})
            nprocs = len(psutil.pids())
            results = [run_agent(b, args.samples, args.warmup, state_file) for b in args.backends.split(",")]
            per_poll = per_poll_cost(5)
    finally:
        for p in sleepers:
            p.kill()
        for p in sleepers:
            p.wait()
    print(
        "host processes during the run: %d (%d extra idle sleeps); %d samples at 1 Hz; 8 simulated GPUs"
        % (nprocs, args.extra, args.samples)
    )
    print()
    print("| what | CPU ms/sample | RSS MB | wire B/s | vs per-poll |")
    print("|---|---|---|---|---|")
    for r in results:
        ratio = per_poll / r["cpu_ms_per_sample"]
        print(
            "| agent, %s backend | %.2f | %.1f | %.0f | %.0fx cheaper |"
            % (r["backend"], r["cpu_ms_per_sample"], r["rss_mb"], r["bytes_per_s"], ratio)
        )
    print("| per-poll `python3 -c` psutil snapshot | %.1f | - | - | 1x |" % per_poll)
    print()
    print("goals: < 5 ms CPU/sample, RSS < 60 MB, < 2048 B/s, >= 50x cheaper than per-poll")
    return 0


if __name__ == "__main__":
    sys.exit(main())
