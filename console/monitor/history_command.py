"""``fleet-console history [NAME] --since 2h``: what happened, read from the history file (history.py)."""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

from console.agent.wire.wording import code_and_summary, without_code
from console.core.audit import AuditLog
from console.monitor.history import FIELDS, HistoryReader, default_history_path, parse_since


def _when(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def format_event(ev: dict[str, Any]) -> str:
    kind, data = ev["kind"], ev.get("data") or {}
    head = f"{_when(ev['ts'])}  {ev['instance']:<20} "
    if kind == "transition":
        text = f"{data.get('from', '?')} -> {ev['status']}"
    elif kind == "verdict":
        text = f"verdict {ev['status']} ({data.get('severity', '?')})"
    elif kind == "restart":
        text = f"restart {ev['status']}"
    elif kind == "probe":
        text = f"probe {ev['status']} ({data.get('total_lines', 0)} lines)"
    else:
        text = kind
    line = head + text + (f": {without_code(str(ev['status']), str(ev['detail']))}" if ev.get("detail") else "")
    out = [line]
    if kind == "verdict":
        for finding in data.get("findings") or []:
            said = code_and_summary(str(finding.get("code") or "?"), str(finding.get("summary") or ""))
            out.append(f"{'':41}[{finding.get('severity')}] {said}")
            for ev_line in (finding.get("evidence") or [])[:3]:
                where = ev_line.get("path") + (f":{ev_line['line']}" if ev_line.get("line") else "")
                out.append(f"{'':45}{where}: {ev_line.get('text', '')}")
    return "\n".join(out)


def unsettled_actions(name: str | None) -> list[dict[str, Any]]:
    """Sent actions without an outcome: intents of dead consoles (reconciled now, outcome ``unknown``) and the
    intents of consoles still waiting for theirs (``pending``), for ``name`` or all."""
    audit = AuditLog()
    try:
        reconciled = audit.reconcile()
    except OSError:
        reconciled = []
    rows = [{**e, "state": "unknown"} for e in reconciled]
    rows += [{**e, "state": "pending"} for e in audit.pending()]
    return [r for r in rows if name is None or r.get("instance") == name]


def format_unsettled(row: dict[str, Any]) -> str:
    if row["state"] == "pending":
        return (f"{row.get('time')}  {row.get('instance', '?'):<20} {row.get('action')} sent (pid {row.get('pid')}, "
                f"{row.get('origin') or '?'}): outcome not known yet")
    return f"{row.get('time')}  {row.get('instance', '?'):<20} {row.get('action')} outcome unknown: {row.get('note')}"


def run_history(args: Any) -> int:
    """Print the timeline (and, for one instance, its GPUs' min/avg/max) from the history file, then the
    actions sent whose outcome is not known (from the audit log)."""
    import sys

    try:
        since = time.time() - parse_since(args.since)
    except ValueError as exc:
        print(f"fleet-console: {exc}", file=sys.stderr)
        return 2
    unsettled = unsettled_actions(args.name)
    path = default_history_path()
    if not path.exists():
        for row in unsettled:
            print(format_unsettled(row))
        print(f"fleet-console: no history yet ({path}); `serve` or the console write it", file=sys.stderr)
        return 2
    try:
        reader = HistoryReader(path)
        try:
            if args.name is not None and args.name not in reader.names():
                print(f"fleet-console: {args.name}: not in the history ({path})", file=sys.stderr)
                return 2
            events = reader.events(args.name, since)
            gpus = reader.gpu_summary(args.name, since) if args.name is not None else None
        finally:
            reader.close()
    except sqlite3.Error as exc:
        print(f"fleet-console: cannot read {path}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        out: dict[str, Any] = {"since": since, "events": events, "unsettled": unsettled}
        if gpus is not None:
            out["gpus"] = gpus
        print(json.dumps(out, indent=1))
        return 0
    for ev in events:
        print(format_event(ev))
    if not events:
        print(f"nothing since {_when(since)}")
    for row in unsettled:
        print(format_unsettled(row))
    for gpu in gpus or []:
        parts = [f"{f} {gpu[f]['min']}/{gpu[f]['avg']}/{gpu[f]['max']}" for f in FIELDS if f in gpu]
        print(f"GPU {gpu['gpu']} ({gpu['minutes']} min, min/avg/max; mem MiB, power W): " + ", ".join(parts))
    return 0
