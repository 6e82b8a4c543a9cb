"""Rich styles for the panes, built from a theme's CSS variables.

Panes are drawn with the Line API, not TCSS, so their colours come from the theme's variables here:
one ``Palette`` per theme, rebuilt when the theme changes. ``Palette.from_theme`` builds one without an
App (tests, benchmarks).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from rich.style import Style
from textual.color import Color
from textual.theme import Theme

from console.core.status import THEME_DEFAULTS, THEME_VARS


class Palette:
    """Rich styles for the current theme (rebuilt when the theme changes)."""

    def __init__(self, variables: Dict[str, str], base: Style) -> None:
        def color(name: str, default: str) -> str:
            value = variables.get(name) or default
            return value

        def style(name: str, default: str, **kw: Any) -> Style:
            try:  # (a colour with alpha, as foreground-muted, is laid over the background: rich has no alpha)
                return Style(color=_over(color(name, default), bg), **kw)
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
        fg = color("foreground", "#e4e4e4")
        try:
            # the cursor row: a neutral shade between back- and foreground, so that the row shows (also under
            # high-contrast, where primary-background is near black) and util, sparkline and marker, all in
            # the primary colour, keep their contrast (light's primary-background is the primary itself)
            self.cursor = Style(bgcolor=_mix(bg, fg, CURSOR_MIX))
        except Exception:
            self.cursor = Style(reverse=True)
        self.selected = style("accent", "#ffaf00", bold=True)
        # pane borders: the theme's, unless it is lost on the background (dark's generated #171717 on #121212)
        edge = _solid(color("border-blurred", "#585858"))
        try:
            if contrast(edge, bg) < BORDER_CONTRAST:
                edge = _mix(bg, fg, BORDER_MIX)
            self.border = Style(color=edge)
        except Exception:
            self.border = Style(dim=True)
        self.border_focus = style("primary", "#5fafff", bold=True)

    @classmethod
    def from_theme(cls, theme: Theme, base: Optional[Style] = None) -> Palette:
        """The palette an App on ``theme`` would build: the status colour defaults, the theme's color system,
        then the theme's own variables."""
        variables = {**THEME_DEFAULTS, **theme.to_color_system().generate(), **theme.variables}
        return cls(variables, base if base is not None else Style())


CURSOR_MIX = 0.2  # the cursor row's background: this far from the background towards the foreground
BORDER_MIX = 0.4  # a pane border's colour when the theme's is too faint
BORDER_CONTRAST = 2.0  # a border at least this far (WCAG ratio) from the background


def _mix(a: str, b: str, amount: float) -> str:
    return Color.parse(_solid(a)).blend(Color.parse(_solid(b)), amount).hex6


def _luminance(value: str) -> float:
    def channel(c: int) -> float:
        x = c / 255
        return x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4

    c = Color.parse(_solid(value))
    return 0.2126 * channel(c.r) + 0.7152 * channel(c.g) + 0.0722 * channel(c.b)


def contrast(a: str, b: str) -> float:
    """The WCAG contrast ratio of two colours (1: the same, 21: black on white)."""
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def _over(value: str, bg: str) -> str:
    """``value`` as rich can take it: ``#rrggbbaa`` blended over ``bg`` (muted text: ``#E4E4E499``)."""
    if value.startswith("#") and len(value) == 9:
        return Color.parse(_solid(bg)).blend(Color.parse(value[:7]), int(value[7:], 16) / 255).hex6
    return value


def _solid(value: str) -> str:
    """Theme variables can carry alpha (``#rrggbbaa``); rich wants ``#rrggbb``."""
    if value.startswith("#") and len(value) == 9:
        return value[:7]
    return value
