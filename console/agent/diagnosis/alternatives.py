"""Top-3: besides the verdict, up to two other explanations an operator should weigh, each with its evidence.

Taken from the findings the analysis already made (no second analysis): current findings of another code,
causes before symptoms (the code's tier and rank), the ones the verdict does not explain (``caused_by``)
first; findings of severity "info" (recovered, before the run) are not alternatives. A fine verdict (healthy,
starting, finished) lists the warnings it outweighed; a failure verdict lists the other failures.
"""

from __future__ import annotations

from typing import List, Set

from ..wire.protocol import Alternative, DiagnosisResult, Finding
from . import codes
from .rank import FINE

MAX_ALTERNATIVES = 2
TIER_ORDER = {"hardware": 0, "cause": 1, "symptom": 2, "done": 3}


def _order(finding: Finding) -> tuple:
    code = finding["code"]
    tier = (codes.CODES.get(code) or ("cause",))[0]
    return (1 if finding.get("caused_by") else 0, TIER_ORDER.get(tier, 1), -codes.rank(code))


def alternatives(result: DiagnosisResult, limit: int = MAX_ALTERNATIVES) -> List[Alternative]:
    """Up to ``limit`` other codes than the verdict's, most likely first."""
    verdict = result["verdict"]["code"]
    seen: Set[str] = {verdict}
    out: List[Alternative] = []
    candidates = [f for f in result.get("findings") or [] if f.get("severity") != "info" or f["code"] in FINE]
    for finding in sorted(candidates, key=_order):
        code = finding["code"]
        if code in seen:
            continue
        seen.add(code)
        alt: Alternative = {"code": code, "label": codes.label(code), "summary": finding.get("summary", ""),
                            "evidence": list(finding.get("evidence") or [])[:2]}
        out.append(alt)
        if len(out) >= limit:
            break
    return out
