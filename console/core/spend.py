"""What each instance costs while the console watches it: time benchmarking, time idle, and their money.

An instance is in one of three modes at a time, judged on what the status rules already decided
(``status_rules.derive_status``) and the diagnosis's liveness verdict, never re-derived here:

- ``idle`` (the money is wasted): BENCH DOWN, or GPU IDLE unless the verdict that still counts says the run is
  alive (``healthy``/``starting``: a server waiting for requests with its model loaded, a run busy with I/O),
  or ``[benchmark] kind = "server"`` whose processes hold GPU memory (its model loaded);
- ``bench``: the benchmark runs (OK, an excused GPU IDLE, or FAILED with the benchmark still up);
- ``other``: the console cannot tell (connecting, unreachable, stale, needs action).

``SpendMeter`` keeps the seconds per mode from the moment the console began watching (a session) and says when
the mode changed; the state tells observers (``on_spend``), the history stores each change with its time, and
``fleet-console report`` adds the same intervals up again: live figures and the report agree to the cent.
A GPU IDLE episode starts when the GPUs went idle (``idle_seconds`` ago), not 30 s later when the badge came.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

from console.agent.wire.procmatch import matches_program

MODES = ("bench", "idle", "other")
ALIVE_VERDICTS = frozenset(("healthy", "starting"))  # the diagnosis's liveness said the run lives


def model_loaded(inst: Any) -> bool:
    """A benchmark process holds GPU memory (a server's model is loaded)."""
    patterns = inst.bench_patterns
    return bool(patterns) and any((rec.get("gpu_mem") or 0) > 0 and matches_program(rec, patterns)
                                  for rec in inst.procs.values())


def wasting(inst: Any) -> bool:
    """Whether the rental is paid for nothing now: the benchmark down, or its GPUs idle with nothing alive."""
    status = inst.status
    if status == "benchmark_down":
        return True
    if status != "gpu_idle":
        return False
    diag = inst.diagnosis
    if diag and inst.diagnosis_counts() and (diag.get("verdict") or {}).get("code") in ALIVE_VERDICTS:
        return False
    kind = getattr(getattr(inst.instance, "benchmark", None), "kind", None)
    return not (kind == "server" and inst.bench_running and model_loaded(inst))


def mode_of(inst: Any, now: float) -> Tuple[str, float]:
    """``(mode, since)``: the instance's mode now, and when it began if that is known to be before ``now``."""
    if wasting(inst):
        if inst.status == "gpu_idle":
            return "idle", now - float(inst.idle_seconds)
        return "idle", now
    if inst.status in ("ok", "gpu_idle", "failed") and inst.bench_running is not False:
        return "bench", now
    return "other", now


class SpendMeter:
    """Seconds per mode since the console began watching one instance (this session)."""

    __slots__ = ("bench_left", "mode", "mode_since", "since", "totals")

    def __init__(self, now: float) -> None:
        self.since = now  # the session's start: the console began watching
        self.mode = "other"
        self.mode_since = now
        self.totals: Dict[str, float] = dict.fromkeys(MODES, 0.0)  # closed intervals
        self.bench_left: Optional[float] = None  # when the benchmark last stopped running (None: runs or never ran)

    def update(self, mode: str, at: float) -> Optional[float]:
        """Enter ``mode`` at ``at`` (clamped into the current interval); the time of the change, None: no change."""
        if mode == self.mode:
            return None
        at = max(self.mode_since, at)
        self.totals[self.mode] += at - self.mode_since
        if self.mode == "bench":
            self.bench_left = at
        self.mode, self.mode_since = mode, at
        return at

    def seconds(self, mode: str, now: float) -> float:
        """Seconds in ``mode`` this session up to ``now``."""
        return self.totals[mode] + (max(0.0, now - self.mode_since) if self.mode == mode else 0.0)

    def watched(self, now: float) -> float:
        return max(0.0, now - self.since)

    def episode(self, now: float) -> float:
        """Seconds of the current idle episode (0 when not idle)."""
        return max(0.0, now - self.mode_since) if self.mode == "idle" else 0.0

    def since_bench(self, now: float) -> Optional[float]:
        """Seconds since the benchmark last ran (0 while it runs; from the session's start when it never ran)."""
        if self.mode == "bench":
            return 0.0
        return max(0.0, now - (self.bench_left if self.bench_left is not None else self.since))


def money(seconds: float, price: Optional[float]) -> Optional[float]:
    """What ``seconds`` of a rental cost at ``price`` per hour (None without a price)."""
    return None if price is None else seconds * price / 3600.0


def fmt_money(amount: Optional[float], currency: str = "$") -> str:
    """``$1.26``, ``€0.90``; a code is written after ("1.26 EUR"); "-" without a price."""
    if amount is None:
        return "-"
    return f"{currency}{amount:.2f}" if len(currency) == 1 else f"{amount:.2f} {currency}"


def spend_row(inst: Any, now: float) -> Dict[str, Any]:
    """One instance's money as the table, the pane, /metrics and MCP give it (seconds and currency units)."""
    meter: SpendMeter = inst.meter
    price = getattr(inst.instance, "price_per_hour", None)
    watched, idle = meter.watched(now), meter.seconds("idle", now)
    since_bench = meter.since_bench(now)
    return {
        "price_per_hour": price,
        "price_source": getattr(inst.instance, "price_source", "") or None,
        "mode": meter.mode,
        "watched_s": round(watched, 3),
        "benchmark_s": round(meter.seconds("bench", now), 3),
        "idle_s": round(idle, 3),
        "idle_episode_s": round(meter.episode(now), 3),
        "spend": money(watched, price),
        "idle_spend": money(idle, price),
        "since_benchmark_spend": money(since_bench, price) if since_bench is not None else None,
    }


def fleet_rates(instances: Any) -> Tuple[float, float, bool]:
    """``(burning, idle, priced)``: the fleet's price per hour, the part of it paid for idle instances, and
    whether any instance has a price."""
    burning = idle = 0.0
    priced = False
    for inst in instances:
        price = getattr(inst.instance, "price_per_hour", None)
        if price is None:
            continue
        priced = True
        burning += price
        if inst.meter.mode == "idle":
            idle += price
    return burning, idle, priced


__all__ = ["ALIVE_VERDICTS", "MODES", "SpendMeter", "fleet_rates", "fmt_money", "mode_of", "model_loaded", "money",
           "spend_row", "wasting"]
