"""The ``:`` command bar (k9s-style): one input row; what Tab may complete to, and what is wrong with the line,
are said on the same row after the text (never as toasts); Enter posts the parsed command.

Tab completes as far as the line is unambiguous; pressed again where several words fit, it cycles through them
(shift+Tab back), the one chosen marked in the list. The words are parsed and completed by
``console/core/command_mode.py`` (pure); this module only shows the input. The app carries a ``CommandBar.Run``
out with its own actions (console/ui/command_runner.py).
"""

from __future__ import annotations

from typing import Callable, List, Optional

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.message import Message
from textual.strip import Strip
from textual.suggester import Suggester
from textual.widgets import Input

from console.core.command_mode import (
    Command,
    CommandError,
    Vocabulary,
    complete,
    completions,
    parse,
    usage_hint,
    vocabulary,
)
from console.core.control import FleetControl

from .table_rows import SORT_KEYS

HINT_GAP = 3  # cells between the text (and its grey completion) and the hint


class _Suggest(Suggester):
    """The first completion, shown as grey text after the cursor (→ takes it)."""

    def __init__(self, bar: CommandBar) -> None:
        super().__init__(use_cache=False, case_sensitive=True)
        self.bar = bar

    async def get_suggestion(self, value: str) -> str | None:
        if self.bar.cycling:
            return None  # (the list after the text says what Tab goes to next)
        found = completions(value, self.bar.vocabulary())
        return found[0] if found and found[0] != value else None


class CommandBar(Input):
    """``:`` opens it; Enter runs the line (``CommandBar.Run``), Esc closes it, Tab completes and cycles."""

    DEFAULT_CSS = """
    CommandBar { display: none; height: 1; border: none; padding: 0 1; }
    CommandBar:focus { border: none; }
    CommandBar.-shown { display: block; }
    """
    BINDINGS = [
        Binding("escape", "close", "Close", show=False),
        Binding("tab", "complete(1)", "Complete", show=False, priority=True),
        Binding("shift+tab", "complete(-1)", "Complete", show=False, priority=True),
    ]

    class Run(Message):
        """A parsed command to carry out (``run_command``)."""

        def __init__(self, command: Command) -> None:
            super().__init__()
            self.command = command

    def __init__(self, control: FleetControl, refocus: Callable[[], None]) -> None:
        super().__init__(placeholder=":open NAME · diagnose FILTER · restart FILTER · probe P FILTER · sort KEY · "
                         "theme NAME (tab completes)", id="command", compact=True)
        self.control = control  # the names, tags and probes completed
        self.refocus = refocus  # gives the keys back to the fleet view shown when the bar closes
        self.suggester = _Suggest(self)
        self.error = ""  # what is wrong with the line Enter was pressed on (shown until the line changes)
        self.choices: List[str] = []  # whole lines Tab goes through
        self.chosen: Optional[int] = None  # the one Tab put on the line (cycling)
        self._set_by_tab = False

    @property
    def cycling(self) -> bool:
        return self.chosen is not None

    def vocabulary(self) -> Vocabulary:
        probes: List[str] = []
        try:
            probes = [p.name for p in self.control.probe_specs()]
        except Exception:
            pass
        return vocabulary(self.control.state, probes, SORT_KEYS, self.app.available_themes)

    def open(self) -> None:
        self.value = ""
        self._reset()
        self.add_class("-shown")
        self.screen.set_focus(self)  # at once: keys typed right after ':' land here

    def action_close(self) -> None:
        self.value = ""
        self._reset()
        self.remove_class("-shown")
        self.refocus()

    def _reset(self) -> None:
        self.error, self.choices, self.chosen = "", [], None

    def _put(self, line: str) -> None:
        self._set_by_tab = line != self.value  # (the watcher runs only for a new value)
        self.value = line
        self.cursor_position = len(line)

    def watch_value(self, value: str) -> None:
        """Typed (not Tab): the hint follows the new text, the error goes."""
        if self._set_by_tab:
            self._set_by_tab = False
            return
        self._reset()
        if value:
            self.choices = completions(value, self.vocabulary())
        self.refresh()

    def action_complete(self, step: int = 1) -> None:
        """Tab: as far as the line is unambiguous; where it is not, the next (shift+Tab: previous) choice."""
        if self.cycling and self.choices:
            self.chosen = ((self.chosen or 0) + step) % len(self.choices)
            self._put(self.choices[self.chosen])
        else:
            vocab = self.vocabulary()
            line, found = complete(self.value, vocab)
            if line != self.value:  # as far as it is unambiguous: then what may come next
                self._put(line)
                after = completions(line, vocab)
                self.choices = after if len(after) > 1 else []
            elif len(found) > 1:
                self.choices = found
                self.chosen = 0 if step > 0 else len(found) - 1
                self._put(found[self.chosen])
        self.error = ""
        self.refresh()

    async def action_submit(self) -> None:
        try:
            command = parse(self.value, self.vocabulary())
        except CommandError as exc:
            self.error = str(exc)  # said on the bar's row; it stays open with the line to fix
            self.refresh()
            return
        self.action_close()
        self.post_message(self.Run(command))

    # -- the hint after the text ----------------------------------------------------------------------
    def hint(self) -> List[tuple[str, Style]]:
        """What the row says after the text: the error, else the choices (the chosen one marked), else usage."""
        if self.error:
            return [("✗ " + self.error, Style(color="red", bold=True))]
        muted = Style(dim=True)
        if len(self.choices) > 1:
            words = [c.rsplit(" ", 1)[-1] for c in self.choices]
            out: List[tuple[str, Style]] = [("tab: ", muted)]
            for k, word in enumerate(words):
                out.append((word, Style(reverse=True, bold=True) if k == self.chosen else Style(bold=True)))
                out.append(("  ", muted))
            return out
        usage = usage_hint(self.value)
        return [(usage, muted)] if usage else []

    def render_line(self, y: int) -> Strip:
        strip = super().render_line(y)
        hint = self.hint() if y == 0 and self.value else []
        if not hint:
            return strip
        width = strip.cell_length
        shown = len(self.value) + max(0, len(self._suggestion) - len(self.value)) + 1 - int(self.scroll_offset.x)
        start = max(0, shown) + HINT_GAP
        if start >= width - 4:
            return strip
        tail = Strip([Segment(text, self.rich_style + style) for text, style in hint]).crop(0, width - start)
        return Strip.join([strip.crop(0, start), tail]).extend_cell_length(width, self.rich_style)


__all__ = ["CommandBar"]
