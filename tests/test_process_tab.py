"""The Processes tab over a real sshd and agent, on real processes this test starts: aligned columns under a
header, the benchmark's processes marked, the flat view by rss, the filter, and TERM/KILL (confirmed,
audited, refused in read-only, guarded against pid reuse)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.agent.actions.signals import SignalRefused, process_start
from console.agent.ops import OPS
from console.core.audit import AuditLog
from console.core.controller import FleetController
from console.inventory import BenchmarkSpec, Fleet
from console.ui.app import FleetApp
from tests.support.app import screen_text, wait_until
from tests.support.sshd import Sshd, ssh_instance
from widgets.confirm_screen import ConfirmScreen
from widgets.instance_screen import InstanceScreen
from widgets.process_tree import COLS_WIDTH, ProcessTree

FAST = {"heartbeat_interval": 0.5, "log_interval": 0.2}


pytestmark = pytest.mark.usefixtures("config_dir")  # (tests/conftest.py)


class Workload:
    """Two processes of this test: a "benchmark" script (matched by name) and a bigger one (64 MB)."""

    def __init__(self, tmp_path: Path) -> None:
        self.marker = "fleetproc-%s" % uuid.uuid4().hex[:8]
        script = tmp_path / (self.marker + ".py")
        script.write_text("import time\nwhile True:\n    time.sleep(1)\n")
        self.bench = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.DEVNULL)
        self.big = subprocess.Popen(
            [sys.executable, "-c", "import time; b = bytearray(64 << 20); time.sleep(900)", self.marker],
            stdin=subprocess.DEVNULL,
        )

    def stop(self) -> None:
        for proc in (self.bench, self.big):
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)


@pytest.fixture
def work(tmp_path: Path) -> Iterator[Workload]:
    workload = Workload(tmp_path)
    try:
        yield workload
    finally:
        workload.stop()


def make_app(sshd: Sshd, tmp_path: Path, marker: str, read_only: bool = False) -> FleetApp:
    inst = ssh_instance(sshd, name="box", interval=0.5, agent_extra=FAST, benchmark=BenchmarkSpec(match=(marker,)))
    fleet = Fleet([inst], source=str(tmp_path / "fleet.toml"))
    controller = FleetController(fleet, read_only=read_only, audit=AuditLog(tmp_path / "audit.jsonl"))
    return FleetApp(controller, theme="dark")


async def open_procs(pilot, app: FleetApp, work: Workload) -> ProcessTree:
    await wait_until(pilot, lambda: work.big.pid in app.state.get("box").procs, timeout=60, what="the workload")
    app.open_instance("box")
    await wait_until(pilot, lambda: isinstance(app.screen, InstanceScreen) and app.screen.is_mounted,
                     what="instance screen")
    await pilot.press("2")
    tree = app.screen.query_one(ProcessTree)
    await wait_until(pilot, lambda: {work.bench.pid, work.big.pid} <= set(tree._pt_nodes), timeout=60,
                     what="the workload in the tree")
    await wait_until(pilot, lambda: app.focused is tree, what="the tree's focus")
    return tree


async def select(pilot, tree: ProcessTree, pid: int) -> None:
    tree.move_cursor(tree._pt_nodes[pid], animate=False)
    await wait_until(pilot, lambda: (tree.selected() or {}).get("pid") == pid, what="pid %d selected" % pid)


def row_of(app: FleetApp, pid: int) -> tuple[str, str]:
    """(header line, the row of ``pid``) as on screen, from the header's first column on."""
    lines = screen_text(app).splitlines()
    header = next(line for line in lines if "WCHAN" in line and "COMMAND" in line)
    start = header.index("PID") + len("PID") - 9  # the mark column and a space, then PID right-aligned in 7
    rows = [line[start:] for line in lines if line[start:][2:9].strip() == str(pid)]
    assert rows, "pid %d not on screen:\n%s" % (pid, "\n".join(lines))
    return header[start:], rows[0]


async def test_columns_flat_view_filter_and_term(sshd: Sshd, tmp_path: Path, work: Workload) -> None:
    app = make_app(sshd, tmp_path, work.marker)
    async with app.run_test(size=(160, 50)) as pilot:
        tree = await open_procs(pilot, app, work)
        assert work.bench.pid in tree.bench_pids and work.big.pid not in tree.bench_pids

        # the filter narrows the tree to the workload and its ancestors (this test process among them)
        await pilot.press("slash", *work.marker, "enter")
        await wait_until(pilot, lambda: len(tree._pt_nodes) < len(app.state.get("box").procs), what="the filter")
        assert {work.bench.pid, work.big.pid, os.getpid()} <= set(tree._pt_nodes)
        assert "filter %s" % work.marker in screen_text(app)
        # the columns do not move with depth: this process and its child line up under the header
        await pilot.pause(0.3)
        header, parent_row = row_of(app, os.getpid())
        _, child_row = row_of(app, work.bench.pid)
        for title in ("PID", "S", "CPU%", "RSS", "GPU", "WCHAN", "COMMAND"):
            assert title in header
        assert tree._pt_nodes[work.bench.pid].parent is tree._pt_nodes[os.getpid()]
        assert child_row[0] == "*" and parent_row[0] == " "  # the benchmark's mark
        assert header.index("COMMAND") == COLS_WIDTH
        # the figures line up whatever the depth (row_of found both pids in the header's PID column); the
        # child's guide is right of them, deeper than its parent's command
        guide = min(i for i, ch in enumerate(child_row) if ch in "├└")
        assert guide >= COLS_WIDTH and not child_row[COLS_WIDTH:guide].strip(" │")
        parent_guide = min((i for i, ch in enumerate(parent_row) if ch in "├└"), default=COLS_WIDTH - 2)
        assert parent_guide < guide and "python" in child_row[guide:]

        # the flat view, by rss: the 64 MB process before the small script
        await pilot.press("t", "o")
        await wait_until(pilot, lambda: tree.flat and tree.sort_key == "rss", what="flat by rss")
        order = [n.data for n in tree.root.children]
        assert set(order) == {work.bench.pid, work.big.pid} | ({os.getpid()} & set(order))
        assert order.index(work.big.pid) < order.index(work.bench.pid)
        assert "flat, by rss" in screen_text(app) and "RSS▼" in screen_text(app)

        # the full command line of the selected process
        await select(pilot, tree, work.big.pid)
        await pilot.pause(0.2)
        assert "bytearray(64 << 20)" in screen_text(app)

        # a wrong start time (a reused pid) is refused by the agent: nothing sent
        start = app.state.get("box").procs[work.bench.pid]["start"]
        wrong = await app.controller.signal_process("box", work.bench.pid, "TERM", origin="test", start=start - 100)
        assert not wrong["ok"] and "another process" in wrong["error"]
        assert work.bench.poll() is None

        # j / k move, as everywhere else (issue 35 item 10): no signal, no dialog
        await select(pilot, tree, work.bench.pid)
        row = tree.cursor_line
        await pilot.press("k")
        await wait_until(pilot, lambda: tree.cursor_line == row - 1, what="k: the cursor one row up")
        assert not isinstance(app.screen, ConfirmScreen) and work.bench.poll() is None
        await pilot.press("j")
        await wait_until(pilot, lambda: tree.cursor_line == row, what="j: the cursor back down")
        footer = screen_text(app).splitlines()[-1]
        assert "T TERM" in footer and "K KILL" in footer, footer

        # T: confirmed, then TERM through the agent; the process is gone and the audit log says so
        await select(pilot, tree, work.bench.pid)
        await pilot.press("T")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the confirm dialog")
        dialog = screen_text(app)
        assert "TERM" in dialog and str(work.bench.pid) in dialog and "127.0.0.1" in dialog
        await pilot.press("y")
        await wait_until(pilot, lambda: any("TERM sent to pid %d" % work.bench.pid in m for _, _, m in app.notices),
                         timeout=60, what="the outcome")
        assert work.bench.wait(timeout=30) == -15
        records = AuditLog(tmp_path / "audit.jsonl").read()
        sent = [r for r in records if r["action"] == "signal:TERM" and r["outcome"] == "ok"]
        assert sent and sent[-1]["result"]["pid"] == work.bench.pid and sent[-1]["origin"] == "tui"
        assert any(r["outcome"] == "failed" and r["origin"] == "test" for r in records)  # the refused one


async def test_read_only_refuses_kill_and_the_process_lives(sshd: Sshd, tmp_path: Path, work: Workload) -> None:
    app = make_app(sshd, tmp_path, work.marker, read_only=True)
    async with app.run_test(size=(120, 40)) as pilot:
        tree = await open_procs(pilot, app, work)
        await select(pilot, tree, work.big.pid)
        await pilot.press("K")
        await wait_until(pilot, lambda: any("read-only: refused" in m for _, _, m in app.notices), what="refusal")
        assert not isinstance(app.screen, ConfirmScreen)
        await pilot.pause(1.0)
        assert work.big.poll() is None
        records = AuditLog(tmp_path / "audit.jsonl").read()
        assert [r["outcome"] for r in records if r["action"] == "signal:KILL"] == ["refused"]

        # collapse all / expand all
        parents = lambda: [n for n in tree._pt_nodes.values() if n.children]  # noqa: E731
        await pilot.press("minus")
        await wait_until(pilot, lambda: parents() and not any(n.is_expanded for n in parents()), what="collapsed")
        await pilot.press("plus")
        await wait_until(pilot, lambda: all(n.is_expanded for n in parents()), what="expanded")
        # esc closes the filter and drops it; the next esc leaves the instance screen
        await pilot.press("slash", *"no-such-process-zz")
        await wait_until(pilot, lambda: tree.shown == 0, what="an empty filter result")
        await pilot.press("escape")
        await wait_until(pilot, lambda: tree.filter_text == "" and tree.shown > 2, what="the filter dropped")
        assert isinstance(app.screen, InstanceScreen) and app.focused is tree
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, InstanceScreen), what="back to the grid")


def test_the_signal_op_checks_the_start_time_and_protected_pids(work: Workload) -> None:
    pid = work.big.pid
    start = process_start(pid)
    assert start is not None
    with pytest.raises(SignalRefused, match="another process"):
        OPS["signal"](None, {"pid": pid, "signal": "KILL", "start": start + 5})  # type: ignore[arg-type]
    with pytest.raises(SignalRefused, match="no start time"):
        OPS["signal"](None, {"pid": pid, "signal": "KILL"})  # type: ignore[arg-type]
    with pytest.raises(SignalRefused, match="protected"):
        OPS["signal"](None, {"pid": os.getpid(), "signal": "TERM", "start": process_start(os.getpid())})  # type: ignore[arg-type]
    with pytest.raises(SignalRefused, match="protected"):
        OPS["signal"](None, {"pid": 1, "signal": "TERM", "start": 0})  # type: ignore[arg-type]
    with pytest.raises(SignalRefused, match="unsupported"):
        OPS["signal"](None, {"pid": pid, "signal": "HUP", "start": start})  # type: ignore[arg-type]
    assert work.big.poll() is None
    result = OPS["signal"](None, {"pid": pid, "signal": "KILL", "start_time": start})  # type: ignore[arg-type]
    assert result == {"pid": pid, "signal": "KILL", "sent": True, "alive_after": False}
    assert work.big.wait(timeout=30) == -9


async def test_the_cursor_stays_on_its_process_when_rows_above_it_go_between_refreshes() -> None:
    """Two updates before a refresh, each dropping a process above the selected one (another tenant's sshd
    sessions ending): the cursor ends on the process it was on, not on the row that slid under it, and what
    an action would act on is that process all along."""
    from textual.app import App, ComposeResult

    def rec(pid: int, ppid: int, name: str) -> dict:
        return {"pid": pid, "ppid": ppid, "name": name, "cmdline": name, "state": "S", "cpu": 0.0, "rss": 1 << 20}

    class One(App[None]):
        def compose(self) -> ComposeResult:
            yield ProcessTree(id="tree")

    procs = {pid: rec(pid, 1, name) for pid, name in ((200, "sshd-a"), (300, "sshd-b"), (500, "bench"),
                                                       (600, "cron"), (700, "getty"))}
    procs[1] = rec(1, 0, "init")
    procs[501] = rec(501, 500, "worker")
    app = One()
    async with app.run_test(size=(100, 20)) as pilot:
        tree = app.query_one(ProcessTree)
        tree.update_procs(dict(procs))
        await pilot.pause()
        tree.move_cursor(tree._pt_nodes[501], animate=False)
        await pilot.pause()
        assert tree.selected()["pid"] == 501
        del procs[200]
        tree.update_procs(dict(procs))
        del procs[300]
        tree.update_procs(dict(procs))
        assert tree.selected()["pid"] == 501  # what an action on the selection would act on, before the refresh
        await pilot.pause()
        await pilot.pause()
        assert tree.cursor_node is not None and tree.cursor_node.data == 501
