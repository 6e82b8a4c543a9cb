"""The event timeline (``e``): every transition, flap, verdict, restart (with pids) and probe, newest first.

Entries come from the history file (``console/monitor/history.py``: kept across console runs, bounded) and from this
session's notices; the screen only lays them out.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Tuple

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from console.core.status import BADGES
from console.core.text_safety import clean

Entry = Tuple[float, str, str]  # (ts, instance, text)


def history_line(ev: Dict[str, Any]) -> str:
    """One history event (``HistoryReader.events`` row) as one line of text."""
    kind, data, status = ev.get("kind"), ev.get("data") or {}, ev.get("status")
    detail = ev.get("detail") or ""
    if kind == "transition":
        old = data.get("from") or "?"
        text = "%s → %s" % (BADGES.get(old, old), BADGES.get(status or "", status or "?"))
    elif kind == "verdict":
        text = "verdict %s (%s)" % (status, data.get("severity") or "?")
    elif kind == "restart":
        started = (data.get("started") or {}) if isinstance(data, dict) else {}
        text = "restart %s" % (status or "")
        if started.get("pid"):
            text += ", started pid %s%s" % (started["pid"], "" if started.get("alive", True) else " (died at once)")
    elif kind == "probe":
        text = "probe %s (%s lines)" % (status, data.get("total_lines", 0))
    elif kind == "flap":
        text = "flapping"
    else:
        text = str(kind)
    return text + (": " + detail if detail else "")


def timeline_text(entries: List[Entry]) -> Text:
    text = Text(no_wrap=True, overflow="ellipsis")
    if not entries:
        text.append("Nothing yet: transitions, verdicts, restarts and probes show here.", "dim")
        return text
    today = time.strftime("%Y-%m-%d")
    for ts, name, line in entries:
        day = time.strftime("%Y-%m-%d", time.localtime(ts))
        stamp = time.strftime("%H:%M:%S" if day == today else "%m-%d %H:%M", time.localtime(ts))
        text.append("%-11s " % stamp, "dim")
        if name:
            text.append("%s  " % clean(name), "bold")
        text.append(clean(line, keep_newlines=True).replace("\n", " · ") + "\n")  # history files are host text
    return text


class TimelineScreen(Screen[None]):
    """Newest first; ``esc``, ``q`` or ``e`` go back."""

    DEFAULT_CSS = """
    TimelineScreen #timeline-title { height: 1; background: $panel; padding: 0 1; }
    TimelineScreen VerticalScroll { height: 1fr; }
    TimelineScreen #timeline { width: auto; padding: 0 1; }
    """
    BINDINGS = [
        Binding("escape", "close", "Back"),
        Binding("q", "close", "Back", show=False),
        Binding("e", "close", "Back", show=False),
    ]

    def __init__(self, entries: List[Entry]) -> None:
        super().__init__()
        self.entries = entries

    def compose(self) -> ComposeResult:
        yield Static(" Events — newest first (%d) " % len(self.entries), id="timeline-title")
        with VerticalScroll():
            yield Static(timeline_text(self.entries), id="timeline")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(VerticalScroll).focus()

    def action_close(self) -> None:
        self.dismiss(None)
