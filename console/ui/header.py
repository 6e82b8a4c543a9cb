"""The console's top bar: the fleet in one line (instances, GPUs busy and idle, what is in trouble), and the
modes that change what keys do (demo, read-only), the selection and the filter."""

from __future__ import annotations

from rich.text import Text

from console.agent.wire.wording import plural
from console.core.spend import fleet_rates, fmt_money
from console.core.state import FleetState
from console.core.status import BADGES, TABLE
from widgets.fleet_grid import FleetGrid

DEMO_BANNER = "DEMO fleet — simulated GPUs"


def fleet_header(state: FleetState, grid: FleetGrid, *, demo: bool, read_only: bool) -> Text:
    """The top bar's text; ``grid`` says what is selected and what the filter shows."""
    totals = state.totals()
    text = Text()
    text.append(" fleet-console ", "bold reverse")
    if demo:
        text.append(" %s " % DEMO_BANNER, "bold reverse")
    elif totals["simulated"]:
        text.append(" simulated GPUs ", "bold reverse")  # (said here once, not on every row)
    if read_only:
        text.append(" READ-ONLY ", "bold reverse")
    text.append(" " + plural(totals["instances"], "instance"))
    if totals["gpus"]:
        text.append(" · GPUs %d busy / %d idle" % (totals["busy"], totals["idle"]))
        if totals["lost"]:
            text.append(" / %d lost" % totals["lost"], "bold")
    trouble = [(s.name, totals[s.name]) for s in TABLE if s.trouble]
    parts = ["%d %s" % (n, BADGES[s].lower()) for s, n in trouble if n]
    if parts:
        text.append(" · " + ", ".join(parts), "bold")
    if totals["connecting"]:
        text.append(" · %d connecting" % totals["connecting"])
    elif not parts and totals["instances"]:
        text.append(" · all ok")  # only once every instance has answered
    burning, idle, priced = fleet_rates(state.instances.values())
    if priced:  # what the fleet costs an hour, and the part paid for idle instances
        cur = state.currency
        text.append(" · %s/h burning" % fmt_money(burning, cur))
        text.append(", %s/h idle" % fmt_money(idle, cur), "bold" if idle else "")
    if grid.selected:
        text.append(" · %d selected" % len(grid.selected), "bold")
    if grid.query_text:
        text.append(" · filter %r: %d shown" % (grid.query_text, len(grid.visible_names)))
    return text


__all__ = ["DEMO_BANNER", "fleet_header"]
