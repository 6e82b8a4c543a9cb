"""The fleet table's rows, as pure functions tested without an App: what a row shows (``row_values``), the
order (``sort_names``, ``SORT_VALUE``), the columns that fit a width (``layout``), the header and a row as a
styled ``Line`` (``header_line``, ``row_line``). The widget is widgets/fleet_table.py.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Optional, Tuple

from console.agent.wire.timefmt import fmt_age as format_age
from console.core.gpu_health import instance_failure, instance_marks
from console.core.spend import money
from console.core.state import BUSY_UTIL, InstanceState

from .palette import Palette
from .pane import badge_text, gpu_model
from .render import Line

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
    ("price", "$/h", 6, 5, True),
    ("idle_cost", "IDLE $", 7, 3, True),
    ("health", "HEALTH", 16, 9, False),  # dropped first when narrow (the pane and the GPUs tab say it too)
    ("verdict", "VERDICT", 22, 4, False),
    ("progress", "LAST PROGRESS", 0, 0, False),
)
SORT_KEYS = ("status", "name", "util", "mem", "temp", "power", "uptime", "progress", "gpu", "price", "idle_cost")
ASCENDING = frozenset(("status", "name", "gpu"))  # the others: biggest (or newest) first
LIVE_KEYS = frozenset(("util", "mem", "temp", "power", "uptime", "progress", "idle_cost"))
MONEY_KEYS = frozenset(("price", "idle_cost"))
PROGRESS_MIN = 12
GAP = 1

Layout = List[Tuple[str, int, bool]]  # (key, width, right-aligned)


# A meter's last repaint, read as what it says done (the agent's diagnosis parses them in full; this is the
# table's one-line reading of the last line): tqdm "desc: 37%|███▋ | 1.84G/4.98G [..]", curl's meter
# " 37 4.98G 37 1.84G 0 0 ...", wget "45%[===>  ] 463.25M", any other "NN %".
TQDM = re.compile(r"^(.*?)[:\s]*(\d{1,3}(?:\.\d+)?)%\|[^|]*\|\s*([\d.]+\s?[kKMGTP]?i?B?)/([\d.]+\s?[kKMGTP]?i?B?)")
CURL = re.compile(r"^\s*(\d{1,3})\s+(\d[\d.]*[kKMGT]?)\s+(\d{1,3})\s+(\d[\d.]*[kKMGT]?)\s+\d{1,3}\s+\S+"
                  r"\s+\S+\s+\S+\s+[\d:-]+")
WGET = re.compile(r"^(.*?)\s*(\d{1,3})%\[[=> ]*\]\s+([\d.,]+[KMGT]?)")
BAR = re.compile(r"[#=>\u2580-\u259f\-|]{3,}")  # runs of bar glyphs (block elements, # = > -)
PERCENT = re.compile(r"(\d{1,3}(?:\.\d+)?)\s?%")


def meter_text(line: str) -> str:
    """What a progress line says done, in words ("model.bin 37 % (1.84G/4.98G)"); the line, bars taken out, else."""
    m = TQDM.search(line)
    if m:
        desc = m.group(1).strip()
        return ("%s %s %% (%s/%s)" % (desc, m.group(2), m.group(3), m.group(4))).strip()
    m = CURL.match(line)
    if m:
        return "%s %% (%s of %s)" % (m.group(3), m.group(4), m.group(2))
    m = WGET.search(line)
    if m:
        return ("%s %s %% (%s)" % (m.group(1).strip(), m.group(2), m.group(3))).strip()
    if not PERCENT.search(line):
        return line.strip()
    return PERCENT.sub(lambda p: p.group(1) + " %", " ".join(BAR.sub(" ", line).split()))


def stalled(inst: InstanceState) -> str:
    """The diagnosis's word on a stalled download ("download stalled at 37.2 % for 6m"), while it counts."""
    code = inst.diagnosis["verdict"].get("code") if inst.diagnosis and inst.diagnosis.get("verdict") else None
    return inst.verdict_summary() if code == "download_stalled" and inst.diagnosis_counts() else ""


def short_stall(brief: str) -> str:
    """``download stalled at 37.2 % (1.8G) for 6m`` -> ``37.2% stalled 6m`` (a narrow LAST PROGRESS column)."""
    m = re.search(r"stalled at (.+?)(?: \(.*\))? for (\S+)$", brief)
    return "%s stalled %s" % (m.group(1).replace(" %", "%"), m.group(2)) if m else brief


def progress_text(inst: InstanceState) -> str:
    """LAST PROGRESS: a download stall as the diagnosis measured it, else the last log line read as progress."""
    return stalled(inst) or (meter_text(inst.last_log[2]) if inst.last_log is not None else "")


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


def _price(inst: InstanceState, now: float) -> Optional[float]:
    return getattr(inst.instance, "price_per_hour", None)


def _idle_cost(inst: InstanceState, now: float) -> Optional[float]:
    """The money paid while idle since the console began watching (None without a price)."""
    return money(inst.meter.seconds("idle", now), _price(inst, now))


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
    "price": _price,
    "idle_cost": _idle_cost,
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
        "progress_text": progress_text(inst),
        "progress_age": None if progress_at is None or stalled(inst) else max(0.0, now - progress_at),
        "health": ", ".join(instance_marks(inst.gpus.values(), now)) if inst.gpus else "",
        "health_failed": bool(inst.gpus) and bool(instance_failure(inst.gpus.values(), now)),
        "verdict": inst.verdict_summary() if inst.diagnosis else "",
        "verdict_current": inst.diagnosis_counts(),
        "verdict_age": inst.verdict_age(now),
        "price": _price(inst, now),
        "idle_cost": _idle_cost(inst, now),
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


def column_title(key: str, currency: str = "$") -> str:
    """A column's header; the money columns in the fleet's currency (``€/h``, ``IDLE €``, ``EUR/h``)."""
    title = next(h for k, h, _w, _d, _r in COLUMNS if k == key)
    return title.replace("$", currency) if key in MONEY_KEYS else title


def layout(width: int, name_w: int, status_w: int, priced: bool = False, currency: str = "$") -> Layout:
    """The columns that fit ``width``: the low-priority ones dropped first; the progress column takes the rest.
    The money columns (``$/h``, ``IDLE $``, in ``currency``) only when the fleet has prices."""
    fixed = {"name": max(5, name_w), "status": max(7, status_w)}  # (room for the title and its ▲)
    fixed.update({k: max(w, len(column_title(k, currency)) + 1) for k, _h, w, _d, _r in COLUMNS if k in MONEY_KEYS})
    cols = [(k, fixed.get(k, w), right, drop) for k, _h, w, drop, right in COLUMNS
            if priced or k not in MONEY_KEYS]
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


def header_line(cols: Layout, sort_key: str, reverse: bool, stable: bool, pal: Palette, currency: str = "$") -> Line:
    """Column names (money in ``currency``); the sort column marked ▲/▼ (``o`` ``O``), ``[held]`` while the order
    is held (``S``)."""
    line = Line(" ", pal.dim)
    for key, width, right in cols:
        title = column_title(key, currency)
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
            text, style = values["name"], pal.selected if selected else figure or pal.name
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
        elif key == "price":
            text = _num(values["price"], "%.2f")
        elif key == "idle_cost":
            text = _num(values["idle_cost"], "%.2f")
            style = figure or (pal.warn if (values["idle_cost"] or 0) >= 0.005 else pal.dim)
        elif key == "uptime":
            text = format_age(values["uptime"]) if values["uptime"] is not None else "—"
        elif key == "health":  # NVML's marks: ECC, Xid, row remap (red), throttling and a narrow link (warn)
            text = values["health"] or "—"
            style = figure or (pal.error if values["health_failed"] else pal.warn if values["health"] else pal.dim)
        elif key == "verdict":  # the verdict and its age, kept in view as the progress column's
            age = values["verdict_age"] if values["verdict"] else None
            suffix = " (%s)" % format_age(age) if age is not None else ""
            text = _cell(values["verdict"] or "—", max(0, width - len(suffix)), False).rstrip() + suffix
            style = figure or (None if values["verdict_current"] else pal.dim)
        else:  # progress: the last log line and its age
            age = values["progress_age"]
            suffix = " (%s)" % format_age(age) if age is not None else ""
            body = values["progress_text"] or "—"
            if values["progress_age"] is None and len(body) > width:  # a stall, narrow: its figures first
                body = short_stall(body)
            room = max(0, width - len(suffix))
            text = _cell(body, room, False).rstrip() + suffix
        line.append(_cell(text, width, right) + " " * GAP, style)
    return line


__all__ = ["ASCENDING", "COLUMNS", "LIVE_KEYS", "SORT_KEYS", "SORT_VALUE", "Layout", "column_title", "header_line",
           "layout", "row_line", "row_values", "sort_names"]
