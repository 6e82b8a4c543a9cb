"""Reading a followed log on demand: older lines (``read``) and a search of the whole file (``grep``).

The console shows only the tail the follower streams (``logs.py``); an operator who scrolls past it, opens a
diagnosis's evidence line or greps the whole file asks the agent for more. These are the two requests, made
safe to answer for whoever holds the console:

- only logs: a file the agent is configured to follow (``logs``, ``benchmark.log``: it may be a symlink, the
  operator named it) or a regular file, not a symlink, whose real path lies under a ``watch_dirs`` directory (where
  the follower discovers logs); anything else (``/etc/shadow``, a ``..`` out of those directories, a symlink
  planted there, even one to a file inside, a FIFO) is refused with ``PermissionError``; files are opened with
  ``O_NOFOLLOW`` (a link swapped in after the check is not followed either);
- bounded: at most ``MAX_READ_LINES`` lines or ``MAX_HITS`` hits, lines capped at ``LINE_CHARS`` characters,
  ``MAX_OUTPUT_CHARS`` in all, the file streamed in 1 MiB blocks (a 2 GB log never sits in memory; a line
  with no newline for gigabytes is cut, the rest skipped) and ``TIME_LIMIT`` seconds of scanning.

Lines are numbered as the follower numbers them (1-based, one per newline; a last line without newline
counts) and cleaned the same way (``wire/loglines.clean_line``: last ``\\r`` segment, UTF-8 with replacement).
"""

from __future__ import annotations

import os
import re
import stat
import time
from typing import Any, Dict, Iterator, List, Mapping, Optional, Pattern, Sequence, Tuple

from ..wire.config import as_list, watch_dirs
from ..wire.loglines import clean_line

MAX_READ_LINES = 2000
MAX_HITS = 200
LINE_CHARS = 2000  # per line sent back (the follower's own cap, max_line_chars, applies first)
MAX_OUTPUT_CHARS = 2 << 20  # characters of line text per answer
TIME_LIMIT = 10.0  # seconds of scanning per request
BLOCK = 1 << 20
MAX_LINE_BYTES = 64 * 1024  # a longer line is cut here while scanning (its text is capped anyway)


class ReadTimeout(Exception):
    """The scan ran past its time limit."""


def _under(path: str, directory: str) -> bool:
    """``path`` lies inside ``directory`` (both real, absolute paths)."""
    return path.startswith(directory.rstrip(os.sep) + os.sep)


WatchDirs = Sequence[Tuple[str, bool]]  # (real directory, recursive)


def real_watch_dirs(config: Mapping[str, Any]) -> List[Tuple[str, bool]]:
    """The ``watch_dirs`` (``wire/config.watch_dirs``) with their real paths: what a found file must lie in."""
    return [(os.path.realpath(d), recursive) for d, recursive in watch_dirs(config)]


def named_paths(config: Mapping[str, Any]) -> List[str]:
    """The files the operator named: the configured ``logs`` and the ``[benchmark] log`` (absolute)."""
    bench = (config.get("benchmark") or {}).get("log")
    paths = [os.path.abspath(p) for p in as_list(config.get("logs")) + as_list(bench)]
    return list(dict.fromkeys(paths))


def discoverable(path: str, dirs: WatchDirs, any_depth: bool = False) -> bool:
    """May the agent take ``path`` as a log on its own? A regular file, not a symlink, whose real path lies in a
    watch dir: at its top, or deeper when the entry is recursive (``any_depth``: anywhere under it)."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
    except OSError:
        return False
    real = os.path.realpath(path)
    parent = os.path.dirname(real)
    return any(parent == d or ((recursive or any_depth) and _under(real, d)) for d, recursive in dirs)


MAX_DEPTH = 8  # subdirectories searched below a recursive (``DIR/**``) watch dir


def watched_entries(dirs: Sequence[Tuple[str, bool]], max_scan: int) -> Iterator[os.DirEntry]:
    """The regular files the watch dirs hold (symlinks never followed, never returned): at the top of each
    directory, and below it for a recursive one (symlinked subdirectories are not entered; at most MAX_DEPTH
    levels). At most ``max_scan`` directory entries are looked at in all. The one walk the follower
    (``logs.py``) and the diagnosis (``gather.py``) share."""
    scanned = 0
    for top, recursive in dirs:
        stack = [(top, 0)]
        while stack and scanned < max_scan:
            directory, depth = stack.pop()
            try:
                with os.scandir(directory) as it:
                    entries = list(it)
            except OSError:
                continue
            for entry in entries:
                scanned += 1
                try:
                    if entry.is_file(follow_symlinks=False):
                        yield entry
                    elif recursive and depth < MAX_DEPTH and entry.is_dir(follow_symlinks=False):
                        stack.append((entry.path, depth + 1))
                except OSError:
                    continue


def allowed_path(config: Mapping[str, Any], path: str) -> str:
    """The real path to open for ``path``, or ``PermissionError`` when it is no log of this agent.

    A configured file counts as named (it may be a symlink the operator chose); any other must be a regular
    file, not a symlink, really under a watch dir (a ``*.log`` symlink there, to ``/etc/shadow`` or not, is not).
    """
    if not isinstance(path, str) or not path or "\x00" in path:
        raise PermissionError("no path given")
    wanted = os.path.abspath(path)
    real = os.path.realpath(wanted)
    if wanted not in named_paths(config):
        if not any(_under(real, d) for d, _ in real_watch_dirs(config)):
            raise PermissionError(
                "%s is not a log this agent follows (configured logs, benchmark log, watch_dirs)" % path)
        if os.path.islink(wanted):
            raise PermissionError("%s is not a log this agent follows: a symlink it was not told to read" % path)
    try:
        st = os.stat(real)
    except OSError as exc:
        raise FileNotFoundError("%s: %s" % (path, exc.strerror or exc)) from None
    if not stat.S_ISREG(st.st_mode):
        raise PermissionError("%s is not a regular file" % path)
    return real


def _open(real: str) -> Any:
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(real, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped for a FIFO or device since the check
            raise PermissionError("%s is not a regular file" % real)
        return os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def _blocks(fh: Any, deadline: float) -> Iterator[bytes]:
    """Blocks of whole lines (each ends with ``\\n`` but maybe the file's last); over-long lines are cut."""
    carry = b""
    skipping = False  # inside a line already cut at MAX_LINE_BYTES: drop bytes up to its newline
    while True:
        if time.monotonic() > deadline:
            raise ReadTimeout("gave up after %g s" % TIME_LIMIT)
        chunk = fh.read(BLOCK)
        if not chunk:
            if carry:
                yield carry
            return
        if skipping:
            nl = chunk.find(b"\n")
            if nl < 0:
                continue
            chunk, skipping = chunk[nl:], False
        buf = carry + chunk if carry else chunk
        last = buf.rfind(b"\n")
        if last < 0:
            carry = buf
        else:
            yield buf[: last + 1]
            carry = buf[last + 1 :]
        if len(carry) > MAX_LINE_BYTES:
            carry, skipping = carry[:MAX_LINE_BYTES], True


def _split(block: bytes) -> List[bytes]:
    parts = block.split(b"\n")
    if block.endswith(b"\n"):
        parts.pop()
    return parts


def _count(block: bytes) -> int:
    return block.count(b"\n") + (0 if block.endswith(b"\n") else 1)


def _chars(config: Mapping[str, Any]) -> int:
    return max(16, min(int(config.get("max_line_chars") or LINE_CHARS), LINE_CHARS))


def read_lines(
    config: Mapping[str, Any], path: str, before_line: Optional[int], n: int
) -> Dict[str, Any]:
    """Up to ``n`` lines just before line ``before_line`` (None: the file's last ``n``).

    ``{path, lines: [[lineno, text], ...], first_line, total_lines?}``; ``first_line`` is the number of the
    first line given (``before_line`` when there is none before it); ``total_lines`` when the whole file was
    scanned.
    """
    real = allowed_path(config, path)
    n = max(0, min(int(n), MAX_READ_LINES))
    chars = _chars(config)
    deadline = time.monotonic() + TIME_LIMIT
    total: Optional[int] = None
    if before_line is None or int(before_line) <= 0:
        total = 0
        with _open(real) as fh:
            for block in _blocks(fh, deadline):
                total += _count(block)
        before_line = total + 1
    before = int(before_line)
    start = max(1, before - n)
    out: List[List[Any]] = []
    number = 0
    if n and before > 1:
        with _open(real) as fh:
            for block in _blocks(fh, deadline):
                count = _count(block)
                if number + count < start:  # the whole block lies before the wanted lines
                    number += count
                    continue
                for raw in _split(block):
                    number += 1
                    if number >= before:
                        break
                    if number >= start:
                        out.append([number, clean_line(raw, chars)])
                if number >= before - 1:
                    break
    budget = MAX_OUTPUT_CHARS
    kept = len(out)
    for k in range(len(out) - 1, -1, -1):  # over budget: keep the lines nearest ``before_line``
        budget -= len(out[k][1])
        if budget < 0:
            kept = len(out) - 1 - k
            break
    out = out[len(out) - kept :]
    result: Dict[str, Any] = {"path": path, "lines": out, "first_line": out[0][0] if out else before}
    if total is not None:
        result["total_lines"] = total
    return result


def _matcher(pattern: str, regex: bool) -> Tuple[Any, Any]:
    """``(block_may_match(bytes) -> bool, line_matches(str) -> bool)``: a cheap test on a block, then per line."""
    if regex:
        try:
            rx: Pattern[str] = re.compile(pattern)
            block_rx: Pattern[str] = re.compile(pattern, re.MULTILINE)  # ^ and $ at each line of a block
        except re.error as exc:
            raise ValueError("bad regular expression %r: %s" % (pattern, exc)) from None
        return (lambda block: block_rx.search(block.decode("utf-8", "replace")) is not None), (
            lambda text: rx.search(text) is not None
        )
    needle = pattern.lower()
    if needle.isascii():
        raw_needle = needle.encode("ascii")
        return (lambda block: raw_needle in block.lower()), (lambda text: needle in text.lower())
    return (lambda block: needle in block.decode("utf-8", "replace").lower()), (lambda text: needle in text.lower())


def grep(
    config: Mapping[str, Any],
    path: str,
    pattern: str,
    max_hits: int = MAX_HITS,
    regex: bool = False,
) -> Dict[str, Any]:
    """The file's lines that contain ``pattern`` (case-insensitive; a Python regex when ``regex``).

    ``{path, hits: [[lineno, text], ...], truncated, lines}``: ``truncated`` when it stopped at ``max_hits``
    (at most ``MAX_HITS``), the output budget or the time limit (then ``timed_out: true``); ``lines`` is how
    many lines were scanned.
    """
    if not pattern:
        raise ValueError("empty pattern")
    real = allowed_path(config, path)
    limit = max(1, min(int(max_hits), MAX_HITS))
    chars = _chars(config)
    block_may, line_has = _matcher(str(pattern), bool(regex))
    deadline = time.monotonic() + TIME_LIMIT
    hits: List[List[Any]] = []
    budget = MAX_OUTPUT_CHARS
    number = 0
    truncated = timed_out = False
    with _open(real) as fh:
        try:
            for block in _blocks(fh, deadline):
                if not block_may(block):
                    number += _count(block)
                    continue
                for raw in _split(block):
                    number += 1
                    text = clean_line(raw, chars)
                    if line_has(text):
                        hits.append([number, text])
                        budget -= len(text)
                        if len(hits) >= limit or budget <= 0:
                            truncated = True
                            break
                if truncated:
                    break
        except ReadTimeout:
            truncated = timed_out = True
    result: Dict[str, Any] = {"path": path, "hits": hits, "truncated": truncated, "lines": number}
    if timed_out:
        result["timed_out"] = True
    return result
