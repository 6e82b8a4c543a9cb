"""The ``:`` command bar (k9s-style): one input row with Tab completion; ``run_command`` carries a line out.

The words are parsed and completed by ``console/core/command_mode.py`` (pure); this module only shows the input and
turns a parsed command into the app's own actions (the same paths as the keys: ``open_instance``, the
diagnose and probe workers, the restart confirmation with the exact target list, the table's sort, the theme).
"""

from __future__ import annotations

from typing import Any, List

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
    targets,
    vocabulary,
)

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

    def __init__(self) -> None:
        super().__init__(placeholder=":open NAME · diagnose FILTER · restart FILTER · probe P FILTER · sort KEY · "
                         "theme NAME (tab completes)", id="command", compact=True)
        self.suggester = _Suggest(self)

    def vocabulary(self) -> Vocabulary:
        from widgets.fleet_table import SORT_KEYS

        app: Any = self.app
        probes: List[str] = []
        try:
            probes = [p.name for p in app.controller.probe_specs()]
        except Exception:
            pass
        return vocabulary(app.state, probes, SORT_KEYS, app.available_themes)

    def open(self) -> None:
        self.value = ""
        self.add_class("-shown")
        self.screen.set_focus(self)  # at once: keys typed right after ':' land here

    def action_close(self) -> None:
        self.value = ""
        self.remove_class("-shown")
        view = getattr(self.app, "fleet_view", None)
        if callable(view):
            view().focus()

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


def run_command(app: Any, command: Command) -> None:
    """Carry out ``command`` with the app's own actions (``app``: console.ui.app.FleetApp)."""
    from widgets.confirm_screen import ConfirmScreen

    verb = command.verb
    if verb == "open":
        app.open_instance(command.arg)
        return
    if verb == "theme":
        app.theme = command.arg
        app.notify("theme: %s" % command.arg, timeout=2)
        return
    if verb == "sort":
        from widgets.fleet_table import FleetTable, toggle_view

        table = app.screen_stack[0].query_one(FleetTable)
        if not table.display:
            toggle_view(table, app.grid)  # sorting is the table's
        table.set_sort(command.arg, reverse=command.reverse)
        return
    names = targets(app.state, command.filter)
    if not names:
        app.notify("no instance matches %r" % command.filter, severity="warning", timeout=5)
        return
    if verb == "diagnose":
        app.notify("diagnosing %s…" % ", ".join(names), timeout=3)
        app.run_worker(app._diagnose(names), group="diagnose", exclusive=False)
    elif verb == "probe":
        for name in names:
            app.run_worker(app._probe(name, command.arg), group="probe")
    elif verb == "restart":
        if app.read_only:  # nothing is sent; the controller audits the refusal (as r does)
            app.run_worker(app._restart(names, announce=False), group="restart")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                app.run_worker(app._restart(names), group="restart")
            else:
                app.notify("restart cancelled, nothing done", timeout=3)

        app.push_screen(
            ConfirmScreen(
                "Restart the benchmark on %d instance%s (:restart %s)?" % (
                    len(names), "" if len(names) == 1 else "s", command.filter),
                names,
                note="Stops the configured processes (TERM, then KILL) and starts the benchmark again.",
                confirm_label="Restart",
            ),
            answered,
        )


__all__ = ["CommandBar", "run_command"]
