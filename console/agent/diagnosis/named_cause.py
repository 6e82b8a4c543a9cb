"""A warning the run went past, named again by the failure that ended it (blind round 6).

xFormers warns at import that it was built for another PyTorch, the run goes on loading, then dies in a
``NotImplementedError`` whose lines say ``xFormers wasn't build with CUDA support``. The warning was "recovered"
(the run went on), and the traceback, a wrapper, became the verdict. When a run ends in a wrapper (a traceback,
a launcher's child failure) and no current cause explains it, an earlier cause of this run whose own names
(``xFormers``, ``libfoo.so``, ``FusedAdam``: identifiers, not words) reappear in the failure's lines is the cause.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Set

from . import codes
from .records import Item

WRAPPERS = frozenset(("python_traceback", "child_failed"))
AFTER = 40  # lines after a wrapper's last evidence line that still belong to it (an exception's message)
# identifier-like names: mixed case inside a word, all capitals, or with a digit, dot or underscore in it
NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_.+-]{3,}")
GENERIC = frozenset((
    "cuda", "cudnn", "nccl", "gpu", "gpus", "cpu", "python", "pytorch", "torch", "error", "warning", "info", "debug",
    "nvidia", "true", "false", "none", "null", "traceback", "runtimeerror", "exception", "valueerror", "oserror",
    "please", "note", "http", "https", "github.com", "local_rank", "rank",
))


def _names(text: str) -> Set[str]:
    out = set()
    for word in NAME_RE.findall(text):
        word = word.strip(".-+")
        low = word.lower()
        if len(word) < 4 or low in GENERIC:
            continue
        if word.isupper() or any(c.isupper() for c in word[1:]) or any(c.isdigit() or c in "._" for c in word):
            out.add(low)
    return out


def _failure_text(facts: Dict[str, Any], wrapper: Item) -> str:
    """The wrapper's evidence and the lines just after it in its log (the exception's message, its details)."""
    parts = [str(e.get("text") or "") for e in wrapper.evidence]
    for log in facts.get("logs") or []:
        first = int(log.get("first_line") or 1)
        mine = [int(e.get("line") or 0) for e in wrapper.evidence if e.get("path") == log.get("path")]
        if mine:
            start, end = min(mine) - first, max(mine) - first + AFTER
            parts.extend(log["lines"][max(0, start):end])
    return "\n".join(parts).lower()


def causes_named_by_the_failure(facts: Dict[str, Any], items: List[Item]) -> None:
    """Make current the recovered cause that the run's final wrapper failure names (see the module's doc)."""
    current = [i for i in items if i.role == "current"]
    if any(codes.tier(i.code) == "cause" and i.severity in ("error", "critical") for i in current):
        return
    wrappers = [i for i in current if i.code in WRAPPERS]
    if not wrappers:
        return
    failure = "\n".join(_failure_text(facts, w) for w in wrappers)
    for item in items:
        if item.role != "history" or not item.summary.startswith("recovered: ") or codes.tier(item.code) != "cause":
            continue
        named = {n for e in item.evidence for n in _names(str(e.get("text") or ""))}
        hit = sorted(n for n in named if n in failure)
        if hit:
            item.role, item.severity = "current", "error"
            item.summary = "%s (named again by the failure: %s)" % (item.summary[len("recovered: "):], hit[0])
