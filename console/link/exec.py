"""One command on its own exec channel of an SSH connection (custom probes, the agentless polls).

Kept apart from ``SshLink`` so that the agentless session (``console.agentless.session``) runs its polls
the same way without importing the link that starts it.
"""

from __future__ import annotations

import asyncio
import os
import shlex
from dataclasses import dataclass

import asyncssh


def failure_reason(exc: BaseException) -> str:
    """A short human reason for a connection failure ("Connection refused", "timed out", ...)."""
    if isinstance(exc, TimeoutError):
        return "connection timed out"
    errno_ = getattr(exc, "errno", None)
    if errno_:
        return os.strerror(errno_)
    return getattr(exc, "reason", None) or str(exc) or type(exc).__name__


@dataclass
class RawResult:
    """A command's exit status (None when it timed out) and output, as bytes."""

    exit_status: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool = False


async def exec_command(conn: asyncssh.SSHClientConnection, command: str, timeout: float) -> RawResult:
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
        return RawResult(None, b"", b"", timed_out=True)
    except (asyncssh.Error, OSError):
        process.close()
        raise
    out, err = result.stdout or b"", result.stderr or b""
    if isinstance(out, str):
        out = out.encode()
    if isinstance(err, str):
        err = err.encode()
    if result.exit_status == 124:  # killed by the remote timeout
        return RawResult(None, out, err, timed_out=True)
    return RawResult(result.exit_status, out, err)
