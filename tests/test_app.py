"""The console UI driven by Pilot, on the real controller with local agents (simulated GPUs)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import sys
import uuid
from pathlib import Path

import pytest
from textual.widgets._toast import Toast, ToastRack

from console.core.audit import AuditLog
from console.core.controller import FleetController
from console.inventory import Fleet, Instance
from console.ui.app import DEMO_BANNER, FleetApp
from tests.support.app import NAMES, all_live, make_app, make_fleet, open_screen, screen_text, wait_until
from tests.support.procs import process_group
from tests.support.wait import until
from widgets.confirm_screen import ConfirmScreen
from widgets.fleet_grid import FleetGrid
from widgets.help_screen import HelpScreen
from widgets.instance_screen import InstanceScreen
from widgets.probe_menu import ProbeMenu
from widgets.process_tree import ProcessTree

pytestmark = pytest.mark.usefixtures("config_dir")  # (tests/conftest.py)


async def test_grid_at_80x24_shows_every_instance_compactly(tmp_path: Path) -> None:
    app = make_app(tmp_path, demo=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="three live agents")
        await pilot.pause(0.6)
        text = screen_text(app)
        lines = text.splitlines()
        assert len(lines) == 24
        assert "3 instances" in lines[0] and DEMO_BANNER in text
        grid = app.query_one(FleetGrid)
        assert grid.compact and grid.columns == 1
        for name in NAMES:
            row = next(line for line in lines if name in line)
            assert " OK " in row or "GPU IDLE" in row or "BENCH" in row
            assert "2xGPU" in row and "%" in row
        assert "step 40" in text  # last log line of each pane
        assert "Quit" in lines[-1] and "Help" in lines[-1]


async def test_grid_at_200x60_shows_boxed_panes_with_a_line_per_gpu(tmp_path: Path) -> None:
    app = make_app(tmp_path, gpus=4)
    async with app.run_test(size=(200, 60)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="three live agents")
        await pilot.pause(0.6)
        grid = app.query_one(FleetGrid)
        assert not grid.compact and grid.columns == 3
        text = screen_text(app)
        for name in NAMES:
            assert name in text
        assert text.count("╰") + text.count("┗") == 3
        assert "simulated GPUs" in text
        gpu_lines = [line for line in text.splitlines() if "°" in line and "%" in line]
        assert len(gpu_lines) == 4  # 4 GPUs each, 3 panes side by side on the same lines
        assert "top " in text


async def test_enter_opens_instance_screen_with_tabs_and_escape_returns(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    # a small tree of its own to show: a CI container may hold little else than the console's own chain, which
    # the Processes tab hides (a local agent's ancestors are this test's process and what started it)
    async with process_group("sh", "-c", "sleep 300 & sleep 300 & wait") as work, app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="live agents")
        name = app.query_one(FleetGrid).cursor_name
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, InstanceScreen), what="instance screen")
        screen = app.screen
        assert screen.instance_name == name
        await pilot.pause(0.5)
        assert "GPU state: ok" in screen_text(app) and "SIMULATED" in screen_text(app)
        await pilot.press("2")
        tree = screen.query_one(ProcessTree)
        await wait_until(pilot, lambda: work.pid in tree._pt_nodes and tree._pt_nodes[work.pid].children,
                         what="the test's process tree")
        assert "wchan=" in screen_text(app)
        # cursor and expansion survive updates (on the test's own processes: other rows may come and go, such as
        # the sessions of a test running beside this one)
        tree.focus()
        tree.move_cursor(tree._pt_nodes[work.pid], animate=False)
        await pilot.press("down")
        before = tree.cursor_node.data
        assert before in {child.data for child in tree._pt_nodes[work.pid].children}
        await pilot.pause(1.5)
        assert tree.cursor_node is not None and tree.cursor_node.data == before
        await pilot.press("3")
        await wait_until(pilot, lambda: screen.active_log() is not None, what="log tab")
        view = screen.active_log()
        await wait_until(pilot, lambda: view.lines and view.lines[-1][1].endswith("step 40"), what="log lines")
        assert view.follow
        view.focus()
        await pilot.press("f")
        assert not view.follow
        await pilot.press("space")
        assert view.follow
        await pilot.press("slash")
        await pilot.press(*"step 1", "enter")
        assert view.search == "step 1" and view.match_line is not None and not view.follow
        assert "step 1" in view.lines[view.match_line][1]
        first = view.match_line
        await pilot.press("enter")  # next match
        assert view.match_line != first and "step 1" in view.lines[view.match_line][1]
        assert "step 1" in screen_text(app)
        await pilot.press("escape")  # closes the search box
        await pilot.press("4")
        await pilot.pause(0.2)
        # (on a loaded box this test outlasts IDLE_WINDOW: the idle GPUs then bring the automatic diagnosis)
        inst = app.state.get(name)
        if inst.diagnosis is None:
            assert "No diagnosis yet" in screen_text(app)
        else:
            assert "What was checked" in screen_text(app)
        await pilot.press("escape")
        assert not isinstance(app.screen, InstanceScreen)


async def test_filter_by_name_and_tag(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        grid = app.query_one(FleetGrid)
        await pilot.pause(0.3)
        await pilot.press("slash", *"bet")
        await pilot.pause(0.1)
        assert grid.visible_names == ["beta"]
        assert "filter 'bet'" in screen_text(app)
        await pilot.press("enter")
        assert grid.has_focus and grid.visible_names == ["beta"]
        await pilot.press("escape")
        assert sorted(grid.visible_names) == sorted(NAMES)
        await pilot.press("slash", *"tag:us")
        assert sorted(grid.visible_names) == ["alpha", "gamma"]
        await pilot.press("escape")
        assert len(grid.visible_names) == 3


async def test_select_then_restart_asks_and_cancel_does_nothing(tmp_path: Path) -> None:
    marker = "fleetui-%s" % uuid.uuid4().hex[:8]
    app = make_app(tmp_path, marker=marker)
    audit = tmp_path / "audit.jsonl"
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="live agents")
        grid = app.query_one(FleetGrid)
        await pilot.press("home", "space", "down", "space")
        assert len(grid.selected) == 2
        assert "2 selected" in screen_text(app)
        await pilot.press("r")
        await wait_until(pilot, lambda: restart_dialog(app), what="confirm dialog")
        for name in grid.selected:
            assert name in screen_text(app)
        await pilot.press("n")
        await pilot.pause(0.3)
        assert not isinstance(app.screen, ConfirmScreen)
        assert not audit.exists()
        assert any("cancelled" in m for _, _, m in app.notices)
        chosen = sorted(grid.selected)
        await pilot.press("r")
        await wait_until(pilot, lambda: restart_dialog(app), what="confirm dialog")
        await pilot.press("y")
        await wait_until(
            pilot, lambda: sum("restarted" in m for _, _, m in app.notices) == 2, timeout=60, what="restart results"
        )
        records = [json.loads(line) for line in audit.read_text().splitlines()]
        assert sorted(r["instance"] for r in records) == chosen
        assert all(r["action"] == "restart" and r["outcome"] == "ok" for r in records)
    _kill_marked(marker)


async def test_restart_toasts_show_the_started_pid_and_a_benchmark_that_died_at_once(tmp_path: Path) -> None:
    marker = "fleetui-%s" % uuid.uuid4().hex[:8]
    fleet = make_fleet(tmp_path, names=("alpha", "beta"), marker=marker)
    dies = (sys.executable, "-c", "import sys; print('loading params'); print('error: no params'); sys.exit(3)", marker)
    beta = fleet.instances[1]
    bench = dataclasses.replace(beta.benchmark, start=dies, log=str(tmp_path / "beta-bench.log"))
    fleet.instances[1] = dataclasses.replace(beta, benchmark=bench)
    app = FleetApp(FleetController(fleet, audit=AuditLog(tmp_path / "audit.jsonl")), theme="dark")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="live agents")
        await pilot.press("home", "space", "down", "space", "r")
        await wait_until(pilot, lambda: restart_dialog(app), what="confirm dialog")
        await pilot.press("y")
        results = ("alpha: restart", "beta: restart")  # "restarted" or "restart failed"; not a status change
        answered = lambda: sum(m.startswith(results) for _, _, m in app.notices) == 2  # noqa: E731
        await wait_until(pilot, answered, timeout=60, what="restart results")
        records = {r["instance"]: r for r in AuditLog(tmp_path / "audit.jsonl").read()}
        alpha = next(n for n in app.notices if n[2].startswith(results[0]))
        assert alpha[0] == "information" and "restarted" in alpha[2]
        assert "pid %d" % records["alpha"]["result"]["started"]["pid"] in alpha[2]
        beta = next(n for n in app.notices if n[2].startswith(results[1]))
        assert beta[0] == "error" and "died" in beta[2] and "restarted" not in beta[2]
        assert "exit code 3" in beta[2] and "error: no params" in beta[2]
        assert records["beta"]["outcome"] == "failed"
    _kill_marked(marker)


def restart_dialog(app: FleetApp) -> bool:
    """The restart dialog, painted (it opens once the hosts said what a restart would stop)."""
    return isinstance(app.screen, ConfirmScreen) and "Restart (y)" in screen_text(app)


def _kill_marked(marker: str) -> None:
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        with contextlib.suppress(OSError):
            if marker.encode() in Path("/proc/%s/cmdline" % pid).read_bytes():
                os.kill(int(pid), signal.SIGTERM)


async def test_read_only_refuses_restart_without_a_dialog(tmp_path: Path) -> None:
    app = make_app(tmp_path, read_only=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.3)
        assert "READ-ONLY" in screen_text(app)
        await pilot.press("r")
        await wait_until(pilot, lambda: any(t == "Refused" for _, t, _ in app.notices), what="refusal")
        assert not isinstance(app.screen, ConfirmScreen)
        severity, _, message = next(n for n in app.notices if n[1] == "Refused")
        assert severity == "error" and "Read-only" in message and "Nothing was sent" in message
        records = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
        assert records and records[0]["outcome"] == "refused"


async def test_diagnose_key_stores_and_shows_the_verdict(tmp_path: Path) -> None:
    app = make_app(tmp_path, names=("alpha",))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="live agent")
        await pilot.press("d")
        inst = app.state.get("alpha")
        await wait_until(pilot, lambda: inst.diagnosis is not None, timeout=90, what="diagnosis")
        await wait_until(pilot, lambda: any(t.startswith("Diagnosis") for _, t, _ in app.notices), what="notice")
        await open_screen(pilot, app)
        await pilot.press("4")
        await pilot.pause(0.3)
        summary = inst.diagnosis["verdict"].get("summary") or inst.diagnosis["verdict"]["code"]
        assert summary[:30] in screen_text(app).replace("\n", " ") or summary[:20] in screen_text(app)


async def test_diagnose_from_the_instance_screen_shows_its_diagnosis_tab(tmp_path: Path) -> None:
    app = make_app(tmp_path, names=("alpha",))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="live agent")
        await open_screen(pilot, app)
        await pilot.press("2")  # on the process tree
        await pilot.pause(0.2)
        tabs = app.screen.query_one("#inst-tabs")
        assert tabs.active == "tab-procs"
        await pilot.press("d")
        inst = app.state.get("alpha")
        await wait_until(pilot, lambda: inst.diagnosis is not None, timeout=90, what="diagnosis")
        await wait_until(pilot, lambda: tabs.active == "tab-diag", what="the Diagnosis tab")
        await pilot.pause(0.3)
        summary = inst.diagnosis["verdict"].get("summary") or inst.diagnosis["verdict"]["code"]
        text = screen_text(app)
        assert summary[:20] in text
        assert "What was checked" in text and "processes" in text and "name=" not in text  # not a dict dump


async def test_probe_menu_by_key_runs_the_probe(tmp_path: Path) -> None:
    app = make_app(tmp_path, names=("alpha",))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="live agent")
        await pilot.press("p")
        await wait_until(pilot, lambda: isinstance(app.screen, ProbeMenu), what="probe menu")
        assert "Disk, memory and load" in screen_text(app)
        await pilot.press("3")
        inst = app.state.get("alpha")
        await wait_until(pilot, lambda: "resources" in inst.probes, timeout=60, what="probe result")
        assert not isinstance(app.screen, ProbeMenu)
        await open_screen(pilot, app)
        await pilot.press("5")
        await pilot.pause(0.3)
        assert "resources" in screen_text(app)
        # the menu also works from the instance screen, by list (arrows + enter)
        await pilot.press("p")
        await wait_until(pilot, lambda: isinstance(app.screen, ProbeMenu), what="probe menu")
        await pilot.press("escape")
        assert isinstance(app.screen, InstanceScreen)


async def test_theme_cycles_and_is_remembered(tmp_path: Path, config_dir: Path) -> None:
    app = make_app(tmp_path, names=("alpha",), theme=None)
    async with app.run_test(size=(80, 24)) as pilot:
        assert app.theme == "dark"
        await pilot.press("t")
        assert app.theme == "light"
        await pilot.press("t")
        assert app.theme == "high-contrast"
    assert json.loads((config_dir / "settings.json").read_text())["theme"] == "high-contrast"
    again = make_app(tmp_path, names=("alpha",), theme=None)
    async with again.run_test(size=(80, 24)) as pilot:
        assert again.theme == "high-contrast"
        await pilot.press("t")
        assert again.theme == "dark"
    explicit = make_app(tmp_path, names=("alpha",), theme="light")
    async with explicit.run_test(size=(80, 24)):
        assert explicit.theme == "light"
    assert json.loads((config_dir / "settings.json").read_text())["theme"] == "light"


async def test_unknown_theme_falls_back_with_a_warning(tmp_path: Path) -> None:
    app = make_app(tmp_path, names=("alpha",), theme="no-such-theme")
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.1)
        assert app.theme == "dark"
        assert any("unknown theme" in m for _, _, m in app.notices)


async def test_help_screen_and_command_palette_entries(tmp_path: Path) -> None:
    app = make_app(tmp_path, names=("alpha",))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        assert "restart the benchmark" in screen_text(app)
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        for title in (
            "Fleet: diagnose",
            "Fleet: restart benchmark",
            "Fleet: filter",
            "Fleet: cycle theme",
            "Open alpha",
        ):
            assert title in titles
        command = next(c for c in app.get_system_commands(app.screen) if c.title == "Open alpha")
        command.callback()
        await pilot.pause(0.2)
        assert isinstance(app.screen, InstanceScreen)


async def test_stopped_agent_turns_stale_with_age_and_notifies(tmp_path: Path) -> None:
    app = make_app(tmp_path, names=("alpha", "beta"))
    app.bell_enabled = True
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="live agents")
        pid = app.state.get("beta").hello["pid"]
        os.kill(pid, signal.SIGSTOP)
        try:
            await wait_until(pilot, lambda: app.state.get("beta").status == "stale", timeout=20, what="stale")
            await pilot.pause(1.3)
            text = screen_text(app)
            row = next(line for line in text.splitlines() if "beta" in line)
            assert "STALE" in row and "s " in row + " "
            assert app.query_one(FleetGrid).visible_names[0] == "beta"  # trouble first
            assert any(t == "Got worse" and "beta" in m for _, t, m in app.notices)
        finally:
            os.kill(pid, signal.SIGCONT)
        await wait_until(pilot, lambda: app.state.get("beta").status != "stale", timeout=20, what="recovery")


async def test_mouse_click_focuses_and_double_click_opens(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        # a pane's height follows its status (CONNECTING, a verdict line): click once they are settled, at the row
        # the grid itself says is the second pane's (a fixed row missed it when the first pane grew under a
        # loaded CI box)
        await wait_until(pilot, lambda: all_live(app), what="live agents")
        grid = app.query_one(FleetGrid)
        await pilot.press("home")  # a key holds the order (ORDER_HOLD): no status change reorders under the click
        second = grid.visible_names[1]
        row = next(y for y in range(grid.size.height) if grid.name_at(5, y) == second)
        await pilot.click(FleetGrid, offset=(5, row))
        assert grid.cursor_name == second
        await pilot.double_click(FleetGrid, offset=(5, row))
        await wait_until(pilot, lambda: isinstance(app.screen, InstanceScreen), what="instance screen")


async def test_quit_stops_the_agents(tmp_path: Path) -> None:
    app = make_app(tmp_path, names=("alpha",))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="live agent")
        pid = app.state.get("alpha").hello["pid"]
        await pilot.press("q")
        await asyncio.sleep(0.2)
    assert app.controller.links == {}

    def agent_gone() -> bool:  # exited, or a zombie
        proc = Path("/proc/%d" % pid)
        return not proc.exists() or b"Z" in (proc / "stat").read_bytes().split(b")")[-1][:3]

    await until(agent_gone, timeout=5, what="the agent to exit after quit")


@pytest.mark.parametrize(("size", "shown"), [((80, 24), 3), ((200, 60), 5)])
async def test_a_small_terminal_keeps_the_newest_few_notifications(tmp_path: Path, size, shown: int) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=size, notifications=True) as pilot:
        await pilot.pause(0.2)
        app.clear_notifications()
        for n in range(5):
            app.notify("notice %d" % n, timeout=30)
        await pilot.pause(0.3)
        toasts = list(app.screen.query_one(ToastRack).query(Toast))
        assert len(toasts) == shown
        await wait_until(pilot, lambda: "notice 4" in screen_text(app), timeout=15, what="the newest toast drawn")


async def test_order_holds_while_the_operator_moves_then_trouble_sorts_first(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="live agents")
        grid = app.query_one(FleetGrid)
        await pilot.pause(0.5)
        before = grid.visible_names
        await pilot.press("home", "down")  # the operator is moving: panes must not jump under the cursor
        last = before[-1]
        app.state.set_link_status(last, "auth_failed", "permission denied")
        await pilot.pause(0.6)
        assert grid.visible_names == before and grid.cursor_name == before[1]
        await wait_until(pilot, lambda: grid.visible_names[0] == last, timeout=15, what="the failing host sorted first")
        assert grid.cursor_name == before[1]  # the cursor follows its instance, not its position


def burst(app: FleetApp, *keys: str) -> None:
    """Keys as a terminal delivers a fast typist or a paste: all queued before the first is handled."""
    from textual import events

    for key in keys:
        char = {"slash": "/", "enter": "\r", "space": " "}.get(key, key if len(key) == 1 else None)
        event = events.Key(key, char)
        event.set_sender(app)
        app._driver.send_message(event)


async def test_filter_text_shows_while_typing_and_a_burst_of_keys_reaches_it(tmp_path: Path) -> None:
    from widgets.filter_bar import FilterBar

    app = make_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.3)
        grid = app.query_one(FleetGrid)
        burst(app, "slash", "b", "e", "t")
        bar = app.query_one(FilterBar)
        # (waits, not a fixed pause: on a loaded machine the grid follows the typed text a frame or more later)
        await wait_until(pilot, lambda: bar.value == "bet" and grid.visible_names == ["beta"], timeout=10,
                         what="the burst typed into the filter and the grid filtered")
        assert bar.has_focus
        await wait_until(pilot, lambda: "bet" in screen_text(app).splitlines()[bar.region.y], timeout=10,
                         what="the typed text on the filter's own row")  # (the header may take two rows)
        assert "filter '" not in screen_text(app).splitlines()[bar.region.y]  # not only in the header
        burst(app, "enter", "down")
        await wait_until(pilot, lambda: grid.has_focus, timeout=10, what="the grid focused after Enter")
        await pilot.pause(0.3)  # (the "down" after it)
        assert grid.visible_names == ["beta"] and bar.value == "bet"


async def test_actions_target_the_visible_selection_and_keys_select_all_shown_or_none(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="live agents")
        grid = app.query_one(FleetGrid)
        await pilot.press("a")  # select all shown
        assert grid.selected == set(NAMES)
        await pilot.press("slash", *"tag:us", "enter")
        assert sorted(grid.visible_names) == ["alpha", "gamma"]
        assert app.targets() == sorted(["alpha", "gamma"]) or sorted(app.targets()) == ["alpha", "gamma"]
        await pilot.press("r")
        await wait_until(pilot, lambda: restart_dialog(app), what="confirm dialog")
        text = screen_text(app)
        assert "alpha" in text and "gamma" in text and "beta" not in text and "2 instances" in text
        await pilot.press("n")
        # a selected instance whose status changes stays shown under a status filter
        await pilot.press("escape", "escape", "a")  # clear the filter then the selection, select all again
        await pilot.press("slash", *"status:ok", "enter")
        shown = list(grid.visible_names)
        assert shown
        verdict = {"code": "broken_pipe", "severity": "error", "summary": "transport error"}
        app.state.set_diagnosis(shown[0], {"verdict": verdict, "findings": [], "steps": []})
        await pilot.pause(0.5)
        assert shown[0] in grid.visible_names
        await pilot.press("u")  # unselect all
        assert not grid.selected


async def test_a_restart_takes_the_instance_out_of_failed_and_the_pane_says_restarted(tmp_path: Path) -> None:
    marker = "fleetui-%s" % uuid.uuid4().hex[:8]
    app = make_app(tmp_path, names=("alpha",), marker=marker)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="live agent")
        # its benchmark is not running: the automatic diagnosis looks first (were its verdict to land after the one
        # set below, on a loaded machine, it would replace it)
        await wait_until(pilot, lambda: app.state.get("alpha").diagnosis is not None, what="the automatic verdict")
        verdict = {"code": "broken_pipe", "severity": "error", "summary": "transport error: broken pipe"}
        app.state.set_diagnosis("alpha", {"verdict": verdict, "findings": [], "steps": []})
        await wait_until(pilot, lambda: "FAILED" in screen_text(app), what="FAILED on the pane")
        await pilot.press("r")
        await wait_until(pilot, lambda: restart_dialog(app), what="confirm dialog")
        await pilot.press("y")
        await wait_until(pilot, lambda: app.state.get("alpha").status != "failed", timeout=30, what="out of FAILED")
        await wait_until(pilot, lambda: "restarted" in screen_text(app) and "FAILED" not in screen_text(app),
                         what="restarted on the pane")
        assert "failed" not in app.header_text().plain.lower()
    _kill_marked(marker)


def two_log_fleet(tmp_path: Path) -> Fleet:
    """alpha follows setup.log first and its benchmark's log (300 lines) second."""
    fleet = make_fleet(tmp_path, names=("alpha",))
    setup = tmp_path / "setup.log"
    setup.write_text("setup line 1\nsetup done\n")
    bench_log = tmp_path / "bench-full.log"
    bench_log.write_text("".join("proof %d done\n" % k for k in range(1, 301)))
    inst = fleet.instances[0]
    bench = dataclasses.replace(inst.benchmark, log=str(bench_log))
    fleet.instances[0] = dataclasses.replace(inst, logs=(str(setup), str(bench_log)), benchmark=bench)
    return fleet


async def test_logs_open_on_the_benchmark_log_at_its_tail_with_a_follow_badge(tmp_path: Path) -> None:
    app = FleetApp(FleetController(two_log_fleet(tmp_path), audit=AuditLog(tmp_path / "audit.jsonl")), theme="dark")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: len(app.state.get("alpha").logs) == 2, what="both logs")
        screen = await open_screen(pilot, app)
        await pilot.press("3")
        def bench_log_shown() -> bool:  # the first tab (setup.log) may show for a paint before the benchmark's
            view = screen.active_log()
            return view is not None and view.path.endswith("bench-full.log")

        await wait_until(pilot, bench_log_shown, what="the benchmark's log tab")
        view = screen.active_log()
        await wait_until(pilot, lambda: "proof 300 done" in screen_text(app), timeout=15, what="the last line")
        assert "FOLLOW" in screen_text(app) and view.has_focus
        await pilot.press("home")
        await pilot.pause(0.2)
        assert "proof 300 done" not in screen_text(app) and "PAUSED" in screen_text(app)
        with (tmp_path / "bench-full.log").open("a") as fh:
            fh.write("proof 301 done\nproof 302 done\n")
        await wait_until(pilot, lambda: "2 new" in screen_text(app), timeout=10, what="PAUSED (2 new lines)")
        await pilot.press("G")
        await wait_until(pilot, lambda: "proof 302 done" in screen_text(app), timeout=15, what="End follows")
        assert view.follow and "FOLLOW" in screen_text(app)
        await pilot.press("slash", *"proof 1", "enter")
        assert not view.follow and view.has_focus and "PAUSED" in screen_text(app)
        first = view.match_line
        await pilot.press("n")
        assert view.match_line != first and "proof 1" in view.lines[view.match_line][1]
        await pilot.press("N")
        assert view.match_line == first
        await pilot.press("end")
        assert view.follow


async def test_instance_screen_keys_tab_switches_tabs_digits_focus_the_content_q_goes_back(tmp_path: Path) -> None:
    from textual.widgets import Tabs

    app = FleetApp(FleetController(two_log_fleet(tmp_path), audit=AuditLog(tmp_path / "audit.jsonl")), theme="dark")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: len(app.state.get("alpha").logs) == 2, what="both logs")
        screen = await open_screen(pilot, app)
        tabs = screen.query_one("#inst-tabs")
        await pilot.press("tab")
        assert tabs.active == "tab-procs"
        await pilot.press("shift+tab")
        assert tabs.active == "tab-gpus"
        await pilot.press("4")
        assert tabs.active == "tab-diag" and not isinstance(app.focused, Tabs)
        await pilot.press("3")
        await pilot.pause(0.2)
        view = screen.active_log()
        assert app.focused is view
        await pilot.press("right_square_bracket")  # the next log file
        await pilot.pause(0.2)
        assert screen.active_log() is not view and app.focused is screen.active_log()
        await pilot.press("q")
        await pilot.pause(0.2)
        assert app.is_running and not isinstance(app.screen, InstanceScreen)


async def test_toasts_are_one_line_each_kept_on_a_small_screen_and_rate_limited(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await pilot.pause(0.2)
        app.clear_notifications()
        events = [(n, "ok", "failed", "transport error: broken pipe while sending the proof") for n in NAMES]
        events.append(("delta", "ok", "unreachable", "Connection refused"))
        app.report_events(events)
        await pilot.pause(0.3)
        toasts = list(app.screen.query_one(ToastRack).query(Toast))
        assert toasts and all(t.size.height <= 1 for t in toasts)
        assert sum(t.size.height for t in toasts) <= 4
        before = len(app.notices)
        app.report_events([("alpha", "ok", "failed", "again")])  # within the rate limit: timeline only
        await pilot.pause(0.1)
        assert len(app.notices) == before
        for n in range(6):
            app.notify("alpha: restarted (started pid %d)" % (1000 + n), timeout=30)
        await pilot.pause(0.3)
        toasts = list(app.screen.query_one(ToastRack).query(Toast))
        assert 1 < len(toasts) <= 4  # more than the newest, and never a wall
        await pilot.press("e")
        await pilot.pause(0.3)
        text = screen_text(app)
        assert "Events" in text and "pid 1005" in text and "alpha" in text


async def test_the_event_timeline_is_kept_across_console_restarts(tmp_path: Path) -> None:
    from console.monitor.monitoring import MonitoredController, Monitoring

    history = tmp_path / "history.sqlite3"

    def monitored() -> FleetApp:
        fleet = make_fleet(tmp_path, names=("alpha",))
        return FleetApp(MonitoredController(fleet, Monitoring(fleet, history=history)), theme="dark")

    app = monitored()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="live agent")
        verdict = {"code": "broken_pipe", "severity": "error", "summary": "transport error: broken pipe"}
        app.state.set_diagnosis("alpha", {"verdict": verdict, "findings": [], "steps": []})
        await pilot.pause(1.5)
    again = monitored()
    async with again.run_test(size=(80, 24)) as pilot:
        await pilot.press("e")
        await pilot.pause(0.5)
        text = screen_text(again)
        assert "broken_pipe" in text or "transport error" in text


async def test_header_never_says_all_ok_while_instances_connect(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        assert "all ok" not in app.header_text().plain
        assert "connecting" in app.header_text().plain
        await wait_until(pilot, lambda: all_live(app), what="live agents")
        await pilot.pause(0.5)
        name = "alpha"
        app.state.set_link_status(name, "unreachable", "Connection refused")
        await pilot.pause(0.3)
        screen = await open_screen(pilot, app) if app.grid.cursor_name == name else None
        if screen is None:
            app.open_instance(name)
            await pilot.pause(0.5)
        text = screen_text(app)
        assert "last seen" in text and "not live" in text


# -- issue 12, smaller bugs -------------------------------------------------------------------------------
DEEP = "/tmp/fleet-demo-y_zzlfxm/alpha/tmp"


def stalled_diagnosis() -> dict:
    """The shape the agent returns (recorded from the demo's dlstall instance), with a run that is not running."""
    log = DEEP + "/benchmark-full.log"
    return {
        "verdict": {"code": "benchmark_not_running", "severity": "warning", "label": "benchmark not running",
                    "summary": "no benchmark process is running (patterns: ^cuzk-(bench|daemon)$, (?i)prove\\b)"},
        "findings": [
            {"code": "benchmark_not_running", "severity": "warning",
             "summary": "no benchmark process is running (patterns: ^cuzk-(bench|daemon)$, (?i)prove\\b)",
             "evidence": []},
            {"code": "missing_input", "severity": "warning",
             "summary": "missing input: C1 output not found",
             "evidence": [{"path": log, "line": 1, "text": "C1 output not found"},
                          {"path": log, "line": 2, "text": "Downloading from https://example.dev/c1.json ..."}]},
        ],
        "steps": [
            {"name": "processes", "status": "problem",
             "summary": "no benchmark process is running (patterns: ^cuzk-(bench|daemon)$, (?i)prove\\b)"},
            {"name": "recent_files", "status": "info", "summary": "4 recent file(s) in watched dirs",
             "lines": ["2s ago     459B " + log]},
            {"name": "verdict", "status": "problem", "summary": "no benchmark process is running"},
        ],
    }


async def test_the_diagnosis_tab_reads_well_at_80_columns(tmp_path: Path) -> None:
    app = make_app(tmp_path, names=("alpha",))
    async with app.run_test(size=(80, 50)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="live agent")
        await open_screen(pilot, app)
        await pilot.press("4")
        await pilot.pause(0.3)
        app.state.set_diagnosis("alpha", stalled_diagnosis())
        app.screen.update_from_state(force=True)
        text = await wait_until(pilot, lambda: "C1 output" in screen_text(app) and screen_text(app), what="verdict")
        assert "patterns:" not in text and "^cuzk" not in text  # regexes are config, not a finding
        assert "no benchmark process is running" in text
        evidence = [line for line in text.splitlines() if "C1 output not found" in line]
        assert evidence and all(DEEP not in line for line in evidence)  # the file name on the evidence line
        assert any(line.strip().startswith("benchmark-full.log:1") for line in evidence)
        assert DEEP + "/benchmark-full.log" in text  # the full path once, on its own detail line
        assert "recent_filesinfo" not in text and "recent_files " in text
        healthy = {"code": "healthy", "severity": "info", "label": "healthy",
                   "summary": "healthy: 3 benchmark process(es) running"}
        app.state.set_diagnosis("alpha", {"verdict": healthy, "findings": [], "steps": [
            {"name": "verdict", "status": "ok", "summary": healthy["summary"]}]})
        app.screen.update_from_state(force=True)
        text = await wait_until(pilot, lambda: "3 benchmark process(es) running" in screen_text(app)
                                and screen_text(app), what="the healthy verdict painted")
        assert text.count("healthy") == 1 and "3 benchmark process(es) running" in text


async def test_read_only_footers_do_not_offer_restart_and_r_still_says_refused(tmp_path: Path) -> None:
    app = make_app(tmp_path, read_only=True)
    async with app.run_test(size=(100, 24)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="live agents")
        await pilot.pause(0.3)
        footer = screen_text(app).splitlines()[-1]
        assert "Diagnose" in footer and "Restart" not in footer
        screen = await open_screen(pilot, app)
        footer = screen_text(app).splitlines()[-1]
        assert "Diagnose" in footer and "Restart" not in footer
        await pilot.press("r")
        await wait_until(pilot, lambda: any(t == "Refused" for _, t, _ in app.notices), what="refusal")
        assert app.screen is screen


async def test_a_probe_from_the_grid_shows_its_output_and_output_opens_at_its_tail(tmp_path: Path) -> None:
    app = make_app(tmp_path, names=("alpha",))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="live agent")
        await pilot.press("p")
        await wait_until(pilot, lambda: isinstance(app.screen, ProbeMenu), what="probe menu")
        await pilot.press("3")  # resources, from the grid
        await wait_until(pilot, lambda: isinstance(app.screen, InstanceScreen), timeout=60, what="the output shown")
        await wait_until(pilot, lambda: "load:" in screen_text(app), timeout=15, what="the probe's lines")
        assert not any("Enter, then 5" in m for _, _, m in app.notices)
        # a long output (a kernel log: boot lines first) opens at its last line
        app.state.set_probe_result("alpha", "dmesg", {
            "title": "kernel log (tail)", "lines": ["[    0.%06d] boot line %d" % (k, k) for k in range(1, 200)]
            + ["[ 9999.000000] NVRM: Xid 79, GPU has fallen off the bus"]})
        app.screen.update_from_state(force=True)
        await wait_until(pilot, lambda: "fallen off the bus" in screen_text(app), timeout=15, what="the tail")
        assert "boot line 1\n" not in screen_text(app) + "\n"


async def test_an_empty_fleet_says_how_to_add_instances(tmp_path: Path) -> None:
    folder = tmp_path / ("a-fleet-folder-whose-name-is-long-enough-to-go-past-the-edge-of-the-grid" * 2)
    folder.mkdir()
    fleet = Fleet([], source=str(folder / "fleet.toml"))
    app = FleetApp(FleetController(fleet, audit=AuditLog(tmp_path / "audit.jsonl")), theme="dark")
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: "No instances" in screen_text(app), what="the empty fleet's hint")
        text = screen_text(app)
        assert "".join(line.strip() for line in text.splitlines()).count(str(folder / "fleet.toml")) == 1  # wrapped
        assert "[[instance]]" in text and "fleet-console check" in text and "README" in text


async def test_a_filter_that_hides_every_instance_says_so(tmp_path: Path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="live agents")
        await pilot.press("slash", *"zzz", "enter")
        await pilot.pause(0.3)
        assert "No instance matches 'zzz'" in screen_text(app)


async def test_a_theme_picked_in_the_palette_is_remembered_and_t_cycles_back_to_it(
    tmp_path: Path, config_dir: Path
) -> None:
    from textual.command import CommandPalette

    app = make_app(tmp_path, names=("alpha",), theme=None)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("ctrl+p")
        await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette), what="palette")
        await pilot.press(*"theme")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await pilot.pause(0.3)
        await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette), what="theme picker")
        await pilot.press(*"nord")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await wait_until(pilot, lambda: not isinstance(app.screen, CommandPalette), what="picker closed")
        assert app.theme == "nord"
        await pilot.pause(0.2)
    assert json.loads((config_dir / "settings.json").read_text())["theme"] == "nord"
    again = make_app(tmp_path, names=("alpha",), theme=None)
    async with again.run_test(size=(80, 24)) as pilot:
        assert again.theme == "nord"
        seen = []
        for _ in range(4):
            await pilot.press("t")
            seen.append(again.theme)
        assert seen == ["dark", "light", "high-contrast", "nord"]  # the picked theme stays in t's ring


async def test_palette_screenshot_on_a_box_without_downloads_says_where_it_went(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from textual.command import CommandPalette

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))  # a headless box: no ~/Downloads
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("FLEET_CONSOLE_STATE_DIR", str(tmp_path / "state"))
    app = make_app(tmp_path, names=("alpha",))
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("ctrl+p")
        await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette), what="palette")
        await pilot.press(*"screenshot")
        await pilot.pause(0.5)
        await pilot.press("enter")
        note = await wait_until(
            pilot, lambda: next((n for n in app.notices if "creenshot" in n[1] + n[2]), None), what="a notice"
        )
        assert note[0] != "error", note
        await pilot.pause(0.3)
        assert len([n for n in app.notices if n[1] == "Screenshot"]) == 1
        saved = list((tmp_path / "state").glob("screenshots/*.svg"))
        assert len(saved) == 1 and str(saved[0]) in note[2]


async def test_the_header_takes_its_height_again_after_a_resize(tmp_path: Path) -> None:
    app = make_app(tmp_path, demo=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="live agents")
        await pilot.pause(0.5)
        bar = app.query_one("#topbar")
        assert bar.size.height == 2  # the demo banner and the counts do not fit in 80 columns
        await pilot.resize_terminal(200, 40)
        await wait_until(pilot, lambda: bar.size.height == 1, timeout=10, what="one line at 200 columns")
        assert "instances" in screen_text(app).splitlines()[0]
        await pilot.resize_terminal(80, 24)
        await wait_until(pilot, lambda: bar.size.height == 2, timeout=10, what="two lines at 80 columns")


async def test_an_unreachable_pane_counts_down_to_its_next_retry(tmp_path: Path) -> None:
    import re
    import socket

    with socket.socket() as s:  # a port nothing listens on: every attempt is refused at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    down = Instance(name="down", host="127.0.0.1", port=port, user="nobody", transport="ssh", interval=0.5)
    fleet = Fleet([down], source=str(tmp_path / "fleet.toml"))
    app = FleetApp(FleetController(fleet, audit=AuditLog(tmp_path / "audit.jsonl")), theme="dark")

    def countdown() -> int | None:
        m = re.search(r"retry in (\d+)s", screen_text(app))
        return int(m.group(1)) if m else None

    async with app.run_test(size=(80, 24)) as pilot:
        first = await wait_until(
            pilot, lambda: (countdown() or 0) >= 3 and countdown(), timeout=40, what="a retry a few s away"
        )
        # it moves (within a few seconds, on a loaded box too)
        await wait_until(pilot, lambda: (countdown() or first) < first, timeout=15, what="the countdown moving")
        screen = await open_screen(pilot, app)
        assert screen.instance_name == "down"
        await wait_until(pilot, lambda: countdown() is not None, timeout=20, what="the countdown in the header")


async def test_compact_rows_are_columns_with_the_gpu_model(tmp_path: Path) -> None:
    app = make_app(tmp_path, names=("a", "beta-long-name", "gamma"))
    async with app.run_test(size=(100, 24)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="live agents")
        await pilot.pause(0.6)
        lines = screen_text(app).splitlines()
        rows = [next(line for line in lines if (" %s " % n) in line) for n in ("a", "beta-long-name", "gamma")]
        for needle in ("xGPU", "mem", "°"):  # every figure starts in the same column on every row
            cols = {row.index(needle) for row in rows}
            assert len(cols) == 1, (needle, rows)
        names = ("a", "beta-long-name", "gamma")
        badge_cols = {len(row) - len(row[row.index(n) + len(n):].lstrip()) for row, n in zip(rows, names, strict=True)}
        assert len(badge_cols) == 1, rows  # the badges line up after the longest name
        assert all("RTX 3090" in row for row in rows)  # the GPU model
        assert not any("simulated GPUs" in row for row in rows)  # said once, in the header
        assert "simulated GPUs" in lines[0]


async def test_the_log_skip_marker_has_no_line_number(tmp_path: Path) -> None:
    app = make_app(tmp_path, names=("alpha",))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="live agent")
        with (tmp_path / "alpha.log").open("a") as fh:  # a burst: the agent keeps the newest 500 lines
            fh.write("".join("burst %d\n" % k for k in range(1, 2001)))
        screen = await open_screen(pilot, app)
        await pilot.press("3")
        view = await wait_until(pilot, lambda: screen.active_log(), what="log view")
        await wait_until(pilot, lambda: any("lines skipped" in c for _, c in view.lines), timeout=10, what="marker")
        index = next(i for i, (_, c) in enumerate(view.lines) if "lines skipped" in c)
        view.scroll_to(y=max(0, index - 2), animate=False)
        await pilot.pause(0.3)
        row = next(line for line in screen_text(app).splitlines() if "lines skipped" in line)
        assert row.lstrip().startswith("[..."), row
        numbered = next(line for line in screen_text(app).splitlines() if "burst 1501" in line)
        assert numbered.split()[0].isdigit()  # (real lines keep their numbers)
