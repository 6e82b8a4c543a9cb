"""Numeric filter predicates (all-smi style): ``util<5 & power>300``, ``temp>85``, ``mem>90%``, ``idle>10m``.

One parser for the grid's ``/`` filter, the ``:`` commands' FILTER and MCP ``fleet_status``'s ``filter``.
A predicate is ``FIELD OP VALUE`` (spaces around OP allowed), OP one of ``< <= > >= = !=``; ``&`` (or a space)
joins them and the plain words of the filter. The GPU fields hold together on one GPU of the instance
(``util<5 & power>300``: a GPU idle yet drawing power); ``idle`` is the instance's all-GPUs-idle time.

Fields: ``util`` (%), ``power`` (W), ``temp`` (°C), ``mem`` (% of the GPU's memory; ``mem>20G`` in GiB),
``idle`` (seconds; ``10m``, ``2h``), ``$/h`` (the rental's price: parsed, answered "no prices yet" until the
fleet has prices). A bad predicate is one ``PredicateError`` line naming the word and what would do.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le, ">=": operator.ge, "!=": operator.ne, "==": operator.eq,
    "<": operator.lt, ">": operator.gt, "=": operator.eq,
}
GPU_FIELDS = ("util", "power", "temp", "mem")
FIELDS = (*GPU_FIELDS, "idle", "$/h")
ALIASES = {"utilization": "util", "gpu": "util", "temperature": "temp", "memory": "mem", "price": "$/h"}
DURATION = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
SIZE = {"k": 2.0 ** -20, "m": 2.0 ** -10, "g": 1.0, "t": 1024.0}  # to GiB
EXAMPLES = "util<5, power>300, temp>85, mem>90%, idle>10m, $/h>1"
NO_PRICES = "$/h: no prices yet (the fleet has no rental prices to compare)"

_SPLIT = re.compile(r"\s*(<=|>=|!=|==|<|>|=)\s*")
_WORD = re.compile(r"^([a-z$/]+)(<=|>=|!=|==|<|>|=)(.*)$")
_VALUE = re.compile(r"^(-?\d+(?:\.\d+)?)\s*([a-z%°]*)$")


class PredicateError(ValueError):
    """One line: the word and what a good one looks like."""


@dataclass(frozen=True)
class Predicate:
    field: str
    op: str
    value: float
    unit: str = ""  # mem: "%" or "gib"
    text: str = ""

    def holds(self, measured: Optional[float]) -> bool:
        return measured is not None and OPS[self.op](float(measured), self.value)


@dataclass(frozen=True)
class Query:
    """A filter split in two: the predicates and the plain words (name, tag, host, ``tag:x``, ``status:x``)."""

    predicates: tuple[Predicate, ...] = ()
    words: tuple[str, ...] = ()

    @property
    def plain(self) -> str:
        return " ".join(self.words)


def looks_like_predicate(word: str) -> bool:
    """A word with a comparison in it (``status:x`` and ``name~x`` are not)."""
    return any(op in word for op in ("<", ">", "=")) and ":" not in word.split("=")[0]


def _value(field: str, raw: str, text: str) -> tuple[float, str]:
    m = _VALUE.match(raw.strip().lower())
    if not m:
        raise PredicateError(f"{text!r}: {raw or 'nothing'!r} is not a number (e.g. {EXAMPLES})")
    number, unit = float(m.group(1)), m.group(2)
    if field == "idle":
        if unit not in DURATION:
            raise PredicateError(f"{text!r}: idle takes seconds or 30s, 10m, 2h, 1d (not {unit!r})")
        return number * DURATION[unit], ""
    if field == "mem":
        if unit in ("", "%"):
            return number, "%"
        size = unit.rstrip("ib").rstrip("b") or unit
        if size not in SIZE:
            raise PredicateError(f"{text!r}: mem takes a percentage (mem>90%) or a size (mem>20G)")
        return number * SIZE[size], "gib"
    allowed = {"util": ("", "%"), "power": ("", "w"), "temp": ("", "c", "°c", "°"), "$/h": ("",)}[field]
    if unit not in allowed:
        raise PredicateError(f"{text!r}: {field} takes a plain number{' or ' + allowed[1] if len(allowed) > 1 else ''}")
    return number, ""


def parse_predicate(text: str) -> Predicate:
    """``util<5`` as a Predicate; PredicateError (one line) for an unknown field, operator or value."""
    m = _WORD.match(text.lower())
    if not m:
        raise PredicateError(f"{text!r}: not FIELD<VALUE (e.g. {EXAMPLES})")
    field, op, raw = ALIASES.get(m.group(1), m.group(1)), m.group(2), m.group(3)
    if field not in FIELDS:
        raise PredicateError(f"{text!r}: unknown field {m.group(1)!r} (fields: {', '.join(FIELDS)})")
    if raw[:1] in "<>=!":
        raise PredicateError(f"{text!r}: one operator of < <= > >= = !=")
    value, unit = _value(field, raw, text)
    return Predicate(field, op, value, unit, text)


@functools.lru_cache(maxsize=256)
def parse_query(query: str) -> Query:
    """A whole filter: its predicates (``&`` or spaces between) and the rest of its words."""
    joined = _SPLIT.sub(lambda m: m.group(1), query.replace("&&", " ").replace("&", " "))
    predicates, words = [], []
    for word in joined.split():
        if looks_like_predicate(word):
            predicates.append(parse_predicate(word))
        else:
            words.append(word)
    return Query(tuple(predicates), tuple(words))


def check(query: str, prices: bool = False) -> Optional[str]:
    """The one-line error of ``query``, or None when every predicate parses (and ``$/h`` has prices)."""
    try:
        parsed = parse_query(query)
    except PredicateError as exc:
        return str(exc)
    if not prices and any(p.field == "$/h" for p in parsed.predicates):
        return NO_PRICES
    return None


def _gpu_value(gpu: Any, pred: Predicate) -> Optional[float]:
    if pred.field == "util":
        return gpu.get("util")
    if pred.field == "power":
        return gpu.get("power")
    if pred.field == "temp":
        return gpu.get("temp")
    used, total = gpu.get("mem_used"), gpu.get("mem_total")
    if used is None:
        return None
    if pred.unit == "gib":
        return float(used) / 2.0 ** 30
    return 100.0 * float(used) / float(total) if total else None


def holds(inst: Any, query: Query) -> bool:
    """Whether the instance meets every predicate of ``query`` (the GPU ones together on one live GPU)."""
    gpu_preds = [p for p in query.predicates if p.field in GPU_FIELDS]
    for pred in query.predicates:
        if pred.field == "idle" and not pred.holds(inst.idle_seconds):
            return False
        if pred.field == "$/h" and not pred.holds(getattr(inst, "price_per_hour", None)):
            return False
    if not gpu_preds:
        return True
    gpus = [g for g in inst.gpus.values() if not (g.lost or g.missing)]
    return any(all(p.holds(_gpu_value(g, p)) for p in gpu_preds) for g in gpus)


__all__ = ["EXAMPLES", "NO_PRICES", "Predicate", "PredicateError", "Query", "check", "holds", "parse_predicate",
           "parse_query"]
