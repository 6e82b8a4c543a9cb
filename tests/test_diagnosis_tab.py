"""The Diagnosis tab (issue 35 item 26): the verdict said once (its own finding's line is not repeated under
it), and a long line wraps under its own text (a hanging indent), never back to column 0; the evidence cursor
covers the evidence line's rows and Enter still opens its log at its line."""

from __future__ import annotations

from pathlib import Path

from tests.support.app import all_live, make_app, screen_text, wait_until
from widgets.evidence_view import EvidenceView
from widgets.instance_screen import InstanceScreen

LONG_TEXT = ("RuntimeError: CUDA error: an illegal memory access was encountered; CUDA kernel errors might be "
             "asynchronously reported at some other API call, so the stacktrace below might be incorrect")
SUMMARY = "the benchmark's proof failed on a CUDA error (an illegal memory access) in the second partition"


async def test_the_verdict_is_said_once_and_long_lines_hang_under_their_text(tmp_path: Path) -> None:
    app = make_app(tmp_path, names=("alpha",))
    log = tmp_path / "alpha.log"
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_until(pilot, lambda: all_live(app), what="a live agent")
        app.state.set_diagnosis("alpha", {
            "verdict": {"code": "cuda_error", "severity": "error", "summary": SUMMARY},
            "findings": [
                {"code": "cuda_error", "severity": "error", "summary": SUMMARY,
                 "evidence": [{"path": str(log), "line": 7, "text": LONG_TEXT},
                              {"path": str(log), "line": 9, "text": "alpha step 9"}]},
                {"code": "slow_io", "severity": "warning", "summary": "disk writes slow", "evidence": []}],
            "steps": []})
        app.open_instance("alpha", tab="tab-diag")
        await wait_until(pilot, lambda: isinstance(app.screen, InstanceScreen) and app.screen.is_mounted,
                         what="the instance screen")
        view = app.screen.query_one(EvidenceView)
        await wait_until(pilot, lambda: "alpha.log:7" in screen_text(app), what="the diagnosis")
        lines = screen_text(app).splitlines()
        assert sum("second partition" in line for line in lines) == 1, "\n".join(lines)  # said once
        assert any("disk writes slow" in line for line in lines)  # another finding keeps its own line

        first = next(k for k, line in enumerate(lines) if "alpha.log:7" in line)
        text_at = lines[first].index("RuntimeError")
        rows = []
        for line in lines[first + 1:]:
            if "alpha.log:9" in line:
                break
            rows.append(line)
        assert rows, "the long evidence line wraps"
        for row in rows:
            assert len(row) - len(row.lstrip()) >= text_at, "under its text, not at column 0: %r" % row
        assert "stacktrace below might be incorrect" in " ".join(r.strip() for r in [lines[first], *rows])

        await wait_until(pilot, lambda: app.focused is view, what="the evidence focused")
        await pilot.press("down", "enter")  # the second evidence line, below the wrapped one
        screen = app.screen
        await wait_until(pilot, lambda: screen.query_one("#inst-tabs").active == "tab-logs", what="the Logs tab")
        log_view = screen.active_log()
        await wait_until(pilot, lambda: log_view is not None and log_view.mark == 9, what="line 9 marked")
