"""Ten thousand GPUs through one Prometheus: the console's CPU per poll interval.

1,250 hosts x 8 GPUs in DCGM-exporter's exposition format (tests/test_prometheus_source.py's endpoint), scraped by
a real ``prometheus`` on 127.0.0.1 (temp data dir); the console side is ``PrometheusSource`` feeding a
``FleetState`` (no UI): per poll, wall time and this process's CPU (query all metrics, build frames, apply).

    .venv/bin/python bench/prom_bench.py [--hosts 1250] [--polls 10] [--interval 5]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx2  # noqa: E402
import psutil  # noqa: E402

from console.inventory.records import SourceSpec  # noqa: E402
from console.sources.prometheus import PrometheusSource  # noqa: E402
from console.state import FleetState  # noqa: E402
from tests.test_prometheus_source import Exporter, exposition, start_prometheus, stop  # noqa: E402


async def run(hosts: int, polls: int, interval: float, url: str) -> None:
    state = FleetState()
    source = PrometheusSource(SourceSpec(prometheus=url, interval=interval, timeout=10.0), state, lambda k, v: None)
    me = psutil.Process()
    cpu, wall = [], []
    stalls: list[float] = []  # the event loop's longest stall per poll: what a key press would wait

    async def ticker() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.005)
            now = time.monotonic()
            stalls[-1] = max(stalls[-1], now - last - 0.005) if stalls else 0.0
            last = now

    tick = asyncio.get_running_loop().create_task(ticker())
    async with httpx2.AsyncClient() as client:
        for _ in range(polls):
            stalls.append(0.0)
            c0, t0 = me.cpu_times(), time.monotonic()
            await source.poll(client)
            c1, t1 = me.cpu_times(), time.monotonic()
            await asyncio.sleep(0.02)  # the ticker's last look at this poll
            cpu.append(c1.user + c1.system - c0.user - c0.system)
            wall.append(t1 - t0)
            await asyncio.sleep(max(0.0, interval - (t1 - t0)))
    gpus = sum(len(i.gpus) for i in state.instances.values())
    print(f"hosts={hosts} gpus={gpus} status={source.status} {source.detail}")
    print(f"poll wall p50 {statistics.median(wall) * 1000:.0f} ms, max {max(wall) * 1000:.0f} ms")
    print(f"console CPU per poll p50 {statistics.median(cpu) * 1000:.0f} ms, max {max(cpu) * 1000:.0f} ms "
          f"= {100 * statistics.median(cpu) / interval:.1f} % of a core at a {interval:g} s interval")
    tick.cancel()
    print(f"event loop's longest stall per poll p50 {statistics.median(stalls) * 1000:.0f} ms, "
          f"max {max(stalls) * 1000:.0f} ms (a key press waits this long)")
    print(f"RSS {me.memory_info().rss / 2**20:.0f} MB")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=int, default=1250)
    p.add_argument("--polls", type=int, default=10)
    p.add_argument("--interval", type=float, default=5.0)
    args = p.parse_args()
    if shutil.which("prometheus") is None:
        print("no prometheus binary (Debian: apt-get install prometheus)", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="fleet-prom-bench-"))
    exporter = Exporter(exposition(args.hosts))
    proc, url = start_prometheus(tmp, [exporter.port], scrape=args.interval)  # dcgm-exporter's 80k lines
    try:
        want = args.hosts * 8
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                r = httpx2.get(url + "/api/v1/query", params={"query": "count(DCGM_FI_DEV_GPU_UTIL)"}, timeout=5)
                res = r.json()["data"]["result"]
                if res and int(float(res[0]["value"][1])) >= want:
                    break
            except (httpx2.HTTPError, ValueError, KeyError):
                pass
            time.sleep(1)
        asyncio.run(run(args.hosts, args.polls, args.interval, url))
    finally:
        stop(proc)
        exporter.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
