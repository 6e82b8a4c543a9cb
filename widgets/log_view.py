"""A followed log file: line numbers, follow / pause, search, filter, wrap, ERROR/WARN colours, older lines.

Keys (the view focused; ``help_screen.py`` lists them): ``f``/space follow or pause, End/``G`` follow again,
Home the top; ``/`` (the screen's input) search with ``n``/``N``; ``&`` filter: only matching lines, a count
in the badge, Esc clears (``less`` keys: ``?`` stays the app's help); ``w`` wrap; ``g`` (the screen) grep
the whole file on the host. Scrolling above the first line asks the host for the lines before it (the
``loader``, the controller's ``read_log``); ``goto_line`` shows any line of the file, fetched when needed.
"""

from __future__ import annotations

import re
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from console.core.state import LogRing

SKIP_MARKER = re.compile(r"\[\.\.\. \d+ lines skipped \.\.\.\]$")  # console/agent/wire/loglines.py batch_frames
ERROR_WORDS = re.compile(r"\b(?:error|fatal|panic|panicked|traceback|critical)\b", re.IGNORECASE)
ERROR_NAMES = re.compile(r"\b[A-Z]\w*(?:Error|Exception)\b:")  # "RuntimeError: CUDA out of memory"
WARN_WORDS = re.compile(r"\b(?:warn|warning|warnings)\b", re.IGNORECASE)
ERROR_STYLE = Style(color="red")
WARN_STYLE = Style(color="yellow")
MARK_STYLE = Style(bold=True, reverse=True)  # the line a jump (evidence, grep hit) landed on
CURSOR_STYLE = Style(bold=True, reverse=True)  # the cursor's line number (the line y copies)
GUTTER = 7  # "%6d "
MAX_OLDER = 20000  # lines fetched from the host kept above the ring
OLDER_STEP = 500  # lines asked for per scroll past the top
AROUND = 100  # lines shown before a jumped-to line that was not in the ring

Loader = Callable[[str, Optional[int], int], Awaitable[Dict[str, Any]]]


def line_style(content: str) -> Optional[Style]:
    """Red for error/fatal/panic/Traceback lines, yellow for warnings (whole words, any case)."""
    if ERROR_WORDS.search(content) or ERROR_NAMES.search(content):
        return ERROR_STYLE
    if WARN_WORDS.search(content):
        return WARN_STYLE
    return None


class LogView(ScrollView, can_focus=True):
    """Renders a ``LogRing`` (plus older lines fetched from the host); follows the end unless paused.

    It opens at the tail; its last row is a status line (never over a log line) that says FOLLOW, or PAUSED
    with the lines that came since, and the filter with its count. A line cursor (the tail while following;
    up/down, j/k, PgUp/PgDn, a click, a search match or a jump move it) marks the line ``y`` copies.
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
        Binding("k", "scroll_up", show=False),
        Binding("j", "scroll_down", show=False),
        Binding("w", "toggle_wrap", "Wrap"),
    ]

    follow = reactive(True)

    def __init__(self, ring: LogRing, *, id: Optional[str] = None) -> None:
        super().__init__(id=id)
        self.ring = ring
        self.lines: List[Tuple[int, str]] = []  # what is shown (older + ring snapshot, filtered)
        self.search: str = ""
        self.filter: str = ""
        self.wrap = False
        self.match_line: Optional[int] = None  # index in self.lines of the current match
        self.cursor: Optional[int] = None  # index in self.lines of the line cursor (None: the last line)
        self.mark: Optional[int] = None  # file line number of the jumped-to line (highlighted)
        self.older: List[Tuple[int, str]] = []  # lines fetched from the host, before the ring's
        self.loader: Optional[Loader] = None  # (path, before_line, n) -> {lines: [(n, text)]}
        self.fetching = False
        self.at_start = False  # the host said there is nothing before the first line shown
        self._snapshot: List[Tuple[int, str]] = []
        self._rows: List[Tuple[int, int]] = []  # wrap on: (line index, start character) per row
        self._width = 0

    @property
    def path(self) -> str:
        return self.ring.path

    def on_mount(self) -> None:
        self.sync()
        self.call_after_refresh(self._to_end)  # once laid out: the tail is on screen from the first frame

    def on_resize(self) -> None:
        if self.wrap:
            self._layout()
        self._to_end()  # shown for the first time (its tab activated) or resized: keep the tail in view

    @property
    def text_rows(self) -> int:
        """Rows for log lines: all but the status line."""
        return max(1, (self.scrollable_content_region.height or self.size.height) - 1)

    def cursor_index(self) -> Optional[int]:
        """The line the cursor is on (the last one while following); None with no lines."""
        if not self.lines:
            return None
        if self.follow or self.cursor is None:
            return len(self.lines) - 1
        return max(0, min(self.cursor, len(self.lines) - 1))

    def cursor_line(self) -> Optional[Tuple[int, str]]:
        """``(file line number, text)`` under the cursor: what ``y`` copies."""
        index = self.cursor_index()
        return None if index is None else self.lines[index]

    def move_cursor(self, step: int) -> None:
        """The cursor ``step`` lines down (up when negative), in view; reading back pauses the tail."""
        index = self.cursor_index()
        if index is None:
            return
        if step < 0 and index == 0:
            self.follow = False
            self.cursor = 0
            self.load_older()  # above the first line: the host's older lines
            return
        self.follow = False
        self.cursor = max(0, min(len(self.lines) - 1, index + step))
        self._show_cursor()

    def _show_cursor(self) -> None:
        index = self.cursor_index()
        if index is None:
            return
        row, top, rows = self._row_of(index), int(self.scroll_offset.y), self.text_rows
        if row < top:
            self.scroll_to(y=row, animate=False, immediate=True)
        elif row >= top + rows:
            self.scroll_to(y=row - rows + 1, animate=False, immediate=True)
        self.refresh()

    def _to_end(self) -> None:
        if self.follow:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
            self.refresh()

    @property
    def new_lines(self) -> int:
        """Lines the ring got since the view paused."""
        ring_last, shown_last = self.ring.last, None
        for number, _ in reversed(self._snapshot):
            if number:
                shown_last = number
                break
        if ring_last is None or shown_last is None:
            return 0
        return max(0, ring_last[0] - shown_last)

    def badge(self) -> str:
        filt = ""
        if self.filter:
            count = len(self.lines)
            filt = "FILTER %r: %d line%s; esc clears " % (self.filter, count, "" if count == 1 else "s")
        if self.fetching:
            filt += "loading… "
        if self.follow:
            return " %sFOLLOW " % filt
        why = "search" if self.search else "f, End or G to follow"
        new = self.new_lines
        if new:
            return " %sPAUSED (%d new line%s; %s) " % (filt, new, "" if new == 1 else "s", why)
        return " %sPAUSED (%s) " % (filt, why)

    # -- what is shown ----------------------------------------------------------------------------------
    def _composed(self) -> List[Tuple[int, str]]:
        """Older lines, a marker where lines are missing, then the ring's snapshot."""
        base = self._snapshot
        if not self.older:
            return list(base)
        first = next((n for n, _ in base if n), None)
        older_last = self.older[-1][0]
        if first is not None and first <= older_last:  # the file started again (rotated, truncated)
            self.older = []
            return list(base)
        out = list(self.older)
        if first is not None and first > older_last + 1:
            out.append((0, "[... lines %d-%d not loaded (G: the tail) ...]" % (older_last + 1, first - 1)))
        out.extend(base)
        return out

    def _rebuild(self) -> None:
        """Recompute ``lines`` (filter applied), the rows and the virtual size."""
        lines = self._composed()
        if self.filter:
            needle = self.filter.lower()
            lines = [item for item in lines if item[0] and needle in item[1].lower()]
        self.lines = lines
        width = max((len(t) for _, t in self.lines[-500:]), default=0) + GUTTER + 1
        self._width = max(self._width, width)
        self._layout()

    def _text_width(self) -> int:
        return max(10, (self.scrollable_content_region.width or self.size.width or 80) - GUTTER)

    def _layout(self) -> None:
        if self.wrap:
            room = self._text_width()
            rows: List[Tuple[int, int]] = []
            for index, (_, content) in enumerate(self.lines):
                rows.extend((index, start) for start in range(0, max(1, len(content)), room))
            self._rows = rows
            self.virtual_size = Size(self.size.width, len(rows) + 1)
        else:
            self._rows = []
            self.virtual_size = Size(self._width, len(self.lines) + 1)  # (+1: the status line's row)
        self.refresh()

    def _row_of(self, index: int) -> int:
        if not self.wrap:
            return index
        for row, (i, _) in enumerate(self._rows):
            if i >= index:
                return row
        return len(self._rows)

    def sync(self) -> None:
        """Take the ring's lines (unless paused) and keep the end in view when following."""
        if not self.follow and self._snapshot:
            self.refresh()  # the badge counts the new lines
            return
        self._snapshot = list(self.ring.lines)
        self._rebuild()
        if self.follow:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        self.refresh()

    def watch_follow(self, follow: bool) -> None:
        if follow:
            self.cursor = None
            self.sync()
        elif self.cursor is None and self.lines:
            self.cursor = len(self.lines) - 1  # paused: the cursor stays on the line it was on
        self.refresh()  # the badge

    # -- actions -----------------------------------------------------------------------------------------
    def action_toggle_follow(self) -> None:
        self.follow = not self.follow
        self.notify("following %s" % self.path if self.follow else "paused (f or space to follow)", timeout=2)

    def action_end(self) -> None:
        self.match_line = None
        self.mark = None
        self.older = []  # the host's older lines go (scrolling up fetches them again)
        self.at_start = False
        self.follow = True
        self.sync()
        self.call_after_refresh(self._to_end)

    def action_home(self) -> None:
        if self.scroll_offset.y == 0:
            self.load_older()
        self.follow = False
        self.cursor = 0
        self.scroll_home(animate=False)

    def action_scroll_up(self) -> None:
        self.move_cursor(-1)

    def action_scroll_down(self) -> None:
        self.move_cursor(1)

    def action_page_up(self) -> None:
        self.move_cursor(-self.text_rows)

    def action_page_down(self) -> None:
        self.move_cursor(self.text_rows)

    def on_click(self, event: events.Click) -> None:
        """A click puts the cursor on that line."""
        row = int(self.scroll_offset.y) + event.y
        index = (self._rows[row][0] if row < len(self._rows) else None) if self.wrap else row
        if index is not None and 0 <= index < len(self.lines) and event.y < self.text_rows:
            self.follow = False
            self.cursor = index
            self.refresh()

    def on_mouse_scroll_up(self) -> None:
        self.follow = False  # the wheel up reads back: the tail no longer pulls the view down
        if self.scroll_offset.y == 0:
            self.load_older()

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if round(new_value) == 0 and round(old_value) > 0 and not self.follow:
            self.load_older()  # scrolled (mouse, keys) onto the first line: fetch what came before it

    def action_toggle_wrap(self) -> None:
        self.wrap = not self.wrap
        top = self._top_index()
        self._layout()
        if not self.follow:
            self.scroll_to(y=self._row_of(top), animate=False, immediate=True)
        else:
            self.call_after_refresh(self._to_end)
        self.notify("wrap %s" % ("on" if self.wrap else "off"), timeout=2)

    def _top_index(self) -> int:
        y = int(self.scroll_offset.y)
        if self.wrap and self._rows:
            return self._rows[min(y, len(self._rows) - 1)][0]
        return y

    # -- filter and search -------------------------------------------------------------------------------
    def set_filter(self, text: str) -> None:
        """Only lines containing ``text`` (any case) are shown; empty shows every line again."""
        if text == self.filter:
            return
        self.filter = text
        self.match_line = None
        self.cursor = None if self.follow else self.cursor
        self._rebuild()
        if self.follow:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        elif self.mark is not None:
            self._scroll_to_number(self.mark)
        self.refresh()

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
            top = self._top_index()
            start = top if step > 0 else top + self.size.height
        else:
            start = self.match_line + step
        found = self._find(start, step)
        if found is None:
            self.notify("no match for %r" % self.search, severity="warning", timeout=3)
            return False
        self.match_line = found
        self._center(found)
        return True

    def action_prev_match(self) -> None:
        self.action_next_match(-1)

    def _center(self, index: int) -> None:
        self.cursor = index
        self.scroll_to(y=max(0, self._row_of(index) - self.size.height // 2), animate=False, immediate=True)
        self.refresh()

    # -- lines from the host --------------------------------------------------------------------------------
    def first_number(self) -> Optional[int]:
        """The file line number of the first line shown (older lines included)."""
        for number, _ in self.older or self._snapshot:
            if number:
                return number
        return None

    def load_older(self) -> None:
        """Ask the host for the lines before the first one shown (off the UI loop)."""
        first = self.first_number()
        if self.loader is None or self.fetching or first is None:
            return
        if first <= 1 or self.at_start:
            self.at_start = True
            self.refresh()
            return
        self.fetching = True
        self.refresh()
        self.run_worker(self._load_older(first), group="log-load", exit_on_error=False)

    async def _load_older(self, first: int) -> None:
        try:
            assert self.loader is not None
            data = await self.loader(self.path, first, OLDER_STEP)
        except Exception as exc:  # an agentless host, a refused path, a dropped link: say so, keep the view
            self.notify("older lines of %s: %s" % (self.path, exc), severity="warning", timeout=5)
            return
        finally:
            self.fetching = False
            self.refresh()
        got = [(int(n), str(t)) for n, t in data.get("lines") or [] if int(n) < first]
        if not got:
            self.at_start = True
            return
        self.at_start = got[0][0] <= 1
        self._prepend(got)

    def _prepend(self, got: List[Tuple[int, str]]) -> None:
        """Older lines above those shown; the view keeps its place (the new lines are above it)."""
        self.follow = False
        top = self._top_index()
        before = len(self.lines)
        self.older = got + self.older
        if len(self.older) > MAX_OLDER:  # bounded: the lines nearest the ring go (a marker says so)
            self.older = self.older[:MAX_OLDER]
        self._rebuild()
        added = len(self.lines) - before
        if self.cursor is not None:
            self.cursor += added
        self.scroll_to(y=self._row_of(max(0, top + added)), animate=False, immediate=True)

    def goto_line(self, number: int) -> None:
        """Show line ``number`` of the file, marked; fetched from the host when it is not shown yet."""
        self.follow = False
        self.mark = number
        if self._scroll_to_number(number):
            return
        if self.filter:
            self.set_filter("")
            if self._scroll_to_number(number):
                return
        if self.loader is None:
            self.notify("line %d of %s is not here (no agent to read it from)" % (number, self.path),
                        severity="warning", timeout=5)
            return
        self.fetching = True
        self.refresh()
        self.run_worker(self._fetch_around(number), group="log-load", exclusive=True, exit_on_error=False)

    async def _fetch_around(self, number: int) -> None:
        ring_first = next((n for n, _ in self._snapshot if n), None)
        shown_first = self.first_number()
        upto = number + AROUND + 1  # the window: AROUND lines either side
        if shown_first is not None and number < shown_first and shown_first - (number - AROUND) <= 2000:
            upto = shown_first  # near enough: fetch up to the first shown line, no gap
        n = min(2000, upto - max(1, number - AROUND))
        try:
            assert self.loader is not None
            data = await self.loader(self.path, upto, n)
        except Exception as exc:
            self.notify("line %d of %s: %s" % (number, self.path, exc), severity="warning", timeout=5)
            return
        finally:
            self.fetching = False
            self.refresh()
        got = [(int(n_), str(t)) for n_, t in data.get("lines") or []]
        if ring_first is not None:
            got = [item for item in got if item[0] < ring_first]
        if upto == shown_first:
            self.older = got + self.older
        elif got:
            self.older = got  # a window of its own; scrolling above it fetches more, a marker shows the gap
        self.at_start = bool(got) and got[0][0] <= 1
        self._rebuild()
        if not self._scroll_to_number(number):
            self.notify("%s has no line %d" % (self.path, number), severity="warning", timeout=5)

    def _scroll_to_number(self, number: int) -> bool:
        for index, (n, _) in enumerate(self.lines):
            if n == number:
                self._center(index)
                return True
        return False

    # -- painting ------------------------------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        base = self.rich_style
        width = self.size.width
        if y >= self.text_rows:
            return self._status_line(width, base) if y == self.text_rows else Strip.blank(width, base)
        row = y + int(self.scroll_offset.y)
        if self.wrap:
            if row >= len(self._rows):
                return Strip.blank(width, base)
            index, start = self._rows[row]
        else:
            index, start = row, 0
        if index >= len(self.lines):
            return Strip.blank(width, base)
        number, content = self.lines[index]
        cursor = index == self.cursor_index()
        text = Text(no_wrap=True)
        piece = content[start : start + self._text_width()] if self.wrap else content
        if number and not SKIP_MARKER.match(content):  # the agent's "[... N lines skipped ...]" is no line
            gutter = ("%6d" % number + ("▸" if cursor else " ")) if start == 0 else " " * GUTTER
            text.append(gutter, CURSOR_STYLE if cursor and start == 0 else Style(dim=True))
            text.append(piece, line_style(content))  # host text as a plain string: never markup
        else:
            text.append(" " * GUTTER + piece, Style(italic=True, dim=True))
        if self.search:
            text.highlight_words([self.search], Style(reverse=True), case_sensitive=False)
        if index == self.match_line:
            text.stylize(Style(bold=True, underline=True))
        if number and number == self.mark:
            text.stylize(MARK_STYLE, GUTTER)
        if cursor:
            text.stylize(Style(bold=True), GUTTER)
        segments = list(text.render(self.app.console, end=""))
        strip = Strip(segments).apply_style(base)
        x = 0 if self.wrap else int(self.scroll_offset.x)
        return strip.crop_extend(x, x + width, base)

    def _status_line(self, width: int, base: Style) -> Strip:
        """The last row: FOLLOW / PAUSED (and the filter), on a row of its own, never over a log line."""
        room = min(width, self.scrollable_content_region.width or width)  # left of the scrollbar
        label = self.badge()[:room]
        paused = Style(bgcolor="yellow", color="black", bold=True)
        style = base + (Style(reverse=True, bold=True) if self.follow else paused)
        return Strip([Segment(" " * max(0, room - len(label)), base), Segment(label, style)]).adjust_cell_length(
            width, base)
