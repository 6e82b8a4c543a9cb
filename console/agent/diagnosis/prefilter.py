"""A cheap prefilter for the signature table: most log lines match no row, and a few substring tests say so.

Each row's regex is read for the literals one of which every match must contain (``triggers``); a table is
planned once (``plan``), and ``match_line_fast`` gives ``match_line``'s answer running a row's regex only
when one of its literals is in the line. ``Signature`` is the row type.
"""

from __future__ import annotations

import re
from typing import Dict, List, NamedTuple, Optional, Pattern, Sequence, Tuple


class Signature(NamedTuple):
    code: str
    severity: str  # "info" | "warning" | "error" | "critical"
    pattern: Pattern[str]
    explanation: str


_SPECIAL = set(".^$*+?{}[]()|")
_TRIGGERS: Dict[str, Optional[Tuple[str, ...]]] = {}


def _branches(pattern: str) -> List[str]:
    """The top-level alternatives of a regex (``a|(?:b|c)d`` -> ``a``, ``(?:b|c)d``)."""
    out, depth, start, i = [], 0, 0, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":  # a character class: skip to its end
            j = i + 1
            while j < len(pattern) and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            i = j + 1
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            out.append(pattern[start:i])
            start = i + 1
        i += 1
    out.append(pattern[start:])
    return out


def _literal(branch: str) -> Optional[str]:
    """The longest run of plain characters a branch needs, outside groups and classes (None: none of 3+)."""
    runs: List[str] = []
    cur: List[str] = []
    depth, i = 0, 0
    while i < len(branch):
        c = branch[i]
        nxt = branch[i + 1] if i + 1 < len(branch) else ""
        if c == "\\":
            esc = nxt
            i += 2
            optional = i < len(branch) and branch[i] in "?*{"
            if depth == 0 and esc and not esc.isalnum() and not optional:
                cur.append(esc)
            else:
                runs.append("".join(cur))
                cur = []
            continue
        if c == "[":
            runs.append("".join(cur))
            cur = []
            j = i + 1
            while j < len(branch) and branch[j] != "]":
                j += 2 if branch[j] == "\\" else 1
            i = j + 1
            continue
        if c == "{":  # a quantifier's bounds ({0,40}) are no text of the line
            runs.append("".join(cur))
            cur = []
            j = branch.find("}", i)
            i = len(branch) if j < 0 else j + 1
            continue
        if c in "()":
            depth += 1 if c == "(" else -1
            runs.append("".join(cur))
            cur = []
        elif c in _SPECIAL or nxt in ("?", "*", "{") or depth > 0:
            runs.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    runs.append("".join(cur))
    best = max(runs, key=len)
    return best.lower() if len(best.strip()) >= 3 else None


def triggers(pattern: str) -> Optional[Tuple[str, ...]]:
    """Lower-case substrings of which a line must hold one for ``pattern`` to match it, or None (no cheap test).
    Used with case-insensitive patterns: ``text.lower()`` is tested."""
    if pattern in _TRIGGERS:
        return _TRIGGERS[pattern]
    found: List[str] = []
    for branch in _branches(pattern):
        lit = _literal(branch)
        if lit is None:
            found = []
            break
        found.append(lit)
    result = tuple(found) if found else None
    if len(_TRIGGERS) > 512:
        _TRIGGERS.clear()
    _TRIGGERS[pattern] = result
    return result


class Plan(NamedTuple):
    """A table ready for scanning: each row with its prefilter, and the union of them (None: some row has none)."""

    rows: List[Tuple[Signature, Optional[Tuple[str, ...]]]]
    union: Optional[Tuple[str, ...]]


def plan(rows: Sequence[Signature]) -> Plan:
    out = []
    union: Optional[List[str]] = []
    for sig in rows:
        trig = triggers(sig.pattern.pattern) if sig.pattern.flags & re.IGNORECASE else None
        out.append((sig, trig))
        if trig is None:
            union = None
        elif union is not None:
            union.extend(t for t in trig if t not in union)
    return Plan(out, tuple(union) if union is not None else None)


def match_line_fast(text: str, table: Plan) -> Optional[Signature]:
    """``match_line`` with the substring prefilter (the same answer; most lines cost one pass of ``in`` tests
    over the union of the rows' literals, and a row's regex runs only when one of its literals is there)."""
    low = text.lower()
    if table.union is not None:
        present = {t for t in table.union if t in low}
        if not present:
            return None
        for sig, trig in table.rows:
            if trig is not None and present.isdisjoint(trig):
                continue
            if sig.pattern.search(text):
                return sig
        return None
    for sig, trig in table.rows:
        if trig is not None and not any(t in low for t in trig):
            continue
        if sig.pattern.search(text):
            return sig
    return None
