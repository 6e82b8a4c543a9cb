"""The probes menu: pick a probe by its key, or from the list (arrows + enter, or mouse)."""

from __future__ import annotations

from typing import Any, List, Optional

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option


class ProbeMenu(ModalScreen[Optional[str]]):
    """Dismisses with the chosen probe's name, or None."""

    DEFAULT_CSS = """
    ProbeMenu { align: center middle; }
    ProbeMenu > Vertical {
        width: 60; max-width: 100%; height: auto; max-height: 100%;
        border: round $primary; background: $surface; padding: 0 1;
    }
    ProbeMenu OptionList { height: auto; max-height: 16; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, instance: str, specs: List[Any]) -> None:
        super().__init__()
        self.instance = instance
        self.specs = specs
        self._by_key = {str(getattr(s, "key", "") or "").lower(): s.name for s in specs if getattr(s, "key", None)}

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Probe %s — press a key or pick one:" % self.instance, markup=False)
            yield OptionList(
                *[
                    Option(  # plain text: "[d] disk" is not markup
                        Content("[%s] %s" % (getattr(s, "key", "") or " ", getattr(s, "title", "") or s.name)),
                        id=s.name,
                    )
                    for s in self.specs
                ],
                id="probe-list",
            )

    def on_key(self, event: events.Key) -> None:
        key = (event.character or "").lower()
        if key and key in self._by_key:
            event.stop()
            self.dismiss(self._by_key[key])

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)
