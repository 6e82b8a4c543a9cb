"""The GPUs tab of the instance screen: one coloured line per GPU, then charts of the selected GPU, then details.

The lines are nvitop/btop-like: index, model, util bar, memory bar (used/total), temperature, power/limit,
clocks and pids, each figure coloured by its level (``LEVELS``: one table of thresholds), so 8 GPUs fit an
80x24 terminal. A lost GPU says LOST, never zeros. Below, util / mem / temp / power of the selected GPU
over a window (``z`` zooms 10m, 1h, 6h, 24h) with a time axis and min/avg/max: recent points from the state's
rings (``InstanceState.gpu_ts``), older ones from the history file's minute aggregates, read off the UI
thread at most every ``HISTORY_REFRESH`` seconds. Stretches without samples are gaps (widgets/gpu_chart.py).
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Tuple

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.widgets import Static

from console.agent.wire.timefmt import fmt_age as format_age
from console.agent.wire.wording import code_words
from console.core.control import FleetControl
from console.core.gpu_health import failure as health_failure
from console.core.gpu_health import marks as health_marks
from console.core.gpu_health import panel_lines as health_panel_lines
from console.core.state import GpuState, InstanceState
from console.core.status import STALE, UNREACHABLE, badge

from .gpu_chart import (
    MinutePoint,
    aligned,
    chart_columns,
    chart_lines,
    gaps,
    sample_interval,
    span_label,
    stats,
    time_axis,
)
from .render import bar, size

FIELDS = (
    ("util", "util", "%"),
    ("mem_util", "mem util", "%"),
    ("temp", "temp", "°C"),
    ("power", "power", "W"),
    ("sm_clock", "SM clock", "MHz"),
    ("mem_clock", "mem clock", "MHz"),
    ("fan", "fan", "%"),
)
# (yellow from, red from) per measure, as nvitop and btop colour them: util and memory in % (of total), power
# in % of its limit, temperature in °C; under the first: green
LEVELS: Dict[str, Tuple[float, float]] = {
    "util": (50.0, 80.0),
    "mem": (60.0, 90.0),
    "power": (60.0, 90.0),
    "temp": (70.0, 85.0),
}
LEVEL_STYLES = ("green", "yellow", "bold red")
WINDOWS = (600.0, 3600.0, 6 * 3600.0, 86400.0)  # the charts' spans, ``z`` cycles them
HISTORY_REFRESH = 30.0  # seconds between reads of the history file
CHART_HEIGHT = 3  # rows per chart
LABEL_W = 4  # the charts' y-label gutter
GIB = 1024.0**3
MIB = 1024.0**2
_MODEL_NOISE = ("NVIDIA ", "GeForce ", "Tesla ", "Quadro ", "RTX A", "PCIe ", "-PCIE", "-SXM4", "-SXM5", "-SXM")
OlderPoints = Dict[int, Dict[str, List[MinutePoint]]]  # GPU index -> field -> minute points (history file)


def level_style(measure: str, value: Optional[float]) -> str:
    """green / yellow / red for ``value`` of ``measure`` (a key of ``LEVELS``); "" when unknown."""
    if value is None:
        return ""
    yellow, red = LEVELS[measure]
    return LEVEL_STYLES[2] if value >= red else LEVEL_STYLES[1] if value >= yellow else LEVEL_STYLES[0]


def short_model(name: str, width: int) -> str:
    """``NVIDIA GeForce RTX 3090`` -> ``RTX 3090``; ``NVIDIA A100-SXM4-80GB`` -> ``A100-80GB``; cut to ``width``."""
    for noise in _MODEL_NOISE:
        if noise == "RTX A":  # RTX A6000 keeps its name
            continue
        name = name.replace(noise, "")
    return name.strip().strip("-")[:width]


def _gib(n: Optional[float]) -> str:
    if n is None:
        return "?"
    g = n / GIB
    return "%.1f" % g if g < 9.95 else "%d" % round(g)


def _procs_brief(procs: Any, width: int) -> str:
    """``1234,5678`` / ``≈12,15`` / ``?`` (NVML pid with no local process), cut to ``width`` with ``+N``."""
    items = []
    for p in procs or ():
        if p.get("pid") is not None:
            items.append(str(p["pid"]))
        elif p.get("group"):
            items.append("≈" + ",".join(str(x) for x in p["group"]))
        else:
            items.append("?")
    out = ""
    for i, item in enumerate(items):
        more = "+%d" % (len(items) - i - 1) if i + 1 < len(items) else ""
        cand = (out + "," if out else "") + item
        if len(cand) + len(more) > width:
            rest = "+%d" % (len(items) - i)
            return (out + (" " if len(out) + len(rest) < width else "") + rest) if out else rest[:width]
        out = cand
    return out


class RowLayout:
    """Column widths for the GPU lines at a given width (bars grow with the terminal)."""

    def __init__(self, width: int, count: int) -> None:
        self.idx_w = 2 if count <= 10 else 3
        self.model_w = 10 if width < 100 else 16
        fixed = self.idx_w + (self.model_w + 1) + 5 + 9 + 5 + 9 + 10 + 1  # idx, model, " 97% ", mem, temp, W, clk
        self.pids_w = 8 if width < 100 else 16
        self.bar_w = max(4, min(30, (width - fixed - self.pids_w) // 2))
        self.pids_w = max(4, width - fixed - 2 * self.bar_w)

    def header(self) -> Text:
        h = "#".rjust(self.idx_w - 1) + " " + "model".ljust(self.model_w) + " "
        h += "util".ljust(self.bar_w + 5) + "mem".ljust(self.bar_w + 9) + " temp" + "  power/lim" + "  clk MHz"
        h += "  pids"
        return Text(h, style="dim")


def gpu_row(gpu: GpuState, layout: RowLayout, selected: bool = False) -> Text:
    """One GPU in one line: the figures coloured by level; a lost GPU says LOST (and why), no numbers."""
    line = Text(no_wrap=True, overflow="ellipsis")
    line.append(str(gpu.index).rjust(layout.idx_w - 1) + " ", "bold reverse" if selected else "bold")
    model = short_model(str(gpu.get("name") or "?"), layout.model_w)
    line.append(model.ljust(layout.model_w) + " ")
    if gpu.lost or gpu.missing:
        line.append(" LOST ", "bold reverse red")
        why = "absent from the last sample" if gpu.missing and not gpu.lost else (gpu.error or "GPU is lost")
        line.append(" " + why, "red")
        return line
    s = gpu.sample
    util = s.get("util")
    ustyle = level_style("util", util)
    line.append(bar(None if util is None else util / 100, layout.bar_w), ustyle or "dim")
    line.append(("%3d%%" % util if util is not None else "   ?") + " ", ustyle)
    frac = gpu.mem_fraction
    mstyle = level_style("mem", None if frac is None else frac * 100)
    line.append(bar(frac, layout.bar_w), mstyle or "dim")
    mem = "%s/%sG" % (_gib(s.get("mem_used")), _gib(gpu.static.get("mem_total")))
    line.append(mem.rjust(9), mstyle)
    temp = s.get("temp")
    line.append((" %3d°" % temp) if temp is not None else "   ?°", level_style("temp", temp))
    power, limit = s.get("power"), gpu.static.get("power_limit")
    if power is None:
        ptext, pstyle = "?W", ""
    elif limit:
        ptext, pstyle = "%d/%dW" % (round(power), round(limit)), level_style("power", 100.0 * power / limit)
    else:
        ptext, pstyle = "%dW" % round(power), ""
    line.append(" " + ptext.rjust(8), pstyle)
    sm, mc = s.get("sm_clock"), s.get("mem_clock")
    clk = "%s/%s" % ("?" if sm is None else sm, "?" if mc is None else mc) if (sm, mc) != (None, None) else "—"
    line.append(" " + clk.rjust(9), "dim")
    line.append(" ")
    if gpu.error:
        line.append("! " + gpu.error, "red")
    else:
        line.append(_procs_brief(s.get("procs"), layout.pids_w))
    return line


def _styler(measure: str, scale: float = 1.0) -> Any:
    """The level colour of a chart column (``scale``: watts to % of the limit)."""
    return lambda v: level_style(measure, v * scale)


def _fmt(measure: str, v: float, limit: Optional[float] = None) -> str:
    if measure == "temp":
        return "%d°C" % round(v)
    if measure == "power":
        return "%dW" % round(v)
    return "%d%%" % round(v)


def gpu_charts(
    inst: InstanceState,
    gpu: GpuState,
    width: int,
    now: float,
    window: float = WINDOWS[0],
    older: Optional[Dict[str, List[MinutePoint]]] = None,
    note: str = "",
) -> List[Text]:
    """util / mem / temp / power of one GPU over ``window`` seconds: a title, then per measure its name, the
    chart, a time axis and min/avg/max."""
    older = older or {}
    out: List[Text] = []
    cols = max(10, width - LABEL_W - 2)
    start = now - window
    interval = sample_interval(inst.gpu_ts, float(getattr(inst.instance, "interval", None) or 1.0))
    title = Text(no_wrap=True, overflow="ellipsis")
    title.append("GPU %d" % gpu.index, "bold")
    title.append(" %s · last %s" % (short_model(str(gpu.get("name") or "?"), 24), span_label(window)[1:]))
    if gpu.lost or gpu.missing:
        title.append("  LOST", "bold reverse red")
    title.append("   ↑↓ GPU · z zoom", "dim")
    out.append(title)
    found = gaps(list(inst.gpu_ts), start, now, interval)
    if found:
        longest = max(found, key=lambda g: g[1] - g[0])
        out.append(Text("gap: no samples for %s, %s ago%s" % (
            format_age(longest[1] - longest[0]), format_age(max(0.0, now - longest[1])) if longest[1] < now else
            "until now", "" if len(found) == 1 else " (%d gaps)" % len(found)), style="yellow"))
    if note:
        out.append(Text(note, style="dim italic"))
    total = gpu.static.get("mem_total")
    limit = gpu.static.get("power_limit")
    rings = {"util": gpu.util_hist, "mem": gpu.mem_hist, "temp": gpu.temp_hist, "power": gpu.power_hist}
    for measure, label in (("util", "util %"), ("mem", "mem %"), ("temp", "temp °C"), ("power", "power W")):
        ts, vals = aligned(inst.gpu_ts, rings[measure])
        points = list(older.get(measure, ()))
        if measure == "mem":  # the history keeps MiB, the ring % of the total
            points = [(m, round(lo * MIB * 100 / total), round(av * MIB * 100 / total), round(hi * MIB * 100 / total))
                      for m, lo, av, hi in points] if total else []
        columns = chart_columns(ts, vals, points, start, now, cols, interval)
        summary = stats(ts, vals, points, start, interval)
        if measure in ("util", "mem"):
            top, top_label = 100.0, "100"
            style_of = _styler(measure)
        elif measure == "temp":
            top = max(100.0, summary[2] if summary else 0.0)
            top_label, style_of = "%d" % top, _styler("temp")
        else:
            top = float(limit or (summary[2] if summary else 0.0) or 1.0)
            if summary and summary[2] > top:
                top = summary[2]
            top_label = "%d" % round(top)
            style_of = _styler("power", 100.0 / limit) if limit else (lambda v: "cyan")
        out.append(Text(label, style="bold"))
        out.extend(chart_lines(columns, CHART_HEIGHT, top, style_of, LABEL_W, top_label))
        out.append(time_axis(window, cols, LABEL_W))
        line = Text(" " * (LABEL_W + 1), style="dim")
        if summary is None:
            line.append("no data in this window")
        else:
            lo, avg, hi = summary
            line.append("min %s  avg %s  max %s" % (_fmt(measure, lo), _fmt(measure, avg), _fmt(measure, hi)))
            if measure == "power" and limit:
                line.append("  (limit %dW)" % round(limit))
        out.append(line)
    return out


def health_lines(gpus: List[GpuState], now: float) -> List[Text]:
    """A line per GPU that reports health through NVML: every field and when it changed, its marks in front
    (red: failing, yellow: throttled or a narrow link; console/core/gpu_health.py)."""
    out: List[Text] = []
    for gpu in gpus:
        parts = health_panel_lines(gpu, now, now)
        if not parts:
            continue
        line = Text("[%d] health " % gpu.index, style="bold")
        marks = health_marks(gpu, now)
        if marks:
            line.append(", ".join(marks) + "  ", "bold red" if health_failure(gpu, now) else "bold yellow")
        line.append(" · ".join(parts), "dim")
        out.append(line)
    return out


def gpu_details(inst: InstanceState) -> Text:
    """Per GPU what the lines leave out: uuid, error, mem util, fan, processes with their memory, MIG."""
    text = Text()
    for gpu in sorted(inst.gpus.values(), key=lambda g: g.index):
        text.append("\n[%d] %s" % (gpu.index, gpu.get("name") or "?"), "bold")
        if gpu.static.get("uuid"):
            text.append("  %s" % gpu.static["uuid"], "dim")
        if gpu.lost or gpu.missing:
            text.append("  LOST", "bold reverse red")
            if gpu.missing and not gpu.lost:
                text.append(" (absent from the last sample)")
        text.append("\n")
        if gpu.error:
            text.append("  error: %s\n" % gpu.error, "red")
        s = gpu.sample
        parts = []
        for key, label, unit in FIELDS[1:]:
            value = s.get(key)
            parts.append("%s %s%s" % (label, "?" if value is None else value, "" if value is None else unit))
        limit = gpu.static.get("power_limit")
        if limit is not None:
            parts.append("power limit %sW" % limit)
        text.append("  " + " · ".join(parts) + "\n", "dim")
        procs = s.get("procs") or []
        if procs:
            text.append("  processes: " + ", ".join(_proc(p) for p in procs) + "\n")
        for m in s.get("mig") or ():  # a MIG-enabled GPU: its instances
            text.append("  MIG %s  %s / %s  %s\n" % (m.get("profile") or "?", size(m.get("mem_used")),
                        size(m.get("mem_total")), ", ".join(_proc(p) for p in m.get("procs") or ()) or "idle"))
    return text


def gpu_detail(
    inst: InstanceState,
    width: int = 80,
    now: Optional[float] = None,
    selected: Optional[int] = None,
    window: float = WINDOWS[0],
    older: Optional[OlderPoints] = None,
    note: str = "",
) -> Text:
    """The whole tab: state line, the GPU lines, the selected GPU's charts, details. A host not heard from
    (unreachable, stale) shows its last figures dim, with their age."""
    return _join(gpu_tab_lines(inst, width, now, selected, window, older, note)[0])


def gpu_tab_lines(
    inst: InstanceState,
    width: int = 80,
    now: Optional[float] = None,
    selected: Optional[int] = None,
    window: float = WINDOWS[0],
    older: Optional[OlderPoints] = None,
    note: str = "",
) -> Tuple[List[Text], Dict[int, int]]:
    """The tab's lines and, per line number, the GPU index its line shows (for a click)."""
    now = time.time() if now is None else now
    lines: List[Text] = []
    rows: Dict[int, int] = {}
    old = inst.status in (UNREACHABLE, STALE) and inst.last_frame is not None
    if old:
        age = format_age(max(0.0, now - (inst.last_frame or 0.0)))
        lines.append(Text("%s: last seen %s ago, not live" % (badge(inst.status), age), style="bold reverse"))
    head = Text(no_wrap=True, overflow="ellipsis")
    state = code_words(inst.gpu_state) if inst.gpu_state else "no data yet"
    head.append("GPU state%s: %s" % (" (then)" if old else "", state), "dim" if old else "bold")
    if inst.gpu_driver:
        head.append("  driver %s" % inst.gpu_driver, "dim" if old else "bold")
    if inst.simulated:
        head.append("  SIMULATED GPUs", "bold reverse")
    if inst.agentless:
        head.append("  agentless (nvidia-smi)", "bold")
    if any("nvml_pid" in p or "group" in p for g in inst.gpus.values() for p in g.sample.get("procs") or ()):
        head.append("  mapped via /dev/nvidia fds", "bold")  # NVML's (host) pids are not this /proc's
    lines.append(head)
    if inst.gpu_message:
        lines.append(Text(inst.gpu_message, style="italic"))
    if inst.gpu_state == "no_gpu" and not inst.gpus:
        lines.append(Text("No NVIDIA GPU / driver on this instance."))
        return lines, rows
    gpus = sorted(inst.gpus.values(), key=lambda g: g.index)
    if not gpus:
        return lines, rows
    first_live = len(lines)
    layout = RowLayout(width, len(gpus))
    chosen = next((g for g in gpus if g.index == selected), gpus[0])
    lines.append(layout.header())
    for gpu in gpus:
        rows[len(lines)] = gpu.index
        lines.append(gpu_row(gpu, layout, gpu is chosen and len(gpus) > 1))
    lines.extend(health_lines(gpus, now))
    lines.append(Text(""))
    lines.extend(gpu_charts(inst, chosen, width, now, window, (older or {}).get(chosen.index), note))
    lines.extend(gpu_details(inst).split("\n", allow_blank=True))
    if old:
        for line in lines[first_live:]:
            line.stylize("dim")
    return lines, rows


def _join(lines: List[Text]) -> Text:
    text = Text("\n").join(lines)
    text.no_wrap = False
    return text


def _proc(p: Any) -> str:
    """``pid (mem)``; a group of local processes as ``≈ 12,15 (mem)``; one with no local process as ``? (mem)``."""
    if p.get("pid") is not None:
        return "%s (%s)" % (p["pid"], size(p.get("mem")))
    if p.get("group"):
        return "≈ %s (%s)" % (",".join(str(x) for x in p["group"]), size(p.get("mem")))
    return "? host pid %s (%s)" % (p.get("nvml_pid"), size(p.get("mem")))


class GpuPanel(Static, can_focus=True):
    """The GPUs tab's content: ``show(inst, width)`` repaints it (cheaply: once per sample, second or key).

    ↑/↓ (or a click on a line) pick the GPU whose charts show, ``z`` zooms; older chart points come from the
    history file through the core (``FleetControl.gpu_history``), read in a thread worker at most every
    ``HISTORY_REFRESH``.
    """

    BINDINGS = [
        Binding("down,j", "select(1)", "Next GPU", show=False),
        Binding("up,k", "select(-1)", "Previous GPU", show=False),
        Binding("z", "zoom(1)", "Zoom out", show=False),  # charts over 10m, 1h, 6h, 24h
        Binding("Z", "zoom(-1)", "Zoom in", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),  # the charts below the lines
        Binding("pageup", "page(-1)", "Page up", show=False),
    ]

    def __init__(self, control: FleetControl, *, id: Optional[str] = None) -> None:
        super().__init__(id=id)
        self.control = control
        self._generation = 0  # a history read started for an instance shown before is dropped
        self._start_over()

    def _start_over(self) -> None:
        self.selected: Optional[int] = None
        self.window = WINDOWS[0]
        self.older: OlderPoints = {}
        self.older_note = ""
        self._inst: Optional[InstanceState] = None
        self._rows: Dict[int, int] = {}
        self._key: Any = None
        self._loaded_at = -1e18  # monotonic time of the last history read started
        self._loaded_window = 0.0
        self._loading = False
        self._older_version = 0
        self.text = Text()  # what it shows now

    def forget(self) -> None:
        """Drop the instance shown, its chosen GPU, zoom and older points: another instance is shown next."""
        self._generation += 1
        self._start_over()
        self.update("")

    # -- painting --------------------------------------------------------------------------------------
    def show(self, inst: InstanceState, width: int = 0, now: Optional[float] = None, force: bool = False) -> None:
        self._inst = inst
        now = time.time() if now is None else now
        width = width or self.size.width or 80
        self._maybe_load(inst, now)
        key = (inst.gpu_ts[-1] if inst.gpu_ts else None, inst.version if not inst.gpu_ts else 0, inst.status,
               self.selected, self.window, width, self._older_version, self.older_note, int(now))
        if key == self._key and not force:
            return
        self._key = key
        lines, self._rows = gpu_tab_lines(inst, width, now, self.selected, self.window, self.older, self.older_note)
        self.text = _join(lines)
        self.update(self.text)

    def repaint(self) -> None:
        if self._inst is not None:
            self.show(self._inst, force=True)

    # -- the history file -------------------------------------------------------------------------------
    def _maybe_load(self, inst: InstanceState, now: float) -> None:
        if not self.control.keeps_history:
            kept = max(0.0, now - inst.gpu_ts[0]) if inst.gpu_ts else 0.0
            self.older_note = "no history kept: charts show this session's last %s only" % format_age(kept)
            return
        fresh = time.monotonic() - self._loaded_at < HISTORY_REFRESH and self._loaded_window >= self.window
        if self._loading or fresh:
            return
        self._loading = True
        if not self.older:
            self.older_note = "reading older points from the history file…"
        self._loaded_at = time.monotonic()
        self._loaded_window = self.window
        generation = self._generation
        self.run_worker(lambda: self._load(inst.name, now - self.window, generation), thread=True,
                        exclusive=True, group="gpu-history", exit_on_error=False)

    def _load(self, name: str, since: float, generation: int) -> None:
        """In a worker thread: read, then hand the result over by plain assignments (the next paint shows it)."""
        try:
            older = self.control.gpu_history(name, since) or {}
            minutes = len({m for per in older.values() for pts in per.values() for m, *_ in pts})
            note = ("older points from the history file (%d minutes)" % minutes) if minutes else \
                "the history file has no earlier minutes for this instance"
        except Exception as exc:  # a missing or locked file: the charts keep the in-memory points
            older, note = {}, "history not readable (%s): in-memory points only" % type(exc).__name__
        if generation != self._generation:  # the panel went on to another instance meanwhile
            return
        self.older = older
        self.older_note = note
        self._older_version += 1
        self._loading = False

    # -- keys and mouse -----------------------------------------------------------------------------------
    def action_select(self, step: int) -> None:
        inst = self._inst
        if inst is None or not inst.gpus:
            return
        indexes = sorted(inst.gpus)
        current = self.selected if self.selected in indexes else indexes[0]
        self.selected = indexes[(indexes.index(current) + step) % len(indexes)]
        self.repaint()

    def action_zoom(self, step: int) -> None:
        i = WINDOWS.index(self.window) if self.window in WINDOWS else 0
        self.window = WINDOWS[(i + step) % len(WINDOWS)]
        self.repaint()

    def action_page(self, step: int) -> None:
        parent = self.parent
        if parent is not None and hasattr(parent, "scroll_page_down"):
            (parent.scroll_page_down if step > 0 else parent.scroll_page_up)()  # type: ignore[attr-defined]

    def on_click(self, event: events.Click) -> None:
        index = self._rows.get(event.y)
        if index is not None:
            self.selected = index
            self.repaint()
