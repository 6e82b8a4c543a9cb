"""Small text builders shared by the panes and the instance screen (bars, sparklines, sizes)."""

from __future__ import annotations

from itertools import islice
from typing import Deque, Dict, List, Optional, Reversible, Sequence, Tuple, Union

from rich.cells import cell_len, set_cell_size
from rich.segment import Segment
from rich.style import Style

from console.agent.wire.wording import operator_text as operator_text  # re-exported: the widgets import it here

SPARK = "▁▂▃▄▅▆▇█"
EIGHTHS = " ▏▎▍▌▋▊▉"


def bar(fraction: Optional[float], width: int) -> str:
    """A horizontal bar of ``width`` cells (eighth-cell resolution); blank dots when unknown."""
    if width <= 0:
        return ""
    if fraction is None:
        return "·" * width
    fraction = min(1.0, max(0.0, fraction))
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    full = min(full, width)
    out = "█" * full
    if full < width:
        out += EIGHTHS[part] if part else "░"
        out += "░" * (width - full - 1)
    return out


def _spark_char(v: int) -> str:
    return " " if v < 0 else SPARK[min(7, v * 8 // 101)]


_SPARK_OF = {v: _spark_char(v) for v in range(-1, 101)}  # the usual values, looked up (a pane draws ~250 a paint)


def sparkline(values: Union[Sequence[int], Deque[int]], width: int) -> str:
    """The last ``width`` samples (0..100; negative = unknown) as block characters."""
    if width <= 0:
        return ""
    recent = values[-width:] if isinstance(values, (list, tuple)) else tail(values, width)
    chars = _SPARK_OF
    return "".join([chars.get(v) or _spark_char(v) for v in recent]).rjust(width)


def tail(values: Reversible[int], count: int) -> List[int]:
    """The last ``count`` items of a deque or list (cheap for deques: taken from the right, in C)."""
    out = list(islice(reversed(values), max(0, count)))
    out.reverse()
    return out


def size(n: Optional[float]) -> str:
    """Bytes in short human units (1.2G)."""
    if n is None:
        return "?"
    n = float(n)
    for unit in ("B", "K", "M", "G", "T"):
        if abs(n) < 1024 or unit == "T":
            if unit == "B":
                return "%d%s" % (n, unit)
            return ("%.1f%s" % (n, unit)) if abs(n) < 10 else ("%d%s" % (n, unit))
        n /= 1024
    return "?"


def pct(v: Optional[float]) -> str:
    return "  ?%" if v is None else "%3d%%" % v


def changed_runs(old: Sequence[object], new: Sequence[object]) -> List[Tuple[int, int]]:
    """``(first, count)`` of each run of lines that differ between two renders of a widget (a line only one of
    them has differs): what a Line-API widget refreshes, since Textual composes dirty lines only."""
    runs: List[Tuple[int, int]] = []
    start = -1
    for i in range(max(len(old), len(new))):
        same = i < len(old) and i < len(new) and (old[i] is new[i] or old[i] == new[i])
        if not same and start < 0:
            start = i
        elif same and start >= 0:
            runs.append((start, i - start))
            start = -1
    if start >= 0:
        runs.append((start, max(len(old), len(new)) - start))
    return runs


class Line:
    """A cheap stand-in for ``rich.text.Text`` for one pane line: (text, style) parts, no markup/wrap.

    Rendering a ``Text`` costs a full rich render per line; a pane line is a handful of styled runs, so
    it goes straight to Segments (measured: the grid's per-pane cost dominated the paint).
    """

    __slots__ = ("_bg", "parts")

    def __init__(self, text: str = "", style: Optional[Style] = None) -> None:
        self.parts: List[Tuple[str, Optional[Style]]] = [(text, style)] if text else []
        self._bg: Optional[Style] = None

    def append(self, text: str, style: Optional[Style] = None) -> Line:
        if text:
            self.parts.append((text, style))
        return self

    def append_text(self, other: Line) -> Line:
        self.parts.extend(other.parts)
        return self

    @property
    def cell_len(self) -> int:
        return sum(cell_len(t) for t, _ in self.parts)

    @property
    def plain(self) -> str:
        return "".join(t for t, _ in self.parts)

    def truncate(self, width: int, overflow: str = "ellipsis", pad: bool = False) -> None:
        out: List[Tuple[str, Optional[Style]]] = []
        used = 0
        for text, style in self.parts:
            n = cell_len(text)
            if used + n > width:
                room = width - used
                if room > 0:
                    cut = set_cell_size(text, room)
                    if overflow == "ellipsis":
                        cut = set_cell_size(cut, room - 1) + "…"
                    out.append((cut, style))
                used = width
                break
            out.append((text, style))
            used += n
        if pad and used < width:
            out.append((" " * (width - used), None))
        self.parts = out

    def stylize(self, style: Style) -> None:
        """A style under every part (e.g. the cursor's background)."""
        self._bg = style

    def segments(self, base: Style) -> List[Segment]:
        bg = self._bg
        under = combine(base, bg) if bg is not None else base
        return [Segment(text, combine(under, style) if style is not None else under) for text, style in self.parts]


_COMBINED: Dict[Tuple[int, int], Tuple[Style, Style, Style]] = {}
_COMBINED_MAX = 4096


def combine(under: Style, over: Style) -> Style:
    """``under + over``, remembered: a pane's lines combine the same few palette styles thousands of times a
    second, and rich's ``Style.__add__`` hashes both in Python each time. Keyed by identity; the entry holds
    both styles, so an id is not reused while its entry lives (theme changes make new ones: bounded, cleared)."""
    hit = _COMBINED.get((id(under), id(over)))
    if hit is not None:
        return hit[2]
    combined = under + over
    if not combined.link:  # (a linked style is copied by every add: nothing to remember)
        if len(_COMBINED) >= _COMBINED_MAX:
            _COMBINED.clear()
        _COMBINED[(id(under), id(over))] = (under, over, combined)
    return combined




def short_path(path: str) -> str:
    """A file's name where its directory would push the line past 80 columns (``/proc/N`` stays)."""
    if path.startswith("/") and not path.startswith("/proc/") and "/" in path.rstrip("/")[1:]:
        return path.rstrip("/").rsplit("/", 1)[-1]
    return path
