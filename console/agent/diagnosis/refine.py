"""A wrapper's verdict refined by the class its failure lines name in words no signature knows (pure).

When the verdict is only a wrapper or a symptom -- ``python_traceback``, ``child_failed`` (a launcher's exit
status), ``benchmark_not_running`` (the processes are gone) -- no signature matched the cause. The failure lines
near the end of the logs written last (a level word, "failed", "refused", "cannot"...: the quiet ending's
vocabulary) are read in the order they were written, and the first whose words name a class (lexicon.py) becomes
the cause, that line its evidence; the wrapper stays among the findings, the alternative to weigh. A line the table
calls harmless is none, and nothing is refined when no line names a class.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from . import codes, signatures
from .completion import FAILED_WORDS, NONZERO_EXIT, is_failure
from .lexicon import class_of
from .quiet_ending import NEAR_END, TROUBLE
from .records import Item
from .text import clean_message, ev, last_nonempty, short
from .timeline import Timeline

REFINED = frozenset(("python_traceback", "child_failed", "benchmark_not_running"))
FAILURE_LINES = 40  # non-empty lines at the end of each log read for the failure (a traceback and its wrapper)
GONE_LINES = 25  # ... when the processes are gone and nothing failed in words a signature knows: the log's ending


def _failure_like(text: str) -> bool:
    return bool(TROUBLE.search(text) or FAILED_WORDS.search(text) or NONZERO_EXIT.search(text) or is_failure(text))


def _candidates(facts: Dict[str, Any], now: float, depth: int) -> List[Tuple[float, int, str, Dict[str, Any], int]]:
    logs = [log for log in facts.get("logs") or [] if not log.get("error") and log.get("mtime") is not None
            and log.get("lines")]
    if not logs:
        return []
    freshest = max(float(log["mtime"]) for log in logs)
    out: List[Tuple[float, int, str, Dict[str, Any], int]] = []
    for order, log in enumerate(logs):
        if float(log["mtime"]) < freshest - NEAR_END:
            continue
        lines: List[str] = log["lines"]
        timeline = Timeline(log, now)
        for i in last_nonempty(lines, depth):
            text = lines[i]
            if len(text) <= 2000 and _failure_like(text) and not signatures.is_harmless(text):
                out.append((timeline.at(i), order, text, log, i))
    out.sort(key=lambda c: (c[0], c[1], c[4]))
    return out


def refine(facts: Dict[str, Any], verdict_code: str, now: float) -> Optional[Item]:
    """The cause the failure lines name, for a wrapper's or a symptom's verdict (None: no class named)."""
    if verdict_code not in REFINED:
        return None
    depth = GONE_LINES if verdict_code == "benchmark_not_running" else FAILURE_LINES
    for at, _, text, log, i in _candidates(facts, now, depth):
        code = class_of(text)
        if code is None:
            continue
        summary = "%s: %s (named by the line's own words, over the %s)" % (
            codes.label(code), short(clean_message(text), 140), codes.label(verdict_code))
        return Item(code, "error", summary, [ev(log["path"], int(log.get("first_line") or 1) + i, text)], time=at)
    return None
