"""Host text made safe to hand to an assistant: terminal escapes stripped, sizes capped.

Everything an instance sends (log lines, process names and command lines, probe output, agent errors) is
data written by whoever controls that host. It reaches an MCP client only through these functions:

- ``clean(text)``: ANSI/VT escape sequences (CSI, OSC, DCS, SOS/PM/APC, two-byte ESC sequences, and their
  8-bit C1 forms) are removed with their bodies; other C0/C1 controls and DEL are dropped (``\\t`` stays;
  ``\\n`` stays only where asked); bidirectional overrides (the "Trojan Source" characters) are dropped.
  ``\\r`` keeps what a terminal would show: the text after the last one on a line.
- ``clip(text, n)``: at most ``n`` characters, ending ``…`` when cut.
- ``json_size`` / ``fit_list``: keep a structured result under a byte budget, dropping list items from the
  far end and saying how many went.
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, List

RESULT_BUDGET = 16 * 1024  # bytes of structured content per tool result (the text rendering gets as much again)
TEXT_BUDGET = 14 * 1024  # bytes of the text rendering
LINE_CHARS = 1000  # characters kept of one host line
FIELD_CHARS = 300  # characters kept of a short host field (process command line, status detail)

# Sequences with a body that runs to a terminator: OSC/DCS/SOS/PM/APC, 7-bit (ESC ] P X ^ _) or 8-bit
# (0x9d 0x90 0x98 0x9e 0x9f), ended by BEL, ST (ESC \\ or 0x9c), or the end of the line when unterminated.
_STRING_SEQ = r"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c|(?=[\x1b\n])|$)"
# CSI: ESC [ or 0x9b, parameter and intermediate bytes, one final byte.
_CSI = r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?"
# Any other escape: ESC, intermediate bytes, one final byte (ESC ( B, ESC 7, ESC c ...), or a lone ESC.
_ESC = r"\x1b[\x20-\x2f]*[\x30-\x7e]?"
_SEQUENCES = re.compile("|".join((_STRING_SEQ, _CSI, _ESC)))
# Left-over controls: C0 but tab and newline, DEL, C1; and the bidi embedding/override/isolate characters.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def clean(text: Any, keep_newlines: bool = False) -> str:
    """``text`` without escape sequences or control characters (see the module docstring)."""
    if text is None:
        return ""
    s = text if isinstance(text, str) else str(text)
    if s.isprintable():  # the common case: nothing to strip (tab and newline are not printable: they go below)
        return s
    s = _SEQUENCES.sub("", s)
    if "\r" in s:  # per line: a CRLF ending goes, then what a terminal shows (the text after the last \r)
        s = "\n".join(part.rstrip("\r").rsplit("\r", 1)[-1] for part in s.split("\n"))
    s = _CONTROLS.sub("", s)
    if not keep_newlines:
        s = s.strip("\n").replace("\n", " ")
    return s


def clip(text: str, limit: int) -> str:
    """At most ``limit`` characters; a cut text ends with ``…``."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - 1)] + "…"


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
