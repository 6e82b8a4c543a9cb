"""``LocalLink``: the agent on this machine, as a subprocess (``transport = "local"``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from pathlib import Path

from console.link.base import (
    MAX_LINE,
    PING_EVERY,
    WATCHDOG_PINGS,
    AgentLink,
    CommandResult,
    Session,
    SessionFailed,
    StderrTail,
    config_line,
)

REPO_ROOT = Path(__file__).resolve().parent.parent.parent  # where ``python -m console.agent`` finds the package


class _LocalSession:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.stderr = StderrTail()
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

    async def _open_session(self) -> Session:
        argv = [sys.executable, "-m", "console.agent", "--config-stdin", "--watchdog", str(PING_EVERY * WATCHDOG_PINGS)]
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                limit=MAX_LINE,
                cwd=str(REPO_ROOT),
            )
        except OSError as exc:
            raise SessionFailed("agent_failed", f"could not start the agent: {exc}") from None
        assert process.stdin is not None
        process.stdin.write(config_line(self.instance.agent_config()))  # never in argv (other users read it)
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
