"""SSH at scale, through real OpenSSH: AES-GCM by default, a bound on handshakes in flight, one silence
watchdog per link, and reconnect storms spread out (``console/link/pace.py``)."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest

from console.link import SshLink
from console.link.pace import ConnectLimiter, DropRecord
from tests.faultproxy import FaultProxy
from tests.hostile import fake_python
from tests.recorder import Recorder
from tests.support.sshd import Sshd, ssh_instance

FAST = {"heartbeat_interval": 0.5, "interval": 0.5}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME of our own: no ~/.ssh/config unless the test writes one."""
    path = tmp_path / "home"
    (path / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(path))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return path


async def _cipher_of(inst: Any) -> str | None:
    rec = Recorder()
    link = SshLink(inst, rec.on_frame, rec.on_status, limiter=ConnectLimiter())
    link.start()
    try:
        await rec.wait_for(lambda: rec.status_of(inst.name)[0] == "connected", timeout=60, what="connected")
        return link.cipher
    finally:
        await link.stop()


async def test_aes_gcm_is_negotiated_with_openssh_by_default(sshd: Sshd, home: Path) -> None:
    assert await _cipher_of(ssh_instance(sshd, agent_extra=FAST)) == "aes128-gcm@openssh.com"


async def test_a_ciphers_line_in_ssh_config_wins(sshd: Sshd, home: Path) -> None:
    (home / ".ssh" / "config").write_text("Host *\n    Ciphers chacha20-poly1305@openssh.com,aes256-ctr\n")
    assert await _cipher_of(ssh_instance(sshd, agent_extra=FAST)) == "chacha20-poly1305@openssh.com"


async def test_a_server_without_gcm_still_connects(tmp_path: Path, home: Path) -> None:
    server = Sshd(tmp_path / "nogcm")
    server.config.write_text(server.config.read_text() + "Ciphers aes128-ctr,chacha20-poly1305@openssh.com\n")
    server.start()
    try:
        cipher = await _cipher_of(ssh_instance(server, agent_extra=FAST))
    finally:
        server.stop()
    assert cipher == "chacha20-poly1305@openssh.com"  # the first of ours that this server offers


async def test_at_most_four_handshakes_in_flight_and_all_twelve_connect(sshd: Sshd, home: Path) -> None:
    limiter = ConnectLimiter(4)
    rec = Recorder()
    links = [SshLink(ssh_instance(sshd, name=f"box{i}", agent_extra=FAST), rec.on_frame, rec.on_status,
                     limiter=limiter) for i in range(12)]
    for link in links:
        link.start()
    try:
        await rec.wait_for(lambda: all(link.status == "connected" for link in links), timeout=180,
                           what="all twelve connected")
        assert limiter.peak == 4, limiter.peak  # all twelve asked at once: four went in, never more
        assert limiter.entered == 12 and limiter.in_flight == 0 and limiter.waiting == 0
        queued = {n for n, s, d in rec.statuses if s == "connecting" and d.endswith("(queued)")}
        assert len(queued) >= 8, queued  # the ones that waited said so, as "connecting"
    finally:
        await asyncio.gather(*(link.stop() for link in links))


async def test_the_watchdog_closes_a_silent_session_and_spares_a_talking_one(sshd: Sshd, tmp_path: Path,
                                                                             home: Path) -> None:
    silent = ssh_instance(sshd, name="mute", python=fake_python(tmp_path, "hello()\ntime.sleep(300)"))
    talking = ssh_instance(sshd, name="talks", agent_extra=FAST)
    rec = Recorder()
    links = [SshLink(inst, rec.on_frame, rec.on_status, limiter=ConnectLimiter()) for inst in (silent, talking)]
    for link in links:
        link.silence_timeout = 3.0
        link.start()
    try:
        await rec.wait_for(lambda: rec.status_of("mute") == ("unreachable", "agent silent for 3 s"), timeout=90,
                           what="the silent agent found out")
        # The talking one has lived through several watchdog periods (each re-armed, never fired).
        await rec.wait_for(lambda: _span(rec.of_type("heartbeat", "talks")) >= 10.0, timeout=90,
                           what="10 s of heartbeats")
        assert all(s != "unreachable" for n, s, _ in rec.statuses if n == "talks"), rec.statuses
        assert links[1].status == "connected"
    finally:
        await asyncio.gather(*(link.stop() for link in links))


def _span(frames: list[dict[str, Any]]) -> float:
    return frames[-1]["ts"] - frames[0]["ts"] if len(frames) > 1 else 0.0


class StampingProxy(FaultProxy):
    """A FaultProxy that notes when each connection arrives (the links' reconnect attempts)."""

    def __init__(self, target_port: int) -> None:
        super().__init__(target_port)
        self.arrivals: list[float] = []

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.arrivals.append(time.monotonic())
        await super()._handle(reader, writer)


async def test_a_blip_on_twenty_links_spreads_their_retries(sshd: Sshd, tmp_path: Path, home: Path) -> None:
    proxy = StampingProxy(sshd.port)
    await proxy.start()
    kh = tmp_path / "known_hosts_proxy"
    kh.write_text(f"[127.0.0.1]:{proxy.port} {sshd.host_key.export_public_key().decode().strip()}\n")
    rec = Recorder()
    limiter = ConnectLimiter()
    links = [SshLink(dataclasses.replace(ssh_instance(sshd, name=f"n{i}", known_hosts=str(kh), agent_extra=FAST),
                                         port=proxy.port), rec.on_frame, rec.on_status, limiter=limiter)
             for i in range(20)]
    for link in links:
        link.start()
    try:
        await rec.wait_for(lambda: all(link.status == "connected" for link in links), timeout=240,
                           what="all twenty connected")
        before = [link.attempts for link in links]
        proxy.arrivals.clear()
        proxy.cut()  # the blip: every connection gone at once
        await rec.wait_for(lambda: all(link.status == "connected" and link.attempts >= b + 2
                                       for link, b in zip(links, before, strict=True)),
                           timeout=240, what="all twenty back")
        first = sorted(proxy.arrivals)[:20]
        assert len(first) == 20
        spread = first[-1] - first[0]
        print(f"\nblip on 20 links: retries spread over {spread * 1000:.0f} ms")
        assert spread > 0.05, first
    finally:
        await asyncio.gather(*(link.stop() for link in links))
        await proxy.stop()


def test_a_lone_drop_adds_next_to_nothing_and_a_storm_is_spread_over_seconds() -> None:
    record = DropRecord()
    record.add(now=100.0)
    assert all(record.spread(now=100.5) <= 0.005 for _ in range(100))
    for i in range(1000):
        record.add(now=100.0 + i / 1000)
    spreads = [record.spread(now=101.5) for _ in range(200)]
    assert max(spreads) <= 5.0 and max(spreads) > 2.5 and min(spreads) >= 0.0
    assert record.recent(now=200.0) == 0  # a storm long past is forgotten
