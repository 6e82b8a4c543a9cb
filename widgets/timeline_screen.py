"""The event timeline (``e``): every transition, flap, verdict, restart (with pids) and probe, newest first.

Entries come from the history file (``console/monitor/history.py``: kept across console runs, bounded) or, with no
history, from this session's status changes (console/ui/notices.py); the screen only lays them out. An entry is one
line, cut with "…" where it does not fit; ``enter`` shows it in full: wrapped under its text (a hanging indent),
with its details (a verdict's findings and evidence, a restart's pids and log tail, a probe's output).
"""

from __future__ import annotations

import time
from typing import Any, ClassVar, Dict, List, Set, Tuple

from rich.console import Console
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from console.core.status import BADGES
from console.core.text_safety import clean

from .footer import Footer  # the console's footer: whole keys only, most important first

Entry = Tuple[float, str, str]  # (ts, instance, text): the text's first line is the entry, the rest its details

STAMP_WIDTH = 12  # "HH:MM:SS" or "mm-dd HH:MM", padded, and a space
MAX_DETAIL_LINES = 40  # lines of details an expanded entry shows (a probe keeps 50 in the history)
EMPTY = "Nothing yet: transitions, verdicts, restarts and probes show here."


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


def history_details(ev: Dict[str, Any]) -> List[str]:
    """What an expanded entry shows under its line: findings and evidence, pids stopped, log tail, probe output."""
    kind, data = ev.get("kind"), ev.get("data")
    if not isinstance(data, dict):
        return []
    lines: List[str] = []
    if kind == "verdict":
        for finding in data.get("findings") or []:
            summary = finding.get("summary") or finding.get("code")
            if summary != ev.get("detail"):  # the verdict's own finding: its line says it already
                lines.append("%s: %s" % (finding.get("severity") or "?", summary))
            for ev_line in finding.get("evidence") or []:
                if isinstance(ev_line, dict):
                    lines.append("  %s:%s: %s" % (ev_line.get("path"), ev_line.get("line"), ev_line.get("text")))
    elif kind == "restart":
        stopped = [str(p.get("pid") if isinstance(p, dict) else p) for p in data.get("stopped") or []]
        if stopped:
            lines.append("stopped pid %s" % ", ".join(stopped))
        if data.get("error"):
            lines.append(str(data["error"]))
        started = data.get("started") if isinstance(data.get("started"), dict) else {}
        tail = (started or {}).get("log_tail") or []
        if tail:
            lines.append("last lines of %s:" % (data.get("log") or "its output"))
            lines.extend("  " + str(line) for line in tail)
    elif kind == "probe":
        lines.extend(str(line) for line in data.get("lines") or [])
    return lines


def entry_of(ev: Dict[str, Any]) -> Entry:
    """A history event as a timeline entry: its line, then its details."""
    return ev["ts"], ev["instance"], "\n".join([history_line(ev), *history_details(ev)])


def stamp(ts: float, today: str) -> str:
    day = time.strftime("%Y-%m-%d", time.localtime(ts))
    return time.strftime("%H:%M:%S" if day == today else "%m-%d %H:%M", time.localtime(ts))


def entry_text(entry: Entry, width: int, expanded: bool, today: str) -> Text:
    """One entry at ``width`` columns: one line cut with "…", or (``expanded``) all of it under a hanging indent."""
    ts, name, body = entry
    lines = clean(body, keep_newlines=True).split("\n")  # history files are host text
    head = Text(("%-11s " % stamp(ts, today))[:STAMP_WIDTH], "dim")
    if name:
        head.append("%s  " % clean(name), "bold")
    indent = head.cell_len
    room = max(10, width - indent)
    first = Text(lines[0])
    if not expanded:
        more = len(lines) > 1 or first.cell_len > room
        if first.cell_len > room or len(lines) > 1:
            first.truncate(room - 1)
            first.append("…", "bold" if more else "")
        return head + first
    out = Text()
    for k, line in enumerate(lines[: MAX_DETAIL_LINES + 1]):
        part = Text(line, "" if k == 0 else "dim")
        for j, row in enumerate(part.wrap(_CONSOLE, room)):
            if out:
                out.append("\n")
            out.append_text(head if k == 0 and j == 0 else Text(" " * indent))
            out.append_text(row)
    if len(lines) > MAX_DETAIL_LINES + 1:
        out.append("\n" + " " * indent + "(+%d lines)" % (len(lines) - MAX_DETAIL_LINES - 1), "dim")
    return out


_CONSOLE = Console(width=1000)  # Text.wrap asks a console for its tab size and overflow only


class TimelineList(OptionList):
    """The entries, one option each; ``enter`` expands or folds the one under the cursor."""

    BINDINGS = [Binding("enter", "select", "Expand/fold")]  # OptionList's own enter, named in the footer

    def __init__(self, entries: List[Entry]) -> None:
        super().__init__(id="timeline")
        self.entries = entries
        self.expanded: Set[int] = set()
        self._width = 0

    def on_resize(self, event: events.Resize) -> None:
        self.relayout()

    def text_width(self) -> int:
        return max(20, self.scrollable_content_region.width - 2)  # (an option's own padding)

    def relayout(self) -> None:
        """The prompts at the list's width (at mount and on each resize: a cut line is cut where the screen ends)."""
        width = self.text_width()
        if width == self._width and self.option_count:
            return
        self._width = width
        today = time.strftime("%Y-%m-%d")
        highlighted = self.highlighted
        self.clear_options()
        if not self.entries:
            self.add_option(Option(Text(EMPTY, "dim"), disabled=True))
            return
        self.add_options([Option(entry_text(e, width, k in self.expanded, today)) for k, e in enumerate(self.entries)])
        self.highlighted = highlighted if highlighted is not None else 0

    def toggle(self, index: int) -> None:
        if not 0 <= index < len(self.entries):
            return
        self.expanded ^= {index}
        text = entry_text(self.entries[index], self.text_width(), index in self.expanded, time.strftime("%Y-%m-%d"))
        self.replace_option_prompt_at_index(index, text)


class TimelineScreen(Screen[None]):
    """Newest first; ``enter`` shows an entry in full; ``esc``, ``q`` or ``e`` go back.

    The grid's keys that act on its cursor's instance (``r``, ``d``, ``p``, ``s``, ``y``) and its own (``/``,
    ``:``, ``v``) are taken here and do nothing: the instance they would act on is not on this screen."""

    DEFAULT_CSS = """
    TimelineScreen #timeline-title { height: 1; background: $panel; padding: 0 1; }
    TimelineScreen #timeline { height: 1fr; border: none; padding: 0; }
    TimelineScreen #timeline:focus { border: none; }
    """
    BINDINGS: ClassVar[List[BindingType]] = [
        Binding("escape", "back", "Back"),  # ("back": the footer's first key, as on the instance screen)
        Binding("q", "back", "Back", show=False),
        Binding("e", "back", "Back", show=False),
        *(Binding(key, "ignore", show=False) for key in ("slash", "colon", "r", "d", "p", "s", "y", "v")),
    ]

    def __init__(self, entries: List[Entry]) -> None:
        super().__init__()
        self.entries = entries

    def compose(self) -> ComposeResult:
        yield Static(" Events — newest first (%d) · enter: the whole entry " % len(self.entries), id="timeline-title")
        yield TimelineList(self.entries)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(TimelineList).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.query_one(TimelineList).toggle(event.option_index)

    def action_ignore(self) -> None:
        """A grid key with nothing to act on here."""

    def action_back(self) -> None:
        self.dismiss(None)
