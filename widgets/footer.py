"""The footer: the keys that matter where the operator is, most important first, cut between keys, never in a word.

What it shows: every binding the focus chain offers (``Screen.active_bindings``, ``show=True``; an action's
``check_action`` hides what does not apply, as ``A`` for an instance with no unknown host key), one key per
action, in ``PRIORITY`` order (actions not listed come after those listed). What fits the screen's width is
shown; the rest (the help, ``?``, lists every key) is dropped as whole entries from the least important, so
an 80-column terminal shows the leading keys in full instead of a row cut mid-word.

Rebuilds: Textual recomposes the footer (removes and mounts every key, each restyled) on every "bindings
updated" signal, which fires several times for one screen switch or focus change even when the keys shown
stay the same. This footer rebuilds only when what it would show (key, label, action, enabled, tooltip, and
what fits) differs from what it shows; it also looks twice a second, for keys whose ``check_action`` follows
the fleet (an instance that comes to need its host key accepted) rather than the focus.

Leak: ``Footer.compose`` binds each ``FooterKey`` with ``data_bind(compact=Footer.compact)``, which stores
``(key, setter)`` in the footer's own watcher list; Textual prunes that list only when ``compact`` changes
(never, here), so each recompose kept the removed keys with their styles, caches and strips. This footer
drops the entries of keys that have left the DOM before it composes its new ones.
"""

from __future__ import annotations

import re
from typing import Any, List, NamedTuple, Sequence, Tuple

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer as TextualFooter
from textual.widgets._footer import FooterKey

# Actions by importance, most first (no namespace, no arguments). The keys the operator needs where they are
# come first: leave, accept a host key, help, quit, then the fleet actions, the log's own keys, the rest.
PRIORITY: Tuple[str, ...] = (
    "back", "accept_host_key", "help", "quit", "replay_pause", "replay_seek", "replay_speed",
    "open", "diagnose", "diagnose_current", "restart", "restart_current", "refuse_restart",
    "filter", "search", "command", "shell", "probe", "probe_current", "toggle_view", "copy",
    "toggle_follow", "toggle_wrap", "toggle_select", "select_shown",
    "timeline", "reload", "cycle_theme", "command_palette",
)
RANK = {action: k for k, action in enumerate(PRIORITY)}
POLL_SECONDS = 0.5  # how often the keys that follow the fleet (check_action) are looked at again


class Entry(NamedTuple):
    """One key as the footer shows it."""

    key: str
    key_display: str
    description: str
    action: str
    enabled: bool
    tooltip: str

    @property
    def width(self) -> int:
        """Cells it takes in the compact footer: the key, a space, the description, a margin."""
        return len(self.key_display) + 1 + len(self.description) + 1


def base_action(action: str) -> str:
    """``app.restart_current`` -> ``restart_current``; ``next_log(1)`` -> ``next_log``."""
    return re.sub(r"\(.*\)$", "", action.rsplit(".", 1)[-1])


def fit(entries: Sequence[Entry], width: int) -> List[Entry]:
    """``entries`` in priority order, the leading ones whose widths fit ``width`` (whole entries only)."""
    ordered = sorted(enumerate(entries), key=lambda ie: (RANK.get(base_action(ie[1].action), len(RANK)), ie[0]))
    shown: List[Entry] = []
    used = 0
    for _, entry in ordered:
        if used + entry.width > width:
            break
        shown.append(entry)
        used += entry.width
    return shown


class Footer(TextualFooter):
    """The footer to use on long-lived screens (the fleet screen, the instance screen)."""

    _shown: Tuple[Any, ...] | None = None  # what the last compose showed
    rebuilds = 0

    def __init__(self) -> None:
        super().__init__(compact=True, show_command_palette=False)  # (the palette key is an entry like the others)

    def on_mount(self) -> None:
        super().on_mount()
        self.set_interval(POLL_SECONDS, self._poll)

    def compose(self) -> ComposeResult:
        self.prune_watchers()
        if not self._bindings_ready:
            self._shown = None
            return
        shown = self._what_it_shows()
        self._shown = shown
        self.rebuilds += 1
        for entry in shown[1]:
            yield FooterKey(entry.key, entry.key_display, entry.description, entry.action,
                            disabled=not entry.enabled, tooltip=entry.tooltip).data_bind(compact=Footer.compact)

    def bindings_changed(self, screen: Screen[Any]) -> None:
        if (self._shown is not None and self.is_attached and screen is self.screen and screen.app.app_focus
                and self._what_it_shows() == self._shown):
            return  # the same keys: nothing to rebuild
        super().bindings_changed(screen)

    def on_resize(self) -> None:
        self._poll()

    def _poll(self) -> None:
        """Rebuild when the keys that apply or the room for them changed (not while another screen is shown)."""
        if self._shown is not None and self.is_attached and self.screen.is_current \
                and self._what_it_shows() != self._shown:
            self.call_after_refresh(self.recompose)

    def entries(self) -> List[Entry]:
        """Every key the focus chain offers with ``show=True``, one per action."""
        out: List[Entry] = []
        seen = set()
        for _, binding, enabled, tooltip in self.screen.active_bindings.values():
            if not binding.show or binding.action in seen:
                continue
            seen.add(binding.action)
            out.append(Entry(binding.key, self.app.get_key_display(binding), binding.description, binding.action,
                             enabled, tooltip or ""))
        return out

    def _what_it_shows(self) -> Tuple[Any, ...]:
        width = self.app.size.width or self.size.width or 80
        return (self.compact, tuple(fit(self.entries(), width)))

    def prune_watchers(self) -> int:
        """Forget watchers whose widget was removed (recompose removes the old keys first); how many."""
        watchers = getattr(self, "__watchers", None)
        if not watchers:
            return 0
        dropped = 0
        for entries in watchers.values():
            alive = [(node, cb) for node, cb in entries if node is self or _alive(node)]
            dropped += len(entries) - len(alive)
            entries[:] = alive
        return dropped


def _alive(node: object) -> bool:
    return not getattr(node, "_closing", False) and bool(getattr(node, "is_attached", True))


__all__ = ["PRIORITY", "Entry", "Footer", "fit"]
