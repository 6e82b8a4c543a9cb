"""Progress read from a log's content, not its mtime.

A meter that repaints in place (curl's, wget's, tqdm's, huggingface-cli's) keeps its file fresh while the
bytes stand still, so the question is whether the *amount* moved: each repaint is parsed into a sample
(what it shows done, and the elapsed time it prints when it prints one), and the meter is stuck for as
long as the trailing samples show the same amount. Lines written one after another (a training's step
bar in a file, ``proof 3/10 done``, the ``[benchmark] progress`` regex) are progress events; the last
one is at most as new as the file.

``kind`` is ``download`` (bytes: curl, wget, huggingface-cli, a parameter fetch) or ``steps`` (the
benchmark's own work: tqdm ``it/s`` bars, proofs, steps, epochs).
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, NamedTuple, Optional, Pattern

REPAINT_SECONDS = 1.0  # a meter without an elapsed column (wget) repaints about once a second while stalled

# curl's meter: % Total % Received % Xferd Dload Upload Total Spent Left Speed
CURL_METER_RE = re.compile(
    r"^\s*(\d{1,3})\s+(\S+)\s+(\d{1,3})\s+(\S+)\s+(\d{1,3})\s+(\S+)\s+(\S+)\s+(\S+)\s+([\d:-]+)\s+([\d:-]+)"
    r"\s+([\d:-]+)\s+(\S+)\s*$"
)
CURL_BAR_RE = re.compile(r"^[\s#=>.\-*O]*?\s*(\d{1,3}(?:\.\d+)?)\s?%\s*$")
# tqdm: "desc:  37%|███▋      | 1.84G/4.98G [00:07<00:11, 271MB/s]", "  1%|▏| 20/1752 [01:22<1:21:50,  2.80s/it]"
TQDM_RE = re.compile(
    r"(?:^|[\s:])(\d{1,3})%\|[^|]*\|\s*([\d.]+\s?[kKMGTP]?i?B?)/([\d.]+\s?[kKMGTP]?i?B?)\s*"
    r"\[(?:(\d+):)?(\d+):(\d+)(?:<[^,\]]*)?(?:,\s*([^\]]*))?\]"
)
# wget: "c2.params   45%[========>   ] 463.25M  11.4MB/s    eta 48s"
WGET_RE = re.compile(r"(\d{1,3})%\[[=> ]*\]\s+([\d.,]+[KMGT]?)\s+(\S+)")
# a pb-style bar (lotus paramfetch): "6.71 GiB / 47.90 GiB [=====>------]  14.01% 41.20 MiB/s 17m03s"
PB_RE = re.compile(r"([\d.]+ [KMGT]?i?B) / ([\d.]+ [KMGT]?i?B) \[[=>\-]*\]\s+([\d.]+)%")
DOWNLOAD_DESC_RE = re.compile(
    r"\.(?:safetensors|bin|gguf|params|pt|pth|ckpt|tar|gz|zip|json|vk|srs)\b|download|fetch", re.IGNORECASE)
# the benchmark's own progress (``[benchmark] progress`` replaces it)
DEFAULT_PROGRESS = (
    r"\bproofs?\s+(\d+)(?:\s*/\s*(\d+))?\s+(?:done|finished|completed|ok)\b"
    r"|\b(?:global_)?step[\s:=#]+(\d+)(?:\s*/\s*(\d+))?"
    r"|\biter(?:ation)?[\s:=#]+(\d+)(?:\s*/\s*(\d+))?"
    r"|\bepoch[\s:=#]+(\d+)(?:\s*/\s*(\d+))?"
    r"|[\d.]+\s*(?:it/s|s/it)\b"
    r"|\{'loss': "
)


_DEFAULT_RE = re.compile(DEFAULT_PROGRESS, re.IGNORECASE)


class Sample(NamedTuple):
    kind: str  # "download" | "steps"
    amount: str  # what the line shows done (compared between samples)
    percent: Optional[float]
    elapsed: Optional[float]  # seconds the meter itself says it has run
    done: bool  # the line shows the work complete (100 %, N/N)


def _clock(h: Optional[str], m: str, s: str) -> float:
    return (int(h) * 3600 if h else 0) + int(m) * 60 + int(s)


def _hms(text: str) -> Optional[float]:
    parts = text.split(":")
    if not all(p.isdigit() for p in parts) or not 1 <= len(parts) <= 3:
        return None
    value = 0.0
    for p in parts:
        value = value * 60 + int(p)
    return value


def _last(rx: Pattern[str], text: str) -> Optional[re.Match[str]]:
    """The last match in a line (a meter repainted with spaces holds several states)."""
    found = None
    for found in rx.finditer(text):  # noqa: B007
        pass
    return found


def compile_progress(pattern: Optional[str]) -> Pattern[str]:
    """The ``[benchmark] progress`` regex, or the default (also when it does not compile)."""
    if not pattern:
        return _DEFAULT_RE
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error:
        return _DEFAULT_RE


_DEFAULT_HINTS = ("proof", "step", "iter", "epoch", "it/s", "s/it", "{'loss'")


def parse(text: str, bench_re: Optional[Pattern[str]] = None) -> Optional[Sample]:
    """The progress a line shows, or None."""
    if len(text) > 2000:
        text = text[-2000:]
    m = CURL_METER_RE.match(text) if text[:1] == " " or text[:1].isdigit() else None
    if m and m.group(10)[:1].isdigit():
        pct = float(m.group(3))
        return Sample("download", m.group(4), pct, _hms(m.group(10)), pct >= 100.0)
    if "%" not in text:  # every other meter shows a percent; else only the benchmark's own progress can match
        rx = bench_re if bench_re is not None else _DEFAULT_RE
        if rx.pattern == DEFAULT_PROGRESS:
            low = text.lower()
            if not any(h in low for h in _DEFAULT_HINTS):
                return None
        return _steps(rx, text)
    last = _last(TQDM_RE, text)
    if last is not None:
        pct, n, total = float(last.group(1)), last.group(2).strip(), last.group(3).strip()
        rate = last.group(7) or ""
        desc = text[: last.start()]
        is_bytes = "B/s" in rate or bool(re.search(r"[kKMGTP]", n + total)) or bool(DOWNLOAD_DESC_RE.search(desc))
        elapsed = _clock(last.group(4), last.group(5), last.group(6))
        return Sample("download" if is_bytes else "steps", n, pct, elapsed, n == total or pct >= 100.0)
    last = _last(WGET_RE, text)
    if last is not None:
        pct = float(last.group(1))
        return Sample("download", last.group(2), pct, None, pct >= 100.0)
    last = _last(PB_RE, text)
    if last is not None:
        pct = float(last.group(3))
        return Sample("download", last.group(1), pct, None, pct >= 100.0)
    m = CURL_BAR_RE.match(text)
    if m:
        pct = float(m.group(1))
        if pct <= 100.0:
            return Sample("download", m.group(1), pct, None, pct >= 100.0)
    return _steps(bench_re if bench_re is not None else _DEFAULT_RE, text)


def _steps(rx: Pattern[str], text: str) -> Optional[Sample]:
    m = rx.search(text)
    if not m:
        return None
    groups = [g for g in m.groups() if g is not None] if m.groups() else []
    amount = groups[0] if groups else m.group(0)
    done = len(groups) >= 2 and groups[0] == groups[1]
    return Sample("steps", amount, None, None, done)


class LogProgress(NamedTuple):
    """The last progress a log shows and for how long it has not moved."""

    at: int  # index of the progress line into the log's lines
    sample: Sample
    stuck_for: float  # seconds the amount has not changed (at least)
    last_line: bool  # the progress line is the log's last non-empty line (nothing came after it)
    events: List[int]  # indexes of every progress line


def log_progress(log: Dict[str, Any], now: float, bench_re: Optional[Pattern[str]] = None) -> Optional[LogProgress]:
    lines: List[str] = log.get("lines") or []
    events: List[int] = []
    last: Optional[Sample] = None
    for i, text in enumerate(lines):
        if not text or len(text) > 4000:
            continue
        sample = parse(text, bench_re)
        if sample is not None:
            events.append(i)
            last = sample
    if last is None:
        return None
    at = events[-1]
    mtime = log.get("mtime")
    idle = max(0.0, now - float(mtime)) if mtime is not None else 0.0
    stuck = idle
    repaints = (log.get("repaints") or {}).get(at) or (log.get("repaints") or {}).get(str(at))
    if repaints:
        samples = [s for s in (parse(t, bench_re) for t in repaints) if s is not None]
        if samples:
            tail = samples[-1]
            j = len(samples) - 1
            while j > 0 and samples[j - 1].amount == tail.amount:
                j -= 1
            first = samples[j]
            if tail.elapsed is not None and first.elapsed is not None:
                in_line = max(0.0, tail.elapsed - first.elapsed)
            else:
                in_line = (len(samples) - 1 - j) * REPAINT_SECONDS
            stuck = idle + in_line
            last = tail
    last_line = all(not t.strip() for t in lines[at + 1:])
    return LogProgress(at, last, stuck, last_line, events)
