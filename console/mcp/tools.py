"""What the MCP tools return, as pure functions of the fleet state: structured results and short texts.

No I/O here and nothing from the MCP SDK: ``server.py`` gathers (from the controller, or a host command
built here) and calls these. Every string that came from a host passes through ``safe`` on its way out,
and every list that can grow is capped so a result stays within ``safe.RESULT_BUDGET``.
"""

from __future__ import annotations

import shlex
from typing import Any, Dict, Iterable, List, Optional, Tuple

from console.agent.wire.config import STARTUP_GRACE_SECONDS
from console.agent.wire.wording import clip_words
from console.core.gpu_health import health_json
from console.core.gpu_health import marks as health_marks
from console.core.spend import fleet_rates, spend_row
from console.core.state import FleetState, InstanceState, LogRing
from console.mcp import safe

SEVERITY_ORDER = {"critical": 0, "error": 1, "warning": 2, "info": 3}
LOG_MODES = ("tail", "around", "match")
MAX_LOG_LINES = 500  # lines one read_log call returns at most
MAX_TOP = 50  # processes instance_detail lists at most


# -- fleet status -------------------------------------------------------------------------------------
def benchmark_state(inst: InstanceState, now: float) -> str:
    """running | starting | not_running | unknown (no ``[benchmark] match`` or no process list yet)."""
    if inst.bench_running is None:
        return "unknown"
    if inst.bench_running:
        return "running"
    up = inst.entrypoint_age(now)
    return "starting" if up is not None and up < STARTUP_GRACE_SECONDS else "not_running"


def verdict_of(inst: InstanceState, now: float) -> Optional[Dict[str, Any]]:
    if not inst.diagnosis:
        return None
    verdict = inst.diagnosis.get("verdict") or {}
    at = inst.diagnosis_at
    return {
        "code": safe.field(verdict.get("code"), 80),
        "severity": safe.field(verdict.get("severity"), 20),
        "summary": safe.field(verdict.get("summary")),
        "age_s": None if at is None else round(max(0.0, now - at), 1),
    }


def gpu_summary(inst: InstanceState) -> Dict[str, Any]:
    gpus = list(inst.gpus.values())
    live = [g for g in gpus if not (g.lost or g.missing)]
    utils = [g.util for g in live if g.util is not None]
    used = [g.get("mem_used") for g in live if g.get("mem_used") is not None]
    total = [g.get("mem_total") for g in live if g.get("mem_total") is not None]
    return {
        "state": inst.gpu_state,
        "count": len(gpus),
        "lost": inst.lost_gpus,
        "util_avg": round(sum(utils) / len(utils)) if utils else None,
        "mem_used": sum(used) if used else None,
        "mem_total": sum(total) if total else None,
        "simulated": inst.simulated,
    }


def status_row(inst: InstanceState, now: float) -> Dict[str, Any]:
    status, detail = inst.status, inst.status_detail
    if status == "connecting" and inst.settled_status:  # caught mid-retry: what the last attempt found
        status, detail = inst.settled_status, inst.settled_detail
    age = inst.age(now)
    return {
        "name": safe.field(inst.name, 120),
        "address": safe.field(inst.instance.address, 200),
        "tags": [safe.field(t, 60) for t in inst.tags],
        "status": status,
        "detail": clip_words(safe.clean(detail), safe.FIELD_CHARS),
        "link": inst.link_status,
        "benchmark": benchmark_state(inst, now),
        "verdict": verdict_of(inst, now),
        "gpus": gpu_summary(inst),
        "flags": [safe.field(f, 60) for f in inst.flags()],
        "data_age_s": None if age is None else round(age, 1),
        "spend": spend_row(inst, now),
    }


def fleet_status(
    state: FleetState, now: float, name: str = "", tag: str = "", status: str = "", query: str = ""
) -> Dict[str, Any]:
    """Every instance (trouble first), filtered by name substring, tag, status and the console's filter
    (``query``: words and predicates, console/core/predicates.py), all optional."""
    rows = []
    for inst in state.ordered(query):
        if name and name.lower() not in inst.name.lower():
            continue
        if tag and not any(tag.lower() == t.lower() for t in inst.tags):
            continue
        row = status_row(inst, now)
        if status and row["status"] != status.lower():
            continue
        rows.append(row)
    totals = state.totals()
    burning, idle, priced = fleet_rates(state.instances.values())
    result: Dict[str, Any] = {"instances": rows, "matched": len(rows), "fleet_totals": totals, "truncated": False,
                              "currency": state.currency,
                              "fleet_rates": {"burning_per_hour": round(burning, 4), "idle_per_hour": round(idle, 4)}
                              if priced else None}
    dropped = safe.fit_list(result, "instances", keep="head")
    if dropped:
        result["truncated"] = True
        result["note"] = f"{dropped} instances left out to stay under the size limit; filter by name, tag or status"
    return result


def render_status(result: Dict[str, Any]) -> str:
    lines = [f"[{result['note']}]"] if result.get("note") else []
    for row in result["instances"]:
        g = row["gpus"]
        util = "-" if g["util_avg"] is None else f"{g['util_avg']}%"
        verdict = f" verdict={row['verdict']['code']}" if row["verdict"] else ""
        age = "-" if row["data_age_s"] is None else f"{row['data_age_s']:g}s"
        detail = f": {row['detail']}" if row["detail"] else ""
        money = row["spend"]
        cost = "" if money["price_per_hour"] is None else (
            f" | {money['price_per_hour']:g}/h, spent {money['spend']:.2f}, idle {money['idle_spend']:.2f}")
        lines.append(
            f"{row['name']}: {row['status']}{detail} | benchmark {row['benchmark']} | "
            f"{g['count']} GPUs util {util}{verdict} | data age {age}{cost}"
        )
    t = result["fleet_totals"]
    lines.append(f"{result['matched']} shown; fleet: {t['instances']} instances, {t['failing']} failing, "
                 f"{t['gpus']} GPUs ({t['busy']} busy, {t['idle']} idle, {t['lost']} lost)")
    return safe.fit_text("\n".join(lines))


# -- instance detail ----------------------------------------------------------------------------------
def _matches_any(inst_patterns: Iterable[Any], rec: Dict[str, Any]) -> bool:
    text = rec.get("cmdline") or rec.get("name") or ""
    return any(p.search(text) for p in inst_patterns)


def process_view(rec: Dict[str, Any], inst: InstanceState, now: float) -> Dict[str, Any]:
    start = rec.get("start")
    return {
        "pid": rec.get("pid"),
        "ppid": rec.get("ppid"),
        "name": safe.field(rec.get("name"), 80),
        "cmdline": safe.field(rec.get("cmdline")),
        "state": safe.field(rec.get("state"), 4),
        "wchan": None if rec.get("wchan") is None else safe.field(rec.get("wchan"), 60),
        "cpu": rec.get("cpu"),
        "rss": rec.get("rss"),
        "gpu_mem": rec.get("gpu_mem"),
        "age_s": None if not start else round(max(0.0, now + inst.clock_offset - float(start)), 1),
        "benchmark": _matches_any(inst.bench_patterns, dict(rec)),
        "entrypoint": _matches_any(inst.entry_patterns, dict(rec)),
    }


def instance_detail(inst: InstanceState, now: float, top: int = 15) -> Dict[str, Any]:
    """GPUs (with per-process memory), the top ``top`` processes by GPU memory then CPU (plus every
    benchmark and entrypoint process), followed logs, the last diagnosis."""
    top = max(1, min(MAX_TOP, top))
    procs = [dict(r) for r in inst.shown_procs().values()]  # less the console's own agent and its shell
    names = {r.get("pid"): safe.field(r.get("name"), 80) for r in procs}
    ranked = sorted(procs, key=lambda r: (r.get("gpu_mem") or 0, r.get("cpu") or 0.0), reverse=True)
    chosen = ranked[:top]
    seen = {r.get("pid") for r in chosen}
    for rec in procs:  # what the hunt is about, whatever its rank
        if rec.get("pid") not in seen and (_matches_any(inst.bench_patterns, rec) or
                                           _matches_any(inst.entry_patterns, rec)):
            chosen.append(rec)
            seen.add(rec.get("pid"))
    gpus = []
    for g in sorted(inst.gpus.values(), key=lambda g: g.index):
        gpus.append({
            "index": g.index,
            "name": safe.field(g.get("name"), 80),
            "util": g.util,
            "mem_used": g.get("mem_used"),
            "mem_total": g.get("mem_total"),
            "temp": g.get("temp"),
            "power": g.get("power"),
            "lost": g.lost or g.missing,
            "error": None if g.error is None else safe.field(g.error),
            "health": health_json(g),  # NVML: ECC, rows, pages, clock events, PCIe, Xids (absent: unsupported)
            "health_marks": health_marks(g, now),
            # a container's GPU processes: mapped one to one (pid), as a group (pid null, group [pids]), or
            # unattributed (pid null, nvml_pid: the host's number); docs/architecture.md "GPU process mapping"
            "procs": [{"pid": p.get("pid"), "mem": p.get("mem"), "name": names.get(p.get("pid")),
                       "group": p.get("group"), "nvml_pid": p.get("nvml_pid")}
                      for p in (g.sample.get("procs") or [])][:32],
        })
    logs = []
    for ring in sorted(inst.logs.values(), key=lambda r: r.updated, reverse=True):
        last = ring.last
        logs.append({
            "path": safe.field(ring.path, 500),
            "lines_held": len(ring.lines),
            "last_line": last[0] if last else None,
            "last_text": safe.line(last[1], 300) if last else None,
            "event": ring.event,
            "missing": ring.missing,
            "updated_age_s": round(max(0.0, now - ring.updated), 1) if ring.updated else None,
        })
    hello = inst.hello
    result: Dict[str, Any] = {
        **status_row(inst, now),
        "link_detail": safe.field(inst.link_detail),
        "agent": {
            "version": safe.field(hello.get("agent_version"), 40),
            "python": safe.field(hello.get("python"), 40),
            "agentless": inst.agentless,
        },
        "gpu_devices": gpus,
        "processes": [process_view(r, inst, now) for r in chosen],
        "process_count": len(procs),
        "logs": logs,
        "diagnosis": None if not inst.diagnosis else diagnosis_view(inst.name, dict(inst.diagnosis)),
        "truncated": False,
    }
    notes = []
    for key, keep in (("processes", "head"), ("logs", "head"), ("gpu_devices", "head")):
        dropped = safe.fit_list(result, key, budget=safe.RESULT_BUDGET, keep=keep)
        if dropped:
            notes.append(f"{dropped} {key} left out")
    if notes:
        result["truncated"] = True
        result["note"] = "; ".join(notes) + " to stay under the size limit"
    return result


def _gpu_proc_text(p: Dict[str, Any]) -> str:
    """One GPU process as the GPU tab writes it: "1234 python", "≈ 12,13" (a group), "? host 98765"."""
    if p.get("pid") is not None:
        return f"{p['pid']} {p.get('name') or '?'}"
    if p.get("group"):
        return "≈ " + ",".join(str(x) for x in p["group"])
    return f"? host {p.get('nvml_pid') if p.get('nvml_pid') is not None else '?'}"


def render_detail(result: Dict[str, Any]) -> str:
    out = [f"{result['name']} ({result['address']}): {result['status']}"
           + (f": {result['detail']}" if result["detail"] else "") + f" | benchmark {result['benchmark']}"]
    for g in result["gpu_devices"]:
        mem = "" if g["mem_used"] is None else f" mem {g['mem_used'] // 2**20} MiB"
        procs = ", ".join(_gpu_proc_text(p) for p in g["procs"])
        marks = ", ".join(g.get("health_marks") or [])
        out.append(f"  GPU {g['index']} {g['name']}: util {g['util']}%{mem}{' LOST' if g['lost'] else ''}"
                   + (f" [{procs}]" if procs else "") + (f" health: {marks}" if marks else ""))
    out.append(f"  processes (top {len(result['processes'])} of {result['process_count']}):")
    for p in result["processes"]:
        mark = " [benchmark]" if p["benchmark"] else " [entrypoint]" if p["entrypoint"] else ""
        out.append(f"    {p['pid']} <- {p['ppid']} {p['state']} wchan={p['wchan'] or '-'} cpu={p['cpu']} "
                   f"{p['cmdline'] or p['name']}{mark}")
    for log in result["logs"]:
        out.append(f"  log {log['path']}: line {log['last_line']}: {log['last_text'] or ''}")
    if result["diagnosis"]:
        v = result["diagnosis"]["verdict"]
        out.append(f"  last diagnosis: {v['code']}: {v['summary']}")
    return safe.fit_text("\n".join(out))


# -- diagnose -----------------------------------------------------------------------------------------
def diagnosis_view(name: str, data: Dict[str, Any]) -> Dict[str, Any]:
    """The diagnosis as ``fleet-console diagnose NAME --json`` prints it, host text cleaned, sizes capped."""
    verdict = data.get("verdict") or {}
    findings = []
    for f in sorted(data.get("findings") or [], key=lambda f: SEVERITY_ORDER.get(f.get("severity"), 9)):
        findings.append({
            "code": safe.field(f.get("code"), 80),
            "severity": safe.field(f.get("severity"), 20),
            "summary": safe.field(f.get("summary"), 600),
            "evidence": [
                {"path": safe.field(e.get("path"), 500), "line": e.get("line"), "text": safe.line(e.get("text"), 500)}
                for e in (f.get("evidence") or [])[:20]
            ],
        })
    result: Dict[str, Any] = {
        "instance": safe.field(name, 120),
        "verdict": {
            "code": safe.field(verdict.get("code"), 80),
            "severity": safe.field(verdict.get("severity"), 20),
            "summary": safe.field(verdict.get("summary"), 600),
        },
        "findings": findings,
        "alternatives": [
            {"code": safe.field(a.get("code"), 80), "summary": safe.field(a.get("summary"), 600),
             "evidence": [{"path": safe.field(e.get("path"), 500), "line": e.get("line"),
                           "text": safe.line(e.get("text"), 500)} for e in (a.get("evidence") or [])[:2]]}
            for a in (data.get("alternatives") or [])[:2] if isinstance(a, dict)
        ],
        "steps": [safe.field(s) for s in (data.get("steps") or [])[:50]],
        "truncated": False,
    }
    dropped = safe.fit_list(result, "steps", keep="head") + safe.fit_list(result, "findings", keep="head")
    if dropped:
        result["truncated"] = True
        result["note"] = f"{dropped} steps/findings (the least severe) left out to stay under the size limit"
    return result


def render_diagnosis(result: Dict[str, Any]) -> str:
    v = result["verdict"]
    out = [f"{result['instance']}: {v['code']} ({v['severity']}): {v['summary']}"]
    for f in result["findings"]:
        out.append(f"  [{f['severity']}] {f['code']}: {f['summary']}")
        for e in f["evidence"]:
            where = f"{e['path']}:{e['line']}" if e.get("line") else e["path"]
            out.append(f"      {where}: {e['text']}")
    for a in result.get("alternatives") or []:
        out.append(f"  also possible: {a['code']}: {a['summary']}")
    return safe.fit_text("\n".join(out))


# -- read a log ---------------------------------------------------------------------------------------
def allowed_log_paths(inst: InstanceState) -> List[str]:
    """The files read_log may read: those the console follows, the configured ones, the benchmark's log,
    and the files the last diagnosis cited. Never an arbitrary path."""
    paths: List[str] = list(inst.logs)
    paths.extend(inst.instance.logs)
    if inst.instance.benchmark.log:
        paths.append(inst.instance.benchmark.log)
    diagnosis: Dict[str, Any] = dict(inst.diagnosis or {})
    for f in diagnosis.get("findings") or []:
        paths.extend(str(e.get("path")) for e in f.get("evidence") or [] if e.get("path"))
    return list(dict.fromkeys(p for p in paths if p))


def log_window(mode: str, count: int, line: Optional[int]) -> Tuple[int, int]:
    """(first, last) line numbers for ``around`` (``count`` lines centred on ``line``)."""
    assert line is not None
    before = (count - 1) // 2
    first = max(1, line - before)
    return first, first + count - 1


_AWK_CUT = 'sub(/^.*\\r/, ""); n = length($0); t = (n > m) ? substr($0, 1, m) : $0'


def log_command(path: str, mode: str, count: int, line: Optional[int] = None, pattern: str = "",
                max_chars: int = safe.LINE_CHARS) -> str:
    """A fixed shell command that prints the wanted lines of ``path`` as ``NUMBER<TAB>LENGTH<TAB>TEXT``
    (\\r-collapsed as the agent numbers and shows them, each cut to ``max_chars`` bytes on the host, so a
    10 MB line costs the wire 1 KB), then a ``#end`` line with the match count and the lines read.
    Only ``awk`` is needed on the host; every value travels quoted or through the environment."""
    q = shlex.quote(path)
    m = int(max_chars) + 4  # a few bytes more than shown, so a cut is seen (UTF-8 may split a character)
    if mode == "around":
        first, last = log_window(mode, count, line)
        body = (f"NR >= {first} {{ {_AWK_CUT}; print NR \"\\t\" n \"\\t\" t; c++ }} NR >= {last} {{ exit }} "
                f"END {{ print \"#end\\t\" (c + 0) \"\\t\" NR }}")
        awk = f"awk -v m={m} '{body}' {q}"
    elif mode == "match":
        body = ("BEGIN { p = tolower(ENVIRON[\"FC_PATTERN\"]) } "
                f"{{ {_AWK_CUT}; if (index(tolower($0), p)) {{ c++; b[c % k] = NR \"\\t\" n \"\\t\" t }} }} "
                "END { s = c - k + 1; if (s < 1) s = 1; for (i = s; i <= c; i++) print b[i % k]; "
                "print \"#end\\t\" (c + 0) \"\\t\" NR }")
        awk = f"FC_PATTERN={shlex.quote(pattern)} awk -v m={m} -v k={int(count)} '{body}' {q}"
    else:  # tail
        body = (f"{{ {_AWK_CUT}; b[NR % k] = NR \"\\t\" n \"\\t\" t }} "
                "END { s = NR - k + 1; if (s < 1) s = 1; for (i = s; i <= NR; i++) print b[i % k]; "
                "print \"#end\\t\" NR \"\\t\" NR }")
        awk = f"awk -v m={m} -v k={int(count)} '{body}' {q}"
    return (f"if [ ! -r {q} ]; then echo '#missing'; exit 3; fi; "
            f"LC_ALL=C; export LC_ALL; {awk} | head -c {(count + 2) * (m + 40)}")


def parse_log_output(stdout: str, max_chars: int = safe.LINE_CHARS) -> Tuple[List[Dict[str, Any]], Optional[int],
                                                                          Optional[int], bool]:
    """(lines, match_count, lines_read, missing) from ``log_command``'s output; texts cleaned and capped."""
    out: List[Dict[str, Any]] = []
    count = read = None
    missing = False
    for raw in stdout.split("\n"):
        if raw == "#missing":
            missing = True
            continue
        if raw.startswith("#end\t"):
            parts = raw.split("\t")
            count = _int(parts[1]) if len(parts) > 1 else None
            read = _int(parts[2]) if len(parts) > 2 else None
            continue
        parts = raw.split("\t", 2)
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        number, length, text = int(parts[0]), _int(parts[1]) or 0, parts[2]
        item = _line_item(number, text, max_chars)
        if length > max_chars:  # cut on the host already (bytes); say how long the line really is
            item["text"] = safe.clip(item["text"].rstrip("\ufffd"), max_chars - 1).rstrip("…") + "…"
            item["cut_from"] = length
        out.append(item)
    return out, count, read, missing


def _int(text: str) -> Optional[int]:
    try:
        return int(text)
    except ValueError:
        return None


def _line_item(number: int, text: str, max_chars: int) -> Dict[str, Any]:
    clean = safe.clean(text)
    item: Dict[str, Any] = {"line": number, "text": safe.clip(clean, max_chars)}
    if len(clean) > max_chars:
        item["cut_from"] = len(clean)
    return item


def ring_lines(ring: LogRing, mode: str, count: int, line: Optional[int] = None, pattern: str = "",
               max_chars: int = safe.LINE_CHARS) -> Tuple[List[Dict[str, Any]], Optional[int]]:
    """The same selection over the lines the console holds for a file (when the host cannot be asked)."""
    held = [(n, t) for n, t in ring.lines if n]
    if mode == "around":
        first, last = log_window(mode, count, line)
        chosen = [(n, t) for n, t in held if first <= n <= last]
        matched = None
    elif mode == "match":
        p = pattern.lower()
        hits = [(n, t) for n, t in held if p in t.lower()]
        chosen, matched = hits[-count:], len(hits)
    else:
        chosen, matched = held[-count:], None
    return [_line_item(n, t, max_chars) for n, t in chosen], matched


def log_result(name: str, path: str, mode: str, lines: List[Dict[str, Any]], source: str, *,
               line: Optional[int] = None, pattern: str = "", matched: Optional[int] = None,
               lines_read: Optional[int] = None, note: str = "") -> Dict[str, Any]:
    """The read_log result, capped to the budget (lines farthest from what was asked for go first)."""
    result: Dict[str, Any] = {
        "instance": safe.field(name, 120),
        "path": safe.field(path, 500),
        "mode": mode,
        "source": source,
        "lines": lines,
        "truncated": False,
    }
    if line is not None:
        result["around_line"] = line
    if pattern:
        result["pattern"] = safe.field(pattern, 200)
    if matched is not None:
        result["matched"] = matched
    if lines_read is not None:
        result["file_lines"] = lines_read
    notes = [note] if note else []
    cut = sum(1 for it in lines if "cut_from" in it)
    if cut:
        notes.append(f"{cut} long lines cut to {safe.LINE_CHARS} characters (cut_from: their length)")
    keep = "around" if mode == "around" else "tail"
    dropped = safe.fit_list(result, "lines", keep=keep, anchor=lambda it: it.get("line") == line)
    if dropped:
        result["truncated"] = True
        notes.append(f"{dropped} lines left out to stay under the size limit; ask for fewer lines")
    if matched is not None and matched > len(result["lines"]) and not dropped:
        notes.append(f"{matched} lines match; the last {len(result['lines'])} are shown")
    if notes:
        result["note"] = "; ".join(notes)
    return result


def render_log(result: Dict[str, Any]) -> str:
    head = f"{result['instance']}:{result['path']} ({result['mode']}, from the {result['source']})"
    out = [head] + ([f"[{result['note']}]"] if result.get("note") else [])  # first: a cut text keeps it
    out += [f"{it['line']:>7}: {it['text']}" for it in result["lines"]]
    return safe.fit_text("\n".join(out))


# -- probes -------------------------------------------------------------------------------------------
def probe_result(name: str, probe: str, data: Dict[str, Any]) -> Dict[str, Any]:
    lines = [safe.line(x) for x in (data.get("lines") or [])]
    result: Dict[str, Any] = {
        "instance": safe.field(name, 120),
        "probe": probe,
        "title": safe.field(data.get("title") or probe),
        "lines": lines,
        "truncated": False,
    }
    dropped = safe.fit_list(result, "lines", keep="tail")
    if dropped:
        result["truncated"] = True
        result["note"] = f"the first {dropped} lines left out to stay under the size limit"
    return result


def render_probe(result: Dict[str, Any]) -> str:
    out = [f"{result['instance']}: {result['title']}"] + ([f"[{result['note']}]"] if result.get("note") else [])
    out += result["lines"]
    return safe.fit_text("\n".join(out))


# -- resources ----------------------------------------------------------------------------------------
def logs_resource(inst: InstanceState, per_file: int = 40) -> Dict[str, Any]:
    """Each followed file of one instance with its last ``per_file`` lines (as the console holds them)."""
    files = []
    for ring in sorted(inst.logs.values(), key=lambda r: r.updated, reverse=True):
        lines, _ = ring_lines(ring, "tail", per_file)
        files.append({"path": safe.field(ring.path, 500), "event": ring.event, "missing": ring.missing,
                      "lines": lines})
    result: Dict[str, Any] = {"instance": safe.field(inst.name, 120), "files": files, "truncated": False}
    budget = safe.RESULT_BUDGET * 2 - 2048  # a resource has no text twin: it may take the whole ~32 KB
    while safe.json_size(result) > budget and any(f["lines"] for f in result["files"]):
        biggest = max(result["files"], key=lambda f: safe.json_size(f["lines"]))
        biggest["lines"] = biggest["lines"][len(biggest["lines"]) // 2 + 1:]
        result["truncated"] = True
    return result
