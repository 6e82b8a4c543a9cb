"""Host text made safe to hand to an assistant: terminal escapes stripped, sizes capped.

Everything an instance sends (log lines, process names and command lines, probe output, agent errors) is
data written by whoever controls that host. It reaches an MCP client only through these functions:

- ``clean(text)`` (from ``console/core/text_safety.py``, shared with the fleet state): ANSI/VT escape sequences
  (CSI, OSC, DCS, SOS/PM/APC, two-byte ESC sequences, and their 8-bit C1 forms) are removed with their
  bodies; other C0/C1 controls and DEL are dropped (``\\t`` stays; ``\\n`` stays only where asked);
  bidirectional overrides (the "Trojan Source" characters) are dropped. ``\\r`` keeps what a terminal would
  show: the text after the last one on a line.
- ``clip(text, n)``: at most ``n`` characters, ending ``…`` when cut.
- ``json_size`` / ``fit_list``: keep a structured result under a byte budget, dropping list items from the
  far end and saying how many went.
"""

from __future__ import annotations

import json
from typing import Any, Callable, List

from console.core.text_safety import clean, clip

RESULT_BUDGET = 16 * 1024  # bytes of structured content per tool result (the text rendering gets as much again)
TEXT_BUDGET = 14 * 1024  # bytes of the text rendering
LINE_CHARS = 1000  # characters kept of one host line
FIELD_CHARS = 300  # characters kept of a short host field (process command line, status detail)

__all__ = ["FIELD_CHARS", "LINE_CHARS", "RESULT_BUDGET", "TEXT_BUDGET", "clean", "clip", "field", "fit_list",
           "fit_text", "json_size", "line"]


def line(text: Any, limit: int = LINE_CHARS) -> str:
    """One host line: cleaned and clipped."""
    return clip(clean(text), limit)


def field(text: Any, limit: int = FIELD_CHARS) -> str:
    """A short host field (a process name or command line, a status detail): cleaned and clipped."""
    return clip(clean(text), limit)


def json_size(value: Any) -> int:
    """Bytes of ``value`` as compact JSON (how it travels)."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str).encode("utf-8"))


def fit_list(result: dict[str, Any], key: str, budget: int = RESULT_BUDGET, keep: str = "tail",
             anchor: Callable[[Any], bool] | None = None) -> int:
    """Drop items of ``result[key]`` until ``result`` fits in ``budget`` bytes; returns how many went.

    ``keep``: "tail" drops from the front (the newest lines stay), "head" from the back, "around" from both
    ends alternately, keeping the item for which ``anchor`` is true near the middle.
    """
    items: List[Any] = result[key]
    size = json_size(result)
    if size <= budget:
        return 0
    # estimate, then correct: item sizes plus separators
    sizes = [json_size(it) + 1 for it in items]
    dropped = 0
    lo, hi = 0, len(items)
    centre = next((i for i, it in enumerate(items) if anchor and anchor(it)), len(items) // 2)
    while size > budget and lo < hi:
        if keep == "head" or (keep == "around" and (hi - 1 - centre) >= (centre - lo) and hi - 1 != centre):
            hi -= 1
            size -= sizes[hi]
        else:
            size -= sizes[lo]
            lo += 1
        dropped += 1
    result[key] = items[lo:hi]
    while json_size(result) > budget and result[key]:  # rounding of the estimate: finish exactly
        result[key] = result[key][1:] if keep != "head" else result[key][:-1]
        dropped += 1
    return dropped


def fit_text(text: str, budget: int = TEXT_BUDGET) -> str:
    """The text rendering within ``budget`` UTF-8 bytes, saying so when cut."""
    data = text.encode("utf-8")
    if len(data) <= budget:
        return text
    cut = data[: budget - 80].decode("utf-8", "ignore")
    cut = cut.rsplit("\n", 1)[0] if "\n" in cut else cut
    more = len(data) - len(cut.encode("utf-8"))
    return cut + f"\n[... cut: {more} more bytes; the structured result has the rest ...]"
