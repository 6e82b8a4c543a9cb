"""A run that ended without a word we know: its log stops quietly, so it most likely finished (pure).

Each program closes its run in its own words ("Done running 1 fold jobs.", nvbandwidth's closing NOTE, a
synthesizer's "6/6 lines synthesized"), and no table of completions can know them all. So when nothing of the
benchmark is alive (neither it nor its entrypoint), no finding but "not running" / "GPUs idle" stands, and the
last words of every log written near the end are **quiet** -- no failure in words or by level, no non-zero exit,
and the last line is no work under way (a progress line short of its total, an announced step "Loading model...",
a rate) -- the run is called ``finished``, with "benchmark not running" kept as the alternative to weigh.
A run that stopped in the middle says so in its last line (a step counter, a meter, a step it announced), or
it was stopped from outside, which the kernel log or the entrypoint shows; an error in a wording no signature
knows still keeps the run from being called finished.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

from .completion import FAILED_WORDS, NONZERO_EXIT, is_failure
from .events import SEVERITY_LEVEL
from .processes import Processes
from .progress import compile_progress, parse
from .records import Item
from .text import clean_message, ev, last_nonempty, short

QUIET_LINES = 12  # non-empty lines at the end of each log read for a failure
NEAR_END = 600.0  # seconds: logs written this close to the freshest one are part of the ending
ALLOWED = frozenset(("benchmark_not_running", "gpu_idle"))  # what a finished run also shows
_I = re.IGNORECASE
# a failure in words no signature knows; "0 errors", "no errors", "without error", "errors: 0" are none
TROUBLE = re.compile(
    r"(?<!\b0 )(?<!\bno )(?<!\bzero )(?<!\bwithout )(?<!\bwithout any )"
    r"\b(?:errors?|exceptions?|traceback|fatal|fail(?:ed|ure|ures|s)?|abort(?:ed|ing)?|killed|kill(?:ing)?"
    r"|segmentation fault|core dumped|panic(?:ked)?|denied|refused|unauthori[sz]ed|forbidden|cannot|can't"
    r"|couldn't|could not|unable|not found|no such|timed out|timeout|interrupted|terminat(?:ed|ing)|out of memory"
    r"|oom|crash(?:ed|es)?|corrupt(?:ed)?|unexpected(?:ly)?|sig(?:term|kill|int)"
    r"|lost|stalled|stuck|hang(?:s|ing)?|retry(?:ing)?|retries)\b(?!\s*[:=]\s*0\b)", _I)
# the last line shows work under way: an announced step ("Loading model...", "Running warmup proof:"), a rate,
# a training step's figures
UNDERWAY = re.compile(
    r"(?:\.{3}|\u2026|:)\s*$|\b\d[\d.]*\s*(?:it/s|s/it|tok(?:en)?s?/s|samples?/s|img/s|MB/s|MiB/s|GB/s|GiB/s|KB/s)\b"
    r"|\b(?:loss|lr|grad[_ ]norm|epoch|step|iter(?:ation)?)\b\s*[:=]?\s*[-+]?\d", _I)

# a tool's own verdict that its result counts (MLPerf loadgen's "Result is : VALID", HPCG's "result is VALID",
# "PASSED"): it outranks a count of logged errors it says do not void the result ("1 ERROR encountered")
VERDICT_OK = re.compile(r"\bResults? (?:is|are|was)\s*:?\s*(?:VALID|PASSED)\b", _I)
ERROR_COUNT = re.compile(r"^\s*\d+ (?:ERRORS?|WARNINGS?) (?:encountered|logged|reported)\b[^:]*$", _I)


def _quiet(log: Dict[str, Any], bench_re: Any) -> Optional[int]:
    """The index of the log's last line when its last words are quiet, else None."""
    lines: List[str] = log.get("lines") or []
    last: Optional[int] = None
    valid = any(VERDICT_OK.search(t) for t in lines if "INVALID" not in t.upper())
    for i in last_nonempty(lines, QUIET_LINES):
        text = lines[i]
        if valid and ERROR_COUNT.search(text):
            continue
        if is_failure(text) or NONZERO_EXIT.search(text) or FAILED_WORDS.search(text) or TROUBLE.search(text):
            return None
        if last is None:
            last = i
            sample = parse(text, bench_re) if len(text) <= 4000 else None
            if (not sample.done) if sample is not None else UNDERWAY.search(text):
                return None
    return last


def quiet_ending(facts: Dict[str, Any], procs: Processes, items: List[Item]) -> Optional[Item]:
    """``finished`` for a run gone quiet (see the module's docstring), else None."""
    if procs.bench or procs.entry or facts.get("processes_error"):
        return None
    current = [i for i in items if i.role == "current" and SEVERITY_LEVEL.get(i.severity, 0) >= 1]
    if not any(i.code == "benchmark_not_running" for i in current) or any(i.code not in ALLOWED for i in current):
        return None
    logs = [log for log in facts.get("logs") or [] if not log.get("error") and log.get("mtime") is not None
            and any(str(t).strip() for t in log.get("lines") or ())]
    if not logs:
        return None
    freshest = max(float(log["mtime"]) for log in logs)
    bench_re = compile_progress((facts.get("benchmark") or {}).get("progress"))
    ending: List[Any] = []
    for log in sorted(logs, key=lambda g: float(g["mtime"])):
        if float(log["mtime"]) < freshest - NEAR_END:
            continue
        at = _quiet(log, bench_re)
        if at is None:
            return None
        ending.append(ev(log["path"], int(log.get("first_line") or 1) + at, log["lines"][at]))
    last = clean_message(str(ending[-1].get("text") or ""))
    return Item("finished", "info", "finished: its log ends quietly (%s); no closing word known" % short(last, 100),
                ending[-3:], time=freshest)


def keep_the_doubt(items: List[Item]) -> None:
    """Under a quiet ending's ``finished``, "benchmark not running" stays the alternative to weigh."""
    for i in items:
        if i.role == "current" and i.code == "benchmark_not_running":
            i.severity = "warning"
            i.summary += " (or it stopped without a word: its log ends with no closing word known)"
