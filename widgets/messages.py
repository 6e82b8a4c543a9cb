"""UI messages, small and coalescing where they can come in bursts (see toolong's messages.py)."""

from __future__ import annotations

from textual.message import Message


class OpenInstance(Message):
    """Open the instance screen for ``name``."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name


class SelectionChanged(Message):
    """The multi-selection of the fleet grid changed (bursts coalesce into the latest)."""

    def __init__(self, selected: frozenset[str]) -> None:
        super().__init__()
        self.selected = selected

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SelectionChanged)


class CursorMoved(Message):
    """The focused pane of the fleet grid moved (coalesces)."""

    def __init__(self, name: str | None) -> None:
        super().__init__()
        self.name = name

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, CursorMoved)
