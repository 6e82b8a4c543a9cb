"""Events: signature hits in every log tail and the kernel log, grouped into episodes and put in time.

A hit is kept with what a reader of the log would conclude about it:
- known-harmless lines (``signatures.HARMLESS``) are dropped; a line logged at INFO/DEBUG level is never
  more than ``info``, one at WARN level never more than ``warning``;
- a connection reset or time-out in the middle of a download is a download failure;
- a panic whose message names a cause (out of memory, ``Os { code: 28 }``, too many open files, ...) is that
  cause, its message line the evidence; a 401 on a download whose repo is not gated is credentials refused;
- an episode (hits of one code a few lines apart) followed in its log by the operation succeeding or by
  further progress is ``recovered``: history, not the present; a condition (``signatures.CLEARED``: throttling,
  a NaN loss, an NFS server not responding) is over only when a line says it ended, whatever the progress;
- a prompt (``waiting_input``) counts only as the last line of its log: anything after it means it was answered;
- an episode from before the current run (its log last written before the benchmark started, a kernel
  event before the entrypoint) is ``stale``.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Pattern, Sequence

from ..wire.protocol import Evidence
from . import progress, signatures
from .signatures import Signature
from .timeline import Timeline

SEVERITY_LEVEL = {"info": 0, "warning": 1, "error": 2, "critical": 3}
EPISODE_GAP = 4  # hits of one code at most this many lines apart are one episode
RUN_SLACK = 15.0  # seconds: kernel stamps drift from the wall clock; an event this close to the start is the run's
LOG_SLACK = 2.0  # seconds: a log last written this close before the benchmark started still belongs to it
# dmesg codes that are kernel chatter, not our benchmark
KERNEL_IGNORED = frozenset(("missing_input", "timeout", "transport_error", "command_not_found",
                            "permission_denied", "child_failed", "python_traceback", "download_failed",
                            "library_missing", "version_mismatch", "install_failed", "credentials_refused",
                            "waiting_input", "diverged", "gpu_faulty"))
HARDWARE = frozenset(("gpu_lost", "gpu_ecc", "no_gpu_driver", "driver_mismatch", "gpu_faulty", "fabric_manager_down",
                       "cuda_init_failed"))
NEVER_RECOVER = HARDWARE | frozenset(("host_oom_kill", "missing_input"))
# what progress elsewhere does not make history: a hardware state, and conditions only a line ends
PERSISTENT = HARDWARE | frozenset(signatures.CLEARED) - frozenset(("storage_stall",))
DOWNLOADISH = frozenset(("transport_error", "timeout"))

# "[INFO|trainer.py:2134]", "2026-12-01T21:04:11Z INFO cuzk_daemon", "INFO 02-27 19:28:10", "WARN connect",
# "10/02/2024 17:58:04 - INFO - __main__", "host:1:1 [0] NCCL INFO", "INFO:     Uvicorn running"
LEVEL_RE = re.compile(
    r"^\s*(?:\[rank\d+\]:\s*)?(?:\[?\d{4}-\d\d-\d\d[T _][\d:.,]+\w*\]?\s+|\d\d/\d\d/\d{4} [\d:]+\s+-\s+"
    r"|\S+:\d+:\d+ \[\d+\] NCCL )?\[?(TRACE|DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|FATAL|CRITICAL)\b"
)
GLOG_RE = re.compile(r"^\s*(?:\[rank\d+\]:)?\[?([IWEF])\d{4} \d\d:\d\d:\d\d")
PY_WARNING_RE = re.compile(r"\b\w*Warning: ")
# a workflow manager's notice that a failed task is run again (Nextflow's "-- Execution is retried (1)", Snakemake's
# "Trying to restart job", "will be retried"): a warning, the attempt's end is not the run's
RETRIED_RE = re.compile(r"\b(?:execution|job|task|attempt|step|process) (?:is|will be|has been) (?:retried|restarted"
                        r"|resubmitted)\b|\bTrying to restart job\b|\bwill be retried\b", re.IGNORECASE)
# a supervisor relaying a worker's stderr line by line at its own INFO level (TorchServe's "W-9000-model_1.0-stderr
# org.pytorch.serve.wlm.WorkerLifeCycle - ...", Ray's "(raylet) [stderr]", "[worker-3 stderr]")
STDERR_RELAY_RE = re.compile(r"\S-stderr\b|\[stderr\]|\[[\w.-]+ stderr\]")
CAP = {"TRACE": "info", "DEBUG": "info", "INFO": "info", "NOTICE": "info", "WARN": "warning",
       "WARNING": "warning", "I": "info", "W": "warning"}
# the operation an error interrupted went on, or was retried and succeeded
RESUMED_RE = re.compile(
    r"download(?:ed)? (?:complete|completed|finished|ok|done|succeeded)|\bconnected to\b|\breconnected\b"
    r"|connection (?:re)?established|Application startup complete|server is listening|\blistening on\b"
    r"|Uvicorn running on|\" 200\b|\b200 OK\b|\bsaved \[\d+/\d+\]|\bsucceeded\b|retry succeeded",
    re.IGNORECASE,
)
# a health probe answered (TorchServe's "GET /ping HTTP/1.1" 200, "/health", "/ready", "/metrics"): the front end
# is up, which says nothing of the work (its workers may die and be retried behind it)
HEALTH_PROBE_RE = re.compile(r"\"(?:GET|HEAD) /(?:v\d+/)?(?:ping|health\w*|ready\w*|live\w*|status|metrics)\b"
                             r"[^\"]*\" 200\b",
                             re.IGNORECASE)
# a line that says something succeeded and something failed ("Clone succeeded, but checkout failed") is no resumption
RESUMED_BUT_FAILED_RE = re.compile(r"\b(?:failed|failure|error|errors|aborted)\b", re.IGNORECASE)
# a text UI's frame under its prompt (the box's empty rows and bottom border): no answer to the prompt
FRAME_RE = re.compile(r"^[\s\u2500-\u257f|+=_-]*$")
DMESG_TS_RE = re.compile(r"^\s*\[\s*(\d+(?:\.\d+)?)\]")


def level_cap(text: str) -> Optional[str]:
    """The highest severity a line's own log level allows (None: no level, or an error level)."""
    if RETRIED_RE.search(text):
        return "warning"
    if STDERR_RELAY_RE.search(text[:300]):  # a supervisor's INFO relaying a child's stderr: the level is the relay's
        return "warning" if PY_WARNING_RE.search(text[:300]) else None
    m = LEVEL_RE.match(text)
    if m:
        return CAP.get(m.group(1))
    m = GLOG_RE.match(text)
    if m:
        return CAP.get(m.group(1))
    if PY_WARNING_RE.search(text[:200]):
        return "warning"
    return None


def capped(severity: str, cap: Optional[str]) -> str:
    if cap is None or SEVERITY_LEVEL.get(severity, 2) <= SEVERITY_LEVEL[cap]:
        return severity
    return cap


class Episode:
    """Hits of one code a few lines apart in one log: one event."""

    __slots__ = ("code", "follow", "hits", "kernel", "log", "order", "recovered", "severity", "stale", "time")

    def __init__(self, code: str, severity: str, log: Dict[str, Any], hit: Dict[str, Any], order: int) -> None:
        self.code = code
        self.severity = severity
        self.log = log
        self.hits: List[Dict[str, Any]] = [hit]
        self.time = 0.0
        self.stale = False
        self.recovered = False
        self.follow: List[Evidence] = []
        self.order = order
        self.kernel = False

    @property
    def first(self) -> Dict[str, Any]:
        return self.hits[0]

    @property
    def last_index(self) -> int:
        return int(self.hits[-1]["line"]) - int(self.log.get("first_line") or 1)


def _table(facts: Dict[str, Any]) -> Sequence[Signature]:
    custom = signatures.compile_custom(facts.get("signatures"))
    return custom + signatures.SIGNATURES if custom else signatures.SIGNATURES


def _row(code: str) -> Optional[Signature]:
    return next((sig for sig in signatures.SIGNATURES if sig.code == code), None)


def _panic_cause(hit: Dict[str, Any], lines: List[str], index: int) -> Optional[Dict[str, Any]]:
    """A panic whose message names a known cause, as a hit of that cause on the message's line (else None)."""
    candidates = [index]
    for i in range(index + 1, min(len(lines), index + 6)):
        if signatures.PANIC_PAYLOAD_END.search(lines[i]) or signatures.match_line(lines[i]) is _row("panic"):
            break
        candidates.append(i)
    for i in candidates:
        for code, rx in signatures.PANIC_CAUSES:
            if rx.search(lines[i]):
                row = _row(code)
                first = int(hit["line"]) - index
                return {"code": code, "severity": row.severity if row else "error",
                        "explanation": row.explanation if row else code, "path": hit["path"], "line": first + i,
                        "text": lines[i]}
    return None


def _classify(hit: Dict[str, Any], lines: List[str], index: int) -> Optional[Dict[str, Any]]:
    """A hit as the log means it, or None for known noise."""
    text = hit["text"]
    if signatures.is_harmless(text):
        return None
    if hit["code"] == "panic":
        cause = _panic_cause(hit, lines, index)
        if cause is not None:
            cause["severity"] = capped(cause["severity"], level_cap(text))
            if cause["code"] not in DOWNLOADISH:
                return cause
            hit = cause  # a connection that broke: a download's, when a download meter was under way
    hit["severity"] = capped(hit["severity"], level_cap(text))
    if hit["code"] == "download_failed" and signatures.UNAUTHORIZED.search(text) and not any(
            signatures.NOT_CREDENTIALS.search(t) for t in lines[max(0, index - 25):index + 25]) \
            and not anonymous_fetch(lines[max(0, index - 12):index]):
        hit["code"] = "credentials_refused"
    if hit["code"] in DOWNLOADISH:  # the line right before is an unfinished download meter
        before = next((t for t in reversed(lines[max(0, index - 3):index]) if t.strip()), "")
        sample = progress.parse(before) if before else None
        if sample is not None and sample.kind == "download" and not sample.done:
            hit["code"] = "download_failed"
    return hit


# a program that says it handles one operation's failure another way and goes on: bellperson's "GPU FFT failed!
# Falling back to CPU...", "cuFFT plan failed, falling back to the slow path", "flash attention unavailable, using
# eager instead" (analyze.FALLBACK_RE is the whole run going on on the CPU, a failure of its own)
HANDLED_FALLBACK_RE = re.compile(r"\b(?:falls|falling|fell) ?back (?:to|on)\b"
                                 r"|\b(?:using|use|trying|retrying (?:on|with)) (?:the )?"
                                 r"(?:CPU|host|eager|slow path|default)\w*"
                                 r" (?:instead|path)\b", re.IGNORECASE)
FALLBACK_CODES = frozenset(("cuda_oom", "cuda_error"))  # a GPU path's failure another path can take over
FALLBACK_SPAN = 12  # lines an error block after the announcement may take (an OpenCL error's banner)


def fell_back(lines: List[str], ep: Episode, last_line: int) -> bool:
    """The episode's lines are the error block right after (or on) the program's own word that it falls back to
    another path, and the log went on after the block: the failure was handled, no failure of the run."""
    if ep.code not in FALLBACK_CODES:
        return False
    first = int(ep.hits[0]["line"]) - int(ep.log.get("first_line") or 1)
    said = next((i for i in range(first, max(-1, first - FALLBACK_SPAN), -1)
                 if HANDLED_FALLBACK_RE.search(lines[i][:400])), None)
    return said is not None and ep.last_index - said <= FALLBACK_SPAN and last_line > ep.last_index + 2


# a shell's trace of the fetch it runs ("+ wget -O x https://...", "$ curl -fL https://..."), and what in it would
# carry credentials (a header, a user, a netrc, a token in the URL)
FETCH_TRACE_RE = re.compile(r"^\s*(?:\+{1,3}|\$)\s+(?:\S+=\S+\s+)*(?:wget|curl)\s.*\bhttps?://", re.IGNORECASE)
CREDENTIALS_ARG_RE = re.compile(r"\s(?:-H|--header|-u|--user|--password|--http-user|--http-password|-n|--netrc\S*"
                                r"|--oauth2-bearer|-b|--cookie|--load-cookies)\b|[?&](?:token|api_?key|access_token"
                                r"|key|sig)=|Authorization|Bearer\b|://[^/\s:@]+:[^/\s@]+@", re.IGNORECASE)


def anonymous_fetch(before: List[str]) -> bool:
    """The fetch a 401 answers is traced just before it and sent no credentials: nothing was refused but an
    anonymous request for something that needs a login (a gated asset), a failed download."""
    trace = next((t for t in reversed(before) if FETCH_TRACE_RE.search(t)), None)
    return trace is not None and not CREDENTIALS_ARG_RE.search(trace)


def _group(log: Dict[str, Any], hits: List[Dict[str, Any]], order: int) -> List[Episode]:
    episodes: List[Episode] = []
    for hit in hits:
        last = episodes[-1] if episodes else None
        if last is not None and last.code == hit["code"] and hit["line"] - last.hits[-1]["line"] <= EPISODE_GAP:
            last.hits.append(hit)
            if SEVERITY_LEVEL.get(hit["severity"], 0) > SEVERITY_LEVEL.get(last.severity, 0):
                last.severity = hit["severity"]
        else:
            episodes.append(Episode(hit["code"], hit["severity"], log, hit, order + len(episodes)))
    return episodes


def _section(lines: List[str], index: int) -> str:
    """The device header (``signatures.SECTION``) a line of a multi-device report is under ("" if none)."""
    for i in range(index, max(-1, index - 2000), -1):
        if signatures.SECTION.search(lines[i]):
            return lines[i].strip()
    return ""


def cleared(ep: Episode, lines: List[str], start: int) -> bool:
    """Did a line after the episode (from ``lines[start]`` on) end the condition it set (``signatures.CLEARED``),
    for the same device when the report names devices?"""
    first = int(ep.log.get("first_line") or 1)
    wanted = set()
    for hit in ep.hits:
        for set_re, template in signatures.CLEARED.get(ep.code, []):
            m = set_re.search(hit["text"])
            if m:
                name = m.group(1) if m.groups() else ""
                wanted.add((template.format(re.escape(name)), _section(lines, int(hit["line"]) - first)))
                break
    if not wanted:
        return False
    section = _section(lines, start - 1) if start > 0 else ""
    found = set()
    regexes = {t: re.compile(t, re.IGNORECASE) for t, _ in wanted}
    for text in lines[start:]:
        if signatures.SECTION.search(text):
            section = text.strip()
            continue
        for template, rx in regexes.items():
            if (template, section) in wanted and rx.search(text):
                found.add((template, section))
    return found == wanted


# the last line of a Python traceback: "RuntimeError: An error occurred while downloading", "KeyboardInterrupt"
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failure)\b(?::|\s*$)")


def _redrawn_after_exception(lines: List[str], i: int) -> bool:
    """Is line ``i`` a meter redrawn right after a traceback's exception line (a bar closed as the exception
    unwound: tqdm's ``Fetching 14 files: 29%|`` after ``RuntimeError: ...``)? It shows no work going on."""
    j = next((k for k in range(i - 1, -1, -1) if lines[k].strip()), -1)
    if j < 0 or not EXCEPTION_LINE.match(lines[j]):
        return False
    return any(t.startswith("Traceback (most recent call last)") for t in lines[max(0, j - 300):j])


# a closing count of the items that failed: Boltz's "Number of failed examples: 1", "2 samples failed"
FAILED_TALLY_RE = re.compile(
    r"\b(?:number of )?failed (?:examples|samples|inputs|items|predictions|structures|batches|records)\s*[:=]\s*[1-9]"
    r"|\b[1-9]\d* (?:examples?|samples?|inputs?|items?|predictions?|structures?|batch(?:es)?|records?) failed\b",
    re.IGNORECASE)


def _failed_tally(lines: List[str], start: int) -> bool:
    """Does a count of failed items come after ``start``? The meter that went on counted the skipped ones too."""
    return any(FAILED_TALLY_RE.search(t) for t in lines[start:])


def last_resumed(lines: List[str], bench_re: Optional[Pattern[str]]) -> int:
    """The index of the last line that shows work going on (progress, a success, a completion), or -1. A meter
    with nothing done (``0%| 0/993``: a bar redrawn as its program exits) shows no work going on."""
    for i in range(len(lines) - 1, -1, -1):
        text = lines[i]
        if not text.strip():
            continue
        resumed = RESUMED_RE.search(text) is not None and RESUMED_BUT_FAILED_RE.search(text) is None \
            and not HEALTH_PROBE_RE.search(text)
        sample = progress.parse(text, bench_re)
        moving = sample is not None and not (sample.percent == 0 and sample.amount.strip("0. ") == "") \
            and not _redrawn_after_exception(lines, i)
        if resumed or signatures.is_completion(text) or moving:
            return i
    return -1


def log_episodes(
    facts: Dict[str, Any], now: float, bench_started: Optional[float], bench_re: Optional[Pattern[str]]
) -> List[Episode]:
    """Every episode in the log tails, with time, staleness and recovery decided."""
    table = _table(facts)
    out: List[Episode] = []
    for log in facts.get("logs") or []:
        if log.get("error"):
            continue
        lines: List[str] = log.get("lines") or []
        first = int(log.get("first_line") or 1)
        hits: List[Dict[str, Any]] = []
        seen = set()
        for hit in signatures.scan_lines(lines, log["path"], first, table):
            kept = _classify(hit, lines, hit["line"] - first)
            if kept is not None and (kept["line"], kept["code"]) not in seen:
                seen.add((kept["line"], kept["code"]))
                hits.append(kept)
        if not hits:
            continue
        hits.sort(key=lambda h: int(h["line"]))
        timeline = Timeline(log, now)
        resumed = last_resumed(lines, bench_re)
        last_line = next((i for i in range(len(lines) - 1, -1, -1)
                          if lines[i].strip() and not FRAME_RE.match(lines[i])), -1)
        mtime = log.get("mtime")
        stale = bench_started is not None and mtime is not None and float(mtime) < bench_started - LOG_SLACK
        for ep in _group(log, hits, len(out) * 1000):
            if ep.code == "waiting_input" and ep.last_index != last_line:
                continue  # something came after the prompt: it was answered
            ep.time = timeline.at(ep.last_index)
            ep.stale = stale
            if ep.code in signatures.CLEARED:
                ep.recovered = cleared(ep, lines, ep.last_index + 1) or (
                    ep.code not in PERSISTENT and resumed > ep.last_index)
            elif ep.code not in NEVER_RECOVER:
                ep.recovered = (resumed > ep.last_index and not _failed_tally(lines, ep.last_index + 1)) \
                    or fell_back(lines, ep, last_line)
            out.append(ep)
    return out


# a hung task's report that names swap: the task is kswapd, or its call trace waits on a page being swapped in
SWAP_TASK_RE = re.compile(r"\btask (?:kswapd\d*|kcompactd\d*)[:\s]")
SWAP_FRAME_RE = re.compile(r"\b(?:swap_readpage|swap_read_folio|do_swap_page|swapin_readahead|__read_swap_cache_async"
                           r")\+0x")


def _hung_task_names(lines: List[str], i: int, task_re: re.Pattern[str], frame_re: re.Pattern[str]) -> bool:
    """Does the "blocked for more than" report at ``i`` name its task by ``task_re``, or a frame of its call trace (up
    to the next report) by ``frame_re``?"""
    if task_re.search(lines[i]):
        return True
    for text in lines[i + 1:i + 40]:
        if "blocked for more than" in text:
            break
        if frame_re.search(text):
            return True
    return False


def _waits_on_swap(lines: List[str], i: int) -> bool:
    """Is the hung-task report at ``i`` one of a task waiting on swap?"""
    return _hung_task_names(lines, i, SWAP_TASK_RE, SWAP_FRAME_RE)


# a hung task's report that names the NVIDIA driver: the task is one of its tools, or its call trace waits inside the
# driver's modules ("os_acquire_rwlock_read+0x35/0x50 [nvidia]", "[nvidia_uvm]", "[nvidia_modeset]")
DRIVER_TASK_RE = re.compile(r"\btask (?:nvidia-smi|nvidia-persistenced|nv-hostengine|nvidia-modeset\S*|dcgmi)[:\s]")
DRIVER_FRAME_RE = re.compile(r"\+0x[0-9a-f]+/0x[0-9a-f]+ \[nvidia(?:_uvm|_modeset|_drm|_peermem)?\]")


def _waits_in_driver(lines: List[str], i: int) -> bool:
    """Is the hung-task report at ``i`` one of a task stuck in the NVIDIA driver?"""
    return _hung_task_names(lines, i, DRIVER_TASK_RE, DRIVER_FRAME_RE)


def kernel_episodes(facts: Dict[str, Any], now: float, run_started: Optional[float]) -> List[Episode]:
    """Episodes of the kernel log within ``dmesg_max_age``; those before the current run are stale."""
    dmesg = facts.get("dmesg") or {}
    lines = dmesg.get("lines") or []
    if not lines:
        return []
    dlog = {"path": "dmesg", "lines": lines, "first_line": 1, "mtime": None}
    max_age = facts.get("dmesg_max_age")
    uptime = dmesg.get("uptime")
    kept = []
    times: Dict[int, float] = {}
    for hit in signatures.scan_lines(lines, "dmesg", 1):
        if hit["code"] in KERNEL_IGNORED and not (hit["code"] == "gpu_faulty" and "NVRM: Xid" in hit["text"]):
            continue  # (an NVLink Xid is the driver's report of a fault, no chatter)
        if hit["code"] == "storage_stall" and _waits_on_swap(lines, int(hit["line"]) - 1):
            continue  # a task blocked swapping pages in: the host's memory is overcommitted, no disk is stuck
        if hit["code"] == "storage_stall" and _waits_in_driver(lines, int(hit["line"]) - 1):
            hung = signatures.DRIVER_HUNG  # a task stuck inside the NVIDIA driver: the driver is wedged, no storage
            hit = dict(hit, code=hung.code, severity=hung.severity, explanation=hung.explanation)
        m = DMESG_TS_RE.match(hit["text"])
        stamp = float(m.group(1)) if m else None
        if max_age and uptime and stamp is not None and stamp < float(uptime) - float(max_age):
            continue  # an old event, from before anything we care about
        times[hit["line"]] = now - (float(uptime) - stamp) if uptime and stamp is not None else now
        kept.append(hit)
    out = []
    for ep in _group(dlog, kept, 10 ** 6):
        ep.kernel = True
        ep.time = times.get(ep.hits[-1]["line"], now)
        ep.stale = bool(uptime and run_started and ep.time < run_started - RUN_SLACK)
        if ep.code in signatures.CLEARED:
            ep.recovered = cleared(ep, lines, int(ep.hits[-1]["line"]))
        out.append(ep)
    return out
