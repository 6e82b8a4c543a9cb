"""The process steps: which benchmark and entrypoint processes are alive, and is the entrypoint left
waiting on a child that does nothing. Programs are matched with ``procmatch`` (never on arguments)."""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Pattern, Tuple

from ..wire.config import DEFAULTS, compile_patterns
from ..wire.procmatch import matches_program
from ..wire.timefmt import fmt_age
from ..wire.wording import plural
from .records import Item, Step, step
from .text import children_map, descendants, ev, proc_line, short

IDLE_CPU = 1.0  # percent: a child below this, sleeping, is idle


class Processes(NamedTuple):
    """What the process table says about the benchmark."""

    bench: List[Dict[str, Any]]  # live benchmark processes
    entry: List[Dict[str, Any]]  # live entrypoint processes
    bench_started: Optional[float]  # start of the oldest live benchmark process
    entry_started: Optional[float]  # start of the youngest live entrypoint
    young_entry: Optional[str]  # set when the entrypoint is young and no benchmark process is up
    match_pats: List[Pattern[str]]
    starting_evidence: Tuple[Any, ...] = ()  # the line that says what a starting run does (a meter, a build)


def alive(rec: Dict[str, Any]) -> bool:
    return (rec.get("state") or "S") not in ("Z", "X", "x")


def _in_wait(rec: Dict[str, Any]) -> bool:
    wchan = rec.get("wchan") or ""
    return wchan.startswith("do_wait") or wchan in ("kernel_wait4", "do_sys_wait4")


def observed(facts: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The host's processes less the diagnosis's own (``self_pids``)."""
    self_pids = set(int(p) for p in facts.get("self_pids") or [])
    return [r for r in facts.get("processes") or [] if int(r["pid"]) not in self_pids]


SHELLS = frozenset(("bash", "sh", "dash", "zsh", "ksh", "ash"))


def wrappers_left_waiting(facts: Dict[str, Any], procs: Processes) -> bool:
    """Every live benchmark process is a shell script blocked in ``wait`` whose children are idle helpers, none of
    them a benchmark program (a ``render.sh`` whose last line waits on a ``tail -f``, a monitor, a sleep it put in
    the background), and no GPU works: the script's work is over, whatever it still waits for."""
    if not procs.bench:
        return False
    processes = observed(facts)
    kids = children_map(processes)
    for top in procs.bench:
        if str(top.get("name") or "") not in SHELLS or not _in_wait(top):
            return False
        for _, r in descendants(top["pid"], kids):
            if not alive(r):
                continue
            if matches_program(r, procs.match_pats) or r.get("state") not in ("S", "I", "T", "t") \
                    or float(r.get("cpu") or 0.0) >= IDLE_CPU:
                return False
    devices = (facts.get("gpu") or {}).get("devices") or []
    return all(float(d.get("util") or 0.0) <= 2.0 for d in devices)


def benchmark_processes(facts: Dict[str, Any], items: List[Item], steps: List[Step]) -> Processes:
    """Step 1: the benchmark's processes (``benchmark_not_running`` when none is alive)."""
    now = float(facts.get("now") or 0.0)
    bench_cfg = facts.get("benchmark") or {}
    match_pats = compile_patterns(bench_cfg.get("match"))
    entry_pats = compile_patterns(bench_cfg.get("entrypoint"))
    processes = observed(facts)
    entry = [r for r in processes if entry_pats and matches_program(r, entry_pats) and alive(r)]
    entry_pids = {r["pid"] for r in entry}
    named = [r for r in processes if match_pats and matches_program(r, match_pats)]
    kids = children_map(processes) if any(r["pid"] in entry_pids for r in named) else {}
    # a process both patterns name is the benchmark itself when none of its descendants is (a server started as its
    # own entrypoint: "milvus run standalone", "ollama serve")
    bench_all = [r for r in named if r["pid"] not in entry_pids or not any(
        matches_program(d, match_pats) for _, d in descendants(r["pid"], kids))]
    bench = [r for r in bench_all if alive(r)]
    bench_started = min((float(r.get("start") or 0.0) for r in bench), default=None) if bench else None
    entry_started = max((float(r.get("start") or 0.0) for r in entry), default=0.0) or None  # the youngest
    young_entry: Optional[str] = None
    if facts.get("processes_error"):
        steps.append(step("processes", "skipped", "process table unreadable: %s" % facts["processes_error"]))
    elif not match_pats:
        steps.append(step("processes", "skipped", "no benchmark match patterns configured"))
    elif bench:
        steps.append(step("processes", "ok", "%s alive" % plural(len(bench), "benchmark process"),
                          [proc_line(r) for r in bench[:20]]))
    else:
        pats = ", ".join(p.pattern for p in match_pats)
        zombies = [r for r in bench_all if not alive(r)]
        summary = "no benchmark process is running (patterns: %s)" % pats
        if zombies:
            summary += "; %d exited but not reaped (zombie)" % len(zombies)
        severity = "error" if entry else "warning"
        if entry:
            summary += "; the entrypoint (pid %s) is still alive" % ", ".join(str(r["pid"]) for r in entry)
            grace = float(facts.get("startup_grace") or DEFAULTS["startup_grace"])
            if entry_started and 0.0 < now - entry_started < grace:  # decided at the verdict
                young_entry = "the benchmark has not started yet: the entrypoint (pid %s) began %s ago" % (
                    ", ".join(str(r["pid"]) for r in entry), fmt_age(now - entry_started))
        items.append(Item("benchmark_not_running", severity, summary,
                          [ev("/proc/%d" % r["pid"], None, proc_line(r)) for r in entry[:3] + zombies[:3]]))
        steps.append(step("processes", "problem", summary))
    return Processes(bench, entry, bench_started, entry_started, young_entry, match_pats)


def entrypoint_tree(facts: Dict[str, Any], procs: Processes, items: List[Item], steps: List[Step]) -> None:
    """Step 2: the innermost entrypoint's tree (``waiting_on_child`` when only idle children remain)."""
    processes = observed(facts)
    kids = children_map(processes)
    entry_pids = {r["pid"] for r in procs.entry}
    entry_pats = compile_patterns((facts.get("benchmark") or {}).get("entrypoint"))
    # the innermost entrypoint processes: a wrapper (``sh -c entrypoint.sh``) is not the one waiting
    tops = [r for r in procs.entry if not any(d["pid"] in entry_pids for _, d in descendants(r["pid"], kids))]
    if facts.get("processes_error") or not entry_pats:
        steps.append(step("entrypoint", "skipped", "no entrypoint patterns configured"
                          if not entry_pats else "process table unreadable"))
        return
    if not tops:
        steps.append(step("entrypoint", "info", "no entrypoint process alive"))
        return
    tree_lines: List[str] = []
    status = "ok"
    for top in tops:
        desc = descendants(top["pid"], kids)
        tree_lines.append(proc_line(top))
        tree_lines.extend(proc_line(r, d) for d, r in desc[:60])
        live_desc = [r for _, r in desc if alive(r)]
        bench_desc = [r for r in live_desc if r["pid"] not in entry_pids and procs.match_pats
                      and matches_program(r, procs.match_pats)]
        idle = all(
            (r.get("state") in ("S", "I", "Z", "T", "t")) and float(r.get("cpu") or 0.0) < IDLE_CPU
            for _, r in desc
            if r["pid"] not in entry_pids
        )
        do_wait = _in_wait(top) or any(_in_wait(r) for _, r in desc if r["pid"] in entry_pids)
        if procs.bench or bench_desc or not procs.match_pats or not idle:
            continue
        others = [r for _, r in desc if r["pid"] not in entry_pids]
        if others:
            why = "only idle children remain (%s)" % ", ".join(
                "%d %s" % (r["pid"], short(r.get("name") or r.get("cmdline") or "", 30)) for r in others[:4])
        else:
            why = "its benchmark child has exited"
        summary = "entrypoint pid %d (%s) is alive but waiting: %s" % (
            top["pid"], short(top.get("cmdline") or top.get("name") or "", 60), why)
        if do_wait:
            summary += "; wchan do_wait (blocked in wait for a child)"
        status = "problem"
        items.append(Item("waiting_on_child", "warning", summary,
                          [ev("/proc/%d" % top["pid"], None, proc_line(top))]
                          + [ev("/proc/%d" % r["pid"], None, proc_line(r, d)) for d, r in desc[:4]]))
    steps.append(step("entrypoint", status, "entrypoint tree (%s)" % plural(len(tops), "root"), tree_lines))
