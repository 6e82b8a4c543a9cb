"""The agent bench's ``--fake-nvml`` mode: the whole agent, health path included, on the real pynvml path.

The agent loads the fake ``libnvidia-ml.so.1`` (``tests/fakes/nvml``, built with ``cc``) through nvidia-ml-py,
as on a host with a driver: 8 A100-like devices that report every health field (ECC counters volatile and
aggregate, retired pages, remapped rows, an active clock event reason, PCIe link and replays, pstate,
persistence, 12 NVLinks, the Xid event set polled each sample), one process on each. The fake answers from a
JSON state it re-reads when the file is replaced (a ``stat`` per call), so its own cost is in the figure: a real
driver's calls are ioctls of similar size.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.fakes import nvml

NVLINKS = 12


def health_card(index: int, pid: int) -> dict[str, Any]:
    """A device reporting every health field (healthy values, one SW power cap reason active)."""
    return nvml.device(
        index, name="NVIDIA A100-SXM4-80GB", uuid=f"GPU-bench-{index:04d}-0000-0000-000000000000",
        mem_total_mib=81920, mem_used_mib=20000 + index, util=95, processes=[{"pid": pid, "mem_mib": 20000 + index}],
        ecc_mode=True,
        ecc={"volatile": {"corrected": 1, "uncorrected": 0}, "aggregate": {"corrected": 7, "uncorrected": 0}},
        retired_pages={"sbe": 1, "dbe": 0, "pending": False},
        remapped_rows={"corrected": 2, "uncorrected": 0, "pending": 0, "failure": 0},
        clock_events=["sw_power_cap"],
        pcie={"gen": 4, "width": 16, "max_gen": 4, "max_width": 16, "replays": 0},
        pstate=0, persistence=True, nvlink=[1] * NVLINKS, xids=[],
    )


def fake_host(workdir: str, pids: list[int]) -> dict[str, str]:
    """Build the fake library, write the 8-GPU state, and return the agent's environment."""
    fake = nvml.FakeNvml(nvml.build_libnvml(), Path(workdir) / "nvml-state.json")
    fake.write(nvml.state([health_card(i, pid) for i, pid in enumerate(pids[:8])]))
    return {**os.environ, **fake.env}
