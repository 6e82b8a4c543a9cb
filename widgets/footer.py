"""Textual's Footer without its leak: every recompose left the old keys alive (seen on the pinned Textual 8).

``Footer.compose`` binds each ``FooterKey`` with ``data_bind(compact=Footer.compact)``, which stores
``(key, setter)`` in the footer's own watcher list. Textual prunes that list only when ``compact`` changes
(never, here), so each recompose -- every screen switch and focus change on the fleet screen -- kept the
~9 removed keys with their styles, caches and strips: ~0.45 MB per instance-screen visit. This footer
drops the entries of keys that have left the DOM before it composes its new ones.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import Footer as TextualFooter


class Footer(TextualFooter):
    """The footer to use on long-lived screens (the fleet screen, the instance screen)."""

    def compose(self) -> ComposeResult:
        self.prune_watchers()
        yield from super().compose()

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
