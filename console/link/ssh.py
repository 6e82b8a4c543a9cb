"""``SshLink``: the agent on a remote instance, over one asyncssh connection.

Host keys are checked against known_hosts (``accept_new_host_key``: trust on first use for that host only;
a changed key is always refused). One probe first asks whether the instance's python is there and 3.8+ and
whether this agent version is uploaded; the zipapp is uploaded once (named by its hash) and run. A host
without a usable python3 gets an agentless session on the same connection instead
(``console.agentless.session``). ``run_command`` runs on its own exec channel (``exec.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import shlex
from pathlib import Path
from typing import Any

import asyncssh

from console.agent import config as agent_config
from console.agentless import host as agentless_host
from console.agentless import session as agentless_session  # imports link.base/exec only (never this module)
from console.bundle import agent_bundle
from console.link.base import AgentLink, CommandResult, LinkError, Session, SessionFailed, StderrTail
from console.link.exec import exec_command, failure_reason

REMOTE_DIR = ".cache/fleet-console"


class _SshSession:
    def __init__(self, conn: asyncssh.SSHClientConnection, process: asyncssh.SSHClientProcess[bytes]) -> None:
        self.conn, self.process = conn, process
        self.stderr = StderrTail()
        self._stderr_task = asyncio.create_task(self._pump_stderr())

    async def _pump_stderr(self) -> None:
        with contextlib.suppress(Exception):
            while chunk := await self.process.stderr.read(4096):
                self.stderr.add(chunk)

    async def readline(self) -> bytes:
        return await self.process.stdout.readline()

    def write(self, data: bytes) -> None:
        self.process.stdin.write(data)

    def stderr_tail(self) -> str:
        return self.stderr.text()

    async def close(self) -> None:
        self._stderr_task.cancel()
        self.process.close()
        self.conn.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.conn.wait_closed(), 5)


class _AcceptNewClient(asyncssh.SSHClient):
    """accept-new: trust a host that known_hosts does not list yet and record its key there."""

    def __init__(self, known_hosts: Path, alias: str) -> None:
        self.known_hosts, self.alias = known_hosts, alias

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        if _known_host_keys(self.known_hosts, host, addr, port):
            return False  # listed with another key: never silently replace it
        self.known_hosts.parent.mkdir(parents=True, exist_ok=True)
        with self.known_hosts.open("a", encoding="utf-8") as fh:
            fh.write(f"{self.alias} {key.export_public_key().decode().strip()}\n")
        return True


def _known_host_keys(path: Path, host: str, addr: str, port: int) -> list[Any]:
    try:
        known = asyncssh.read_known_hosts(str(path))
    except (OSError, ValueError):
        return []
    keys: list[Any] = []
    for part in known.match(host, addr, port)[:2]:
        keys.extend(part)
    return keys


class SshLink(AgentLink):
    """The agent on a remote instance, over one asyncssh connection."""

    def __init__(self, *args: Any, connect_timeout: float = 15.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.connect_timeout = connect_timeout
        self._conn: asyncssh.SSHClientConnection | None = None

    @property
    def known_hosts_path(self) -> Path:
        return Path(self.instance.known_hosts or "~/.ssh/known_hosts").expanduser()

    def _host_alias(self) -> str:
        inst = self.instance
        return inst.host if inst.port == 22 else f"[{inst.host}]:{inst.port}"

    async def _connect(self) -> asyncssh.SSHClientConnection:
        inst = self.instance
        options: dict[str, Any] = {
            "host": inst.host,
            "port": inst.port,
            "username": inst.user,
            "known_hosts": str(self.known_hosts_path),
            "keepalive_interval": 10,
            "keepalive_count_max": 3,
            "connect_timeout": self.connect_timeout,
            "config": [],
            "agent_path": None,
        }
        if inst.key:
            options["client_keys"] = [str(Path(inst.key).expanduser())]
        if inst.accept_new_host_key:
            options["client_factory"] = lambda: _AcceptNewClient(self.known_hosts_path, self._host_alias())
        try:
            return await asyncssh.connect(**options)
        except asyncssh.HostKeyNotVerifiable:
            listed = _known_host_keys(self.known_hosts_path, inst.host, inst.host, inst.port)
            if listed:
                why = f"HOST KEY MISMATCH for {self._host_alias()}: the key differs from {self.known_hosts_path}"
            else:
                why = (f"unknown host key for {self._host_alias()}: not in {self.known_hosts_path} "
                       "(verify and add it, or set accept_new_host_key = true for this instance)")
            raise SessionFailed("hostkey_mismatch", why) from None
        except asyncssh.PermissionDenied as exc:
            raise SessionFailed("auth_failed", f"{inst.address}: permission denied ({exc.reason})") from None
        except (asyncssh.Error, OSError, TimeoutError) as exc:
            raise SessionFailed("unreachable", f"{inst.address}: {failure_reason(exc)}") from None
        except (ValueError, KeyError) as exc:  # unreadable key file and the like
            raise SessionFailed("auth_failed", f"{inst.address}: {exc}") from None

    async def _probe_host(self, conn: asyncssh.SSHClientConnection) -> agentless_host.HostProbe:
        """Is the instance's python there and 3.8+, and the agent uploaded? (python "unknown": no answer)."""
        path = f"{REMOTE_DIR}/{agent_bundle().remote_name}"
        command = agentless_host.probe_command(self.instance.python, path)
        result = await conn.run(command, check=False, timeout=30, encoding=None)
        out = result.stdout or b""
        return agentless_host.parse_probe(out.decode("utf-8", "replace") if isinstance(out, bytes) else str(out))

    async def _ensure_agent(self, conn: asyncssh.SSHClientConnection, present: bool | None = None) -> str:
        """Upload the agent zipapp unless this exact version is already there; return its path."""
        bundle = agent_bundle()
        path = f"{REMOTE_DIR}/{bundle.remote_name}"
        if present is None:
            check = await conn.run(f"test -s {shlex.quote(path)} && echo present", check=False, timeout=30)
            present = "present" in str(check.stdout)
        if present:
            return path
        tmp = f"{path}.{random.randrange(1 << 30)}.tmp"
        q_dir, q_tmp, q_path = (shlex.quote(p) for p in (REMOTE_DIR, tmp, path))
        upload = f"mkdir -p {q_dir} && cat > {q_tmp} && mv -f {q_tmp} {q_path}"
        result = await conn.run(upload, input=bundle.data, encoding=None, check=False, timeout=60)
        if result.exit_status != 0:
            raw = result.stderr or b""
            err = (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw).strip()
            raise SessionFailed("agent_failed", f"could not upload the agent: {err or result.exit_status}")
        return path

    async def _open_session(self) -> Session:
        conn = await self._connect()
        try:
            probe = await self._probe_host(conn)
            if probe.python in ("none", "old", "broken"):
                self._conn = conn
                return agentless_session.AgentlessSession(conn, self.instance, probe)
            path = await self._ensure_agent(conn, None if probe.python == "unknown" else probe.agent_present)
            command = " ".join(
                shlex.quote(part)
                for part in (self.instance.python, path, "--config", agent_config.encode(self.instance.agent_config()))
            )
            process = await conn.create_process(command, encoding=None)
        except SessionFailed:
            conn.close()
            raise
        except (asyncssh.Error, OSError, TimeoutError) as exc:
            conn.close()
            raise SessionFailed("agent_failed", f"could not start the agent: {exc}") from None
        self._conn = conn
        return _SshSession(conn, process)

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
