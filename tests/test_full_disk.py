"""A host whose disk is full (the usual end of a benchmark that filled it) is still watched: the agent cannot be
uploaded, so the link watches it agentless and says why, then tries the agent again once there is room.

A real sshd in a mount namespace of its own whose sessions' HOME is a full tmpfs (``tests/support/sshd.full_home``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.link import ssh as ssh_link
from tests.recorder import watched_link
from tests.support.sshd import Sshd, full_home, ssh_instance

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="mounting a tmpfs in a namespace needs root"
)


@pytest.fixture
def full_sshd(tmp_path: Path) -> Iterator[Sshd]:
    launcher, env = full_home(tmp_path / "home")
    server = Sshd(tmp_path / "sshd", env=env, launcher=launcher)
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_a_full_disk_is_watched_agentless_then_the_agent_comes_back_when_there_is_room(
    full_sshd: Sshd, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ssh_link, "UPLOAD_RETRY_SECONDS", 3.0)  # minutes on a real host; the test has no minutes
    sleeper = subprocess.Popen(["sleep", "600.%d" % (os.getpid() % 1000)])
    link, rec, state = watched_link(ssh_instance(full_sshd, interval=0.5))
    link.start()
    try:
        await rec.wait_for(lambda: link.status == "connected", what="connected", timeout=40)
        hello = rec.of_type("hello")[0]
        assert hello["agent_version"] == "agentless"
        _status, detail = rec.status_of("box1")
        assert "could not upload the agent: OSError: [Errno 28] No space left on device" in detail, detail
        assert "Traceback" not in detail
        inst = state.get("box1")
        assert inst is not None
        found = await rec.wait_for(lambda: inst.procs.get(sleeper.pid), what="the host's processes, agentless")
        assert found["name"] == "sleep"
        answer = await link.request("diagnose", timeout=10)
        assert answer["ok"] is False and "No space left on device" in answer["error"]

        freed = await link.run_command("rm -f ~/fill && echo freed", timeout=10)  # the operator makes room
        assert freed.stdout.strip() == "freed"
        await rec.wait_for(lambda: any(h["agent_version"] != "agentless" for h in rec.of_type("hello")),
                           what="the real agent after the retry", timeout=40)
        assert link.status == "connected"
    finally:
        sleeper.kill()
        sleeper.wait()
        await link.stop()
