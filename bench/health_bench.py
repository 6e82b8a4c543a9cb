"""What the NVML health reading (issue 30) adds to the agent's GPU sampler, on the real pynvml (ctypes) path.

The fake ``libnvidia-ml.so.1`` (tests/fakes/nvml) with 8 datacenter cards that report every health field is
loaded into this process; the agent's ``GpuSampler`` samples them ``--samples`` times with the health reader and
the Xid poll on, and as many times with them off. The counters' pass (every 10 s in the agent) and the per-sample
part (clock event reasons, the event poll) are timed apart, and the agent's steady cost at 1 Hz is
``per-sample part + counters' pass / 10``. The fake answers from an in-memory JSON tree: a real driver call
costs more (a few µs, an ioctl), so the figure on a GPU host is ``scripts/gpu_check.sh``'s to confirm.

    .venv/bin/python bench/health_bench.py [--samples 200] [--json]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from console.agent.sample.gpu import GpuSampler
from tests.fakes import nvml

CARD = {
    "ecc_mode": True,
    "ecc": {"volatile": {"corrected": 3, "uncorrected": 0}, "aggregate": {"corrected": 30, "uncorrected": 0}},
    "retired_pages": {"sbe": 1, "dbe": 0, "pending": False},
    "remapped_rows": {"corrected": 1, "uncorrected": 0, "pending": 0, "failure": 0},
    "clock_events": ["sw_power_cap"],
    "pcie": {"gen": 4, "width": 16, "max_gen": 4, "max_width": 16, "replays": 0},
    "pstate": 0,
    "persistence": True,
    "nvlink": [1] * 12,
}


def cpu_ms(fn, n: int) -> float:
    start = time.thread_time()
    for _ in range(n):
        fn()
    return (time.thread_time() - start) * 1000.0 / n


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="health-bench-"))
    lib = nvml.build_libnvml()
    state = tmp / "state.json"
    nvml.write_state(state, nvml.state([nvml.device(i, **json.loads(json.dumps(CARD))) for i in range(8)]))
    os.environ[nvml.STATE_ENV] = str(state)
    ctypes.CDLL(str(lib / nvml.LIB_NAME), mode=ctypes.RTLD_GLOBAL)
    config = {"gpu": {"simulate": None, "dev_dir": str(tmp)}}
    with_health = GpuSampler(config)
    without = GpuSampler(config)
    without.health, without.xids = None, None
    for sampler in (with_health, without):
        sampler.sample()  # handles, static fields, event registration
    base = cpu_ms(without.sample, args.samples)
    fast = cpu_ms(with_health.sample, args.samples)  # within 10 s of the first: the per-sample part alone

    def slow_sample() -> None:  # the counters' pass at every sample
        for dev in with_health.devices:
            dev.health.next_slow = 0.0
        with_health.sample()

    slow = cpu_ms(slow_sample, args.samples)
    result = {
        "gpus": 8,
        "sampler_ms_per_sample_without_health": round(base, 3),
        "health_per_sample_ms": round(fast - base, 3),
        "counters_pass_ms": round(slow - fast, 3),
        "health_ms_per_second_at_1hz": round((fast - base) + (slow - fast) / 10.0, 3),
    }
    for sampler in (with_health, without):
        sampler.close()
    if args.json:
        print(json.dumps(result))
    else:
        print("8 GPUs, fake libnvidia-ml via pynvml: sampler %.3f ms/sample without health; health +%.3f ms/sample, "
              "counters' pass %.3f ms (every 10 s): +%.3f ms of CPU a second" % (
                  base, fast - base, slow - fast, result["health_ms_per_second_at_1hz"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
