"""The fleet's history: what happened while nobody watched, in one SQLite file in the state dir.

Kept: status transitions, verdicts with their evidence, restarts, probes, flaps (``events``), and per-GPU
minute aggregates of util / memory / temperature / power, min/avg/max (``gpu_minutes``). Bounded by age
(``max_days``) and size (``max_bytes``): pruned at start and hourly, oldest first.

Size matters at fleet scale (100 instances x 8 GPUs is 1.15 M GPU-minutes a day), so a GPU-minute row is
one instance's minute with its GPUs packed (``struct``, 25 bytes a GPU) under a ``(minute, instance id)`` key:
under 40 MB a day for that fleet (bench/serve_bench.py measures it). Writes are batched (events each second,
GPU rows each minute) in one transaction; WAL, ``synchronous=NORMAL``. Readers (``fleet-console history``,
the TUI) open their own connection; a second writer (a TUI beside ``serve``) waits on the busy timeout.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
import struct
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import platformdirs

DEFAULT_MAX_DAYS = 14.0
DEFAULT_MAX_BYTES = 512 * 1024 * 1024
PRUNE_EVERY = 3600.0  # seconds
FLAP_WINDOW = 600.0  # seconds: this many changes within it is a flap
FLAP_CHANGES = 4
MAX_DATA_CHARS = 16_000  # a verdict's or probe's JSON, capped
# one GPU in a minute row, 25 bytes: index (uint8), then min/avg/max of util % and temperature °C (uint8),
# power W (uint16) and memory MiB (uint32); the type's largest value means "none"
_GPU = struct.Struct("<B3B3B3H3I")
FIELDS = ("util", "temp", "power", "mem")  # the order in a packed GPU record
_NONE = {"util": 0xFF, "temp": 0xFF, "power": 0xFFFF, "mem": 0xFFFFFFFF}

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS names(id INTEGER PRIMARY KEY, name TEXT UNIQUE NOT NULL);
CREATE TABLE IF NOT EXISTS events(
    ts REAL NOT NULL, name_id INTEGER NOT NULL, kind TEXT NOT NULL,
    status TEXT, detail TEXT, data TEXT);
CREATE INDEX IF NOT EXISTS events_ts ON events(ts);
CREATE INDEX IF NOT EXISTS events_name ON events(name_id, ts);
CREATE TABLE IF NOT EXISTS gpu_minutes(
    minute INTEGER NOT NULL, name_id INTEGER NOT NULL, gpus BLOB NOT NULL,
    PRIMARY KEY(minute, name_id)) WITHOUT ROWID;
"""


def default_history_path() -> Path:
    """``$FLEET_CONSOLE_STATE_DIR/history.sqlite3``, else the user's state dir (as the audit log)."""
    base = os.environ.get("FLEET_CONSOLE_STATE_DIR") or platformdirs.user_state_dir("fleet-console")
    return Path(base) / "history.sqlite3"


def _connect(path: Path, readonly: bool = False) -> sqlite3.Connection:
    if readonly:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(str(path), timeout=5.0, isolation_level=None)
        db.execute("PRAGMA auto_vacuum=INCREMENTAL")  # only takes on a new file; freed pages go back to the disk
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.executescript(SCHEMA)
    db.execute("PRAGMA busy_timeout=5000")
    return db


class _Agg:
    """One GPU's minute so far: count, then min/sum/max per field."""

    __slots__ = ("n", "vals")

    def __init__(self) -> None:
        self.n = 0
        self.vals: dict[str, list[float]] = {}

    def add(self, field: str, value: float) -> None:
        cur = self.vals.get(field)
        if cur is None:
            self.vals[field] = [value, value, value, 1.0]
        else:
            if value < cur[0]:
                cur[0] = value
            if value > cur[2]:
                cur[2] = value
            cur[1] += value
            cur[3] += 1.0

    def summary(self, field: str) -> tuple[int, int, int] | None:
        cur = self.vals.get(field)
        if cur is None:
            return None
        return round(cur[0]), round(cur[1] / cur[3]), round(cur[2])


def pack_gpus(gpus: dict[int, _Agg]) -> bytes:
    out = []
    for index in sorted(gpus):
        agg = gpus[index]
        values: list[int] = [min(index, 0xFF)]
        for field in FIELDS:
            s = agg.summary(field)
            none = _NONE[field]
            top = none - 1
            values.extend((none, none, none) if s is None else (min(max(v, 0), top) for v in s))
        out.append(_GPU.pack(*values))
    return b"".join(out)


def unpack_gpus(blob: bytes) -> list[dict[str, Any]]:
    out = []
    for values in _GPU.iter_unpack(blob):
        rec: dict[str, Any] = {"gpu": values[0]}
        for i, field in enumerate(FIELDS):
            trio = values[1 + 3 * i: 4 + 3 * i]
            none = _NONE[field]
            rec[field] = None if trio[0] == none else {"min": trio[0], "avg": trio[1], "max": trio[2]}
        out.append(rec)
    return out


class History:
    """The writer: ``record_*`` calls queue rows, ``flush()`` (each second) writes them, ``close()`` at the end."""

    def __init__(self, path: Path | None = None, max_days: float = DEFAULT_MAX_DAYS,
                 max_bytes: int = DEFAULT_MAX_BYTES, clock: Any = time.time) -> None:
        self.path = path or default_history_path()
        self.max_days = max_days
        self.max_bytes = max_bytes
        self.clock = clock
        self.db = _connect(self.path)
        self._ids: dict[str, int] = dict((n, i) for i, n in self.db.execute("SELECT id, name FROM names"))
        self._events: list[tuple[float, int, str, str | None, str | None, str | None]] = []
        self._minute: int | None = None
        self._gpus: dict[str, dict[int, _Agg]] = {}
        self._changes: dict[str, list[float]] = {}
        self._flapping: set[str] = set()
        self._last_prune = 0.0
        self.rows_written = 0
        self.prune()

    # -- recording --------------------------------------------------------------------------------
    def _id(self, name: str) -> int:
        got = self._ids.get(name)
        if got is None:
            self.db.execute("INSERT OR IGNORE INTO names(name) VALUES (?)", (name,))
            got = self.db.execute("SELECT id FROM names WHERE name = ?", (name,)).fetchone()[0]
            self._ids[name] = got
        return got

    def event(self, ts: float, name: str, kind: str, status: str | None = None, detail: str | None = None,
              data: Any = None) -> None:
        text = None if data is None else json.dumps(data, separators=(",", ":"), default=str)
        if text is not None and len(text) > MAX_DATA_CHARS:
            text = json.dumps({"truncated": True, "head": text[:MAX_DATA_CHARS]})
        self._events.append((ts, self._id(name), kind, status, detail, text))

    def gpu_health(self, ts: float, name: str, gpu: int, what: str, detail: str, data: Any) -> None:
        """A GPU's NVML health changed (``what``: ``health``), or an Xid event came (``what``: ``xid``)."""
        self.event(ts, name, "gpu_health", what, "GPU %d: %s" % (gpu, detail), data)

    def transition(self, ts: float, name: str, old: str, new: str, detail: str, counts: bool = True) -> None:
        """A status change; ``counts``: towards a flap (not while start-up or a reload settles)."""
        self.event(ts, name, "transition", new, detail, {"from": old})
        if counts:
            self._change(ts, name, f"{old} -> {new}")

    def reconnect(self, ts: float, name: str) -> None:
        """A link that connected again: counts towards a flap, recorded only as part of one."""
        self._change(ts, name, "reconnected")

    def _change(self, ts: float, name: str, what: str) -> None:
        times = self._changes.setdefault(name, [])
        times.append(ts)
        while times and times[0] < ts - FLAP_WINDOW:
            times.pop(0)
        if len(times) >= FLAP_CHANGES and name not in self._flapping:
            self._flapping.add(name)
            self.event(ts, name, "flap", None, f"{len(times)} changes in {FLAP_WINDOW / 60:g} min (last: {what})")
        elif len(times) < FLAP_CHANGES:
            self._flapping.discard(name)

    def verdict(self, ts: float, name: str, data: dict[str, Any] | None) -> None:
        if not data:
            return
        verdict = data.get("verdict") or {}
        findings = [
            {k: f.get(k) for k in ("code", "severity", "summary", "evidence")}
            for f in data.get("findings") or () if f.get("severity") != "info"
        ]
        self.event(ts, name, "verdict", verdict.get("code"), verdict.get("summary"),
                   {"severity": verdict.get("severity"), "findings": findings})

    def spend(self, ts: float, name: str, mode: str, price: float | None) -> None:
        """A watch session's start (``watch``), end (``end``), or its spend mode from ``ts`` on
        (``bench``/``idle``/``other``: console/core/spend.py), with the price per hour then."""
        self.event(ts, name, "spend", mode, None, {"price": price})

    def restart(self, ts: float, name: str, outcome: str, result: Any) -> None:
        self.event(ts, name, "restart", outcome, None, result)

    def probe(self, ts: float, name: str, probe: str, data: dict[str, Any]) -> None:
        lines = [str(x) for x in data.get("lines") or []]
        self.event(ts, name, "probe", probe, data.get("title"), {"lines": lines[-50:], "total_lines": len(lines)})

    def gpu_sample(self, ts: float, name: str, devices: Iterable[Any]) -> None:
        """One GPU frame's devices (records as the wire has them; absent or null fields are skipped)."""
        minute = int(ts // 60)
        if self._minute is None:
            self._minute = minute
        elif minute != self._minute:
            self._flush_minute()
            self._minute = minute
        per = self._gpus.get(name)
        if per is None:
            per = self._gpus[name] = {}
        for dev in devices:
            index = dev.get("index")
            if index is None or dev.get("lost"):
                continue
            agg = per.get(index)
            if agg is None:
                agg = per[index] = _Agg()
            agg.n += 1
            for field, key, scale in (("util", "util", 1.0), ("temp", "temp", 1.0), ("power", "power", 1.0),
                                      ("mem", "mem_used", 1.0 / 1048576)):
                value = dev.get(key)
                if value is not None and not (isinstance(value, float) and math.isnan(value)):
                    agg.add(field, value * scale)

    def _flush_minute(self) -> None:
        if self._minute is None or not self._gpus:
            return
        rows = [(self._minute, self._id(name), pack_gpus(per)) for name, per in self._gpus.items() if per]
        self._gpus = {}
        if rows:
            self.db.execute("BEGIN")
            self.db.executemany("INSERT OR REPLACE INTO gpu_minutes(minute, name_id, gpus) VALUES (?, ?, ?)", rows)
            self.db.execute("COMMIT")
            self.rows_written += len(rows)

    def flush(self, now: float | None = None) -> None:
        """Write the queued events (and, past a minute boundary, the last minute's GPU rows); prune hourly."""
        now = self.clock() if now is None else now
        if self._minute is not None and int(now // 60) > self._minute:
            self._flush_minute()
            self._minute = None
        if self._events:
            events, self._events = self._events, []
            self.db.execute("BEGIN")
            self.db.executemany(
                "INSERT INTO events(ts, name_id, kind, status, detail, data) VALUES (?, ?, ?, ?, ?, ?)", events)
            self.db.execute("COMMIT")
            self.rows_written += len(events)
        if now - self._last_prune >= PRUNE_EVERY:
            self.prune(now)

    def prune(self, now: float | None = None) -> None:
        """Drop what is older than ``max_days``, then the oldest tenth while the file is over ``max_bytes``."""
        now = self.clock() if now is None else now
        self._last_prune = now
        cutoff = now - self.max_days * 86400
        self.db.execute("DELETE FROM events WHERE ts < ?", (cutoff,))
        self.db.execute("DELETE FROM gpu_minutes WHERE minute < ?", (int(cutoff // 60),))
        for _ in range(20):
            if self.size_bytes() <= self.max_bytes:
                break
            spans = [self.db.execute(sql).fetchone() for sql in (
                "SELECT min(minute) * 60, max(minute) * 60 FROM gpu_minutes", "SELECT min(ts), max(ts) FROM events")]
            spans = [s for s in spans if s[0] is not None]
            if not spans:
                break
            lo, hi = min(s[0] for s in spans), max(s[1] for s in spans)
            if hi <= lo:
                break
            cut = lo + (hi - lo) / 10
            self.db.execute("DELETE FROM gpu_minutes WHERE minute < ?", (int(cut // 60) + 1,))
            self.db.execute("DELETE FROM events WHERE ts < ?", (cut,))
            self.db.execute("PRAGMA incremental_vacuum")
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.db.execute("PRAGMA incremental_vacuum")

    def size_bytes(self) -> int:
        page_count = self.db.execute("PRAGMA page_count").fetchone()[0]
        freelist = self.db.execute("PRAGMA freelist_count").fetchone()[0]
        page_size = self.db.execute("PRAGMA page_size").fetchone()[0]
        return int((page_count - freelist) * page_size)

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self._flush_minute()
            self.flush()
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.db.close()


# -- reading ----------------------------------------------------------------------------------------------


def parse_since(text: str) -> float:
    """``90s``, ``30m``, ``2h``, ``7d`` or plain seconds -> seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    text = text.strip().lower()
    scale = units.get(text[-1:])
    number = text[:-1] if scale else text
    try:
        value = float(number) * (scale or 1)
    except ValueError:
        raise ValueError(f"--since wants a duration like 90s, 30m, 2h or 7d, not {text!r}") from None
    if not 0 < value < 10 * 365 * 86400 or math.isnan(value):
        raise ValueError(f"--since wants a positive duration, not {text!r}")
    return value


class HistoryReader:
    """Read-only queries (another process may be writing)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_history_path()
        self.db = _connect(self.path, readonly=True)

    def close(self) -> None:
        self.db.close()

    def names(self) -> list[str]:
        return [n for (n,) in self.db.execute("SELECT name FROM names ORDER BY name")]

    def events(self, name: str | None = None, since: float = 0.0, kinds: Iterable[str] = ()) -> list[dict[str, Any]]:
        sql = ("SELECT e.ts, n.name, e.kind, e.status, e.detail, e.data FROM events e JOIN names n ON n.id = e.name_id "
               "WHERE e.ts >= ?")
        params: list[Any] = [since]
        if name is not None:
            sql += " AND n.name = ?"
            params.append(name)
        kinds = list(kinds)
        if kinds:
            sql += " AND e.kind IN (%s)" % ",".join("?" * len(kinds))
            params.extend(kinds)
        sql += " ORDER BY e.ts, e.rowid"
        return [
            {"ts": ts, "instance": n, "kind": kind, "status": status, "detail": detail,
             "data": json.loads(data) if data else None}
            for ts, n, kind, status, detail, data in self.db.execute(sql, params)
        ]

    def gpu_minutes(self, name: str, since: float = 0.0) -> Iterator[tuple[float, list[dict[str, Any]]]]:
        """``(minute start, [per-GPU min/avg/max])`` for one instance, oldest first (charts' older points)."""
        rows = self.db.execute(
            "SELECT g.minute, g.gpus FROM gpu_minutes g JOIN names n ON n.id = g.name_id "
            "WHERE g.minute >= ? AND n.name = ? ORDER BY g.minute", (int(since // 60), name))
        for minute, blob in rows:
            yield minute * 60.0, unpack_gpus(blob)

    def gpu_series(self, name: str, since: float = 0.0) -> dict[int, dict[str, list[tuple[float, int, int, int]]]]:
        """Per GPU index, per field (``util`` %, ``temp`` °C, ``power`` W, ``mem`` MiB): ``(minute start, min,
        avg, max)`` oldest first, minutes without a value left out: the GPU tab's older chart points."""
        out: dict[int, dict[str, list[tuple[float, int, int, int]]]] = {}
        for start, gpus in self.gpu_minutes(name, since):
            for rec in gpus:
                per = out.setdefault(rec["gpu"], {})
                for field in FIELDS:
                    s = rec[field]
                    if s is not None:
                        per.setdefault(field, []).append((start, s["min"], s["avg"], s["max"]))
        return out

    def gpu_summary(self, name: str, since: float = 0.0) -> list[dict[str, Any]]:
        """Per GPU over the window: min of mins, mean of averages, max of maxes, and minutes seen."""
        acc: dict[int, dict[str, Any]] = {}
        for _, gpus in self.gpu_minutes(name, since):
            for rec in gpus:
                cur = acc.setdefault(rec["gpu"], {"gpu": rec["gpu"], "minutes": 0})
                cur["minutes"] += 1
                for field in FIELDS:
                    s = rec[field]
                    if s is None:
                        continue
                    f = cur.setdefault(field, {"min": s["min"], "sum": 0, "n": 0, "max": s["max"]})
                    f["min"], f["max"] = min(f["min"], s["min"]), max(f["max"], s["max"])
                    f["sum"] += s["avg"]
                    f["n"] += 1
        out = []
        for index in sorted(acc):
            cur = acc[index]
            for field in FIELDS:
                if field in cur:
                    f = cur[field]
                    cur[field] = {"min": f["min"], "avg": round(f["sum"] / f["n"], 1), "max": f["max"]}
            out.append(cur)
        return out


class HistoryQueries:
    """The UI's reader (console.core.control.HistoryReader): each query opens its own read-only connection,
    so a worker thread may make it. ``flush`` (the writer's, on the writer's thread) runs before a timeline
    read, so that the last second's events are in it."""

    def __init__(self, path: Path, flush: Callable[[], object] | None = None) -> None:
        self.path = path
        self.flush = flush

    def gpu_series(self, name: str, since: float) -> dict[int, dict[str, list[tuple[float, int, int, int]]]]:
        reader = HistoryReader(self.path)
        try:
            return reader.gpu_series(name, since)
        finally:
            reader.close()

    def timeline(self, since: float) -> list[dict[str, Any]]:
        if self.flush is not None:
            with contextlib.suppress(Exception):
                self.flush()
        reader = HistoryReader(self.path)
        try:
            return reader.events(None, since)
        finally:
            reader.close()

# -- `fleet-console history` ----------------------------------------------------------------------------------
