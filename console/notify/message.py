"""What a notification says: facts about one instance taken from the fleet state, and the plain-text lines
every sink starts from ("box1 benchmark down 21:14 · download failed (setup.log:212) · GPUs idle 3m").

Everything here that came from a host (names, details, verdicts, evidence) is cleaned to one printable line
and cut to a bound; each sink escapes it for its own markup.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from console.agent.wire.timefmt import fmt_age
from console.core.state import InstanceState
from console.core.text_safety import one_line

WORDS = {"benchmark_down": "benchmark down", "gpu_idle": "GPUs idle", "needs_action": "needs action"}
VERDICT_SLACK = 60.0  # a verdict at most this much older than the trouble still describes it


def status_words(status: str) -> str:
    return WORDS.get(status, status.replace("_", " "))


def clock(ts: float) -> str:
    """``21:14``, the console machine's local time."""
    return time.strftime("%H:%M", time.localtime(ts))


@dataclass
class Facts:
    """One instance as a message shows it."""

    name: str
    host: str = ""
    status: str = ""
    since: float = 0.0
    detail: str = ""
    verdict: str = ""  # the verdict's label ("download failed"), "" before the diagnosis
    brief: str = ""  # its one line ("download of c1.json failed")
    where: str = ""  # its best evidence line: "setup.log:212"
    path: str = ""
    evidence: str = ""  # that line's text
    idle: float = 0.0  # seconds every GPU has been idle
    price: float | None = None  # $/h (issue 31's figures, when the instance has them)
    flaps: int = 0  # troubles shorter than min_duration, not sent


def _best_evidence(diag: dict[str, Any]) -> dict[str, Any] | None:
    code = (diag.get("verdict") or {}).get("code")
    findings = list(diag.get("findings") or ())
    for finding in sorted(findings, key=lambda f: f.get("code") != code):  # the verdict's own finding first
        for ev in finding.get("evidence") or ():
            if ev.get("path"):
                return dict(ev)
    return None


def price_of(inst: InstanceState) -> float | None:
    """The instance's $/h when the price figures know it (``price_per_hour`` on the state or its record)."""
    for holder in (inst, getattr(inst, "instance", None)):
        value = getattr(holder, "price_per_hour", None)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
            return float(value)
    return None


def facts_of(inst: InstanceState, status: str, since: float, detail: str) -> Facts:
    """The instance's facts for a message about trouble that began at ``since`` (console clock)."""
    facts = Facts(name=one_line(inst.name, 80), host=one_line(inst.host, 80), status=status, since=since,
                  detail=one_line(detail, 200), idle=float(inst.idle_seconds or 0), price=price_of(inst))
    diag = inst.diagnosis
    fresh = inst.diagnosis_at is not None and inst.diagnosis_at >= since - VERDICT_SLACK
    if diag and fresh and inst.diagnosis_counts():
        verdict = diag.get("verdict") or {}
        if verdict.get("code") not in (None, "healthy", "starting"):
            facts.verdict = one_line(verdict.get("label") or str(verdict.get("code") or "").replace("_", " "), 80)
            facts.brief = one_line(verdict.get("brief") or verdict.get("summary") or "", 200)
            ev = _best_evidence(dict(diag))
            if ev is not None:
                facts.path = one_line(ev.get("path"), 200)
                line = ev.get("line")
                facts.where = os.path.basename(facts.path) + (f":{line}" if isinstance(line, int) else "")
                facts.evidence = one_line(ev.get("text"), 300)
    return facts


@dataclass
class Event:
    """``trouble`` (it began), ``update`` (its diagnosis came after the first message), ``resolved``."""

    kind: str
    facts: Facts
    lasted: float = 0.0  # resolved: how long the trouble lasted


@dataclass
class Message:
    events: list[Event] = field(default_factory=list)
    test: bool = False
    flaps: int = 0  # troubles held back as flaps since the last message

    @property
    def resolved_only(self) -> bool:
        return bool(self.events) and all(e.kind == "resolved" for e in self.events)

    @property
    def severe(self) -> bool:
        return any(e.kind == "trouble" and e.facts.status in ("failed", "benchmark_down", "unreachable")
                   for e in self.events)

    def title(self) -> str:
        if self.test:
            return "fleet-console: test message"
        trouble = [e for e in self.events if e.kind != "resolved"]
        ok = [e for e in self.events if e.kind == "resolved"]
        if len(self.events) == 1:
            e = self.events[0]
            f = e.facts
            if e.kind == "resolved":
                return f"{f.name} ok again after {fmt_age(e.lasted)}"
            if e.kind == "update":
                return f"{f.name} {status_words(f.status)}: {f.verdict or 'diagnosed'}"
            return f"{f.name} {status_words(f.status)}" + (f": {f.verdict}" if f.verdict else "")
        names = ", ".join(e.facts.name for e in (trouble or ok)[:5]) + ("…" if len(trouble or ok) > 5 else "")
        if trouble and ok:
            return f"{len(trouble)} instances in trouble ({names}), {len(ok)} ok again"
        if trouble:
            return f"{len(trouble)} instances in trouble: {names}"
        return f"{len(ok)} instances ok again: {names}"

    def summary(self, e: Event) -> str:
        """One event in one line: what, since when, why (file:line), idle GPUs, cost."""
        f = e.facts
        if e.kind == "resolved":
            return f"{f.name} ok again after {fmt_age(e.lasted)} ({status_words(f.status)} since {clock(f.since)})"
        parts = [f"{f.name} {status_words(f.status)} {clock(f.since)}"]
        why = f.brief or f.verdict or f.detail
        if why:
            parts.append(why + (f" ({f.where})" if f.where else ""))
        if f.idle >= 60 and f.status != "unreachable":
            parts.append(f"GPUs idle {fmt_age(f.idle)}")
        if f.price is not None:
            parts.append(f"${f.price:.2f}/h")
        if f.flaps:
            parts.append(f"flapped {f.flaps} times before")
        return " · ".join(parts)

    def look(self, e: Event) -> str:
        return f"fleet-console diagnose {e.facts.name}"

    def text(self, limit: int = 4000) -> str:
        """The whole message as plain text (ntfy, email, the fallback text of the others), at most ``limit``."""
        if self.test:
            return "A test from fleet-console: this sink works."
        lines: list[str] = []
        for e in self.events:
            lines.append(self.summary(e))
            if e.kind != "resolved" and e.facts.evidence:
                lines.append(f"  {e.facts.where}: {e.facts.evidence}")
            if e.kind != "resolved":
                lines.append(f"  look: {self.look(e)}")
        if self.flaps:
            lines.append(f"({self.flaps} shorter troubles held back as flaps)")
        return cut("\n".join(lines), limit)


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"
