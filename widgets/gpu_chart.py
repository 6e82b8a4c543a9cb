"""Time charts for the GPU tab: samples (and older minute aggregates) put into columns, drawn with blocks.

Pure functions, no Textual: ``chart_columns`` turns the in-memory ring (``InstanceState.gpu_ts`` and a GPU's
value ring, aligned from the newest end) and the history file's minute points into one value per column;
``chart_lines`` draws those as rows of eighth blocks with a y label, ``time_axis`` labels the columns and
``stats`` gives min/avg/max. A column no sample falls in is blank when the samples around it are more than
``GAP_INTERVALS`` sampling intervals apart (a frozen agent, a dropped link): a gap, never a line drawn across
it. A known 0 is drawn as the lowest block, so a zero reads apart from "no data".
"""

from __future__ import annotations

from bisect import bisect_left
from typing import Callable, List, Optional, Sequence, Tuple

from rich.text import Text

GAP_INTERVALS = 2.0  # samples further apart than this many intervals leave a gap
BLOCKS = " ▁▂▃▄▅▆▇█"
MinutePoint = Tuple[float, int, int, int]  # (minute start, min, avg, max), as HistoryReader.gpu_series gives
Stats = Tuple[float, float, float]  # min, avg, max


def sample_interval(ts: Sequence[float], default: float = 1.0) -> float:
    """The sampling interval: the median spacing of the last samples (``default`` with fewer than two)."""
    n = len(ts)
    if n < 2:
        return default
    first = max(0, n - 61)
    deltas = sorted(ts[i + 1] - ts[i] for i in range(first, n - 1))
    mid = deltas[len(deltas) // 2]
    return mid if mid > 0 else default


def aligned(ts: Sequence[float], values: Sequence[int]) -> Tuple[List[float], List[int]]:
    """The ring's timestamps and one value ring, cut to the same length from the newest end."""
    k = min(len(ts), len(values))
    t, v = list(ts), list(values)
    return t[len(t) - k:], v[len(v) - k:]


def chart_columns(
    ts: Sequence[float],
    values: Sequence[float],
    older: Sequence[MinutePoint],
    start: float,
    end: float,
    width: int,
    interval: float,
) -> List[Optional[float]]:
    """One value per column over ``[start, end)`` (None: nothing to show there).

    ``ts``/``values`` are the recent samples (same length, oldest first; a negative value is "no data", e.g. a
    lost GPU); ``older`` the history's minute points, used only for columns before the first recent sample.
    A column with samples shows their mean; an empty one between two samples at most ``GAP_INTERVALS``
    intervals apart holds the earlier value (columns narrower than the interval), else stays a gap.
    """
    if width <= 0 or end <= start:
        return []
    step = (end - start) / width
    sums = [0.0] * width
    counts = [0] * width
    max_gap = GAP_INTERVALS * interval
    n = len(ts)
    first = max(0, bisect_left(ts, start) - 1)  # the sample before the window may hold into its first column
    cols = [int((t - start) // step) for t in ts[first:]]
    vals = values[first:]
    for c, v in zip(cols, vals, strict=False):
        if v >= 0 and 0 <= c < width:
            sums[c] += v
            counts[c] += 1
    out: List[Optional[float]] = [sums[c] / counts[c] if counts[c] else None for c in range(width)]
    last = len(cols) - 1
    # hold a value across columns narrower than the interval; with columns wider than a gap no sample needs it
    # but the newest (its columns up to now)
    for i in range(last + 1) if step < max_gap else range(last, last + 1) if last >= 0 else ():
        c, v = cols[i], vals[i]
        if i < last:
            nxt = cols[i + 1]
            if nxt - c <= 1 or v < 0 or ts[first + i + 1] - ts[first + i] > max_gap:
                continue  # next column (the common case), no data, or a gap after this sample
            upto = nxt - 1
        else:
            if v < 0 or end - ts[n - 1] > max_gap:
                continue  # the newest sample is old: nothing since (a freeze going on)
            upto = width - 1
        for k in range(max(0, c + 1), min(width - 1, upto) + 1):
            if out[k] is None:
                out[k] = v
    ring_start = ts[0] if n else end
    if older:
        osums = [0.0] * width
        ocounts = [0] * width
        for minute, _lo, avg, _hi in older:
            if minute + 60 <= start or minute >= ring_start or minute >= end:
                continue
            for c in range(max(0, int((minute - start) // step)),
                           min(width - 1, int((min(minute + 60, end) - start) // step - 1e-9)) + 1):
                if out[c] is None and start + c * step < ring_start:
                    osums[c] += avg
                    ocounts[c] += 1
        for c in range(width):
            if ocounts[c]:
                out[c] = osums[c] / ocounts[c]
    return out


def stats(
    ts: Sequence[float], values: Sequence[float], older: Sequence[MinutePoint], start: float, interval: float
) -> Optional[Stats]:
    """min / time-weighted avg / max over the window: recent samples since ``start`` and the minute points
    before the first of them."""
    lo, hi = float("inf"), float("-inf")
    total = weight = 0.0
    first = bisect_left(ts, start)
    known = [v for v in values[first:] if v >= 0]
    if known:
        lo, hi = min(known), max(known)
        total, weight = sum(known) * interval, len(known) * interval
    ring_start = ts[0] if ts else float("inf")
    for minute, mn, avg, mx in older:
        if minute + 60 > start and minute < ring_start:
            lo, hi = min(lo, mn), max(hi, mx)
            total += avg * 60.0
            weight += 60.0
    if not weight:
        return None
    return lo, total / weight, hi


def gaps(ts: Sequence[float], start: float, end: float, interval: float) -> List[Tuple[float, float]]:
    """``(from, to)`` of each stretch without samples longer than ``GAP_INTERVALS`` intervals in the window,
    the one going on now included."""
    max_gap = GAP_INTERVALS * interval
    out = []
    for i in range(1, len(ts)):
        if ts[i] - ts[i - 1] > max_gap and ts[i] > start:
            out.append((max(start, ts[i - 1]), ts[i]))
    if ts and end - ts[-1] > max_gap:
        out.append((max(start, ts[-1]), end))
    return out


def chart_lines(
    cols: Sequence[Optional[float]],
    height: int,
    top: float,
    style_of: Callable[[float], str],
    label_w: int = 4,
    top_label: str = "",
) -> List[Text]:
    """``height`` rows of blocks (top row first), each column styled by its value; ``top_label`` on the top
    row's gutter and ``0`` on the bottom one. A None column is blank on every row."""
    top = top if top > 0 else 1.0
    levels: List[int] = []
    for v in cols:
        if v is None:
            levels.append(-1)
        else:
            levels.append(max(1, min(height * 8, round(v / top * height * 8))))  # a known 0 still shows
    styles = ["" if v is None else style_of(v) for v in cols]
    lines = []
    for row in range(height - 1, -1, -1):
        label = top_label if row == height - 1 else "0" if row == 0 else ""
        line = Text(no_wrap=True)
        line.append(label.rjust(label_w)[:label_w] + "▕", "dim")
        run, run_style = "", ""
        base = row * 8
        for level, col_style in zip(levels, styles, strict=True):
            fill = level - base
            ch = " " if level < 0 or fill <= 0 else BLOCKS[min(8, fill)]
            style = "" if ch == " " else col_style
            if style != run_style and run:
                line.append(run, run_style or None)
                run = ""
            run_style = style
            run += ch
        if run:
            line.append(run, run_style or None)
        lines.append(line)
    return lines


def span_label(seconds: float) -> str:
    """``-10m``, ``-7m30``, ``-1h``, ``-90s`` ... for a point ``seconds`` before now."""
    s = round(seconds)
    if s <= 0:
        return "now"
    if s % 3600 == 0:
        return "-%dh" % (s // 3600)
    if s >= 3600:
        return "-%dh%02d" % (s // 3600, (s % 3600) // 60)
    if s % 60 == 0:
        return "-%dm" % (s // 60)
    if s >= 60:
        return "-%dm%02d" % (s // 60, s % 60)
    return "-%ds" % s


def time_axis(window: float, width: int, label_w: int = 4) -> Text:
    """``-10m      -5m       now`` under a chart ``width`` columns wide (quarters where there is room)."""
    cells = [" "] * width
    marks = 4 if width >= 48 else 2
    for k in range(marks + 1):
        label = span_label(window * (marks - k) / marks)
        pos = round((width - 1) * k / marks)
        at = max(0, min(width - len(label), pos - (0 if k == 0 else len(label) - 1 if k == marks else len(label) // 2)))
        if all(c == " " for c in cells[max(0, at - 1): at + len(label) + 1]):
            cells[at: at + len(label)] = list(label)
    return Text(" " * (label_w + 1) + "".join(cells), style="dim")
