"""Rich styles for the panes, built from a theme's CSS variables.

Panes are drawn with the Line API, not TCSS, so their colours come from the theme's variables here:
one ``Palette`` per theme, rebuilt when the theme changes. ``Palette.from_theme`` builds one without an
App (tests, benchmarks).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from rich.style import Style
from textual.theme import Theme

from console.status import THEME_DEFAULTS, THEME_VARS


class Palette:
    """Rich styles for the current theme (rebuilt when the theme changes)."""

    def __init__(self, variables: Dict[str, str], base: Style) -> None:
        def color(name: str, default: str) -> str:
            value = variables.get(name) or default
            return value

        def style(name: str, default: str, **kw: Any) -> Style:
            try:
                return Style(color=color(name, default), **kw)
            except Exception:
                return Style(**kw)

        self.base = base
        self.status: Dict[str, Style] = {}
        self.badge: Dict[str, Style] = {}
        bg = color("background", "#000000")
        for status, var in THEME_VARS.items():
            fg = color(var, "#ffffff")
            try:
                self.status[status] = Style(color=fg)
                self.badge[status] = Style(color=bg, bgcolor=fg, bold=True)
            except Exception:
                self.status[status] = Style(bold=True)
                self.badge[status] = Style(reverse=True, bold=True)
        self.dim = style("foreground-muted", "#888888")
        self.name = Style(bold=True)
        self.spark = style("spark", "#5fafff")
        self.util = style("primary", "#5fafff")
        self.mem = style("secondary", "#0087af")
        self.warn = style("warning", "#ffaf00")
        self.error = style("error", "#ff5f5f")
        self.demo = style("accent", "#ffaf00", bold=True)
        try:
            self.cursor = Style(bgcolor=_solid(color("primary-background", "") or color("panel", "#303030")))
        except Exception:
            self.cursor = Style(reverse=True)
        self.selected = style("accent", "#ffaf00", bold=True)
        self.border = style("border-blurred", "#585858")
        self.border_focus = style("primary", "#5fafff", bold=True)

    @classmethod
    def from_theme(cls, theme: Theme, base: Optional[Style] = None) -> Palette:
        """The palette an App on ``theme`` would build: the status colour defaults, the theme's color system,
        then the theme's own variables."""
        variables = {**THEME_DEFAULTS, **theme.to_color_system().generate(), **theme.variables}
        return cls(variables, base if base is not None else Style())


def _solid(value: str) -> str:
    """Theme variables can carry alpha (``#rrggbbaa``); rich wants ``#rrggbb``."""
    if value.startswith("#") and len(value) == 9:
        return value[:7]
    return value
