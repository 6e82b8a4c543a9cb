"""SSH on demand for instances a Prometheus covers (console/core/on_demand.py): a real Prometheus scraping a
DCGM-exporter-format endpoint, a real sshd, real agents.

What the operator sees: a covered instance's GPUs come from Prometheus with no SSH session; diagnosing it
(or opening its screen) opens one, which closes again once idle; an instance Prometheus does not list, and
every instance while Prometheus is down, is watched over SSH as always.
"""

from __future__ import annotations

import asyncio

import pytest

from console.core import on_demand
from console.core.controller import FleetController
from console.inventory import Fleet
from console.inventory.records import SourceSpec
from tests.recorder import Recorder
from tests.support.sshd import Sshd, ssh_instance
from tests.test_prometheus_source import GPUS, free_port
from tests.test_prometheus_source import prometheus as prometheus

COVERED = "gpu-node-0000"  # a Hostname the exporter serves
UNLISTED = "box-x"  # one it does not


def _fleet(sshd: Sshd, url: str, **spec: object) -> Fleet:
    instances = [ssh_instance(sshd, name=COVERED), ssh_instance(sshd, name=UNLISTED)]
    source = SourceSpec(prometheus=url, interval=1.0, timeout=2.0, **spec)  # type: ignore[arg-type]
    return Fleet(instances, source="fleet.toml", sources=[source])


@pytest.mark.timeout(120)
async def test_covered_instance_opens_ssh_for_an_action_and_closes_when_idle(
    sshd: Sshd, prometheus: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.setattr(on_demand, "IDLE_CLOSE", 2.0)
    controller = FleetController(_fleet(sshd, prometheus))
    await controller.start()
    wait = Recorder().wait_for
    state = controller.state
    try:
        covered = state.get(COVERED)
        await wait(lambda: len(covered.gpus) == GPUS and "SSH on demand" in covered.link_detail, timeout=30,
                   what="the covered instance's GPUs from Prometheus")
        assert covered.link_status == "connected" and COVERED not in controller.links  # no SSH for it
        # the instance Prometheus does not list is watched over SSH: its process table comes in
        await wait(lambda: state.get(UNLISTED).link_status == "connected" and state.get(UNLISTED).procs,
                   timeout=45, what="the unlisted one's processes over SSH")
        await asyncio.sleep(3)  # past IDLE_CLOSE: an instance watched over SSH is never closed as idle
        assert UNLISTED in controller.links and COVERED not in controller.links

        result = await controller.diagnose(COVERED, timeout=60)  # opens SSH, waits for it
        assert result["verdict"] and state.get(COVERED).diagnosis is not None
        assert COVERED in controller.links, "the action opened a session"
        await wait(lambda: covered.procs, timeout=15, what="the session's process table")
        await wait(lambda: COVERED not in controller.links, timeout=15, what="the idle session closed")
        await wait(lambda: "SSH on demand" in covered.link_detail, timeout=5, what="back to Prometheus")
        assert covered.link_status == "connected" and not covered.reconnects  # no flap counted

        controller.keep_open(COVERED)  # its instance screen is open
        await wait(lambda: controller.links.get(COVERED) is not None
                   and controller.links[COVERED].status == "connected", timeout=30, what="open on screen")
        await asyncio.sleep(3)
        assert COVERED in controller.links, "an instance on screen keeps its session"
        controller.keep_open(None)
        await wait(lambda: COVERED not in controller.links, timeout=15, what="closed after the screen")
    finally:
        await controller.stop()


@pytest.mark.timeout(90)
async def test_prometheus_down_every_instance_is_watched_over_ssh(
    sshd: Sshd, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    controller = FleetController(_fleet(sshd, f"http://127.0.0.1:{free_port()}"))  # nothing listens
    await controller.start()
    try:
        state = controller.state
        await Recorder().wait_for(lambda: all(state.get(n).link_status == "connected" and state.get(n).procs
                                              for n in (COVERED, UNLISTED)), timeout=45, what="both over SSH")
        assert any("Prometheus" in line for line in controller.fleet_errors.values()), controller.fleet_errors
    finally:
        await controller.stop()


@pytest.mark.timeout(90)
async def test_ssh_always_keeps_every_link(sshd: Sshd, prometheus: str,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    controller = FleetController(_fleet(sshd, prometheus, ssh="always"))
    await controller.start()
    try:
        assert controller.on_demand is None and set(controller.links) == {COVERED, UNLISTED}
        await Recorder().wait_for(lambda: controller.links[COVERED].status == "connected", timeout=30,
                                  what="connected")
    finally:
        await controller.stop()
