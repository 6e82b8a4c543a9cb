"""Log follower with ``tail -F`` semantics.

Follows the configured ``logs`` plus every ``*.log`` in ``watch_dirs`` modified within
``discover_max_age`` (directories rescanned every ``DISCOVER_EVERY`` seconds, not every poll).  A file found
there must be a regular file, not a symlink (a ``planted.log -> /etc/shadow`` is never read), at the top of its
watch dir (in its subdirectories too for a ``DIR/**`` entry), and is opened with ``O_NOFOLLOW``; a configured
log may be a symlink (the operator named it).  A poll
costs one ``stat`` per followed file; a file is read only when its size or inode changed (or a partial
line is waiting).  Per file and poll it sends at most one ``log`` frame with the new complete lines:

- follows by name: a new inode is ``rotated`` (the old file is drained first), a file shorter than
  what was read is ``truncated``, a file that appears is ``created``, one that disappears ``missing``;
  both restart from the first line;
- ``\\r``-overwritten progress (curl ``-#``) keeps only the text after the last ``\\r`` of a line;
  a line still being written (no newline) is held, and after ``PARTIAL_AFTER`` seconds sent as its
  current state with ``partial: true`` (it comes again, same number, when it changes or completes);
- lines are decoded as UTF-8 with replacement and capped at ``max_line_chars`` (ending with "…");
- a burst keeps the newest ``BATCH_LINES`` lines / ``BATCH_CHARS`` characters, preceded by one
  ``[... N lines skipped ...]`` marker line (numbered as the last skipped line; ``skipped: N``);
- on start each existing file sends its last ``backlog_lines`` lines (``backlog: true``), read
  backwards from the end; numbering the lines counts newlines in 1 MiB blocks (never the whole file
  in memory);
- at detail level "summary" (op ``detail``: the console does not show this host) the agent keeps polling
  but ``hold``s the frames instead of sending them: merged per file, at most ``backlog_lines`` lines per
  file (older ones become the ``[... N lines skipped ...]`` marker); ``release()`` hands them out when
  the level goes back to "full", so the console gets what it missed, in order, numbered as ever.

The rules for lines, partial lines and batches are ``wire/loglines.py``'s, shared with agentless mode.
"""

from __future__ import annotations

import os
import stat
import time
from collections import deque
from typing import Any, Deque, Dict, List, Optional, Tuple

from ..wire.config import as_list, watch_dirs
from ..wire.frames import log_frame
from ..wire.loglines import BATCH_LINES, backlog_frame, batch_frames, clean_line, hold_frames, keep_partial
from .logread import watched_entries

DISCOVER_EVERY = 5.0
MAX_DISCOVERED = 32
MAX_SCAN = 5000  # directory entries looked at per scan
NOFOLLOW = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
MISSING_FORGET = 60.0  # a discovered file missing this long is no longer followed
READ_CHUNK = 1 << 20
MAX_READ_PER_POLL = 8 << 20
TAIL_MAX_BYTES = 2 << 20


class _File:
    def __init__(self, path: str, explicit: bool) -> None:
        self.path = path
        self.explicit = explicit
        self.fd: Optional[int] = None
        self.ident: Tuple[int, int] = (0, 0)
        self.offset = 0  # bytes read so far
        self.complete_offset = 0  # end of the last complete line
        self.line_no = 0  # complete lines before complete_offset
        self.partial = b""  # the line being written (collapsed at its last \r)
        self.partial_since = 0.0
        self.partial_sent: Optional[str] = None
        self.partial_sent_at = 0.0
        self.pending_event: Optional[str] = None
        self.missing_since: Optional[float] = None

    def close(self) -> None:
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None


class LogFollower:
    """``poll()`` -> list of ``log`` frame dicts; ``backlog(lines)`` re-sends the tails."""

    def __init__(self, config: Dict[str, Any]) -> None:
        self.config = config
        self.max_chars = int(config.get("max_line_chars", 4096))
        self.backlog_lines = int(config.get("backlog_lines", 200))
        self.max_age = float(config.get("discover_max_age", 6 * 3600.0))
        self.watch_dirs = watch_dirs(config)
        self.files: Dict[str, _File] = {}
        for path in as_list(config.get("logs")):
            path = os.path.abspath(path)
            self.files[path] = _File(path, explicit=True)
        self._started = False
        self._next_discover = 0.0
        self._seen_names: Optional[set] = None  # *.log paths present at the previous scan
        self._held: Dict[str, List[Dict[str, Any]]] = {}  # detail "summary": frames not sent yet, per file

    # -- discovery ------------------------------------------------------------------------------
    def _discover(self, now: float) -> None:
        self._next_discover = now + DISCOVER_EVERY
        wall = time.time()
        seen = set()
        fresh: List[Tuple[float, str]] = []
        for path, mtime in _found_logs(self.watch_dirs):
            seen.add(path)
            if path not in self.files and wall - mtime <= self.max_age:
                fresh.append((mtime, path))
        discovered = sum(1 for f in self.files.values() if not f.explicit)
        for _mtime, path in sorted(fresh, reverse=True)[: max(0, MAX_DISCOVERED - discovered)]:
            f = _File(path, explicit=False)
            if self._seen_names is not None and path not in self._seen_names:
                f.pending_event = "created"  # appeared since the last scan: read it from the start
            self.files[path] = f
        self._seen_names = seen

    # -- polling --------------------------------------------------------------------------------
    def poll(self) -> List[Dict[str, Any]]:
        now = time.monotonic()
        if now >= self._next_discover:
            self._discover(now)
        first = not self._started
        self._started = True
        frames: List[Dict[str, Any]] = []
        for path in list(self.files):
            f = self.files[path]
            frames.extend(self._poll_file(f, now, first))
            gone_for = None if f.missing_since is None else now - f.missing_since
            if f.fd is None and not f.explicit and gone_for is not None and gone_for > MISSING_FORGET:
                del self.files[path]
        return frames

    def _poll_file(self, f: _File, now: float, first: bool) -> List[Dict[str, Any]]:
        frames: List[Dict[str, Any]] = []
        st = _stat(f)
        if st is None:
            if f.fd is not None:
                frames.extend(self._read_new(f, now, None))  # drain what the old file still had
                f.close()
                self._reset(f)
                frames.append(log_frame(f, [], 1, event="missing"))
                f.missing_since = now
            elif f.missing_since is None:
                f.missing_since = now
                if first and f.explicit:
                    frames.append(log_frame(f, [], 1, event="missing"))
            f.pending_event = "created"
            return frames
        ident = (st.st_dev, st.st_ino)
        if f.fd is not None and ident == f.ident and st.st_size == f.offset and not f.partial:
            return frames  # the common case, nothing appended: the stat was enough
        if f.fd is not None and ident != f.ident:
            frames.extend(self._read_new(f, now, None))
            f.close()
            self._reset(f)
            f.pending_event = "rotated"
        if f.fd is None:
            try:
                f.fd = os.open(f.path, os.O_RDONLY if f.explicit else NOFOLLOW)
                st = os.fstat(f.fd)
            except OSError:
                f.close()
                return frames
            if not f.explicit and not stat.S_ISREG(st.st_mode):
                f.close()
                return frames
            f.ident = (st.st_dev, st.st_ino)
            f.missing_since = None
            if f.pending_event is None:  # there when we found it: send its tail, follow from the end
                frames.append(self._open_at_end(f, st.st_size))
                return frames
        elif st.st_size < f.offset:
            self._reset(f)
            f.pending_event = "truncated"
        frames.extend(self._read_new(f, now, f.pending_event))
        f.pending_event = None
        return frames

    @staticmethod
    def _reset(f: _File) -> None:
        f.offset = f.complete_offset = f.line_no = 0
        f.partial = b""
        f.partial_since = 0.0
        f.partial_sent = None

    def _keep_partial(self, f: _File, data: bytes, now: float) -> None:
        keep_partial(f, data, now, self.max_chars)

    def _read_new(self, f: _File, now: float, event: Optional[str]) -> List[Dict[str, Any]]:
        """Read what was appended since the last poll; at most one frame."""
        if f.fd is None:
            return []
        kept: Deque[bytes] = deque(maxlen=BATCH_LINES)
        start_no = f.line_no + 1
        total = 0
        budget = MAX_READ_PER_POLL
        while budget > 0:
            try:
                chunk = os.pread(f.fd, min(READ_CHUNK, budget), f.offset)
            except OSError:
                break
            if not chunk:
                break
            budget -= len(chunk)
            f.offset += len(chunk)
            last_nl = chunk.rfind(b"\n")
            if last_nl < 0:
                self._keep_partial(f, f.partial + chunk, now)
                continue
            pieces = (f.partial + chunk[: last_nl + 1]).split(b"\n")
            pieces.pop()  # the empty piece after the final newline
            total += len(pieces)
            kept.extend(pieces[-BATCH_LINES:])
            f.complete_offset = f.offset - (len(chunk) - last_nl - 1)
            f.partial = b""
            self._keep_partial(f, chunk[last_nl + 1 :], now)
        return batch_frames(f, kept, total, start_no, now, self.max_chars, event)

    # -- backlog --------------------------------------------------------------------------------
    def _open_at_end(self, f: _File, size: int) -> Dict[str, Any]:
        """Follow from the end of an existing file; the frame carrying its last lines."""
        assert f.fd is not None
        count = 0
        last_nl_end = 0
        pos = 0
        while pos < size:
            try:
                chunk = os.pread(f.fd, min(READ_CHUNK, size - pos), pos)
            except OSError:
                break
            if not chunk:
                break
            count += chunk.count(b"\n")
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                last_nl_end = pos + nl + 1
            pos += len(chunk)
        f.offset = pos
        f.complete_offset = last_nl_end
        f.line_no = count
        tail = b""
        if pos > last_nl_end:
            try:
                tail = os.pread(f.fd, min(pos - last_nl_end, self.max_chars * 4 + 16), last_nl_end)
            except OSError:
                tail = b""
        now = time.monotonic()
        self._keep_partial(f, tail, now)
        return self._backlog_frame(f, self.backlog_lines)

    def _tail_lines(self, f: _File, n: int) -> List[str]:
        """The last ``n`` complete lines before ``complete_offset``, read backwards."""
        if f.fd is None or n <= 0 or f.complete_offset == 0:
            return []
        end = f.complete_offset
        buf = b""
        pos = end
        while pos > 0 and buf.count(b"\n") <= n and len(buf) < TAIL_MAX_BYTES:
            step = min(64 * 1024, pos)
            pos -= step
            try:
                buf = os.pread(f.fd, step, pos) + buf
            except OSError:
                return []
        pieces = buf.split(b"\n")
        pieces.pop()  # after the final newline
        if pos > 0:
            pieces = pieces[1:]  # the first piece may be the end of a longer line
        return [clean_line(raw, self.max_chars) for raw in pieces[-n:]]

    def _backlog_frame(self, f: _File, n: int) -> Dict[str, Any]:
        lines = self._tail_lines(f, n)
        first_line = f.line_no - len(lines) + 1
        return backlog_frame(f, lines, first_line, self.max_chars)

    def backlog(self, lines: int) -> List[Dict[str, Any]]:
        """The last ``lines`` lines of every followed file that is open (``backlog: true``)."""
        return [self._backlog_frame(f, int(lines)) for f in self.files.values() if f.fd is not None]

    def close(self) -> None:
        for f in self.files.values():
            f.close()

    # -- detail level "summary" -----------------------------------------------------------------
    def hold(self, frames: List[Dict[str, Any]]) -> None:
        """Keep ``frames`` (what ``poll`` gave) instead of sending them (``hold_frames``)."""
        hold_frames(self._held, frames, self.backlog_lines)

    def release(self) -> List[Dict[str, Any]]:
        """The held frames, in order (back at detail "full"); nothing is held after."""
        out = [frame for held in self._held.values() for frame in held]
        self._held = {}
        return out

    @property
    def held_lines(self) -> int:
        return sum(len(f["lines"]) for held in self._held.values() for f in held)


def _stat(f: _File) -> Optional[os.stat_result]:
    """The file's stat; None when it is gone, or, found in a watch dir, is no longer a regular file (a symlink
    or a FIFO put in its place counts as missing: never followed)."""
    try:
        st = os.stat(f.path) if f.explicit else os.lstat(f.path)
    except OSError:
        return None
    return st if f.explicit or stat.S_ISREG(st.st_mode) else None


def _found_logs(dirs: List[Tuple[str, bool]]) -> List[Tuple[str, float]]:
    """``(path, mtime)`` of the regular ``*.log`` files the watch dirs hold (``logread.watched_entries``)."""
    out: List[Tuple[str, float]] = []
    for entry in watched_entries(dirs, MAX_SCAN):
        if entry.name.endswith(".log"):
            try:
                out.append((entry.path, entry.stat(follow_symlinks=False).st_mtime))
            except OSError:
                continue
    return out
