"""Each second's repaint of text that ages by itself ("retry in 4s", "last seen 2m ago") looks at the panes an
operator can see, not at the whole fleet: a fleet of a thousand costs what its visible panes cost."""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path

import pytest

from console.core.audit import AuditLog
from console.core.controller import FleetController
from console.inventory import Fleet, Instance
from console.ui.app import FleetApp
from tests.support.app import screen_text, wait_until

HOSTS = 120


def _closed_port() -> int:
    """A loopback port nobody listens on (bound, then let go): every connect is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _refused_fleet(tmp_path: Path) -> Fleet:
    port = _closed_port()
    known = tmp_path / "known_hosts"
    known.write_text("")
    instances = [Instance(name=f"box{i:02d}", host="127.0.0.1", port=port, known_hosts=str(known))
                 for i in range(HOSTS)]
    return Fleet(instances, source=str(tmp_path / "fleet.toml"))


def _countdown(text: str, name: str, at_least: int) -> int | None:
    """The seconds ``name``'s pane says are left before its next try, when at least ``at_least``."""
    lines = text.splitlines()
    for row, line in enumerate(lines[:-1]):
        col = line.find(f" {name} ")
        if col >= 0:
            found = re.match(r".*?retry in (\d+)s", lines[row + 1][col:col + 75])
            if found and int(found.group(1)) >= at_least:
                return int(found.group(1))
    return None


@pytest.mark.slow
async def test_only_panes_in_view_are_checked_for_aging_text_and_theirs_still_counts_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLEET_CONSOLE_LINK_WORKERS", "0")  # the links in this process: refused at once
    controller = FleetController(_refused_fleet(tmp_path), audit=AuditLog(tmp_path / "audit.jsonl"))
    app = FleetApp(controller, theme="dark")
    async with app.run_test(size=(150, 30)) as pilot:
        grid = app.grid
        await wait_until(pilot, lambda: all(app.retry_at(f"box{i:02d}") is not None for i in range(HOSTS)),
                         what="every link refused and waiting to retry")
        in_view = grid.on_screen_names()
        assert 0 < len(in_view) < HOSTS // 2, in_view  # most of the fleet is scrolled out of view
        before_checks, began = app.age_checks, time.monotonic()
        # box00's pane counts its wait down with no other change: one wait (the same retry time) shown with a
        # smaller number later (a paint can land after the last second of a wait: then the next wait, longer, counts)
        shown: dict[str, float | int | None] = {"at": None, "seconds": None}

        def counted_down() -> bool:
            at, seconds = app.retry_at("box00"), _countdown(screen_text(app), "box00", at_least=1)
            if at is None or seconds is None:
                return False
            if at != shown["at"] or shown["seconds"] is None or seconds > shown["seconds"]:  # (a new wait)
                shown.update(at=at, seconds=seconds)
                return False
            return seconds < shown["seconds"]

        await wait_until(pilot, counted_down, timeout=90, what="box00's pane counting its wait down")
        ticks = (time.monotonic() - began) / 0.875 + 1  # the paints re-derive what ages at most every 7/8 s
        # each second looked at the panes in view (and nothing else), not at every instance of the fleet
        assert app.age_checks - before_checks <= (ticks + 1) * len(in_view), (app.age_checks - before_checks, ticks)
