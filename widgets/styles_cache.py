"""Textual's per-widget caches outlive their widgets (seen on the pinned Textual 8.2).

``StylesCache.get_inner_outer`` is an ``lru_cache(1024)`` on an instance method, so its keys hold up to
1024 ``StylesCache`` objects -- one per widget that ever rendered -- and each keeps the widget's rendered
lines (``Strip``s with their own crop/style caches) after the widget is gone: ~1.5 MB per instance-screen
visit until the 1024 entries are full (+16 MB in the first ten visits of the soak, bench/soak.py).
Clearing that cache when a screen closes lets the removed widgets' lines go; the colour pair it caches is
recomputed on the next paint (two ``Style`` objects).
"""

from __future__ import annotations

from textual._styles_cache import StylesCache
from textual.widget import Widget


def release_dead_line_caches() -> None:
    """Drop Textual's references to the line caches of removed widgets (no-op if Textual changes)."""
    clear = getattr(getattr(StylesCache, "get_inner_outer", None), "cache_clear", None)
    if clear is not None:
        clear()


def release_query_caches(root: Widget) -> None:
    """Drop the ``query_one`` results cached under ``root`` (Textual 8.2 keys them by a change counter, so a
    removed child stays referenced until 1024 newer queries push it out: a tab bar emptied and refilled for
    every instance shown would keep each old tab). The next query walks the DOM once and caches again."""
    for node in root.walk_children(with_self=True):
        cache = getattr(node, "_query_one_cache", None)
        if cache is not None:
            cache.clear()
