"""``serve`` benchmark: 100 instances x 8 GPUs at 1 Hz through the monitoring, no UI.

Measures:
- CPU of the serve process (process CPU time / wall time, percent of one core) while synthetic frames go
  into the monitored fleet state at 1 Hz per instance (a GPU frame, a heartbeat every 5 s, a small procs
  update every 10 s), with history, the exporter and Prometheus scraping every 5 s. The links' SSH and JSON
  decoding are not included (as in bench/ui_bench.py);
- a ``/metrics`` scrape of that fleet over loopback HTTP: wall time per request (p50 / max), the time
  spent rendering it in the event loop, and its CPU time (the figure that does not depend on what else
  runs on the box);
- history growth: a simulated hour of that fleet written through ``History`` (real SQLite file, real
  minute aggregates), extrapolated to a day.

Goals (issue 16): CPU < 10 % of a core, scrape < 50 ms, history < 50 MB a day.

    .venv/bin/python bench/serve_bench.py [--seconds 30] [--instances 100] [--gpus 8] [--json]
"""

from __future__ import annotations

import asyncio
import random
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from common import Stopwatch, bench_parser, max_ms, median_ms, ms, print_goals, print_result, private_dir

from console.inventory import BenchmarkSpec, Fleet, Instance
from console.monitor.history import History
from console.monitor.monitoring import MonitoredController, Monitoring

private_dir("FLEET_CONSOLE_STATE_DIR", "fleet-serve-bench-")  # the history and audit paths read it when used

GIB = 2**30


class Frames:
    """Synthetic agent frames for one fleet (the shapes of docs/architecture.md)."""

    def __init__(self, instances: int, gpus: int) -> None:
        self.rng = random.Random(7)
        self.gpus = gpus
        self.names = ["bench-%03d" % i for i in range(instances)]

    def gpu(self, i: int, full: bool = False) -> dict:
        devices = []
        for k in range(self.gpus):
            dev = {"index": k, "util": self.rng.randint(0, 100), "mem_util": self.rng.randint(0, 100),
                   "mem_used": self.rng.randint(1, 79) * GIB, "temp": self.rng.randint(40, 85),
                   "power": round(self.rng.uniform(100, 700), 1), "sm_clock": 1800, "mem_clock": 1300}
            if full:
                dev.update(name="NVIDIA H100 80GB HBM3", uuid="GPU-%d-%d" % (i, k), mem_total=80 * GIB,
                           power_limit=700.0, procs=[{"pid": 200 + k, "mem": 10 * GIB}], lost=False, error=None)
            devices.append(dev)
        frame = {"type": "gpu", "ts": time.time(), "state": "ok", "full": full, "devices": devices}
        if full:
            frame.update(simulated=True, driver="550.54.15", message=None)
        return frame

    def procs_full(self) -> dict:
        procs = [self.proc(100, 1, "entrypoint.sh"), self.proc(101, 100, "cuzk-daemon")]
        procs += [self.proc(200 + k, 101, "cuzk-bench") for k in range(self.gpus)]
        procs += [self.proc(300 + k, 1, "helper") for k in range(20)]
        return {"type": "procs", "ts": time.time(), "full": True, "procs": procs}

    def proc(self, pid: int, ppid: int, name: str) -> dict:
        return {"pid": pid, "ppid": ppid, "name": name, "cmdline": "/usr/bin/%s --run" % name, "state": "S",
                "wchan": None, "cpu": self.rng.random() * 100, "rss": 500 * 2**20, "start": 1.0,
                "gpu_mem": 10 * GIB if name == "cuzk-bench" else None}


def fleet_of(frames: Frames) -> Fleet:
    bench = BenchmarkSpec(match=("cuzk-daemon", "cuzk-bench"))
    return Fleet(instances=[Instance(name=n, host="10.1.%d.%d" % (i // 250, i % 250), tags=("bench", "h100"),
                                     benchmark=bench) for i, n in enumerate(frames.names)], source="bench")


def scrape(url: str) -> tuple[float, int]:
    started = time.perf_counter()
    with urllib.request.urlopen(url, timeout=10) as response:
        body = response.read()
    return time.perf_counter() - started, len(body)


async def run_serve(seconds: float, instances: int, gpus: int, history_dir: Path) -> dict:
    frames = Frames(instances, gpus)
    fleet = fleet_of(frames)
    monitoring = Monitoring(fleet, metrics=("127.0.0.1", 0), history=history_dir / "history.sqlite3")
    controller = MonitoredController(fleet, monitoring, read_only=True)  # no links: frames come from here
    state = controller.state
    await monitoring.start(controller)
    for i, name in enumerate(frames.names):
        state.set_link_status(name, "connected", "")
        state.apply_frame(name, {"type": "hello", "ts": time.time(), "v": 1, "pid": 1000 + i,
                                 "features": {"gpu": "ok", "simulated_gpu": True, "psutil": True}})
        state.apply_frame(name, frames.gpu(i, full=True))
        state.apply_frame(name, frames.procs_full())
    url = monitoring.server.url
    await asyncio.to_thread(scrape, url)  # warm
    scrapes: list[float] = []
    sizes: list[int] = []

    async def prometheus() -> None:
        while True:
            took, size = await asyncio.to_thread(scrape, url)
            scrapes.append(took)
            sizes.append(size)
            await asyncio.sleep(5.0)

    scraper = asyncio.create_task(prometheus())
    clock = Stopwatch()
    tick = 0
    step = 1.0 / len(frames.names)
    while clock.wall() < seconds:
        second = time.perf_counter()
        for i, name in enumerate(frames.names):  # spread over the second, as 100 agents would be
            state.apply_frame(name, frames.gpu(i))
            if (tick + i) % 5 == 0:
                state.apply_frame(name, {"type": "heartbeat", "ts": time.time(), "seq": tick, "samples": tick,
                                         "sent": 0})
            if (tick + i) % 10 == 0:
                rec = frames.proc(300 + (tick % 20), 1, "helper")
                state.apply_frame(name, {"type": "procs", "ts": time.time(), "full": False, "upsert": [rec],
                                         "gone": []})
            await asyncio.sleep(max(0.0, second + (i + 1) * step - time.perf_counter()))
        tick += 1
    cpu = clock.cpu() / clock.wall()
    scraper.cancel()
    # scrape latency on its own (no frames arriving meanwhile), 20 times
    alone = [(await asyncio.to_thread(scrape, url))[0] for _ in range(20)]
    render = monitoring.server.last_scrape_seconds
    from console.monitor.metrics import render_text

    render_clock = Stopwatch()
    for _ in range(10):
        render_text(monitoring.server.collector.gather())
    render_cpu = render_clock.cpu() / 10  # what a scrape costs the loop, whatever else runs on the box
    await controller.stop()
    return {
        "cpu_percent": round(100 * cpu, 2),
        "frames": state.frames,
        "scrape_ms_during_p50": median_ms(scrapes),
        "scrape_ms_during_max": max_ms(scrapes),
        "scrape_ms_p50": median_ms(alone),
        "scrape_ms_max": max_ms(alone),
        "render_ms_last": ms(render),
        "render_cpu_ms": ms(render_cpu),
        "metrics_bytes": sizes[-1] if sizes else None,
    }


def history_growth(instances: int, gpus: int, minutes: int, directory: Path) -> dict:
    frames = Frames(instances, gpus)
    now = [1_700_000_000.0]
    path = directory / "growth.sqlite3"
    h = History(path, clock=lambda: now[0])
    started = time.perf_counter()
    for second in range(minutes * 60):
        now[0] = 1_700_000_000.0 + second
        for i, name in enumerate(frames.names):
            h.gpu_sample(now[0], name, frames.gpu(i)["devices"])
        if second % 600 == 0:  # some events: a transition per instance every 10 minutes
            for name in frames.names:
                h.transition(now[0], name, "ok", "gpu_idle", "GPUs idle for 30s+")
        h.flush(now[0])
    h.close()
    size = path.stat().st_size
    return {
        "history_minutes_simulated": minutes,
        "history_bytes": size,
        "history_mb_per_day": round(size * 1440 / minutes / 1e6, 1),
        "history_write_cpu_s_per_min": round((time.perf_counter() - started) / minutes, 2),
    }


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--instances", type=int, default=100)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--history-minutes", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fleet-serve-bench-") as tmp:
        result = asyncio.run(run_serve(args.seconds, args.instances, args.gpus, Path(tmp)))
        result.update(history_growth(args.instances, args.gpus, args.history_minutes, Path(tmp)))
    result.update(instances=args.instances, gpus=args.gpus, seconds=args.seconds)
    print_result(result, args.json, "{key:>28}: {value}", indent=1)
    if not args.json:
        ok = (result["cpu_percent"] < 10 and min(result["scrape_ms_p50"], result["render_cpu_ms"]) < 50
              and result["history_mb_per_day"] < 50)
        print_goals("cpu < 10 %, scrape < 50 ms, history < 50 MB/day", ok)
    return 0


if __name__ == "__main__":
    sys.exit(main())
