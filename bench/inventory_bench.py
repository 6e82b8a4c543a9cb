"""Fleet-file load time: ``load_fleet`` on generated fleets of 100 to 20000 instances.

Each fleet has a ``[defaults]`` and a ``[benchmark]`` table and instances of six keys (name, host, port,
tags, gpus, interval), as a large vast.ai fleet written out by hand or by a script would. Reported: the
file size, the best of ``--repeat`` loads (wall and CPU seconds), and the same file through ``tomllib`` alone (the
parse the plain-TOML fast path saves). Before the msgspec rewrite the line search per instance made
this quadratic: 17 s for 5000 instances, 253 s for 20000.

    .venv/bin/python bench/inventory_bench.py [--sizes 100,1000,5000,20000] [--repeat 3]
"""

from __future__ import annotations

import functools
import tempfile
import tomllib
from collections.abc import Callable
from pathlib import Path

from common import Stopwatch, bench_parser, sizes

from console.inventory import load_fleet


def fleet_text(n: int) -> str:
    parts = ['[defaults]\nuser = "root"\nkeepalive = 30\n\n[benchmark]\nmatch = ["cuzk-bench"]\nstop_timeout = 10\n\n']
    for i in range(n):
        parts.append(
            f'[[instance]]\nname = "gpu-{i:05d}"\nhost = "10.{i // 65536}.{i // 256 % 256}.{i % 256}"\n'
            f'port = {20000 + i % 40000}\ntags = ["bench", "4090"]\ngpus = {1 + i % 8}\ninterval = 2.0\n\n'
        )
    return "".join(parts)


def best(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Best wall and best CPU seconds of ``repeat`` runs (CPU time is steadier on a shared machine)."""
    walls, cpus = [], []
    for _ in range(repeat):
        clock = Stopwatch()
        fn()
        cpus.append(clock.cpu())
        walls.append(clock.wall())
    return min(walls), min(cpus)


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--sizes", type=sizes, default="100,1000,5000,20000")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            path = Path(tmp) / f"fleet-{n}.toml"
            text = fleet_text(n)
            path.write_text(text)
            assert len(load_fleet(path).instances) == n
            load, load_cpu = best(functools.partial(load_fleet, path), args.repeat)
            parse, parse_cpu = best(functools.partial(tomllib.loads, text), args.repeat)
            print(f"load_fleet {n:>6} instances ({len(text) / 1e6:5.2f} MB): {load:6.3f} s wall, {load_cpu:6.3f} s CPU"
                  f"   (tomllib alone: {parse:6.3f} s wall, {parse_cpu:6.3f} s CPU)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
