"""Diagnosis: the seed's decision tree, automated.

``gather(config, ...)`` collects facts (process table, recent files, log tails, dmesg, a GPU sample);
``analyze(facts)`` is a pure function from those facts to
``{"verdict": {code, severity, summary}, "findings": [...], "steps": [...]}``
(see docs/architecture.md). ``diagnose(config, gpu_sampler=None)`` does both; the ``diagnose`` op
(``console.agent.ops``) calls it with the agent's config and GPU sampler.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from typing import Any, Dict, List, Optional, Pattern, Tuple, cast

from . import signatures
from .config import DEFAULTS, AgentConfig, as_list, compile_patterns, plain
from .protocol import DiagnosisResult
from .timefmt import fmt_age

# what a young entrypoint that is still fetching inputs looks like; not trouble until the grace is over
STARTUP_SYMPTOMS = frozenset(("benchmark_not_running", "waiting_on_child", "gpu_idle", "missing_input"))
TAIL_LINES = 2000
MAX_LOGS = 30
MAX_EVIDENCE = 6
IDLE_CPU = 1.0  # percent: a child below this, sleeping, is idle
IDLE_GPU_UTIL = 2  # percent
LOG_SUFFIXES = (".log", ".out", ".err")

SEVERITY_LEVEL = {"info": 0, "warning": 1, "error": 2, "critical": 3}

# Headline ranking: root causes above the symptoms they produce.
RANK: Dict[str, int] = {
    "gpu_lost": 100,
    "host_oom_kill": 95,
    "disk_full": 92,
    "cuda_oom": 90,
    "transport_error": 85,
    "segfault": 80,
    "panic": 78,
    "cuda_error": 75,
    "gpu_xid": 74,
    "download_failed": 70,
    "download_stalled": 68,
    "killed": 65,
    "address_in_use": 62,
    "command_not_found": 61,
    "python_traceback": 60,
    "missing_input": 50,
    "timeout": 45,
    "benchmark_not_running": 20,
    "waiting_on_child": 15,
    "gpu_idle": 10,
}

LABELS: Dict[str, str] = {
    "gpu_lost": "GPU lost",
    "gpu_xid": "GPU Xid error",
    "host_oom_kill": "host out of memory (kernel OOM kill)",
    "disk_full": "disk full",
    "cuda_oom": "CUDA out of memory",
    "transport_error": "transport error",
    "segfault": "segmentation fault",
    "panic": "panic",
    "cuda_error": "CUDA error",
    "download_failed": "download failed",
    "killed": "process killed (SIGKILL)",
    "address_in_use": "address already in use",
    "command_not_found": "command/module not found",
    "python_traceback": "Python exception",
    "missing_input": "missing input",
    "timeout": "timeout",
}

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
CAUSE_RE = re.compile(r"^\s*\d+:\s+(.{3,80}?)\s*$")  # the last line of an anyhow "Caused by:" chain
ABORT_RE = re.compile(r"\b(?:failed|aborting|aborted|fatal|giving up)\b", re.IGNORECASE)
DOWNLOAD_DONE_RE = re.compile(
    r"download(?:ed)?\s+(?:complete|completed|finished|ok|done|succeeded)|\bdownloaded\b|\bsaved\b"
    r"|\bdownload(?:ing)? .*\bdone\b",
    re.IGNORECASE,
)
DOWNLOADING_RE = re.compile(r"\bdownloading\b|\bfetching\b|\bcurl\b|\bwget\b", re.IGNORECASE)
DMESG_TS_RE = re.compile(r"^\s*\[\s*(\d+(?:\.\d+)?)\]")
OOM_VICTIM_RE = re.compile(r"Killed process (\d+) \(([^)]+)\)")
XID_RE = re.compile(r"Xid \(([^)]*)\):\s*(\d+)")


# -- helpers ------------------------------------------------------------------------------------
def _matches(rec: Dict[str, Any], pats: List[Pattern[str]]) -> bool:
    cmd = rec.get("cmdline") or rec.get("name") or ""
    return any(p.search(cmd) for p in pats)


def _short(text: str, n: int = 160) -> str:
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


def _ev(path: str, line: Optional[int], text: str) -> Dict[str, Any]:
    return {"path": path, "line": line, "text": _short(text, 300)}


def proc_line(rec: Dict[str, Any], depth: int = 0) -> str:
    """One process as a tree line: pid, state, wchan, cpu, rss, command line."""
    cpu = rec.get("cpu")
    return "%s%d %s %s cpu=%s rss=%s %s" % (
        "  " * depth,
        rec.get("pid", 0),
        rec.get("state") or "?",
        rec.get("wchan") or "-",
        "-" if cpu is None else "%.0f%%" % float(cpu),
        fmt_size(rec.get("rss")),
        _short(rec.get("cmdline") or rec.get("name") or "", 120),
    )


def children_map(processes: List[Dict[str, Any]]) -> Dict[int, List[Dict[str, Any]]]:
    kids: Dict[int, List[Dict[str, Any]]] = {}
    for rec in processes:
        kids.setdefault(int(rec.get("ppid") or 0), []).append(rec)
    for lst in kids.values():
        lst.sort(key=lambda r: r["pid"])
    return kids


def descendants(pid: int, kids: Dict[int, List[Dict[str, Any]]]) -> List[Tuple[int, Dict[str, Any]]]:
    """(depth, rec) for every descendant of ``pid``, depth-first."""
    out: List[Tuple[int, Dict[str, Any]]] = []
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


def _alive(rec: Dict[str, Any]) -> bool:
    return (rec.get("state") or "S") not in ("Z", "X", "x")


# -- log analysis -------------------------------------------------------------------------------
def _context(lines: List[str], index: int) -> Optional[str]:
    """What the program was doing at ``lines[index]``: the nearest preceding "Running X..." line."""
    for i in range(index, max(-1, index - 300), -1):
        m = CONTEXT_RE.match(lines[i])
        if m:
            return m.group(1).strip().rstrip(".…:").strip()
        if "warmup" in lines[i].lower() and i != index:
            return "warmup"
    return None


def _episodes(log: Dict[str, Any], hits: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Group hits of one code that sit within a few lines of each other into episodes."""
    episodes: List[Dict[str, Any]] = []
    for hit in hits:
        last = episodes[-1] if episodes else None
        if last is not None and last["code"] == hit["code"] and hit["line"] - last["hits"][-1]["line"] <= 4:
            last["hits"].append(hit)
        else:
            episodes.append({"code": hit["code"], "severity": hit["severity"], "log": log, "hits": [hit]})
    return episodes


def _follow_up(ep: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Lines after an episode that show its consequence ("warmup proof failed", the exception)."""
    log = ep["log"]
    lines, first = log["lines"], log["first_line"]
    end = ep["hits"][-1]["line"] - first
    out = []
    if ep["code"] == "python_traceback":
        for i in range(end + 1, min(len(lines), end + 200)):
            if lines[i] and not lines[i][0].isspace():
                out.append(_ev(log["path"], first + i, lines[i]))
                break
        return out
    for i in range(end + 1, min(len(lines), end + 6)):
        if signatures.match_line(lines[i]) is None and ABORT_RE.search(lines[i]):
            out.append(_ev(log["path"], first + i, lines[i]))
            break
    return out


def _download_resolution(ep: Dict[str, Any]) -> List[Dict[str, Any]]:
    """For missing_input: evidence that the input was downloaded afterwards (else [])."""
    log = ep["log"]
    lines, first = log["lines"], log["first_line"]
    start = ep["hits"][-1]["line"] - first
    evidence: List[Dict[str, Any]] = []
    for i in range(start + 1, min(len(lines), start + 50)):
        text = lines[i]
        sig = signatures.match_line(text)
        if sig is not None and sig.code in ("download_failed", "missing_input", "disk_full"):
            return []
        if DOWNLOADING_RE.search(text) and not evidence:
            evidence.append(_ev(log["path"], first + i, text))
        pct = signatures.progress_percent(text)
        if (pct is not None and pct >= 100.0) or DOWNLOAD_DONE_RE.search(text):
            evidence.append(_ev(log["path"], first + i, text))
            return evidence
    return []


def _episode_summary(ep: Dict[str, Any]) -> str:
    code = ep["code"]
    log = ep["log"]
    first_hit = ep["hits"][0]
    text = first_hit["text"]
    label = LABELS.get(code, code.replace("_", " "))
    if code == "host_oom_kill":
        m = OOM_VICTIM_RE.search(" ".join(h["text"] for h in ep["hits"]))
        if m:
            return "the kernel OOM killer killed %s (pid %s): the host ran out of memory" % (m.group(2), m.group(1))
    if code in ("gpu_lost", "gpu_xid"):
        m = XID_RE.search(text)
        if m:
            detail = "fell off the bus" if m.group(2) == "79" else "reported Xid %s" % m.group(2)
            return "%s: the GPU at %s %s" % (label, m.group(1), detail)
    context = _context(log["lines"], first_hit["line"] - log["first_line"])
    if context is None:
        for ev in ep.get("follow", []):
            m = FAILED_RE.match(ev["text"])
            if m:
                context = m.group(1).strip()
                break
    where = " during the %s" % context if context else ""
    if code == "python_traceback" and ep.get("follow"):
        return "%s%s: %s" % (label, where, _short(ep["follow"][0]["text"], 140))
    message = _clean_message(text)
    cause = next((m.group(1) for m in map(CAUSE_RE.match, (h["text"] for h in reversed(ep["hits"]))) if m), None)
    if cause and cause.lower() not in message.lower():
        message = "%s — caused by %s" % (_short(message, 110), cause)
    return "%s%s: %s" % (label, where, _short(message, 160))


def _clean_message(text: str) -> str:
    """A log line without its timestamp, level, module path and gRPC metadata: the part a person reads."""
    text = LOG_PREFIX_RE.sub("", text.strip())
    text = GRPC_TAIL_RE.sub("", text)
    return text.strip() or text


def _log_findings(
    facts: Dict[str, Any], bench_started: Optional[float], run_started: Optional[float] = None
) -> Tuple[List[Dict[str, Any]], List[str], List[str]]:
    """Signature findings over every log tail and dmesg; also the log and signature step lines."""
    episodes: List[Dict[str, Any]] = []
    log_lines: List[str] = []
    stall_lines: List[Dict[str, Any]] = []
    now = float(facts.get("now") or time.time())
    stall = float(facts.get("stall_seconds") or DEFAULTS["stall_seconds"])
    for log in facts.get("logs", []):
        if log.get("error"):
            log_lines.append("%s: %s" % (log["path"], log["error"]))
            continue
        lines = log.get("lines") or []
        first = int(log.get("first_line") or 1)
        mtime = log.get("mtime")
        age = "" if mtime is None else " modified %s ago" % fmt_age(now - mtime)
        log_lines.append("%s: lines %d-%d%s" % (log["path"], first, first + len(lines) - 1, age))
        last_text = next((t for t in reversed(lines) if t.strip()), None)
        if last_text is not None:
            log_lines.append("  last: %s" % _short(last_text, 120))
        hits = signatures.scan_lines(lines, log["path"], first)
        eps = _episodes(log, hits)
        for ep in eps:
            ep["stale"] = bench_started is not None and mtime is not None and mtime < bench_started
        episodes.extend(eps)
        # download_stalled: the last line is a progress bar below 100 % and the file stopped changing
        if last_text is not None and mtime is not None:
            pct = signatures.progress_percent(last_text)
            if pct is not None and pct < 100.0:
                idx = len(lines) - 1 - next(i for i, t in enumerate(reversed(lines)) if t.strip())
                if now - mtime > stall:
                    stall_lines.append(
                        {"log": log, "index": idx, "pct": pct, "idle": now - mtime, "stale": False}
                    )
                else:
                    log_lines.append("  download in progress at %.1f%%" % pct)
    dmesg = facts.get("dmesg") or {}
    if dmesg.get("lines"):
        dlog = {"path": "dmesg", "lines": dmesg["lines"], "first_line": 1, "mtime": None}
        max_age = facts.get("dmesg_max_age")
        uptime = dmesg.get("uptime")
        hits = []
        old_hits: List[Dict[str, Any]] = []
        for hit in signatures.scan_lines(dlog["lines"], "dmesg", 1):
            m = DMESG_TS_RE.match(hit["text"])
            if max_age and uptime and m and float(m.group(1)) < float(uptime) - float(max_age):
                continue  # an old event, from before anything we care about
            if hit["code"] in ("missing_input", "timeout", "transport_error", "command_not_found"):
                continue  # kernel chatter, not our benchmark
            # a kernel event from before the current run started is history, as an old log line is
            before_run = bool(uptime and m and run_started and now - (float(uptime) - float(m.group(1))) < run_started)
            (old_hits if before_run else hits).append(hit)
        episodes.extend(_episodes(dlog, hits))
        for ep in _episodes(dlog, old_hits):
            ep["stale"] = True
            episodes.append(ep)

    findings: List[Dict[str, Any]] = []
    by_code: Dict[str, List[Dict[str, Any]]] = {}
    for ep in episodes:
        ep["follow"] = _follow_up(ep)
        by_code.setdefault(ep["code"], []).append(ep)
    sig_lines = []
    for code, eps in by_code.items():
        sig_lines.append("%s: %d occurrence(s), e.g. %s:%d" % (code, len(eps), eps[-1]["hits"][0]["path"],
                                                                eps[-1]["hits"][0]["line"]))
        if code == "missing_input":
            unresolved = []
            for ep in eps:
                resolution = _download_resolution(ep)
                if resolution:
                    hit = ep["hits"][0]
                    findings.append(
                        {
                            "code": "missing_input",
                            "severity": "info",
                            "summary": "input was missing and then downloaded: %s" % _short(hit["text"], 140),
                            "evidence": [_ev(hit["path"], hit["line"], hit["text"]), *resolution],
                            "_recency": _recency(ep),
                        }
                    )
                else:
                    unresolved.append(ep)
            eps = unresolved
            if not eps:
                continue
        fresh = [ep for ep in eps if not ep.get("stale")]
        primary = max(fresh or eps, key=_recency)
        evidence = [_ev(h["path"], h["line"], h["text"]) for h in primary["hits"][: MAX_EVIDENCE - 1]]
        evidence.extend(primary["follow"])
        for other in eps:
            if other is not primary and len(evidence) < MAX_EVIDENCE + 2:
                h = other["hits"][0]
                evidence.append(_ev(h["path"], h["line"], h["text"]))
        summary = _episode_summary(primary)
        if len(eps) > 1:
            summary += " (%d occurrences)" % len(eps)
        severity = primary["severity"]
        if not fresh:
            severity = "info"
            summary = "before the current run: " + summary
        findings.append(
            {
                "code": code,
                "severity": severity,
                "summary": summary,
                "evidence": evidence,
                "_recency": _recency(primary),
            }
        )
    for st in stall_lines:
        log, idx = st["log"], st["index"]
        lines, first = log["lines"], log["first_line"]
        evidence = []
        for i in range(idx - 1, max(-1, idx - 20), -1):
            if DOWNLOADING_RE.search(lines[i]):
                evidence.append(_ev(log["path"], first + i, lines[i]))
                break
        evidence.append(_ev(log["path"], first + idx, lines[idx]))
        context = _context(lines, idx)
        findings.append(
            {
                "code": "download_stalled",
                "severity": "error",
                "summary": "download stalled at %.1f%%%s: %s not written for %s"
                % (st["pct"], " during the %s" % context if context else "", log["path"], fmt_age(st["idle"])),
                "evidence": evidence,
                "_recency": (log.get("mtime") or 0.0, first + idx),
            }
        )
    return findings, log_lines, sig_lines


def _recency(ep: Dict[str, Any]) -> Tuple[float, int]:
    return (ep["log"].get("mtime") or 0.0, ep["hits"][-1]["line"])


# -- the pure analysis --------------------------------------------------------------------------
def analyze(facts: Dict[str, Any]) -> DiagnosisResult:
    """The verdict from gathered facts (no I/O; ``facts`` as built by ``gather``)."""
    now = float(facts.get("now") or time.time())
    bench_cfg = facts.get("benchmark") or {}
    match_pats = compile_patterns(bench_cfg.get("match"))
    entry_pats = compile_patterns(bench_cfg.get("entrypoint"))
    self_pids = set(int(p) for p in facts.get("self_pids") or [])
    processes = [r for r in facts.get("processes") or [] if int(r["pid"]) not in self_pids]
    kids = children_map(processes)
    findings: List[Dict[str, Any]] = []
    steps: List[Dict[str, Any]] = []

    # 1. benchmark processes
    entry = [r for r in processes if entry_pats and _matches(r, entry_pats) and _alive(r)]
    entry_pids = {r["pid"] for r in entry}
    bench_all = [r for r in processes if match_pats and _matches(r, match_pats) and r["pid"] not in entry_pids]
    bench = [r for r in bench_all if _alive(r)]
    bench_started = min((float(r.get("start") or 0.0) for r in bench), default=None) if bench else None
    entry_started = max((float(r.get("start") or 0.0) for r in entry), default=0.0) or None  # the youngest
    young_entry: Optional[str] = None  # set when the entrypoint is young and no benchmark process is up
    if facts.get("processes_error"):
        steps.append(_step("processes", "skipped", "process table unreadable: %s" % facts["processes_error"]))
    elif not match_pats:
        steps.append(_step("processes", "skipped", "no benchmark match patterns configured"))
    elif bench:
        steps.append(_step("processes", "ok", "%d benchmark process(es) alive" % len(bench),
                           [proc_line(r) for r in bench[:20]]))
    else:
        pats = ", ".join(p.pattern for p in match_pats)
        zombies = [r for r in bench_all if not _alive(r)]
        summary = "no benchmark process is running (patterns: %s)" % pats
        if zombies:
            summary += "; %d exited but not reaped (zombie)" % len(zombies)
        severity = "error" if entry else "warning"
        if entry:
            summary += "; the entrypoint (pid %s) is still alive" % ", ".join(str(r["pid"]) for r in entry)
            now = float(facts.get("now") or time.time())
            grace = float(facts.get("startup_grace") or DEFAULTS["startup_grace"])
            if entry_started and 0.0 < now - entry_started < grace:  # decided at the verdict
                young_entry = "the benchmark has not started yet: the entrypoint (pid %s) began %s ago" % (
                    ", ".join(str(r["pid"]) for r in entry), fmt_age(now - entry_started))
        findings.append(
            {
                "code": "benchmark_not_running",
                "severity": severity,
                "summary": summary,
                "evidence": [_ev("/proc/%d" % r["pid"], None, proc_line(r)) for r in entry[:3] + zombies[:3]],
            }
        )
        steps.append(_step("processes", "problem", summary))

    # 2. entrypoint tree
    # the innermost entrypoint processes: a wrapper (``sh -c entrypoint.sh``) is not the one waiting
    tops = [r for r in entry if not _has_entry_desc(r, entry_pids, kids)]
    if facts.get("processes_error") or not entry_pats:
        steps.append(_step("entrypoint", "skipped", "no entrypoint patterns configured"
                           if not entry_pats else "process table unreadable"))
    elif not tops:
        steps.append(_step("entrypoint", "info", "no entrypoint process alive"))
    else:
        tree_lines: List[str] = []
        status = "ok"
        for top in tops:
            desc = descendants(top["pid"], kids)
            tree_lines.append(proc_line(top))
            tree_lines.extend(proc_line(r, d) for d, r in desc[:60])
            live_desc = [r for _, r in desc if _alive(r)]
            bench_desc = [r for r in live_desc if r["pid"] not in entry_pids and match_pats and _matches(r, match_pats)]
            idle = all(
                (r.get("state") in ("S", "I", "Z", "T", "t")) and float(r.get("cpu") or 0.0) < IDLE_CPU
                for _, r in desc
                if r["pid"] not in entry_pids
            )
            do_wait = _in_wait(top) or any(_in_wait(r) for _, r in desc if r["pid"] in entry_pids)
            if bench or bench_desc or not match_pats or not idle:
                continue
            others = [r for _, r in desc if r["pid"] not in entry_pids]
            if others:
                why = "only idle children remain (%s)" % ", ".join(
                    "%d %s" % (r["pid"], _short(r.get("name") or r.get("cmdline") or "", 30)) for r in others[:4]
                )
            else:
                why = "its benchmark child has exited"
            summary = "entrypoint pid %d (%s) is alive but waiting: %s" % (
                top["pid"], _short(top.get("cmdline") or top.get("name") or "", 60), why)
            if do_wait:
                summary += "; wchan do_wait (blocked in wait for a child)"
            status = "problem"
            findings.append(
                {
                    "code": "waiting_on_child",
                    "severity": "warning",
                    "summary": summary,
                    "evidence": [_ev("/proc/%d" % top["pid"], None, proc_line(top))]
                    + [_ev("/proc/%d" % r["pid"], None, proc_line(r, d)) for d, r in desc[:4]],
                }
            )
        steps.append(_step("entrypoint", status, "entrypoint tree (%d root(s))" % len(tops), tree_lines))

    # 3. recent files
    files = sorted(facts.get("files") or [], key=lambda f: -(f.get("mtime") or 0.0))
    steps.append(
        _step(
            "recent_files",
            "info",
            "%d recent file(s) in watched dirs" % len(files),
            ["%8s ago %8s %s" % (fmt_age(now - (f.get("mtime") or now)), fmt_size(f.get("size")), f["path"])
             for f in files[:30]],
        )
    )

    # 4 + 5. log tails and signatures (logs and dmesg)
    log_findings, log_lines, sig_lines = _log_findings(facts, bench_started, bench_started or entry_started)
    findings.extend(log_findings)
    steps.append(_step("logs", "info", "%d log tail(s) read" % len(facts.get("logs") or []), log_lines))
    dmesg = facts.get("dmesg") or {}
    if dmesg.get("error"):
        sig_lines.append("dmesg: %s" % dmesg["error"])
    steps.append(_step("signatures", "problem" if sig_lines and log_findings else "ok",
                       "%d signature finding(s)" % len(log_findings), sig_lines))

    # 6. GPU activity
    gpu = facts.get("gpu")
    supposed_to_run = bool(bench) or bool(entry)
    if not gpu:
        steps.append(_step("gpu", "skipped", "no GPU sample"))
    elif gpu.get("state") != "ok":
        steps.append(_step("gpu", "info", "GPU state %s%s" % (gpu.get("state"),
                                                               ": %s" % gpu["message"] if gpu.get("message") else "")))
    else:
        devices = gpu.get("devices") or []
        lines = ["gpu%s util=%s%% mem=%s%s" % (d.get("index"), d.get("util"), fmt_size(d.get("mem_used")),
                                               " LOST" if d.get("lost") else "") for d in devices]
        lost = [d for d in devices if d.get("lost")]
        for d in lost:
            findings.append(
                {
                    "code": "gpu_lost",
                    "severity": "critical",
                    "summary": "GPU lost: gpu%s does not answer (%s)" % (d.get("index"), d.get("error") or "lost"),
                    "evidence": [_ev("gpu:%s" % d.get("index"), None, d.get("error") or "lost")],
                }
            )
        utils = [d.get("util") for d in devices if not d.get("lost") and d.get("util") is not None]
        if supposed_to_run and utils and all(u <= IDLE_GPU_UTIL for u in utils):
            findings.append(
                {
                    "code": "gpu_idle",
                    "severity": "warning",
                    "summary": "all %d GPU(s) idle (util <= %d%%) while the benchmark should be running"
                    % (len(utils), IDLE_GPU_UTIL),
                    "evidence": [_ev("gpu:%s" % d.get("index"), None, line) for d, line in zip(devices, lines)],
                }
            )
            steps.append(_step("gpu", "problem", "GPUs idle", lines))
        else:
            steps.append(_step("gpu", "ok" if not lost else "problem", "%d GPU(s)" % len(devices), lines))

    # 7. verdict
    # A young entrypoint with no benchmark yet is starting, unless something already failed (then the
    # benchmark ran and died, and the symptoms below are real).
    starting = young_entry is not None and not any(
        SEVERITY_LEVEL.get(f["severity"], 0) >= SEVERITY_LEVEL["error"]
        for f in findings
        if f["code"] not in STARTUP_SYMPTOMS
    )
    for f in findings:
        f.setdefault("_recency", (0.0, 0))
        if starting and f["code"] in STARTUP_SYMPTOMS and f["severity"] != "info":
            f["severity"] = "info"
            f["summary"] = young_entry if f["code"] == "benchmark_not_running" else f["summary"] + " (still setting up)"
    findings.sort(key=lambda f: (-SEVERITY_LEVEL.get(f["severity"], 0), -RANK.get(f["code"], 30)))
    actionable = [f for f in findings if SEVERITY_LEVEL.get(f["severity"], 0) >= 1]
    if actionable:
        head = max(actionable, key=lambda f: (RANK.get(f["code"], 30), SEVERITY_LEVEL[f["severity"]], f["_recency"]))
        verdict = {"code": head["code"], "severity": head["severity"], "summary": head["summary"]}
    elif starting:
        head = next(f for f in findings if f["code"] == "benchmark_not_running")
        verdict = {"code": "starting", "severity": "info", "summary": head["summary"]}
    else:
        what = "%d benchmark process(es) running" % len(bench) if bench else "nothing wrong found"
        verdict = {"code": "healthy", "severity": "info", "summary": "healthy: %s" % what}
    for f in findings:
        f.pop("_recency", None)
    fine = verdict["code"] in ("healthy", "starting")
    steps.append(_step("verdict", "ok" if fine else "problem", verdict["summary"]))
    # built as plain dicts above; this is the DiagnosisResult shape (protocol.py)
    return cast(DiagnosisResult, {"verdict": verdict, "findings": findings, "steps": steps, "time": now})


def _step(name: str, status: str, summary: str, lines: Optional[List[str]] = None) -> Dict[str, Any]:
    return {"name": name, "status": status, "summary": summary, "lines": list(lines or [])}


def _in_wait(rec: Dict[str, Any]) -> bool:
    wchan = rec.get("wchan") or ""
    return wchan.startswith("do_wait") or wchan in ("kernel_wait4", "do_sys_wait4")


def _has_entry_desc(rec: Dict[str, Any], pids: set, kids: Dict[int, List[Dict[str, Any]]]) -> bool:
    return any(r["pid"] in pids for _, r in descendants(rec["pid"], kids))


# -- gathering ----------------------------------------------------------------------------------
def watched_files(config: AgentConfig, max_files: int = 200, max_scan: int = 5000) -> List[Dict[str, Any]]:
    """Regular files in the watched dirs (and one level below), plus configured logs: path, mtime, size."""
    out: Dict[str, Dict[str, Any]] = {}
    scanned = 0

    def add(path: str) -> None:
        try:
            st = os.stat(path)
        except OSError:
            return
        if os.path.isfile(path):
            out[os.path.abspath(path)] = {"path": os.path.abspath(path), "mtime": st.st_mtime, "size": st.st_size}

    for path in as_list(config.get("logs")) + as_list((config.get("benchmark") or {}).get("log")):
        add(path)
    for top in as_list(config.get("watch_dirs")):
        stack = [(top, 0)]
        while stack and scanned < max_scan:
            d, depth = stack.pop()
            try:
                entries = list(os.scandir(d))
            except OSError:
                continue
            for entry in entries:
                scanned += 1
                try:
                    if entry.is_file(follow_symlinks=False):
                        st = entry.stat(follow_symlinks=False)
                        out[entry.path] = {"path": entry.path, "mtime": st.st_mtime, "size": st.st_size}
                    elif depth < 1 and entry.is_dir(follow_symlinks=False):
                        stack.append((entry.path, depth + 1))
                except OSError:
                    continue
    files = sorted(out.values(), key=lambda f: -f["mtime"])
    return files[:max_files]


def log_candidates(config: AgentConfig, files: List[Dict[str, Any]], now: float) -> List[str]:
    """Configured logs and the benchmark log first, then recently modified *.log files, newest first."""
    paths: List[str] = []
    for path in as_list(config.get("logs")) + as_list((config.get("benchmark") or {}).get("log")):
        p = os.path.abspath(path)
        if p not in paths and os.path.isfile(p):
            paths.append(p)
    max_age = float(config.get("discover_max_age") or DEFAULTS["discover_max_age"])
    for f in files:
        if f["path"].endswith(LOG_SUFFIXES) and now - f["mtime"] <= max_age and f["path"] not in paths:
            paths.append(f["path"])
    return paths[:MAX_LOGS]


def read_dmesg(timeout: float = 5.0, max_lines: int = 2000) -> Dict[str, Any]:
    """The kernel log's tail, or an ``error`` ("not permitted", "not available") when it can't be read."""
    try:
        proc = subprocess.run(
            ["dmesg"], stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout
        )
    except FileNotFoundError:
        return {"lines": [], "error": "dmesg not available"}
    except (OSError, subprocess.SubprocessError) as exc:
        return {"lines": [], "error": "dmesg failed: %s" % exc}
    if proc.returncode != 0:
        err = proc.stderr.decode("utf-8", "replace").strip()
        if "not permitted" in err.lower() or "permission" in err.lower():
            return {"lines": [], "error": "not permitted"}
        return {"lines": [], "error": "dmesg exited %d: %s" % (proc.returncode, _short(err, 120))}
    lines = proc.stdout.decode("utf-8", "replace").splitlines()[-max_lines:]
    uptime = None
    try:
        with open("/proc/uptime", encoding="ascii") as fh:
            uptime = float(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return {"lines": lines, "error": None, "uptime": uptime}


def gpu_facts(gpu_sampler: Any) -> Optional[Dict[str, Any]]:
    """The GPU sampler's latest state as plain data: {state, message, devices}; never calls NVML itself."""
    if gpu_sampler is None:
        return None
    state = getattr(gpu_sampler, "state", None)
    try:
        sample = gpu_sampler.last_sample()
    except Exception:
        sample = None
    if not isinstance(sample, dict):
        return {"state": state or "unknown", "message": None, "devices": []}
    return {
        "state": sample.get("state", state),
        "message": sample.get("message"),
        "devices": list(sample.get("devices") or []),
    }


def gather(
    config: AgentConfig,
    gpu_sampler: Any = None,
    now: Optional[float] = None,
    include_dmesg: bool = True,
    processes: Optional[List[Dict[str, Any]]] = None,
) -> Dict[str, Any]:
    """Collect the facts ``analyze`` needs from this host."""
    now = time.time() if now is None else now
    facts: Dict[str, Any] = {
        "now": now,
        "benchmark": dict(config.get("benchmark") or {}),
        "stall_seconds": float(config.get("stall_seconds") or DEFAULTS["stall_seconds"]),
        "startup_grace": float(config.get("startup_grace") or DEFAULTS["startup_grace"]),
        "dmesg_max_age": float(config.get("discover_max_age") or DEFAULTS["discover_max_age"]),
        "self_pids": [os.getpid()],
        "processes": [],
        "processes_error": None,
    }
    if processes is None:
        try:
            from .procs import read_process_table

            processes = read_process_table(plain(config))
        except Exception as exc:  # a broken /proc must not break the diagnosis
            facts["processes_error"] = "%s: %s" % (type(exc).__name__, exc)
            processes = []
    facts["processes"] = processes
    files = watched_files(config)
    facts["files"] = files[:50]
    logs = []
    max_chars = int(config.get("max_line_chars") or 4096)
    for path in log_candidates(config, files, now):
        entry: Dict[str, Any] = {"path": path, "mtime": None, "size": None, "first_line": 1, "lines": [],
                                 "error": None}
        try:
            st = os.stat(path)
            entry["mtime"], entry["size"] = st.st_mtime, st.st_size
            entry["lines"], entry["first_line"] = signatures.read_tail(path, TAIL_LINES, max_line_chars=max_chars)
        except OSError as exc:
            entry["error"] = exc.strerror or str(exc)
        logs.append(entry)
    facts["logs"] = logs
    facts["dmesg"] = read_dmesg() if include_dmesg else {"lines": [], "error": "skipped"}
    facts["gpu"] = gpu_facts(gpu_sampler)
    return facts


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
    return analyze(gather(config, gpu_sampler, now=now, include_dmesg=include_dmesg))
