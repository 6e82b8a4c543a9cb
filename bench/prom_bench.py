"""Ten thousand GPUs through one Prometheus: the console's CPU per poll interval.

1,250 hosts x 8 GPUs in DCGM-exporter's exposition format (tests/test_prometheus_source.py's endpoint), scraped by
a real ``prometheus`` on 127.0.0.1 (temp data dir); the console side is ``PrometheusSource`` feeding a
``FleetState`` (no UI): per poll, wall time and this process's CPU (query all metrics, build frames, apply).

    .venv/bin/python bench/prom_bench.py [--hosts 1250] [--polls 10] [--interval 5]

``--tui``: the console *with its UI* (issue 19: "10,000 GPUs (1,250 hosts x 8) from one Prometheus: console <=
30 % of a core, grid key latency p50 <= 30 ms, max <= 100 ms"). A fleet.toml with only ``[[source]] prometheus =
URL`` (every host known only from Prometheus), the real ``FleetApp`` on a ``FleetController`` headless
(``App.run_test``), driven by keys as bench/scale.py's ``drive_console`` does (its helpers are imported from it).
The exporter runs in a child process (``prom_bench.py exporter``) so that serving its 80k lines per scrape is not
counted as the console's CPU. One line per figure: time until all hosts' GPUs are in the fleet state, steady
console CPU (% of one core over ``--steady`` s, default 3 intervals, from 2 polls after all are in), Prometheus's
and the exporter's CPU over the same window, RSS, down-arrow latency p50/max, open an instance / back.

    .venv/bin/python bench/prom_bench.py --tui [--hosts 1250] [--interval 5] [--steady S] [--presses 30] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2
import psutil
from common import (
    bench_parser,
    console_env,
    cpu_seconds,
    grid_key_figures,
    link_workers,
    print_json,
    print_lines,
    rss_mb,
    steady_cpu,
    visit_figures,
    wait_all_gpus,
)

from console.core.state import FleetState
from console.inventory.records import SourceSpec
from console.sources.prometheus import PrometheusSource
from tests.test_prometheus_source import Exporter, exposition, start_prometheus, stop


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
            cpu.append(cpu_seconds(c0, c1))
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
    print(f"RSS {rss_mb(me):.0f} MB")


def wait_scraped(url: str, want: int, timeout: float = 120.0) -> bool:
    """Until Prometheus has ``want`` GPU series (its first full scrape); False when not within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            r = httpx2.get(url + "/api/v1/query", params={"query": "count(DCGM_FI_DEV_GPU_UTIL)"}, timeout=5)
            res = r.json()["data"]["result"]
            if res and int(float(res[0]["value"][1])) >= want:
                return True
        except (httpx2.HTTPError, ValueError, KeyError):
            pass
        time.sleep(1)
    return False


# -- --tui: the console with its UI ------------------------------------------------------------------------------

GPUS = 8


def exporter_main(hosts: int) -> int:
    """``prom_bench.py exporter --hosts N``: the exporter in its own process; prints its port, serves until killed."""
    import signal

    signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)  # before the server's threads: they inherit it
    exporter = Exporter(exposition(hosts))
    print(exporter.port, flush=True)
    signal.sigwait(signals)
    exporter.close()
    return 0


def start_exporter(hosts: int) -> tuple[subprocess.Popen[bytes], int]:
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "exporter", "--hosts", str(hosts)],
                            stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()  # exposition() for 1,250 hosts takes a second or two
    if not line.isdigit():
        stop(proc)
        raise RuntimeError("the exporter did not start")
    return proc, int(line)


def write_fleet(path: Path, url: str, interval: float) -> None:
    """A fleet.toml of one ``[[source]]`` and no ``[[instance]]``: every host is known only from Prometheus."""
    path.write_text(f'[[source]]\nprometheus = "{url}"\nhost_label = "Hostname"\ninterval = {interval:g}\n'
                    f'timeout = 10\nssh = "on_demand"\n')


async def drive_tui(fleet_path: Path, hosts: int, interval: float, others: dict[str, int], *, steady: float,
                    presses: int = 30, all_timeout: float = 180.0, key_timeout: float = 3.0,
                    size: tuple[int, int] = (200, 60)) -> dict[str, Any]:
    """The console on ``fleet_path`` (one Prometheus source), measured as scale.py's ``drive_console`` does;
    ``others``: name -> pid of the processes whose CPU over the steady window is reported beside it."""
    from console.core.controller import FleetController
    from console.inventory import load_fleet
    from console.ui.app import FleetApp

    out: dict[str, Any] = {"hosts": hosts, "interval_s": interval}
    fleet = load_fleet(fleet_path)
    controller = FleetController(fleet, read_only=True)
    app = FleetApp(controller)
    me = psutil.Process()
    procs = {name: psutil.Process(pid) for name, pid in others.items()}
    t_start = time.monotonic()
    async with app.run_test(size=size):
        out["gpus"], out["all_gpus_s"] = await wait_all_gpus(controller.state, hosts * GPUS, t_start, all_timeout)
        source = controller.sources[0] if controller.sources else None
        out["instances"] = len(controller.state.instances)
        out["prometheus_only"] = len(source.hosts_only) if source is not None else None
        await asyncio.sleep(2 * interval)  # 2 polls past the first full one
        out["grid_names"] = len(app.grid._names)  # (the grid lays out new instances at its next paint)
        workers = link_workers(controller)
        out["link_workers"] = len(workers)
        polls0 = source.polls if source is not None else 0
        wall, ui, linked, others_pct = await steady_cpu(steady, me, workers, procs)
        out["steady_s"] = round(wall, 1)
        out["steady_polls"] = (source.polls - polls0) if source is not None else None
        out["console_cpu_pct"] = round(ui + linked, 1)
        out["workers_cpu_pct"] = round(linked, 1) if workers else None
        for name, pct in others_pct.items():
            out[f"{name}_cpu_pct"] = round(max(0.0, pct), 1)
        out["source_status"] = f"{source.status} {source.detail}".strip() if source is not None else "no source"
        out.update(await grid_key_figures(app, presses, key_timeout))
        out.update(await visit_figures(app, 1, key_timeout))
        out["rss_mb"] = round(rss_mb(me))
    await controller.stop()  # as scale.py: the app stops it on unmount too
    return out


TUI_LINES = [
    ("all_gpus_s", "all {hosts} hosts' GPUs in the fleet state", "s"),
    ("instances", "instances in the fleet state", ""),
    ("prometheus_only", "  of which known only from Prometheus", ""),
    ("grid_names", "instances laid out in the grid", ""),
    ("console_cpu_pct", "steady console CPU (UI, at a {interval_s:g} s interval)", "% of a core"),
    ("workers_cpu_pct", "  of which the link workers", "% of a core"),
    ("steady_s", "  over", "s"),
    ("steady_polls", "  polls started in that window", ""),
    ("prometheus_cpu_pct", "prometheus CPU (same window)", "% of a core"),
    ("exporter_cpu_pct", "exporter CPU (same window)", "% of a core"),
    ("rss_mb", "console RSS", "MB"),
    ("key_p50_ms", "down-arrow latency p50", "ms"),
    ("key_max_ms", "down-arrow latency max", "ms"),
    ("key_n", "  presses measured", ""),
    ("open_ms", "open an instance", "ms"),
    ("back_ms", "back to the grid", "ms"),
    ("source_status", "source status", ""),
]


def tui_main(args: argparse.Namespace) -> int:
    home = console_env()  # no ssh-agent, no ~/.ssh/config, own state dir; its temp home removed at the end
    tmp = Path(tempfile.mkdtemp(prefix="fleet-prom-bench-tui-"))
    exporter, port = start_exporter(args.hosts)
    proc: subprocess.Popen[bytes] | None = None
    try:
        proc, url = start_prometheus(tmp, [port], scrape=args.interval)
        if not wait_scraped(url, args.hosts * GPUS):
            print("prometheus did not scrape every GPU: " + (tmp / "prometheus.log").read_text()[-800:],
                  file=sys.stderr)
            return 1
        fleet_path = tmp / "fleet.toml"
        write_fleet(fleet_path, url, args.interval)
        steady = args.steady if args.steady is not None else 3 * args.interval
        r = asyncio.run(drive_tui(fleet_path, args.hosts, args.interval,
                                  {"prometheus": proc.pid, "exporter": exporter.pid},
                                  steady=steady, presses=args.presses, all_timeout=args.all_timeout))
        if args.json:
            print_json(r)
        else:
            print_lines(r, TUI_LINES, optional=("workers_cpu_pct",))  # no link workers: no SSH instance
    finally:
        if proc is not None:
            stop(proc)
        stop(exporter)
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["exporter"]:
        e = argparse.ArgumentParser(prog="prom_bench.py exporter")
        e.add_argument("--hosts", type=int, required=True)
        return exporter_main(e.parse_args(argv[1:]).hosts)
    p = bench_parser(__doc__)
    p.add_argument("--hosts", type=int, default=1250)
    p.add_argument("--polls", type=int, default=10)
    p.add_argument("--interval", type=float, default=5.0)
    p.add_argument("--tui", action="store_true", help="the console with its UI, driven by keys (issue 19)")
    p.add_argument("--steady", type=float, default=None, help="--tui: seconds of steady CPU (default 3 intervals)")
    p.add_argument("--presses", type=int, default=30, help="--tui: down-arrow presses measured")
    p.add_argument("--all-timeout", type=float, default=180.0, help="--tui: seconds to wait for every host's GPUs")
    p.add_argument("--json", action="store_true", help="--tui: one JSON object instead of lines")
    args = p.parse_args(argv)
    if shutil.which("prometheus") is None:
        print("no prometheus binary (Debian: apt-get install prometheus)", file=sys.stderr)
        return 2
    if args.tui:
        return tui_main(args)
    tmp = Path(tempfile.mkdtemp(prefix="fleet-prom-bench-"))
    exporter = Exporter(exposition(args.hosts))
    proc, url = start_prometheus(tmp, [exporter.port], scrape=args.interval)  # dcgm-exporter's 80k lines
    try:
        wait_scraped(url, args.hosts * 8)
        asyncio.run(run(args.hosts, args.polls, args.interval, url))
    finally:
        stop(proc)
        exporter.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
