"""The run's motion (pure: reads the gathered facts): a download whose bytes stopped, a run that is alive but
hung (its steps frozen with nothing else moving, or a silent log while its GPUs spin or nothing of it moves), steps
that slowed down, and the warnings a working run logs (they do not head its verdict)."""

from __future__ import annotations

import re
import time
from typing import Any, Dict, List, Optional, Tuple

from ..wire.config import DEFAULTS
from ..wire.protocol import Evidence
from ..wire.timefmt import fmt_age
from ..wire.wording import plural
from . import codes
from .events import LOG_SLACK
from .liveness import Liveness, saving
from .processes import Processes
from .progress import LogProgress, compile_progress, step_slowdown
from .records import Item
from .text import clean_message, context, ev, fmt_size, short
from .timeline import Timeline

DOWNLOADING_RE = re.compile(r"\bdownloading\b|\bfetching\b|\bcurl\b|\bwget\b|--\d{4}-\d\d-\d\d ", re.IGNORECASE)


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


def own_progress(facts: Dict[str, Any], progress: Dict[str, LogProgress], procs: Processes
                 ) -> Optional[Tuple[str, LogProgress]]:
    """The benchmark's own step progress: the freshest steps log written since the benchmark started."""
    if not procs.bench:
        return None
    started = procs.bench_started or 0.0
    logs = {log["path"]: log for log in facts.get("logs") or [] if not log.get("error")}
    own = [(p, prog) for p, prog in progress.items() if prog.sample.kind == "steps"
           and float(logs[p].get("mtime") or 0.0) >= started - LOG_SLACK]
    return min(own, key=lambda pp: pp[1].stuck_for) if own else None


def stalls(facts: Dict[str, Any], progress: Dict[str, LogProgress], procs: Processes, live: Liveness, now: float,
           items: List[Item], notes: List[str]) -> None:
    """``download_stalled`` (a download's bytes stopped) and ``hung`` (alive, nothing moves: no progress for
    stall_seconds, no I/O, no CPU, no GPU work; or GPUs spinning at high util and low power)."""
    stall = float(facts.get("stall_seconds") or DEFAULTS["stall_seconds"])
    logs = {log["path"]: log for log in facts.get("logs") or [] if not log.get("error")}
    for path, prog in progress.items():
        if prog.sample.kind == "download" and prog.last_line and not prog.sample.done and prog.stuck_for > stall:
            items.append(_stall_item(logs[path], prog, now))
    if barrier_wait(logs, procs, now, stall, items):
        return
    mine = own_progress(facts, progress, procs)
    if mine is None:
        silent_spin(facts, logs, procs, live, stall, items)
        return
    path, prog = mine
    if prog.stuck_for <= stall:
        return
    log = logs[path]
    first = int(log.get("first_line") or 1)
    line = log["lines"][prog.at]
    spinning = live.gpus.state == "spin"
    if live.kind == "server" and not spinning:
        if not live.idle_server():  # else the GPU step says it better (the model, the port)
            notes.append("no new progress for %s: a server waiting for requests" % fmt_age(prog.stuck_for))
        return
    moving = live.moving()  # spinning GPUs: their host threads spin too, only I/O counts then
    if moving:
        save = saving(log["lines"])
        notes.append("no new step for %s, but the run is busy: %s%s" % (
            fmt_age(prog.stuck_for), ", ".join(moving), "; %s" % save if save else ""))
        return
    if spinning:
        gpus = "; GPUs spinning, not computing: %s (a stuck collective or kernel)" % live.gpus.line
    elif live.gpus.line:
        gpus = "; GPUs: %s" % live.gpus.line
    else:
        gpus = ""
    still = ""
    if live.measured and not spinning:
        still = "; nothing moves (CPU %s, I/O %s)" % (
            "?" if live.cpu is None else "%.2f cores" % live.cpu,
            "unknown" if live.io_rate is None else "%s/s" % fmt_size(live.io_rate))
    summary = "hung: no progress for %s while %s alive (last: %s)%s%s" % (
        fmt_age(prog.stuck_for), alive_count(len(procs.bench)), short(clean_message(line), 80), gpus, still)
    items.append(Item("hung", "error", summary, [ev(path, first + prog.at, line)],
                      time=now - prog.stuck_for, order=first + prog.at))


DESIGNED_WARNINGS = frozenset(("diverged",))  # causes that are warnings by design: they head a running job's verdict


def warnings_while_working(facts: Dict[str, Any], progress: Dict[str, LogProgress], procs: Processes,
                           live: Liveness, items: List[Item]) -> None:
    """A cause the program itself logged as a warning (``WARN ... No module named 'mamba_ssm'``, a retried
    timeout) does not head the verdict while the run works: its steps advance, something of it moves, or it is a
    server up with its model (blind round 5: TGI's optional-import warnings called ``command_not_found``)."""
    if not procs.bench:
        return
    stall = float(facts.get("stall_seconds") or DEFAULTS["stall_seconds"])
    mine = own_progress(facts, progress, procs)
    working = (mine is not None and mine[1].stuck_for <= stall) or bool(live.moving()) or live.idle_server()
    if not working:
        return
    for item in items:
        if item.role == "current" and item.severity == "warning" and codes.tier(item.code) == "cause" \
                and item.code not in DESIGNED_WARNINGS:
            item.severity = "info"
            item.summary = "a warning while the run works: " + item.summary


def alive_count(count: int) -> str:
    """"1 benchmark process is" / "3 benchmark processes are"."""
    return "%s %s" % (plural(count, "benchmark process"), "is" if count == 1 else "are")


OVERDUE_RE = re.compile(r"\bhas been running for (?:over|more than) \d+ ?(?:s|sec|seconds|m|min|minutes)\b"
                        r"|\bis taking (?:much |far )?longer than (?:expected|usual)\b", re.IGNORECASE)
# ranks waiting at a start-up barrier for the others to join, with the count of those that did: torch's "Waiting in
# store based barrier to initialize process group for rank: 3, key: ... (world_size=16, worker_count=7, ...)",
# "waiting for 3/4 workers to join the rendezvous", "Waiting for 7 of 16 ranks"
BARRIER_RE = re.compile(
    r"\bwait\w*\b.{0,80}\b(?:barrier|rendezvous|peers?|workers?|ranks?|nodes?|processes)\b.{0,160}?"
    r"(?:\b(?:worker_count|arrived|joined|ready)\s*[=:]\s*(\d+)|\b(\d+)\s*(?:/|of|out of)\s*\d+\b)"
    r"|\bwait\w*\b.{0,40}?\b(\d+)\s*(?:/|of|out of)\s*\d+\s+(?:workers?|ranks?|nodes?|peers?|processes)\b",
    re.IGNORECASE)


def _barrier_count(text: str) -> Optional[str]:
    """The count of ranks arrived in a barrier's wait line, or None when the line is no such wait."""
    m = BARRIER_RE.search(text[:600])
    return None if m is None else next(g for g in m.groups() if g is not None)


def barrier_wait(logs: Dict[str, Dict[str, Any]], procs: Processes, now: float, stall: float,
                 items: List[Item]) -> bool:
    """``hung``: a log whose last lines only repeat a barrier's wait with the same count of ranks arrived, for
    longer than stall_seconds (its file stays fresh; the count says nothing moves: blind round 13, the other
    node's ranks never joined). True when found."""
    if not procs.bench:
        return False
    for path, log in logs.items():
        lines = log.get("lines") or []
        last = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].strip()), -1)
        count = _barrier_count(lines[last]) if last >= 0 else None
        if count is None:
            continue
        first = last
        for i in range(last - 1, -1, -1):
            if not lines[i].strip():
                continue
            if _barrier_count(lines[i]) != count:
                break
            first = i
        timeline = Timeline(log, now)
        span = timeline.at(last) - timeline.at(first)
        if span <= stall:
            continue
        line = lines[last]
        at = int(log.get("first_line") or 1) + last
        items.append(Item("hung", "error", "hung: the ranks have waited at a barrier for %s with the same count (%s)"
                          " while %s alive (last: %s)" % (fmt_age(span), count, alive_count(len(procs.bench)),
                                                          short(clean_message(line), 80)),
                          [ev(path, at, line)], time=now - span, order=at))
        return True
    return False


def silent_spin(facts: Dict[str, Any], logs: Dict[str, Dict[str, Any]], procs: Processes, live: Liveness,
                stall: float, items: List[Item]) -> None:
    """``hung`` without a progress pattern to read: the benchmark's processes are alive, its GPUs spin (pinned
    util at low power: a stuck collective or kernel), nothing else moves, and no log has been written for
    ``stall_seconds``. The evidence is the last line the newest log wrote (blind round 3: vLLM and LMDeploy
    stuck with GPUs at 100 % were called healthy because their logs had no step counter). A batch job whose
    processes are alive while nothing of it moves at all (no CPU, no I/O, idle GPUs) and whose log has been
    silent as long is hung too (blind round 5: ranks stuck in NCCL's init after the socket setup)."""
    spinning = live.gpus.state == "spin"
    still = live.kind == "batch" and live.measured and live.gpus.state in ("idle", "spin")
    if not procs.bench or not logs:
        return
    now = float(facts.get("now") or time.time())
    newest = max(logs.values(), key=lambda lg: float(lg.get("mtime") or 0.0))
    quiet = now - float(newest.get("mtime") or now)
    lines = newest.get("lines") or []
    last = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].strip()), None)
    # the harness's own word that one test or step runs far longer than it should (libtest's "test X has been
    # running for over 60 seconds"), its last word: a busy CPU is no progress then (a spin-wait)
    overdue = last is not None and live.gpus.state == "idle" and bool(OVERDUE_RE.search(lines[last][:400]))
    if not (spinning or still or overdue) or (live.moving() and not overdue):
        return
    if quiet <= stall or last is None:
        return
    first = int(newest.get("first_line") or 1)
    how = ("GPUs spinning, not computing: %s (a stuck collective or kernel" % live.gpus.line if spinning else
           "nothing moves but a busy CPU, GPUs idle (a spin-wait; the harness says it runs overdue" if overdue and
           live.moving() else "nothing moves: no CPU, no I/O, GPUs idle (waiting on a peer, a lock or a collective")
    summary = "hung: no log written for %s while %s alive; %s; last: %s)" % (
        fmt_age(quiet), alive_count(len(procs.bench)), how, short(clean_message(lines[last]), 80))
    items.append(Item("hung", "error", summary, [ev(newest["path"], first + last, lines[last])],
                      time=now - quiet, order=first + last))


def slowdown(facts: Dict[str, Any], progress: Dict[str, LogProgress], procs: Processes, now: float,
             items: List[Item]) -> None:
    """``slowed_down`` (warning): the benchmark's steps advance, but SLOWDOWN times slower than earlier in its log."""
    stall = float(facts.get("stall_seconds") or DEFAULTS["stall_seconds"])
    mine = own_progress(facts, progress, procs)
    if mine is None or mine[1].stuck_for > stall:
        return
    path, prog = mine
    log = next(lg for lg in facts.get("logs") or [] if lg.get("path") == path)
    bench_re = compile_progress((facts.get("benchmark") or {}).get("progress"))
    repaints = (log.get("repaints") or {}).get(prog.at) or (log.get("repaints") or {}).get(str(prog.at))
    found = step_slowdown(log["lines"], prog.events, Timeline(log, now).stamp, bench_re, repaints)
    if found is None:
        return
    factor, early, recent, at = found
    first = int(log.get("first_line") or 1)
    line = log["lines"][at]
    summary = "steps %.1fx slower than earlier in %s (%s, was %s): %s" % (
        factor, path.rsplit("/", 1)[-1], recent, early, short(clean_message(line), 80))
    items.append(Item("slowed_down", "warning", summary, [ev(path, first + at, line)], time=now, order=first + at))
