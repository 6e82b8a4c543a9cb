"""The fleet table (``v``): one aligned line per instance, sortable (``o`` cycles, ``O`` reverses, ``S`` holds).

Why a ScrollView with ``render_line`` (as ``fleet_grid.py``): a widget per host, or a DataTable re-filled
every second, costs a layout per change; here only the visible rows are drawn, each cached by (instance
version, width, cursor, selection, the second for rows whose ages count), and the row values come from pure
functions (``row_values``, ``row_line``, ``sort_names``) tested without an App.

The table shares the grid's filter, selection and cursor (``grid.query_text``, ``grid.selected``,
``grid.cursor_name``), so every fleet action (``d``, ``r``, ``p``, ``s``, ``y``) works the same in both views.
It polls the state itself at the app's frame rate (versions of the visible rows, ``order_version``), so the
app's frame clock needs no change for it.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Set, Tuple

from rich.segment import Segment
from textual import events
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from console.agent.wire.timefmt import fmt_age as format_age
from console.core.state import BUSY_UTIL, FleetState, InstanceState
from console.core.status import STALE

from .messages import CursorMoved, OpenInstance, SelectionChanged
from .palette import Palette
from .pane import badge_text, gpu_model
from .render import Line

RESORT_EVERY = 1.0  # seconds between re-sorts on a live figure (util, mem, temp, power, uptime, progress)
ORDER_HOLD = 2.0  # seconds the order holds after a key moves or selects (as the grid)
AGE_EVERY = 1.0  # seconds after which a row that shows ages is redrawn even when its instance did not change
ROW_BUDGET = 32  # changed rows rebuilt per frame at most: a burst (agents sampling in phase, a reconnect storm)
# is spread over the next frames instead of blocking one (as the grid's panes)

# key, header, width (0: the rest), drop order when narrow (higher drops first), right-aligned
COLUMNS: Tuple[Tuple[str, str, int, int, bool], ...] = (
    ("name", "NAME", -1, 0, False),
    ("status", "STATUS", -1, 0, False),
    ("gpu", "GPU", 14, 7, False),
    ("busy", "BUSY", 5, 3, True),
    ("util", "UTIL", 5, 1, True),
    ("mem", "MEM", 5, 2, True),
    ("temp", "TEMP", 5, 5, True),
    ("power", "POWER", 6, 8, True),
    ("uptime", "UP", 6, 6, True),
    ("verdict", "VERDICT", 22, 4, False),
    ("progress", "LAST PROGRESS", 0, 0, False),
)
SORT_KEYS = ("status", "name", "util", "mem", "temp", "power", "uptime", "progress", "gpu")
ASCENDING = frozenset(("status", "name", "gpu"))  # the others: biggest (or newest) first
LIVE_KEYS = frozenset(("util", "mem", "temp", "power", "uptime", "progress"))
PROGRESS_MIN = 12
GAP = 1

Layout = List[Tuple[str, int, bool]]  # (key, width, right-aligned)


# -- pure: values, sort, layout, line ------------------------------------------------------------------
def _live(inst: InstanceState) -> List[Any]:
    return [g for g in inst.gpus.values() if not (g.lost or g.missing)]


def _util(inst: InstanceState, now: float) -> Optional[float]:
    utils = [u for u in (g.util for g in _live(inst)) if u is not None]
    return sum(utils) / len(utils) if utils else None


def _mem(inst: InstanceState, now: float) -> Optional[float]:
    mems = [m for m in (g.mem_fraction for g in _live(inst)) if m is not None]
    return 100.0 * sum(mems) / len(mems) if mems else None


def _temp(inst: InstanceState, now: float) -> Optional[int]:
    temps: List[int] = [t for t in (g.sample.get("temp") for g in _live(inst)) if t is not None]
    return max(temps) if temps else None


def _power(inst: InstanceState, now: float) -> Optional[float]:
    powers: List[float] = [p for p in (g.sample.get("power") for g in _live(inst)) if p is not None]
    return float(sum(powers)) if powers else None


def _uptime(inst: InstanceState, now: float) -> Optional[float]:
    if inst.bench_running and inst.bench_started:
        return max(0.0, now + inst.clock_offset - inst.bench_started)
    return None


def _progress_at(inst: InstanceState, now: float) -> Optional[float]:
    if inst.last_log is None:
        return None
    ring = inst.logs.get(inst.last_log[0])
    return ring.updated if ring is not None else None


# one sort key's figure, computed alone: a live re-sort (every RESORT_EVERY) reads only this for every row
SORT_VALUE: Dict[str, Callable[[InstanceState, float], Any]] = {
    "status": lambda inst, now: inst.rank,
    "name": lambda inst, now: inst.name,
    "gpu": lambda inst, now: gpu_model(inst),
    "util": _util,
    "mem": _mem,
    "temp": _temp,
    "power": _power,
    "uptime": _uptime,
    "progress": _progress_at,  # sorts on how recent it is
}


def row_values(inst: InstanceState, now: float) -> Dict[str, Any]:
    """What a row shows, as numbers where it sorts on them (None: unknown)."""
    utils = [u for u in (g.util for g in _live(inst)) if u is not None]
    progress_at = _progress_at(inst, now)
    return {
        "name": inst.name,
        "status": inst.rank,
        "badge": badge_text(inst, now),
        "gpu": gpu_model(inst),
        "busy": sum(1 for u in utils if u >= BUSY_UTIL),
        "total": len(inst.gpus),
        "util": sum(utils) / len(utils) if utils else None,
        "mem": _mem(inst, now),
        "temp": _temp(inst, now),
        "power": _power(inst, now),
        "uptime": _uptime(inst, now),
        "progress": progress_at,  # sorts on how recent it is
        "progress_text": inst.last_log[2] if inst.last_log is not None else "",
        "progress_age": None if progress_at is None else max(0.0, now - progress_at),
        "verdict": inst.verdict_summary() if inst.diagnosis else "",
        "verdict_current": inst.diagnosis_counts(),
    }


def sort_names(values: Dict[str, Dict[str, Any]], key: str, reverse: bool = False) -> List[str]:
    """Names ordered on ``key`` (its natural direction, flipped by ``reverse``); unknowns last, ties by name."""
    def known(name: str) -> bool:
        return values[name].get(key) is not None

    names = sorted(values)  # ties by name, whatever the direction
    with_value = [n for n in names if known(n)]
    without = [n for n in names if not known(n)]
    descending = (key not in ASCENDING) != reverse
    if key == "status":  # trouble first (rank), ties by name also when reversed
        with_value.sort(key=lambda n: (values[n]["status"] * (-1 if reverse else 1), n))
    else:
        with_value.sort(key=lambda n: values[n][key], reverse=descending)
    return with_value + without


def layout(width: int, name_w: int, status_w: int) -> Layout:
    """The columns that fit ``width``: the low-priority ones dropped first; the progress column takes the rest."""
    fixed = {"name": max(5, name_w), "status": max(7, status_w)}  # (room for the title and its ▲)
    cols = [(k, fixed.get(k, w), right, drop) for k, _h, w, drop, right in COLUMNS]
    while True:
        used = 1 + GAP + sum(w + GAP for k, w, _r, _d in cols if k != "progress")  # (1: the cursor mark)
        if width - used >= PROGRESS_MIN or not any(d for _k, _w, _r, d in cols):
            break
        worst = max(range(len(cols)), key=lambda i: cols[i][3])
        del cols[worst]
    rest = max(PROGRESS_MIN, width - used)
    return [(k, rest if k == "progress" else w, r) for k, w, r, _d in cols]


def _cell(text: str, width: int, right: bool) -> str:
    if len(text) > width:
        return text[: max(0, width - 1)] + "…" if width > 1 else text[:width]
    return text.rjust(width) if right else text.ljust(width)


def header_line(cols: Layout, sort_key: str, reverse: bool, stable: bool, pal: Palette) -> Line:
    """Column names; the sort column marked ▲/▼ (``o`` ``O``), ``[held]`` while the order is held (``S``)."""
    titles = {k: h for k, h, _w, _d, _r in COLUMNS}
    line = Line(" ", pal.dim)
    for key, width, right in cols:
        title = titles[key]
        if key == sort_key:
            descending = (key not in ASCENDING) != reverse
            title += "▼" if descending else "▲"
        if key == "progress" and stable:
            title += " [held: S]"
        line.append(_cell(title, width, right) + " " * GAP, pal.name if key == sort_key else pal.dim)
    return line


def _num(value: Optional[float], fmt: str) -> str:
    return "—" if value is None else fmt % value


def row_line(values: Dict[str, Any], cols: Layout, pal: Palette, status: str, *, cursor: bool = False,
             selected: bool = False, dim: bool = False) -> Line:
    """One instance's row (``values`` from ``row_values``); ``dim``: figures last seen (unreachable, stale)."""
    line = Line("▶" if cursor else " ", pal.border_focus if cursor else pal.base)
    figure = pal.dim if dim else None
    for key, width, right in cols:
        style = figure
        if key == "name":
            text, style = values["name"], pal.selected if selected else pal.name
        elif key == "status":
            text, style = " %s " % values["badge"], pal.badge.get(status, pal.name)
            line.append(text, style)
            line.append(" " * max(0, width - len(text)) + " " * GAP)
            continue
        elif key == "gpu":
            text = values["gpu"]
        elif key == "busy":
            text = "%d/%d" % (values["busy"], values["total"]) if values["total"] else "—"
        elif key == "util":
            text = _num(values["util"], "%d%%")
            style = figure or (pal.util if (values["util"] or 0) >= BUSY_UTIL else pal.dim)
        elif key == "mem":
            text = _num(values["mem"], "%d%%")
            style = figure or pal.mem
        elif key == "temp":
            text = _num(values["temp"], "%d°")
            style = figure or (pal.error if (values["temp"] or 0) >= 90 else pal.warn if (values["temp"] or 0) >= 85
                               else None)
        elif key == "power":
            text = _num(values["power"], "%dW")
        elif key == "uptime":
            text = format_age(values["uptime"]) if values["uptime"] is not None else "—"
        elif key == "verdict":
            text = values["verdict"] or "—"
            style = None if values["verdict_current"] else pal.dim
        else:  # progress: the last log line and its age
            age = values["progress_age"]
            suffix = " (%s)" % format_age(age) if age is not None else ""
            body = values["progress_text"] or "—"
            room = max(0, width - len(suffix))
            text = _cell(body, room, False).rstrip() + suffix
        line.append(_cell(text, width, right) + " " * GAP, style)
    return line


# -- the widget ------------------------------------------------------------------------------------------
class FleetTable(ScrollView, can_focus=True):
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
        Binding("a", "select_shown", "Select all", show=False),
        Binding("u", "clear_selection", "Unselect all", show=False),
        Binding("o", "cycle_sort", "Sort", show=False),
        Binding("O", "reverse_sort", "Reverse", show=False),
        Binding("S", "toggle_stable", "Hold order", show=False),
        Binding("slash", "app.filter", "Filter", show=False, priority=True),
    ]

    def __init__(self, state: FleetState, grid: Any, *, id: Optional[str] = None,
                 sort_key: str = "status", reverse: bool = False, stable: bool = False) -> None:
        super().__init__(id=id)
        self.state = state
        self.grid = grid  # its query_text, selected and cursor_name are shared
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
        self._hold_until = 0.0
        self._palette: Optional[Palette] = None
        self._laid_width = -1
        self._marks: Tuple[Optional[str], FrozenSet[str]] = (None, frozenset())  # cursor, selection painted
        self._built = 0  # rows rebuilt since the last poll (ROW_BUDGET)
        self._scan = 0  # where the last poll's budget ran out: the next one starts there (no row starves)
        self.paints = 0

    # -- palette / theme -----------------------------------------------------------------------------
    def on_mount(self) -> None:
        self.app.theme_changed_signal.subscribe(self, self._theme_changed)

    def _theme_changed(self, _theme: Any) -> None:
        self._palette = None
        self._cache.clear()
        self.refresh()

    @property
    def palette(self) -> Palette:
        if self._palette is None:
            self._palette = Palette(self.app.get_css_variables(), self.rich_style)
        return self._palette

    # -- order ---------------------------------------------------------------------------------------
    @property
    def cursor_name(self) -> Optional[str]:
        return self.grid.cursor_name

    @property
    def visible_names(self) -> List[str]:
        return list(self._names)

    def resort(self, force: bool = False) -> None:
        """Filter and sort again; a held order (``S``, or a key pressed in the last ``ORDER_HOLD`` s) keeps the
        rows where they are and adds new ones at the end."""
        now = time.time()
        query = self.grid.query_text
        items = self.state.ordered(query)
        figure = SORT_VALUE[self.sort_key]  # (only the sort figure for every row: the rows shown get the rest)
        values = {i.name: {self.sort_key: figure(i, now)} for i in items}
        held = (self.stable or time.monotonic() < self._hold_until) and not force and query == self._query
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
        if self.grid.cursor_name not in self._index:
            self.grid.cursor_name = names[0] if names else None
        name_w = min(24, max((len(n) for n in names), default=4))
        status_w = max((len(badge_text(i, now)) + 2 for i in items), default=6)
        width = self.scrollable_content_region.width or self.size.width
        cols = layout(max(20, width), name_w, status_w)
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
        if (self._order_version != self.state.order_version or self._query != self.grid.query_text
                or self._count != len(self.state.instances)
                or (self.sort_key in LIVE_KEYS and now - self._sorted_at >= RESORT_EVERY)):
            self.resort()
        marks = (self.grid.cursor_name, frozenset(self.grid.selected))
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
            line = header_line(self._cols, self.sort_key, self.reverse, self.stable, pal)
            return Strip(line.segments(base)).adjust_cell_length(width, base)
        k = int(self.scroll_offset.y) + y - 1
        if k >= len(self._names):
            if not self._names and y == 2:
                text = "  No instance matches %r. Esc clears the filter." % self.grid.query_text \
                    if self.state.instances else "  No instances in this fleet yet (v: the grid says how to add one)."
                return Strip([Segment(text, base + pal.dim)]).adjust_cell_length(width, base)
            return Strip.blank(width, base)
        return self._row_strip(self._names[k], width)

    def _row_strip(self, name: str, width: int) -> Strip:
        pal = self.palette
        inst = self.state.instances.get(name)
        if inst is None:
            return Strip.blank(width, pal.base)
        cursor = name == self.grid.cursor_name
        selected = name in self.grid.selected
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

    # -- cursor / selection / mouse ------------------------------------------------------------------
    def _refresh_row(self, name: Optional[str]) -> None:
        k = self._index.get(name) if name else None
        if k is None:
            return
        y = k - int(self.scroll_offset.y) + 1
        if 1 <= y < self.size.height:
            self.refresh(Region(0, y, self.size.width, 1))

    def _scroll_to_cursor(self) -> None:
        k = self._index.get(self.grid.cursor_name or "")
        if k is None:
            return
        top, rows = int(self.scroll_offset.y), max(1, self.size.height - 1)
        if k < top:
            self.scroll_to(y=k, animate=False)
        elif k >= top + rows:
            self.scroll_to(y=k - rows + 1, animate=False)

    def move_to(self, name: Optional[str]) -> None:
        self._hold_until = time.monotonic() + ORDER_HOLD
        if name is None or name == self.grid.cursor_name:
            return
        old = self.grid.cursor_name
        self.grid.cursor_name = name
        self._refresh_row(old)
        self._refresh_row(name)
        self._scroll_to_cursor()
        self.post_message(CursorMoved(name))

    def action_cursor(self, step: int) -> None:
        if not self._names:
            return
        k = self._index.get(self.grid.cursor_name or "")
        k = 0 if k is None else max(0, min(len(self._names) - 1, k + step))
        self.move_to(self._names[k])

    def action_first(self) -> None:
        if self._names:
            self.move_to(self._names[0])

    def action_last(self) -> None:
        if self._names:
            self.move_to(self._names[-1])

    def action_page(self, direction: int) -> None:
        self.action_cursor(direction * max(1, self.size.height - 2))

    def action_open(self) -> None:
        if self.grid.cursor_name:
            self.post_message(OpenInstance(self.grid.cursor_name))

    def action_toggle_select(self) -> None:
        name = self.grid.cursor_name
        if not name:
            return
        self._hold_until = time.monotonic() + ORDER_HOLD
        selected: Set[str] = self.grid.selected
        if name in selected:
            selected.discard(name)
        else:
            selected.add(name)
        self._refresh_row(name)
        self.post_message(SelectionChanged(frozenset(selected)))

    def action_select_shown(self) -> None:
        self.grid.selected.update(self._names)
        self.refresh()
        self.post_message(SelectionChanged(frozenset(self.grid.selected)))

    def action_clear_selection(self) -> None:
        self.grid.selected.clear()
        self.refresh()
        self.post_message(SelectionChanged(frozenset()))

    def name_at(self, y: int) -> Optional[str]:
        k = int(self.scroll_offset.y) + y - 1
        return self._names[k] if y >= 1 and 0 <= k < len(self._names) else None

    def on_click(self, event: events.Click) -> None:
        name = self.name_at(event.y)
        if name is None:
            return
        self.focus()
        self.move_to(name)
        if event.chain >= 2:
            self.post_message(OpenInstance(name))

    def on_focus(self) -> None:
        self._refresh_row(self.grid.cursor_name)

    def on_blur(self) -> None:
        self._refresh_row(self.grid.cursor_name)





def table_from_settings(state: FleetState, grid: Any) -> FleetTable:
    """The table as the operator left it (settings.json: view, sort key, direction, held order); the grid
    is hidden when the table view was the last one shown."""
    from themes import load_settings

    settings = load_settings()
    table = FleetTable(state, grid, id="table", sort_key=str(settings.get("table_sort") or "status"),
                       reverse=bool(settings.get("table_reverse")), stable=bool(settings.get("table_stable")))
    shown = settings.get("view") == "table"
    table.display = shown
    grid.display = not shown
    return table


def toggle_view(table: FleetTable, grid: Any) -> str:
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
            grid.call_after_refresh(grid._move_to, name)  # the cursor the table left, in view
    save_settings(view=view)
    return view


__all__ = ["COLUMNS", "SORT_KEYS", "FleetTable", "header_line", "layout", "row_line", "row_values", "sort_names",
           "table_from_settings", "toggle_view"]
