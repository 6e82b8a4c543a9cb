"""Regexes that backtrack for ever: a repeat whose body can split the same text two ways.

``(a+)+``, ``(\\w+\\s*)+``, ``(.*a){9}``, ``(a|aa)+``: on a long line that does not match, the engine tries every
split before it gives up, for ever in practice. ``backtracks`` finds them in the parsed regex (``re._parser``),
judging character classes on Latin-1 with case folded (log patterns are matched ignoring case), so that
``check`` refuses them where a person can still fix them; ``(\\d+\\.){3}`` or ``(\\w+\\s)+`` pass.
"""

from __future__ import annotations

import re
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any

_ALL = frozenset(range(256))
_REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT)
_CLASSES = {"DIGIT": str.isdigit, "SPACE": str.isspace, "LINEBREAK": lambda c: c == "\n",
            "WORD": lambda c: c.isalnum() or c == "_"}


def _fold(code: int) -> set[int]:
    c = chr(code)
    return {ord(x) for x in (c, c.lower(), c.upper()) if len(x) == 1 and ord(x) < 256}


def _category(cat: Any) -> frozenset[int]:
    name = str(cat)
    test = _CLASSES.get(name.rsplit("_", 1)[-1], lambda c: True)
    chars = frozenset(i for i in _ALL if test(chr(i)))
    return _ALL - chars if "_NOT_" in name else chars


def _one_char(op: Any, av: Any) -> frozenset[int] | None:
    """The characters a one-character item matches (case folded); None: not such an item."""
    if op is sre.LITERAL or op is sre.NOT_LITERAL:
        chars = frozenset(_fold(av))
        return chars if op is sre.LITERAL else _ALL - chars
    if op is sre.ANY:
        return _ALL
    if op is not sre.IN:
        return None
    out: set[int] = set()
    for o, a in av:
        if o is sre.LITERAL:
            out |= _fold(a)
        elif o is sre.RANGE:
            out |= {f for i in range(a[0], min(a[1], 255) + 1) for f in _fold(i)}
        elif o is sre.CATEGORY:
            out |= _category(a)
        elif o is not sre.NEGATE:
            out |= _ALL
    return _ALL - out if any(o is sre.NEGATE for o, _ in av) else frozenset(out)


def _first(items: Any) -> tuple[frozenset[int], bool]:
    """The characters a sequence can start with, and whether it can match nothing."""
    first: frozenset[int] = frozenset()
    for op, av in items:
        chars = _one_char(op, av)
        if chars is not None:
            return first | chars, False
        if op in _REPEATS or op is sre.POSSESSIVE_REPEAT:
            f, empty = _first(av[2])
            empty = empty or av[0] == 0
        elif op is sre.SUBPATTERN or op is sre.ATOMIC_GROUP:
            f, empty = _first(av[-1] if op is sre.SUBPATTERN else av)
        elif op is sre.BRANCH:
            parts = [_first(b) for b in av[1]]
            f, empty = frozenset().union(*(p[0] for p in parts)), any(p[1] for p in parts)
        elif op in (sre.AT, sre.ASSERT, sre.ASSERT_NOT):
            f, empty = frozenset(), True
        else:  # a back-reference, a conditional: anything
            f, empty = _ALL, True
        first |= f
        if not empty:
            return first, False
    return first, True


def _chars(items: Any) -> frozenset[int]:
    """Every character a part can consume."""
    out: frozenset[int] = frozenset()
    for op, av in items:
        chars = _one_char(op, av)
        if chars is not None:
            out |= chars
        elif op in _REPEATS or op is sre.POSSESSIVE_REPEAT:
            out |= _chars(av[2])
        elif op is sre.SUBPATTERN or op is sre.ATOMIC_GROUP:
            out |= _chars(av[-1] if op is sre.SUBPATTERN else av)
        elif op is sre.BRANCH:
            out = out.union(*(_chars(b) for b in av[1]))
        elif op not in (sre.AT, sre.ASSERT, sre.ASSERT_NOT):
            out |= _ALL
    return out


def _literal(items: Any) -> str | None:
    ops = list(items)
    return "".join(chr(av).lower() for _, av in ops) if all(op is sre.LITERAL for op, _ in ops) else None


def _twice(a: str | None, b: str | None) -> bool:
    """Whether one literal branch is the other repeated (``a|aa``): the same text, two ways."""
    if not a or not b:
        return False
    short, long = sorted((a, b), key=len)
    return len(long) % len(short) == 0 and short * (len(long) // len(short)) == long


def _ambiguous(items: Any, follow: frozenset[int]) -> bool:
    """Whether a repeated part holds a repeat that can take characters from what follows it (two splits)."""
    items = list(items)
    for i, (op, av) in enumerate(items):
        rest, empty = _first(items[i + 1:])
        after = rest | follow if empty else rest
        if op in _REPEATS and av[0] < av[1] and _chars(av[2]) & after:  # a count that may vary: a?, a*, a{1,3}
            return True
        if op is sre.SUBPATTERN and _ambiguous(av[-1], after):
            return True
        if op is sre.BRANCH:
            branches = list(av[1])
            if any(_ambiguous(b, after) for b in branches):
                return True
            if any(_first(b)[1] for b in branches) and _chars(items[i:i + 1]) & after:  # (a|) is a?
                return True
            literals = [_literal(b) for b in branches]
            if any(_twice(x, y) for n, x in enumerate(literals) for y in literals[n + 1:]):
                return True
    return False


def _backtracks(items: Any) -> bool:
    """Whether a parsed pattern has a repeat inside a repeat that can match the same text."""
    for op, av in items:
        if op in _REPEATS:
            if av[1] > 1 and _ambiguous(av[2], _first(av[2])[0]):
                return True
            inner: list[Any] = [av[2]]
        elif op is sre.SUBPATTERN:
            inner = [av[-1]]
        elif op is sre.BRANCH:
            inner = list(av[1])
        else:
            inner = [av[1]] if op in (sre.ASSERT, sre.ASSERT_NOT) else []
        if any(_backtracks(part) for part in inner):
            return True
    return False


def backtracks(pattern: str) -> bool:
    """Whether ``pattern`` (a valid regex) has a repeat inside a repeat that can match the same text."""
    return _backtracks(sre_parse.parse(pattern, re.IGNORECASE))

