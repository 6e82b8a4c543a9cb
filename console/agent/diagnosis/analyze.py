"""The analysis: gathered facts in, ``{verdict, findings, steps}`` out (pure: no I/O).

One function per step, in the order a person hunts: benchmark processes, the entrypoint's tree, recent
files, the logs (their progress read from content), the signatures (events of every log and the kernel
log, in time), the GPUs, then the verdict (``rank``).
"""

from __future__ import annotations

import re
import time
from typing import Any, Collection, Dict, List, Optional, Tuple

from ..wire.config import DEFAULTS
from ..wire.protocol import DiagnosisResult, Evidence, Verdict
from ..wire.timefmt import fmt_age
from ..wire.wording import code_words, plural
from . import codes, rank, signatures
from .completion import closing_table, last_words, words_start
from .events import PERSISTENT, SEVERITY_LEVEL, Episode, kernel_episodes, log_episodes
from .liveness import (
    CPU_MOVING,
    Liveness,
    assess,
    building,
    building_line,
    loading,
    loading_words,
    long_step_words,
    queued_words,
    startup_words,
)
from .mig import mig_layout
from .motion import DOWNLOADING_RE, slowdown, stalls, warnings_while_working
from .named_cause import causes_named_by_the_failure
from .nvmlhealth import health_step
from .processes import Processes, benchmark_processes, entrypoint_tree, wrappers_left_waiting
from .progress import LogProgress, compile_progress, log_progress
from .quiet_ending import keep_the_doubt, quiet_ending
from .records import Item, Step, step
from .refine import refine
from .text import CONTEXT_RE, FAILED_RE, clean_message, context, ev, fmt_size, hit_ev, short
from .timeline import Timeline

MAX_EVIDENCE = 6
IDLE_GPU_UTIL = 2  # percent
CAUSE_RE = re.compile(r"^\s*\d+:\s+(.{3,80}?)\s*$")  # the last line of an anyhow "Caused by:" chain
ABORT_RE = re.compile(r"\b(?:failed|aborting|aborted|fatal|giving up)\b", re.IGNORECASE)
DOWNLOAD_DONE_RE = re.compile(
    r"download(?:ed)?\s+(?:complete|completed|finished|ok|done|succeeded)|\bdownloaded\b|\bsaved\b"
    r"|\bdownload(?:ing)? .*\bdone\b",
    re.IGNORECASE,
)
SAVING_NOW_RE = re.compile(
    r"\bsaving\b.{0,200}(?:checkpoint|\.(?:pt|pth|bin|safetensors|ckpt|pkl|distcp)\b|model states|optim)",
    re.IGNORECASE)
# a failure the program says it tries again ("part 27 stalled; retrying", urllib3's "Retrying (Retry(total=4, ...))",
# "will retry in 5s", "retry 2/5"): in another log than the one that says done, before it, it is no ending
RETRYING_RE = re.compile(r"\bretrying\b|\bwill (?:be )?retr(?:y|ied)\b|\bretry(?:ing)? in \d|\bretry \d+\s*/\s*\d+",
                         re.IGNORECASE)
SAVED_RE = re.compile(r"\b(?:saved|done|finished|complete[d]?)\b", re.IGNORECASE)
__all__ = ["CONTEXT_RE", "analyze"]


# -- step 3: recent files ---------------------------------------------------------------------------
def recent_files(facts: Dict[str, Any], now: float, steps: List[Step]) -> None:
    files = sorted(facts.get("files") or [], key=lambda f: -(f.get("mtime") or 0.0))
    steps.append(step("recent_files", "info", "%s in watched dirs" % plural(len(files), "recent file"),
                      ["%8s ago %8s %s" % (fmt_age(now - (f.get("mtime") or now)), fmt_size(f.get("size")), f["path"])
                       for f in files[:30]]))


# -- step 4: logs and their progress ----------------------------------------------------------------
def read_progress(facts: Dict[str, Any], now: float, steps: List[Step]) -> Dict[str, LogProgress]:
    """Each log's last progress (content based), with the step's lines."""
    bench_re = compile_progress((facts.get("benchmark") or {}).get("progress"))
    out: Dict[str, LogProgress] = {}
    lines: List[str] = []
    for log in facts.get("logs") or []:
        if log.get("error"):
            lines.append("%s: %s" % (log["path"], log["error"]))
            continue
        text = log.get("lines") or []
        first = int(log.get("first_line") or 1)
        mtime = log.get("mtime")
        age = "" if mtime is None else " modified %s ago" % fmt_age(now - mtime)
        lines.append("%s: lines %d-%d%s" % (log["path"], first, first + len(text) - 1, age))
        last_text = next((t for t in reversed(text) if t.strip()), None)
        if last_text is not None:
            lines.append("  last: %s" % short(last_text, 120))
        prog = log_progress(log, now, bench_re, Timeline(log, now).at)
        if prog is not None:
            out[log["path"]] = prog
            s = prog.sample
            lines.append("  %s progress: %s%s, unchanged for %s" % (
                s.kind, s.amount, "" if s.percent is None else " (%g%%)" % s.percent, fmt_age(prog.stuck_for)))
    steps.append(step("logs", "info", "%s read" % plural(len(facts.get("logs") or []), "log tail"), lines))
    return out


def liveness_step(facts: Dict[str, Any], procs: Processes, steps: List[Step]) -> Liveness:
    """The run's kind (batch or server) and what of it moves: CPU, I/O, ports, GPU work, a loaded model."""
    live = assess(facts, procs.bench, procs.bench_started)
    lines = ["kind: %s (%s)" % (live.kind, live.kind_reason)]
    if live.measured:
        lines.append("CPU %s, I/O %s over %.1f s" % (
            "?" if live.cpu is None else "%.2f cores" % live.cpu,
            "unknown (not readable)" if live.io_rate is None else "%s/s" % fmt_size(live.io_rate),
            float((facts.get("activity") or {}).get("seconds") or 0.0)))
    for pid, port in live.listening[:6]:
        lines.append("pid %d listens on port %d" % (pid, port))
    if live.gpus.line:
        lines.append("GPUs %s: %s" % (live.gpus.state, live.gpus.line))
    if live.model:
        lines.append("model loaded: %s" % live.model)
    if live.serving:
        lines.append("serving: %s" % live.serving)
    moving = live.moving()
    steps.append(step("liveness", "info", "%s; %s" % (
        live.kind, "moving: %s" % ", ".join(moving) if moving else "nothing moves besides the logs"), lines))
    return live


# -- step 5: signatures (events in time) ------------------------------------------------------------
def _follow_up(ep: Episode) -> List[Evidence]:
    """Lines after an episode that show its consequence ("warmup proof failed", the exception)."""
    log = ep.log
    lines, first = log["lines"], int(log.get("first_line") or 1)
    end = ep.last_index
    out: List[Evidence] = []
    if ep.code == "python_traceback":
        for i in range(end + 1, min(len(lines), end + 200)):
            if lines[i] and not lines[i][0].isspace():
                out.append(ev(log["path"], first + i, lines[i]))
                break
        return out
    for i in range(end + 1, min(len(lines), end + 6)):
        if signatures.match_line(lines[i]) is None and ABORT_RE.search(lines[i]):
            out.append(ev(log["path"], first + i, lines[i]))
            break
    return out


def _download_resolution(ep: Episode) -> List[Evidence]:
    """For missing_input: evidence that the input was downloaded afterwards (else [])."""
    log = ep.log
    lines, first = log["lines"], int(log.get("first_line") or 1)
    start = ep.last_index
    evidence: List[Evidence] = []
    for i in range(start + 1, min(len(lines), start + 50)):
        text = lines[i]
        sig = signatures.match_line(text)
        if sig is not None and sig.code in ("missing_input", "disk_full"):  # a failed try may be retried
            return []
        if DOWNLOADING_RE.search(text) and not evidence:
            evidence.append(ev(log["path"], first + i, text))
        pct = signatures.progress_percent(text)
        if (pct is not None and pct >= 100.0) or DOWNLOAD_DONE_RE.search(text):
            evidence.append(ev(log["path"], first + i, text))
            return evidence
    return []


def _summary(ep: Episode) -> str:
    code = ep.code
    log = ep.log
    first_hit = ep.first
    text = first_hit["text"]
    label = codes.label(code)
    if code == "host_oom_kill":
        m = re.search(r"Killed process (\d+) \(([^)]+)\)", " ".join(h["text"] for h in ep.hits))
        if m:
            return "the kernel OOM killer killed %s (pid %s): the host ran out of memory" % (m.group(2), m.group(1))
    if code in ("gpu_lost", "gpu_xid", "gpu_ecc"):
        m = re.search(r"Xid \(([^)]*)\):\s*(\d+)", text)
        if m:
            detail = "fell off the bus" if m.group(2) == "79" else "reported Xid %s" % m.group(2)
            return "%s: the GPU at %s %s" % (label, m.group(1), detail)
    where_ctx = None if ep.kernel else context(log["lines"], int(first_hit["line"]) - int(log.get("first_line") or 1))
    if where_ctx is None:
        for e in ep.follow:
            m = FAILED_RE.match(e["text"])
            if m:
                where_ctx = m.group(1).strip()
                break
    where = " during the %s" % where_ctx if where_ctx else ""
    if code == "python_traceback" and ep.follow:
        return "%s%s: %s" % (label, where, short(ep.follow[0]["text"], 140))
    message = clean_message(text)
    cause = next((m.group(1) for m in map(CAUSE_RE.match, (h["text"] for h in reversed(ep.hits))) if m), None)
    if cause and cause.lower() not in message.lower():
        message = "%s — caused by %s" % (short(message, 110), cause)
    return "%s%s: %s" % (label, where, short(message, 160))


def signature_findings(facts: Dict[str, Any], procs: Processes, progress: Dict[str, LogProgress], now: float,
                       items: List[Item], steps: List[Step]) -> None:
    """One finding per code over every log and the kernel log; the earliest current episode is its primary."""
    bench_re = compile_progress((facts.get("benchmark") or {}).get("progress"))
    run_started = procs.bench_started or procs.entry_started
    episodes = log_episodes(facts, now, procs.bench_started, bench_re) + kernel_episodes(facts, now, run_started)
    # progress made after an error, while the benchmark runs, says the error did not stop it
    if procs.bench and progress:
        moved = max(now - p.stuck_for for p in progress.values())
        for ep in episodes:
            mtime = ep.log.get("mtime")
            if not ep.kernel and mtime is not None and float(mtime) < moved - 1.0 and ep.code not in PERSISTENT:
                ep.recovered = True
    by_code: Dict[str, List[Episode]] = {}
    for ep in episodes:
        ep.follow = _follow_up(ep)
        by_code.setdefault(ep.code, []).append(ep)
    sig_lines: List[str] = []
    before = len(items)
    for code, eps in by_code.items():
        last = eps[-1].first
        sig_lines.append("%s: %s, e.g. %s:%d" % (code, plural(len(eps), "occurrence"), last["path"], last["line"]))
        if code == "missing_input":
            unresolved = []
            for ep in eps:
                resolution = _download_resolution(ep)
                if resolution:
                    hit = ep.first
                    items.append(Item("missing_input", "info",
                                      "input was missing and then downloaded: %s" % short(hit["text"], 140),
                                      [hit_ev(hit), *resolution], time=ep.time,
                                      order=ep.order, role="history"))
                else:
                    unresolved.append(ep)
            eps = unresolved
            if not eps:
                continue
        current = [ep for ep in eps if not ep.stale and not ep.recovered]
        primary = min(current or eps, key=lambda e: (e.time, e.order))
        evidence = [hit_ev(h) for h in primary.hits[: MAX_EVIDENCE - 1]]
        evidence.extend(primary.follow)
        for other in eps:  # the other episodes: their first and last lines
            if other is primary:
                continue
            for h in (other.hits[0], other.hits[-1]) if len(other.hits) > 1 else (other.hits[0],):
                if len(evidence) < MAX_EVIDENCE + 4:
                    evidence.append(hit_ev(h))
        summary = _summary(primary)
        if len(eps) > 1:
            summary += " (%d occurrences)" % len(eps)
        severity, role = primary.severity, "current"
        predates = not current and all(e.stale for e in eps)
        if not current:
            severity, role = "info", "history"
            summary = ("before the current run: " if predates else "recovered: ") + summary
        item = Item(code, severity, summary, evidence, time=primary.time, order=primary.order, role=role)
        if predates:
            item.prior = primary.severity
        items.append(item)
    dmesg = facts.get("dmesg") or {}
    if dmesg.get("error"):
        sig_lines.append("dmesg: %s" % dmesg["error"])
    sig_lines.extend(signatures.custom_notes())  # the fleet's own patterns ran out of time
    found = len(items) - before
    steps.append(step("signatures", "problem" if sig_lines and found else "ok",
                      plural(found, "signature finding"), sig_lines))


# -- step 6: GPUs ------------------------------------------------------------------------------------
def gpu_state(facts: Dict[str, Any], procs: Processes, live: Liveness, items: List[Item], steps: List[Step],
              notes: List[str]) -> None:
    """``gpu_lost`` (a device does not answer) and ``gpu_idle``: every GPU idle while the benchmark is expected
    to use them and nothing explains it (not a server waiting with its model loaded, not a run busy with I/O or
    the CPU: a checkpoint save, a download, data preparation)."""
    gpu = facts.get("gpu")
    supposed_to_run = bool(procs.bench) or bool(procs.entry)
    if not gpu:
        steps.append(step("gpu", "skipped", "no GPU sample"))
        return
    if gpu.get("state") != "ok":
        found = driver_state(gpu, items)
        steps.append(step("gpu", "problem" if found else "info", "GPU state: %s%s" % (
            code_words(gpu.get("state")), ": %s" % gpu["message"] if gpu.get("message") else "")))
        return
    devices = gpu.get("devices") or []
    lines = ["gpu%s util=%s%% mem=%s%s%s" % (
        d.get("index"), d.get("util"), fmt_size(d.get("mem_used")),
        "" if d.get("power") is None else " power=%.0fW%s" % (
            float(d["power"]), "" if d.get("power_limit") is None else "/%.0fW" % float(d["power_limit"])),
        " LOST" if d.get("lost") else "") for d in devices]
    lost = [d for d in devices if d.get("lost")]
    for d in lost:
        items.append(Item("gpu_lost", "critical",
                          "GPU lost: gpu%s does not answer (%s)" % (d.get("index"), d.get("error") or "lost"),
                          [ev("gpu:%s" % d.get("index"), None, d.get("error") or "lost")]))
    utils = [d.get("util") for d in devices if not d.get("lost") and d.get("util") is not None]
    idle = supposed_to_run and utils and all(u <= IDLE_GPU_UTIL for u in utils)
    if idle and procs.bench and live.idle_server():
        notes.append("a server waiting for requests: model loaded (%s), %s" % (live.model, live.serving))
        steps.append(step("gpu", "ok", "GPUs idle: a server waiting for requests", lines))
    elif idle and procs.bench and live.moving():
        if not notes:  # the stall step already said what moves
            notes.append("GPUs idle while the run is busy: %s" % ", ".join(live.moving()))
        steps.append(step("gpu", "ok", "GPUs idle, the run busy elsewhere", lines))
    elif idle and procs.bench and save_underway(facts, now_of(facts)):
        notes.append("GPUs idle while a checkpoint is being written: %s" % save_underway(facts, now_of(facts)))
        steps.append(step("gpu", "ok", "GPUs idle, a checkpoint save under way", lines))
    elif idle and revive_predating(items):
        steps.append(step("gpu", "problem", "GPUs idle after an error the run printed and did not get past", lines))
    elif idle:
        why = ""
        if procs.bench and live.kind == "server":
            why = "; the server %s" % ("has no model on a GPU" if live.model is None else "does not answer yet")
        items.append(Item("gpu_idle", "warning",
                          "%s idle (util <= %d%%) while the benchmark should be running%s"
                          % (("all " if len(utils) > 1 else "") + plural(len(utils), "GPU"), IDLE_GPU_UTIL, why),
                          [ev("gpu:%s" % d.get("index"), None, line) for d, line in zip(devices, lines)]))
        steps.append(step("gpu", "problem", "GPUs idle", lines))
    else:
        steps.append(step("gpu", "ok" if not lost else "problem", plural(len(devices), "GPU"), lines))


def driver_state(gpu: Dict[str, Any], items: List[Item]) -> Optional[str]:
    """NVML (or nvidia-smi) could not start, and its own error names the driver's state (``Driver Not Loaded``, an
    NVML/RM version mismatch): a fact of the host now, whatever the age of the log lines that say the same. A log
    finding of that code that predates the run is current again, with the GPU's words as evidence; else the GPU's
    words are the finding. The code, or None (no GPU library at all is a host without GPUs, not a fault)."""
    message = str(gpu.get("message") or "")
    sig = signatures.match_line(message) if message else None
    if sig is None or sig.code not in ("no_gpu_driver", "driver_mismatch"):
        return None
    evidence = ev("gpu", None, "NVML: %s" % message)
    for item in items:
        if item.code == sig.code:
            if item.role == "history" and item.prior is not None:
                item.role, item.severity = "current", item.prior
                item.summary = item.summary.replace("before the current run: ", "", 1)
            if item.role == "current":
                item.evidence.append(evidence)
                return sig.code
    items.append(Item(sig.code, sig.severity, "%s: the GPU library says %s" % (codes.label(sig.code), message),
                      [evidence]))
    return sig.code


FALLBACK_RE = re.compile(r"\bfall(?:s|ing)? ?back to (?:the )?(?:cpu\b|\[?'?CPUExecutionProvider)"
                         r"|Skipping registering GPU devices", re.IGNORECASE)
GPU_BACKEND_RE = re.compile(r"cuda|\bgpus?\b|cudnn|cublas|cusolver|cufft|cusparse|nvidia|\bnccl", re.IGNORECASE)


def cpu_fallback(facts: Dict[str, Any], procs: Processes, items: List[Item]) -> None:
    """A framework that could not start its GPU backend said why at INFO level and went on on the CPU (JAX's
    ``Unable to initialize backend 'cuda': Found cuSOLVER version ...`` then ``Falling back to cpu``;
    TensorFlow's ``Skipping registering GPU devices``), its GPUs idle while it runs: the reason it gave is the
    run's fault, whatever its log level."""
    devices = (facts.get("gpu") or {}).get("devices") or []
    if not procs.bench or not devices or any(float(d.get("util") or 0.0) > IDLE_GPU_UTIL for d in devices):
        return
    for log in facts.get("logs") or []:
        lines: List[str] = log.get("lines") or []
        at = next((i for i in range(len(lines) - 1, -1, -1) if FALLBACK_RE.search(lines[i][:400])), None)
        if log.get("error") or at is None:
            continue
        if not any(_info_cause(item) for item in items):
            _fallback_reason(log, at, items)  # the reason was a line the table calls harmless (TF's dlopen probes)
        for item in items:
            if not _info_cause(item):
                continue
            said = next((e for e in item.evidence if e.get("path") == log["path"]
                         and GPU_BACKEND_RE.search(str(e.get("text") or ""))), None)
            if said is None:
                continue
            sig = signatures.match_line(str(said.get("text") or ""))
            item.severity = sig.severity if sig is not None and sig.code == item.code else "error"
            item.summary += "; the run fell back to the CPU"
            item.evidence.append(ev(log["path"], int(log.get("first_line") or 1) + at, lines[at]))


def _info_cause(item: Item) -> bool:
    """A current cause the log gave at INFO level (what ``cpu_fallback`` raises when the run went on on the CPU)."""
    return item.role == "current" and item.severity == "info" and codes.tier(item.code) == "cause"


def _fallback_reason(log: Dict[str, Any], at: int, items: List[Item]) -> None:
    """The GPU library's failure the run fell back for, when its line is one the table calls harmless on its own
    (TensorFlow's ``Could not load dynamic library 'libcudnn.so.8'; dlerror``: a probe, unless the run then skips
    the GPU): the last such line before the fallback, as an info finding for ``cpu_fallback`` to raise."""
    lines: List[str] = log.get("lines") or []
    for i in range(at - 1, max(-1, at - 30), -1):
        sig = signatures.match_line(lines[i][:1000]) if GPU_BACKEND_RE.search(lines[i][:400]) else None
        if sig is not None and codes.tier(sig.code) == "cause" and signatures.is_harmless(lines[i]):
            first = int(log.get("first_line") or 1)
            items.append(Item(sig.code, "info", "%s: %s" % (codes.label(sig.code), short(clean_message(lines[i]), 120)),
                              [ev(log["path"], first + i, lines[i])]))
            return


def now_of(facts: Dict[str, Any]) -> float:
    return float(facts.get("now") or time.time())


def save_underway(facts: Dict[str, Any], now: float) -> Optional[str]:
    """The last line of a fresh log (written within stall_seconds) says a checkpoint or a state file is being
    saved and nothing says it ended (DeepSpeed's ``Saving .../zero_pp_rank_0_..._optim_states.pt...``): idle
    GPUs are the save's, not trouble."""
    stall = float(facts.get("stall_seconds") or DEFAULTS["stall_seconds"])
    for log in facts.get("logs") or []:
        if log.get("error") or log.get("mtime") is None or now - float(log["mtime"]) > stall:
            continue
        text = next((t for t in reversed(log.get("lines") or []) if t.strip()), "")
        if SAVING_NOW_RE.search(text) and not SAVED_RE.search(text):
            return short(clean_message(text), 100)
    return None


def revive_predating(items: List[Item]) -> bool:
    """Idle GPUs, nothing moving, and a log whose errors all predate the live processes: the run did not get
    past them (a server that failed to load its engine, a prover whose kernel faulted, then left idle), so those
    errors are current again and explain the idle GPUs. True when one of error severity was revived."""
    revived = False
    for item in items:
        if item.prior is None or item.role != "history":
            continue
        item.role, item.severity = "current", item.prior
        item.summary = item.summary.replace("before the current run: ", "", 1)
        revived = revived or SEVERITY_LEVEL.get(item.prior, 0) >= 2
    return revived


def still_loading(facts: Dict[str, Any], progress: Dict[str, LogProgress], procs: Processes, live: Liveness,
                  steps: List[Step]) -> Processes:
    """A run still loading what it needs (its latest progress a load or download meter that moves) is starting,
    however old its processes: the verdict's start-up rule then applies (``rank.choose``)."""
    if not procs.bench or procs.young_entry is not None:
        return procs
    stall = float(facts.get("stall_seconds") or DEFAULTS["stall_seconds"])
    logs = {log["path"]: log for log in facts.get("logs") or [] if not log.get("error")}
    found = long_step_words(logs, now_of(facts)) if not progress and live.moving() else None
    if found is None and live.idle_server():
        return procs
    found = found or loading(progress, logs, stall)
    if found is None and not progress and live.cpu is not None and live.cpu >= CPU_MOVING:
        found = loading_words(logs, now_of(facts), stall)  # no meter: its last words say it builds, CPU busy
        young = procs.bench_started is not None and now_of(facts) - procs.bench_started <= stall
        if found is None and young:  # a young program's last words announce its start-up
            found = startup_words(logs, now_of(facts), stall)
    if found is None and not any(p.sample.kind == "steps" and p.stuck_for <= stall for p in progress.values()):
        found = queued_words(logs)  # a job waiting in a scheduler's queue
    if found is not None:
        line, path, at = found
        steps.append(step("loading", "info", "still loading: %s" % line))
        return procs._replace(young_entry="starting: still loading: %s" % line, starting_evidence=(
            _log_ev(logs[path], at),))
    tools = building(facts, procs.bench) if not any(p.sample.kind == "steps" and p.stuck_for <= stall
                                                    for p in progress.values()) else None
    if tools is None:
        return procs
    steps.append(step("loading", "info", "still building: %s" % tools))
    where = building_line(logs)
    return procs._replace(young_entry="starting: still building what it needs (%s)" % tools,
                          starting_evidence=(_log_ev(logs[where[0]], where[1]),) if where else ())


def _log_ev(log: Dict[str, Any], at: int) -> Any:
    return ev(log["path"], int(log.get("first_line") or 1) + at, log["lines"][at])


# -- step 7: finished? then the verdict ----------------------------------------------------------------
def completion(facts: Dict[str, Any], procs: Processes, items: List[Item], now: float) -> Optional[Item]:
    """A run that completed: a completion line is the last word of its log, nothing of the benchmark is
    alive (or only its shell script, left waiting on idle helpers), and no current failure came after it. Failures
    before it become history."""
    if procs.bench and not wrappers_left_waiting(facts, procs):
        return None
    bench_re = compile_progress((facts.get("benchmark") or {}).get("progress"))
    found: List[Tuple[float, Dict[str, Any], int]] = []
    for log in facts.get("logs") or []:
        if log.get("error"):
            continue
        timeline = Timeline(log, now)
        found.extend((timeline.at(i), log, i) for i in last_words(log, bench_re))
    if not found:
        return None
    done_at = max(t for t, _, _ in found)
    named = {str(log["path"]) for log in facts.get("logs") or [] if log.get("configured")}
    named_done = max((t for t, log, _ in found if log["path"] in named), default=None)
    # where the last words of the logs that say "done" begin: a failure reported there is how the run ended
    # (after a results table's first row when one ends the log: the program measured and printed after what went before)
    ending = {str(log["path"]): int(log.get("first_line") or 1) + max(words_start(log["lines"]),
                                                                     closing_table(log["lines"]) or 0)
              for _, log, _ in found}
    others = set()
    for log in facts.get("logs") or []:  # a task's own log that ends in its failure, under a pipeline's "success"
        if not log.get("error") and str(log["path"]) not in ending:
            ending[str(log["path"])] = int(log.get("first_line") or 1) + words_start(log.get("lines") or [])
            others.add(str(log["path"]))
    for item in items:
        if item.role != "current" or SEVERITY_LEVEL.get(item.severity, 0) < 2:
            continue
        if codes.tier(item.code) == "symptom" or item.code in rank.STARTUP_SYMPTOMS:
            continue
        if item.time is None or item.time > done_at + 1.0 or rank.named_failure_stands(item, named, named_done):
            return None
        if any(e.get("path") in ending and int(e.get("line") or 0) >= ending[str(e.get("path"))]
               and not (e.get("path") in others and RETRYING_RE.search(str(e.get("text") or "")))
               for e in item.evidence):
            return None
    for item in items:
        if item.role == "current" and item.time is not None and item.time <= done_at + 1.0 and \
                item.code not in rank.STARTUP_SYMPTOMS and codes.tier(item.code) != "hardware":
            item.role, item.severity = "history", "info"
            item.summary = "before the run finished: " + item.summary
    found.sort(key=lambda f: (f[0], f[2]))
    evidence = [ev(log["path"], int(log.get("first_line") or 1) + i, log["lines"][i]) for _, log, i in found[-6:]]
    words = [clean_message(log["lines"][i]) for _, log, i in found]
    text = next((w for w in reversed(words) if w[:1].isalnum()), "")
    if not text:
        text = "a results table: %s" % " ".join(words[-1].split())
    return Item("finished", "info", "finished: %s" % short(text, 140), evidence, time=done_at)


def _brief(code: str, head: Item, now: float) -> str:
    if code in ("healthy", "starting"):
        return ""
    if code == "download_stalled":
        m = re.match(r"download stalled at (\S+(?: \([^)]*\))?)", head.summary)
        at = m.group(1).replace("%", " %") if m else "?"
        return "download stalled at %s for %s" % (at, fmt_age(now - (head.time or now)))
    if code == "hung":
        return "hung: no progress for %s" % fmt_age(now - (head.time or now))
    return short(head.summary, 100)


def verdict(items: List[Item], procs: Processes, finished: Optional[Item], now: float,
            steps: List[Step], notes: Optional[List[str]] = None, named: Collection[str] = ()) -> Verdict:
    code, head = rank.choose(items, procs.young_entry, finished, list(procs.starting_evidence), named)
    if code == "healthy":
        what = "%s running" % plural(len(procs.bench), "benchmark process") if procs.bench else "nothing wrong found"
        head.summary = "healthy: %s" % "; ".join([what, *list(notes or [])[:2]])
    out: Verdict = {"code": code, "severity": head.severity if code not in rank.FINE else "info",  # type: ignore
                    "summary": head.summary, "label": codes.label(code), "explanation": codes.explanation(code)}
    brief = _brief(code, head, now)
    if brief:
        out["brief"] = brief
    if code not in rank.FINE:
        followed = rank.link_symptoms(items, head)
        if followed:
            out["followed_by"] = followed
    steps.append(step("verdict", "ok" if code in rank.FINE else "problem", out["summary"]))
    return out


def analyze(facts: Dict[str, Any]) -> DiagnosisResult:
    """The verdict from gathered facts (no I/O; ``facts`` as built by ``gather``)."""
    now = float(facts.get("now") or time.time())
    items: List[Item] = []
    steps: List[Step] = []
    procs = benchmark_processes(facts, items, steps)
    entrypoint_tree(facts, procs, items, steps)
    recent_files(facts, now, steps)
    progress = read_progress(facts, now, steps)
    signature_findings(facts, procs, progress, now, items, steps)
    live = liveness_step(facts, procs, steps)
    notes: List[str] = []
    stalls(facts, progress, procs, live, now, items, notes)
    slowdown(facts, progress, procs, now, items)
    warnings_while_working(facts, progress, procs, live, items)
    causes_named_by_the_failure(facts, items)
    cpu_fallback(facts, procs, items)
    mig_layout(facts, items)
    gpu_state(facts, procs, live, items, steps, notes)
    health_step(facts, items, steps)  # NVML's ECC counters and Xid events: hardware evidence (nvmlhealth.py)
    procs = still_loading(facts, progress, procs, live, steps)
    finished = completion(facts, procs, items, now)
    quiet = quiet_ending(facts, procs, items) if finished is None else None  # no closing word known: gone quiet?
    finished = finished or quiet
    named = {str(log["path"]) for log in facts.get("logs") or [] if log.get("configured")}
    result_verdict = verdict(items, procs, finished, now, steps, notes, named)
    if quiet is not None and result_verdict["code"] == "finished":
        keep_the_doubt(items)
    cause = refine(facts, result_verdict["code"], now)  # a wrapper's verdict: the class its failure lines name
    if cause is not None:
        items.append(cause)
        steps.pop()  # the verdict's step, said again
        result_verdict = verdict(items, procs, finished, now, steps, notes, named)
    findings = [i for i in items]
    findings.sort(key=lambda i: (-SEVERITY_LEVEL.get(i.severity, 0), -codes.rank(i.code)))
    if finished is not None and result_verdict["code"] == "finished":
        findings.insert(0, finished)
    if result_verdict["code"] == "starting" and procs.starting_evidence:  # what it is doing: a meter, a build
        findings.insert(0, Item("starting", "info", result_verdict["summary"], list(procs.starting_evidence)))
    return {"verdict": result_verdict, "findings": [i.finding() for i in findings], "steps": steps, "time": now}
