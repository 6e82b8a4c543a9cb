"""The instance screen's text tabs as pure functions: the Diagnosis tab (verdict, findings with their evidence,
the alternatives, what was checked) and the Probes tab; tested without an App."""

from __future__ import annotations

import re
import time
from typing import Any, List, Mapping, Optional, Tuple

from rich.console import Console
from rich.text import Text

from console.agent.wire.timefmt import fmt_age as format_age
from console.agent.wire.wording import verdict_line
from console.core.state import InstanceState

from .render import operator_text, short_path

SEVERITY_STYLE = {"critical": "bold reverse red", "error": "bold red", "warning": "yellow", "info": "dim"}
STEP_STYLE = {"ok": "green", "problem": "bold red", "info": "", "skipped": "dim"}
_CONSOLE = Console(width=1000)  # Text.wrap asks a console for its tab size and overflow only


def _verdict_line(verdict: Mapping[str, Any]) -> str:
    """The verdict's summary, its code said once (``healthy: healthy: ...`` nowhere)."""
    code = str(verdict.get("code") or "")
    return verdict_line(code, str(verdict.get("summary") or code or "?"), str(verdict.get("label") or ""))


def _repeats(finding: Mapping[str, Any], verdict: Mapping[str, Any]) -> bool:
    """Whether ``finding`` says what the verdict line says (the verdict is its top finding)."""
    code = finding.get("code")
    return bool(code) and code == verdict.get("code") and \
        operator_text(str(finding.get("summary") or "")) == _verdict_line(verdict)


def hang_of(line: str) -> int:
    """Where a wrapped line's next rows start: under its second column (the text after a severity, a path,
    a label: the first gap of two spaces or more after some text), else two past its own indent."""
    indent = len(line) - len(line.lstrip(" "))
    gap = re.search(r"\S {2,}(?=\S)", line[indent:])
    return indent + gap.end() if gap else indent + 2


def wrap_hanging(text: Text, width: int) -> Tuple[Text, List[int]]:
    """``text`` wrapped at ``width`` columns, each line's next rows under its second column (``hang_of``);
    with the row each line of ``text`` starts on (an evidence row's place once wrapped)."""
    out = Text(no_wrap=True, overflow="crop")
    starts: List[int] = []
    row = 0
    for line in text.split("\n", allow_blank=True):
        starts.append(row)
        if width <= 0 or line.cell_len <= width:
            rows = [line]
        else:
            hang = min(hang_of(line.plain), width // 2)
            first = line.wrap(_CONSOLE, width)[0]
            rest = line[len(first.plain.rstrip("\n")):]
            rest = rest[len(rest.plain) - len(rest.plain.lstrip(" ")):]  # (the space it was cut at)
            rows = [first] + [Text(" " * hang) + part for part in rest.wrap(_CONSOLE, width - hang)]
        for part in rows:
            if row:
                out.append("\n")
            out.append_text(part)
            row += 1
    return out, starts


def diagnosis_text(inst: InstanceState, evidence: Optional[List[Tuple[int, str, Optional[int]]]] = None) -> Text:
    """The Diagnosis tab; ``evidence`` (when given) gets ``(row, path, line)`` for each evidence row."""
    diag = inst.diagnosis
    text = Text()
    if not diag:
        text.append("No diagnosis yet — press d to diagnose %s.\n" % inst.name, "dim")
        return text
    verdict = diag.get("verdict") or {}
    sev = verdict.get("severity") or "info"
    text.append(" %s " % sev.upper(), SEVERITY_STYLE.get(sev, "bold") + (" reverse" if sev != "critical" else ""))
    summary = _verdict_line(verdict)
    text.append(" %s" % summary, "bold")
    code = str(verdict.get("code") or "")
    if code and not summary.lower().startswith(code.replace("_", " ").lower()):
        text.append("  [%s]" % code, "dim")
    if inst.diagnosis_at:
        text.append("  (%s ago)" % format_age(time.time() - inst.diagnosis_at), "dim")
    text.append("\n")
    for finding in diag.get("findings") or []:
        if not _repeats(finding, verdict):  # the verdict's own finding: its evidence goes under the verdict line
            fsev = finding.get("severity") or "info"
            text.append("\n%-8s " % fsev.upper(), SEVERITY_STYLE.get(fsev, ""))
            text.append(operator_text(str(finding.get("summary") or "")), "bold")
            if finding.get("code"):
                text.append("  [%s]" % finding["code"], "dim")
            text.append("\n")
        full_paths: List[str] = []
        for ev in finding.get("evidence") or []:
            path = str(ev.get("path") or "")
            where = short_path(path)
            if where != path and path not in full_paths:
                full_paths.append(path)
            if ev.get("line") is not None:
                where += ":%s" % ev["line"]
            if evidence is not None:
                line_no = ev.get("line")
                evidence.append((text.plain.count("\n"), path, line_no if isinstance(line_no, int) else None))
            text.append("    %s" % where, "cyan")
            if ev.get("text"):
                text.append("  %s" % ev["text"])
            text.append("\n")
        for path in full_paths:  # the file's full path once, under its lines
            text.append("      in %s\n" % path, "dim")
    alternatives = [a for a in diag.get("alternatives") or [] if isinstance(a, dict)]
    if alternatives:  # top-3: the other explanations worth a look, each with its best evidence line
        text.append("\nAlso possible\n", "bold")
        for alt in alternatives:
            text.append("  %s" % operator_text(str(alt.get("label") or alt.get("code") or "?")), "bold")
            text.append("  %s\n" % operator_text(str(alt.get("summary") or "")))
            for ev in (alt.get("evidence") or [])[:1]:
                where = short_path(str(ev.get("path") or ""))
                if ev.get("line") is not None:
                    where += ":%s" % ev["line"]
                text.append("    %s" % where, "cyan")
                text.append("  %s\n" % (ev.get("text") or ""))
    steps = [s for s in diag.get("steps") or [] if not (isinstance(s, dict) and s.get("name") == "verdict")]
    if steps:  # (the verdict step repeats the line at the top)
        text.append("\nWhat was checked\n", "bold")
        width = max((len(str(s.get("name", "?"))) for s in steps if isinstance(s, dict)), default=10) + 1
        for step in steps:
            if not isinstance(step, dict):
                text.append("  · %s\n" % step, "dim")
                continue
            status = str(step.get("status") or "")
            text.append("  %s" % str(step.get("name", "?")).ljust(width))
            text.append("%-8s" % status, STEP_STYLE.get(status, "dim"))
            text.append("%s\n" % operator_text(str(step.get("summary") or "")))
            for line in step.get("lines") or []:
                text.append("      %s\n" % line, "dim")
    return text


def probes_text(inst: InstanceState) -> Text:
    text = Text(no_wrap=True)
    if not inst.probes:
        text.append("No probe output yet — press p to run a probe.\n", "dim")
        return text
    for name, data in sorted(inst.probes.items(), key=lambda kv: kv[1].get("at", 0)):  # the newest last
        text.append("%s" % data.get("title") or name, "bold")
        text.append("  (%s, %s ago)\n" % (name, format_age(time.time() - data.get("at", time.time()))), "dim")
        for line in data.get("lines") or []:
            text.append("  %s\n" % line)
        text.append("\n")
    return text
