"""Log tools: the agent's read/grep ops over a real sshd, and the Logs tab's wrap, filter, colours, older lines,
grep on the host and the jump from a diagnosis's evidence line (Pilot on the real controller, local agents)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

from console.agent.sample import logread
from console.core.actions import ActionError
from console.core.audit import AuditLog
from console.core.controller import FleetController
from console.inventory import BenchmarkSpec, Fleet
from console.ui.app import FleetApp
from tests.support.app import make_fleet, open_screen, screen_text, wait_until
from tests.support.sshd import Sshd, ssh_instance
from widgets.evidence_view import EvidenceView
from widgets.log_grep import GrepScreen
from widgets.log_view import ERROR_STYLE, WARN_STYLE, LogView, line_style

FAST = {"heartbeat_interval": 0.5, "interval": 0.5, "log_interval": 0.2}


pytestmark = pytest.mark.usefixtures("config_dir")  # (tests/conftest.py)


# -- the agent ops over a real sshd ----------------------------------------------------------------------
async def test_read_and_grep_over_sshd_bounded_and_refusing_other_files(sshd: Sshd, tmp_path: Path) -> None:
    logs_dir = tmp_path / "logs"
    logs_dir.mkdir()
    big = logs_dir / "big.log"  # 300k lines, ~6 MB, a very long line in the middle and no newline at the end
    with big.open("w") as fh:
        for k in range(1, 300001):
            fh.write("line %d%s\n" % (k, " ERROR disk" if k % 997 == 0 else ""))
            if k == 150000:
                fh.write("x" * 300000 + " needle-in-long\n")
        fh.write("the last line without newline")
    other = tmp_path / "elsewhere.log"
    other.write_text("secret\n")
    (logs_dir / "escape.log").symlink_to(other)
    nested = logs_dir / "sub" / "nested.txt"
    nested.parent.mkdir()
    nested.write_text("one\ntwo ERROR\n")
    inst = ssh_instance(sshd, logs=(str(big),), watch_dirs=(str(logs_dir),), agent_extra=FAST)
    controller = FleetController(Fleet([inst], source="test"), audit=AuditLog(tmp_path / "audit.jsonl"))
    await controller.start()
    try:
        await controller.wait_ready("box1", timeout=60)
        data = await controller.read_log("box1", str(big), 50, 5)
        assert data["lines"] == [(k, "line %d" % k) for k in range(45, 50)] and data["first_line"] == 45
        data = await controller.read_log("box1", str(big), 3, 10)  # fewer before it than asked
        assert data["lines"] == [(1, "line 1"), (2, "line 2")]
        data = await controller.read_log("box1", str(big), None, 2)  # the tail: numbered as the follower does
        assert data["lines"] == [(300001, "line 300000"), (300002, "the last line without newline")]
        data = await controller.read_log("box1", str(big), 200000, 100000)  # n is capped
        assert len(data["lines"]) == logread.MAX_READ_LINES and data["lines"][-1] == (199999, "line 199998")
        long_line = (await controller.read_log("box1", str(big), 150002, 1))["lines"][0]
        assert long_line[0] == 150001 and len(long_line[1]) <= logread.LINE_CHARS  # capped

        hits = await controller.grep_log("box1", str(big), "error DISK")  # any case
        assert hits["truncated"] and len(hits["hits"]) == logread.MAX_HITS
        assert hits["hits"][:2] == [(997, "line 997 ERROR disk"), (1994, "line 1994 ERROR disk")]
        one = await controller.grep_log("box1", str(big), r"^line 2991\d\d ERROR", regex=True)
        assert one["hits"] == [(299101, "line 299100 ERROR disk")] and not one["truncated"]
        assert one["lines"] == 300002
        nested_hits = await controller.grep_log("box1", str(nested), "error")  # under a watch dir
        assert nested_hits["hits"] == [(2, "two ERROR")]

        for path in ("/etc/passwd", str(other), str(logs_dir / "escape.log"), str(logs_dir / ".." / "elsewhere.log"),
                     str(logs_dir)):
            with pytest.raises(ActionError, match=r"not a log|not a regular file"):
                await controller.read_log("box1", path, None, 5)
            with pytest.raises(ActionError, match=r"not a log|not a regular file"):
                await controller.grep_log("box1", path, "secret")
        with pytest.raises(ActionError, match="bad regular expression"):
            await controller.grep_log("box1", str(big), "(", regex=True)
    finally:
        await controller.stop()


def test_grep_stops_at_its_time_limit_with_what_it_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(b"hit\n" * (3 << 20))  # 12 MB: more than one block
    monkeypatch.setattr(logread, "TIME_LIMIT", 0.0)
    data = logread.grep({"logs": [str(log)]}, str(log), "nothing")
    assert data["truncated"] and data["timed_out"] and data["hits"] == []


# -- the Logs tab (Pilot) ------------------------------------------------------------------------------
def log_fleet(tmp_path: Path, extra_line: str = "") -> tuple[Fleet, Path]:
    """alpha follows bench.log: 300 numbered lines (the agent sends the last 200 on connect)."""
    fleet = make_fleet(tmp_path, names=("alpha",))
    log = tmp_path / "bench.log"
    lines = ["proof %d done" % k for k in range(1, 301)]
    lines[279] = "proof 280 ERROR: CUDA failure" + extra_line
    lines[284] = "proof 285 warning: slow"
    log.write_text("\n".join(lines) + "\n")
    inst = fleet.instances[0]
    fleet.instances[0] = dataclasses.replace(inst, logs=(str(log),), benchmark=BenchmarkSpec(log=str(log)))
    return fleet, log


async def open_logs(pilot: Any, app: FleetApp) -> LogView:
    await wait_until(pilot, lambda: app.state.get("alpha").logs, what="the log")
    screen = await open_screen(pilot, app)
    await pilot.press("3")
    await wait_until(pilot, lambda: screen.active_log() is not None, what="log tab")
    view = screen.active_log()
    await wait_until(pilot, lambda: "proof 300 done" in screen_text(app), timeout=20, what="the last line")
    return view


def make_app(tmp_path: Path, **kw: Any) -> tuple[FleetApp, Path]:
    fleet, log = log_fleet(tmp_path, **kw)
    return FleetApp(FleetController(fleet, audit=AuditLog(tmp_path / "audit.jsonl")), theme="dark"), log


def test_error_and_warning_lines_are_coloured_by_whole_words() -> None:
    assert line_style("Traceback (most recent call last):") == ERROR_STYLE
    assert line_style("RuntimeError: CUDA out of memory") == ERROR_STYLE
    assert line_style("thread 'main' panicked at src/main.rs") == ERROR_STYLE
    assert line_style("[W] WARNING low disk") == WARN_STYLE
    assert line_style("0 errors, terror, warnings_count=0, mirror") is None


async def test_wrap_toggles_and_an_error_line_is_red(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path, extra_line=" " + "tail-of-a-long-line " * 8)
    async with app.run_test(size=(100, 30)) as pilot:
        view = await open_logs(pilot, app)
        await wait_until(pilot, lambda: any("CUDA failure" in t for _, t in view.lines), what="the error line")
        index = next(i for i, (_, t) in enumerate(view.lines) if "CUDA failure" in t)
        await pilot.press("f")  # paused: the error line stays where it is put
        view.scroll_to(y=index - 2, animate=False, immediate=True)
        await pilot.pause(0.3)
        strip = view.render_line(2)
        red = [seg for seg in strip if "CUDA failure" in seg.text]
        assert red and red[0].style is not None and red[0].style.color is not None
        assert red[0].style.color.name == "red"
        cut = screen_text(app).count("tail-of-a-long-line")
        assert 0 < cut < 8 and not view.wrap  # cut at the right edge
        await pilot.press("w")
        await pilot.pause(0.3)
        assert view.wrap and view.virtual_size.height > len(view.lines)
        await wait_until(pilot, lambda: screen_text(app).count("tail-of-a-long-line") > cut, what="the wrapped line")
        await pilot.press("w")
        await pilot.pause(0.3)
        assert not view.wrap and view.virtual_size.height == len(view.lines) + 1  # (+1: the status line)


async def test_ampersand_filters_as_typed_with_a_count_and_escape_clears(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        view = await open_logs(pilot, app)
        await pilot.press("ampersand", *"proof 29")
        await wait_until(pilot, lambda: view.filter == "proof 29", what="the filter")
        assert [n for n, _ in view.lines] == list(range(290, 300))  # the lines shown (the ring: 101-300)
        assert "FILTER 'proof 29': 10 lines" in screen_text(app)
        await pilot.press("enter")  # kept; the keys go back to the log
        await pilot.pause(0.2)
        assert view.has_focus and view.filter == "proof 29"
        await pilot.press("escape")  # esc clears the filter (a second one leaves the screen)
        await pilot.pause(0.2)
        assert view.filter == "" and len(view.lines) > 100 and "FILTER" not in screen_text(app)
        await pilot.press("slash", *"proof 1", "enter")  # search is still /, n / N
        assert view.match_line is not None and "proof 1" in view.lines[view.match_line][1]


async def test_scrolling_above_the_first_line_loads_older_lines_from_the_host(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        view = await open_logs(pilot, app)
        first = view.first_number()
        assert first is not None and first > 1  # the agent sent only the tail
        await pilot.press("home")
        await pilot.pause(0.2)
        await pilot.press("up")  # at the top: fetch the lines before it
        await wait_until(pilot, lambda: view.first_number() == 1, timeout=20, what="older lines")
        assert [n for n, _ in view.lines[:first]] == list(range(1, first + 1))
        assert view.lines[0] == (1, "proof 1 done") and not view.follow
        await pilot.press("home")
        await wait_until(pilot, lambda: "proof 1 done" in screen_text(app), what="the first line on screen")


async def test_g_greps_the_host_file_and_enter_on_a_hit_jumps_to_its_line(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        view = await open_logs(pilot, app)
        await pilot.press("g", *"proof 4", "enter")
        await wait_until(pilot, lambda: isinstance(app.screen, GrepScreen), timeout=20, what="the hits")
        grep = app.screen
        assert [n for n, _ in grep.hits] == [4, *range(40, 50)]
        await wait_until(pilot, lambda: "      4: proof 4 done" in screen_text(app), what="numbered hits")
        await pilot.press("enter")  # the first hit: line 4, older than the ring
        await wait_until(pilot, lambda: not isinstance(app.screen, GrepScreen), what="the hits closed")
        await wait_until(pilot, lambda: view.mark == 4 and any(n == 4 for n, _ in view.lines), timeout=20,
                         what="line 4 fetched")
        await wait_until(pilot, lambda: "proof 4 done" in screen_text(app), what="line 4 on screen")
        assert not view.follow


async def test_enter_on_an_evidence_line_opens_its_log_at_that_line(tmp_path: Path) -> None:
    app, log = make_app(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: app.state.get("alpha").logs, what="the log")
        screen = await open_screen(pilot, app)
        app.state.set_diagnosis("alpha", {
            "verdict": {"code": "cuda_error", "severity": "error", "summary": "CUDA failure"},
            "findings": [{"code": "cuda_error", "severity": "error", "summary": "CUDA failure", "evidence": [
                {"path": "dmesg", "line": 3, "text": "NVRM: Xid"},
                {"path": str(log), "line": 12, "text": "proof 12 done"},
                {"path": str(log), "line": 280, "text": "proof 280 ERROR: CUDA failure"},
            ]}],
            "steps": [],
        })
        await pilot.press("4")
        await wait_until(pilot, lambda: screen.query_one(EvidenceView).evidence, what="the evidence rows")
        evidence = screen.query_one(EvidenceView)
        await wait_until(pilot, lambda: app.focused is evidence, what="the evidence focused")
        assert [e[1:] for e in evidence.evidence] == [
            ("dmesg", 3), (str(log), 12), (str(log), 280)]
        await pilot.press("down")  # the second evidence line: line 12, not in the ring (fetched)
        await pilot.press("enter")
        await wait_until(pilot, lambda: screen.query_one("#inst-tabs").active == "tab-logs", what="the Logs tab")
        view = screen.active_log()
        await wait_until(pilot, lambda: view.mark == 12 and any(n == 12 for n, _ in view.lines), timeout=20,
                         what="line 12")
        await wait_until(pilot, lambda: "proof 12 done" in screen_text(app), what="line 12 on screen")
        assert app.focused is view and os.path.samefile(view.path, log)
        await pilot.press("4")
        await wait_until(pilot, lambda: app.focused is evidence, what="the evidence focused again")
        assert evidence.current is not None and evidence.current[2] == 12  # the chosen line stays chosen
        await pilot.press("down", "enter")  # line 280 is in the ring: shown at once
        await wait_until(pilot, lambda: view.mark == 280, what="line 280")
        await wait_until(pilot, lambda: "proof 280 ERROR" in screen_text(app), what="line 280 on screen")
