"""``serve`` at fleet scale: the real ``fleet-console serve`` against scale.py's replay host, /metrics scraped.

The replay host (bench/scale.py) serves N SSH instances from a recording of the real agent; ``fleet-console
serve --metrics-port P`` (a process of its own, with its link workers) watches them with no UI, which keeps every
agent at full detail (the exporter wants every stream). Once every GPU is in /metrics, the scrape runs every
``--every`` seconds for ``--scrapes`` scrapes: the CPU of serve plus its workers and of the replay host over that
window (% of one core), each scrape's wall time, serve's RSS.

    .venv/bin/python bench/serve_scale.py --hosts 1000 --recording REC [--every 15] [--scrapes 4] [--no-detail]
                                         [--record-seconds 30]  (without --recording: one made first)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from common import MB, ROOT, bench_parser, console_env, cpu_pct, print_lines, raise_nofile, replay_fleet
from scale import GPUS, record

import console  # noqa: F401


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(port: int) -> tuple[float, bytes]:
    t0 = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
        body = answer.read()
    return time.monotonic() - t0, body


def gpus_in(body: bytes) -> int:
    return len(re.findall(rb"^fleet_gpu_utilization_ratio\{", body, re.M))


def run(hosts: int, recording: Path, every: float, scrapes: int, detail: bool, timeout: float) -> dict[str, object]:
    import psutil

    work = Path(tempfile.mkdtemp(prefix="fleet-serve-scale-"))
    out: dict[str, object] = {"hosts": hosts}
    with replay_fleet(hosts, recording, work, detail=detail) as fleet:
        port = free_port()
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        proc = subprocess.Popen([sys.executable, "-m", "console", "serve", "--fleet", str(fleet.fleet_path),
                                 "--metrics-port", str(port), "--no-history", "--read-only"],
                                cwd=str(ROOT), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            t0 = time.monotonic()
            while time.monotonic() - t0 < timeout:
                try:
                    if gpus_in(scrape(port)[1]) >= hosts * GPUS:
                        break
                except OSError:
                    pass
                time.sleep(1.0)
            out["all_gpus_s"] = round(time.monotonic() - t0, 1)
            time.sleep(5.0)  # past the connect storm
            me = psutil.Process(proc.pid)
            replay = psutil.Process(fleet.pid)
            procs = [me, *me.children(recursive=True)]
            c0, r0, w0 = [p.cpu_times() for p in procs], replay.cpu_times(), time.monotonic()
            walls = []
            for i in range(scrapes):
                time.sleep(every if i else 1.0)
                walls.append(scrape(port)[0] * 1000)
            wall = time.monotonic() - w0
            c1, r1 = [p.cpu_times() for p in procs], replay.cpu_times()
            out["serve_cpu_pct"] = round(sum(cpu_pct(a, b, wall) for a, b in zip(c0, c1, strict=True)), 1)
            out["replay_cpu_pct"] = round(cpu_pct(r0, r1, wall), 1)
            out["scrape_p50_ms"] = round(sorted(walls)[len(walls) // 2], 1)
            out["scrape_max_ms"] = round(max(walls), 1)
            out["serve_rss_mb"] = round(sum(p.memory_info().rss for p in procs) / MB)
            out["load_avg"] = round(os.getloadavg()[0], 2)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    return out


LINES = [
    ("all_gpus_s", "all {hosts} hosts' GPUs in /metrics", "s"),
    ("serve_cpu_pct", "serve CPU (its process + link workers)", "% of a core"),
    ("replay_cpu_pct", "replay host CPU", "% of a core"),
    ("scrape_p50_ms", "/metrics scrape p50", "ms"),
    ("scrape_max_ms", "/metrics scrape max", "ms"),
    ("serve_rss_mb", "serve RSS (process + workers)", "MB"),
    ("load_avg", "load average (1 min) at the end", ""),
]


def main() -> int:
    p = bench_parser(__doc__)
    p.add_argument("--hosts", type=int, default=1000)
    p.add_argument("--recording", help="a recording from scale.py (else one is made, 30 s)")
    p.add_argument("--record-seconds", type=float, default=30.0, help="the recording's length when one is made")
    p.add_argument("--every", type=float, default=15.0, help="seconds between scrapes")
    p.add_argument("--scrapes", type=int, default=4)
    p.add_argument("--no-detail", action="store_true", help="the replay host refuses op detail")
    p.add_argument("--all-timeout", type=float, default=300.0)
    args = p.parse_args()
    raise_nofile()
    console_env()
    recording = Path(args.recording) if args.recording else Path(tempfile.mkdtemp()) / "recording.jsonl"
    if not args.recording:
        record(args.record_seconds, recording)
    r = run(args.hosts, recording, args.every, args.scrapes, not args.no_detail, args.all_timeout)
    print_lines(r, LINES)
    return 0


if __name__ == "__main__":
    sys.exit(main())
