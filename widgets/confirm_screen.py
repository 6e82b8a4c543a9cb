"""A yes/no dialog listing what an action will touch (restart asks here first, with what it stops)."""

from __future__ import annotations

from typing import List

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static


class ConfirmScreen(ModalScreen[bool]):
    DEFAULT_CSS = """
    ConfirmScreen { align: center middle; }
    ConfirmScreen > Vertical {
        width: 100; max-width: 100%; height: auto; max-height: 100%;
        border: thick $warning; background: $surface; padding: 0 1;
    }
    ConfirmScreen #confirm-items { height: auto; max-height: 16; }
    ConfirmScreen Horizontal { height: auto; align-horizontal: right; }
    ConfirmScreen Button { margin: 0 1; min-width: 12; }
    """
    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n", "answer(False)", "No"),
        Binding("escape", "answer(False)", "Cancel"),
    ]

    def __init__(self, title: str, items: List[str], note: str = "", confirm_label: str = "Yes",
                 bullets: bool = True) -> None:
        """``items``: one line each, bulleted (``bullets=False``: as given, for lines that indent themselves)."""
        super().__init__()
        self.title_text = title
        self.items = items
        self.note = note
        self.confirm_label = confirm_label
        self.bullets = bullets

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.title_text, id="confirm-title", markup=False)  # instance names are never markup
            with VerticalScroll(id="confirm-items"):
                bullet = "  • " if self.bullets else ""
                yield Static("\n".join(bullet + item for item in self.items), id="confirm-list", markup=False)
            if self.note:
                yield Static(self.note, id="confirm-note", markup=False)
            with Horizontal():
                yield Button("%s (y)" % self.confirm_label, variant="error", id="confirm-yes")
                yield Button("Cancel (n)", variant="primary", id="confirm-no")

    def on_mount(self) -> None:
        self.query_one("#confirm-no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "confirm-yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
