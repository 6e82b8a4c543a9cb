"""The rental bill from the history: per instance the time watched, benchmarking and idle, and their money.

The history holds each watch session's start (``spend`` event ``watch``), every change of spend mode with its
time (``bench``/``idle``/``other``, console/core/spend.py) and the session's end (``end``). ``spend_report``
adds those intervals up inside a window, as the live meter does, so that the report and the console agree.
A session whose console died without ending it is closed at its last recorded change when a new session
starts (the console did not see the time between), else it runs to ``now``.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from typing import Any

from console.core.spend import money

MODES = ("bench", "idle", "other")


class _Acc:
    """One instance's sums while its events are read in time order."""

    __slots__ = ("last", "mode", "price", "secs", "start", "watched")

    def __init__(self) -> None:
        self.secs = dict.fromkeys(MODES, 0.0)
        self.watched = 0.0
        self.mode: str | None = None  # None: no session open
        self.start = 0.0  # the open mode interval's start
        self.last = 0.0  # the last change seen (a dead console's session ends here)
        self.price: float | None = None

    def close(self, at: float) -> None:
        if self.mode is not None:
            span = max(0.0, at - self.start)
            self.secs[self.mode] += span
            self.watched += span
            self.mode = None

    def feed(self, ts: float, mode: str, price: float | None, since: float) -> None:
        ts = max(ts, since)
        if price is not None or mode == "watch":
            self.price = price if price is not None else self.price
        if mode == "watch":
            self.close(self.last)  # an unended session (its console died): what it saw, no more
            self.mode, self.start = "other", ts
        elif mode == "end":
            self.close(ts)
        elif mode in MODES:  # (the window opens inside a session: the mode it was in)
            self.close(ts)
            self.mode, self.start = mode, ts
        self.last = ts


def spend_events(db: sqlite3.Connection, since: float) -> Iterable[tuple[str, float, str, str | None]]:
    """``(name, ts, mode, data)`` of the spend events from ``since`` on, each instance's last one before it first
    (the mode it was in when the window opened), in time order."""
    before = ("SELECT n.name, e.ts, e.status, e.data FROM events e JOIN names n ON n.id = e.name_id "
              "JOIN (SELECT name_id, max(ts) AS ts FROM events WHERE kind = 'spend' AND ts < ? GROUP BY name_id) b "
              "ON b.name_id = e.name_id AND b.ts = e.ts WHERE e.kind = 'spend' ORDER BY e.rowid")
    inside = ("SELECT n.name, e.ts, e.status, e.data FROM events e JOIN names n ON n.id = e.name_id "
              "WHERE e.kind = 'spend' AND e.ts >= ? ORDER BY e.ts, e.rowid")
    yield from db.execute(before, (since,))
    yield from db.execute(inside, (since,))


def _price(data: str | None) -> float | None:
    if not data or '"price":null' in data:
        return None
    value = json.loads(data).get("price")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def spend_report(db: sqlite3.Connection, since: float, now: float,
                 prices: dict[str, float | None] | None = None) -> dict[str, Any]:
    """Per instance ``name, price_per_hour, watched_s, benchmark_s, idle_s, spend, idle_spend, restarts,
    verdicts`` over ``[since, now]``, and the fleet's totals. ``prices``: the fleet file's, for instances whose
    history has none."""
    accs: dict[str, _Acc] = {}
    for name, ts, mode, data in spend_events(db, since):
        acc = accs.get(name)
        if acc is None:
            acc = accs[name] = _Acc()
        acc.feed(ts, mode, _price(data), since)
    restarts: dict[str, int] = {}
    verdicts: dict[str, dict[str, int]] = {}
    for name, kind, status, count in db.execute(
            "SELECT n.name, e.kind, e.status, count(*) FROM events e JOIN names n ON n.id = e.name_id "
            "WHERE e.ts >= ? AND e.kind IN ('restart', 'verdict') GROUP BY n.name, e.kind, e.status", (since,)):
        if kind == "restart":
            restarts[name] = restarts.get(name, 0) + count
        else:
            verdicts.setdefault(name, {})[status or "?"] = count
    rows: list[dict[str, Any]] = []
    for name in sorted(accs):
        acc = accs[name]
        acc.close(now)
        price = acc.price if acc.price is not None else (prices or {}).get(name)
        rows.append({
            "name": name, "price_per_hour": price, "watched_s": round(acc.watched, 3),
            "benchmark_s": round(acc.secs["bench"], 3), "idle_s": round(acc.secs["idle"], 3),
            "spend": _cents(money(acc.watched, price)), "idle_spend": _cents(money(acc.secs["idle"], price)),
            "restarts": restarts.get(name, 0), "verdicts": verdicts.get(name, {}),
        })
    totals = {
        "instances": len(rows),
        "price_per_hour": round(sum(r["price_per_hour"] or 0.0 for r in rows), 4),
        **{k: round(sum(r[k] for r in rows), 3) for k in ("watched_s", "benchmark_s", "idle_s")},
        **{k: round(sum(r[k] or 0.0 for r in rows), 2) for k in ("spend", "idle_spend")},
        "restarts": sum(r["restarts"] for r in rows),
    }
    return {"since": since, "until": now, "instances": rows, "totals": totals}


def _cents(amount: float | None) -> float | None:
    return None if amount is None else round(amount, 2)


__all__ = ["spend_events", "spend_report"]
