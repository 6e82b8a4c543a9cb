"""``SshLink``: the agent on a remote instance, over one asyncssh connection.

Where to connect and with which keys comes from ``auth.py`` (``~/.ssh/config``, ssh-agent, jump hosts);
host keys are checked against known_hosts (``hostkeys.py``): an unknown key is ``hostkey_unknown`` with
its fingerprint, and can be accepted (``accept_host_key``, or ``accept_new_host_key``: trust on first use);
a changed key is ``hostkey_changed``, always refused. One probe first asks whether the instance's python
is there and 3.8+ and whether this agent version is uploaded; the zipapp is uploaded once (named by its
hash) and run. A host without a usable python3 gets an agentless session on the same connection instead
(``console.agentless.session``). ``run_command`` runs on its own exec channel (``exec.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import asyncssh

from console.agentless import host as agentless_host
from console.agentless import session as agentless_session  # imports link.base/exec only (never this module)
from console.link import auth, pace, remote
from console.link.base import (
    PING_EVERY,
    WATCHDOG_PINGS,
    AgentLink,
    CommandResult,
    LinkError,
    Session,
    SessionFailed,
    StderrTail,
    config_line,
)
from console.link.bundle import agent_bundle
from console.link.channel import AgentChannel
from console.link.exec import exec_command, failure_reason
from console.link.hostkeys import HostKeyClient, HostKeyOffer, fingerprint, read_known_hosts

REMOTE_DIR = remote.REMOTE_DIR
UPLOAD_RETRY_SECONDS = 600.0  # a host watched agentless because the agent could not be uploaded tries it again


def journal_key(name: str) -> str:
    """The instance's action journal on the host (one per instance name: any console can ask it)."""
    return hashlib.sha256(name.encode("utf-8")).hexdigest()[:16]


class _SshSession:
    """The agent's channel (``channel.AgentChannel``: lines with flow control) on its connection."""

    def __init__(self, conn: asyncssh.SSHClientConnection, channel: AgentChannel, stderr: StderrTail,
                 link: SshLink) -> None:
        self.conn, self.channel, self.stderr, self.link = conn, channel, stderr, link

    async def readline(self) -> bytes:
        return await self.channel.readline()

    def write(self, data: bytes) -> None:
        self.channel.write(data)

    def stderr_tail(self) -> str:
        tail = self.stderr.text()
        if remote.NEEDS_UPLOAD in tail:  # missing or changed on the host: the next attempt uploads it again
            self.link._upload_needed = True
        return tail

    async def close(self) -> None:
        self.channel.close()
        self.conn.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.conn.wait_closed(), 5)


class SshLink(AgentLink):
    """The agent on a remote instance, over one asyncssh connection."""

    def __init__(self, *args: Any, connect_timeout: float | None = None, limiter: pace.ConnectLimiter | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connect_timeout = connect_timeout  # None: the instance's, else ~/.ssh/config's, else 15 s
        self.limiter = limiter  # None: the process-wide one (``pace.connect_limiter()``, 48 slots)
        self._conn: asyncssh.SSHClientConnection | None = None
        self.host_key_offer: HostKeyOffer | None = None  # an unknown key the operator may accept
        self._upload_needed = False  # the last start found the zipapp missing or changed: upload again

    @property
    def cipher(self) -> str | None:
        """The cipher the live connection negotiated (``aes128-gcm@openssh.com`` by default); None if none."""
        conn = self._conn
        return None if conn is None else str(conn.get_extra_info("send_cipher"))

    @property
    def known_hosts_path(self) -> Path:
        """The instance's own known_hosts (fleet file), else ~/.ssh/known_hosts (before ~/.ssh/config)."""
        return Path(self.instance.known_hosts or "~/.ssh/known_hosts").expanduser()

    async def _connect(self) -> asyncssh.SSHClientConnection:
        """Connect through every hop (jump hosts first); each hop's failure names that hop."""
        try:
            targets = await auth.resolve(self.instance)
        except auth.NeedsAction as exc:
            raise SessionFailed("needs_action", str(exc)) from None
        conn: asyncssh.SSHClientConnection | None = None
        for target in targets:
            if self.connect_timeout is not None and self.instance.connect_timeout is None:
                target.options["connect_timeout"] = self.connect_timeout
            try:
                nxt = await self._connect_hop(target, conn)
            except BaseException:
                if conn is not None:
                    conn.close()
                raise
            if conn is not None:
                nxt.set_tunnel(conn)  # closing the last hop closes the chain, as asyncssh's own ProxyJump does
            conn = nxt
        assert conn is not None
        return conn

    async def _connect_hop(
        self, target: auth.Target, tunnel: asyncssh.SSHClientConnection | None
    ) -> asyncssh.SSHClientConnection:
        path = target.known_hosts
        missing = not path.exists()
        if not missing and not os.access(path, os.R_OK):
            raise SessionFailed("needs_action", f"{target.label}: cannot read {path}: check its owner and mode")
        client = HostKeyClient(path, target.accept_new)
        try:
            known: Any = asyncssh.import_known_hosts("") if missing else read_known_hosts(path)
        except OSError as exc:
            raise SessionFailed("needs_action", f"{target.label}: cannot read {path}: {exc.strerror}") from None
        except ValueError as exc:  # a line asyncssh cannot parse
            raise SessionFailed("needs_action", f"{target.label}: {path}: {exc}") from None
        try:
            conn = await asyncssh.connect(
                target.host, tunnel=tunnel, known_hosts=known, client_factory=lambda: client, **target.options
            )
        except asyncssh.HostKeyNotVerifiable as exc:
            raise self._host_key_failure(target, client, missing, str(exc)) from None
        except asyncssh.PermissionDenied:
            status, detail = await auth.explain_auth_failure(target)
            raise SessionFailed(status, detail) from None
        except (asyncssh.Error, OSError, TimeoutError) as exc:
            if isinstance(exc, OSError) and exc.filename:  # a local file asyncssh could not read
                raise SessionFailed("needs_action", f"{target.label}: cannot read {exc.filename}: "
                                                    f"{exc.strerror}") from None
            raise SessionFailed("unreachable", f"{target.label}: {failure_reason(exc)}") from None
        except (ValueError, KeyError) as exc:  # a key or config value asyncssh could not use
            raise SessionFailed("needs_action", f"{target.label}: {exc}") from None
        if client.accepted:
            self.host_key_offer = None
        return conn

    def _host_key_failure(self, target: auth.Target, client: HostKeyClient, missing: bool, why: str) -> SessionFailed:
        offer = client.offer
        if offer is None:  # a revoked key or a certificate asyncssh refused before asking
            return SessionFailed("hostkey_changed", f"{target.label}: {why}")
        self.host_key_offer = None if offer.changed else offer
        where = f"{target.label}: " if target.label.startswith("jump host") else ""  # the offer names the host
        if offer.changed:
            return SessionFailed("hostkey_changed", where + offer.describe())
        if target.accept_new:  # trust on first use failed: the file could not be written
            return SessionFailed("needs_action", f"{where}cannot write {offer.known_hosts}: check the directory "
                                                 "and its mode")
        if missing:
            return SessionFailed("needs_action", (
                f"{where}known_hosts file {offer.known_hosts} does not exist; the host offers {offer.fingerprint}: "
                "verify it and accept it in the instance screen (creates the file), or set accept_new_host_key = true"))
        return SessionFailed("hostkey_unknown", where + offer.describe())

    @contextlib.asynccontextmanager
    async def _connect_slot(self) -> AsyncIterator[None]:
        """Hold a slot of this link's limiter; while it waits for one, "connecting" says "(queued)"."""
        limiter = self.limiter or pace.connect_limiter()
        queued = limiter.full and self.status == "connecting"
        if queued:
            self._set_status("connecting", f"{self.instance.address} (queued)")
        async with limiter.slot():
            if queued and self.status == "connecting":
                self._set_status("connecting", self.instance.address)
            yield

    async def check_login(self) -> tuple[str, str]:
        """Log in once and out again, starting nothing: ``("ok", how)`` or a failure ``(status, detail)``."""
        try:
            async with self._connect_slot():
                conn = await self._connect()
        except SessionFailed as exc:
            return exc.status, exc.detail
        try:
            key = conn.get_server_host_key()
            how = f"{conn.get_extra_info('username')}@{self.instance.host}" + (f" ({fingerprint(key)})" if key else "")
        finally:
            conn.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.wait_closed(), 5)
        return "ok", how

    async def _probe_host(self, conn: asyncssh.SSHClientConnection) -> agentless_host.HostProbe:
        """Is the instance's python there and 3.8+, and the agent uploaded? (python "unknown": no answer)."""
        path = f"{REMOTE_DIR}/{agent_bundle().remote_name}"
        command = agentless_host.probe_command(self.instance.python, path)
        result = await conn.run(command, check=False, timeout=30, encoding=None)
        out = result.stdout or b""
        return agentless_host.parse_probe(out.decode("utf-8", "replace") if isinstance(out, bytes) else str(out))

    async def _ensure_agent(self, conn: asyncssh.SSHClientConnection, present: bool | None = None) -> None:
        """Upload the agent zipapp unless this exact version is already there (``remote.upload_command``:
        a 0700 directory of this user, never through a symlink, a fresh temp file renamed into place)."""
        bundle = agent_bundle()
        if present and not self._upload_needed:
            return
        command = remote.upload_command(self.instance.python, bundle.remote_name, bundle.sha256)
        result = await conn.run(command, input=bundle.data, encoding=None, check=False, timeout=60)
        if result.exit_status != 0:
            raw = result.stderr or b""
            err = (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw).strip()
            last = err.splitlines()[-1][-300:] if err else ""  # a traceback's last line says what happened
            raise SessionFailed("agent_failed", f"could not upload the agent: {last or result.exit_status}")
        self._upload_needed = False

    def agent_args(self) -> list[str]:
        """The agent's arguments: nothing secret (the config goes on stdin)."""
        return ["--config-stdin", "--state-dir", "~/" + REMOTE_DIR, "--console-id", self.console_id,
                "--journal", journal_key(self.name), "--watchdog", str(PING_EVERY * WATCHDOG_PINGS)]

    async def _open_session(self) -> Session:
        """Connect, log in and start the agent, holding a connect slot (not for the session's life)."""
        async with self._connect_slot():
            return await self._start_session()

    async def _start_session(self) -> Session:
        conn = await self._connect()
        try:
            probe = await self._probe_host(conn)
            if probe.python in ("none", "old", "broken"):
                self._conn = conn
                return agentless_session.AgentlessSession(conn, self.instance, probe)
            try:
                await self._ensure_agent(conn, probe.agent_present)
            except SessionFailed as exc:  # python runs, the agent cannot be put there (a full disk, a bad dir):
                self._conn = conn  # watch the host without it, and try the agent again later
                return agentless_session.AgentlessSession(conn, self.instance, probe, reason=exc.detail,
                                                          lifetime=UPLOAD_RETRY_SECONDS)
            bundle = agent_bundle()
            command = remote.start_command(self.instance.python, bundle.remote_name, bundle.sha256, self.agent_args())
            stderr = StderrTail()
            _, session = await conn.create_session(lambda: AgentChannel(stderr.add), command, encoding=None)
            channel = cast(AgentChannel, session)
            channel.write(config_line(self.instance.agent_config()))
        except SessionFailed:
            conn.close()
            raise
        except (asyncssh.Error, OSError, TimeoutError) as exc:
            conn.close()
            raise SessionFailed("agent_failed", f"could not start the agent: {exc}") from None
        self._conn = conn
        return _SshSession(conn, channel, stderr, self)

    async def _close_session(self) -> None:
        await super()._close_session()
        self._conn = None

    async def run_command(self, command: str, timeout: float = 20.0) -> CommandResult:
        """Run a command on its own exec channel of the live connection (agent or agentless)."""
        if self._conn is None:
            raise LinkError(f"{self.name}: not connected ({self.status}: {self.detail})")
        try:
            result = await exec_command(self._conn, command, timeout)
        except (asyncssh.Error, OSError) as exc:
            raise LinkError(f"{self.name}: {exc}") from None
        out, err = result.stdout.decode("utf-8", "replace"), result.stderr.decode("utf-8", "replace")
        if result.timed_out:
            return CommandResult(None, out, err, timed_out=True)
        return CommandResult(result.exit_status, out, err)
