"""Process sampler (placeholder interface; the full psutil//proc sampler replaces this)."""

from __future__ import annotations

from typing import Any, Dict, Optional


class ProcSampler:
    def __init__(self, config: Dict[str, Any]) -> None:
        self.uses_psutil = False

    def sample(self, gpu_memory_by_pid: Dict[int, int]) -> Optional[Dict[str, Any]]:
        return None

    def reset(self) -> None:
        pass
