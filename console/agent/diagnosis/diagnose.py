"""Diagnosis: the seed's decision tree, automated, and the causal verdict over every log.

Gathering apart from analysis, one module per step (flat ``diag_*`` modules: the agent travels as one
zipapp directory): ``diag_gather`` collects facts on the host; ``diag_analyze.analyze`` is a pure function
from facts to ``{"verdict", "findings", "steps"}`` (docs/architecture.md, docs/diagnosis.md), built from
the process steps (``diag_processes``), content-based progress (``diag_progress``), events in time
(``diag_events``, ``diag_timeline``) and the causal ranking (``diag_rank``, ``diag_codes``).
``diagnose(config, gpu_sampler=None)`` does both; the ``diagnose`` op (``ops.py``) calls it.
"""

from __future__ import annotations

from typing import Any, Optional, cast

from ..wire.config import AgentConfig
from ..wire.protocol import DiagnosisResult
from ..wire.timefmt import fmt_age
from .alternatives import alternatives
from .analyze import analyze
from .codes import LABELS, RANK
from .gather import gather, gpu_facts, log_candidates, read_dmesg, watched_files
from .rank import STARTUP_SYMPTOMS
from .text import children_map, descendants, fmt_size, proc_line

__all__ = [
    "LABELS", "RANK", "STARTUP_SYMPTOMS", "analyze", "children_map", "descendants", "diagnose", "fmt_age",
    "fmt_size", "gather", "gpu_facts", "log_candidates", "proc_line", "read_dmesg", "watched_files",
]


def diagnose(
    config: AgentConfig,
    gpu_sampler: Any = None,
    now: Optional[float] = None,
    include_dmesg: bool = True,
    stall_seconds: Optional[float] = None,
) -> DiagnosisResult:
    """Gather facts on this host and analyze them (callable without an Agent).

    ``stall_seconds``, when given, replaces the config's for this diagnosis only.
    """
    if stall_seconds is not None:
        config = cast(AgentConfig, dict(config, stall_seconds=float(stall_seconds)))
    result = analyze(gather(config, gpu_sampler, now=now, include_dmesg=include_dmesg))
    result["alternatives"] = alternatives(result)
    return result
