"""The event timeline (``e``, issue 35 item 8): one entry per fleet event (not the toasts), a long entry cut at
the screen's edge and shown in full with ``enter`` (wrapped under its text), and a footer offering only what
works there."""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from pathlib import Path

import pytest

from console.monitor.monitoring import MonitoredController, Monitoring
from console.ui.app import FleetApp
from tests.support.app import make_fleet, screen_text, wait_until
from widgets.confirm_screen import ConfirmScreen
from widgets.timeline_screen import TimelineScreen

LONG = ("the benchmark's proof failed: CUDA error 700 an illegal memory access was encountered while the "
        "prover ran the second partition of the sealing proof, after 41 minutes; the same error twice today")


def monitored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **fleet_kw) -> FleetApp:
    """The TUI's controller (history kept, as ``fleet-console`` runs it), its files under ``tmp_path``."""
    monkeypatch.setenv("FLEET_CONSOLE_STATE_DIR", str(tmp_path / "state"))  # the audit log: this test's own
    fleet = make_fleet(tmp_path, names=("alpha",), **fleet_kw)
    monitoring = Monitoring(fleet, history=tmp_path / "history.sqlite3")
    return FleetApp(MonitoredController(fleet, monitoring), theme="dark")


def live(app: FleetApp) -> bool:
    inst = app.state.instances["alpha"]
    return inst.link_status == "connected" and bool(inst.gpus) and bool(inst.last_log)


def kill_marked(marker: str) -> None:
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            with contextlib.suppress(OSError):
                if marker.encode() in Path("/proc/%s/cmdline" % pid).read_bytes():
                    os.kill(int(pid), signal.SIGTERM)


async def test_each_fleet_event_is_one_entry_and_toasts_are_not_events(tmp_path: Path, monkeypatch) -> None:
    marker = "fleettl-%s" % uuid.uuid4().hex[:8]
    app = monitored(tmp_path, monkeypatch, marker=marker)
    try:
        async with app.run_test(size=(160, 40)) as pilot:
            await wait_until(pilot, lambda: live(app), what="a live agent")
            await pilot.press("t")  # UI chatter: a theme's name, the command bar's completions
            await pilot.press("colon", "tab", "escape")
            await pilot.press("r")
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen) and "Restart (y)" in screen_text(app),
                             what="the restart dialog")
            await pilot.press("y")
            await wait_until(pilot, lambda: any("restarted" in m for _, _, m in app.notices), timeout=60,
                             what="the restart's result")
            app.state.set_link_status("alpha", "unreachable", "Connection refused")  # a change for the worse
            await wait_until(pilot, lambda: app.session_events, what="the change reported")
            await pilot.press("e")
            await wait_until(pilot, lambda: isinstance(app.screen, TimelineScreen), what="the timeline")
            await pilot.pause(0.2)
            rows = [line for line in screen_text(app).splitlines() if "alpha" in line]
            assert not any("theme" in line or "open" in line.split() for line in rows), rows
            assert sum("restart" in line for line in rows) == 1, rows  # not the toast's wording as well
            unreachable = [line for line in rows if "UNREACHABLE" in line]
            assert len(unreachable) == 1, rows  # one change, one entry
    finally:
        kill_marked(marker)


async def test_a_long_entry_is_cut_at_the_edge_and_enter_shows_it_whole_under_its_text(
        tmp_path: Path, monkeypatch) -> None:
    app = monitored(tmp_path, monkeypatch)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: live(app), what="a live agent")
        evidence = {"path": "/w/bench.log", "line": 812, "text": "CUDA error 700"}
        app.state.set_diagnosis("alpha", {
            "verdict": {"code": "cuda_error", "severity": "error", "summary": LONG},
            "findings": [{"code": "cuda_error", "severity": "error", "summary": LONG, "evidence": [evidence]}],
            "steps": []})
        await pilot.press("e")
        await wait_until(pilot, lambda: isinstance(app.screen, TimelineScreen), what="the timeline")
        timeline = app.screen.query_one("#timeline")
        index = next(k for k, e in enumerate(app.screen.entries) if "cuda_error" in e[2])
        text = screen_text(app)
        verdict_rows = [line for line in text.splitlines() if "cuda_error" in line]
        assert len(verdict_rows) == 1 and verdict_rows[0].rstrip().endswith("…"), verdict_rows
        assert "same error twice today" not in text and "/w/bench.log" not in text

        timeline.highlighted = index
        await pilot.press("enter")
        await pilot.pause(0.2)
        lines = screen_text(app).splitlines()
        first = next(k for k, line in enumerate(lines) if "cuda_error" in line)
        indent = lines[first].index("verdict")
        whole = lines[first:first + 12]
        assert "twice today" in " ".join(line.strip() for line in whole)
        assert "/w/bench.log:812: CUDA error 700" in "\n".join(whole)
        for line in whole[1:]:
            if not line.strip() or "alpha" in line:  # the next entry
                break
            assert len(line) - len(line.lstrip()) >= indent, "a hanging indent: %r" % line

        await pilot.press("enter")  # folded again
        await pilot.pause(0.2)
        assert "twice today" not in screen_text(app)


async def test_the_timelines_footer_offers_only_its_own_keys(tmp_path: Path, monkeypatch) -> None:
    app = monitored(tmp_path, monkeypatch)
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_until(pilot, lambda: live(app), what="a live agent")
        await pilot.press("e")
        await wait_until(pilot, lambda: isinstance(app.screen, TimelineScreen), what="the timeline")
        await pilot.pause(0.2)
        footer = screen_text(app).splitlines()[-1]
        assert "Back" in footer and "Expand" in footer
        for word in ("Filter", "Search", "Restart", "Diagnose", "Probes", "Events"):
            assert word not in footer, footer
        await pilot.press("r", "slash", "d")  # nothing to act on here: nothing happens
        await pilot.pause(0.3)
        assert isinstance(app.screen, TimelineScreen)
        assert not any("diagnos" in m or "restart" in m for _, _, m in app.notices)
