"""The filter input shown by ``/`` above the grid (name, tag or host; ``tag:x``, ``status:x``)."""

from __future__ import annotations

from textual.binding import Binding
from textual.widgets import Input


class FilterBar(Input):
    """One row, no border (Input's focus border would leave no room for the text on a one-row input)."""

    DEFAULT_CSS = """
    FilterBar { display: none; height: 1; border: none; padding: 0 1; }
    FilterBar:focus { border: none; }
    FilterBar.-shown { display: block; }
    """
    BINDINGS = [Binding("escape", "clear_and_close", "Clear filter")]

    def __init__(self) -> None:
        super().__init__(placeholder="filter: name, tag or host (esc clears, enter keeps)", id="filter", compact=True)

    def open(self) -> None:
        """Show and focus at once: keys already queued behind ``/`` (a fast typist, tmux send-keys) land
        here, not on the grid (``focus()`` would only take effect after them)."""
        self.add_class("-shown")
        self.screen.set_focus(self)

    def action_clear_and_close(self) -> None:
        self.value = ""
        self.remove_class("-shown")
        self.post_message(self.Submitted(self, ""))
