"""The link core: one per instance, keeping that instance's agent running and its frames flowing.

``AgentLink`` owns the session loop (hello, frames, requests answered by id, silence and reconnect with
jittered exponential backoff); a subclass says how a session is opened (``SshLink`` in ``ssh.py``,
``LocalLink`` in ``local.py``). A session is anything with the ``Session`` interface: the agent's stdio
over an SSH channel or a pipe, or the agentless poller (``console.agentless.session``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import random
import secrets
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import asyncssh

from console.agent.wire.loglines import clean_line
from console.agent.wire.protocol import PROTOCOL_VERSION, encode
from console.agent.wire.wording import lost_reason
from console.inventory import Instance
from console.link import pace
from console.link.pinger import pinger
from console.link.surface import FAILURES, PERMANENT, LinkError, StatusRules
from console.link.validate import BadFrame, FloodGuard, check_result, decode

FrameHandler = Callable[[str, dict[str, Any]], None]
StatusHandler = Callable[[str, str, str], None]

HELLO_TIMEOUT = 30.0  # seconds from starting the agent to its hello
MAX_LOGIN_LINES = 200  # lines a login shell may print on stdout before the agent's hello (skipped)
SILENCE_TIMEOUT = 30.0  # no frame at all for this long: the session is dead, reconnect
MAX_LINE = 16 * 1024 * 1024
# A session that ends within this long of its hello counts as a failed attempt: the backoff keeps growing
# (a host whose agent dies at once is retried ever more slowly, not ~45 times a minute).
STABLE_AFTER = 10.0
FILE_CHECK_SECONDS = 1.0  # after a host-key or login failure: how often the files the login uses are looked at
# The console's pings keep its agents' watchdogs fed: an agent that heard nothing for WATCHDOG_PINGS pings (30 s,
# as long as the console waits for a silent agent, SILENCE_TIMEOUT) exits, so one orphaned by a connection lost
# without a word goes away. At 1000 hosts the pings were the link worker's largest Python cost (200 packets a
# second at 5 s, each through asyncssh's send path and the host's receive path), for a watchdog of 15 s.
PING_EVERY = 10.0
WATCHDOG_PINGS = 3
BAD_FRAME_REPORT_EVERY = 60.0  # seconds between "bad frame" errors of one instance


class LinkLost(LinkError):
    """The request was sent, then the link dropped (or the answer was late): the action may have run."""


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


class Session(Protocol):
    """What a link reads frames from and writes requests to."""

    async def readline(self) -> bytes: ...
    def write(self, data: bytes) -> None: ...
    def stderr_tail(self) -> str: ...
    async def close(self) -> None: ...


class SessionFailed(Exception):
    """The session could not start or ended; ``status`` says how, for the UI."""

    def __init__(self, status: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


class AgentLink(StatusRules):
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
        self.slow_backoff = Backoff(base=120.0, cap=900.0)  # for PERMANENT failures: minutes
        self.status, self.detail = "idle", ""
        self.attempts = 0  # connection attempts that ended (connected or failed)
        self.next_retry_at: float | None = None  # time.time() of the next attempt while failing
        self._wake = asyncio.Event()
        self.outcome_event = asyncio.Event()  # set once an attempt has ended: connected or failed
        self._session: Session | None = None
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._connected_at: float | None = None  # monotonic time of the current session's hello
        self.connected_event = asyncio.Event()
        self.last_frame_at = 0.0
        self.silence_timeout = SILENCE_TIMEOUT  # no line for this long: the session is dead (one watchdog)
        self._last_line_at = 0.0  # monotonic time of the last line read (the watchdog's only per-line cost)
        self._watchdog: asyncio.TimerHandle | None = None
        self.console_id = secrets.token_hex(6)  # this link's agents: a new one replaces the old (pidlock)
        self.failed_sessions = 0  # sessions that ended within STABLE_AFTER of their hello, in a row
        self.flood = FloodGuard()
        self.bad_frames = 0  # dropped since the last report
        self._bad_reported_at = -BAD_FRAME_REPORT_EVERY

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

    def retry_now(self) -> None:
        """Try again at once (after a reload or an accepted host key) and reset the backoff."""
        self.backoff.reset()
        self.slow_backoff.reset()
        self._wake.set()

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
            answer = await asyncio.wait_for(future, timeout)
        except TimeoutError:
            raise LinkLost(f"{self.name}: no answer to {op!r} within {timeout:g} s") from None
        finally:
            self._pending.pop(req_id, None)
        if answer.get("ok"):
            try:
                answer["data"] = check_result(op, answer.get("data"))
            except BadFrame as exc:
                self._bad_frame(exc)
                raise LinkError(f"{self.name}: bad answer to {op}: {exc}") from None
        return answer

    async def run_command(self, command: str, timeout: float = 20.0) -> CommandResult:
        raise NotImplementedError

    # -- loop -----------------------------------------------------------------------------------
    async def _run(self) -> None:
        while not self._stopping:
            if self.status not in FAILURES:  # a retry keeps showing the last failure until it knows better
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
            connected_at = self._connected_at
            self._connected_at = None
            if connected_at is not None:
                pace.drop_record().add()  # many of these at once: a blip; the retries are spread
            if connected_at is not None and time.monotonic() - connected_at >= STABLE_AFTER:
                self.backoff.reset()  # a session that lasted: the next attempt comes soon
                self.failed_sessions = 0
            elif connected_at is not None:
                self.failed_sessions += 1
            delay = (self.slow_backoff if status in PERMANENT else self.backoff).next_delay()
            self.next_retry_at = time.time() + delay
            self.attempts += 1
            self._set_status(status, detail)
            self._wake.clear()
            if status in PERMANENT:  # minutes, unless the operator fixes it on disk meanwhile (a new known_hosts)
                await self._pause_watching_files(delay)
            elif not await self._pause(delay) and connected_at is not None:
                # The first retry after a drop: spread by the size of the storm, judged after the base
                # delay, when the rest of a blip's drops are counted too (a lone drop adds ~5 ms).
                extra = pace.drop_record().spread()
                if extra > 0:
                    self.next_retry_at = time.time() + extra
                    await self._pause(extra)
            self.next_retry_at = None

    def _ssh_files(self) -> tuple[tuple[str, int, int] | None, ...]:
        """The known_hosts file and key this instance's login uses: (path, mtime, size) each, None when absent."""
        home = os.path.expanduser("~")
        paths = [self.instance.known_hosts or os.path.join(home, ".ssh", "known_hosts"), self.instance.key or ""]
        out: list[tuple[str, int, int] | None] = []
        for path in paths:
            try:
                st = os.stat(os.path.expanduser(path)) if path else None
            except OSError:
                st = None
            out.append((path, st.st_mtime_ns, st.st_size) if st is not None else None)
        return tuple(out)

    async def _pause_watching_files(self, delay: float) -> None:
        """The long wait after a failure that waiting does not fix (a host key, a login), cut short when the
        files the login uses change: the operator created known_hosts or fixed the key, so try at once."""
        before = self._ssh_files()
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline:
            if await self._pause(min(FILE_CHECK_SECONDS, max(0.0, deadline - time.monotonic()))):
                return
            if self._ssh_files() != before:
                self.next_retry_at = time.time()
                return

    async def _pause(self, delay: float) -> bool:
        """Wait ``delay`` seconds, or less when ``retry_now()`` wakes the link: True when woken."""
        try:
            await asyncio.wait_for(self._wake.wait(), delay)
        except TimeoutError:
            return False
        return True

    async def _serve_session(self) -> None:
        self._session = await self._open_session()
        hello = await self._read_hello()
        if hello.get("v") != PROTOCOL_VERSION:
            raise SessionFailed("agent_failed", f"agent speaks protocol {hello.get('v')}, need {PROTOCOL_VERSION}")
        self._deliver(hello)
        self.slow_backoff.reset()  # the fast backoff is reset once the session has lasted (STABLE_AFTER)
        self._connected_at = time.monotonic()
        self.attempts += 1
        detail = getattr(self._session, "status_detail", None)  # an agentless session says why it is one
        self._set_status("connected", detail or f"agent {hello.get('agent_version')} pid {hello.get('pid')}")
        session, pings = self._session, pinger(PING_EVERY)
        pings.add(session)
        self._last_line_at = time.monotonic()
        try:
            async with asyncio.timeout(None) as guard:
                self._arm_watchdog(guard)
                await self._read_frames()
        except TimeoutError:
            if not guard.expired():
                raise
            raise SessionFailed("unreachable", f"agent silent for {self.silence_timeout:.0f} s") from None
        finally:
            pings.discard(session)
            if self._watchdog is not None:
                self._watchdog.cancel()
                self._watchdog = None

    async def _read_hello(self) -> dict[str, Any]:
        """The agent's first frame. Lines that are not frames before it are a login shell's (a banner or an
        ``echo`` in ``~/.bashrc``, which sshd runs before the agent): skipped, up to ``MAX_LOGIN_LINES``."""
        assert self._session is not None
        deadline = time.monotonic() + HELLO_TIMEOUT
        skipped: list[bytes] = []
        while True:
            line = await self._read_line(max(0.0, deadline - time.monotonic()), "no hello from the agent")
            try:
                frame: dict[str, Any] | None = decode(line)
            except BadFrame:
                frame = None
            if frame is not None and frame.get("type") == "hello":
                return frame
            if frame is not None or len(skipped) >= MAX_LOGIN_LINES:
                said = self._session.stderr_tail() or clean_line(skipped[-1].rstrip(b"\n"), 200)
                raise SessionFailed("agent_failed", "the agent did not say hello: " + said)
            skipped.append(line)

    async def _read_frames(self) -> None:
        """The steady state: each line read, checked, delivered; silence is the watchdog's business."""
        while not self._stopping:  # also ends a session whose cancellation got lost (ready line)
            line = await self._read_line(None, "")
            self._last_line_at = time.monotonic()
            pause = self.flood.read(len(line))
            frame = self._parse(line)
            if frame is not None and self.flood.admit(frame):
                self._deliver(frame)
            report = self.flood.report()
            if report is not None:
                self._on_frame(self.name, {"type": "error", "ts": time.time(), "message": report})
            if pause > 0:  # flow control: stop reading; the channel window closes and the host waits
                await asyncio.sleep(min(pause, 1.0))

    def _arm_watchdog(self, guard: asyncio.Timeout) -> None:
        """One timer per link instead of one per line: it fires when the session could first have been
        silent for ``silence_timeout``; if a line came since, it re-arms for the new deadline (so at most once
        per ``silence_timeout`` while frames flow), else it expires ``guard``, which cancels the read."""
        loop = asyncio.get_running_loop()

        def check() -> None:
            now = time.monotonic()
            if now - self._last_line_at >= self.silence_timeout:
                self._watchdog = None
                guard.reschedule(loop.time())
            else:
                self._watchdog = loop.call_at(loop.time() + (self._last_line_at + self.silence_timeout - now), check)

        self._watchdog = loop.call_at(loop.time() + self.silence_timeout, check)

    async def _read_line(self, timeout: float | None, what: str) -> bytes:
        """One line; ``timeout`` (the hello's) fails with ``what``; None waits (the watchdog guards it)."""
        assert self._session is not None
        try:
            if timeout is None:
                line = await self._session.readline()
            else:
                line = await asyncio.wait_for(self._session.readline(), timeout)
        except TimeoutError:
            raise SessionFailed("unreachable", what) from None
        except (asyncssh.Error, OSError, asyncio.IncompleteReadError, ValueError) as exc:
            raise SessionFailed("unreachable", lost_reason(exc)) from None
        if not line:
            tail = self._session.stderr_tail()
            raise SessionFailed("agent_failed" if tail else "unreachable", tail or "connection closed")
        return line

    def _parse(self, line: bytes) -> dict[str, Any] | None:
        try:
            return decode(line)
        except BadFrame as exc:
            self._bad_frame(exc)
            return None

    def _bad_frame(self, exc: Exception) -> None:
        """One error on the instance for what did not fit, then at most one a minute (with a count)."""
        self.bad_frames += 1
        now = time.monotonic()
        if now - self._bad_reported_at < BAD_FRAME_REPORT_EVERY:
            return
        more = f" ({self.bad_frames - 1} more dropped since the last report)" if self.bad_frames > 1 else ""
        self.bad_frames, self._bad_reported_at = 0, now
        self._on_frame(self.name, {"type": "error", "ts": time.time(), "message": f"bad frame dropped: {exc}{more}"})

    def _deliver(self, frame: dict[str, Any]) -> None:
        self.last_frame_at = time.time()
        if frame["type"] == "result":
            if frame["id"] == 0:
                return  # the answer to a ping or stop: nothing waits for it
            future = self._pending.get(frame["id"])
            if future is not None and not future.done():
                future.set_result(frame)
        self._on_frame(self.name, frame)

    async def _close_session(self) -> None:
        session, self._session = self._session, None
        for future in self._pending.values():
            if not future.done():
                future.set_exception(LinkLost(f"{self.name}: connection lost"))
        if session is not None:
            with contextlib.suppress(Exception):
                await session.close()

    async def _open_session(self) -> Session:
        raise NotImplementedError


def config_line(config: dict[str, Any]) -> bytes:
    """The agent config as the first stdin line (``--config-stdin``): never in argv, where any user on the
    host reads it (``/proc/PID/cmdline``: ``benchmark.env`` may hold tokens)."""
    return (json.dumps(config, separators=(",", ":")) + "\n").encode("utf-8")


class StderrTail:
    """The last few non-empty stderr lines of an agent, for the status detail when it dies."""

    def __init__(self) -> None:
        self.lines: deque[str] = deque(maxlen=5)

    def add(self, data: bytes) -> None:
        for line in data.decode("utf-8", "replace").splitlines():
            if line.strip():
                self.lines.append(line.strip())

    def text(self) -> str:
        return " | ".join(self.lines)
