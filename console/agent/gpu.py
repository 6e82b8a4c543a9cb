"""GPU sampler (placeholder interface; the full pynvml sampler replaces this)."""

from __future__ import annotations

from typing import Any, Dict, Optional


class GpuSampler:
    def __init__(self, config: Dict[str, Any]) -> None:
        self.state = "no_gpu"
        self.simulated = False

    def sample(self) -> Optional[Dict[str, Any]]:
        return None

    def memory_by_pid(self) -> Dict[int, int]:
        return {}
