"""The fleet grid: one pane per instance, drawn with the Line API in a single scrolling widget.

Why one widget: a grid of a hundred ``Sparkline`` + ``DataTable`` panes was measured far too slow
(design.md, "Rendering cost"). Here each pane is a few lines of rich ``Text`` rendered once per change
of its instance (cached by the instance's version) and only when visible; the app calls
``update_from_state(dirty)`` at a bounded frame rate and only the changed, visible panes' regions are
refreshed. The layout reflows with the widget's size: two-line compact panes in a small terminal (an
80x24 tmux pane), boxed panes with a line per GPU when there is room.
"""

from __future__ import annotations

import bisect
import time
from typing import Callable, Dict, List, Optional, Set, Tuple

from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from console.state import FleetState, InstanceState, format_age, matches

from .messages import CursorMoved, OpenInstance, SelectionChanged
from .render import Line as Text
from .render import bar, pct, size, sparkline, tail

BADGES = {
    "ok": "OK",
    "gpu_idle": "GPU IDLE",
    "benchmark_down": "BENCH DOWN",
    "failed": "FAILED",
    "stale": "STALE",
    "unreachable": "UNREACHABLE",
    "connecting": "CONNECTING",
}
STATUS_VARS = {
    "ok": "success",
    "gpu_idle": "status-idle",
    "benchmark_down": "warning",
    "failed": "error",
    "unreachable": "error",
    "stale": "status-stale",
    "connecting": "status-connecting",
}
COMPACT_MIN_W = 56  # compact pane: two lines, at least this wide
FULL_MIN_W = 50  # boxed pane
FULL_MIN_HEIGHT = 36  # below this many rows the grid goes compact
MAX_GPU_LINES = 8
PANE_BUDGET = 6  # visible panes re-rendered per frame at most
ORDER_HOLD = 2.0  # seconds the order holds after a key moves or selects, so panes do not jump under the cursor


def badge_text(inst: InstanceState, now: float) -> str:
    label = BADGES.get(inst.status, inst.status.upper())
    if inst.status == "stale":
        age = inst.age(now)
        if age is not None:
            label += " " + format_age(age)
    return label


class Palette:
    """Rich styles for the current theme (rebuilt when the theme changes)."""

    def __init__(self, variables: Dict[str, str], base: Style) -> None:
        def color(name: str, default: str) -> str:
            value = variables.get(name) or default
            return value

        def style(name: str, default: str, **kw) -> Style:
            try:
                return Style(color=color(name, default), **kw)
            except Exception:
                return Style(**kw)

        self.base = base
        self.status: Dict[str, Style] = {}
        self.badge: Dict[str, Style] = {}
        bg = color("background", "#000000")
        for status, var in STATUS_VARS.items():
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


def _solid(value: str) -> str:
    """Theme variables can carry alpha (``#rrggbbaa``); rich wants ``#rrggbb``."""
    if value.startswith("#") and len(value) == 9:
        return value[:7]
    return value


class FleetGrid(ScrollView, can_focus=True):
    """The grid of instance panes (keyboard: arrows, Enter, space; mouse: click, double-click)."""

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
    ]

    def __init__(self, state: FleetState, *, name: Optional[str] = None, id: Optional[str] = None) -> None:
        super().__init__(name=name, id=id)
        self.state = state
        self.query_text = ""
        self.selected: Set[str] = set()
        self.cursor_name: Optional[str] = None
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
        self._pending: Set[str] = set()
        self._order_version = -1
        self._hold_order_until = 0.0
        self._palette: Optional[Palette] = None
        self._laid_width = -1
        self._laid_height = -1
        self.on_pane_rendered: Optional[Callable[[str, float], None]] = None  # bench hook
        self.paints = 0

    # -- palette / theme ----------------------------------------------------------------------------
    def on_mount(self) -> None:
        self.app.theme_changed_signal.subscribe(self, self._theme_changed)

    def _theme_changed(self, _theme) -> None:
        self._palette = None
        self._cache.clear()
        self.refresh()

    @property
    def palette(self) -> Palette:
        if self._palette is None:
            self._palette = Palette(self.app.get_css_variables(), self.rich_style)
        return self._palette

    # -- layout ---------------------------------------------------------------------------------------
    @property
    def visible_names(self) -> List[str]:
        return list(self._names)

    def set_query(self, text: str) -> None:
        self.query_text = text
        self.relayout()

    def pane_height(self, inst: InstanceState) -> int:
        if self.compact:
            return 2
        return 5 + max(1, min(MAX_GPU_LINES, len(inst.gpus)) + (1 if len(inst.gpus) > MAX_GPU_LINES else 0))

    def relayout(self) -> None:
        width = self.scrollable_content_region.width or self.size.width
        height = self.size.height
        self._laid_width, self._laid_height = width, height
        items = self.state.ordered(self.query_text)
        if time.monotonic() < self._hold_order_until and self._names:
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
        if self.cursor_name not in self._pos:
            self.cursor_name = self._names[0] if self._names else None
        self.virtual_size = Size(width, y)
        self._cache.clear()
        self.refresh()

    def on_resize(self, event: events.Resize) -> None:
        self.relayout()

    def update_from_state(self, dirty: Set[str]) -> None:
        """Called at the app's frame rate with the names changed since the last call."""
        width = self.scrollable_content_region.width or self.size.width
        reorder = self._order_version != self.state.order_version and time.monotonic() >= self._hold_order_until
        if (
            reorder
            or width != self._laid_width
            or self.size.height != self._laid_height
        ):
            self.relayout()
            return
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
            pending.add(name)
        if not pending:
            return
        # Visible panes are repainted at most PANE_BUDGET per frame (a burst, e.g. every agent sampling
        # in phase, is spread over the next frames); panes out of view just take the new version.
        budget = PANE_BUDGET
        for name in [n for n in self._names if n in pending]:
            inst = self.state.instances.get(name)
            if inst is None:
                pending.discard(name)
                continue
            if not self._is_visible(name):
                self._shown[name] = inst.version
                pending.discard(name)
                continue
            if budget <= 0:
                break
            budget -= 1
            self._shown[name] = inst.version
            pending.discard(name)
            self._refresh_pane(name)
        pending.intersection_update(self._pos)

    def _is_visible(self, name: str) -> bool:
        pos = self._pos.get(name)
        if pos is None:
            return False
        top = pos[1] - int(self.scroll_offset.y)
        return top + pos[3] > 0 and top < self.size.height

    def _refresh_pane(self, name: str) -> None:
        pos = self._pos.get(name)
        if pos is None:
            return
        x, y, w, h = pos
        top = y - int(self.scroll_offset.y)
        if top + h <= 0 or top >= self.size.height:
            return  # not visible: painted when scrolled into view
        self.refresh(Region(x, top, w, h))

    # -- painting ------------------------------------------------------------------------------------
    def render_line(self, y: int) -> Strip:
        vy = y + int(self.scroll_offset.y)
        width = self.size.width
        base = self.palette.base
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

    def _pane_lines(self, name: str, row_h: int) -> List[Strip]:
        inst = self.state.instances.get(name)
        if inst is None:
            return [Strip.blank(self.pane_w, self.rich_style)] * row_h
        now = time.time()
        shown = self._shown.get(name)
        if shown is None:
            shown = self._shown[name] = inst.version
        key = (
            shown,
            self.pane_w,
            row_h,
            self.compact,
            name == self.cursor_name and self.has_focus,
            name == self.cursor_name,
            name in self.selected,
            int(now) if inst.status == "stale" else 0,
        )
        cached = self._cache.get(name)
        if cached is not None and cached[0] == key:
            return cached[1]
        texts = self._pane_texts(inst, now, row_h)
        pal = self.palette
        strips = []
        base = pal.base
        for text in texts:
            strips.append(Strip(text.segments(base)).adjust_cell_length(self.pane_w, base))
        while len(strips) < row_h:
            strips.append(Strip.blank(self.pane_w, pal.base))
        self._cache[name] = (key, strips)
        self.paints += 1
        if self.on_pane_rendered is not None:
            self.on_pane_rendered(name, inst.updated_at)
        return strips

    def _pane_texts(self, inst: InstanceState, now: float, row_h: int) -> List[Text]:
        if self.compact:
            return self._compact_texts(inst, now)
        return self._full_texts(inst, now, row_h)

    def _gpu_summary(self, inst: InstanceState, width: int) -> Text:
        pal = self.palette
        text = Text()
        if not inst.gpus:
            if inst.gpu_state not in ("no_gpu", "error"):  # those two are already in the pane's flags
                text.append("no GPU data yet", pal.dim)
            return text
        gpus = list(inst.gpus.values())
        live = [g for g in gpus if not (g.lost or g.missing)]
        utils = [g.util for g in live if g.util is not None]
        avg = sum(utils) / len(utils) if utils else None
        text.append("%dxGPU " % len(gpus), pal.dim)
        text.append(pct(avg), pal.util)
        mems = [g.mem_fraction for g in live if g.mem_fraction is not None]
        mem = sum(mems) / len(mems) if mems else None
        text.append(" mem ", pal.dim)
        text.append(pct(None if mem is None else mem * 100), pal.mem)
        spark_w = max(0, width - text.cell_len - 1)
        if spark_w >= 4 and live:
            hist = _mean_history(live, spark_w)
            text.append(" ")
            text.append(sparkline(hist, spark_w), pal.spark)
        return text

    def _head(self, inst: InstanceState, now: float, focus: bool) -> Text:
        pal = self.palette
        head = Text()
        head.append("▶" if focus else " ", pal.border_focus if focus else pal.base)
        head.append("●" if inst.name in self.selected else " ", pal.selected)
        head.append(inst.name, pal.name)
        head.append(" ")
        head.append(" %s " % badge_text(inst, now), pal.badge.get(inst.status, pal.name))
        return head

    def _compact_texts(self, inst: InstanceState, now: float) -> List[Text]:
        pal = self.palette
        w = self.pane_w - 1
        focus = inst.name == self.cursor_name
        line1 = self._head(inst, now, focus)
        flags = inst.flags()
        if flags:
            line1.append(" " + ", ".join(flags), pal.warn if inst.lost_gpus else pal.dim)
        line1.append(" ")
        rest = w - line1.cell_len
        if rest > 12:
            line1.append_text(self._gpu_summary(inst, rest))
        line2 = Text("  ")
        detail = self._detail_line(inst)
        if detail is not None:
            line2.append_text(detail)
        else:
            top = inst.busiest_process()
            if top is not None:
                line2.append(_proc_brief(top), pal.dim)
                line2.append(" │ ", pal.dim)
            if inst.last_log is not None:
                line2.append(inst.last_log[2])
        line1.truncate(w, overflow="ellipsis")
        line2.truncate(w, overflow="ellipsis")
        if focus:
            line1.stylize(pal.cursor)
            line2.stylize(pal.cursor)
        return [line1, line2]

    def _detail_line(self, inst: InstanceState) -> Optional[Text]:
        """For trouble states, the reason beats the process/log line."""
        pal = self.palette
        if inst.status in ("unreachable", "failed", "benchmark_down", "stale") and inst.status_detail:
            return Text(inst.status_detail, pal.status.get(inst.status, pal.name))
        if inst.status == "connecting":
            return Text(inst.status_detail or "connecting…", pal.dim)
        return None

    def _full_texts(self, inst: InstanceState, now: float, row_h: int) -> List[Text]:
        pal = self.palette
        w = self.pane_w
        inner = w - 4
        focus = inst.name == self.cursor_name
        bstyle = pal.border_focus if focus else pal.border
        corners = ("┏", "━", "┓", "┃", "┗", "┛") if focus else ("╭", "─", "╮", "│", "╰", "╯")
        out: List[Text] = []
        top = Text(corners[0], bstyle)
        title = self._head(inst, now, False)
        title.truncate(w - 4, overflow="ellipsis")
        top.append_text(title)
        top.append(" ")
        top.append(corners[1] * max(0, w - 2 - top.cell_len + 1), bstyle)
        top.append(corners[2], bstyle)
        out.append(top)

        def boxed(body: Text) -> Text:
            body.truncate(inner, overflow="ellipsis", pad=True)
            line = Text(corners[3] + " ", bstyle)
            line.append_text(body)
            line.append(" " + corners[3], bstyle)
            return line

        sub = Text()
        addr = inst.host or ""
        if inst.user:
            addr = "%s@%s" % (inst.user, addr)
        if inst.port and inst.port != 22:
            addr += ":%s" % inst.port
        sub.append(addr, pal.dim)
        if inst.tags:
            sub.append(" [" + ",".join(inst.tags) + "]", pal.dim)
        flags = inst.flags()
        if flags:
            sub.append(" " + ", ".join(flags), pal.warn if inst.lost_gpus else pal.demo if inst.simulated else pal.dim)
        detail = self._detail_line(inst)
        if detail is not None:
            sub = detail
        out.append(boxed(sub))
        gpus = sorted(inst.gpus.values(), key=lambda g: g.index)
        if not gpus:
            out.append(boxed(self._gpu_summary(inst, inner)))
        for gpu in gpus[:MAX_GPU_LINES]:
            out.append(boxed(self._gpu_line(gpu, inner)))
        if len(gpus) > MAX_GPU_LINES:
            out.append(boxed(Text("+%d more GPUs" % (len(gpus) - MAX_GPU_LINES), pal.dim)))
        topp = inst.busiest_process()
        out.append(boxed(Text("top " + _proc_brief(topp), pal.dim) if topp else Text("no processes", pal.dim)))
        last = Text()
        if inst.last_log is not None:
            last.append(inst.last_log[2])
        else:
            last.append("no log lines", pal.dim)
        out.append(boxed(last))
        while len(out) < row_h - 1:
            out.append(boxed(Text()))
        out.append(Text(corners[4] + corners[1] * (w - 2) + corners[5], bstyle))
        return out[:row_h]

    def _gpu_line(self, gpu, width: int) -> Text:
        pal = self.palette
        text = Text("%d " % gpu.index, pal.dim)
        if gpu.lost or gpu.missing:
            text.append("LOST", pal.badge["failed"])
            if gpu.error:
                text.append(" " + str(gpu.error), pal.error)
            return text
        util = gpu.util
        bw = 8 if width >= 44 else 5
        text.append(bar(None if util is None else util / 100, bw), pal.util)
        text.append(pct(util), pal.util)
        frac = gpu.mem_fraction
        text.append(" m", pal.dim)
        text.append(bar(frac, bw // 2 + 1), pal.mem)
        text.append(pct(None if frac is None else frac * 100), pal.mem)
        temp = gpu.sample.get("temp")
        temp_s = " %d°" % temp if temp is not None else ""
        spark_w = width - text.cell_len - len(temp_s) - 1
        if spark_w >= 3:
            text.append(" ")
            text.append(sparkline(tail(gpu.util_hist, spark_w), spark_w), pal.spark)
        if temp_s:
            text.append(temp_s, pal.warn if temp >= 85 else pal.dim)
        return text

    # -- cursor / selection / mouse ------------------------------------------------------------------
    def _move_to(self, name: Optional[str]) -> None:
        self._hold_order_until = time.monotonic() + ORDER_HOLD
        if name is None or name == self.cursor_name:
            return
        old = self.cursor_name
        self.cursor_name = name
        if old:
            self._refresh_pane(old)
        self._refresh_pane(name)
        pos = self._pos.get(name)
        if pos is not None:
            x, y, w, h = pos
            self.scroll_to_region(Region(x, y, w, h), animate=False)
        self.post_message(CursorMoved(name))

    def action_cursor(self, dx: int, dy: int) -> None:
        if not self._names:
            return
        if self.cursor_name not in self._pos:
            self._move_to(self._names[0])
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
        self._move_to(self._names[idx])

    def action_first(self) -> None:
        if self._names:
            self._move_to(self._names[0])

    def action_last(self) -> None:
        if self._names:
            self._move_to(self._names[-1])

    def action_page(self, direction: int) -> None:
        if not self._names or self.cursor_name not in self._pos:
            return
        rows = max(1, self.size.height // max(1, self._row_h[0] if self._row_h else 1))
        idx = self._names.index(self.cursor_name)
        idx = max(0, min(len(self._names) - 1, idx + direction * rows * self.columns))
        self._move_to(self._names[idx])

    def action_open(self) -> None:
        if self.cursor_name:
            self.post_message(OpenInstance(self.cursor_name))

    def action_toggle_select(self) -> None:
        name = self.cursor_name
        if not name:
            return
        self._hold_order_until = time.monotonic() + ORDER_HOLD
        if name in self.selected:
            self.selected.discard(name)
        else:
            self.selected.add(name)
        self._refresh_pane(name)
        self.post_message(SelectionChanged(frozenset(self.selected)))

    def clear_selection(self) -> None:
        names = list(self.selected)
        self.selected.clear()
        for name in names:
            self._refresh_pane(name)
        self.post_message(SelectionChanged(frozenset()))

    def name_at(self, x: int, y: int) -> Optional[str]:
        vy = y + int(self.scroll_offset.y)
        row = bisect.bisect_right(self._row_y, vy) - 1
        if row < 0 or row >= len(self._row_names):
            return None
        col = x // max(1, self.pane_w)
        names = self._row_names[row]
        return names[col] if 0 <= col < len(names) else None

    def on_click(self, event: events.Click) -> None:
        name = self.name_at(event.x, event.y)
        if name is None:
            return
        self.focus()
        if event.chain >= 2:
            self._move_to(name)
            self.post_message(OpenInstance(name))
            return
        self._move_to(name)

    def on_focus(self) -> None:
        if self.cursor_name:
            self._refresh_pane(self.cursor_name)

    def on_blur(self) -> None:
        if self.cursor_name:
            self._refresh_pane(self.cursor_name)


def _mean_history(gpus, width: int) -> List[int]:
    """Per-sample mean util over the given GPUs for the last ``width`` samples."""
    tails = [tail(g.util_hist, width) for g in gpus]
    n = max((len(t) for t in tails), default=0)
    out = []
    for i in range(n):
        vals = [t[i - n + len(t)] for t in tails if i - n + len(t) >= 0 and t[i - n + len(t)] >= 0]
        out.append(sum(vals) // len(vals) if vals else -1)
    return out


def _proc_brief(rec) -> str:
    if rec is None:
        return ""
    parts = ["%s %s" % (rec.get("pid"), rec.get("name") or "?")]
    cpu = rec.get("cpu")
    if cpu is not None:
        parts.append("cpu %d%%" % cpu)
    if rec.get("gpu_mem"):
        parts.append("gpu " + size(rec.get("gpu_mem")))
    elif rec.get("rss"):
        parts.append("rss " + size(rec.get("rss")))
    return " ".join(parts)


__all__ = ["FleetGrid"]
