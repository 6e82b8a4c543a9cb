"""Textual's per-widget line caches outlive their widgets (seen on the pinned Textual 8.2).

``StylesCache.get_inner_outer`` is an ``lru_cache(1024)`` on an instance method, so its keys hold up to
1024 ``StylesCache`` objects -- one per widget that ever rendered -- and each keeps the widget's rendered
lines (``Strip``s with their own crop/style caches) after the widget is gone: ~1.5 MB per instance-screen
visit until the 1024 entries are full (+16 MB in the first ten visits of the soak, bench/soak.py).
Clearing that cache when a screen closes lets the removed widgets' lines go; the colour pair it caches is
recomputed on the next paint (two ``Style`` objects).
"""

from __future__ import annotations

from textual._styles_cache import StylesCache


def release_dead_line_caches() -> None:
    """Drop Textual's references to the line caches of removed widgets (no-op if Textual changes)."""
    clear = getattr(getattr(StylesCache, "get_inner_outer", None), "cache_clear", None)
    if clear is not None:
        clear()
