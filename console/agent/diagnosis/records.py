"""The typed records the diagnosis steps pass along (the wire shapes are in ``..protocol``)."""

from __future__ import annotations

from typing import List, Optional

from ..wire.protocol import Evidence, Finding, Step

__all__ = ["Item", "Step", "step"]


class Item:
    """One finding while the diagnosis is being made: the wire ``Finding`` plus when it happened (an estimate
    on the host's clock, None for a present state such as a lost GPU), where (an order across the logs), and
    its role: ``current``, or ``history`` (recovered, or from before the run or before it finished)."""

    __slots__ = ("caused_by", "code", "evidence", "order", "prior", "role", "severity", "summary", "time")

    def __init__(self, code: str, severity: str, summary: str, evidence: List[Evidence],
                 time: Optional[float] = None, order: int = 0, role: str = "current") -> None:
        self.code = code
        self.severity = severity
        self.summary = summary
        self.evidence = evidence
        self.time = time
        self.order = order
        self.role = role
        self.caused_by: Optional[str] = None
        self.prior: Optional[str] = None  # the severity before the item became history for predating the run

    def finding(self) -> Finding:
        out: Finding = {"code": self.code, "severity": self.severity,  # type: ignore[typeddict-item]
                        "summary": self.summary, "evidence": list(self.evidence)}
        if self.caused_by:
            out["caused_by"] = self.caused_by
        if self.time is not None:
            out["time"] = round(self.time, 3)
        return out


def step(name: str, status: str, summary: str, lines: Optional[List[str]] = None) -> Step:
    return {"name": name, "status": status, "summary": summary, "lines": list(lines or [])}
