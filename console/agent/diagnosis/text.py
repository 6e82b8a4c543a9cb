"""Small text helpers shared by the diagnosis steps: sizes, evidence records, process-tree lines, the
"what was it doing" context of a log line, and a log line cleaned of its timestamp/level/module prefix."""

from __future__ import annotations

import re
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from ..wire.protocol import Evidence

# "Running warmup proof...", "[setup] Starting benchmark", "==> Executing C2 prove"
CONTEXT_RE = re.compile(
    r"^\s*(?:\[[^\]]{0,40}\]\s*|[=#>*-]+\s*|\S*\d\d:\d\d\S*\s+(?:INFO|DEBUG|WARN\w*)?\s*)?"
    r"(?:running|starting|start|beginning|begin|executing|launching|now running)\s+(.+?)\s*(?:\.{2,}|…|:)?\s*$",
    re.IGNORECASE,
)
FAILED_RE = re.compile(r"^\s*(?:\[[^\]]{0,40}\]\s*)?(?:error:\s*)?(.{1,60}?)\s+(?:failed|aborted)\b", re.IGNORECASE)
LOG_PREFIX_RE = re.compile(
    r"^(?:\[?\d{4}-\d\d-\d\d[T ][\d:.,]+(?:Z|[+-]\d\d:?\d\d)?\]?\s*)?"  # timestamp
    r"(?:\[?(?:TRACE|DEBUG|INFO|WARN|WARNING|ERROR|FATAL|CRITICAL)\]?:?\s+)?"  # level
    r"(?:[A-Za-z_][\w]*(?:::[\w]+)+:?\s+)?"  # rust module path
    r"(?:Error:\s+)?",
)
GRPC_TAIL_RE = re.compile(r",\s*details:\s*\[.*$")


def short(text: str, n: int = 160) -> str:
    text = text.strip()
    return text if len(text) <= n else text[: n - 1] + "…"


def fmt_size(n: Optional[float]) -> str:
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "K", "M", "G", "T"):
        if value < 1024 or unit == "T":
            return ("%d%s" % (value, unit)) if unit == "B" else ("%.1f%s" % (value, unit))
        value /= 1024
    return "?"


EVIDENCE_CHARS = 300


def ev(path: str, line: Optional[int], text: str, focus: Optional[int] = None) -> Evidence:
    """One evidence line, cut to ``EVIDENCE_CHARS``; a long line keeps the part around ``focus`` (where its
    signature matched: onnxruntime's 400-character line names the missing library at its end)."""
    if focus is not None and len(text) > EVIDENCE_CHARS and focus > EVIDENCE_CHARS // 2:
        text = "\u2026" + text[min(focus - 100, len(text) - EVIDENCE_CHARS + 1):]
    return {"path": path, "line": line, "text": short(text, EVIDENCE_CHARS)}


def hit_ev(hit: Dict[str, Any]) -> Evidence:
    """A signature hit as evidence, cut around what matched."""
    return ev(hit["path"], hit["line"], hit["text"], hit.get("focus"))


def proc_line(rec: Any, depth: int = 0) -> str:
    """One process as a tree line: pid, state, wchan, cpu, rss, command line."""
    cpu = rec.get("cpu")
    return "%s%d %s %s cpu=%s rss=%s %s" % (
        "  " * depth,
        rec.get("pid", 0),
        rec.get("state") or "?",
        rec.get("wchan") or "-",
        "-" if cpu is None else "%.0f%%" % float(cpu),
        fmt_size(rec.get("rss")),
        short(rec.get("cmdline") or rec.get("name") or "", 120),
    )


def children_map(processes: Sequence[Any]) -> Dict[int, List[Any]]:
    kids: Dict[int, List[Any]] = {}
    for rec in processes:
        kids.setdefault(int(rec.get("ppid") or 0), []).append(rec)
    for lst in kids.values():
        lst.sort(key=lambda r: r["pid"])
    return kids


def descendants(pid: int, kids: Dict[int, List[Any]]) -> List[Tuple[int, Any]]:
    """(depth, rec) for every descendant of ``pid``, depth-first."""
    out: List[Tuple[int, Any]] = []
    stack = [(1, r) for r in reversed(kids.get(pid, []))]
    seen = {pid}
    while stack:
        depth, rec = stack.pop()
        if rec["pid"] in seen:
            continue
        seen.add(rec["pid"])
        out.append((depth, rec))
        stack.extend((depth + 1, r) for r in reversed(kids.get(rec["pid"], [])))
    return out


PHASE_DONE_RE = re.compile(r"\b(?:ok|done|finished|complete[d]?|succeeded|passed)\b", re.IGNORECASE)


def context(lines: List[str], index: int) -> Optional[str]:
    """What the program was doing at ``lines[index]``: the nearest preceding "Running X..." line, unless a line
    between them says X ended ("warmup proof ok"): then the failure came after that phase, in one not named."""
    ended: List[str] = []  # lines after the phase line (nearer the failure) that say a phase ended
    for i in range(index, max(-1, index - 300), -1):
        text = lines[i]
        m = CONTEXT_RE.match(text)
        if m:
            phase = m.group(1).strip().rstrip(".…:").strip()
            word = phase.split()[0].lower() if phase.split() else ""
            return None if word and any(word in done for done in ended) else phase
        if i != index and PHASE_DONE_RE.search(text):
            ended.append(text.lower())
            continue
        if "warmup" in text.lower() and i != index:
            return "warmup"
    return None


def clean_message(text: str) -> str:
    """A log line without its timestamp, level, module path and gRPC metadata: the part a person reads."""
    text = LOG_PREFIX_RE.sub("", text.strip())
    text = GRPC_TAIL_RE.sub("", text)
    return text.strip() or text


def last_nonempty(lines: Sequence[str], count: int) -> Iterator[int]:
    """The indexes of the last ``count`` non-empty lines, newest first (a log's last words)."""
    seen = 0
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].strip():
            seen += 1
            if seen > count:
                return
            yield i
