"""What a ``:`` command does (parsed by console/core/command_mode.py, typed in widgets/command_bar.py): the
same paths as the keys: ``open_instance``, the diagnose and probe workers, the restart confirmation with the
exact target list, the table's sort, the theme.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from console.core.command_mode import Command, targets
from console.ui import fleet_actions
from widgets.fleet_table import FleetTable, toggle_view

if TYPE_CHECKING:
    from console.ui.app import FleetApp


def run_command(app: FleetApp, command: Command) -> None:
    """Carry out ``command`` with the app's own actions."""
    verb = command.verb
    if verb == "open":
        app.open_instance(command.arg)
        return
    if verb == "theme":
        app.theme = command.arg
        app.notify("theme: %s" % command.arg, timeout=2)
        return
    if verb == "sort":
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
        fleet_actions.diagnose(app, names)
    elif verb == "probe":
        for name in names:
            app.run_worker(fleet_actions.run_probe(app, name, command.arg), group="probe")
    elif verb == "restart":
        fleet_actions.confirm_restart(app, names, asked_as=":restart %s" % command.filter)
    elif verb == "stop":
        from console.ui.stop_actions import confirm_stop

        confirm_stop(app, names, asked_as=":stop %s" % command.filter)


__all__ = ["run_command"]
