"""One instance's pane as lines of text: pure functions of (instance, palette, width, height, now).

No App and no widget here, so a pane can be rendered and checked on its own (tests/test_pane.py); the
grid (``fleet_grid.py``) lays panes out, caches their strips by instance version and repaints a bounded
number per frame. Two shapes: ``compact`` (two lines: name, badge, flags, GPU summary; then the reason
for trouble or the busiest process and the last log line) and ``boxed`` (a border, the address, a line
per GPU, the busiest process, the last log line).
"""

from __future__ import annotations

import time
from typing import Iterable, List, Optional, Tuple

from textual.strip import Strip

from console.agent.wire.protocol import ProcRecord
from console.agent.wire.timefmt import fmt_age as format_age
from console.core.gpu_health import instance_marks
from console.core.spend import fmt_money, money
from console.core.state import FLAP_WINDOW, GpuState, InstanceState
from console.core.status import BENCHMARK_DOWN, CONNECTING, FAILED, GPU_IDLE, STALE, UNREACHABLE, badge

from .palette import Palette
from .render import Line, bar, operator_text, pct, size, sparkline, tail

MAX_GPU_LINES = 8  # boxed pane: GPU lines shown, then "+N more GPUs"
COMPACT_HEIGHT = 2
_REASON_FIRST = frozenset((UNREACHABLE, FAILED, BENCHMARK_DOWN, STALE))  # their detail replaces process/log
_OLD_NUMBERS = frozenset((UNREACHABLE, STALE))  # their GPU figures are the last ones seen: drawn dim, with an age
FLAPS_SHOWN = 2  # reconnects within state.FLAP_WINDOW from which the pane shows "flapped Nx"
FIGURES_OLD_AFTER = 3.0  # seconds: GPU figures older than this get their age beside them ("12s ago", dim)


def badge_text(inst: InstanceState, now: float) -> str:
    """The badge's words; a stale instance's badge counts the age of its data."""
    label = badge(inst.status)
    if inst.status == STALE:
        age = inst.age(now)
        if age is not None:
            label += " " + format_age(age)
    return label


def notes(inst: InstanceState, now: float) -> List[str]:
    """Time-bound notes beside the flags: ``restarted 40s ago`` (until the next verdict), ``flapped 3x``, and the
    GPUs' health marks (``GPU3 ECC 2``, ``GPU1 HW slowdown 5m``, ``GPU0 PCIe x8/16``: console/core/gpu_health.py)."""
    out = instance_marks(inst.gpus.values(), now) if inst.gpus else []
    restarted = inst.restart_note(now)
    if restarted:
        out.append(restarted)
    flaps = inst.flaps(now)
    if flaps >= FLAPS_SHOWN:
        out.append("flapped %dx" % flaps)
    return out


def figures_age(inst: InstanceState, now: float) -> Optional[float]:
    """Seconds since the last GPU frame of a live instance when more than FIGURES_OLD_AFTER (one off screen sends
    a summary: a frame on change or every 5 s, console/core/detail.py), else None. STALE and UNREACHABLE say their
    own age in the badge and detail line; this is not that: the link is fine, the figures are just not new."""
    if inst.gpu_at is None or not inst.gpus or inst.status in _OLD_NUMBERS or inst.link_status != "connected":
        return None
    age = now - inst.gpu_at
    return age if age > FIGURES_OLD_AFTER else None


def figures_note(inst: InstanceState, pal: Palette, now: float) -> Line:
    """`` 12s ago`` (dim) beside GPU figures older than FIGURES_OLD_AFTER; empty otherwise."""
    age = figures_age(inst, now)
    return Line(" %s ago" % format_age(age), pal.dim) if age is not None else Line()


def ages(inst: InstanceState, now: Optional[float] = None) -> bool:
    """Whether the pane's text changes with the clock alone (the grid repaints it each second)."""
    if inst.status in _OLD_NUMBERS:
        return True
    now = time.time() if now is None else now
    if figures_age(inst, now) is not None:
        return True
    if inst.shows_verdict():  # "verdict 40s ago"
        return True
    return bool(inst.restart_note(now)) or bool(inst.reconnects and now - inst.reconnects[-1] <= FLAP_WINDOW + 1)


def pane_height(inst: InstanceState, compact: bool) -> int:
    """Rows the pane needs: compact panes two, boxed panes grow with the GPU count (up to MAX_GPU_LINES)."""
    if compact:
        return COMPACT_HEIGHT
    n = len(inst.gpus)
    return 5 + max(1, min(MAX_GPU_LINES, n) + (1 if n > MAX_GPU_LINES else 0))


def pane_strips(
    inst: InstanceState,
    pal: Palette,
    width: int,
    height: int,
    now: float,
    *,
    compact: bool,
    cursor: bool = False,
    selected: bool = False,
    retry_at: Optional[float] = None,
    cols: Optional[Columns] = None,
) -> List[Strip]:
    """The pane as exactly ``height`` strips of ``width`` cells (what the grid paints); ``retry_at``: when
    a failing link tries again (the pane counts down to it); ``cols``: the compact rows' column widths."""
    base = pal.base
    lines = pane_lines(
        inst, pal, width, height, now, compact=compact, cursor=cursor, selected=selected, retry_at=retry_at,
        cols=cols,
    )
    strips = [Strip(line.segments(base)).adjust_cell_length(width, base) for line in lines]
    while len(strips) < height:
        strips.append(Strip.blank(width, base))
    return strips


def pane_lines(
    inst: InstanceState,
    pal: Palette,
    width: int,
    height: int,
    now: float,
    *,
    compact: bool,
    cursor: bool = False,
    selected: bool = False,
    retry_at: Optional[float] = None,
    cols: Optional[Columns] = None,
) -> List[Line]:
    """The pane's lines (at most ``height``); ``cursor``: the grid's cursor is on it, ``selected``: marked."""
    if compact:
        return compact_lines(inst, pal, width, now, cursor=cursor, selected=selected, retry_at=retry_at, cols=cols)
    return boxed_lines(inst, pal, width, height, now, cursor=cursor, selected=selected, retry_at=retry_at)


def compact_lines(
    inst: InstanceState,
    pal: Palette,
    width: int,
    now: float,
    *,
    cursor: bool = False,
    selected: bool = False,
    retry_at: Optional[float] = None,
    cols: Optional[Columns] = None,
) -> List[Line]:
    """Two lines, the first in columns (as htop's: name, badge, GPU model, ``NxGPU util mem`` and the hottest
    temperature, flags, util sparkline); then the trouble reason, or busiest process │ last log line.
    ``cols``: (name, badge, model) widths shared by every row of the grid; None: this pane's own."""
    w = width - 1
    name_w, badge_w, model_w = cols or (len(inst.name), len(badge_text(inst, now)), len(gpu_model(inst)))
    line1 = _head(inst, pal, now, cursor, selected, name_w, badge_w)
    line1.append(" ")
    if model_w:
        line1.append(gpu_model(inst).ljust(model_w) + " ", pal.dim)
    line1.append_text(gpu_summary(inst, pal, 0))  # (no sparkline here: it comes last)
    if inst.gpus:
        line1.append_text(hottest(inst, pal))
        line1.append_text(figures_note(inst, pal, now))
    flags = [f for f in inst.flags() if f != "simulated GPUs"]  # (the header says that once)
    if flags:
        line1.append(" " + ", ".join(flags), pal.warn if inst.lost_gpus else pal.dim)
    extra = notes(inst, now)
    if extra:
        line1.append(" " + ", ".join(extra), pal.warn)
    live = [g for g in inst.gpus.values() if not (g.lost or g.missing)]
    spark_w = w - line1.cell_len - 1
    if spark_w >= 4 and live:
        line1.append(" ")
        line1.append(sparkline(mean_history(live, spark_w), spark_w),
                     pal.dim if inst.status in _OLD_NUMBERS else pal.spark)
    line2 = Line("  ")
    detail = detail_line(inst, pal, now, retry_at)
    if detail is not None:
        line2.append_text(detail)
    else:
        top = inst.busiest_process()
        if top is not None:
            line2.append(proc_brief(top), pal.dim)
            line2.append(" │ ", pal.dim)
        if inst.last_log is not None:
            line2.append(inst.last_log[2])
    line1.truncate(w, overflow="ellipsis")
    line2.truncate(w, overflow="ellipsis")
    if cursor:
        line1.stylize(pal.cursor)
        line2.stylize(pal.cursor)
    return [line1, line2]


def boxed_lines(
    inst: InstanceState,
    pal: Palette,
    width: int,
    height: int,
    now: float,
    *,
    cursor: bool = False,
    selected: bool = False,
    retry_at: Optional[float] = None,
) -> List[Line]:
    """A bordered pane (heavy border under the cursor): title, address/flags or trouble reason, a line per
    GPU, the busiest process, the last log line, blank lines down to ``height``."""
    w = width
    inner = w - 4
    bstyle = pal.border_focus if cursor else pal.border
    corners = ("┏", "━", "┓", "┃", "┗", "┛") if cursor else ("╭", "─", "╮", "│", "╰", "╯")
    out: List[Line] = []
    top = Line(corners[0], bstyle)
    title = _head(inst, pal, now, False, selected)
    title.truncate(w - 4, overflow="ellipsis")
    top.append_text(title)
    top.append(" ")
    top.append(corners[1] * max(0, w - 2 - top.cell_len + 1), bstyle)
    top.append(corners[2], bstyle)
    out.append(top)

    def boxed(body: Line) -> Line:
        body.truncate(inner, overflow="ellipsis", pad=True)
        line = Line(corners[3] + " ", bstyle)
        line.append_text(body)
        line.append(" " + corners[3], bstyle)
        return line

    sub = Line()
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
    extra = notes(inst, now)
    if extra:
        sub.append(" " + ", ".join(extra), pal.warn)
    age = figures_age(inst, now)
    if age is not None:
        sub.append(" · figures %s ago" % format_age(age), pal.dim)
    detail = detail_line(inst, pal, now, retry_at)
    if detail is not None:
        sub = detail
    out.append(boxed(sub))
    marks = instance_marks(inst.gpus.values(), now) if detail is not None and inst.gpus else []
    if marks:  # the trouble reason took the flags' line: the GPUs' health marks get their own
        out.append(boxed(Line(", ".join(marks), pal.warn)))
    gpus = sorted(inst.gpus.values(), key=lambda g: g.index)
    if not gpus:
        out.append(boxed(gpu_summary(inst, pal, inner)))
    old = inst.status in _OLD_NUMBERS
    for gpu in gpus[:MAX_GPU_LINES]:
        out.append(boxed(gpu_line(gpu, pal, inner, old=old)))
    if len(gpus) > MAX_GPU_LINES:
        out.append(boxed(Line("+%d more GPUs" % (len(gpus) - MAX_GPU_LINES), pal.dim)))
    topp = inst.busiest_process()
    out.append(boxed(Line("top " + proc_brief(topp), pal.dim) if topp else Line("no processes", pal.dim)))
    last = Line()
    if inst.last_log is not None:
        last.append(inst.last_log[2])
    else:
        last.append("no log lines", pal.dim)
    out.append(boxed(last))
    while len(out) < height - 1:
        out.append(boxed(Line()))
    out.append(Line(corners[4] + corners[1] * (w - 2) + corners[5], bstyle))
    return out[:height]


def trouble_cost(inst: InstanceState, now: float) -> str:
    """What the idle episode has cost (``$1.26``) and an announced automatic stop (``stops itself in 4m``)."""
    meter, price = inst.meter, getattr(inst.instance, "price_per_hour", None)
    parts = []
    if meter.mode == "idle" and price is not None:
        parts.append(fmt_money(money(meter.episode(now), price), inst.currency))
    if inst.stop_due is not None:
        parts.append("stops itself in %s" % format_age(max(0.0, inst.stop_due - now)))
    return " · ".join(parts)


def retry_text(retry_at: Optional[float], now: float) -> str:
    """``retry in 12s`` (counting down), ``retrying…`` once due; empty when no retry is pending."""
    if retry_at is None:
        return ""
    left = retry_at - now
    return "retry in %s" % format_age(left + 0.999) if left > 0 else "retrying…"


def detail_line(
    inst: InstanceState, pal: Palette, now: Optional[float] = None, retry_at: Optional[float] = None
) -> Optional[Line]:
    """For trouble states, the reason beats the process/log line; an unreachable host's numbers get their age,
    a failing link its countdown to the next attempt."""
    priced_idle = inst.status == GPU_IDLE and inst.meter.mode == "idle" and inst.instance.price_per_hour is not None
    if (inst.status in _REASON_FIRST or retry_at is not None or priced_idle) and inst.status_detail:
        line = Line(operator_text(inst.status_detail), pal.status.get(inst.status, pal.name))
        if inst.status == UNREACHABLE and inst.last_frame is not None and now is not None:
            line.append(" · last seen %s ago" % format_age(max(0.0, now - inst.last_frame)), pal.dim)
        verdict_age = inst.verdict_age(time.time() if now is None else now) if inst.shows_verdict() else None
        if verdict_age is not None:  # a verdict is a snapshot: how old it is (issue 35)
            line.append(" · verdict %s ago" % format_age(verdict_age), pal.dim)
        retry = retry_text(retry_at, time.time() if now is None else now)
        if retry:
            line.append(" · " + retry, pal.dim)
        cost = trouble_cost(inst, time.time() if now is None else now)
        if cost:
            line.append(" · " + cost, pal.warn)
        return line
    if inst.status == CONNECTING:
        return Line(inst.status_detail or "connecting…", pal.dim)
    return None


def gpu_summary(inst: InstanceState, pal: Palette, width: int) -> Line:
    """``NxGPU util% mem mem%`` over the live GPUs, and their mean util sparkline in what room is left."""
    text = Line()
    if not inst.gpus:
        if inst.gpu_state not in ("no_gpu", "error"):  # those two are already in the pane's flags
            text.append("no GPU data yet", pal.dim)
        return text
    old = inst.status in _OLD_NUMBERS  # the last figures seen, not live ones: dim
    gpus = list(inst.gpus.values())
    live = [g for g in gpus if not (g.lost or g.missing)]
    utils = [g.util for g in live if g.util is not None]
    avg = sum(utils) / len(utils) if utils else None
    text.append("%dxGPU " % len(gpus), pal.dim)
    text.append(pct(avg), pal.dim if old else pal.util)
    mems = [g.mem_fraction for g in live if g.mem_fraction is not None]
    mem = sum(mems) / len(mems) if mems else None
    text.append(" mem ", pal.dim)
    text.append(pct(None if mem is None else mem * 100), pal.dim if old else pal.mem)
    spark_w = max(0, width - text.cell_len - 1)
    if spark_w >= 4 and live:
        hist = mean_history(live, spark_w)
        text.append(" ")
        text.append(sparkline(hist, spark_w), pal.dim if old else pal.spark)
    return text


def gpu_line(gpu: GpuState, pal: Palette, width: int, old: bool = False) -> Line:
    """One GPU: index, util bar and %, memory bar and %, util sparkline, temperature (warn from 85°);
    ``old``: the last figures of a host not heard from, all dim."""
    if old:
        line = gpu_line(gpu, pal, width)
        line.parts = [(t, pal.dim) for t, _ in line.parts]  # nothing in it reads as live
        return line
    text = Line("%d " % gpu.index, pal.dim)
    if gpu.lost or gpu.missing:
        text.append("LOST", pal.badge[FAILED])
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
    if temp is not None:
        text.append(temp_s, pal.warn if temp >= 85 else pal.dim)
    return text


def mean_history(gpus: Iterable[GpuState], width: int) -> List[int]:
    """Per-sample mean util over the given GPUs for the last ``width`` samples."""
    tails = [tail(g.util_hist, width) for g in gpus]
    n = max((len(t) for t in tails), default=0)
    out = []
    for i in range(n):
        vals = [t[i - n + len(t)] for t in tails if i - n + len(t) >= 0 and t[i - n + len(t)] >= 0]
        out.append(sum(vals) // len(vals) if vals else -1)
    return out


def proc_brief(rec: Optional[ProcRecord]) -> str:
    """``pid name cpu N% gpu|rss SIZE`` for one process record."""
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


def _head(
    inst: InstanceState, pal: Palette, now: float, cursor: bool, selected: bool, name_w: int = 0, badge_w: int = 0
) -> Line:
    head = Line()
    head.append("▶" if cursor else " ", pal.border_focus if cursor else pal.base)
    head.append("●" if selected else " ", pal.selected)
    head.append(inst.name, pal.name)
    head.append(" " * (1 + max(0, name_w - len(inst.name))))
    label = badge_text(inst, now)
    head.append(" %s " % label, pal.badge.get(inst.status, pal.name))
    if badge_w > len(label):
        head.append(" " * (badge_w - len(label)))
    return head


Columns = Tuple[int, int, int]  # compact rows: name, badge, GPU model widths
_MODEL_NOISE = ("NVIDIA ", "GeForce ", "Tesla ", "Quadro ")
MODEL_W = 14  # a GPU model's name is cut to this many characters


def gpu_model(inst: InstanceState) -> str:
    """The instance's GPU model, short (``RTX 3090``, ``H100 80GB HBM3``); ``mixed`` for more than one."""
    names = {str(g.get("name") or "") for g in inst.gpus.values()} - {""}
    if not names:
        return ""
    if len(names) > 1:
        return "mixed"
    name = names.pop()
    for noise in _MODEL_NOISE:
        name = name.replace(noise, "")
    return name.strip()[:MODEL_W]


def hottest(inst: InstanceState, pal: Palette) -> Line:
    """`` 71°``: the hottest live GPU (warn from 85°), dim for a host not heard from; blank when unknown."""
    temps = [g.sample.get("temp") for g in inst.gpus.values() if not (g.lost or g.missing)]
    known = [t for t in temps if t is not None]
    if not known:
        return Line("     ")
    top = max(known)
    style = pal.dim if inst.status in _OLD_NUMBERS else pal.warn if top >= 85 else pal.dim
    return Line(" %3d°" % top, style)


def grid_columns(insts: Iterable[InstanceState], now: float) -> Columns:
    """The widths every compact row shares: the longest name (to 24), badge and GPU model."""
    name_w = badge_w = model_w = 0
    for inst in insts:
        name_w = max(name_w, len(inst.name))
        badge_w = max(badge_w, len(badge_text(inst, now)))
        model_w = max(model_w, len(gpu_model(inst)))
    return min(name_w, 24), badge_w, model_w
