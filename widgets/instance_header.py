"""The instance screen's header: who (name, status), where (user@host:port, tags), how fresh (data age), then why.

In one line when it fits. Else two, the long forms said shorter (no user before the host, ``DEMO``, ``data 5s
ago``): each part goes on the first line with room for it, in order (address, tags, flags, modes, the data's
age, then the reason and a retry's countdown), so the address, the tags and the data's age always show, and
only the reason is cut, at a word, to the room left. (At 80 columns a long reason used to push them off the
header's two rows.)
"""

from __future__ import annotations

import time
from typing import List, Optional, Tuple

from rich.text import Text

from console.agent.wire.timefmt import fmt_age as format_age
from console.core.state import InstanceState
from console.core.status import STALE, badge

from .pane import retry_text
from .render import operator_text

Part = Tuple[str, str]  # (text, style)
GAP = "  "


def _join(parts: List[Part]) -> Text:
    text = Text()
    for k, (words, style) in enumerate(parts):
        if k > 1:  # (the name and the badge carry their own padding)
            text.append(GAP)
        text.append(words, style)
    return text


def _width(parts: List[Part]) -> int:
    return _join(parts).cell_len


def cut_at_word(words: str, room: int) -> str:
    """``words`` in ``room`` cells: whole words, ``…`` where some were left out."""
    if len(words) <= room:
        return words
    head = words[: max(0, room - 1)]
    if " " in head.strip():
        head = head[: head.rstrip().rfind(" ")]
    return head.rstrip(" ,;:(") + "…"


def _who(inst: InstanceState) -> List[Part]:
    label = badge(inst.status)
    if inst.status == STALE and inst.age() is not None:
        label += " " + format_age(inst.age() or 0)
    return [(" %s " % inst.name, "bold reverse"), (" %s " % label, "bold")]


def _tags(inst: InstanceState) -> List[Part]:
    return [("[%s]" % ",".join(inst.tags), "dim")] if inst.tags else []


def _where(inst: InstanceState, demo: bool, read_only: bool, short: bool) -> List[Part]:
    """Address, tags, flags, modes, the data's age; ``short``: the short forms (no user, ``DEMO``, ``data 5s ago``)."""
    user = "" if short else "%s@" % (inst.user or "?")
    parts: List[Part] = [("%s%s:%s" % (user, inst.host, inst.port or 22), "dim"), *_tags(inst)]
    flags = inst.flags()
    if flags:
        parts.append((", ".join(flags), "bold"))
    if demo:
        parts.append(("DEMO" if short else "DEMO fleet — simulated GPUs", "bold reverse"))
    if read_only:
        parts.append(("READ-ONLY", "bold reverse"))
    age = inst.age()
    if age is not None:
        parts.append((("data %s ago" if short else "last data %s ago") % format_age(age), "dim"))
    return parts


def _why(inst: InstanceState, retry_at: Optional[float]) -> List[Part]:
    """The reason (the status detail) and a retry's countdown, as one part."""
    words = [operator_text(inst.status_detail)] if inst.status_detail else []
    retry = retry_text(retry_at, time.time())
    if retry:
        words.append(retry)
    return [(GAP.join(words), "italic")] if words else []


def _flow(who: List[Part], parts: List[Part], width: int) -> Tuple[List[Part], List[Part]]:
    """``parts`` on two lines after ``who``: each on the first line with room for it, in order; one that fits
    neither (the reason, last) is cut at a word to the room left on the second line."""
    first: List[Part] = list(who)
    second: List[Part] = []
    room = [width - _width(who), width]
    for words, style in parts:
        need = [len(GAP) + len(words), (len(GAP) if second else 0) + len(words)]
        if need[0] <= room[0]:
            first.append((words, style))
            room[0] -= need[0]
        elif need[1] <= room[1]:
            second.append((words, style))
            room[1] -= need[1]
        elif room[1] - need[1] + len(words) > 4:
            said = cut_at_word(words, room[1] - need[1] + len(words))
            second.append((said, style))
            room[1] = 0
    return first, second


def header_text(inst: InstanceState, demo: bool, read_only: bool, retry_at: Optional[float] = None,
                width: Optional[int] = None) -> Text:
    """The header in ``width`` cells (one line when it fits, else two); no width: one line, as long as it is."""
    who, why = _who(inst), _why(inst, retry_at)
    one = _join(who + why + _where(inst, demo, read_only, False))
    if width is None or one.cell_len <= width:
        return one
    first, second = _flow(who, _where(inst, demo, read_only, True) + why, width)
    text = _join(first)
    text.truncate(width, overflow="ellipsis")  # (only a name longer than the screen)
    if second:
        text.append("\n")
        text.append_text(_join([("", ""), ("", ""), *second])[len(GAP):])  # (no gap in front)
    return text


__all__ = ["cut_at_word", "header_text"]
