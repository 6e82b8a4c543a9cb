"""Links in worker processes (console/link/shards.py) through a real sshd and real agents.

What the operator must not notice: frames arrive, requests and commands answer, host keys are offered and
accepted as in-process; a worker that dies costs only its share of the fleet for a moment; nothing is left
running after the console stops.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from console.core.audit import AuditLog
from console.core.controller import FleetController
from console.inventory import Fleet
from console.link.hostkeys import fingerprint
from console.link.shards import SHARD_FROM, ShardedLink, worker_count
from tests.recorder import Recorder
from tests.support.sshd import Sshd, ssh_instance


@pytest.fixture
def two_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_CONSOLE_LINK_WORKERS", "2")
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_worker_count_follows_the_fleet(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    assert worker_count(SHARD_FROM - 1, env={}) == 0  # a small fleet keeps its links in the console process
    assert worker_count(SHARD_FROM, env={}) == 1
    assert worker_count(1000, env={}) == 4  # one per 250 hosts
    assert worker_count(5000, env={}) == 8  # capped
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert worker_count(1000, env={}) == 1  # never more than the spare cores
    assert worker_count(3, env={"FLEET_CONSOLE_LINK_WORKERS": "2"}) == 2
    assert worker_count(1000, env={"FLEET_CONSOLE_LINK_WORKERS": "0"}) == 0


@pytest.mark.timeout(120)
async def test_frames_requests_and_commands_through_workers(sshd: Sshd, two_workers: None) -> None:
    names = ["w1", "w2", "w3"]
    controller = FleetController(Fleet([ssh_instance(sshd, name=n) for n in names], source="fleet.toml"))
    await controller.start()
    pids: list[int] = []
    try:
        assert controller.shards is not None
        links = [controller.links[n] for n in names]
        assert all(isinstance(link, ShardedLink) for link in links)
        state = controller.state
        await Recorder().wait_for(lambda: all(state.get(n).procs for n in names), timeout=60,
                                  what="every instance's process table")
        assert {state.get(n).link_status for n in names} == {"connected"}
        pids = controller.shards.pids
        assert len(pids) == 2 and os.getpid() not in pids  # the links run elsewhere
        result = await controller.diagnose("w2", timeout=60)
        assert result["verdict"], result
        assert state.get("w2").diagnosis is not None
        answer = await controller.links["w1"].request("detail", {"level": "summary"}, timeout=15)
        assert answer["ok"], answer
        ran = await controller.links["w3"].run_command("echo from-$((40+2))", timeout=15)
        assert ran.exit_status == 0 and ran.stdout.strip() == "from-42"
    finally:
        await controller.stop()
    assert not [p for p in pids if _alive(p)], "link workers left running"


@pytest.mark.timeout(120)
async def test_a_killed_worker_costs_its_share_a_moment(sshd: Sshd, two_workers: None) -> None:
    names = [f"k{i}" for i in range(4)]
    controller = FleetController(Fleet([ssh_instance(sshd, name=n) for n in names], source="fleet.toml"))
    await controller.start()
    try:
        state = controller.state
        wait = Recorder().wait_for
        await wait(lambda: all(state.get(n).link_status == "connected" for n in names), timeout=60, what="connected")
        assert controller.shards is not None
        victim = controller.shards.workers[0]
        assert victim.proc is not None
        hit = sorted(victim.links)
        spared = [n for n in names if n not in hit]
        assert hit and spared
        os.kill(victim.proc.pid, signal.SIGKILL)
        await wait(lambda: all(state.get(n).link_status == "unreachable" for n in hit), timeout=15, what="shown down")
        assert "link worker exited" in state.get(hit[0]).link_detail
        assert all(state.get(n).link_status == "connected" for n in spared)  # the other worker's hosts carry on
        await wait(lambda: all(state.get(n).link_status == "connected" for n in hit), timeout=60, what="back")
        request = await controller.links[hit[0]].request("detail", {"level": "full"}, timeout=15)
        assert request["ok"]
    finally:
        await controller.stop()


@pytest.mark.timeout(120)
async def test_unknown_host_key_offered_and_accepted_through_a_worker(
    sshd: Sshd, tmp_path: Path, two_workers: None
) -> None:
    known = tmp_path / "kh" / "known_hosts"
    known.parent.mkdir()
    known.write_text("")
    audit = AuditLog(tmp_path / "audit.jsonl")
    controller = FleetController(Fleet([ssh_instance(sshd, known_hosts=str(known))], source="fleet.toml"),
                                 audit=audit)
    await controller.start()
    try:
        link = controller.links["box1"]
        assert isinstance(link, ShardedLink)
        wait = Recorder().wait_for
        await wait(lambda: link.status == "hostkey_unknown", what="unknown host key")
        fp = fingerprint(sshd.host_key)
        assert link.host_key_offer is not None and link.host_key_offer.fingerprint == fp
        assert fp in await controller.accept_host_key("box1")
        await wait(lambda: link.status == "connected", timeout=30, what="connected after accept")
        assert known.read_text() == sshd.known_hosts_line()
        assert [(r["action"], r["outcome"]) for r in audit.read()] == [("accept_host_key", "requested"),
                                                                       ("accept_host_key", "ok")]
    finally:
        await controller.stop()
