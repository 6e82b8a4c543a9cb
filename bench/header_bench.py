"""The header's totals per paint (``FleetState.totals``) as the fleet grows, with the frame rate of a big fleet,
and the once-a-second re-derivation of every instance's status (``FleetState.tick``).

N instances x 8 GPUs in a real ``FleetState`` on a simulated clock; between two paints (4 a second) ~175 instances
get a GPU frame (~700 frames a second: what 1000 hosts at detail "summary" send, bench/scale.py), then
``totals()`` is timed. Prints the mean cost per paint for each fleet size, and of one ``tick()`` (CPU time, once
every 4 paints: a second of frames between two ticks, as in the app).

    .venv/bin/python bench/header_bench.py [--hosts 100,1000,2000] [--paints 400]
"""

from __future__ import annotations

import random
import time

from common import bench_parser, sizes

from console.core.state import FleetState
from console.inventory import Instance

GPUS = 8
CHANGED_PER_PAINT = 175


def gpu_frame(rng: random.Random, full: bool) -> dict:
    devices = []
    for i in range(GPUS):
        dev = {"index": i, "util": rng.choice((0, 40, 90, 100)), "mem_util": 50, "mem_used": 60 << 30,
               "temp": rng.randint(60, 80), "power": rng.uniform(300, 700)}
        if full:
            dev.update(name="NVIDIA H100 80GB HBM3", uuid="GPU-%d" % i, mem_total=80 << 30, procs=[])
        devices.append(dev)
    return {"type": "gpu", "ts": time.time(), "state": "ok", "full": full, "devices": devices}


def per_paint_us(hosts: int, paints: int, seed: int = 1) -> tuple[float, float]:
    rng = random.Random(seed)
    clock = [time.time()]
    state = FleetState(clock=lambda: clock[0])
    for i in range(hosts):
        name = "h%d" % i
        state.add_instance(Instance(name=name, host="10.0.0.%d" % (i % 250)))
        state.set_link_status(name, "connected")
        state.apply_frame(name, {"type": "hello", "ts": time.time(), "v": 1, "features": {"gpu": "ok"}})
        state.apply_frame(name, gpu_frame(rng, full=True))
    state.totals()
    names = list(state.instances)
    frames = [gpu_frame(rng, full=False) for _ in range(64)]
    spent = ticked = 0.0
    ticks = 0
    for paint in range(paints):
        clock[0] += 0.25
        for k, name in enumerate(rng.sample(names, min(CHANGED_PER_PAINT, hosts))):
            state.apply_frame(name, frames[(paint + k) % len(frames)])
        t0 = time.perf_counter()
        state.totals()
        spent += time.perf_counter() - t0
        if paint % 4 == 3:
            c0 = time.process_time()
            state.tick()
            ticked += time.process_time() - c0
            ticks += 1
    return 1e6 * spent / paints, 1e3 * ticked / max(1, ticks)


def main() -> int:
    p = bench_parser(__doc__)
    p.add_argument("--hosts", type=sizes, default="100,1000,2000")
    p.add_argument("--paints", type=int, default=400)
    args = p.parse_args()
    for hosts in args.hosts:
        paint_us, tick_ms = per_paint_us(hosts, args.paints)
        print("hosts=%-5d totals() per paint  %6.0f us   tick() %5.2f ms CPU (once a second)"
              % (hosts, paint_us, tick_ms))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
