"""Collects what links report, with waits that poll until a deadline (robust on a loaded machine)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.support.wait import until


class Recorder:
    def __init__(self) -> None:
        self.frames: list[tuple[str, dict[str, Any]]] = []
        self.statuses: list[tuple[str, str, str]] = []

    def on_frame(self, name: str, frame: dict[str, Any]) -> None:
        self.frames.append((name, frame))

    def on_status(self, name: str, status: str, detail: str) -> None:
        self.statuses.append((name, status, detail))

    def of_type(self, frame_type: str, name: str | None = None) -> list[dict[str, Any]]:
        return [f for n, f in self.frames if f["type"] == frame_type and (name is None or n == name)]

    def status_of(self, name: str) -> tuple[str, str]:
        """The latest (status, detail) reported for ``name``; ("", "") before the first."""
        for n, status, detail in reversed(self.statuses):
            if n == name:
                return status, detail
        return "", ""

    async def wait_for(self, predicate: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
        """``until(predicate)``; a time-out also says the last statuses reported."""
        return await until(predicate, timeout, what, interval=0.05, detail=lambda: f"statuses: {self.statuses[-5:]}")


def watched_link(inst: Any) -> tuple[Any, Recorder, Any]:
    """An ``SshLink`` for ``inst`` feeding both a ``Recorder`` and a real ``FleetState``: ``(link, rec, state)``."""
    from console.core.state import FleetState
    from console.link import SshLink

    rec, state = Recorder(), FleetState()
    state.add_instance(inst)

    def on_frame(name: str, frame: dict[str, Any]) -> None:
        rec.on_frame(name, frame)
        state.apply_frame(name, frame)

    def on_status(name: str, status: str, detail: str) -> None:
        rec.on_status(name, status, detail)
        state.set_link_status(name, status, detail)

    return SshLink(inst, on_frame, on_status), rec, state
