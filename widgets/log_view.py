"""A followed log file: line numbers, follow / pause, search with next match (Line API, no copies)."""

from __future__ import annotations

import re
from typing import List, Optional, Tuple

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.geometry import Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from console.state import LogRing

SKIP_MARKER = re.compile(r"\[\.\.\. \d+ lines skipped \.\.\.\]$")  # console/agent/logs.py batch_frames


class LogView(ScrollView, can_focus=True):
    """Renders a ``LogRing``; follows the end unless paused (``f`` or space toggles, ``End``/``G`` follow again).

    It opens at the tail; a badge on its last row says FOLLOW, or PAUSED with the lines that came since.
    """

    DEFAULT_CSS = """
    LogView { height: 1fr; }
    """

    BINDINGS = [
        Binding("f", "toggle_follow", "Follow/pause"),
        Binding("space", "toggle_follow", "Follow/pause", show=False),
        Binding("n", "next_match", "Next match", show=False),
        Binding("N", "prev_match", "Prev match", show=False),
        Binding("enter", "next_match", "Next match", show=False),
        Binding("end", "end", "Follow", show=False),
        Binding("G", "end", show=False),
        Binding("home", "home", show=False),
        Binding("g", "home", show=False),
    ]

    follow = reactive(True)

    def __init__(self, ring: LogRing, *, id: Optional[str] = None) -> None:
        super().__init__(id=id)
        self.ring = ring
        self.lines: List[Tuple[int, str]] = []  # snapshot rendered (refreshed while following)
        self.search: str = ""
        self.match_line: Optional[int] = None  # index in self.lines of the current match
        self._width = 0

    @property
    def path(self) -> str:
        return self.ring.path

    def on_mount(self) -> None:
        self.sync()
        self.call_after_refresh(self._to_end)  # once laid out: the tail is on screen from the first frame

    def on_resize(self) -> None:
        self._to_end()  # shown for the first time (its tab activated) or resized: keep the tail in view

    def _to_end(self) -> None:
        if self.follow:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
            self.refresh()

    @property
    def new_lines(self) -> int:
        """Lines the ring got since the view paused."""
        ring_last, shown_last = self.ring.last, None
        for number, _ in reversed(self.lines):
            if number:
                shown_last = number
                break
        if ring_last is None or shown_last is None:
            return 0
        return max(0, ring_last[0] - shown_last)

    def badge(self) -> str:
        if self.follow:
            return " FOLLOW "
        why = "search" if self.search else "f, End or G to follow"
        new = self.new_lines
        if new:
            return " PAUSED (%d new line%s; %s) " % (new, "" if new == 1 else "s", why)
        return " PAUSED (%s) " % why

    def sync(self) -> None:
        """Take the ring's lines (unless paused) and keep the end in view when following."""
        if not self.follow and self.lines:
            self.refresh()  # the badge counts the new lines
            return
        self.lines = list(self.ring.lines)
        width = max((len(t) for _, t in self.lines[-500:]), default=0) + 8
        self._width = max(self._width, width)
        self.virtual_size = Size(self._width, len(self.lines))
        if self.follow:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        self.refresh()

    def watch_follow(self, follow: bool) -> None:
        if follow:
            self.sync()
        self.refresh()  # the badge

    def action_toggle_follow(self) -> None:
        self.follow = not self.follow
        self.notify("following %s" % self.path if self.follow else "paused (f or space to follow)", timeout=2)

    def action_end(self) -> None:
        self.match_line = None
        self.follow = True
        self.sync()
        self.call_after_refresh(self._to_end)

    def action_home(self) -> None:
        self.follow = False
        self.scroll_home(animate=False)

    def set_search(self, text: str) -> bool:
        self.search = text
        self.match_line = None
        return self.action_next_match()

    def _find(self, start: int, step: int) -> Optional[int]:
        needle = self.search.lower()
        if not needle or not self.lines:
            return None
        n = len(self.lines)
        for k in range(n):
            i = (start + step * k) % n
            if needle in self.lines[i][1].lower():
                return i
        return None

    def action_next_match(self, step: int = 1) -> bool:
        if not self.search:
            return False
        self.follow = False
        if self.match_line is None:
            start = int(self.scroll_offset.y) if step > 0 else int(self.scroll_offset.y) + self.size.height
        else:
            start = self.match_line + step
        found = self._find(start, step)
        if found is None:
            self.notify("no match for %r" % self.search, severity="warning", timeout=3)
            return False
        self.match_line = found
        self.scroll_to(y=max(0, found - self.size.height // 2), animate=False)
        self.refresh()
        return True

    def action_prev_match(self) -> None:
        self.action_next_match(-1)

    def render_line(self, y: int) -> Strip:
        index = y + int(self.scroll_offset.y)
        base = self.rich_style
        width = self.size.width
        if index >= len(self.lines):
            return self._with_badge(y, Strip.blank(width, base), width, base)
        number, content = self.lines[index]
        text = Text(no_wrap=True)
        if number and not SKIP_MARKER.match(content):  # the agent's "[... N lines skipped ...]" is no line
            text.append("%6d " % number, Style(dim=True))
            text.append(content)
        else:
            text.append("       " + content, Style(italic=True, dim=True))
        if self.search:
            text.highlight_words([self.search], Style(reverse=True), case_sensitive=False)
        if index == self.match_line:
            text.stylize(Style(bold=True, underline=True))
        segments = list(text.render(self.app.console, end=""))
        strip = Strip(segments).apply_style(base)
        x = int(self.scroll_offset.x)
        return self._with_badge(y, strip.crop_extend(x, x + width, base), width, base)

    def _with_badge(self, y: int, strip: Strip, width: int, base: Style) -> Strip:
        """The FOLLOW / PAUSED badge over the right end of the last row."""
        if y != (self.scrollable_content_region.height or self.size.height) - 1 or width < 12:
            return strip
        room = min(width, self.scrollable_content_region.width or width)  # left of the scrollbar
        label = self.badge()[: room - 2]
        paused = Style(bgcolor="yellow", color="black", bold=True)
        style = base + (Style(reverse=True, bold=True) if self.follow else paused)
        left = strip.crop(0, room - len(label))
        return Strip.join([left, Strip([Segment(label, style)])]).adjust_cell_length(width, base)
