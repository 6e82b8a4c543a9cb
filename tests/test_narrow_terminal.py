"""An 80x24 terminal (a tmux pane): the instance screen's header keeps who, where and how fresh (address, tags,
the data's age) and cuts only the reason, at a word, through a real sshd that goes away under a live link."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.core.audit import AuditLog
from console.core.controller import FleetController
from console.inventory import Fleet
from console.ui.app import FleetApp
from tests.support.app import screen_text, wait_until
from tests.support.sshd import Sshd, ssh_instance
from widgets.instance_screen import InstanceScreen

pytestmark = pytest.mark.usefixtures("config_dir")  # (tests/conftest.py)


def header_rows(app: FleetApp) -> list[str]:
    header = app.screen.query_one("#inst-header")
    lines = screen_text(app).splitlines()
    return [lines[header.region.y + k] for k in range(header.region.height)]


@pytest.mark.timeout(120)
async def test_the_instance_header_at_80_columns_keeps_address_tags_and_data_age(sshd: Sshd, tmp_path: Path) -> None:
    box = ssh_instance(sshd, name="lambda-a100-spot", tags=("eu-west", "a100", "spot", "team-vision", "prio-high"))
    app = FleetApp(FleetController(Fleet([box], source=str(tmp_path / "fleet.toml")),
                                   audit=AuditLog(tmp_path / "audit.jsonl")), theme="dark")
    async with app.run_test(size=(80, 24)) as pilot:
        state = app.state
        await wait_until(pilot, lambda: state.get(box.name).link_status == "connected", timeout=60, what="connected")
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, InstanceScreen) and app.screen.is_mounted,
                         what="the instance screen")
        sshd.stop()  # the host goes away: the header has a long reason, a retry countdown and the data's age
        await wait_until(pilot, lambda: state.get(box.name).status == "unreachable", timeout=60, what="unreachable")
        await wait_until(pilot, lambda: "UNREACHABLE" in " ".join(header_rows(app)), what="the header repainted")
        rows = header_rows(app)
        text = " ".join(rows)
        assert "UNREACHABLE" in text and box.name in text
        assert "127.0.0.1:%d" % sshd.port in text, rows
        assert "[eu-west,a100,spot,team-vision,prio-high]" in text, rows
        assert len(rows) <= 2 and all(len(row.rstrip()) <= 80 for row in rows)
        assert "ago" in text, rows  # the data's age
        assert "unreachable: connection lost" in rows[-1], rows  # and why (cut at a word where room ends)


def test_a_reason_too_long_for_the_header_is_cut_at_a_word() -> None:
    from widgets.instance_header import cut_at_word

    reason = "agent start failed: /usr/bin/python3 exited 127 (command not found) while starting the agent"
    for room in range(12, len(reason)):
        said = cut_at_word(reason, room)
        assert len(said) <= room and said.endswith("…"), said
        words = said[:-1].split()
        whole = reason.split()[: len(words)]
        assert words[:-1] == whole[:-1] and words[-1] == whole[-1].rstrip(",;:("), said  # whole words only
