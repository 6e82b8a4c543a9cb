"""``fleet-console report [--since 24h] [--json|--csv]``: the rental bill from the history (report.py)."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import sys
import time
from typing import Any

from console.agent.wire.timefmt import fmt_age
from console.core.spend import fmt_money
from console.monitor.history import HistoryReader, default_history_path, parse_since
from console.monitor.report import spend_report

CSV_FIELDS = ("name", "price_per_hour", "watched_s", "benchmark_s", "idle_s", "spend", "idle_spend", "restarts",
              "verdicts")
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # what a spreadsheet reads as a formula (OWASP CSV injection)


def csv_cell(value: Any) -> str:
    """A cell a spreadsheet shows as text: one that could start a formula gets a leading ``'``."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_START) else text


def to_csv(report: dict[str, Any]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for row in report["instances"]:
        verdicts = ";".join(f"{code}:{n}" for code, n in sorted(row["verdicts"].items()))
        writer.writerow([csv_cell(row[k]) for k in CSV_FIELDS[:-1]] + [csv_cell(verdicts)])
    totals = report["totals"]
    writer.writerow(["TOTAL", *(csv_cell(totals.get(k)) for k in CSV_FIELDS[1:-1]), ""])
    return out.getvalue()


def to_text(report: dict[str, Any], currency: str) -> str:
    rate = f"{currency}/h"
    lines = [f"{'instance':<24} {rate:>8} {'watched':>9} {'benchmark':>9} {'idle':>9} {'spend':>10} "
             f"{'idle spend':>10} restarts"]
    for r in report["instances"]:
        price = "-" if r["price_per_hour"] is None else f"{r['price_per_hour']:.3f}"
        lines.append(f"{r['name'][:24]:<24} {price:>8} {fmt_age(r['watched_s']):>9} {fmt_age(r['benchmark_s']):>9} "
                     f"{fmt_age(r['idle_s']):>9} {fmt_money(r['spend'], currency):>10} "
                     f"{fmt_money(r['idle_spend'], currency):>10} {r['restarts']:>8}")
    t = report["totals"]
    lines.append(f"{'fleet':<24} {t['price_per_hour']:>8.3f} {fmt_age(t['watched_s']):>9} "
                 f"{fmt_age(t['benchmark_s']):>9} {fmt_age(t['idle_s']):>9} {fmt_money(t['spend'], currency):>10} "
                 f"{fmt_money(t['idle_spend'], currency):>10} {t['restarts']:>8}")
    return "\n".join(lines)


def _fleet_prices(args: Any) -> tuple[dict[str, float | None], str]:
    """The fleet file's prices and currency, when there is one (the history's prices come first)."""
    from console.inventory import ConfigError, find_fleet_file, load_fleet

    path = find_fleet_file(getattr(args, "fleet", None))
    if path is None or not path.exists():
        return {}, "$"
    try:
        fleet = load_fleet(path)
    except ConfigError as exc:
        print(f"fleet-console: prices from the history only: {exc}", file=sys.stderr)
        return {}, "$"
    return {i.name: i.price_per_hour for i in fleet.instances}, fleet.currency


def run_report(args: Any) -> int:
    """Print the bill over ``--since`` (default 24h) as a table, JSON or CSV."""
    now = time.time()
    try:
        since = now - parse_since(args.since)
    except ValueError as exc:
        print(f"fleet-console: {exc}", file=sys.stderr)
        return 2
    path = default_history_path()
    if not path.exists():
        print(f"fleet-console: no history yet ({path}); `serve` or the console write it", file=sys.stderr)
        return 2
    prices, currency = _fleet_prices(args)
    try:
        reader = HistoryReader(path)
        try:
            report = spend_report(reader.db, since, now, prices)
        finally:
            reader.close()
    except sqlite3.Error as exc:
        print(f"fleet-console: cannot read {path}: {exc}", file=sys.stderr)
        return 2
    report["currency"] = currency
    if args.json:
        print(json.dumps(report, indent=1))
    elif args.csv:
        sys.stdout.write(to_csv(report))
    else:
        print(to_text(report, currency))
    return 0


__all__ = ["csv_cell", "run_report", "to_csv"]
