"""The filter input shown by ``/`` above the grid (name, tag, host; ``tag:x``, ``status:x``)."""

from __future__ import annotations

from textual.binding import Binding
from textual.widgets import Input


class FilterBar(Input):
    DEFAULT_CSS = """
    FilterBar { display: none; height: 1; border: none; padding: 0 1; }
    FilterBar.-shown { display: block; }
    """
    BINDINGS = [Binding("escape", "clear_and_close", "Clear filter")]

    def __init__(self) -> None:
        super().__init__(placeholder="filter: name, tag or host (esc clears, enter keeps)", id="filter")

    def open(self) -> None:
        self.add_class("-shown")
        self.focus()

    def action_clear_and_close(self) -> None:
        self.value = ""
        self.remove_class("-shown")
        self.post_message(self.Submitted(self, ""))
