"""The hits of ``g`` (grep of a whole log on the host): ``line: text`` rows; Enter opens the log at that line."""

from __future__ import annotations

from typing import List, Optional, Tuple

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from .log_view import line_style


def hit_prompt(number: int, text: str) -> Text:
    """One hit: its line number, then the host's text as plain text (never markup), coloured as in the log."""
    prompt = Text(no_wrap=True, overflow="ellipsis")
    prompt.append("%7d: " % number, "dim")
    prompt.append(text, line_style(text))
    return prompt


class GrepScreen(ModalScreen[Optional[int]]):
    """Dismissed with the chosen hit's line number (None: esc)."""

    DEFAULT_CSS = """
    GrepScreen { align: center middle; }
    GrepScreen > Vertical { width: 90%; height: 80%; border: round $accent; background: $surface; }
    GrepScreen #grep-title { height: auto; padding: 0 1; }
    GrepScreen OptionList { height: 1fr; border: none; }
    """

    BINDINGS = [Binding("escape", "dismiss_none", "Close"), Binding("q", "dismiss_none", "Close", show=False)]

    def __init__(self, path: str, pattern: str, hits: List[Tuple[int, str]], note: str = "") -> None:
        super().__init__()
        self.path = path
        self.pattern = pattern
        self.hits = hits
        self.note = note

    def compose(self) -> ComposeResult:
        title = Text()
        title.append("grep %r" % self.pattern, "bold")
        title.append("  %s  " % self.path, "dim")
        title.append("%d hit%s" % (len(self.hits), "" if len(self.hits) == 1 else "s"))
        if self.note:
            title.append(" (%s)" % self.note, "italic")
        title.append("  — enter: open the log at that line; esc: close", "dim")
        with Vertical():
            yield Static(title, id="grep-title")
            options = [Option(hit_prompt(n, t), id=str(n)) for n, t in self.hits] or [
                Option(Text("no line matches", "dim"), id="none", disabled=True)
            ]
            yield OptionList(*options, id="grep-hits")

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option.id and event.option.id.isdigit():
            self.dismiss(int(event.option.id))

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
