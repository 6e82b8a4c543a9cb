"""The SSH link against a real OpenSSH sshd on loopback, driving the real agent."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import asyncssh

from console.link import LocalLink, SshLink, make_link
from tests.recorder import Recorder
from tests.support.sshd import Sshd, free_port, ssh_instance

FAST = {"heartbeat_interval": 0.5, "interval": 0.5}


async def test_hello_then_heartbeats_over_real_sshd(sshd: Sshd) -> None:
    rec = Recorder()
    link = SshLink(ssh_instance(sshd, agent_extra=FAST), rec.on_frame, rec.on_status)
    link.start()
    try:
        await rec.wait_for(lambda: len(rec.of_type("heartbeat")) >= 3, what="three heartbeats")
        first = rec.frames[0][1]
        assert first["type"] == "hello"
        assert first["v"] == 1 and first["agent_version"] and first["pid"] > 0
        seqs = [f["seq"] for f in rec.of_type("heartbeat")]
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
        assert rec.status_of("box1")[0] == "connected"
        answer = await link.request("ping", timeout=20)
        assert answer["ok"] and answer["data"]["pong"] is True
    finally:
        await link.stop()
    assert rec.status_of("box1")[0] == "closed"


async def test_changed_host_key_is_refused_with_a_clear_message(sshd: Sshd) -> None:
    sshd.write_known_hosts(asyncssh.generate_private_key("ssh-ed25519"))  # someone else's key
    rec = Recorder()
    link = SshLink(ssh_instance(sshd), rec.on_frame, rec.on_status)
    link.start()
    try:
        await rec.wait_for(lambda: rec.status_of("box1")[0] == "hostkey_changed", what="hostkey_changed")
        detail = rec.status_of("box1")[1]
        assert "HOST KEY MISMATCH" in detail and f"[127.0.0.1]:{sshd.port}" in detail
        assert not rec.of_type("hello"), "no agent may run on a host whose key does not verify"
    finally:
        await link.stop()


async def test_unknown_host_is_refused_unless_accept_new_is_set(sshd: Sshd, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts_empty"
    empty.write_text("")
    rec = Recorder()
    link = SshLink(ssh_instance(sshd, known_hosts=str(empty)), rec.on_frame, rec.on_status)
    link.start()
    try:
        await rec.wait_for(lambda: rec.status_of("box1")[0] == "hostkey_unknown", what="refusal")
        assert "unknown host key" in rec.status_of("box1")[1]
    finally:
        await link.stop()

    rec2 = Recorder()
    inst = ssh_instance(sshd, name="box2", known_hosts=str(empty), accept_new_host_key=True)
    link2 = SshLink(inst, rec2.on_frame, rec2.on_status)
    link2.start()
    try:
        await rec2.wait_for(lambda: rec2.of_type("hello"), what="hello with accept-new")
        recorded = empty.read_text()
        assert f"[127.0.0.1]:{sshd.port} ssh-ed25519 " in recorded
    finally:
        await link2.stop()


async def test_sshd_killed_mid_stream_is_reported_and_recovered(sshd: Sshd) -> None:
    rec = Recorder()
    link = SshLink(ssh_instance(sshd, agent_extra=FAST), rec.on_frame, rec.on_status)
    link.backoff.base, link.backoff.cap = 0.2, 1.0
    link.start()
    try:
        await rec.wait_for(lambda: rec.of_type("heartbeat"), what="first heartbeat")
        sshd.stop()
        await rec.wait_for(lambda: rec.status_of("box1")[0] == "unreachable", what="unreachable after kill")
        hellos_before = len(rec.of_type("hello"))
        await asyncio.sleep(1.0)  # a few refused reconnects
        assert rec.status_of("box1")[0] in ("unreachable", "connecting")
        sshd.start()
        await rec.wait_for(lambda: len(rec.of_type("hello")) > hellos_before, timeout=30, what="hello after restart")
        await rec.wait_for(lambda: rec.status_of("box1")[0] == "connected", what="connected again")
        n = len(rec.of_type("heartbeat"))
        await rec.wait_for(lambda: len(rec.of_type("heartbeat")) > n, what="heartbeats after recovery")
    finally:
        await link.stop()


async def test_a_dead_host_does_not_stall_a_live_one(sshd: Sshd) -> None:
    rec = Recorder()
    dead = ssh_instance(sshd, name="dead", port=free_port())
    live = ssh_instance(sshd, name="live", agent_extra=FAST)
    links = [make_link(i, rec.on_frame, rec.on_status) for i in (dead, live)]
    for link in links:
        link.start()
    try:
        await rec.wait_for(lambda: rec.of_type("heartbeat", "live"), timeout=20, what="live heartbeats")
        await rec.wait_for(lambda: rec.status_of("dead")[0] == "unreachable", what="dead unreachable")
        assert "Connection refused" in rec.status_of("dead")[1]
    finally:
        await asyncio.gather(*(link.stop() for link in links))


async def test_custom_command_runs_on_its_own_channel(sshd: Sshd) -> None:
    rec = Recorder()
    link = SshLink(ssh_instance(sshd), rec.on_frame, rec.on_status)
    link.start()
    try:
        await rec.wait_for(lambda: link.status == "connected", what="connected")
        result = await link.run_command("echo hello-from-$(hostname); exit 3", timeout=10)
        assert result.exit_status == 3 and result.stdout.startswith("hello-from-")
        slow = await link.run_command("sleep 47.25", timeout=0.5)
        assert slow.timed_out
        await asyncio.sleep(0.5)
        leftover = subprocess.run(["pgrep", "-f", "sleep 47.25"], capture_output=True, text=True).stdout
        assert not leftover.strip(), "a timed-out command must not keep running on the host"
        assert (await link.request("ping"))["ok"], "the agent channel still answers"
    finally:
        await link.stop()


async def test_local_transport_runs_the_same_agent() -> None:
    from console.inventory import Instance

    rec = Recorder()
    link = LocalLink(Instance(name="here", host="localhost", transport="local", agent_extra=FAST),
                     rec.on_frame, rec.on_status)
    link.start()
    try:
        await rec.wait_for(lambda: rec.of_type("heartbeat"), what="local heartbeat")
        assert rec.frames[0][1]["type"] == "hello"
        bad = await link.request("no-such-op")
        assert bad["ok"] is False and "unknown op" in bad["error"]
    finally:
        await link.stop()
