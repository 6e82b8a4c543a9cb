"""Toasts and the event timeline (``e``): what the app says, and what it keeps of it (``NoticeBoard``).

On a small screen (a tmux panel) a toast is one line and only the newest few stay, so that they do not hide
the grid. The timeline holds fleet events only, one entry each: the history file's (kept across console runs:
transitions, flaps, verdicts, restarts, probes), read through the controller; with no history, this session's
status changes. Toasts (the command bar's completions, a theme's name, "copied") are not events.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from typing import Any, Dict, Iterable, List, Sequence, Tuple

from textual.app import App
from textual.notifications import Notifications, Notify

from console.core.control import FleetControl
from console.core.status import BADGES
from console.core.text_safety import clean
from widgets.timeline_screen import entry_of, history_line

MAX_NOTIFY_EVENTS = 3  # instances named in one "got worse" toast, then "+N more"
SMALL_SCREEN_ROWS = 40  # below this many rows toasts are one line each, at most SMALL_SCREEN_TOASTS at once
SMALL_SCREEN_TOASTS = 3
TOAST_CHARS = 56  # a one-line toast's text (Toast is 60 wide, less its padding and edge)
EVENT_TOAST_EVERY = 60.0  # seconds: an instance's "got worse" toasts at most this often (the timeline has all)
TIMELINE_DAYS = 7  # how far back the timeline reads the history file

Entry = Tuple[float, str, str]  # (ts, instance, text): one timeline line


def one_line(message: str, title: str = "") -> str:
    """A toast's text in one line of at most ``TOAST_CHARS``; the timeline (``e``) has a fleet event's in full."""
    first = message.split("\n", 1)[0]
    line = ("%s: %s" % (title, first)) if title else first
    if "\n" in message or len(line) > TOAST_CHARS:
        line = line[: TOAST_CHARS - 5].rstrip() + "… (e)"
    return line


def transition_text(old: str, new: str, detail: str) -> str:
    """A status change as the timeline says it, in the history's words: ``OK → FAILED: why``."""
    return history_line({"kind": "transition", "status": new, "detail": detail, "data": {"from": old}})


def worse_toast(fresh: Sequence[Tuple[str, str]]) -> Tuple[str, str]:
    """``(severity, text)`` of the one "got worse" toast naming ``fresh`` ``(instance, status)`` pairs."""
    severity = "error" if any(s in ("failed", "unreachable", "needs_action") for _, s in fresh) else "warning"
    named = ["%s %s" % (n, BADGES.get(s, s)) for n, s in fresh[:MAX_NOTIFY_EVENTS]]
    if len(fresh) > MAX_NOTIFY_EVENTS:
        named.append("+%d more" % (len(fresh) - MAX_NOTIFY_EVENTS))
    return severity, ", ".join(named)


def drop_oldest_toasts(notes: Notifications) -> None:
    """Make room for one more toast on a small screen (``notes``: the app's)."""
    while len(notes) >= SMALL_SCREEN_TOASTS:
        del notes[min(notes, key=lambda n: n.raised_at)]


def timeline_entries(session: Iterable[Entry], control: FleetControl, limit: int = 500) -> List[Entry]:
    """``(ts, instance, text)`` newest first, one per fleet event: the history file's events when it is kept
    (transitions, flaps, verdicts, restarts with pids, probes; written before it is read), else this session's
    status changes (``session``) — never both, which said each change twice."""
    if not control.keeps_history:
        return sorted(session, key=lambda e: -e[0])[:limit]
    out: List[Entry] = []
    with contextlib.suppress(Exception):
        out = [entry_of(ev) for ev in control.history_events(time.time() - TIMELINE_DAYS * 86400)[-limit:]]
    out.sort(key=lambda e: -e[0])
    return out


class NoticeBoard(App[None]):
    """The app's notices, kept for the tests (``notices``); on a small screen one line each and only the newest
    few. Changes for the worse (``report_events``) go to ``session_events`` (the timeline with no history) and
    are toasted at most once a minute per instance, with the terminal's bell when ``bell_enabled``."""

    # Toasts stand above the footer and the input row over it (the log's search, filter and grep box), not on
    # it: at 80x24 a toast used to cover what the operator was typing.
    CSS = "ToastRack { margin-bottom: 2; }"

    def __init__(self) -> None:
        super().__init__()
        self.bell_enabled = False
        self.notices: deque[Tuple[str, str, str]] = deque(maxlen=100)  # (severity, title, message): notify()
        self.session_events: deque[Entry] = deque(maxlen=500)  # this session's status changes (the timeline's)
        self._event_toasted: Dict[str, float] = {}  # instance -> when its last "got worse" toast was shown

    def notify(self, message: str, *, title: str = "", severity: str = "information", **kwargs: Any) -> None:
        """A toast (not a timeline event: the fleet's events come from the state and the history); on a small
        screen one line."""
        # the second way in for host text (controller results and errors: a verdict, a restart's log tail)
        message, title = clean(message, keep_newlines=True), clean(title)
        self.notices.append((severity, title, message))
        if self.size.height < SMALL_SCREEN_ROWS:
            message, title = one_line(message, title), ""
        kwargs["markup"] = False  # notices carry host text and instance names: never markup (widgets pass True)
        super().notify(message, title=title, severity=severity, **kwargs)  # type: ignore[arg-type]

    def _on_notify(self, event: Notify) -> None:
        """In a tmux panel a stack of toasts would hide the grid: there only the newest few (one line each).

        Runs before Textual's own handler (which adds the new notification), so it drops the oldest ones.
        """
        if self.size.height < SMALL_SCREEN_ROWS:
            drop_oldest_toasts(self._notifications)

    def report_events(self, events: List[Tuple[Any, ...]]) -> None:
        """Status changes for the worse: each one in the timeline; one short toast naming the instances,
        an instance at most once per ``EVENT_TOAST_EVERY`` (a flapping host does not toast every 30 s)."""
        now = time.time()
        fresh = []
        for n, o, s, d in events:
            self.session_events.append((now, n, transition_text(o, s, d)))
            if now - self._event_toasted.get(n, -1e18) >= EVENT_TOAST_EVERY:
                self._event_toasted[n] = now
                fresh.append((n, s))
        if not fresh:
            return
        severity, named = worse_toast(fresh)
        self.notices.append((severity, "Got worse", named))
        small = self.size.height < SMALL_SCREEN_ROWS
        message = one_line(named, "Got worse" if small else "")
        super().notify(
            message, title="" if small else "Got worse", severity=severity, timeout=8, markup=False  # type: ignore[arg-type]
        )
        if self.bell_enabled:
            self.bell()


__all__ = ["Entry", "NoticeBoard", "drop_oldest_toasts", "one_line", "timeline_entries", "transition_text",
           "worse_toast"]
