"""Textual's Footer without its leak and without needless rebuilds (seen on the pinned Textual 8).

Rebuilds: Textual recomposes the footer (removes and mounts every key, each restyled) on every "bindings
updated" signal, which fires several times for one screen switch or focus change even when the keys shown
stay the same: ~8 rebuilds of ~9 keys per instance-screen visit, a good part of opening and leaving one. This
footer rebuilds only when what it would show (key, label, action, enabled, tooltip) differs from what it shows.

Leak: every recompose left the old keys alive.

``Footer.compose`` binds each ``FooterKey`` with ``data_bind(compact=Footer.compact)``, which stores
``(key, setter)`` in the footer's own watcher list. Textual prunes that list only when ``compact`` changes
(never, here), so each recompose -- every screen switch and focus change on the fleet screen -- kept the
~9 removed keys with their styles, caches and strips: ~0.45 MB per instance-screen visit. This footer
drops the entries of keys that have left the DOM before it composes its new ones.
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer as TextualFooter


class Footer(TextualFooter):
    """The footer to use on long-lived screens (the fleet screen, the instance screen)."""

    _shown: tuple[Any, ...] | None = None  # what the last compose showed
    rebuilds = 0

    def compose(self) -> ComposeResult:
        self.prune_watchers()
        self._shown = self._what_it_shows() if self._bindings_ready else None
        self.rebuilds += 1
        yield from super().compose()

    def bindings_changed(self, screen: Screen[Any]) -> None:
        if (self._shown is not None and self.is_attached and screen is self.screen and screen.app.app_focus
                and self._what_it_shows() == self._shown):
            return  # the same keys: nothing to rebuild
        super().bindings_changed(screen)

    def _what_it_shows(self) -> tuple[Any, ...]:
        return (self.compact, self.show_command_palette, tuple(
            (b.key, b.key_display, b.description, b.action, b.group, enabled, tooltip)
            for (_, b, enabled, tooltip) in self.screen.active_bindings.values() if b.show))

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
