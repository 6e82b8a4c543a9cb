"""The analysis: gathered facts in, ``{verdict, findings, steps}`` out (pure: no I/O).

One function per step, in the order a person hunts: benchmark processes, the entrypoint's tree, recent
files, the logs (their progress read from content), the signatures (events of every log and the kernel
log, in time), the GPUs, then the verdict (``rank``).
"""

from __future__ import annotations

import re
import time
from typing import Any, Dict, List, Optional, Tuple

from ..wire.config import DEFAULTS
from ..wire.protocol import DiagnosisResult, Evidence, Verdict
from ..wire.timefmt import fmt_age
from . import codes, rank, signatures
from .events import LOG_SLACK, SEVERITY_LEVEL, Episode, capped, kernel_episodes, level_cap, log_episodes
from .processes import Processes, benchmark_processes, entrypoint_tree
from .progress import LogProgress, compile_progress, log_progress
from .records import Item, Step, step
from .text import CONTEXT_RE, FAILED_RE, clean_message, context, ev, fmt_size, short

MAX_EVIDENCE = 6
IDLE_GPU_UTIL = 2  # percent
CAUSE_RE = re.compile(r"^\s*\d+:\s+(.{3,80}?)\s*$")  # the last line of an anyhow "Caused by:" chain
ABORT_RE = re.compile(r"\b(?:failed|aborting|aborted|fatal|giving up)\b", re.IGNORECASE)
DOWNLOAD_DONE_RE = re.compile(
    r"download(?:ed)?\s+(?:complete|completed|finished|ok|done|succeeded)|\bdownloaded\b|\bsaved\b"
    r"|\bdownload(?:ing)? .*\bdone\b",
    re.IGNORECASE,
)
DOWNLOADING_RE = re.compile(r"\bdownloading\b|\bfetching\b|\bcurl\b|\bwget\b|--\d{4}-\d\d-\d\d ", re.IGNORECASE)
__all__ = ["CONTEXT_RE", "analyze"]


# -- step 3: recent files ---------------------------------------------------------------------------
def recent_files(facts: Dict[str, Any], now: float, steps: List[Step]) -> None:
    files = sorted(facts.get("files") or [], key=lambda f: -(f.get("mtime") or 0.0))
    steps.append(step("recent_files", "info", "%d recent file(s) in watched dirs" % len(files),
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
        prog = log_progress(log, now, bench_re)
        if prog is not None:
            out[log["path"]] = prog
            s = prog.sample
            lines.append("  %s progress: %s%s, unchanged for %s" % (
                s.kind, s.amount, "" if s.percent is None else " (%g%%)" % s.percent, fmt_age(prog.stuck_for)))
    steps.append(step("logs", "info", "%d log tail(s) read" % len(facts.get("logs") or []), lines))
    return out


def _stall_item(log: Dict[str, Any], prog: LogProgress, now: float) -> Item:
    lines, first = log["lines"], int(log.get("first_line") or 1)
    idx = prog.at
    evidence: List[Evidence] = []
    for i in range(idx - 1, max(-1, idx - 20), -1):
        if DOWNLOADING_RE.search(lines[i]):
            evidence.append(ev(log["path"], first + i, lines[i]))
            break
    evidence.append(ev(log["path"], first + idx, lines[idx]))
    where = context(lines, idx)
    s = prog.sample
    at = s.amount if s.percent is None else "%g%%" % s.percent
    if s.percent is not None and re.search(r"[A-Za-z]", s.amount):
        at += " (%s)" % s.amount
    summary = "download stalled at %s%s: %s has not moved for %s" % (
        at, " during the %s" % where if where else "", log["path"], fmt_age(prog.stuck_for))
    return Item("download_stalled", "error", summary, evidence, time=now - prog.stuck_for, order=first + idx)


def stalls(facts: Dict[str, Any], progress: Dict[str, LogProgress], procs: Processes, now: float,
           items: List[Item]) -> None:
    """``download_stalled`` (a download's bytes stopped) and ``hung`` (alive, the benchmark's progress stopped)."""
    stall = float(facts.get("stall_seconds") or DEFAULTS["stall_seconds"])
    logs = {log["path"]: log for log in facts.get("logs") or [] if not log.get("error")}
    for path, prog in progress.items():
        if prog.sample.kind == "download" and prog.last_line and not prog.sample.done and prog.stuck_for > stall:
            items.append(_stall_item(logs[path], prog, now))
    if not procs.bench:
        return
    started = procs.bench_started or 0.0
    own = [(p, prog) for p, prog in progress.items() if prog.sample.kind == "steps"
           and float(logs[p].get("mtime") or 0.0) >= started - LOG_SLACK]
    if not own:
        return
    path, prog = min(own, key=lambda pp: pp[1].stuck_for)
    if prog.stuck_for <= stall:
        return
    log = logs[path]
    first = int(log.get("first_line") or 1)
    line = log["lines"][prog.at]
    utils = [d.get("util") for d in ((facts.get("gpu") or {}).get("devices") or []) if d.get("util") is not None]
    gpus = "; GPUs at %s%%" % "/".join(str(u) for u in utils) if utils else ""
    summary = "hung: no progress for %s while %d benchmark process(es) are alive (last: %s)%s" % (
        fmt_age(prog.stuck_for), len(procs.bench), short(clean_message(line), 80), gpus)
    items.append(Item("hung", "error", summary, [ev(path, first + prog.at, line)],
                      time=now - prog.stuck_for, order=first + prog.at))


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
            if not ep.kernel and mtime is not None and float(mtime) < moved - 1.0 and ep.code not in (
                    "gpu_lost", "gpu_ecc", "no_gpu_driver", "driver_mismatch"):
                ep.recovered = True
    by_code: Dict[str, List[Episode]] = {}
    for ep in episodes:
        ep.follow = _follow_up(ep)
        by_code.setdefault(ep.code, []).append(ep)
    sig_lines: List[str] = []
    before = len(items)
    for code, eps in by_code.items():
        last = eps[-1].first
        sig_lines.append("%s: %d occurrence(s), e.g. %s:%d" % (code, len(eps), last["path"], last["line"]))
        if code == "missing_input":
            unresolved = []
            for ep in eps:
                resolution = _download_resolution(ep)
                if resolution:
                    hit = ep.first
                    items.append(Item("missing_input", "info",
                                      "input was missing and then downloaded: %s" % short(hit["text"], 140),
                                      [ev(hit["path"], hit["line"], hit["text"]), *resolution], time=ep.time,
                                      order=ep.order, role="history"))
                else:
                    unresolved.append(ep)
            eps = unresolved
            if not eps:
                continue
        current = [ep for ep in eps if not ep.stale and not ep.recovered]
        primary = min(current or eps, key=lambda e: (e.time, e.order))
        evidence = [ev(h["path"], h["line"], h["text"]) for h in primary.hits[: MAX_EVIDENCE - 1]]
        evidence.extend(primary.follow)
        for other in eps:  # the other episodes: their first and last lines
            if other is primary:
                continue
            for h in (other.hits[0], other.hits[-1]) if len(other.hits) > 1 else (other.hits[0],):
                if len(evidence) < MAX_EVIDENCE + 4:
                    evidence.append(ev(h["path"], h["line"], h["text"]))
        summary = _summary(primary)
        if len(eps) > 1:
            summary += " (%d occurrences)" % len(eps)
        severity, role = primary.severity, "current"
        if not current:
            severity, role = "info", "history"
            summary = ("before the current run: " if all(e.stale for e in eps) else "recovered: ") + summary
        items.append(Item(code, severity, summary, evidence, time=primary.time, order=primary.order, role=role))
    dmesg = facts.get("dmesg") or {}
    if dmesg.get("error"):
        sig_lines.append("dmesg: %s" % dmesg["error"])
    found = len(items) - before
    steps.append(step("signatures", "problem" if sig_lines and found else "ok",
                      "%d signature finding(s)" % found, sig_lines))


# -- step 6: GPUs ------------------------------------------------------------------------------------
def gpu_state(facts: Dict[str, Any], procs: Processes, items: List[Item], steps: List[Step]) -> None:
    gpu = facts.get("gpu")
    supposed_to_run = bool(procs.bench) or bool(procs.entry)
    if not gpu:
        steps.append(step("gpu", "skipped", "no GPU sample"))
        return
    if gpu.get("state") != "ok":
        steps.append(step("gpu", "info", "GPU state %s%s" % (gpu.get("state"),
                                                            ": %s" % gpu["message"] if gpu.get("message") else "")))
        return
    devices = gpu.get("devices") or []
    lines = ["gpu%s util=%s%% mem=%s%s" % (d.get("index"), d.get("util"), fmt_size(d.get("mem_used")),
                                           " LOST" if d.get("lost") else "") for d in devices]
    lost = [d for d in devices if d.get("lost")]
    for d in lost:
        items.append(Item("gpu_lost", "critical",
                          "GPU lost: gpu%s does not answer (%s)" % (d.get("index"), d.get("error") or "lost"),
                          [ev("gpu:%s" % d.get("index"), None, d.get("error") or "lost")]))
    utils = [d.get("util") for d in devices if not d.get("lost") and d.get("util") is not None]
    if supposed_to_run and utils and all(u <= IDLE_GPU_UTIL for u in utils):
        items.append(Item("gpu_idle", "warning",
                          "all %d GPU(s) idle (util <= %d%%) while the benchmark should be running"
                          % (len(utils), IDLE_GPU_UTIL),
                          [ev("gpu:%s" % d.get("index"), None, line) for d, line in zip(devices, lines)]))
        steps.append(step("gpu", "problem", "GPUs idle", lines))
    else:
        steps.append(step("gpu", "ok" if not lost else "problem", "%d GPU(s)" % len(devices), lines))


# -- step 7: finished? then the verdict ----------------------------------------------------------------
def completion(facts: Dict[str, Any], procs: Processes, items: List[Item], now: float) -> Optional[Item]:
    """A run that completed: a completion line is the last word of its log, nothing of the benchmark is
    alive, and no current failure came after it. Failures before it become history."""
    if procs.bench:
        return None
    bench_re = compile_progress((facts.get("benchmark") or {}).get("progress"))
    from .progress import parse
    from .timeline import Timeline

    found: List[Tuple[float, Dict[str, Any], int]] = []
    for log in facts.get("logs") or []:
        lines = log.get("lines") or []
        timeline = Timeline(log, now)
        for i in range(len(lines) - 1, max(-1, len(lines) - 400), -1):
            text = lines[i]
            sig = signatures.match_line_fast(text, signatures.builtin_plan()) if text else None
            if sig is not None and SEVERITY_LEVEL[capped(sig.severity, level_cap(text))] >= 2 \
                    and not signatures.is_harmless(text):
                break  # a failure after this point: what came before is not how the run ended
            if signatures.is_completion(text):
                done = True
            else:
                sample = parse(text, bench_re) if text else None
                done = sample is not None and sample.kind == "steps" and sample.done and "/" in text \
                    and "%|" not in text
            if done:
                found.append((timeline.at(i), log, i))
    if not found:
        return None
    done_at = max(t for t, _, _ in found)
    for item in items:
        if item.role != "current" or SEVERITY_LEVEL.get(item.severity, 0) < 2:
            continue
        if codes.tier(item.code) == "symptom" or item.code in rank.STARTUP_SYMPTOMS:
            continue
        if item.time is None or item.time > done_at + 1.0:
            return None
    for item in items:
        if item.role == "current" and item.time is not None and item.time <= done_at + 1.0 and \
                item.code not in rank.STARTUP_SYMPTOMS:
            item.role, item.severity = "history", "info"
            item.summary = "before the run finished: " + item.summary
    found.sort(key=lambda f: (f[0], f[2]))
    evidence = [ev(log["path"], int(log.get("first_line") or 1) + i, log["lines"][i]) for _, log, i in found[-6:]]
    words = [clean_message(log["lines"][i]) for _, log, i in found]
    text = next((w for w in reversed(words) if w[:1].isalnum()), words[-1])
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
            steps: List[Step]) -> Verdict:
    code, head = rank.choose(items, procs.young_entry, finished)
    if code == "healthy":
        what = "%d benchmark process(es) running" % len(procs.bench) if procs.bench else "nothing wrong found"
        head.summary = "healthy: %s" % what
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
    stalls(facts, progress, procs, now, items)
    gpu_state(facts, procs, items, steps)
    finished = completion(facts, procs, items, now)
    result_verdict = verdict(items, procs, finished, now, steps)
    findings = [i for i in items]
    findings.sort(key=lambda i: (-SEVERITY_LEVEL.get(i.severity, 0), -codes.rank(i.code)))
    if finished is not None and result_verdict["code"] == "finished":
        findings.insert(0, finished)
    return {"verdict": result_verdict, "findings": [i.finding() for i in findings], "steps": steps, "time": now}
