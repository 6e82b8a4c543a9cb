"""The detail pane: the selected instance beside the grid or table, on terminals >= ``MIN_COLUMNS`` wide.

Why a Line-API widget that polls: the pane shows one instance (the cursor's), so the only work is a few
dozen short lines, rebuilt only when that instance's ``version`` (or, for text that ages, the second)
changes, at the app's frame rate. It reads the shared cursor (``FleetView.cursor_name``) itself instead of
listening for ``CursorMoved``: those messages bubble to the app, not to a sibling, and the grid also moves
its cursor without one (a filter that hides the instance under it). The lines come from a pure function
(``detail_lines``) over the same builders as the grid's panes (``pane.gpu_line`` and friends), so a GPU
reads the same in both. Host text (log lines, process names, verdicts) is already cleaned where it enters
the state (``console/core/text_safety.py``); it is cleaned again here (free for printable text) and never parsed
as markup (``Line`` goes straight to segments).
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, List, Optional, Tuple

from textual.geometry import Region
from textual.strip import Strip
from textual.widget import Widget

from console.agent.wire.timefmt import fmt_age as format_age
from console.core.state import FleetState, InstanceState, LogRing
from console.core.status import STALE, UNREACHABLE
from console.core.text_safety import clean

from .fleet_view import FleetView
from .palette import Palette
from .pane import badge_text, detail_line, gpu_line, gpu_summary, notes, proc_brief
from .render import Line, changed_runs, operator_text

MIN_COLUMNS = 160  # the terminal width from which the pane is shown
MIN_W, MAX_W = 48, 70  # the pane's width: what whole grid columns leave over, within these bounds
GRID_PANE_W = 50  # fleet_grid.FULL_MIN_W: the grid's boxed pane width
LOG_LINES = 10  # log lines shown at most (fewer when the terminal is short)
MAX_GPUS = 16  # GPU lines shown, then "+N more GPUs"


def pane_width(columns: int) -> int:
    """The pane's width in a terminal ``columns`` wide: the room whole grid columns leave (so the grid keeps
    as many panes side by side as it can), at least ``MIN_W`` and at most ``MAX_W``."""
    grid = columns - MIN_W - 1  # (1: the grid's scrollbar)
    fit = max(1, grid // GRID_PANE_W)
    return max(MIN_W, min(MAX_W, columns - 1 - fit * GRID_PANE_W))


def pick_log(inst: InstanceState) -> Optional[LogRing]:
    """The log to show: the benchmark's own, else the one the last line came from, else the newest."""
    for path in (inst.bench_log, inst.last_log[0] if inst.last_log else None):
        if path and path in inst.logs:
            return inst.logs[path]
    return max(inst.logs.values(), key=lambda r: r.updated, default=None)


def bench_line(inst: InstanceState, pal: Palette, now: float) -> Line:
    """``benchmark running 1h2m`` (or down, starting under its entrypoint, unknown), and a restart note."""
    line = Line("benchmark ", pal.dim)
    if inst.bench_running:
        up = ""
        if inst.bench_started:
            up = " " + format_age(max(0.0, now + inst.clock_offset - inst.bench_started))
        line.append("running" + up, pal.util)
    elif inst.bench_running is False:
        entry = inst.entrypoint_age(now)
        if entry is not None:
            line.append("starting (entrypoint up %s)" % format_age(entry), pal.warn)
        else:
            line.append("not running", pal.error)
    else:
        line.append("unknown" if inst.bench_patterns else "not watched: no [benchmark] match in fleet.toml", pal.dim)
    for note in notes(inst, now):
        line.append(" · " + note, pal.warn)
    return line


def verdict_line(inst: InstanceState, pal: Palette, now: float) -> Line:
    """The last verdict in one line, dim once it no longer describes this run; its age."""
    line = Line("verdict ", pal.dim)
    summary = operator_text(clean(inst.verdict_summary()))
    if not summary:
        return line.append("none yet (d diagnoses)", pal.dim)
    line.append(summary, None if inst.diagnosis_counts() else pal.dim)
    if inst.diagnosis_at is not None:
        line.append(" (%s ago)" % format_age(max(0.0, now - inst.diagnosis_at)), pal.dim)
    return line


def detail_lines(
    inst: InstanceState, pal: Palette, width: int, height: int, now: float, retry_at: Optional[float] = None
) -> List[Line]:
    """The pane's lines (at most ``height``, each at most ``width`` cells): name and badge, address or the
    trouble reason, a line per GPU, the benchmark, the verdict, the busiest process, the last log lines."""
    out: List[Line] = []
    head = Line(inst.name, pal.name)
    head.append("  ")
    head.append(" %s " % badge_text(inst, now), pal.badge.get(inst.status, pal.name))
    flags = inst.flags()
    if flags:
        head.append("  " + ", ".join(flags), pal.warn if inst.lost_gpus else pal.dim)
    out.append(head)
    sub = detail_line(inst, pal, now, retry_at)
    if sub is None:
        addr = "%s@%s:%s" % (inst.user or "?", inst.host, inst.port or 22)
        sub = Line(addr, pal.dim)
        if inst.tags:
            sub.append("  [%s]" % ",".join(inst.tags), pal.dim)
    out.append(sub)
    gpus = sorted(inst.gpus.values(), key=lambda g: g.index)
    old = inst.status in (UNREACHABLE, STALE)  # the last figures seen: dim, as the grid draws them
    if not gpus:
        out.append(gpu_summary(inst, pal, width) if inst.gpu_state not in ("no_gpu", "error")
                   else Line(clean(inst.gpu_message) or "no GPU", pal.dim))
    for gpu in gpus[:MAX_GPUS]:
        out.append(gpu_line(gpu, pal, width, old=old))
    if len(gpus) > MAX_GPUS:
        out.append(Line("+%d more GPUs" % (len(gpus) - MAX_GPUS), pal.dim))
    out.append(Line())
    out.append(bench_line(inst, pal, now))
    out.append(verdict_line(inst, pal, now))
    top = inst.busiest_process()
    busiest = Line("top ", pal.dim)
    out.append(busiest.append(clean(proc_brief(top)), None) if top else busiest.append("no processes", pal.dim))
    ring = pick_log(inst)
    room = height - len(out) - 2
    if ring is not None and room > 0:
        out.append(Line())
        title = os.path.basename(ring.path) or ring.path
        out.append(Line("log %s" % clean(title), pal.dim).append(
            " (missing)" if ring.missing else " (%s ago)" % format_age(max(0.0, now - ring.updated)) if ring.updated
            else "", pal.dim))
        shown = list(ring.lines)[-min(LOG_LINES, room):]
        num_w = len(str(shown[-1][0])) if shown else 1
        for number, text in shown:
            line = Line(str(number).rjust(num_w) + " ", pal.dim)
            line.append(clean(text).expandtabs(4))
            out.append(line)
        if not shown:
            out.append(Line("no lines yet", pal.dim))
    for line in out:
        line.truncate(width, overflow="ellipsis")
    return out[:height]


class DetailPane(Widget):
    """The cursor's instance in detail; shown by itself when the terminal is ``MIN_COLUMNS`` wide or more."""

    DEFAULT_CSS = """
    DetailPane { width: 60; height: 1fr; padding: 0 1; border-left: vkey $panel-lighten-2; display: none; }
    """

    def __init__(self, state: FleetState, view: FleetView, *, retry_at: Callable[[str], Optional[float]],
                 id: Optional[str] = None) -> None:
        super().__init__(id=id)
        self.state = state
        self.view = view  # its cursor_name is the selected instance (the grid's and the table's)
        self.retry_at = retry_at  # when a failing link tries again (FleetControl.retry_at)
        self._strips: List[Strip] = []
        self._key: Optional[Tuple[Any, ...]] = None
        self._palette: Optional[Palette] = None
        self.renders = 0  # times the lines were rebuilt (tests and the UI benchmark read it)

    @property
    def name_shown(self) -> Optional[str]:
        return self._key[0] if self._key else None

    def on_mount(self) -> None:
        self.app.theme_changed_signal.subscribe(self, self._theme_changed)
        self.fit(self.app.size.width)

    def _theme_changed(self, _theme: Any) -> None:
        self._palette, self._key = None, None
        self.poll_state()  # the lines in the new colours now, not at the next frame
        self.refresh()

    @property
    def palette(self) -> Palette:
        if self._palette is None:
            self._palette = Palette(self.app.get_css_variables(), self.rich_style)
        return self._palette

    def fit(self, columns: int) -> None:
        """Shown from ``MIN_COLUMNS`` on, as wide as ``pane_width`` says (a resize calls it again)."""
        shown = columns >= MIN_COLUMNS
        if shown:
            width = pane_width(columns)
            if self.styles.width is None or self.styles.width.value != width:
                self.styles.width = width
        if self.display != shown:
            self.display = shown

    def poll_state(self) -> None:
        """Each frame of the app (``FleetApp.paint_frame``): follow the terminal's width and the cursor;
        rebuild the lines only when the instance shown, its version, the pane's size or (for text that ages)
        the second changed."""
        self.fit(self.app.size.width)
        if not self.display or self.app.screen is not self.screen:
            return
        name = self.view.cursor_name
        inst = self.state.instances.get(name) if name else None
        size = self.content_size
        now = time.time()
        ages = inst is not None and bool(inst.bench_running or inst.status == STALE or inst.diagnosis_at
                                         or inst.logs or inst.restarted_at)
        key = (name, inst.version if inst else -1, size.width, size.height, int(now) if ages else 0)
        if key == self._key:
            return
        self._key = key
        self._rebuild(inst, size.width, size.height, now)

    def _rebuild(self, inst: Optional[InstanceState], width: int, height: int, now: float) -> None:
        pal = self.palette
        if inst is None:
            lines = [Line("no instance selected", pal.dim)]
        else:
            lines = detail_lines(inst, pal, width, height, now, self.retry_at(inst.name))
        strips = [Strip(line.segments(pal.base)).adjust_cell_length(width, pal.base) for line in lines]
        old, self._strips = self._strips, strips
        self.renders += 1
        runs = changed_runs(old, strips)
        if sum(count for _, count in runs) == len(strips):
            self.refresh()
        elif runs:  # only what looks different: a GPU's figures, a log line's age (Textual composes dirty lines)
            self.refresh(*(Region(0, y, width, count) for y, count in runs))

    def render_line(self, y: int) -> Strip:
        width = self.content_size.width
        if y < len(self._strips) and self._strips[y].cell_length == width:
            return self._strips[y]
        return Strip.blank(width, self.palette.base)

    @property
    def text(self) -> str:
        """What the pane shows, as plain text (tests)."""
        return "\n".join(strip.text for strip in self._strips)


__all__ = ["MIN_COLUMNS", "DetailPane", "bench_line", "detail_lines", "pane_width", "pick_log", "verdict_line"]
