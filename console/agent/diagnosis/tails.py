"""Reading a log's tail for the diagnosis: ``\\r`` progress collapsed to its last state (the repaints kept apart
when asked), line numbers that match the file's newline-numbered lines, and progress-bar lines recognised."""

from __future__ import annotations

import errno
import os
import re
import stat
from typing import BinaryIO, Dict, List, Optional, Tuple

# -- progress bars ---------------------------------------------------------------------------------
_PCT = r"(\d{1,3}(?:\.\d+)?)\s?%"
# curl -# ("####   48.3%"), tqdm ("45%|####  | 463/1024"), wget ("45%[=====>   ] 463M"), curl's meter
# (" 45 1024M   45  463M    0     0  10.2M      0  0:01:40  0:00:45  0:00:55 10.3M").
_PROGRESS_RES = [
    re.compile(r"^[\s#=>.\-*]*?[#=>*]*\s*" + _PCT + r"\s*$"),
    re.compile(r"^\s*(?:[^|]{0,80}:\s*)?" + _PCT + r"\s*\|"),
    re.compile(r"^.{0,80}?\s" + _PCT + r"\s*\[[=> ]*\]"),
    re.compile(r"^\s*(\d{1,3})\s+\d+(?:\.\d+)?[kKMGT]?\s+\d{1,3}\s+\d+(?:\.\d+)?[kKMGT]?\s+\d{1,3}\s+"),
]


def progress_percent(text: str) -> Optional[float]:
    """The percent shown by a progress-bar line (curl -#, curl meter, tqdm, wget), else None."""
    if len(text) > 400:
        return None
    for rx in _PROGRESS_RES:
        m = rx.search(text)
        if m:
            try:
                value = float(m.group(1))
            except ValueError:
                continue
            if 0.0 <= value <= 100.0:
                return value
    return None


# -- reading a log's tail --------------------------------------------------------------------------
def collapse_cr(line: str) -> str:
    """A line as a terminal shows it: ``\\r`` progress collapsed to its last non-empty state."""
    if "\r" not in line:
        return line
    parts = [p for p in line.split("\r") if p.strip()]
    return parts[-1] if parts else ""


MAX_REPAINTS = 2000  # the states of one repainted line kept for the progress analysis

# path -> ((st_dev, st_ino), byte offset, newlines before it, the 64 bytes before it): repeated
# diagnoses of a growing log only count the new part. A file truncated or replaced (other inode,
# offset past the tail, other bytes before the offset) is counted again.
_NEWLINE_CACHE: Dict[str, Tuple[Tuple[int, int], int, int, bytes]] = {}


def _open(path: str, follow: bool) -> BinaryIO:
    if follow:
        return open(path, "rb")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file")
    return os.fdopen(fd, "rb")


def read_tail(
    path: str,
    max_lines: int = 2000,
    max_bytes: int = 8 * 1024 * 1024,
    max_line_chars: int = 4096,
    repaints: Optional[Dict[int, List[str]]] = None,
    follow: bool = True,
) -> Tuple[List[str], int]:
    """The last ``max_lines`` lines of a file and the 1-based number of the first one.

    Lines are numbered as the file's ``\\n``-separated lines (a final line without ``\\n`` counts);
    ``\\r`` progress within a line is collapsed to its last state. Only the end of the file is
    decoded; the line number comes from counting newlines before it in 1 MiB chunks. ``repaints``, when
    given, receives for the last few lines that hold ``\\r`` repaints (a progress meter redrawn in place)
    their states in order, by index into the returned lines: how a stalled meter is told from a moving one.
    ``follow=False`` (a file found in a watch dir): a symlink is not followed, anything but a regular file is
    refused (``OSError``).
    """
    with _open(path, follow) as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        block = 64 * 1024
        pos = size
        data = b""
        while pos > 0 and data.count(b"\n") <= max_lines and len(data) < max_bytes:
            step = min(block, pos)
            pos -= step
            fh.seek(pos)
            data = fh.read(step) + data
        start = pos
        if pos > 0:
            # drop the partial first line so numbering starts at a real line
            cut = data.find(b"\n")
            if cut < 0:
                return [], 1
            start = pos + cut + 1
            data = data[cut + 1 :]
        raw = data.split(b"\n")
        if raw and raw[-1] == b"":
            raw.pop()
        if len(raw) > max_lines:
            skipped = raw[: len(raw) - max_lines]
            start += sum(len(r) + 1 for r in skipped)
            raw = raw[len(raw) - max_lines :]
        # count lines before ``start`` (from where the last count of this same file stopped)
        st = os.fstat(fh.fileno())
        key = (st.st_dev, st.st_ino)
        cached = _NEWLINE_CACHE.get(path)
        newlines, counted = 0, 0
        if cached is not None and cached[0] == key and cached[1] <= start:
            fh.seek(max(0, cached[1] - 64))
            if fh.read(min(64, cached[1])) == cached[3]:  # same bytes there: not truncated and rewritten
                counted, newlines = cached[1], cached[2]
        fh.seek(counted)
        remaining = start - counted
        while remaining > 0:
            chunk = fh.read(min(1024 * 1024, remaining))
            if not chunk:
                break
            newlines += chunk.count(b"\n")
            remaining -= len(chunk)
        if len(_NEWLINE_CACHE) > 256:
            _NEWLINE_CACHE.clear()
        end = start - remaining
        fh.seek(max(0, end - 64))
        _NEWLINE_CACHE[path] = (key, end, newlines, fh.read(min(64, end)))
    lines = [collapse_cr(r.decode("utf-8", "replace"))[:max_line_chars] for r in raw]
    if repaints is not None:
        found = 0
        for index in range(len(raw) - 1, max(-1, len(raw) - 50), -1):
            if b"\r" in raw[index]:
                states = [p for p in raw[index].decode("utf-8", "replace").split("\r") if p.strip()]
                repaints[index] = [p[:400] for p in states[-MAX_REPAINTS:]]
                found += 1
                if found >= 3:
                    break
    return lines, newlines + 1
