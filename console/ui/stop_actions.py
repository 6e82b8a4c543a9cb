"""Stopping rentals from the TUI (key ``X``, ``:stop FILTER``): a confirmation that says what it costs not to
stop, then ``[actions] stop`` per instance (console/core/stop.py: audited; refused and audited in read-only)."""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional

from console.core.actions import ActionError, ReadOnlyError
from console.core.stop import stop_from, stop_plan
from widgets.confirm_screen import ConfirmScreen

if TYPE_CHECKING:
    from console.ui.app import FleetApp

STOP_NOTE = ("Runs [actions] stop from fleet.toml on this machine for each: the rental stops billing for GPUs "
             "(the provider may still bill storage). Audited.")


def confirm_stop(app: FleetApp, names: List[str], asked_as: str = "") -> None:
    """Ask, then stop ``names``; read-only: refused at once (and audited), no dialog."""
    if app.read_only:
        app.run_worker(stop(app, names), group="stop")
        return
    try:
        lines = stop_plan(app.controller, names)
    except (ActionError, KeyError) as exc:
        app.notify("stop not offered: %s" % exc, title="Not stopped", severity="error", timeout=10)
        return

    def answered(yes: Optional[bool]) -> None:
        if yes:
            app.run_worker(stop(app, names), group="stop")
        else:
            app.notify("stop cancelled, nothing done", timeout=3)

    title = "Stop the rental of %d instance%s%s?" % (
        len(names), "" if len(names) == 1 else "s", " (%s)" % asked_as if asked_as else "")
    app.push_screen(ConfirmScreen(title, lines, note=STOP_NOTE, confirm_label="Stop"), answered)


async def stop(app: FleetApp, names: List[str]) -> None:
    try:
        results = await stop_from(app.controller, names, origin="tui")
    except ReadOnlyError:
        app.notify("Read-only mode: stop refused. Nothing was run for %s." % ", ".join(names), title="Refused",
                   severity="error", timeout=8)
        return
    except Exception as exc:
        app.notify("stop failed: %s" % exc, severity="error", timeout=10)
        return
    for name, result in results.items():
        if result["ok"]:
            app.notify("%s: stopped (%s)" % (name, " ".join(result["argv"])), timeout=6)
        else:
            app.notify("%s: not stopped: %s" % (name, result.get("error")), severity="error", timeout=10)


__all__ = ["confirm_stop", "stop"]
