"""Agentless logs: the configured ``logs`` followed with one exec a poll, as the agent's ``log`` frames.

Only the configured ``logs`` (no ``watch_dirs`` discovery). One exec a poll stats every file and sends the bytes
appended since the last poll (``tail -c +OFFSET | head -c N``, at most ``LOG_READ_MAX`` a file and poll);
backlog on start (the newline count up to the size, and the last bytes); ``created``/``missing``/``rotated``/
``truncated``, ``\r`` collapse, caps and partial lines as the agent does them (``wire/loglines.py``), except
that a rotated file's last unread lines are not drained.
"""

from __future__ import annotations

import posixpath
import shlex
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from console.agent.wire.frames import log_frame
from console.agent.wire.loglines import BATCH_LINES, backlog_frame, batch_frames, clean_line, keep_partial
from console.agentless.host import MARK, section_fn, sections

LOG_READ_MAX = 1 << 20  # bytes read per file and poll (the rest comes with the next polls)
LOG_TAIL_BYTES = 512 * 1024  # read from the end of an existing file for its backlog

class _RemoteFile:
    def __init__(self, path: str) -> None:
        self.path = path
        self.opened = False  # found at least once since the start or the last reset
        self.ident = ""  # "dev:inode" from stat, "-" when stat is not there
        self.offset = 0
        self.line_no = 0
        self.partial = b""
        self.partial_since = 0.0
        self.partial_sent: str | None = None
        self.partial_sent_at = 0.0
        self.pending_event: str | None = None
        self.missing_reported = False

    def reset(self) -> None:
        self.opened = False
        self.ident = ""
        self.offset = self.line_no = 0
        self.partial = b""
        self.partial_since = 0.0
        self.partial_sent = None


@dataclass
class _Listing:
    """What one poll's output says about one file: ``st`` (``dev:inode size``, ``- size`` or ``missing``), and
    either the backlog (``count`` of newlines up to the size, ``tail``: (offset, bytes)) or ``data`` (offset, bytes)."""

    st: list[str] | None = None
    count: int | None = None
    tail: tuple[int, bytes] | None = None
    data: tuple[int, bytes] | None = None


class RemoteLogs:
    """The configured logs, followed with one exec a poll: ``command(nonce)`` then ``parse(output, nonce, now)``."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self.max_chars = int(config.get("max_line_chars", 4096))
        self.backlog_lines = int(config.get("backlog_lines", 200))
        paths = config.get("logs") or []
        if isinstance(paths, str):
            paths = [paths]
        self.files = [_RemoteFile(posixpath.normpath(str(p))) for p in dict.fromkeys(paths)]
        self._started = False

    def command(self, nonce: str) -> str | None:
        if not self.files:
            return None
        parts = [f": {MARK}; ", section_fn(nonce)]
        for i, f in enumerate(self.files):
            q = shlex.quote(f.path)
            backlog = not f.opened and f.pending_event is None
            parts.append(
                f"if s=$(stat -L -c '%d:%i %s' -- {q} 2>/dev/null); then :; "
                f"elif [ -r {q} ]; then s=\"- $(wc -c < {q})\"; else s=missing; fi; "
                f"S st {i} $s; set -- $s; "
            )
            if backlog:  # newlines up to the size, then the last bytes before it
                parts.append(
                    'if [ "$1" != missing ]; then '
                    f"S count {i} $(head -c \"$2\" -- {q} | wc -l); "
                    f"t=$2; [ \"$t\" -gt {LOG_TAIL_BYTES} ] && t={LOG_TAIL_BYTES}; "
                    f"S tail {i} $(($2 - t)); "
                    f"[ \"$t\" -gt 0 ] && tail -c +$(($2 - t + 1)) -- {q} | head -c \"$t\"; "
                    "fi; "
                )
            else:  # from the offset when it is the same file and not shorter, else from the start
                ident = shlex.quote(f.ident or "none")
                parts.append(
                    'if [ "$1" != missing ]; then '
                    f'if [ "$1" = {ident} ] && [ "$2" -ge {f.offset} ]; then o={f.offset}; else o=0; fi; '
                    f"n=$(($2 - o)); [ \"$n\" -gt {LOG_READ_MAX} ] && n={LOG_READ_MAX}; "
                    f"S data {i} $o; [ \"$n\" -gt 0 ] && tail -c +$((o + 1)) -- {q} | head -c \"$n\"; "
                    "fi; "
                )
        parts.append("S end; exit 0")
        return "".join(parts)

    def parse(self, output: bytes, nonce: str, now: float) -> list[dict[str, Any]]:
        first = not self._started
        self._started = True
        found: dict[int, _Listing] = {}
        for kind, args, payload in sections(output, nonce):
            if not args or not args[0].isdigit() or int(args[0]) >= len(self.files):
                continue
            listing = found.setdefault(int(args[0]), _Listing())
            if kind == "st":
                listing.st = args[1:]
            elif kind == "count" and len(args) > 1 and args[1].isdigit():
                listing.count = int(args[1])
            elif kind == "tail" and len(args) > 1 and args[1].isdigit():
                listing.tail = (int(args[1]), payload)
            elif kind == "data" and len(args) > 1 and args[1].isdigit():
                listing.data = (int(args[1]), payload)
        frames: list[dict[str, Any]] = []
        for i, f in enumerate(self.files):
            got = found.get(i)
            if got is None or not got.st:
                continue
            frames.extend(self._file(f, got, got.st, now, first))
        return frames

    def _file(self, f: _RemoteFile, listing: _Listing, st: list[str], now: float, first: bool) -> list[dict[str, Any]]:
        if st[0] == "missing" or len(st) < 2 or not st[1].isdigit():
            frames = []
            if f.opened:
                f.reset()
                frames.append(log_frame(f, [], 1, event="missing"))
            elif first and not f.missing_reported:
                frames.append(log_frame(f, [], 1, event="missing"))
            f.missing_reported = True
            f.pending_event = "created"
            return frames
        ident, size = st[0], int(st[1])
        if listing.count is not None and listing.tail is not None:
            tail_at, tail = listing.tail
            return [self._backlog(f, ident, size, listing.count, tail_at, tail, now)]
        if listing.data is None:
            return []  # a stale command (state changed in between): the next poll reads it
        start, data = listing.data
        event = f.pending_event
        if f.opened and start == 0 and f.offset > 0:
            event = "rotated" if ident != f.ident and "-" not in (ident, f.ident) else "truncated"
            f.reset()
        elif f.opened and start == 0 and ident != f.ident and "-" not in (ident, f.ident):
            event = "rotated"
            f.reset()
        f.opened, f.ident, f.pending_event, f.missing_reported = True, ident, None, False
        if start != f.offset:
            return []  # not what this state asked for
        return self._read(f, data, now, event)

    def _keep_partial(self, f: _RemoteFile, data: bytes, now: float) -> None:
        keep_partial(f, data, now, self.max_chars)

    def _read(self, f: _RemoteFile, chunk: bytes, now: float, event: str | None) -> list[dict[str, Any]]:
        kept: deque[bytes] = deque(maxlen=BATCH_LINES)
        start_no = f.line_no + 1
        total = 0
        f.offset += len(chunk)
        last_nl = chunk.rfind(b"\n")
        if last_nl < 0:
            if chunk:
                self._keep_partial(f, f.partial + chunk, now)
        else:
            pieces = (f.partial + chunk[: last_nl + 1]).split(b"\n")
            pieces.pop()
            total = len(pieces)
            kept.extend(pieces[-BATCH_LINES:])
            f.partial = b""
            self._keep_partial(f, chunk[last_nl + 1 :], now)
        return batch_frames(f, kept, total, start_no, now, self.max_chars, event)

    def _backlog(self, f: _RemoteFile, ident: str, size: int, count: int, tail_at: int, tail: bytes,
                 now: float) -> dict[str, Any]:
        f.opened, f.ident, f.offset, f.line_no = True, ident, size, count
        f.pending_event, f.missing_reported = None, False
        tail = tail[: max(0, size - tail_at)]
        last_nl = tail.rfind(b"\n")
        self._keep_partial(f, tail[last_nl + 1 :], now)
        pieces = tail[: last_nl + 1].split(b"\n")[:-1] if last_nl >= 0 else []
        if tail_at > 0 and pieces:
            pieces = pieces[1:]  # the first piece may be the end of a longer line
        keep = pieces[-self.backlog_lines :] if self.backlog_lines > 0 else []
        lines = [clean_line(raw, self.max_chars) for raw in keep]
        first_line = count - len(lines) + 1
        return backlog_frame(f, lines, first_line, self.max_chars)
