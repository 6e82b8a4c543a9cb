"""Log lines and ``log`` frames, the rules the agent's follower and agentless mode's share.

A raw line keeps only the text after its last ``\\r`` (``\\r``-overwritten progress, curl ``-#``), is decoded as
UTF-8 with replacement and capped at ``max_chars`` (ending with "…").  A line still being written (no newline)
is held (``keep_partial``) and, after ``PARTIAL_AFTER`` seconds, sent as its current state with
``partial: true``.  A burst keeps the newest ``BATCH_LINES`` lines / ``BATCH_CHARS`` characters, preceded by
one ``[... N lines skipped ...]`` marker line (``batch_frames``); a backlog frame carries a file's last lines
plus its partial line (``backlog_frame``).

The followed file ``f`` is any object with ``path, line_no, partial, partial_since, partial_sent,
partial_sent_at`` (the agent's ``sample/logs.py`` or agentless mode's ``console/agentless/logs.py``).
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional

from .frames import log_frame

PARTIAL_AFTER = 2.0
BATCH_LINES = 500
BATCH_CHARS = 64 * 1024
MAX_HELD_FRAMES = 16  # per file while held (frames that cannot merge: events, bursts); oldest dropped


def clean_line(raw: bytes, max_chars: int) -> str:
    """One raw line (no newline) as text: last ``\\r`` segment, decoded, capped."""
    raw = raw.rstrip(b"\r")
    cut = raw.rfind(b"\r")
    if cut >= 0:
        raw = raw[cut + 1 :]
    if len(raw) > max_chars * 4:
        raw = raw[: max_chars * 4]
    text = raw.decode("utf-8", errors="replace")
    if len(text) > max_chars:
        text = text[: max(0, max_chars - 1)] + "…"
    return text


def backlog_frame(f: Any, lines: List[str], first_line: int, max_chars: int) -> Dict[str, Any]:
    """The backlog frame for ``f``: its last ``lines`` (numbered from ``first_line``) plus the partial line."""
    partial = False
    if f.partial:
        text = clean_line(f.partial, max_chars)
        lines.append(text)
        partial = True
        f.partial_sent = text
    return log_frame(f, lines, first_line, backlog=True, partial=partial)


def batch_frames(
    f: Any, kept: Iterable[bytes], total: int, start_no: int, now: float, max_chars: int, event: Optional[str]
) -> List[Dict[str, Any]]:
    """The frame for ``total`` new complete lines of ``f`` (the last ``kept`` of them as bytes), numbered from
    ``start_no``: capped to a batch (with a skipped marker), plus the pending partial line once it settled."""
    f.line_no += total
    lines = [clean_line(raw, max_chars) for raw in kept]
    skipped = total - len(lines)
    chars = sum(len(x) for x in lines)
    while lines and chars > BATCH_CHARS:
        chars -= len(lines.pop(0))
        skipped += 1
    first_line = start_no + skipped
    partial = False
    if f.partial and now - f.partial_since >= PARTIAL_AFTER and now - f.partial_sent_at >= PARTIAL_AFTER:
        text = clean_line(f.partial, max_chars)
        if text != f.partial_sent or lines:
            lines.append(text)
            partial = True
            f.partial_sent, f.partial_sent_at = text, now
    if skipped:
        lines.insert(0, "[... %d lines skipped ...]" % skipped)
        first_line -= 1
    if not lines and event is None:
        return []
    return [log_frame(f, lines, first_line, event=event, partial=partial, skipped=skipped)]


def keep_partial(f: Any, data: bytes, now: float, max_chars: int) -> None:
    """Hold ``data`` (the text after the last newline) as ``f``'s partial line; a runaway one (a progress
    bar redrawn with ``\\r`` for hours) is cut to its last state and capped."""
    if data and not f.partial:
        f.partial_since = now
    if not data:
        f.partial_since = 0.0
        f.partial_sent = None
    limit = max_chars * 4 + 16
    if len(data) > limit:
        stripped = data.rstrip(b"\r")
        cut = stripped.rfind(b"\r")
        if cut >= 0:
            data = data[cut + 1 :]
        data = data[:limit]
    f.partial = data


def hold_frames(held_by_path: Dict[str, List[Dict[str, Any]]], frames: List[Dict[str, Any]], cap: int) -> None:
    """Add ``frames`` to ``held_by_path``: merged per file while the numbering runs on, at most ``cap`` lines
    per file (the oldest become a skipped marker).  What the agent sends, in order, back at detail "full";
    a console link worker holds an instance out of view the same way (console/link/coalesce.py)."""
    cap = max(1, cap)
    for frame in frames:
        held = held_by_path.setdefault(frame["path"], [])
        last = held[-1] if held else None
        cut = frame["first_line"] - last["first_line"] if last is not None else -1
        if (last is not None and frame.get("event") is None and not frame.get("skipped")
                and 0 <= cut <= len(last["lines"])):
            last["lines"] = last["lines"][:cut] + frame["lines"]  # lines sent again (partial) replace theirs
            last.pop("partial", None)
            if frame.get("partial"):
                last["partial"] = True
        else:
            held.append(dict(frame, lines=list(frame["lines"])))
        _trim_held(held, cap)


def _trim_held(held: List[Dict[str, Any]], cap: int) -> None:
    """Cut a file's held frames to ``cap`` lines: the oldest lines become (or join) a skipped marker."""
    while len(held) > MAX_HELD_FRAMES:
        held.pop(0)
    excess = sum(len(f["lines"]) - (1 if f.get("skipped") else 0) for f in held) - cap
    i = 0
    while excess > 0 and i < len(held):
        f = held[i]
        skipped = int(f.get("skipped") or 0)
        body = f["lines"][1:] if skipped else f["lines"]
        drop = min(excess, len(body))
        if drop == 0:
            i += 1
            continue
        excess -= drop
        first = f["first_line"] + (1 if skipped else 0) + drop  # the first line kept
        f["lines"] = ["[... %d lines skipped ...]" % (skipped + drop), *body[drop:]]
        f["first_line"], f["skipped"] = first - 1, skipped + drop
        nxt = held[i + 1] if i + 1 < len(held) else None
        if (len(f["lines"]) == 1 and f.get("event") is None and nxt is not None and nxt.get("event") is None
                and nxt.get("skipped")):
            # nothing of it left but the marker: its count joins the next frame's marker (the same numbering)
            n = int(nxt["skipped"]) + f["skipped"]
            nxt["lines"][0] = "[... %d lines skipped ...]" % n
            nxt["skipped"] = n
            held.pop(i)
            continue
        i += 1
