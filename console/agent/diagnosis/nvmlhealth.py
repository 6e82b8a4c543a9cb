"""NVML's health facts as hardware evidence (issue 30): read like a kernel line, with or without ``dmesg``.

``health_step`` takes ``facts["gpu"]`` (``gather.gpu_facts``: each device's ``health`` record and the sampler's
``xids``) and adds: ``gpu_ecc`` for uncorrectable ECC errors (volatile), a failed row remap, or an ECC Xid (48,
63, 64, 92, 94, 95); ``gpu_lost`` for Xid 79, 119, 120; ``gpu_faulty`` for the NVLink Xids 74, 144-150 (the same
Xid sets as the kernel signatures); and a
``gpu_health`` step whose lines are the checked facts: throttling (HW slowdown, thermal, power brake, SW power
cap, with how long), a busy GPU left in an idle performance state (P8 at 100 % util: ``throttled``), a PCIe
link narrower than the card's, pending remaps, corrected counts. The hardware tier
of ``codes.py`` then explains the rest, as it does for a ``dmesg`` line.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List

from ..wire.timefmt import fmt_age
from .records import Item, step
from .text import ev

ECC_XIDS = frozenset((48, 63, 64, 92, 94, 95))
LOST_XIDS = frozenset((79, 119, 120))
NVLINK_XIDS = frozenset((74, 144, 145, 146, 147, 148, 149, 150))  # the NVLink fabric failed (sigrows.NVLINK)
XID_FOR = 24 * 3600.0  # seconds an Xid stays evidence
REASONS = {"hw_slowdown": "HW slowdown", "hw_thermal": "HW thermal slowdown", "hw_power_brake": "HW power brake",
           "sw_thermal": "SW thermal slowdown", "sw_power_cap": "SW power cap"}
LOW_PSTATE = 8  # P8 and below: the idle performance states (P0/P2 are the working ones)
BUSY_UTIL = 50  # % utilisation at which a GPU is working, not idling
SLOWDOWNS = frozenset(("hw_slowdown", "hw_thermal", "hw_power_brake", "sw_thermal"))  # a fault, not the load's cap


def health_step(facts: Dict[str, Any], items: List[Item], steps: List[Any]) -> None:
    """Hardware findings from NVML's counters and Xid events; the rest of its facts as a checked step."""
    gpu = facts.get("gpu") or {}
    devices = [d for d in gpu.get("devices") or [] if isinstance(d.get("health"), dict)]
    xids = [x for x in gpu.get("xids") or [] if isinstance(x, dict)]
    if not devices and not xids:
        return
    now = float(facts.get("now") or time.time())
    lines: List[str] = []
    found = 0
    for d in devices:
        h, index = d["health"], d.get("index")
        where = "nvml:gpu%s" % index
        unc = h.get("ecc_uncorrected")
        if isinstance(unc, int) and unc > 0:
            items.append(Item("gpu_ecc", "critical", "GPU %s: %d uncorrectable ECC error%s (NVML)"
                              % (index, unc, "" if unc == 1 else "s"),
                              [ev(where, None, "ECC uncorrected (volatile) = %d, corrected = %s"
                                  % (unc, h.get("ecc_corrected", "?")))]))
            found += 1
        rows = h.get("remapped_rows") or {}
        if rows.get("failure"):
            items.append(Item("gpu_ecc", "critical", "GPU %s: row remapping failed (NVML)" % index,
                              [ev(where, None, "remapped rows: %s corrected, %s uncorrected, failure"
                                  % (rows.get("corrected"), rows.get("uncorrected")))]))
            found += 1
        lines.extend("gpu%s %s" % (index, fact) for fact in _facts(h, now))
        link = _degraded_link(d, h)
        if link:  # a busy GPU on a link that trained low (a riser, a slot): it explains a slowdown
            items.append(Item("pcie_degraded", "warning", "GPU %s PCIe link %s while busy (NVML)" % (index, link),
                              [ev("gpu:%s" % index, None, "PCIe link %s" % link)]))
        held = [REASONS[r] for r in h.get("clock_events") or () if r in SLOWDOWNS]
        if held:  # a symptom-tier state: the job runs slower than it should (SW power cap is normal at full load)
            items.append(Item("throttled", "warning", "GPU %s clocks held down: %s (NVML)" % (index, ", ".join(held)),
                              [ev(where, None, "clock event reasons active: %s" % ", ".join(held))]))
        pstate, util = h.get("pstate"), d.get("util")
        if not held and isinstance(pstate, int) and pstate >= LOW_PSTATE and isinstance(util, (int, float)) \
                and util >= BUSY_UTIL:  # a busy GPU left at idle clocks, no reason set (no persistence, no app clocks)
            items.append(Item("throttled", "warning", "GPU %s busy (util %s%%) in performance state P%d: idle clocks "
                              "under load (NVML)" % (index, util, pstate),
                              [ev("gpu:%s" % index, None, "util %s%% in P%d (idle clocks), no clock event reason"
                                  % (util, pstate))]))
    for x in xids:
        code = "gpu_ecc" if x["xid"] in ECC_XIDS else "gpu_lost" if x["xid"] in LOST_XIDS else \
            "gpu_faulty" if x["xid"] in NVLINK_XIDS else None
        when = x.get("time")
        age = now - when if isinstance(when, (int, float)) else 0.0
        text = "GPU %s: Xid %s %s ago (NVML event%s)" % (x.get("gpu"), x["xid"], fmt_age(max(0.0, age)),
                                                         ", an earlier agent" if x.get("seen_before") else "")
        lines.append(text)
        if code is None or age > XID_FOR:
            continue
        items.append(Item(code, "critical", "GPU %s: Xid %s (NVML event)" % (x.get("gpu"), x["xid"]),
                          [ev("nvml:xid", None, text)], time=when if isinstance(when, (int, float)) else None))
        found += 1
    steps.append(step("gpu_health", "problem" if found else "ok",
                      "%d NVML hardware finding%s" % (found, "" if found == 1 else "s") if found
                      else "NVML health: no ECC error, no fatal Xid", lines))


def _degraded_link(device: Dict[str, Any], h: Dict[str, Any]) -> str:
    """"gen 2 x16 of gen 5 x16" when a busy GPU's link is narrower than the card's, or two generations or more
    slower (an idle link trains down to save power: not counted); "" otherwise."""
    pcie = h.get("pcie") or {}
    gen, top_gen, width, top_width = (pcie.get(k) for k in ("gen", "max_gen", "width", "max_width"))
    util = device.get("util")
    if not isinstance(util, (int, float)) or util < 50:
        return ""
    narrow = isinstance(width, int) and isinstance(top_width, int) and 0 < width < top_width
    slow = isinstance(gen, int) and isinstance(top_gen, int) and 0 < gen <= top_gen - 2
    if not (narrow or slow):
        return ""
    return "gen %s x%s of gen %s x%s" % (gen, width, top_gen, top_width)


def _facts(h: Dict[str, Any], now: float) -> List[str]:
    out = []
    since = h.get("clock_since") or {}
    for name in h.get("clock_events") or ():
        began = since.get(name) if isinstance(since, dict) else None
        out.append("clocks held down: %s%s" % (REASONS.get(name, name), " for %s" % fmt_age(max(0.0, now - began))
                                                if isinstance(began, (int, float)) else ""))
    pcie = h.get("pcie") or {}
    width, top = pcie.get("width"), pcie.get("max_width")
    if isinstance(width, int) and isinstance(top, int) and 0 < width < top:
        out.append("PCIe link x%d of x%d (gen %s of %s)" % (width, top, pcie.get("gen", "?"), pcie.get("max_gen", "?")))
    if pcie.get("replays"):
        out.append("PCIe replays: %s" % pcie["replays"])
    rows = h.get("remapped_rows") or {}
    if rows.get("pending"):
        out.append("row remap pending (needs a GPU reset)")
    pages = h.get("retired_pages") or {}
    if pages.get("pending"):
        out.append("page retirement pending (needs a reboot)")
    if h.get("ecc_corrected"):
        out.append("ECC corrected (volatile): %s" % h["ecc_corrected"])
    return out
