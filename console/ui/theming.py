"""The console's theme: chosen at start (``--theme``, else the one remembered, else the default), ``t``
cycles, and whatever theme is shown last (``t``, ``:theme``, the palette's picker) is remembered."""

from __future__ import annotations

from typing import Optional

from textual.app import App

from themes import DEFAULT_THEME, THEMES, next_theme, picked_theme, remember_theme, saved_theme

PICKER_WAIT = 0.5  # seconds between looks at whether the palette's theme picker has closed


def choose_theme(app: App[None], asked: Optional[str]) -> str:
    """Register the console's themes and show ``asked`` (else the remembered one); returns a warning ("" if
    none) when that theme is unknown and the default is shown instead."""
    for theme in THEMES.values():
        app.register_theme(theme)
    warning = ""
    chosen = asked or saved_theme() or DEFAULT_THEME
    if chosen not in app.available_themes:
        warning = "unknown theme %r, using %s" % (chosen, DEFAULT_THEME)
        chosen = DEFAULT_THEME
    app.theme = chosen
    if asked and not warning:
        remember_theme(chosen)
    return warning


def remember_shown_theme(app: App[None]) -> None:
    """Remember the theme shown, once the palette's picker (which previews each theme it passes over) closed."""
    if type(app.screen).__name__ == "CommandPalette":
        app.set_timer(PICKER_WAIT, lambda: remember_shown_theme(app))  # still browsing: what it closes on counts
        return
    if app.theme != saved_theme():
        remember_theme(app.theme)


def cycle_theme(app: App[None]) -> None:
    """``t``: the next theme (dark, light, high-contrast, the operator's pick), remembered."""
    name = next_theme(app.theme, picked_theme())
    app.theme = name
    remember_theme(name)
    app.notify("theme: %s" % name, timeout=2)


__all__ = ["choose_theme", "cycle_theme", "remember_shown_theme"]
