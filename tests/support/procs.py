"""Processes a test starts for the console to see, stopped with their whole group when the test ends."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator


def pid_namespace_argv() -> list[str]:
    """``unshare`` for a new PID namespace with its own /proc, its processes killed with it (as an unprivileged
    user, in a user namespace of its own)."""
    argv = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
    if os.geteuid() != 0:
        argv[1:1] = ["--user", "--map-root-user"]
    return argv


@contextlib.asynccontextmanager
async def process_group(*argv: str) -> AsyncIterator[asyncio.subprocess.Process]:
    """``argv`` started in a session (and group) of its own; the group is killed and reaped on the way out."""
    proc = await asyncio.create_subprocess_exec(*argv, start_new_session=True)
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
