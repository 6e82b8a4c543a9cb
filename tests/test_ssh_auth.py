"""SSH as ``ssh`` does it, through real OpenSSH: ssh-agent, passphrase keys, ProxyJump, ~/.ssh/config
aliases, unknown/changed host keys (accept from the console), local files named when they are the problem,
and ``status`` / ``check --connect`` that return as soon as every instance has an answer.

Instances run agentless (``python`` points nowhere): these tests are about getting in, not the agent.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import asyncssh
import pytest

from console import cli
from console.core.audit import AuditLog
from console.core.controller import FleetController
from console.inventory import Fleet, Instance
from console.link import SshLink
from console.link.hostkeys import fingerprint
from tests.recorder import Recorder
from tests.support.sshd import SshAgent, Sshd, keygen, ssh_instance

NO_PYTHON = "/nonexistent/python3"  # agentless: connected without uploading the agent


@pytest.fixture(autouse=True)
def clean_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME of our own (no ~/.ssh/config, no default keys) and no inherited ssh-agent."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.setenv("FLEET_CONSOLE_STATE_DIR", str(tmp_path / "state"))
    return home


@pytest.fixture
def agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SshAgent]:
    a = SshAgent(tmp_path / "agent")
    monkeypatch.setenv("SSH_AUTH_SOCK", a.env["SSH_AUTH_SOCK"])
    try:
        yield a
    finally:
        a.stop()


@pytest.fixture
def jump(tmp_path: Path) -> Iterator[Sshd]:
    server = Sshd(tmp_path / "jump")
    server.start()
    try:
        yield server
    finally:
        server.stop()


def inst(sshd: Sshd, **extra: object) -> Instance:
    return ssh_instance(sshd, python=NO_PYTHON, **extra)


async def run_link(instance: Instance, until: str, timeout: float = 30.0) -> tuple[SshLink, Recorder]:
    rec = Recorder()
    link = SshLink(instance, rec.on_frame, rec.on_status)
    link.start()
    try:
        await rec.wait_for(lambda: rec.status_of(instance.name)[0] == until, timeout=timeout, what=until)
    except BaseException:
        await link.stop()
        raise
    return link, rec


# -- keys ------------------------------------------------------------------------------------------


async def test_agent_only_key(sshd: Sshd, agent: SshAgent, tmp_path: Path) -> None:
    key = tmp_path / "agent_only"
    sshd.authorize(keygen(key))
    agent.add(key)
    key.unlink()  # the key is in the agent only: no key file anywhere
    key.with_name("agent_only.pub").unlink()
    link, _ = await run_link(inst(sshd, key=None), "connected")
    await link.stop()


async def test_no_agent_and_no_key_says_what_was_tried(sshd: Sshd) -> None:
    link, rec = await run_link(inst(sshd, key=None), "auth_failed")
    detail = rec.status_of("box1")[1]
    assert link.failed_permanently and link.next_retry_at is not None
    assert link.next_retry_at - time.time() >= 60, "a permanent failure backs off to minutes"
    await link.stop()
    assert "no ssh-agent (SSH_AUTH_SOCK unset)" in detail and "authorized_keys" in detail, detail


async def test_passphrase_key_through_the_agent(sshd: Sshd, agent: SshAgent, tmp_path: Path) -> None:
    key = tmp_path / "locked"
    sshd.authorize(keygen(key, passphrase="open sesame"))
    agent.add(key, passphrase="open sesame")
    link, _ = await run_link(inst(sshd, key=str(key)), "connected")
    await link.stop()


async def test_passphrase_key_without_the_agent_is_named(sshd: Sshd, tmp_path: Path) -> None:
    key = tmp_path / "locked"
    sshd.authorize(keygen(key, passphrase="open sesame"))
    link, rec = await run_link(inst(sshd, key=str(key)), "needs_action")
    detail = rec.status_of("box1")[1]
    await link.stop()
    assert f"key {key} is passphrase-protected" in detail and f"ssh-add {key}" in detail, detail
    assert "\n" not in detail


async def test_missing_key_file_is_named_and_needs_action(sshd: Sshd, tmp_path: Path) -> None:
    missing = tmp_path / "keys" / "id_gone"
    link, rec = await run_link(inst(sshd, key=str(missing)), "needs_action")
    detail = rec.status_of("box1")[1]
    assert f"key file {missing} not found" in detail and "fix the path" in detail, detail
    assert [s for _, s, _ in rec.statuses].count("needs_action") == 1, "no flapping"
    await link.stop()


async def test_unreadable_key_file_is_named(sshd: Sshd, tmp_path: Path) -> None:
    bad = tmp_path / "not_a_key"
    bad.write_text("hello\n")
    link, rec = await run_link(inst(sshd, key=str(bad)), "needs_action")
    detail = rec.status_of("box1")[1]
    await link.stop()
    assert f"key file {bad} is not a private key" in detail, detail


# -- jump hosts and ~/.ssh/config ------------------------------------------------------------------


async def test_proxyjump_through_a_second_sshd(sshd: Sshd, jump: Sshd, tmp_path: Path) -> None:
    jump.authorize(sshd.client_key.export_public_key())
    known = tmp_path / "known_hosts_both"
    known.write_text(sshd.known_hosts_line() + jump.known_hosts_line())
    hop = f"{jump.user}@127.0.0.1:{jump.port}"
    link, rec = await run_link(inst(sshd, jump=(hop,), known_hosts=str(known)), "connected")
    try:
        assert jump.session_pids(), "the connection goes through the jump host's sshd"
    finally:
        await link.stop()
    # a jump host that refuses: the message names the hop
    jump.deauthorize_all()
    link, rec = await run_link(inst(sshd, jump=(hop,), known_hosts=str(known)), "auth_failed")
    detail = rec.status_of("box1")[1]
    await link.stop()
    assert detail.startswith(f"jump host {hop}: permission denied"), detail


async def test_ssh_config_alias_with_proxyjump(sshd: Sshd, jump: Sshd, clean_home: Path, tmp_path: Path) -> None:
    """Everything from ~/.ssh/config (read by asyncssh): HostName, Port, User, IdentityFile, ProxyJump,
    UserKnownHostsFile; the fleet file names only the alias."""
    jump.authorize(sshd.client_key.export_public_key())
    known = tmp_path / "kh_from_config"
    known.write_text(sshd.known_hosts_line() + jump.known_hosts_line())
    ssh_dir = clean_home / ".ssh"
    ssh_dir.mkdir(mode=0o700)
    (ssh_dir / "config").write_text(
        f"Host bastion\n  HostName 127.0.0.1\n  Port {jump.port}\n  User {jump.user}\n\n"
        f"Host gpu-a\n  HostName 127.0.0.1\n  Port {sshd.port}\n  ProxyJump bastion\n\n"
        f"Host *\n  User {sshd.user}\n  IdentityFile {sshd.client_key_path}\n  UserKnownHostsFile {known}\n"
    )
    alias = Instance(name="a", host="gpu-a", ssh_config="gpu-a", python=NO_PYTHON, watch_dirs=())
    link, _ = await run_link(alias, "connected")
    try:
        assert jump.session_pids()
    finally:
        await link.stop()


# -- host keys -------------------------------------------------------------------------------------


async def test_unknown_key_then_accept_then_connected(sshd: Sshd, tmp_path: Path) -> None:
    known = tmp_path / "kh" / "known_hosts"
    known.parent.mkdir()
    known.write_text("")
    instance = inst(sshd, known_hosts=str(known))
    audit = AuditLog(tmp_path / "audit.jsonl")
    controller = FleetController(Fleet([instance], source="fleet.toml"), audit=audit)
    await controller.start()
    try:
        link = controller.links["box1"]
        rec_wait = Recorder()
        await rec_wait.wait_for(lambda: link.status == "hostkey_unknown", what="unknown host key")
        fp = fingerprint(sshd.host_key)
        assert fp.startswith("ED25519 SHA256:") and fp in link.detail, link.detail
        assert controller.state.get("box1").link_status == "hostkey_unknown"
        message = await controller.accept_host_key("box1")
        assert fp in message
        await rec_wait.wait_for(lambda: link.status == "connected", timeout=15, what="connected after accept")
        assert known.read_text() == sshd.known_hosts_line()
        actions = [(r["action"], r["outcome"], r["result"]["fingerprint"]) for r in audit.read()]
        assert actions == [("accept_host_key", "requested", fp), ("accept_host_key", "ok", fp)]
    finally:
        await controller.stop()


async def test_missing_known_hosts_file_needs_action_and_accept_creates_it(sshd: Sshd, tmp_path: Path) -> None:
    known = tmp_path / "fresh" / "ssh" / "known_hosts"
    controller = FleetController(Fleet([inst(sshd, known_hosts=str(known))], source="f"),
                                 audit=AuditLog(tmp_path / "a.jsonl"))
    await controller.start()
    try:
        link = controller.links["box1"]
        await Recorder().wait_for(lambda: link.status == "needs_action", what="needs action")
        assert f"known_hosts file {known} does not exist" in link.detail and fingerprint(sshd.host_key) in link.detail
        await controller.accept_host_key("box1")
        await Recorder().wait_for(lambda: link.status == "connected", timeout=15, what="connected")
        assert known.parent.stat().st_mode & 0o777 == 0o700 and known.stat().st_mode & 0o777 == 0o600
    finally:
        await controller.stop()


async def test_accept_new_host_key_creates_a_missing_known_hosts(sshd: Sshd, tmp_path: Path) -> None:
    known = tmp_path / "never" / "known_hosts"
    link, _ = await run_link(inst(sshd, known_hosts=str(known), accept_new_host_key=True), "connected")
    await link.stop()
    assert known.read_text() == sshd.known_hosts_line()


async def test_changed_key_refused_with_both_fingerprints(sshd: Sshd, tmp_path: Path) -> None:
    other = asyncssh.generate_private_key("ssh-ed25519")
    sshd.write_known_hosts(other)
    controller = FleetController(Fleet([inst(sshd)], source="f"), audit=AuditLog(tmp_path / "a.jsonl"))
    await controller.start()
    try:
        link = controller.links["box1"]
        await Recorder().wait_for(lambda: link.status == "hostkey_changed", what="host key changed")
        assert fingerprint(sshd.host_key) in link.detail and fingerprint(other) in link.detail, link.detail
        assert "refused" in link.detail and "ssh-keygen -R" in link.detail
        with pytest.raises(Exception, match="no unknown host key to accept"):
            await controller.accept_host_key("box1")
        assert sshd.known_hosts.read_text() == sshd.known_hosts_line(other), "never replaced from the console"
    finally:
        await controller.stop()


# -- one-shot commands -----------------------------------------------------------------------------


def write_fleet(path: Path, rows: list[dict[str, object]]) -> Path:
    lines = []
    for row in rows:
        lines.append("[[instance]]")
        lines.extend(f"{k} = {json.dumps(v)}" for k, v in row.items())
    path.write_text("\n".join(lines) + "\n")
    return path


def five_instances(sshd: Sshd, tmp_path: Path, good_local: bool = False) -> Path:
    """One good instance and four that fail for good: missing key, unknown key, changed key, refused key.

    ``good_local``: the good one runs the agent here (its time is then not a remote shell's start-up,
    which on a loaded test box alone can take seconds)."""
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    changed = tmp_path / "changed_known_hosts"
    changed.write_text(sshd.known_hosts_line(asyncssh.generate_private_key("ssh-ed25519")))
    stranger = tmp_path / "stranger"
    keygen(stranger)
    base = {"host": "127.0.0.1", "port": sshd.port, "user": sshd.user, "python": NO_PYTHON, "watch_dirs": [],
            "key": str(sshd.client_key_path), "known_hosts": str(sshd.known_hosts)}
    return write_fleet(tmp_path / "fleet.toml", [
        {"name": "good", "transport": "local", "watch_dirs": []} if good_local else {**base, "name": "good"},
        {**base, "name": "nokey", "key": str(tmp_path / "no_such_key")},
        {**base, "name": "unknown", "known_hosts": str(empty)},
        {**base, "name": "changed", "known_hosts": str(changed)},
        {**base, "name": "refused", "key": str(stranger)},
    ])


def test_status_returns_once_every_instance_has_an_answer(
    sshd: Sshd, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = five_instances(sshd, tmp_path, good_local=True)
    start = time.monotonic()
    code = cli.main(["status", "--fleet", str(fleet), "--timeout", "20"])
    took = time.monotonic() - start
    out = capsys.readouterr().out
    assert took < 3.0, f"status took {took:.1f} s"
    assert code == 1
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert set(lines) == {"good", "nokey", "unknown", "changed", "refused"}, out
    assert "retry in" not in out
    assert "needs action" in lines["nokey"] and "no_such_key" in lines["nokey"]
    assert "unknown host key" in lines["unknown"] and "SHA256:" in lines["unknown"]
    assert "host key changed" in lines["changed"]
    assert "auth failed" in lines["refused"] and str(tmp_path / "stranger") in lines["refused"]
    assert "unreachable" not in lines["good"], lines["good"]


def test_check_connect_one_line_each(sshd: Sshd, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fleet = five_instances(sshd, tmp_path)
    code = cli.main(["check", "--connect", "--fleet", str(fleet)])
    out = capsys.readouterr().out
    assert code == 1
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert set(rows) == {"good", "nokey", "unknown", "changed", "refused"}, out
    assert rows["good"].split()[1] == "ok" and "SHA256:" in rows["good"]
    assert "needs action" in rows["nokey"] and "not found" in rows["nokey"]
    assert "unknown host key" in rows["unknown"] and fingerprint(sshd.host_key).split()[1] in rows["unknown"]
    assert "host key changed" in rows["changed"]
    assert "auth failed" in rows["refused"] and "tried" in rows["refused"]
    assert not list(Path(os.environ["HOME"]).glob(".cache/fleet-console/*")), "check --connect starts nothing"


async def test_a_known_hosts_file_fixed_on_disk_is_tried_at_once(sshd: Sshd, tmp_path: Path) -> None:
    """Issue 35 item 24: the operator creates the missing known_hosts by hand (ssh-keyscan, a copy): the link
    does not wait out its minutes-long backoff with a stale NEEDS ACTION, it tries again within seconds."""
    known = tmp_path / "fresh" / "known_hosts"
    controller = FleetController(Fleet([inst(sshd, known_hosts=str(known))], source="f"),
                                 audit=AuditLog(tmp_path / "a.jsonl"))
    await controller.start()
    try:
        link = controller.links["box1"]
        await Recorder().wait_for(lambda: link.status == "needs_action", what="needs action")
        assert link.next_retry_at is not None and link.next_retry_at - time.time() > 60  # minutes, as before
        known.parent.mkdir(parents=True)
        known.write_text(sshd.known_hosts_line())
        await Recorder().wait_for(lambda: link.status == "connected", timeout=10, what="connected once the file exists")
        assert "known_hosts" not in (controller.state.get("box1").link_detail or "")
    finally:
        await controller.stop()
