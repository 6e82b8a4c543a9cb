"""The fleet table (``v``): one aligned line per instance, sortable (``o`` cycles, ``O`` reverses, ``S`` holds).

Why a ScrollView with ``render_line`` (as ``fleet_grid.py``): a widget per host, or a DataTable re-filled
every second, costs a layout per change; here only the visible rows are drawn, each cached by (instance
version, width, cursor, selection, the second for rows whose ages count), and the row values come from pure
functions (widgets/table_rows.py) tested without an App.

The table shares the grid's filter, selection and cursor (the ``FleetView``, widgets/fleet_view.py), so every
fleet action (``d``, ``r``, ``p``, ``s``, ``y``) works the same in both views. It polls the state itself at the
app's frame rate (versions of the visible rows, ``order_version``), so the app's frame clock needs no change for it.
"""

from __future__ import annotations

import time
from typing import Dict, FrozenSet, List, Optional, Tuple

from rich.segment import Segment
from textual import events
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.strip import Strip

from console.core.state import FleetState, InstanceState
from console.core.status import STALE

from .fleet_grid import FleetGrid
from .fleet_view import FleetView, FleetViewWidget
from .pane import badge_text
from .table_rows import LIVE_KEYS, SORT_KEYS, SORT_VALUE, Layout, header_line, layout, row_line, row_values, sort_names

RESORT_EVERY = 1.0  # seconds between re-sorts on a live figure (util, mem, temp, power, uptime, progress)
AGE_EVERY = 1.0  # seconds after which a row that shows ages is redrawn even when its instance did not change
ROW_BUDGET = 32  # changed rows rebuilt per frame at most: a burst (agents sampling in phase, a reconnect storm)
# is spread over the next frames instead of blocking one (as the grid's panes)


class FleetTable(FleetViewWidget, can_focus=True):
    """The table view (keyboard: arrows, Enter, space, a, u, o, O, S; mouse: click, double-click)."""

    HELP_TITLE = "Fleet table (v)"  # its section in ? help (widgets/help_screen.py)

    DEFAULT_CSS = """
    FleetTable { height: 1fr; scrollbar-size-vertical: 1; }
    """

    BINDINGS = [
        Binding("up", "cursor(-1)", "Up", show=False),
        Binding("down", "cursor(1)", "Down", show=False),
        Binding("k", "cursor(-1)", show=False),
        Binding("j", "cursor(1)", show=False),
        Binding("home", "first", show=False),
        Binding("end", "last", show=False),
        Binding("pageup", "page(-1)", show=False),
        Binding("pagedown", "page(1)", show=False),
        Binding("enter", "open", "Open"),
        Binding("space", "toggle_select", "Select"),
        Binding("a", "select_shown", "Select all"),
        Binding("u", "clear_selection", "Unselect all", show=False),
        Binding("o", "cycle_sort", "Sort", show=False),
        Binding("O", "reverse_sort", "Reverse", show=False),
        Binding("S", "toggle_stable", "Hold order", show=False),
        Binding("slash", "app.filter", "Filter", priority=True),
    ]

    def __init__(self, state: FleetState, view: FleetView, *, id: Optional[str] = None,
                 sort_key: str = "status", reverse: bool = False, stable: bool = False) -> None:
        super().__init__(state, view, id=id)
        self.sort_key = sort_key if sort_key in SORT_KEYS else "status"
        self.reverse = reverse
        self.stable = stable
        self._names: List[str] = []
        self._index: Dict[str, int] = {}
        self._cache: Dict[str, Tuple[tuple, Strip, float]] = {}  # name -> (key, strip, when built)
        self._cols: Layout = []
        self._order_version = -1
        self._query = ""
        self._count = -1
        self._sorted_at = 0.0
        self._laid_width = -1
        self._marks: Tuple[Optional[str], FrozenSet[str]] = (None, frozenset())  # cursor, selection painted
        self._built = 0  # rows rebuilt since the last poll (ROW_BUDGET)
        self._scan = 0  # where the last poll's budget ran out: the next one starts there (no row starves)
        self.paints = 0

    def forget_lines(self) -> None:
        self._cache.clear()

    # -- order ---------------------------------------------------------------------------------------
    @property
    def visible_names(self) -> List[str]:
        return list(self._names)

    def resort(self, force: bool = False) -> None:
        """Filter and sort again; a held order (``S``, or a key pressed in the last ``ORDER_HOLD`` s) keeps the
        rows where they are and adds new ones at the end."""
        now = time.time()
        query = self.query_text
        items = self.state.ordered(query)
        figure = SORT_VALUE[self.sort_key]  # (only the sort figure for every row: the rows shown get the rest)
        values = {i.name: {self.sort_key: figure(i, now)} for i in items}
        held = (self.stable or self.order_held()) and not force and query == self._query
        if held and self._names:
            place = {n: k for k, n in enumerate(self._names)}
            names = sorted(values, key=lambda n: (place.get(n, len(place)), n))
        else:
            names = sort_names(values, self.sort_key, self.reverse)
        self._query = query
        self._order_version = self.state.order_version
        self._count = len(self.state.instances)
        self._sorted_at = now
        if names != self._names:
            self._names = names
            self._index = {n: k for k, n in enumerate(names)}
            if len(self._cache) > len(names):  # (a row's strip does not depend on its place: kept on a re-sort)
                self._cache = {n: c for n, c in self._cache.items() if n in self._index}
            self.refresh()
        if self.cursor_name not in self._index or self.view.follows_top():
            self.cursor_name = names[0] if names else None  # (start-up: the top row once settled)
        name_w = min(24, max((len(n) for n in names), default=4))
        status_w = max((len(badge_text(i, now)) + 2 for i in items), default=6)
        width = self.scrollable_content_region.width or self.size.width
        priced = any(getattr(i.instance, "price_per_hour", None) is not None for i in items)
        cols = layout(max(20, width), name_w, status_w, priced, self.state.currency)
        if cols != self._cols or width != self._laid_width:
            self._cols, self._laid_width = cols, width
            self._cache.clear()
            self.refresh()
        self.virtual_size = Size(width, len(names) + 1)

    def poll_state(self) -> None:
        """Each frame of the app (``FleetApp.paint_frame``) while shown: re-sort when the order, the filter
        or a live sort figure moved; repaint the visible rows whose instance changed."""
        if not self.display:
            return
        now = time.time()
        if (self._order_version != self.state.order_version or self._query != self.query_text
                or self._count != len(self.state.instances)
                or (self.sort_key in LIVE_KEYS and now - self._sorted_at >= RESORT_EVERY)):
            self.resort()
        marks = (self.cursor_name, frozenset(self.selected))
        if marks != self._marks:  # moved or (un)selected elsewhere: the grid, esc, the command bar
            self._marks = marks
            self.refresh()
        self._built = 0
        top = int(self.scroll_offset.y)
        rows = max(0, min(self.size.height - 1, len(self._names) - top))
        budget = ROW_BUDGET
        for step in range(rows):
            y = 1 + (self._scan + step) % rows
            name = self._names[top + y - 1]
            inst = self.state.instances.get(name)
            cached = self._cache.get(name)
            if inst is None:
                continue
            if cached is None or cached[0][0] != inst.version or self._aged(inst, cached[2], now):
                if budget <= 0:
                    self._scan = y - 1
                    break
                budget -= 1
                self.refresh(Region(0, y, self.size.width, 1))  # (its values are computed as it is drawn)

    def _aged(self, inst: InstanceState, built: float, now: float) -> bool:
        """Whether a row built at ``built`` shows ages (progress age, uptime, a stale badge) a second old now.

        Counted from when the row was last drawn, not on the clock's second: a row redrawn for a change
        carries fresh ages with it, and the rows' age redraws spread over the second instead of all landing
        in one frame."""
        return now - built >= AGE_EVERY and bool(inst.last_log or inst.bench_running or inst.status == STALE)

    def set_sort(self, key: str, reverse: Optional[bool] = None) -> None:
        if key not in SORT_KEYS:
            raise ValueError("unknown sort key %r (%s)" % (key, ", ".join(SORT_KEYS)))
        self.sort_key = key
        if reverse is not None:
            self.reverse = reverse
        self.resort(force=True)
        self.refresh()
        self._remember()

    def _remember(self) -> None:
        from themes import save_settings

        save_settings(table_sort=self.sort_key, table_reverse=self.reverse, table_stable=self.stable)

    def action_cycle_sort(self) -> None:
        self.set_sort(SORT_KEYS[(SORT_KEYS.index(self.sort_key) + 1) % len(SORT_KEYS)], reverse=False)

    def action_reverse_sort(self) -> None:
        self.set_sort(self.sort_key, reverse=not self.reverse)

    def action_toggle_stable(self) -> None:
        self.stable = not self.stable
        if not self.stable:
            self.resort(force=True)
        self.refresh(Region(0, 0, self.size.width, 1))
        self._remember()
        self.notify("rows %s" % ("held in place (S to sort again)" if self.stable else "sorted live"), timeout=2)

    # -- painting ------------------------------------------------------------------------------------
    def on_resize(self, event: events.Resize) -> None:
        self.resort()

    def on_show(self) -> None:
        self.resort(force=not self.stable)
        self.call_after_refresh(self._scroll_to_cursor)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        pal = self.palette
        base = pal.base
        if y == 0:
            line = header_line(self._cols, self.sort_key, self.reverse, self.stable, pal, self.state.currency)
            return Strip(line.segments(base)).adjust_cell_length(width, base)
        k = int(self.scroll_offset.y) + y - 1
        if k >= len(self._names):
            if not self._names and y == 2:
                text = "  No instance matches %r. Esc clears the filter." % self.query_text \
                    if self.state.instances else "  No instances in this fleet yet (v: the grid says how to add one)."
                return Strip([Segment(text, base + pal.dim)]).adjust_cell_length(width, base)
            return Strip.blank(width, base)
        return self._row_strip(self._names[k], width)

    def _row_strip(self, name: str, width: int) -> Strip:
        pal = self.palette
        inst = self.state.instances.get(name)
        if inst is None:
            return Strip.blank(width, pal.base)
        cursor = name == self.cursor_name
        selected = name in self.selected
        key = (inst.version, width, cursor, cursor and self.has_focus, selected, id(self._cols))
        cached = self._cache.get(name)
        now = time.time()
        if cached is not None and cached[0] == key and not self._aged(inst, cached[2], now):
            return cached[1]
        if cached is not None and self._built >= ROW_BUDGET and cached[0][1:] == key[1:]:
            return cached[1]  # only its figures moved, and this frame's budget is spent: the next poll redraws it
        self._built += 1
        values = row_values(inst, now)
        line = row_line(values, self._cols, pal, inst.status, cursor=cursor, selected=selected,
                        dim=inst.status in ("unreachable", STALE))
        if cursor:
            line.stylize(pal.cursor)
        strip = Strip(line.segments(pal.base)).adjust_cell_length(width, pal.base)
        self._cache[name] = (key, strip, now)
        self.paints += 1
        return strip

    # -- cursor / mouse ---------------------------------------------------------------------------------
    def refresh_item(self, name: Optional[str]) -> None:
        k = self._index.get(name) if name else None
        if k is None:
            return
        y = k - int(self.scroll_offset.y) + 1
        if 1 <= y < self.size.height:
            self.refresh(Region(0, y, self.size.width, 1))

    def scroll_to_item(self, name: str) -> None:
        k = self._index.get(name)
        if k is None:
            return
        top, rows = int(self.scroll_offset.y), max(1, self.size.height - 1)
        if k < top:
            self.scroll_to(y=k, animate=False)
        elif k >= top + rows:
            self.scroll_to(y=k - rows + 1, animate=False)

    def _scroll_to_cursor(self) -> None:
        if self.cursor_name:
            self.scroll_to_item(self.cursor_name)

    def action_cursor(self, step: int) -> None:
        if not self._names:
            return
        k = self._index.get(self.cursor_name or "")
        k = 0 if k is None else max(0, min(len(self._names) - 1, k + step))
        self.move_to(self._names[k])

    def action_page(self, direction: int) -> None:
        self.action_cursor(direction * max(1, self.size.height - 2))

    def name_at(self, x: int, y: int) -> Optional[str]:
        k = int(self.scroll_offset.y) + y - 1
        return self._names[k] if y >= 1 and 0 <= k < len(self._names) else None


def table_from_settings(state: FleetState, view: FleetView, grid: FleetGrid) -> FleetTable:
    """The table as the operator left it (settings.json: view, sort key, direction, held order); the grid
    is hidden when the table view was the last one shown."""
    from themes import load_settings

    settings = load_settings()
    table = FleetTable(state, view, id="table", sort_key=str(settings.get("table_sort") or "status"),
                       reverse=bool(settings.get("table_reverse")), stable=bool(settings.get("table_stable")))
    shown = settings.get("view") == "table"
    table.display = shown
    grid.display = not shown
    return table


def toggle_view(table: FleetTable, grid: FleetGrid) -> str:
    """``v``: show the other view, focus it, remember it; returns the view now shown."""
    from themes import save_settings

    shown = not table.display
    table.display, grid.display = shown, not shown
    view = "table" if shown else "grid"
    if shown:
        table.resort(force=not table.stable)
        table.focus()
    else:
        grid.relayout()
        name = grid.cursor_name
        grid.focus()
        if name:
            grid.call_after_refresh(grid.move_to, name)  # the cursor the table left, in view
    save_settings(view=view)
    return view


__all__ = ["FleetTable", "table_from_settings", "toggle_view"]
