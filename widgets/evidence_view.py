"""The Diagnosis tab's text with a cursor over its evidence lines: Enter opens that log at that line.

The diagnosis stays one ``Text`` (``diagnosis_text.diagnosis_text``); the rows that are evidence (a file and
a line number) are given beside it. Up/down (or ``j``/``k``) move between them, the chosen row is shown in
reverse, and Enter posts ``EvidenceView.Open(path, line)`` for the screen to show in the Logs tab.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.geometry import Region
from textual.message import Message
from textual.widgets import Static

from .diagnosis_text import wrap_hanging

Evidence = Tuple[int, str, Optional[int]]  # (row in the text, path, line number or None)
CURSOR_STYLE = Style(reverse=True)


class EvidenceView(Static, can_focus=True):
    """A ``Static`` whose evidence rows can be chosen; ``show(text, evidence)`` replaces both."""

    BINDINGS = [
        Binding("down", "move(1)", "Next evidence", show=False),
        Binding("j", "move(1)", show=False),
        Binding("up", "move(-1)", "Previous evidence", show=False),
        Binding("k", "move(-1)", show=False),
        Binding("enter", "open", "Open log at line"),
    ]

    class Open(Message):
        """Show ``path`` at ``line`` in the Logs tab."""

        def __init__(self, path: str, line: Optional[int]) -> None:
            super().__init__()
            self.path = path
            self.line = line

    def __init__(self, *, id: Optional[str] = None) -> None:
        super().__init__(id=id)
        self.text = Text()
        self.evidence: List[Evidence] = []
        self.cursor = 0
        self._starts: List[int] = []  # the row each line of the text starts on, wrapped

    def show(self, text: Text, evidence: List[Evidence]) -> None:
        keep = self.current
        self.text = text
        self.evidence = [e for e in evidence if e[1]]
        self.cursor = 0
        if keep is not None:  # the same evidence line stays chosen across a repaint
            for i, (_, path, line) in enumerate(self.evidence):
                if (path, line) == keep[1:]:
                    self.cursor = i
                    break
        self._paint()

    @property
    def current(self) -> Optional[Evidence]:
        return self.evidence[self.cursor] if 0 <= self.cursor < len(self.evidence) else None

    def _paint(self) -> None:
        """The text wrapped at the view's width under a hanging indent (a long evidence line's next rows stay
        under its text, not at column 0), the chosen evidence line's rows in reverse."""
        text, self._starts = wrap_hanging(self.text, self.size.width)
        chosen = self.current
        if chosen is not None and chosen[0] < len(self._starts):
            first, end_row = self._starts[chosen[0]], self._row_end(chosen[0])
            rows = text.plain.split("\n")
            start = sum(len(row) + 1 for row in rows[:first])
            end = start + sum(len(row) + 1 for row in rows[first:end_row]) - 1
            text.stylize(CURSOR_STYLE, start, max(start, end))
        self.update(text)

    def _row_end(self, line: int) -> int:
        """The row after the last one line ``line`` of the text was wrapped to."""
        return self._starts[line + 1] if line + 1 < len(self._starts) else self._starts[-1] + 1

    def on_resize(self) -> None:
        self._paint()  # wrapped again at the new width

    def action_move(self, step: int) -> None:
        if not self.evidence:
            if self.parent is not None:  # nothing to choose: the arrows scroll the tab as before
                getattr(self.parent, "scroll_down" if step > 0 else "scroll_up")(animate=False)
            return
        self.cursor = max(0, min(len(self.evidence) - 1, self.cursor + step))
        self._paint()
        line = self.evidence[self.cursor][0]
        row = self._starts[line] if line < len(self._starts) else line
        parent = self.parent
        if parent is not None and hasattr(parent, "scroll_to_region"):
            parent.scroll_to_region(Region(0, row, 1, 1), animate=False, spacing=None)

    def action_open(self) -> None:
        chosen = self.current
        if chosen is None:
            self.notify("no evidence line in this diagnosis", severity="warning", timeout=3)
            return
        self.post_message(self.Open(chosen[1], chosen[2]))
