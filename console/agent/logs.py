"""Log follower (placeholder interface; the full tail -F follower replaces this)."""

from __future__ import annotations

from typing import Any, Dict, List


class LogFollower:
    def __init__(self, config: Dict[str, Any]) -> None:
        self.config = config

    def poll(self) -> List[Dict[str, Any]]:
        return []

    def backlog(self, lines: int) -> List[Dict[str, Any]]:
        return []
