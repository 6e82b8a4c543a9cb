"""GPU detail of one instance: every field per device, lost devices marked, util/mem sparklines."""

from __future__ import annotations

import time
from typing import Any, Optional

from rich.text import Text

from console.agent.timefmt import fmt_age as format_age
from console.state import InstanceState
from console.status import STALE, UNREACHABLE, badge

from .render import bar, pct, size, sparkline, tail

FIELDS = (
    ("util", "util", "%"),
    ("mem_util", "mem util", "%"),
    ("temp", "temp", "°C"),
    ("power", "power", "W"),
    ("sm_clock", "SM clock", "MHz"),
    ("mem_clock", "mem clock", "MHz"),
    ("fan", "fan", "%"),
)


def gpu_detail(inst: InstanceState, width: int = 80, now: Optional[float] = None) -> Text:
    """The GPU tab; a host not heard from (unreachable, stale) shows its last figures dim, with their age."""
    text = Text()
    old = inst.status in (UNREACHABLE, STALE) and inst.last_frame is not None
    head = "GPU state: %s" % (inst.gpu_state or "no data yet")
    if inst.gpu_driver:
        head += "  driver %s" % inst.gpu_driver
    if old:
        age = format_age(max(0.0, (time.time() if now is None else now) - (inst.last_frame or 0.0)))
        text.append("%s: last seen %s ago, not live\n" % (badge(inst.status), age), "bold reverse")
        head = head.replace("GPU state:", "GPU state (then):")
    text.append(head, "dim" if old else "bold")
    if inst.simulated:
        text.append("  SIMULATED GPUs", "bold reverse")
    if inst.agentless:
        text.append("  agentless (nvidia-smi)", "bold")
    if any("nvml_pid" in p or "group" in p for g in inst.gpus.values() for p in g.sample.get("procs") or ()):
        text.append("  mapped via /dev/nvidia fds", "bold")  # NVML's (host) pids are not this /proc's
    text.append("\n")
    if inst.gpu_message:
        text.append(inst.gpu_message + "\n", "italic")
    if inst.gpu_state == "no_gpu" and not inst.gpus:
        text.append("No NVIDIA GPU / driver on this instance.\n")
        return text
    spark_w = max(10, min(120, width - 24))
    start = len(text)
    for gpu in sorted(inst.gpus.values(), key=lambda g: g.index):
        name = gpu.static.get("name") or "?"
        text.append("\n[%d] %s" % (gpu.index, name), "bold")
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
        util = s.get("util")
        text.append("  util %s %s\n" % (bar(None if util is None else util / 100, 20), pct(util)))
        frac = gpu.mem_fraction
        text.append(
            "  mem  %s %s  %s / %s\n"
            % (
                bar(frac, 20),
                pct(None if frac is None else frac * 100),
                size(s.get("mem_used")),
                size(gpu.static.get("mem_total")),
            )
        )
        parts = []
        for key, label, unit in FIELDS[1:]:
            value = s.get(key)
            parts.append("%s %s%s" % (label, "?" if value is None else value, "" if value is None else unit))
        limit = gpu.static.get("power_limit")
        if limit is not None:
            parts.append("power limit %sW" % limit)
        text.append("  " + " · ".join(parts) + "\n", "dim")
        text.append("  util  " + sparkline(tail(gpu.util_hist, spark_w), spark_w) + "\n", "cyan")
        text.append("  mem   " + sparkline(tail(gpu.mem_hist, spark_w), spark_w) + "\n", "blue")
        procs = s.get("procs") or []
        if procs:
            text.append("  processes: " + ", ".join(_proc(p) for p in procs) + "\n")
        for m in s.get("mig") or ():  # a MIG-enabled GPU: its instances
            text.append("  MIG %s  %s / %s  %s\n" % (m.get("profile") or "?", size(m.get("mem_used")),
                        size(m.get("mem_total")), ", ".join(_proc(p) for p in m.get("procs") or ()) or "idle"))
    if old:
        text.stylize("dim", start)
    return text


def _proc(p: Any) -> str:
    """``pid (mem)``; a group of local processes as ``≈ 12,15 (mem)``; one with no local process as ``? (mem)``."""
    if p.get("pid") is not None:
        return "%s (%s)" % (p["pid"], size(p.get("mem")))
    if p.get("group"):
        return "≈ %s (%s)" % (",".join(str(x) for x in p["group"]), size(p.get("mem")))
    return "? host pid %s (%s)" % (p.get("nvml_pid"), size(p.get("mem")))
