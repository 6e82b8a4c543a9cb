"""Issue 35 item 24: texts about a trouble go once the trouble is fixed: "no GPU" and a "no NVIDIA driver" verdict
from an old session do not stay after the GPUs appear (the fleet state fed the agent's frames)."""

from __future__ import annotations

from typing import Any, Dict

from console.core.state import FleetState
from console.inventory import Instance
from tests.support import frames


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def no_driver_verdict() -> Dict[str, Any]:
    return {"verdict": {"code": "no_gpu_driver", "severity": "critical", "summary": "no NVIDIA driver",
                        "brief": "no NVIDIA driver"}, "findings": []}


def test_no_gpu_from_an_old_session_goes_when_the_gpus_appear() -> None:
    clock = Clock()
    state = FleetState(clock=clock)
    state.add_instance(Instance("box", "10.0.0.1"))
    state.set_link_status("box", "connected", "")
    state.apply_frame("box", frames.hello())
    state.apply_frame("box", frames.gpu([], state="no_gpu", message="NVML: driver not loaded"))
    state.set_diagnosis("box", no_driver_verdict())
    box = state.get("box")
    assert box is not None and box.status == "failed" and "no GPU" in box.flags()

    clock.now += 60  # the driver is installed, the host rebooted: a new session
    state.set_link_status("box", "unreachable", "Connection reset")
    clock.now += 30
    state.set_link_status("box", "connected", "")
    state.apply_frame("box", frames.hello())
    assert "no GPU" not in box.flags(), "the old session's 'no GPU' before this one said anything"
    clock.now += 1
    state.apply_frame("box", frames.gpu([{"index": 0, "util": 90, "mem_used": 2**30, "temp": 50, "procs": []}]))
    assert "no GPU" not in box.flags()
    assert (box.status, box.status_detail) != ("failed", "no NVIDIA driver"), "the old verdict's text stayed"
