"""Accepting an unknown host key from the instance screen (``A``): a dialog with the fingerprint, then the key is
written, audited, and the instance connects — through a real sshd whose key the console has never seen."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.core.audit import AuditLog
from console.core.controller import FleetController
from console.inventory import Fleet
from console.link.hostkeys import fingerprint
from console.ui.app import FleetApp
from tests.support.app import wait_until
from tests.support.sshd import Sshd, ssh_instance
from widgets.confirm_screen import ConfirmScreen
from widgets.instance_screen import InstanceScreen

pytestmark = pytest.mark.usefixtures("config_dir")  # (tests/conftest.py)


async def test_accept_an_unknown_host_key_from_the_instance_screen(sshd: Sshd, tmp_path: Path) -> None:
    known = tmp_path / "kh" / "known_hosts"
    known.parent.mkdir()
    known.write_text("")
    audit = AuditLog(tmp_path / "audit.jsonl")
    instance = ssh_instance(sshd, name="newbox", known_hosts=str(known), python="/nonexistent/python3")
    app = FleetApp(FleetController(Fleet([instance], source=str(tmp_path / "fleet.toml")), audit=audit))
    fp = fingerprint(sshd.host_key)
    async with app.run_test(size=(100, 30)) as pilot:
        state = app.controller.state
        await wait_until(pilot, lambda: state.get("newbox").link_status == "hostkey_unknown", what="unknown key")
        assert state.get("newbox").status == "needs_action" and fp in state.get("newbox").status_detail
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, InstanceScreen), what="instance screen")
        await pilot.press("A")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the confirm dialog")
        dialog_text = " ".join(str(w.render()) for w in app.screen.query("*") if hasattr(w, "render"))
        assert fp in dialog_text and "Trust" in dialog_text
        assert known.read_text() == "", "nothing is written before the operator says yes"
        await pilot.press("y")
        await wait_until(pilot, lambda: state.get("newbox").link_status == "connected", timeout=30,
                         what="connected after the accept")
    assert known.read_text() == sshd.known_hosts_line()
    assert [(r["action"], r["outcome"]) for r in audit.read()] == [("accept_host_key", "requested"),
                                                                   ("accept_host_key", "ok")]
