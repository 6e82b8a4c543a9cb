"""What a GPU's NVML health says (issue 30): the failure that makes an instance FAILED, the warning marks of the
pane and the table, the GPUs tab's lines, the ``health`` object of ``status --json`` and MCP.

Pure functions of ``GpuState`` (``health`` from the gpu frames, ``xids`` from the xid frames). FAILED: an
uncorrectable ECC error (volatile), a failed row remap, or a fatal Xid in the last ``FATAL_XID_FOR`` seconds.
Throttling (HW slowdown, thermal, power brake, SW power cap) and a PCIe link narrower than the card's are
warnings: a mark and a line, the status stays OK. A field the card does not report is left out, never an error.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Tuple, cast

from console.agent.wire.timefmt import fmt_age
from console.core.rings import GpuState

# Xids that mean the GPU (or its memory) is failing: reset, reboot or replacement (NVIDIA's Xid catalog).
FATAL_XIDS: Dict[int, str] = {
    48: "double-bit ECC error",
    63: "ECC page retirement / row remap event",
    64: "ECC page retirement / row remap failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}
FATAL_XID_FOR = 24 * 3600.0  # seconds a fatal Xid keeps the instance FAILED (earlier agents' ones included)
REASON_LABELS = {
    "hw_slowdown": "HW slowdown",
    "hw_thermal": "HW thermal slowdown",
    "hw_power_brake": "HW power brake",
    "sw_thermal": "SW thermal slowdown",
    "sw_power_cap": "SW power cap",
}
# What an ``[[alert]]``'s ``gpu_health = [...]`` may name (console/inventory/schema.py ``HealthField`` agrees).
ALERT_FIELDS = ("ecc_uncorrected", "row_remap_failure", "row_remap_pending", "retired_pages_pending", "xid",
                "hw_slowdown", "hw_thermal", "hw_power_brake", "sw_thermal", "sw_power_cap", "pcie_degraded")
JSON_KEYS = ("ecc_uncorrected", "ecc_corrected", "remapped_rows", "retired_pages", "clock_events", "pcie")


def _h(gpu: GpuState) -> Dict[str, Any]:
    return cast(Dict[str, Any], gpu.health)


def fatal_xids(gpu: GpuState, now: float) -> List[Dict[str, Any]]:
    """The GPU's fatal Xid events of the last ``FATAL_XID_FOR`` seconds (``now``: epoch)."""
    return [e for e in gpu.xids if e["xid"] in FATAL_XIDS and now - e["time"] < FATAL_XID_FOR]


def failure(gpu: GpuState, now: float) -> str:
    """Why this GPU is failing ("" when it is not): uncorrectable ECC, a failed row remap, a fatal Xid."""
    health: Dict[str, Any] = _h(gpu)
    why = []
    unc = health.get("ecc_uncorrected")
    if isinstance(unc, int) and unc > 0:
        why.append("%d uncorrectable ECC error%s" % (unc, "" if unc == 1 else "s"))
    rows = health.get("remapped_rows") or {}
    if rows.get("failure"):
        why.append("row remap failed")
    for xid in sorted({e["xid"] for e in fatal_xids(gpu, now)}):
        why.append("Xid %d (%s)" % (xid, FATAL_XIDS[xid]))
    return "GPU %d: %s" % (gpu.index, ", ".join(why)) if why else ""


def _may_fail(health: Dict[str, Any]) -> bool:
    return bool(health.get("ecc_uncorrected") or (health.get("remapped_rows") or {}).get("failure"))


def instance_failure(gpus: Iterable[GpuState], now: float) -> str:
    """``gpu_health: GPU 3: 2 uncorrectable ECC errors; ...`` for the status detail; "" when none fails."""
    # every frame re-derives the status: most GPUs have no Xid, no health record or a clean one, seen at a glance
    troubled = [g for g in gpus if g.xids or (g.health and _may_fail(_h(g)))]
    if not troubled:
        return ""
    reasons = [r for r in (failure(g, now) for g in sorted(troubled, key=lambda g: g.index)) if r]
    return "gpu_health: " + "; ".join(reasons) if reasons else ""


def throttling(gpu: GpuState, now: float) -> List[str]:
    """Active trouble clock reasons with how long: ``HW slowdown 5m``."""
    health: Dict[str, Any] = _h(gpu)
    since: Dict[str, Any] = health.get("clock_since") or {}
    out = []
    for name in health.get("clock_events") or ():
        label = REASON_LABELS.get(name, name)
        began = since.get(name)
        out.append("%s %s" % (label, fmt_age(max(0.0, now - began))) if isinstance(began, (int, float)) else label)
    return out


def degraded_link(gpu: GpuState) -> str:
    """``PCIe x8/16`` when the link trained narrower than the card's (generation drops at idle are normal)."""
    pcie: Dict[str, Any] = _h(gpu).get("pcie") or {}
    width, top = pcie.get("width"), pcie.get("max_width")
    if isinstance(width, int) and isinstance(top, int) and 0 < width < top:
        return "PCIe x%d/%d" % (width, top)
    return ""


def _failure_marks(gpu: GpuState, now: float) -> List[str]:
    health: Dict[str, Any] = _h(gpu)
    out = []
    unc = health.get("ecc_uncorrected")
    if isinstance(unc, int) and unc > 0:
        out.append("ECC %d" % unc)
    if (health.get("remapped_rows") or {}).get("failure"):
        out.append("remap failed")
    out.extend("Xid %d" % x for x in sorted({e["xid"] for e in fatal_xids(gpu, now)}))
    return out


def _warning_marks(gpu: GpuState, now: float) -> List[str]:
    link = degraded_link(gpu)
    return throttling(gpu, now) + ([link] if link else [])


def marks(gpu: GpuState, now: float) -> List[str]:
    """Short marks for the pane and the table: ``ECC 2``, ``Xid 79``, ``remap failed``, ``HW slowdown 5m``,
    ``PCIe x8/16`` (failures first)."""
    return _failure_marks(gpu, now) + _warning_marks(gpu, now)


def instance_marks(gpus: Iterable[GpuState], now: float) -> List[str]:
    """Every GPU's marks as ``GPU1 HW slowdown 5m`` (the pane's warning and the table's HEALTH column): every
    GPU's failures first, then the warnings, so a narrow column shows the failing GPU."""
    ordered = sorted(gpus, key=lambda g: g.index)
    return ["GPU%d %s" % (g.index, m) for kind in (_failure_marks, _warning_marks) for g in ordered
            for m in kind(g, now)]


def health_json(gpu: GpuState) -> Dict[str, Any]:
    """The ``health`` object of ``status --json`` and MCP: only what the card reports, ``xids`` always."""
    health: Dict[str, Any] = _h(gpu)
    out: Dict[str, Any] = {key: health[key] for key in JSON_KEYS if key in health}
    for key in ("ecc_mode", "ecc_corrected_agg", "ecc_uncorrected_agg", "clock_since", "pstate", "persistence",
                "nvlink"):
        if key in health:
            out[key] = health[key]
    out["xids"] = [{"xid": e["xid"], "time": e["time"]} for e in gpu.xids]
    return out


def panel_lines(gpu: GpuState, now_console: float, now: float) -> List[str]:
    """The GPUs tab's health lines for one GPU: every field it reports and how long ago it last changed."""
    health: Dict[str, Any] = _h(gpu)
    parts: List[str] = []

    def changed(key: str) -> str:
        at = gpu.health_at.get(key)
        return " (changed %s ago)" % fmt_age(max(0.0, now_console - at)) if at is not None else ""

    if "ecc_mode" in health:
        ecc = "ECC on" if health["ecc_mode"] else "ECC off"
        if "ecc_uncorrected" in health or "ecc_corrected" in health:
            ecc += ": uncorrected %s, corrected %s" % (health.get("ecc_uncorrected", "?"),
                                                       health.get("ecc_corrected", "?"))
        if "ecc_uncorrected_agg" in health:
            ecc += " (lifetime %s / %s)" % (health.get("ecc_uncorrected_agg"), health.get("ecc_corrected_agg", "?"))
        parts.append(ecc + changed("ecc_uncorrected"))
    rows = health.get("remapped_rows")
    if rows:
        parts.append("remapped rows: %d corrected, %d uncorrected%s%s%s" % (
            rows.get("corrected", 0), rows.get("uncorrected", 0), ", pending" if rows.get("pending") else "",
            ", FAILED" if rows.get("failure") else "", changed("remapped_rows")))
    pages = health.get("retired_pages")
    if pages:
        parts.append("retired pages: %d%s%s" % (pages.get("count", 0), ", pending" if pages.get("pending") else "",
                                                changed("retired_pages")))
    if "clock_events" in health:
        active = throttling(gpu, now)
        parts.append("clocks: %s%s" % (", ".join(active) if active else "not throttled", changed("clock_events")))
    pcie = health.get("pcie")
    if pcie:
        parts.append("PCIe gen %s/%s x%s/%s, %s replays%s" % (
            pcie.get("gen", "?"), pcie.get("max_gen", "?"), pcie.get("width", "?"), pcie.get("max_width", "?"),
            pcie.get("replays", "?"), changed("pcie")))
    extra = []
    if "pstate" in health:
        extra.append("P%d" % health["pstate"])
    if "persistence" in health:
        extra.append("persistence %s" % ("on" if health["persistence"] else "off"))
    link = health.get("nvlink")
    if link:
        extra.append("NVLink %d up, %d down" % (link.get("up", 0), link.get("down", 0)))
    if extra:
        parts.append(", ".join(extra))
    if gpu.xids:
        shown = ", ".join("%d %s ago" % (e["xid"], fmt_age(max(0.0, now - e["time"]))) for e in gpu.xids[-4:])
        parts.append("Xid %s%s" % (shown, changed("xids")))
    return parts


def _alert_hits(gpu: GpuState, field: str, now: float) -> List[str]:
    """What one GPU shows of one alert field (``ALERT_FIELDS``): "" for nothing."""
    health: Dict[str, Any] = _h(gpu)
    if field == "ecc_uncorrected":
        unc = health.get("ecc_uncorrected")
        return ["%d uncorrectable ECC error%s" % (unc, "" if unc == 1 else "s")] if isinstance(unc, int) and unc else []
    if field in ("row_remap_failure", "row_remap_pending"):
        flag = (health.get("remapped_rows") or {}).get(field.rsplit("_", 1)[1])
        return ["row remap failed" if field == "row_remap_failure" else "row remap pending"] if flag else []
    if field == "retired_pages_pending":
        return ["page retirement pending"] if (health.get("retired_pages") or {}).get("pending") else []
    if field == "xid":
        return ["Xid %d (%s)" % (x, FATAL_XIDS[x]) for x in sorted({e["xid"] for e in fatal_xids(gpu, now)})]
    if field == "pcie_degraded":
        link = degraded_link(gpu)
        return [link] if link else []
    if field in (health.get("clock_events") or ()):
        began = (health.get("clock_since") or {}).get(field)
        label = REASON_LABELS.get(field, field)
        return ["%s %s" % (label, fmt_age(max(0.0, now - began))) if isinstance(began, (int, float)) else label]
    return []


def alert_hits(gpus: Iterable[GpuState], fields: Iterable[str], now: float) -> List[Tuple[int, str, str]]:
    """(GPU index, field, what it shows) for each of ``fields`` a GPU shows now, e.g. ``(1, "hw_slowdown",
    "HW slowdown 5m")``: what an ``[[alert]]`` with ``gpu_health = [...]`` fires on (``now``: epoch)."""
    wanted = list(fields)
    return [(g.index, f, text) for g in sorted(gpus, key=lambda g: g.index) for f in wanted
            for text in _alert_hits(g, f, now)]


def last_xid(gpus: Iterable[GpuState]) -> Optional[Dict[str, Any]]:
    """The newest Xid event of any GPU (with its ``gpu``), for history and the diagnosis."""
    newest: Optional[Dict[str, Any]] = None
    for gpu in gpus:
        for event in gpu.xids:
            if newest is None or event["time"] > newest["time"]:
                newest = {**event, "gpu": gpu.index}
    return newest
