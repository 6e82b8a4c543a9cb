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
from typing import Any, Dict, List, NamedTuple, Optional, Pattern, Tuple

MIN_REPRINTS = 10  # an unchanged meter reprinted this often, with no stamps, counts a second a reprint
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
    r"\[(?:elapsed:\s*)?(?:(\d+):)?(\d+):(\d+)(?:<[^,\]]*|\s+(?:remaining|left|eta):[^,\]]*)?(?:,\s*([^\]]*))?\]"
)  # (a custom bar_format names its clocks: ColabFold's "| 106/300 [elapsed: 01:49 remaining: 03:23]")
# wget: "c2.params   45%[========>   ] 463.25M  11.4MB/s    eta 48s"
WGET_RE = re.compile(r"(\d{1,3})%\[[=> ]*\]\s+([\d.,]+[KMGT]?)\s+(\S+)")
# rclone's stats block: "Transferred:   	   38.207 GiB / 61.540 GiB, 62%, 0 B/s, ETA -" (the files line has no unit)
RCLONE_RE = re.compile(r"Transferred:\s+([\d.]+\s?[KMGTPE]?i?B)\s*/\s*([\d.]+\s?[KMGTPE]?i?B),\s*(\d{1,3})%")
# a meter of bytes with its percent and rate: rsync's --progress / --info=progress2 ("  3,406,823,424  37%
# 38.10MB/s    0:01:24", the byte count bare), pv's ("3.17GiB 0:01:24 [38.1MiB/s] [=====>     ] 37%")
RSYNC_RE = re.compile(r"(?:^|\s)(\d{1,3}(?:,\d{3})+|\d+)\s+(\d{1,3})%\s+[\d.]+\s?[kKMGTP]?i?B/s\s+\d+:\d\d:\d\d\b")
PV_RE = re.compile(r"([\d.]+\s?[KMGTPE]i?B)\s+\d+:\d\d:\d\d"
                   r"\s+\[\s*[\d.]+\s?[KMGTPE]?i?B/s\]\s*\[[=>\s]*\]\s*(\d{1,3})%")
# a pb-style bar (lotus paramfetch): "6.71 GiB / 47.90 GiB [=====>------]  14.01% 41.20 MiB/s 17m03s"
PB_RE = re.compile(r"([\d.]+ [KMGT]?i?B) / ([\d.]+ [KMGT]?i?B) \[[=>\-]*\]\s+([\d.]+)%")
# any other meter of bytes: "2.0 GiB/4.8 GiB (41.67%)" (LocalAI), "[#2089b1 1.2GiB/4.8GiB(25%) CN:16 ...]"
# (aria2c), "512 MiB of 4 GiB, 12%": an amount with its unit over a total with its unit, then a percent
SIZED_RE = re.compile(
    r"([\d.]+\s?[KMGTPE]i?B)\s*(?:/|\bof\b)\s*([\d.]+\s?[KMGTPE]i?B)\W{0,4}(\d{1,3}(?:\.\d+)?)\s?%")
# the same with the percent first: "pulling 6a0746a1ec1a...  45% ▕████     ▏ 2.1 GB/4.7 GB  2.0 MB/s" (ollama)
SIZED_AFTER_RE = re.compile(
    r"(\d{1,3}(?:\.\d+)?)\s?%[^\w\n]{0,120}?([\d.]+\s?[KMGTPE]i?B)\s*(?:/|\bof\b)\s*([\d.]+\s?[KMGTPE]i?B)")
# a percent, then one amount of bytes and a rate: git's and git-lfs's "Filtering content:  39% (13/33), 60.9 GiB |
# 38 MiB/s", "Receiving objects:  45% (1234/2700), 12.34 MiB | 5.67 MiB/s"
PCT_AMOUNT_RATE_RE = re.compile(
    r"(\d{1,3}(?:\.\d+)?)\s?%[^\n%]{0,40}?\b([\d.]+\s?[KMGTPE]?i?B)\b[^\n%]{0,20}?[\d.]+\s?[KMGTPE]?i?B/s")
# wget's dot meter (a log file, or --progress=dot): "  63932750K .......... .......... ...  55% 11.2M 5h43m"
WGET_DOTS_RE = re.compile(r"^\s*(\d+)K(?:\s+[.,]{1,16}){1,12}\s+(\d{1,3})%\s+[\d.,]+[KMG]?")
# an amount over a total and a rate, no percent: tabby's "00:02:25 ▕█████▏ 0.98 GiB/1.53 GiB  7.18 MiB/s  ETA 79s."
SIZED_RATE_RE = re.compile(
    r"([\d.]+)\s?([KMGTPE]?)i?B\s*/\s*([\d.]+)\s?([KMGTPE]?)i?B\s+[\d.]+\s?[KMGTPE]?i?B/s")
# rich's download column (pip >= 23, pdm, pipx): one unit after the total, "57.6/90.6 MB 2.4 MB/s eta 0:00:13"
SHARED_UNIT_RATE_RE = re.compile(
    r"(?<![\w./])(\d+(?:\.\d+)?)/(\d+(?:\.\d+)?)\s?([kKMGTPE]?)i?B\s+[\d.]+\s?[kKMGTPE]?i?B/s")
# docker's (and podman's) layer meter: "d8f1569ddae6: Downloading [=====>     ]  314.0MB/3.14GB" (no percent, no rate)
LAYER_RE = re.compile(r"\b(?:Downloading|Extracting|Pushing|Copying blob \w+)\s*\[[=>\s-]*\]\s+"
                      r"([\d.]+)\s?([kKMGTPE]?)i?B\s*/\s*([\d.]+)\s?([kKMGTPE]?)i?B")
# a structured (JSON) progress event of a transfer: {"percent":0,"transferred":23068672} (a node ipfs/got client),
# {"loaded":1048576,"total":4194304}, {"bytesDownloaded":..}: the bytes moved, the percent or the total if given
JSON_METER_RE = re.compile(r'"(?:transferred|loaded|downloaded|received'
                           r'|bytes_?(?:transferred|downloaded|received|loaded))"\s*:\s*(\d+)', re.IGNORECASE)
JSON_PCT_RE = re.compile(r'"percent(?:age)?"\s*:\s*(\d+(?:\.\d+)?)')
JSON_TOTAL_RE = re.compile(r'"(?:total|totalBytes|total_bytes|size)"\s*:\s*(\d+)')
# a download's percent in words: "Download progress: 17%, ETA 46:02", "Downloading model... 42%", "fetch: 8.5%"
WORDED_RE = re.compile(r"\b(?:download|fetch|pull)\w*(?: progress)?\s*[:=-]?\s*(?:[^\s%]+\s+){0,3}?"
                       r"(\d{1,3}(?:\.\d+)?)\s?%(?![|\[])", re.IGNORECASE)
_SCALE = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
# a count of files fetched: TGI's "Download: [6/19] -- ETA: 0:15:29", "Downloading [3/8]"
DOWNLOAD_COUNT_RE = re.compile(r"\b(?:download|fetch)\w*\W{0,3}\[(\d+)\s*/\s*(\d+)\]", re.IGNORECASE)
DOWNLOAD_DESC_RE = re.compile(
    r"\.(?:safetensors|bin|gguf|params|pt|pth|ckpt|tar|gz|zip|json|vk|srs)\b|download|fetch", re.IGNORECASE)
# the benchmark's own progress (``[benchmark] progress`` replaces it)
DEFAULT_PROGRESS = (
    r"\bproofs?\s+(\d+)(?:\s*/\s*(\d+))?\s+(?:done|finished|completed|ok)\b"
    # a batch scheduler's job step is no step: Slurm's "*** STEP 494583.0 ON host", "job step 494583.0"
    r"|\b(?<!job )(?:global_)?step[\s:=#]+(\d+)(?!\d|\.\d+\s+ON\b)(?:\s*/\s*(\d+))?"
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


def _json_meter(text: str) -> Optional[Sample]:
    """A structured (JSON) transfer event's progress, or None."""
    jm = JSON_METER_RE.search(text)
    if jm is None:
        return None
    pm, tm = JSON_PCT_RE.search(text), JSON_TOTAL_RE.search(text)
    moved, total = int(jm.group(1)), int(tm.group(1)) if tm else 0
    pct: Optional[float] = float(pm.group(1)) if pm else (100.0 * moved / total if total >= moved else None)
    if pct is not None and pct > 100.0:
        return None
    return Sample("download", jm.group(1), pct, None, (pct or 0.0) >= 100.0 or 0 < total <= moved)


def parse(text: str, bench_re: Optional[Pattern[str]] = None) -> Optional[Sample]:
    """The progress a line shows, or None."""
    if len(text) > 2000:
        text = text[-2000:]
    m = CURL_METER_RE.match(text) if text[:1] == " " or text[:1].isdigit() else None
    if m and m.group(10)[:1].isdigit():
        pct = float(m.group(3))
        return Sample("download", m.group(4), pct, _hms(m.group(10)), pct >= 100.0)
    m = DOWNLOAD_COUNT_RE.search(text) if "[" in text else None
    if m and int(m.group(2)) > 0 and int(m.group(1)) <= int(m.group(2)):
        files, of = int(m.group(1)), int(m.group(2))
        return Sample("download", m.group(1), 100.0 * files / of, None, files == of)
    m = SIZED_RATE_RE.search(text) if "/s" in text and "%" not in text else None
    shared = SHARED_UNIT_RATE_RE.search(text) if m is None and "/s" in text and "%" not in text else None
    jm = _json_meter(text) if '"' in text else None
    if jm is not None:
        return jm
    layer = _last(LAYER_RE, text) if "%" not in text and "[" in text else None
    if layer is not None:
        got = float(layer.group(1)) * _SCALE[layer.group(2).upper()]
        whole = float(layer.group(3)) * _SCALE[layer.group(4).upper()]
        if whole > 0 and got <= whole:
            amount = "%s %sB" % (layer.group(1), layer.group(2).upper())
            return Sample("download", amount, 100.0 * got / whole, None, got >= whole)
    if shared:
        got, whole = float(shared.group(1)), float(shared.group(2))
        if whole > 0 and got <= whole:
            amount = "%s %sB" % (shared.group(1), shared.group(3).upper())
            return Sample("download", amount, 100.0 * got / whole, None, got >= whole)
    if m:
        try:
            have = float(m.group(1)) * _SCALE[m.group(2)]
            size = float(m.group(3)) * _SCALE[m.group(4)]
        except ValueError:
            have = size = 0.0
        if size > 0 and have <= size:
            amount = "%s %sB" % (m.group(1), m.group(2))
            return Sample("download", amount, 100.0 * have / size, None, have >= size)
    if "%" not in text:  # every other meter shows a percent; else only the benchmark's own progress can match
        rx = bench_re if bench_re is not None else _DEFAULT_RE
        if rx.pattern == DEFAULT_PROGRESS:
            low = text.lower()
            if not any(h in low for h in _DEFAULT_HINTS):
                return None
        return _steps(rx, text)
    last = _last(RCLONE_RE, text) if "Transferred:" in text else None
    if last is not None:
        pct = float(last.group(3))
        return Sample("download", last.group(1), pct, None, pct >= 100.0)
    last = _last(RSYNC_RE, text) or _last(PV_RE, text)
    if last is not None and float(last.group(2)) <= 100.0:
        pct = float(last.group(2))
        return Sample("download", last.group(1), pct, None, pct >= 100.0)
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
    last = _last(SIZED_RE, text)
    if last is not None:
        pct = float(last.group(3))
        if pct <= 100.0:
            return Sample("download", last.group(1), pct, None, pct >= 100.0)
    last = _last(SIZED_AFTER_RE, text)
    if last is not None:
        pct = float(last.group(1))
        if pct <= 100.0:
            return Sample("download", last.group(2), pct, None, pct >= 100.0)
    last = _last(PCT_AMOUNT_RATE_RE, text)
    if last is not None:
        pct = float(last.group(1))
        if pct <= 100.0:
            return Sample("download", last.group(2), pct, None, pct >= 100.0)
    m = WGET_DOTS_RE.match(text)
    if m:
        pct = float(m.group(2))
        if pct <= 100.0:
            return Sample("download", m.group(1), pct, None, pct >= 100.0)
    last = _last(WORDED_RE, text)
    if last is not None:
        pct = float(last.group(1))
        if pct <= 100.0:
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


def _skeleton(text: str) -> str:
    return re.sub(r"[\d.:]+", "#", text.strip())


def _reprinted(lines: List[str], events: List[int], samples: List[Sample], stamp_at: Any
               ) -> Optional[Tuple[float, bool]]:
    """A meter printed line after line (a stats block every minute: rclone) whose amount has not moved:
    ``(seconds between the first and the last line showing it, the lines after the last one only repeat the
    block)``; None when the last amount is new."""
    last = samples[-1]
    j = len(samples) - 1
    while j > 0 and samples[j - 1].kind == "download" and samples[j - 1].amount == last.amount:
        j -= 1
    if j == len(samples) - 1 or stamp_at is None:
        return None
    span = max(0.0, stamp_at(events[-1]) - stamp_at(events[j]))
    if span == 0.0 and len(samples) - 1 - j >= MIN_REPRINTS:  # no stamps to date them: a reprint a second at least
        span = (len(samples) - 1 - j) * REPAINT_SECONDS
    after = [_skeleton(t) for t in lines[events[-1] + 1:] if t.strip()]
    block = {_skeleton(t) for t in lines[events[-2] + 1:events[-1]] if t.strip()}
    return span, all(t in block for t in after)


def log_progress(log: Dict[str, Any], now: float, bench_re: Optional[Pattern[str]] = None,
                 stamp_at: Any = None) -> Optional[LogProgress]:
    """The log's last progress and for how long it has not moved. ``stamp_at(index)`` (a ``Timeline``'s
    ``at``) dates a meter reprinted line after line; without it only repaints and the file's age count."""
    lines: List[str] = log.get("lines") or []
    events: List[int] = []
    samples: List[Sample] = []
    last: Optional[Sample] = None
    for i, text in enumerate(lines):
        if not text or len(text) > 4000:
            continue
        sample = parse(text, bench_re)
        if sample is not None:
            events.append(i)
            samples.append(sample)
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
    if not repaints and last.kind == "download" and not last.done and len(samples) > 1:
        again = _reprinted(lines, events, samples, stamp_at)
        if again is not None:
            stuck = idle + again[0]
            last_line = last_line or again[1]
    return LogProgress(at, last, stuck, last_line, events)


# -- the pace of the steps: advancing, but much slower than earlier in the same log ---------------------------
SLOWDOWN = 3.0  # the recent pace is this many times slower than the earlier one: a warning
MIN_PACES = 8  # paces needed to compare
RATE_RE = re.compile(
    r"([\d.]+)\s*(it/s|s/it|sec/batch|s/batch|sec/step|s/step|sec/iter|s/iter|examples/sec|examples/s"
    r"|samples/sec|samples/s|tokens/sec|tokens/s|tok/s|img/s|images/sec|images/s)(?![\w/])",
    re.IGNORECASE,
)
_INVERSE_UNITS = ("s/it", "sec/batch", "s/batch", "sec/step", "s/step", "sec/iter", "s/iter")
# the time one unit of work took, printed on its progress line: "End of epoch 3 / 200  Time Taken: 392 sec",
# "(epoch: 1, iters: 100, time: 0.208, data: 0.006)", "step 40 took 1.9s"; not a clock ("time: 12:00:01")
DURATION_RE = re.compile(
    r"\b(time taken|took|step time|iter(?:ation)? time|batch time|epoch time|time)\s*[:=]?\s*"
    r"(\d+(?:\.\d+)?)(?![\d:/.-])\s*(ms|s|sec|secs|seconds)?\b",
    re.IGNORECASE,
)
CUMULATIVE = 0.9  # a series of durations that grows at this share of its steps is a clock, not a pace


class Pace(NamedTuple):
    at: int  # the line it was read from
    rate: float  # work a second (higher is faster)
    unit: str  # as the log prints it


def _printed_pace(index: int, text: str) -> Optional[Pace]:
    m = _last(RATE_RE, text[-2000:])
    if m is None:
        return None
    try:
        value = float(m.group(1))
    except ValueError:
        return None
    unit = m.group(2).lower()
    if value <= 0:
        return None
    return Pace(index, 1.0 / value if unit in _INVERSE_UNITS else value, unit)


def _printed_duration(index: int, text: str) -> Optional[Pace]:
    """The time a unit of work took, as a pace (unit ``s (<its word>)``); None without one."""
    m = _last(DURATION_RE, text[-2000:])
    if m is None:
        return None
    seconds = float(m.group(2)) / (1000.0 if (m.group(3) or "").lower() == "ms" else 1.0)
    return Pace(index, 1.0 / seconds, "s (%s)" % m.group(1).lower()) if seconds > 0 else None


def _fmt_pace(rate: float, unit: str) -> str:
    if unit in _INVERSE_UNITS or unit.startswith("s ("):
        return "%.3g %s" % (1.0 / rate, unit)
    return "%.3g %s" % (rate, unit)


def _duration_series(lines: List[str], events: List[int]) -> List[List[Pace]]:
    """Per word ("time taken", "time"...), the durations the progress lines print; a series that keeps
    growing is a running clock (elapsed time), not how long each unit took, and is left out."""
    by_word: Dict[str, List[Pace]] = {}
    for i in events:
        pace = _printed_duration(i, lines[i])
        if pace is not None:
            by_word.setdefault(pace.unit, []).append(pace)
    out = []
    for series in by_word.values():
        rising = sum(1 for a, b in zip(series, series[1:]) if b.rate < a.rate)
        if len(series) >= MIN_PACES and rising < CUMULATIVE * (len(series) - 1):
            out.append(series)
    return out


def _loop_label(text: str) -> str:
    """Which loop a progress line is of: its words before the meter, numbers blanked ("Epoch #:", "Validation
    DataLoader #:"), so a validation pass is never compared with the training steps."""
    cut = text.find("%|")
    if cut < 0:
        rate = RATE_RE.search(text)
        cut = rate.start() if rate is not None else min(len(text), 40)
    head = text[:cut]
    return re.sub(r"\d+(?:\.\d+)?", "#", head).strip()[:40]


def _by_loop(series: List[Pace], lines: List[str]) -> List[List[Pace]]:
    """The paces split by the loop their line belongs to (a line's label, see ``_loop_label``)."""
    groups: Dict[str, List[Pace]] = {}
    for pace in series:
        groups.setdefault(_loop_label(lines[pace.at]), []).append(pace)
    return list(groups.values())


def _slowdown(series: List[Pace]) -> Optional[Tuple[float, str, str, int]]:
    """The factor when the recent paces are SLOWDOWN times slower than the first half's (medians)."""
    if len(series) < MIN_PACES:
        return None
    half = series[: len(series) // 2]
    recent = series[-max(3, len(series) // 6):]
    before, now = _median([p.rate for p in half]), _median([p.rate for p in recent])
    if now <= 0 or before / now < SLOWDOWN:
        return None
    unit = series[-1].unit
    return before / now, _fmt_pace(before, unit), _fmt_pace(now, unit), series[-1].at


def _median(values: List[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def paces(lines: List[str], events: List[int], stamp_of: Any = None,
          bench_re: Optional[Pattern[str]] = None) -> List[Pace]:
    """The pace at each progress line: the rate it prints (``it/s``, ``s/it``, ``sec/batch``, ``examples/sec``,
    ``tokens/s``...), else, from lines with their own time stamps (``stamp_of(index)`` -> seconds or None), the
    steps done per second between two of them."""
    out = [p for p in (_printed_pace(i, lines[i]) for i in events) if p is not None]
    if len(out) >= MIN_PACES or stamp_of is None:
        return out
    out = []
    prev: Optional[Tuple[float, float]] = None
    for i in events:
        sample = parse(lines[i], bench_re)
        when = stamp_of(i)
        if sample is None or when is None:
            continue
        try:
            step = float(sample.amount)
        except ValueError:
            continue
        if prev is not None and step > prev[1] and when > prev[0]:
            out.append(Pace(i, (step - prev[1]) / (when - prev[0]), "steps/s"))
        prev = (when, step)
    return out


def step_slowdown(lines: List[str], events: List[int], stamp_of: Any = None,
                  bench_re: Optional[Pattern[str]] = None, repaints: Optional[List[str]] = None
                  ) -> Optional[Tuple[float, str, str, int]]:
    """``(factor, earlier pace, recent pace, index of the latest line)`` when the recent steps are at least
    ``SLOWDOWN`` times slower than the earlier ones of the same log (median of the first half against the
    median of the last sixth, at least 3 paces), else None. A bar redrawn in place (``repaints``: the states
    of its last line) is read state by state."""
    series: List[Pace] = []
    if repaints and events:  # the states of the bar redrawn in place: those of its current loop only
        loop = _loop_label(repaints[-1])
        series = [p for p in (_printed_pace(events[-1], t) for t in repaints if _loop_label(t) == loop)
                  if p is not None]
    if len(series) < MIN_PACES:
        series = paces(lines, events[-400:], stamp_of, bench_re)
    loops = _by_loop(series, lines) if series and len(series) == len(set(p.at for p in series)) else [series]
    found = [f for f in map(_slowdown, [*loops, *_duration_series(lines, events[-400:])]) if f is not None]
    return max(found, key=lambda f: f[0]) if found else None
