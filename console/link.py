"""Links: one per instance, each keeping that instance's agent running and its frames flowing.

`SshLink` reaches an instance over asyncssh (host keys checked against known_hosts), uploads the
agent zipapp once (named by its hash) and runs it; `LocalLink` runs the agent as a local subprocess.
Both reconnect with jittered exponential backoff; a failing host only ever affects its own link.
A host without a usable python3 (missing, or older than 3.8) gets an agentless session instead: the
link polls nvidia-smi, /proc (or ps) and the configured logs over exec channels of the same connection
and synthesizes the agent's frames (`console.agentless`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import shlex
import signal
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import asyncssh

from console import agentless
from console.agent import config as agent_config
from console.agent.protocol import PROTOCOL_VERSION, ProtocolError, decode_frame, decode_request, encode
from console.bundle import agent_bundle
from console.inventory import Instance

FrameHandler = Callable[[str, dict[str, Any]], None]
StatusHandler = Callable[[str, str, str], None]

HELLO_TIMEOUT = 30.0  # seconds from starting the agent to its hello
SILENCE_TIMEOUT = 30.0  # no frame at all for this long: the session is dead, reconnect
MAX_LINE = 16 * 1024 * 1024
REMOTE_DIR = ".cache/fleet-console"


class LinkError(Exception):
    """A request or command could not be carried out on an instance."""


@dataclass
class CommandResult:
    exit_status: int | None
    stdout: str
    stderr: str
    timed_out: bool = False


class Backoff:
    """Exponential backoff with jitter: delays spread so a fleet does not reconnect in lockstep."""

    def __init__(self, base: float = 1.0, cap: float = 30.0) -> None:
        self.base, self.cap, self.attempt = base, cap, 0

    def next_delay(self) -> float:
        ceiling = min(self.cap, self.base * (2**self.attempt))
        self.attempt += 1
        return ceiling / 2 + random.uniform(0, ceiling / 2)

    def reset(self) -> None:
        self.attempt = 0


class _Session(Protocol):
    async def readline(self) -> bytes: ...
    def write(self, data: bytes) -> None: ...
    def stderr_tail(self) -> str: ...
    async def close(self) -> None: ...


class SessionFailed(Exception):
    """The session could not start or ended; ``status`` says how, for the UI."""

    def __init__(self, status: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


class AgentLink:
    """Keeps one instance's agent running; subclasses say how to reach it."""

    def __init__(
        self,
        instance: Instance,
        on_frame: FrameHandler,
        on_status: StatusHandler,
        backoff: Backoff | None = None,
    ) -> None:
        self.instance = instance
        self.name = instance.name
        self._on_frame = on_frame
        self._on_status = on_status
        self.backoff = backoff or Backoff()
        self.status, self.detail = "idle", ""
        self._session: _Session | None = None
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.connected_event = asyncio.Event()
        self.last_frame_at = 0.0

    # -- public ---------------------------------------------------------------------------------
    def start(self) -> asyncio.Task[None]:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"link:{self.name}")
        return self._task

    async def stop(self) -> None:
        self._stopping = True
        if self._session is not None:
            with contextlib.suppress(Exception):
                self._session.write(encode({"id": 0, "op": "stop", "args": {}}))
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        await self._close_session()
        self._set_status("closed", "stopped")

    async def request(self, op: str, args: dict[str, Any] | None = None, timeout: float = 60.0) -> dict[str, Any]:
        """Send a request to the agent and wait for its ``result`` frame."""
        session = self._session
        if session is None or self.status != "connected":
            raise LinkError(f"{self.name}: not connected ({self.status}: {self.detail})")
        req_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[req_id] = future
        try:
            session.write(encode({"id": req_id, "op": op, "args": args or {}}))
            return await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise LinkError(f"{self.name}: no answer to {op!r} within {timeout:g} s") from None
        finally:
            self._pending.pop(req_id, None)

    async def run_command(self, command: str, timeout: float = 20.0) -> CommandResult:
        raise NotImplementedError

    # -- loop -----------------------------------------------------------------------------------
    async def _run(self) -> None:
        while not self._stopping:
            self._set_status("connecting", self.instance.address)
            try:
                await self._serve_session()
                status, detail = "unreachable", "agent session ended"
            except SessionFailed as exc:
                status, detail = exc.status, exc.detail
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bug or an unexpected library error: keep the fleet running
                status, detail = "agent_failed", f"{type(exc).__name__}: {exc}"
            finally:
                await self._close_session()
            if self._stopping:
                break
            delay = self.backoff.next_delay()
            self._set_status(status, f"{detail} (retry in {delay:.0f} s)")
            await asyncio.sleep(delay)

    async def _serve_session(self) -> None:
        self._session = await self._open_session()
        line = await self._read_line(HELLO_TIMEOUT, "no hello from the agent")
        hello = self._parse(line)
        if hello is None or hello.get("type") != "hello":
            raise SessionFailed("agent_failed", "the agent did not say hello: " + self._session.stderr_tail())
        if hello.get("v") != PROTOCOL_VERSION:
            raise SessionFailed("agent_failed", f"agent speaks protocol {hello.get('v')}, need {PROTOCOL_VERSION}")
        self._deliver(hello)
        self.backoff.reset()
        detail = getattr(self._session, "status_detail", None)  # an agentless session says why it is one
        self._set_status("connected", detail or f"agent {hello.get('agent_version')} pid {hello.get('pid')}")
        while not self._stopping:  # also ends a session whose cancellation got lost (wait_for with a ready line)
            line = await self._read_line(SILENCE_TIMEOUT, f"agent silent for {SILENCE_TIMEOUT:.0f} s")
            frame = self._parse(line)
            if frame is not None:
                self._deliver(frame)

    async def _read_line(self, timeout: float, what: str) -> bytes:
        assert self._session is not None
        try:
            line = await asyncio.wait_for(self._session.readline(), timeout)
        except TimeoutError:
            raise SessionFailed("unreachable", what) from None
        except (asyncssh.Error, OSError, asyncio.IncompleteReadError, ValueError) as exc:
            raise SessionFailed("unreachable", f"connection lost: {exc}") from None
        if not line:
            tail = self._session.stderr_tail()
            raise SessionFailed("agent_failed" if tail else "unreachable", tail or "connection closed")
        return line

    def _parse(self, line: bytes) -> dict[str, Any] | None:
        try:
            return decode_frame(line)
        except ProtocolError as exc:
            self._on_frame(self.name, {"type": "error", "ts": time.time(), "message": f"bad frame: {exc}"})
            return None

    def _deliver(self, frame: dict[str, Any]) -> None:
        self.last_frame_at = time.time()
        if frame["type"] == "result":
            future = self._pending.get(frame.get("id"))  # type: ignore[arg-type]
            if future is not None and not future.done():
                future.set_result(frame)
        self._on_frame(self.name, frame)

    def _set_status(self, status: str, detail: str) -> None:
        self.status, self.detail = status, detail
        if status == "connected":
            self.connected_event.set()
        else:
            self.connected_event.clear()
        self._on_status(self.name, status, detail)

    async def _close_session(self) -> None:
        session, self._session = self._session, None
        for future in self._pending.values():
            if not future.done():
                future.set_exception(LinkError(f"{self.name}: connection lost"))
        if session is not None:
            with contextlib.suppress(Exception):
                await session.close()

    async def _open_session(self) -> _Session:
        raise NotImplementedError


# -- SSH ------------------------------------------------------------------------------------------


class _StderrTail:
    def __init__(self) -> None:
        self.lines: deque[str] = deque(maxlen=5)

    def add(self, data: bytes) -> None:
        for line in data.decode("utf-8", "replace").splitlines():
            if line.strip():
                self.lines.append(line.strip())

    def text(self) -> str:
        return " | ".join(self.lines)


class _SshSession:
    def __init__(self, conn: asyncssh.SSHClientConnection, process: asyncssh.SSHClientProcess[bytes]) -> None:
        self.conn, self.process = conn, process
        self.stderr = _StderrTail()
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


def _reason(exc: BaseException) -> str:
    """A short human reason for a connection failure ("Connection refused", "timed out", ...)."""
    if isinstance(exc, TimeoutError):
        return "connection timed out"
    errno_ = getattr(exc, "errno", None)
    if errno_:
        return os.strerror(errno_)
    return getattr(exc, "reason", None) or str(exc) or type(exc).__name__


@dataclass
class _RawResult:
    exit_status: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool = False


async def _exec(conn: asyncssh.SSHClientConnection, command: str, timeout: float) -> _RawResult:
    """Run ``command`` under ``/bin/sh -c`` on its own exec channel of ``conn``, output as bytes.

    The remote side enforces the limit too (coreutils timeout when present), so a command that hangs does
    not outlive its channel; locally the channel is closed when the limit passes. Channel and connection
    errors (asyncssh.Error, OSError) are the caller's to handle.
    """
    limit = max(1, int(timeout))
    quoted = shlex.quote(command)
    wrapped = (
        f"if command -v timeout >/dev/null 2>&1; then exec timeout -k 2 {limit} /bin/sh -c {quoted}; "
        f"else exec /bin/sh -c {quoted}; fi"
    )
    process = await conn.create_process(wrapped, stdin=asyncssh.DEVNULL, encoding=None)
    try:
        result = await asyncio.wait_for(process.wait(check=False), timeout + 3)
    except TimeoutError:
        process.close()
        return _RawResult(None, b"", b"", timed_out=True)
    except (asyncssh.Error, OSError):
        process.close()
        raise
    out, err = result.stdout or b"", result.stderr or b""
    if isinstance(out, str):
        out = out.encode()
    if isinstance(err, str):
        err = err.encode()
    if result.exit_status == 124:  # killed by the remote timeout
        return _RawResult(None, out, err, timed_out=True)
    return _RawResult(result.exit_status, out, err)


class _AgentlessSession:
    """Polls a python-less host over exec channels and hands out the agent's frames as JSON lines.

    Every ``interval`` (at least ``agentless.MIN_INTERVAL`` s): nvidia-smi (its own timeout; a hang is a GPU
    error, retried after a while), the process table and the configured logs, concurrently, then one
    ``heartbeat``. A process or log poll that fails or times out ends the session like a dead agent, and the
    link reconnects with backoff. Requests other than ping/full_procs/stop are answered at once with
    ``ok: false`` and ``agentless.NEEDS_PYTHON``.
    """

    def __init__(self, conn: asyncssh.SSHClientConnection, instance: Instance, probe: agentless.HostProbe) -> None:
        self.conn = conn
        self.reason = reason = agentless.agentless_reason(probe, instance.python)
        self.host = probe.host or instance.host
        self.python = probe.python_version
        self.config = agent_config.load(agent_config.encode(instance.agent_config()))
        self.interval = agentless.poll_interval(self.config)
        self.status_detail = f"agentless: {reason} (nvidia-smi and ps over SSH)"
        self.facts = agentless.HostFacts()
        self.gpu = agentless.GpuFrames()
        self.procs = agentless.ProcFrames()
        self.logs = agentless.RemoteLogs(self.config)
        self.sent = 0
        self.samples = 0
        self._queue: asyncio.Queue[bytes | SessionFailed] = asyncio.Queue()
        self._task = asyncio.create_task(self._run(), name=f"agentless:{instance.name}")

    # -- the _Session interface -----------------------------------------------------------------------------
    async def readline(self) -> bytes:
        item = await self._queue.get()
        if isinstance(item, SessionFailed):
            self._queue.put_nowait(item)  # every later read fails the same way
            raise item
        return item

    def write(self, data: bytes) -> None:
        for line in data.splitlines():
            if not line.strip():
                continue
            try:
                req = decode_request(line)
            except ProtocolError as exc:
                self._send("error", message=f"bad request: {exc}")
                continue
            op = req["op"]
            if op == "ping":
                self._send("result", id=req["id"], ok=True, data={"pong": True, "time": time.time(), "agentless": True})
            elif op == "full_procs":
                self.procs.reset()
                self._send("result", id=req["id"], ok=True, data={"ok": True})
            elif op == "stop":
                pass  # the link closes the session right after; a reply here would race its cancellation
            else:
                self._send("result", id=req["id"], ok=False, error=agentless.NEEDS_PYTHON)

    def stderr_tail(self) -> str:
        return ""

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task
        self.conn.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.conn.wait_closed(), 5)

    # -- polling ------------------------------------------------------------------------------------------
    def _send(self, frame_type: str, ts: float | None = None, **fields: Any) -> None:
        frame = {"type": frame_type, "ts": round(time.time() if ts is None else ts, 3)}
        frame.update(fields)
        data = encode(frame)
        self.sent += len(data)
        self._queue.put_nowait(data)

    async def _run(self) -> None:
        try:
            await self._serve()
        except asyncio.CancelledError:
            raise
        except SessionFailed as exc:
            self._queue.put_nowait(exc)
        except (asyncssh.Error, OSError) as exc:
            self._queue.put_nowait(SessionFailed("unreachable", f"connection lost: {_reason(exc)}"))
        except Exception as exc:  # a bug: end the session (the link reconnects), never the console
            self._queue.put_nowait(SessionFailed("agent_failed", f"agentless poller: {type(exc).__name__}: {exc}"))

    async def _poll(self, command: str, what: str) -> bytes:
        result = await _exec(self.conn, command, agentless.POLL_TIMEOUT)
        if result.timed_out:
            raise SessionFailed("unreachable", f"agentless: {what} poll timed out after {agentless.POLL_TIMEOUT:g} s")
        if result.exit_status != 0:
            err = result.stderr.decode("utf-8", "replace").strip().splitlines()
            why = err[-1] if err else f"exit status {result.exit_status}"
            raise SessionFailed("agent_failed", f"agentless: {what} poll failed: {why}")
        return result.stdout

    async def _serve(self) -> None:
        facts = await self._poll(agentless.FACTS_COMMAND, "host")
        self.facts = agentless.parse_facts(facts.decode("utf-8", "replace"))
        if self.facts.have_proc:
            self.status_detail = f"agentless: {self.reason} (nvidia-smi and /proc over SSH)"
        first_gpu = await self._poll_gpu()
        self._send(
            "hello",
            v=PROTOCOL_VERSION,
            agent_version=agentless.AGENT_VERSION,
            host=self.host,
            pid=None,
            python=self.python,
            heartbeat_interval=max(self.interval, float(self.config.get("heartbeat_interval") or 5.0)),
            features={
                "agentless": True,
                "gpu": self.gpu.state,
                "psutil": False,
                "simulated_gpu": False,
                "ops": sorted(agentless.OPS),
            },
        )
        loop = asyncio.get_running_loop()
        seq = 0
        gpu_task: asyncio.Task[dict[str, Any] | None] | None = None
        gpu_frame = first_gpu  # read before the hello (its features say the GPU state)
        try:
            while True:
                started = loop.time()
                # nvidia-smi runs beside the other polls and may take longer than a poll (a GPU falling off the
                # bus can hang it for seconds): its frame goes out with the first poll after it answered.
                if gpu_task is None and seq > 0 and self.gpu.due(time.monotonic()):
                    gpu_task = asyncio.create_task(self._poll_gpu())
                results = await asyncio.gather(self._poll_procs(), self._poll_logs(), return_exceptions=True)
                for result in results:
                    if isinstance(result, BaseException):
                        raise result
                if gpu_task is not None:
                    await asyncio.wait({gpu_task}, timeout=max(0.0, started + self.interval / 2 - loop.time()))
                    if gpu_task.done():
                        gpu_frame, gpu_task = gpu_task.result(), None  # raises when the connection went
                if gpu_frame is not None:
                    self._send("gpu", **gpu_frame)
                    gpu_frame = None
                clock, records = results[0]  # type: ignore[misc]
                procs_frame = self.procs.frame(records, time.monotonic())
                if procs_frame is not None:
                    self._send("procs", ts=clock, **procs_frame)
                for frame in results[1]:  # type: ignore[union-attr]
                    self._send("log", **frame)
                self.samples += 1
                seq += 1
                self._send("heartbeat", seq=seq, samples=self.samples, sent=self.sent)
                await asyncio.sleep(max(0.0, started + self.interval - loop.time()))
        finally:
            if gpu_task is not None:
                gpu_task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await gpu_task

    async def _poll_gpu(self) -> dict[str, Any] | None:
        nonce = agentless.new_nonce()
        result = await _exec(self.conn, agentless.gpu_command(nonce), agentless.GPU_TIMEOUT)
        now = time.monotonic()
        if result.timed_out:
            return self.gpu.timed_out(now, agentless.GPU_TIMEOUT)
        return self.gpu.feed(agentless.parse_gpu_output(result.stdout, nonce), now)

    async def _poll_procs(self) -> tuple[float | None, dict[int, dict[str, Any]]]:
        nonce = agentless.new_nonce()
        facts = self.facts
        out = await self._poll(agentless.procs_command(nonce, facts.have_proc), "process")
        clock: float | None = None  # the host's clock (process start times are on it), for the frame's ts
        if facts.have_proc:
            uptime, rows = agentless.parse_proc_snapshot(out, nonce, facts)
            if uptime is not None and facts.btime > 0:
                clock = facts.btime + uptime
        else:
            clock, rows = agentless.parse_ps_snapshot(out, nonce)
            uptime = None
        if not rows:
            raise SessionFailed("agent_failed", "agentless: the host listed no processes")
        return clock, self.procs.records(uptime, rows, self.gpu.mem_by_pid, boot=facts.btime)

    async def _poll_logs(self) -> list[dict[str, Any]]:
        nonce = agentless.new_nonce()
        command = self.logs.command(nonce)
        if command is None:
            return []
        out = await self._poll(command, "log")
        return self.logs.parse(out, nonce, time.monotonic())


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
            raise SessionFailed("unreachable", f"{inst.address}: {_reason(exc)}") from None
        except (ValueError, KeyError) as exc:  # unreadable key file and the like
            raise SessionFailed("auth_failed", f"{inst.address}: {exc}") from None

    async def _probe_host(self, conn: asyncssh.SSHClientConnection) -> agentless.HostProbe:
        """Is the instance's python there and 3.8+, and the agent uploaded? (python "unknown": no answer)."""
        path = f"{REMOTE_DIR}/{agent_bundle().remote_name}"
        command = agentless.probe_command(self.instance.python, path)
        result = await conn.run(command, check=False, timeout=30, encoding=None)
        out = result.stdout or b""
        return agentless.parse_probe(out.decode("utf-8", "replace") if isinstance(out, bytes) else str(out))

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
            err = (result.stderr or b"").decode("utf-8", "replace").strip()
            raise SessionFailed("agent_failed", f"could not upload the agent: {err or result.exit_status}")
        return path

    async def _open_session(self) -> _Session:
        conn = await self._connect()
        try:
            probe = await self._probe_host(conn)
            if probe.python in ("none", "old", "broken"):
                self._conn = conn
                return _AgentlessSession(conn, self.instance, probe)
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
            result = await _exec(self._conn, command, timeout)
        except (asyncssh.Error, OSError) as exc:
            raise LinkError(f"{self.name}: {exc}") from None
        out, err = result.stdout.decode("utf-8", "replace"), result.stderr.decode("utf-8", "replace")
        if result.timed_out:
            return CommandResult(None, out, err, timed_out=True)
        return CommandResult(result.exit_status, out, err)


# -- local ----------------------------------------------------------------------------------------


class _LocalSession:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.stderr = _StderrTail()
        self._stderr_task = asyncio.create_task(self._pump_stderr())

    async def _pump_stderr(self) -> None:
        assert self.process.stderr is not None
        with contextlib.suppress(Exception):
            while chunk := await self.process.stderr.read(4096):
                self.stderr.add(chunk)

    async def readline(self) -> bytes:
        assert self.process.stdout is not None
        return await self.process.stdout.readline()

    def write(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)

    def stderr_tail(self) -> str:
        return self.stderr.text()

    async def close(self) -> None:
        self._stderr_task.cancel()
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), 5)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.process.kill()
                await self.process.wait()


class LocalLink(AgentLink):
    """The agent on this machine, as a subprocess (``transport = "local"``)."""

    async def _open_session(self) -> _Session:
        argv = [sys.executable, "-m", "console.agent", "--config", agent_config.encode(self.instance.agent_config())]
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                limit=MAX_LINE,
                cwd=str(Path(__file__).resolve().parent.parent),
            )
        except OSError as exc:
            raise SessionFailed("agent_failed", f"could not start the agent: {exc}") from None
        return _LocalSession(process)

    async def run_command(self, command: str, timeout: float = 20.0) -> CommandResult:
        process = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        try:
            out, err = await asyncio.wait_for(process.communicate(), timeout)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # the whole session the command started
            await process.wait()
            return CommandResult(None, "", "", timed_out=True)
        return CommandResult(process.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))


def make_link(instance: Instance, on_frame: FrameHandler, on_status: StatusHandler) -> AgentLink:
    """The link for an instance's transport."""
    cls = LocalLink if instance.transport == "local" else SshLink
    return cls(instance, on_frame, on_status)

