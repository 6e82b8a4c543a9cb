"""The ``:`` command bar (k9s-style): one input row with Tab completion; Enter posts the parsed command.

The words are parsed and completed by ``console/core/command_mode.py`` (pure); this module only shows the input.
The app carries a ``CommandBar.Run`` out with its own actions (console/ui/command_runner.py).
"""

from __future__ import annotations

from typing import Callable, List

from textual.binding import Binding
from textual.message import Message
from textual.suggester import Suggester
from textual.widgets import Input

from console.core.command_mode import (
    Command,
    CommandError,
    Vocabulary,
    complete,
    completions,
    parse,
    vocabulary,
)
from console.core.control import FleetControl

from .table_rows import SORT_KEYS

MAX_CHOICES = 8  # completions named in the hint toast


class _Suggest(Suggester):
    """The first completion, shown as grey text after the cursor (→ or Tab takes it)."""

    def __init__(self, bar: CommandBar) -> None:
        super().__init__(use_cache=False, case_sensitive=True)
        self.bar = bar

    async def get_suggestion(self, value: str) -> str | None:
        found = completions(value, self.bar.vocabulary())
        return found[0] if found and found[0] != value else None


class CommandBar(Input):
    """``:`` opens it; Enter runs the line (``CommandBar.Run``), Esc closes it, Tab completes."""

    DEFAULT_CSS = """
    CommandBar { display: none; height: 1; border: none; padding: 0 1; }
    CommandBar:focus { border: none; }
    CommandBar.-shown { display: block; }
    """
    BINDINGS = [
        Binding("escape", "close", "Close", show=False),
        Binding("tab", "complete", "Complete", show=False, priority=True),
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

    def vocabulary(self) -> Vocabulary:
        probes: List[str] = []
        try:
            probes = [p.name for p in self.control.probe_specs()]
        except Exception:
            pass
        return vocabulary(self.control.state, probes, SORT_KEYS, self.app.available_themes)

    def open(self) -> None:
        self.value = ""
        self.add_class("-shown")
        self.screen.set_focus(self)  # at once: keys typed right after ':' land here

    def action_close(self) -> None:
        self.value = ""
        self.remove_class("-shown")
        self.refocus()

    def action_complete(self) -> None:
        line, found = complete(self.value, self.vocabulary())
        self.value = line
        self.cursor_position = len(line)
        if len(found) > 1:
            words = [f.rsplit(" ", 1)[-1] for f in found]
            more = " +%d" % (len(words) - MAX_CHOICES) if len(words) > MAX_CHOICES else ""
            self.app.notify(" ".join(words[:MAX_CHOICES]) + more, timeout=4)

    async def action_submit(self) -> None:
        try:
            command = parse(self.value, self.vocabulary())
        except CommandError as exc:
            self.app.notify(str(exc), severity="warning", timeout=5)
            return  # stays open: fix the line
        self.action_close()
        self.post_message(self.Run(command))


__all__ = ["CommandBar"]
