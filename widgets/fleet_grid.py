"""The fleet grid: one pane per instance, drawn with the Line API in a single scrolling widget.

Why one widget: a grid of a hundred ``Sparkline`` + ``DataTable`` panes was measured far too slow
(design.md, "Rendering cost"). Here each pane is a few strips drawn by ``pane.py`` once per change
of its instance (cached by the instance's version) and only when visible; the app calls
``update_from_state(dirty)`` at a bounded frame rate, a changed visible pane is rebuilt at once and only its
lines that look different are refreshed (Textual composes dirty lines only: a log frame costs one line).
The layout reflows with the widget's size: two-line compact panes in a small terminal (an 80x24 tmux pane),
boxed panes with a line per GPU when there is room.
"""

from __future__ import annotations

import bisect
import time
from typing import Callable, Dict, List, Optional, Set, Tuple

from rich.segment import Segment
from textual import events
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.strip import Strip

from console.core import predicates
from console.core.state import FleetState, InstanceState, matches
from console.core.status import STALE

from . import pane
from .fleet_view import FleetView, FleetViewWidget
from .render import changed_runs

COMPACT_MIN_W = 56  # compact pane: two lines, at least this wide
FULL_MIN_W = 50  # boxed pane
FULL_MIN_HEIGHT = 36  # below this many rows the grid goes compact
PANE_BUDGET = 6  # visible panes re-rendered per frame at most (the app's 4 Hz: 24 a second)


class FleetGrid(FleetViewWidget, can_focus=True):
    """The grid of instance panes (keyboard: arrows, Enter, space; mouse: click, double-click); its cursor,
    selection and filter are the ``FleetView`` it shares with the table."""

    DEFAULT_CSS = """
    FleetGrid { height: 1fr; scrollbar-size-vertical: 1; }
    """

    BINDINGS = [
        Binding("up", "cursor(0, -1)", "Up", show=False),
        Binding("down", "cursor(0, 1)", "Down", show=False),
        Binding("left", "cursor(-1, 0)", "Left", show=False),
        Binding("right", "cursor(1, 0)", "Right", show=False),
        Binding("k", "cursor(0, -1)", show=False),
        Binding("j", "cursor(0, 1)", show=False),
        Binding("home", "first", show=False),
        Binding("end", "last", show=False),
        Binding("pageup", "page(-1)", show=False),
        Binding("pagedown", "page(1)", show=False),
        Binding("enter", "open", "Open"),
        Binding("space", "toggle_select", "Select"),
        Binding("a", "select_shown", "Select all"),
        Binding("u", "clear_selection", "Unselect all", show=False),
        # Checked before the keys behind it are routed (priority): the filter takes the focus at once, so
        # "/h200<enter>" arriving in one read (tmux, a paste) types into the filter, not onto the grid.
        Binding("slash", "app.filter", "Filter", priority=True),
    ]

    def __init__(self, state: FleetState, view: FleetView, *, name: Optional[str] = None,
                 id: Optional[str] = None) -> None:
        super().__init__(state, view, name=name, id=id)
        self.compact = True
        self.columns = 1
        self.pane_w = 40
        self._names: List[str] = []  # laid out, in order
        self._pos: Dict[str, Tuple[int, int, int, int]] = {}  # name -> (col x, y, width, height)
        self._row_y: List[int] = []  # start line of each row
        self._row_h: List[int] = []
        self._row_names: List[List[str]] = []
        self._heights: Dict[str, int] = {}
        self._cache: Dict[str, Tuple[tuple, List[Strip]]] = {}
        self._shown: Dict[str, int] = {}  # instance version each pane shows (repaint budget)
        self._pending: Dict[str, None] = {}  # changed, not yet repainted: oldest first (no pane starves)
        self._order_version = -1
        self._laid_width = -1
        self._laid_height = -1
        self._kept: Set[str] = set()  # shown under the current filter: selected ones stay while it is unchanged
        self.on_pane_rendered: Optional[Callable[[str, float], None]] = None  # bench hook
        self.paints = 0
        self.lines_refreshed = 0  # pane lines refreshed because their instance changed (tests, ui_bench)
        self.fleet_file = ""  # shown in the empty fleet's hint (the app sets it)
        self.retry_at: Callable[[str], Optional[float]] = lambda name: None  # when a failing link tries again
        self._cols: pane.Columns = (0, 0, 0)  # compact rows' column widths (name, badge, GPU model)

    def forget_lines(self) -> None:
        self._cache.clear()

    # -- layout ---------------------------------------------------------------------------------------
    @property
    def visible_names(self) -> List[str]:
        return list(self._names)

    def set_query(self, text: str) -> None:
        if text != self.query_text:
            self._kept = set()
        self.view.query_text = text
        self.relayout()

    def pane_height(self, inst: InstanceState) -> int:
        return pane.pane_height(inst, self.compact)

    def relayout(self) -> None:
        width = self.scrollable_content_region.width or self.size.width
        height = self.size.height
        self._laid_width, self._laid_height = width, height
        items = self.state.ordered(self.query_text)
        if self.query_text:
            # a selected instance the operator acted on stays in view when its status stops matching
            # ("status:ok", then diagnosed): a filtered selection does not vanish under the operator
            shown = {i.name for i in items}
            held = [self.state.instances[n] for n in self._kept & self.selected - shown if n in self.state.instances]
            if held:
                items = sorted(items + held, key=lambda i: (i.rank, i.name))
            self._kept = {i.name for i in items}
        if self.order_held() and self._names:
            # a resize or a new pane while the operator moves: keep the panes where they were for now
            place = {name: i for i, name in enumerate(self._names)}
            items.sort(key=lambda inst: place.get(inst.name, len(place)))
        else:
            self._order_version = self.state.order_version
        self.compact = height < FULL_MIN_HEIGHT or width < 2 * FULL_MIN_W
        min_w = COMPACT_MIN_W if self.compact else FULL_MIN_W
        self.columns = max(1, width // min_w) if width > 0 else 1
        self.columns = min(self.columns, max(1, len(items)))
        self.pane_w = max(10, width // self.columns) if width > 0 else min_w
        self._names = [i.name for i in items]
        self._shown = {i.name: i.version for i in items}
        self._pending.clear()
        self._pos.clear()
        self._row_y, self._row_h, self._row_names = [], [], []
        y = 0
        for start in range(0, len(items), self.columns):
            row = items[start : start + self.columns]
            h = max(self.pane_height(i) for i in row)
            self._row_y.append(y)
            self._row_h.append(h)
            self._row_names.append([i.name for i in row])
            for col, inst in enumerate(row):
                self._pos[inst.name] = (col * self.pane_w, y, self.pane_w, h)
                self._heights[inst.name] = self.pane_height(inst)
            y += h
        if self.cursor_name not in self._pos or (self.view.follows_top() and self.display):
            self.cursor_name = self._names[0] if self._names else None  # (start-up: the top row once settled)
        self.virtual_size = Size(width, y)
        self._cols = pane.grid_columns(self.state.instances.values(), time.time())
        self._cache.clear()
        self.refresh()

    def on_resize(self, event: events.Resize) -> None:
        self.relayout()

    def update_from_state(self, dirty: Set[str], budget: int = PANE_BUDGET) -> None:
        """Called at the app's frame rate with the names changed since the last call; ``budget``: visible
        panes re-rendered at most in this call."""
        width = self.scrollable_content_region.width or self.size.width
        reorder = self._order_version != self.state.order_version and not self.order_held()
        if reorder or width != self._laid_width or self.size.height != self._laid_height:
            self.relayout()
            return
        if self.compact and dirty:
            cols = pane.grid_columns(self.state.instances.values(), time.time())
            if cols != self._cols:  # a longer name, badge or model: every row moves its columns
                self._cols = cols
                self._cache.clear()
                self.refresh()
        pending = self._pending
        for name in dirty:
            if name not in self._pos:
                inst = self.state.instances.get(name)
                if inst is not None and (not self.query_text or matches(inst, self.query_text)):
                    self.relayout()
                    return
                continue
            inst = self.state.instances.get(name)
            if inst is not None and self.pane_height(inst) != self._heights.get(name):
                self.relayout()
                return
            pending.setdefault(name, None)  # one already waiting keeps its place
        if not pending:
            return
        # Visible panes are repainted at most ``budget`` a frame, the longest waiting first: a burst (every
        # agent sampling in phase) is spread over the next frames, and panes that change every frame cannot
        # keep the ones after them waiting. Panes out of view just take the new version.
        changed: List[Region] = []
        for name in list(pending):
            inst = self.state.instances.get(name)
            if inst is None or name not in self._pos:
                del pending[name]
                continue
            if not self._is_visible(name):
                self._shown[name] = inst.version
                del pending[name]
                continue
            if budget <= 0:
                break
            budget -= 1
            self._shown[name] = inst.version
            del pending[name]
            changed.extend(self._changed_lines(name))
        if changed:
            self.lines_refreshed += sum(region.height for region in changed)
            self.refresh(*changed)

    def _is_visible(self, name: str) -> bool:
        pos = self._pos.get(name)
        if pos is None:
            return False
        top = pos[1] - int(self.scroll_offset.y)
        return top + pos[3] > 0 and top < self.size.height

    def on_screen_names(self) -> List[str]:
        """The instances whose pane is (partly) in view now; console/core/detail.py lets the others send a summary."""
        if not self._row_y or self.size.height <= 0:
            return []
        top = int(self.scroll_offset.y)
        first = max(0, bisect.bisect_right(self._row_y, top) - 1)
        last = bisect.bisect_left(self._row_y, top + self.size.height)
        return [name for row in self._row_names[first:last] for name in row]

    def refresh_item(self, name: Optional[str]) -> None:
        """The whole pane (the cursor or the selection moved on or off it)."""
        pos = self._pos.get(name) if name else None
        if pos is None:
            return
        x, y, w, h = pos
        top = y - int(self.scroll_offset.y)
        if top + h <= 0 or top >= self.size.height:
            return  # not visible: painted when scrolled into view
        self.refresh(Region(x, top, w, h))

    def _changed_lines(self, name: str) -> List[Region]:
        """Re-render a visible pane now and return the regions of its lines that look different: a GPU frame
        changes the GPU lines, a log frame the last-log line, a procs frame often nothing. Textual composes
        only dirty lines, so a line that looks the same costs the comparison, not a repaint."""
        pos = self._pos.get(name)
        if pos is None:
            return []
        x, y, w, h = pos
        top = y - int(self.scroll_offset.y)
        if top + h <= 0 or top >= self.size.height:
            return []  # not visible: painted when scrolled into view
        cached = self._cache.get(name)
        new = self._pane_lines(name, h, fresh=True)
        old = cached[1] if cached is not None else None
        if old is None or len(old) != len(new):
            return [Region(x, top, w, h)]
        return [Region(x, top + first, w, count) for first, count in changed_runs(old, new)]

    # -- painting ------------------------------------------------------------------------------------
    def hint_lines(self) -> List[str]:
        """What an empty grid says, each line cut to the grid's width (a long fleet file path goes on over lines)."""
        return _wrapped(self._hint_text(), self.size.width)

    def _hint_text(self) -> List[str]:
        """What an empty grid says: how to add an instance, or that the filter hides every one."""
        if self.state.instances:
            error = predicates.check(self.query_text, any(getattr(i.instance, "price_per_hour", None) is not None
                                                           for i in self.state.instances.values()))
            if error:
                return ["", "  Filter: %s. Esc clears the filter." % error]
            return ["", "  No instance matches %r. Esc clears the filter." % self.query_text]
        where = self.fleet_file or "fleet.toml"
        return [
            "",
            "  No instances in this fleet yet.",
            "",
            "  Add one to the fleet file,",
            "  %s:" % where,
            "",
            "      [[instance]]",
            '      name = "gpu1"',
            '      host = "ssh5.vast.ai"',
            "      port = 12345",
            "",
            "  The console reloads the file when it changes (or press R).",
            "  fleet-console check --connect   tries each instance and says what to fix.",
            "  README.md (First real host, fleet.toml) and docs/first-host.md: every step.",
        ]

    def render_line(self, y: int) -> Strip:
        vy = y + int(self.scroll_offset.y)
        width = self.size.width
        base = self.palette.base
        if not self._names:
            hint = self.hint_lines()
            text = hint[y] if 0 <= y < len(hint) else ""
            return Strip([Segment(text, base + (self.palette.dim if y > 1 else self.palette.name))]).adjust_cell_length(
                width, base
            )
        row = bisect.bisect_right(self._row_y, vy) - 1
        if row < 0 or row >= len(self._row_y) or vy >= self._row_y[row] + self._row_h[row]:
            return Strip.blank(width, base)
        line = vy - self._row_y[row]
        strips = []
        for name in self._row_names[row]:
            lines = self._pane_lines(name, self._row_h[row])
            strips.append(lines[line] if line < len(lines) else Strip.blank(self.pane_w, base))
        strip = Strip.join(strips)
        return strip.adjust_cell_length(width, base)

    def _pane_lines(self, name: str, row_h: int, fresh: bool = False) -> List[Strip]:
        """The pane's strips, cached by what they show. Text that ages (the second, a retry's countdown) is
        brought up to date only when ``fresh`` (``_changed_lines``, which refreshes each line that changed):
        painting one line of a row must not rebuild a neighbour's pane, whose other lines would then stay
        unrefreshed while its cache says they are current."""
        inst = self.state.instances.get(name)
        if inst is None:
            return [Strip.blank(self.pane_w, self.rich_style)] * row_h
        shown = self._shown.get(name)
        if shown is None:
            shown = self._shown[name] = inst.version
        cursor = name == self.cursor_name
        shows = (
            shown,
            self.pane_w,
            row_h,
            self.compact,
            cursor and self.has_focus,
            cursor,
            name in self.selected,
            self._cols if self.compact else None,
        )
        cached = self._cache.get(name)
        if cached is not None and not fresh and cached[0][0] == shows:
            return cached[1]  # (a neighbour's line: what ages is not looked at, see above)
        now = time.time()
        retry_at = self.retry_at(name)
        ages = (int(now) if inst.status == STALE or pane.ages(inst, now) or retry_at is not None else 0, retry_at)
        key = (shows, ages)
        if cached is not None and cached[0] == key:
            return cached[1]
        strips = pane.pane_strips(
            inst,
            self.palette,
            self.pane_w,
            row_h,
            now,
            compact=self.compact,
            cursor=cursor,
            selected=name in self.selected,
            retry_at=retry_at,
            cols=self._cols if self.compact else None,
        )
        self._cache[name] = (key, strips)
        self.paints += 1
        if self.on_pane_rendered is not None:
            self.on_pane_rendered(name, inst.updated_at)
        return strips

    # -- cursor / mouse ---------------------------------------------------------------------------------
    def scroll_to_item(self, name: str) -> None:
        pos = self._pos.get(name)
        if pos is not None:
            x, y, w, h = pos
            self.scroll_to_region(Region(x, y, w, h), animate=False)

    def action_cursor(self, dx: int, dy: int) -> None:
        if not self._names:
            return
        if self.cursor_name not in self._pos:
            self.move_to(self._names[0])
            return
        idx = self._names.index(self.cursor_name)
        if dx:
            idx = max(0, min(len(self._names) - 1, idx + dx))
        if dy:
            target = idx + dy * self.columns
            if 0 <= target < len(self._names):
                idx = target
            elif dy > 0 and idx // self.columns < (len(self._names) - 1) // self.columns:
                idx = len(self._names) - 1
        self.move_to(self._names[idx])

    def action_page(self, direction: int) -> None:
        if not self._names or self.cursor_name not in self._pos:
            return
        rows = max(1, self.size.height // max(1, self._row_h[0] if self._row_h else 1))
        idx = self._names.index(self.cursor_name)
        idx = max(0, min(len(self._names) - 1, idx + direction * rows * self.columns))
        self.move_to(self._names[idx])

    def name_at(self, x: int, y: int) -> Optional[str]:
        vy = y + int(self.scroll_offset.y)
        row = bisect.bisect_right(self._row_y, vy) - 1
        if row < 0 or row >= len(self._row_names):
            return None
        col = x // max(1, self.pane_w)
        names = self._row_names[row]
        return names[col] if 0 <= col < len(names) else None


__all__ = ["FleetGrid"]


def _wrapped(lines: List[str], width: int) -> List[str]:
    """``lines`` with each one wider than ``width`` cut into pieces that keep its indent."""
    out: List[str] = []
    for line in lines:
        indent = len(line) - len(line.lstrip(" "))
        room = width - indent
        if len(line) <= width or room < 8:
            out.append(line)
            continue
        body = line[indent:]
        out.extend(" " * indent + body[i:i + room] for i in range(0, len(body), room))
    return out
