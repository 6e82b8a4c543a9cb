"""The agentless session: polls a python-less host over exec channels of the link's SSH connection.

It has the link's ``Session`` interface (``readline``/``write``/``close``): the link reads the agent's frames
from it as JSON lines and writes requests to it, so the state and UI take no special path. The commands and
the parsing live beside it (``host``, ``gpu``, ``procs``, ``logs``); this module does the I/O and the timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import asyncssh

from console.agent.wire import config as agent_config
from console.agent.wire.protocol import PROTOCOL_VERSION, ProcRecord, ProtocolError, decode_request, encode
from console.agent.wire.wording import lost_reason
from console.agentless.gpu import GPU_TIMEOUT, GpuFrames, gpu_command, parse_gpu_output
from console.agentless.host import (
    AGENT_VERSION,
    FACTS_COMMAND,
    NEEDS_PYTHON,
    OPS,
    POLL_TIMEOUT,
    HostFacts,
    HostProbe,
    agentless_reason,
    new_nonce,
    parse_facts,
    poll_interval,
)
from console.agentless.logs import RemoteLogs
from console.agentless.procs import ProcFrames, parse_proc_snapshot, parse_ps_snapshot, procs_command
from console.inventory import Instance
from console.link.base import SessionFailed
from console.link.exec import exec_command, failure_reason


class AgentlessSession:
    """Polls a python-less host over exec channels and hands out the agent's frames as JSON lines.

    Every ``interval`` (at least ``MIN_INTERVAL`` s): nvidia-smi (its own timeout; a hang is a GPU
    error, retried after a while), the process table and the configured logs, concurrently, then one
    ``heartbeat``. A process or log poll that fails or times out ends the session like a dead agent, and the
    link reconnects with backoff. Requests other than ping/full_procs/stop are answered at once with
    ``ok: false`` and ``NEEDS_PYTHON``.
    """

    def __init__(self, conn: asyncssh.SSHClientConnection, instance: Instance, probe: HostProbe,
                 reason: str | None = None, lifetime: float | None = None) -> None:
        """``reason``: why the agent cannot run although python can (its upload failed: a full disk); such a
        session ends after ``lifetime`` s so that the link tries the agent again."""
        self.conn = conn
        self.reason = reason = reason or agentless_reason(probe, instance.python)
        self.refusal = NEEDS_PYTHON if probe.python != "ok" else f"needs the agent on the host (agentless: {reason})"
        self.lifetime = lifetime
        self.host = probe.host or instance.host
        self.python = probe.python_version
        self.config = agent_config.load(agent_config.encode(instance.agent_config()))
        self.interval = poll_interval(self.config)
        self.status_detail = f"agentless: {reason} (nvidia-smi and ps over SSH)"
        self.facts = HostFacts()
        self.gpu = GpuFrames()
        self._minors_asked = False
        self.procs = ProcFrames()
        self.logs = RemoteLogs(self.config)
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
                self._send("result", id=req["id"], ok=False, error=self.refusal)

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
            self._queue.put_nowait(SessionFailed("unreachable", lost_reason(failure_reason(exc))))
        except Exception as exc:  # a bug: end the session (the link reconnects), never the console
            self._queue.put_nowait(SessionFailed("agent_failed", f"agentless poller: {type(exc).__name__}: {exc}"))

    async def _poll(self, command: str, what: str) -> bytes:
        result = await exec_command(self.conn, command, POLL_TIMEOUT)
        if result.timed_out:
            raise SessionFailed("unreachable", f"agentless: {what} poll timed out after {POLL_TIMEOUT:g} s")
        if result.exit_status != 0:
            err = result.stderr.decode("utf-8", "replace").strip().splitlines()
            why = err[-1] if err else f"exit status {result.exit_status}"
            raise SessionFailed("agent_failed", f"agentless: {what} poll failed: {why}")
        return result.stdout

    async def _serve(self) -> None:
        facts = await self._poll(FACTS_COMMAND, "host")
        self.facts = parse_facts(facts.decode("utf-8", "replace"))
        if self.facts.have_proc:
            self.status_detail = f"agentless: {self.reason} (nvidia-smi and /proc over SSH)"
        first_gpu = await self._poll_gpu()
        self._send(
            "hello",
            v=PROTOCOL_VERSION,
            agent_version=AGENT_VERSION,
            host=self.host,
            pid=None,
            python=self.python,
            heartbeat_interval=max(self.interval, float(self.config.get("heartbeat_interval") or 5.0)),
            features={
                "agentless": True,
                "gpu": self.gpu.state,
                "psutil": False,
                "simulated_gpu": False,
                "ops": sorted(OPS),
                **self.gpu.features(),
            },
        )
        loop = asyncio.get_running_loop()
        seq = 0
        gpu_task: asyncio.Task[dict[str, Any] | None] | None = None
        gpu_frame = first_gpu  # read before the hello (its features say the GPU state)
        ends_at = None if self.lifetime is None else loop.time() + self.lifetime
        try:
            while True:
                started = loop.time()
                if ends_at is not None and started >= ends_at:
                    raise SessionFailed("connecting", f"trying the agent again ({self.reason})")
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
                clock, records = results[0]
                procs_frame = self.procs.frame(records, time.monotonic())
                if procs_frame is not None:
                    self._send("procs", ts=clock, **procs_frame)
                for frame in results[1]:
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
        nonce = new_nonce()
        gpu_config: Any = self.config.get("gpu") or {}
        dev_dir = gpu_config.get("dev_dir")  # None: /dev (tests point it elsewhere)
        ask_minors, self._minors_asked = not self._minors_asked, True  # nvidia-smi -q is slow: once a session
        result = await exec_command(self.conn, gpu_command(nonce, dev_dir, minors=ask_minors), GPU_TIMEOUT)
        now = time.monotonic()
        if result.timed_out:
            return self.gpu.timed_out(now, GPU_TIMEOUT)
        return self.gpu.feed(parse_gpu_output(result.stdout, nonce, dev_dir, self.gpu.minors), now)

    async def _poll_procs(self) -> tuple[float | None, dict[int, ProcRecord]]:
        nonce = new_nonce()
        facts = self.facts
        out = await self._poll(procs_command(nonce, facts.have_proc), "process")
        clock: float | None = None  # the host's clock (process start times are on it), for the frame's ts
        if facts.have_proc:
            uptime, rows = parse_proc_snapshot(out, nonce, facts)
            if uptime is not None and facts.btime > 0:
                clock = facts.btime + uptime
        else:
            clock, rows = parse_ps_snapshot(out, nonce)
            uptime = None
        if not rows:
            raise SessionFailed("agent_failed", "agentless: the host listed no processes")
        return clock, self.procs.records(uptime, rows, self.gpu.mem_by_pid, boot=facts.btime)

    async def _poll_logs(self) -> list[dict[str, Any]]:
        nonce = new_nonce()
        command = self.logs.command(nonce)
        if command is None:
            return []
        out = await self._poll(command, "log")
        return self.logs.parse(out, nonce, time.monotonic())
