"""One agent per console link on a host: a new agent replaces the one its console started before.

When the console's side of a connection is lost without the host noticing (a NAT or port forwarder forgets
it), the old agent may still run when the console reconnects. Each agent started for a link holds an
``fcntl.flock`` on ``agent-<console id>.pid`` in its directory; the next one for the same link finds the
lock held, sends the holder SIGTERM (it finishes the request it is running, e.g. a restart, and exits),
waits for the lock, and SIGKILLs it after ``GRACE`` seconds. A dead agent's lock is free at once.

Every console link has its own id, so the files would pile up on a host (one per console start): an agent
removes its own file when it exits (``release``), and the first agent of a link sweeps the files of links gone
for a day (``sweep``). Both remove a file only while holding its lock; a waiter whose lock turns out to be on a
removed file opens the path again. The sweep also removes the agent bundles of other versions untouched for a
day (``agent-<hash>.pyz``: one per console version; a console that still uses one uploads it again).
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import signal
import time
from typing import Dict, Optional

GRACE = 30.0  # seconds an old agent has to finish what it runs after SIGTERM
STALE_AFTER = 86400.0  # an unlocked pid file untouched this long belongs to a link that is gone
_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_held: Dict[str, int] = {}  # path -> the locked fd this process holds


def take_over(directory: str, console_id: str, grace: float = GRACE) -> Optional[int]:
    """Hold the link's lock (replacing its old agent); returns the held fd (kept open while we live).

    None when the id or directory cannot be used (the agent runs anyway; nothing to replace then).
    """
    if not _ID.match(console_id):
        return None
    path = os.path.join(directory, "agent-%s.pid" % console_id)
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError:
            return None
        _lock_replacing(fd, grace)
        if _is_at(fd, path):
            break
        os.close(fd)  # the old agent removed the file as it left: lock the one at the path now
    os.ftruncate(fd, 0)
    os.pwrite(fd, ("%d\n" % os.getpid()).encode("ascii"), 0)
    _held[path] = fd
    return fd


def release() -> None:
    """Remove the pid files this process holds (at exit): the lock is held while the file goes."""
    for path, fd in list(_held.items()):
        if _is_at(fd, path):
            try:
                os.unlink(path)
            except OSError:
                pass
        os.close(fd)
        del _held[path]


def sweep(directory: str, now: Optional[float] = None, older_than: float = STALE_AFTER, keep: str = "") -> int:
    """Remove the pid files of links gone for ``older_than`` s (unlocked, untouched) and the bundles untouched as
    long but ``keep`` (this agent's); the number removed."""
    now = time.time() if now is None else now
    removed = 0
    try:
        names = [n for n in os.listdir(directory) if n.startswith("agent-")]
    except OSError:
        return 0
    for name in names:
        if name.endswith(".pyz") and name != keep:
            removed += _remove_if_older(os.path.join(directory, name), now - older_than)
    for name in (n for n in names if n.endswith(".pid")):
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            if now - os.fstat(fd).st_mtime >= older_than and _try_lock(fd) and _is_at(fd, path):
                os.unlink(path)
                removed += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


def _remove_if_older(path: str, cutoff: float) -> int:
    try:
        st = os.stat(path, follow_symlinks=False)
        if st.st_mtime < cutoff:
            os.unlink(path)
            return 1
    except OSError:
        pass
    return 0


def _lock_replacing(fd: int, grace: float) -> None:
    """Take ``fd``'s lock; its holder (an older agent of the link) gets SIGTERM, then SIGKILL after ``grace``."""
    if _try_lock(fd):
        return
    old = _read_pid(fd)
    if old is not None and old > 1 and old != os.getpid():
        _signal(old, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while not _try_lock(fd):
        if time.monotonic() >= deadline:
            if old is not None and old > 1 and old != os.getpid():
                _signal(old, signal.SIGKILL)
            fcntl.flock(fd, fcntl.LOCK_EX)
            return
        time.sleep(0.1)


def _is_at(fd: int, path: str) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        st, at = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (at.st_dev, at.st_ino)


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
