"""One agent per console link on a host: a new agent replaces the one its console started before.

When the console's side of a connection is lost without the host noticing (a NAT or port forwarder forgets
it), the old agent may still run when the console reconnects. Each agent started for a link holds an
``fcntl.flock`` on ``agent-<console id>.pid`` in its directory; the next one for the same link finds the
lock held, sends the holder SIGTERM (it finishes the request it is running, e.g. a restart, and exits),
waits for the lock, and SIGKILLs it after ``GRACE`` seconds. A dead agent's lock is free at once.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import signal
import time
from typing import Optional

GRACE = 30.0  # seconds an old agent has to finish what it runs after SIGTERM
_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def take_over(directory: str, console_id: str, grace: float = GRACE) -> Optional[int]:
    """Hold the link's lock (replacing its old agent); returns the held fd (kept open while we live).

    None when the id or directory cannot be used (the agent runs anyway; nothing to replace then).
    """
    if not _ID.match(console_id):
        return None
    path = os.path.join(directory, "agent-%s.pid" % console_id)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError:
        return None
    if not _try_lock(fd):
        old = _read_pid(fd)
        if old is not None and old > 1 and old != os.getpid():
            _signal(old, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while not _try_lock(fd):
            if time.monotonic() >= deadline:
                if old is not None and old > 1 and old != os.getpid():
                    _signal(old, signal.SIGKILL)
                fcntl.flock(fd, fcntl.LOCK_EX)
                break
            time.sleep(0.1)
    os.ftruncate(fd, 0)
    os.pwrite(fd, ("%d\n" % os.getpid()).encode("ascii"), 0)
    return fd


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            return False
        raise


def _read_pid(fd: int) -> Optional[int]:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        return int(text) if text.isdigit() else None
    except OSError:
        return None


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass
