"""The fleet actions the keys, the palette and the command bar share: diagnose, restart (confirmed), probes (a
menu), trusting an unknown host key (confirmed). Each runs in a worker on the app's controller and says how it
went in a toast; a verdict or a probe's output also shows on the instance's screen when it is open.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Dict, List, Optional, cast

from console.agent.wire.protocol import ProbeResult, RestartPlan
from console.core.actions import ActionError, ReadOnlyError
from console.core.restart_plan import plan_lines
from widgets.confirm_screen import ConfirmScreen
from widgets.instance_screen import InstanceScreen
from widgets.probe_menu import ProbeMenu

if TYPE_CHECKING:
    from console.ui.app import FleetApp

RESTART_NOTE = ("Stops the process groups listed (TERM, then KILL; nothing else: a process that appears meanwhile "
                "refuses it) and starts the benchmark again.")
DIAGNOSIS_TAB, PROBES_TAB = 3, 4  # the instance screen's tabs (4 and 5 on the keyboard)


def show_tab(app: FleetApp, name: str, index: int) -> bool:
    """Show tab ``index`` of ``name``'s screen if that screen is open; False when it is not."""
    screen = app.screen
    if not (isinstance(screen, InstanceScreen) and screen.instance_name == name):
        return False
    screen.action_tab(index)
    screen.update_from_state(force=True)
    return True


# -- diagnose ------------------------------------------------------------------------------------------------
def diagnose(app: FleetApp, names: List[str]) -> None:
    """Diagnose ``names`` concurrently; each verdict is a toast (and the Diagnosis tab of an open screen)."""
    app.notify("diagnosing %s…" % ", ".join(names), timeout=3)
    app.run_worker(_diagnose(app, names), group="diagnose", exclusive=False)


async def _diagnose(app: FleetApp, names: List[str]) -> None:
    async def one(name: str) -> None:
        try:
            data = await app.controller.diagnose(name)
        except Exception as exc:
            app.notify("%s: diagnosis failed: %s" % (name, exc), severity="error", timeout=8)
            return
        verdict = (data or {}).get("verdict") or {}
        sev = verdict.get("severity") or "info"
        app.notify(
            "%s: %s" % (name, verdict.get("summary") or verdict.get("code") or "done"),
            title="Diagnosis (%s)" % sev,
            severity="error" if sev in ("error", "critical") else "warning" if sev == "warning" else "information",
            timeout=8,
        )
        show_tab(app, name, DIAGNOSIS_TAB)  # the verdict with its evidence lines

    await asyncio.gather(*(one(n) for n in names))


# -- restart -------------------------------------------------------------------------------------------------
def confirm_restart(app: FleetApp, names: List[str], asked_as: str = "") -> None:
    """Restart ``names`` after a dialog listing, per instance, the process groups it stops (pid, program, age,
    parent entrypoint) or "no benchmark running: will only start", as each agent plans it now (``asked_as``: the
    command line, said in its title). An instance whose plan cannot be had is not restarted.

    Read-only: no dialog, nothing is sent; the controller refuses and audits it, the toast says so."""
    if app.read_only:
        app.run_worker(restart(app, names, announce=False), group="restart")
        return
    app.run_worker(_confirm_restart(app, names, asked_as), group="restart")


async def _confirm_restart(app: FleetApp, names: List[str], asked_as: str) -> None:
    try:
        outcomes = await app.controller.restart_plans(names)
    except Exception as exc:
        app.notify("restart not offered: %s" % exc, severity="error", timeout=10, markup=False)
        return
    plans = {n: o["plan"] for n, o in outcomes.items() if o["ok"] and "plan" in o}
    lines = [line for n in names for line in plan_lines(n, outcomes[n])]
    if not plans:
        app.notify("\n".join(lines), title="Not restarted", severity="error", timeout=12, markup=False)
        return
    ready = [n for n in names if n in plans]

    def answered(yes: Optional[bool]) -> None:
        if yes:
            app.run_worker(restart(app, ready, plans=plans), group="restart")
        else:
            app.notify("restart cancelled, nothing done", timeout=3)

    title = "Restart the benchmark on %d instance%s%s?" % (
        len(ready), "" if len(ready) == 1 else "s", " (%s)" % asked_as if asked_as else "")
    skipped = [n for n in names if n not in plans]
    note = RESTART_NOTE + (" Not restarted (no plan): %s." % ", ".join(skipped) if skipped else "")
    app.push_screen(ConfirmScreen(title, lines, note=note, confirm_label="Restart", bullets=False), answered)


async def restart(app: FleetApp, names: List[str], announce: bool = True,
                  plans: Optional[Dict[str, RestartPlan]] = None) -> None:
    """Restart ``names`` (confirmed: ``plans`` is what the dialog showed; the hosts stop nothing else); one toast
    per instance: its new pid, or its start's last log lines."""
    if announce:
        app.notify("restarting %s…" % ", ".join(names), timeout=3)
    try:
        results = await app.controller.restart(names, origin="tui", plans=plans)
    except ReadOnlyError:
        app.notify(
            "Read-only mode: restart refused. Nothing was sent to %s." % ", ".join(names),
            title="Refused",
            severity="error",
            timeout=8,
        )
        return
    except Exception as exc:
        app.notify("restart failed: %s" % exc, severity="error", timeout=10)
        return
    from console.core.controller import TOAST_TAIL_LINES, describe_restart

    for name, result in (results or {}).items():
        if result.get("ok"):
            app.state.note_restart(name)  # the verdict before it is history; the pane says "restarted"
        # the started pid; or that the benchmark died at once, with its log's last lines
        text = "\n".join(describe_restart(name, result, tail=TOAST_TAIL_LINES))
        if result["ok"]:
            app.notify(text, timeout=6)
        else:
            app.notify(text, severity="error", timeout=10)


# -- probes --------------------------------------------------------------------------------------------------
def choose_probe(app: FleetApp, name: Optional[str]) -> None:
    """The probe menu for ``name``; the probe chosen runs in a worker."""
    if not name:
        app.notify("no instance to probe", severity="warning")
        return
    try:
        specs = list(app.controller.probe_specs(name))
    except Exception as exc:
        app.notify("no probes: %s" % exc, severity="error")
        return
    if not specs:
        app.notify("no probes configured", severity="warning")
        return

    def chosen(probe: Optional[str]) -> None:
        if probe:
            app.run_worker(run_probe(app, name, probe), group="probe")

    app.push_screen(ProbeMenu(name, specs), chosen)


async def run_probe(app: FleetApp, name: str, probe: str) -> None:
    """Run ``probe`` on ``name``; its output opens on the Probes tab (asked from the grid) or is announced."""
    app.notify("%s: running probe %s…" % (name, probe), timeout=3)
    try:
        data = await app.controller.probe(name, probe)
    except Exception as exc:
        app.notify("%s: probe %s failed: %s" % (name, probe, exc), severity="error", timeout=10)
        return
    if name in app.state.instances and not app.state.instances[name].probes.get(probe):
        app.state.set_probe_result(name, probe, cast(ProbeResult, data or {}))
    if show_tab(app, name, PROBES_TAB):
        return
    if len(app.screen_stack) == 1:  # asked from the grid: its output is what the operator wants next
        app.open_instance(name, tab="tab-probes")
    else:  # (another screen is up: do not pull the operator away from it)
        app.notify("%s: probe %s done (its output is on the Probes tab, 5)" % (name, probe), timeout=6)


# -- host keys -----------------------------------------------------------------------------------------------
def accept_host_key(app: FleetApp, name: str) -> None:
    """Trust the unknown host key ``name`` offers, after a dialog that shows its fingerprint.

    A changed key is never accepted here: the operator removes the old line by hand (ssh-keygen -R).
    """
    offer = app.controller.host_key_offer(name)
    if offer is None:
        app.notify(f"{name}: no unknown host key to accept", severity="warning", markup=False)
        return
    if offer.changed:
        app.notify(f"{name}: the host key CHANGED; not accepted here (check it, then ssh-keygen -R and reload)",
                   severity="error", markup=False)
        return

    async def accept() -> None:
        try:
            message = await app.controller.accept_host_key(name)
        except ActionError as exc:
            app.notify(str(exc), severity="error", markup=False)
            return
        app.notify(message, markup=False)

    def answered(yes: Optional[bool]) -> None:
        if yes:
            app.run_worker(accept(), group="accept")
        else:
            app.notify("host key not accepted, nothing written", timeout=3)

    app.push_screen(
        ConfirmScreen(
            f"Trust the host key of {name}?",
            [offer.fingerprint, f"{offer.host}:{offer.port}"],
            note=f"Written to {offer.known_hosts} and recorded in the audit log; then it reconnects. "
            "Compare the fingerprint with what the provider shows first.",
            confirm_label="Trust",
        ),
        answered,
    )


__all__ = ["accept_host_key", "choose_probe", "confirm_restart", "diagnose", "restart", "run_probe", "show_tab"]
