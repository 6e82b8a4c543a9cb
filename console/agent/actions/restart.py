"""Safe benchmark restarts: stop the configured processes by process group, start the command detached.

Never builds shell text from data: ``benchmark.start`` is an argv list, or a string the operator wrote
in the config, run as ``["/bin/sh", "-c", start]``. Never signals pid 1, the agent itself, its
ancestors, or the agent's own process group (a process that shares the agent's group is signalled
alone, by pid).

A start that dies within the first second is reported, not hidden: the result's ``started`` says
``alive: false`` with the ``returncode`` and the lines that start wrote to the benchmark log
(``log_tail``), and ``error`` says it died. The ops table (``console.agent.ops``) calls ``restart`` and
``stop_only`` with the agent's config.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set, Tuple, cast

from ..diagnosis.signatures import read_tail
from ..wire.config import DEFAULTS, AgentConfig, BenchmarkConfig, compile_patterns, plain
from ..wire.procmatch import matches_program, program_name
from ..wire.protocol import (
    RESTART_MARKER,
    PlanGroup,
    PlanProc,
    RestartPlan,
    RestartResult,
    SparedProc,
    Started,
    StopResult,
)
from .detach import spawn_detached

_LOCK = threading.Lock()
START_CHECK_SECONDS = 1.0
KILL_WAIT_SECONDS = 5.0
LOG_TAIL_LINES = 20  # lines of a dead start's output sent back with the result
START_TOLERANCE = 1.0  # seconds: a start time read again may differ by this much (boot time is derived)


class PlanChanged(RuntimeError):
    """The processes a restart would stop are not those the operator confirmed: nothing was stopped."""


def _stat_fields(pid: int) -> Optional[List[str]]:
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            data = fh.read().decode("utf-8", "replace")
    except OSError:
        return None
    # the command name is in parentheses and may contain spaces
    return data[data.rfind(")") + 2 :].split()


def is_gone(pid: int) -> bool:
    """True when ``pid`` has exited (a zombie counts as exited)."""
    fields = _stat_fields(pid)
    if fields is not None:
        return fields[0] in ("Z", "X", "x")
    if os.path.isdir("/proc/self"):
        return True  # /proc works and has no such pid
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _ppid(pid: int) -> Optional[int]:
    fields = _stat_fields(pid)
    if fields is not None:
        try:
            return int(fields[1])
        except (IndexError, ValueError):
            return None
    return os.getppid() if pid == os.getpid() else None


def protected_pids() -> Set[int]:
    """pid 1, the agent and every ancestor of the agent (the SSH session that runs it)."""
    out = {1, os.getpid()}
    pid: Optional[int] = os.getpid()
    for _ in range(64):
        pid = _ppid(pid) if pid else None
        if not pid or pid in out:
            break
        out.add(pid)
    return out


def _pgid(pid: int) -> Optional[int]:
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError, OSError):
        return None


def find_targets(config: AgentConfig, processes: Optional[List[Any]] = None) -> List[Any]:
    """The live processes a restart stops: ``benchmark.match`` ones, and ``benchmark.entrypoint`` ones that are
    the benchmark's (an ancestor of it, in its group, or what ``start`` runs); see ``plan``."""
    if processes is None:
        from ..sample.procs import read_process_table

        processes = read_process_table(plain(config))
    return _classify(config, processes)[0]


def _program_of_start(start: Any) -> str:
    """The program ``benchmark.start`` runs (``entrypoint.sh`` for ``["bash", "/root/entrypoint.sh"]``)."""
    if isinstance(start, str):
        return program_name({"cmdline": start})
    return program_name({"cmdline": " ".join(str(a) for a in start or [])})


def _classify(config: AgentConfig, processes: Sequence[Mapping[str, Any]]) -> Tuple[List[Any], List[Any], List[Any]]:
    """``(targets, spared, entrypoints)``: what a restart stops, what matches the entrypoint pattern only and is
    left running, and every entrypoint match (for naming a target's parent).

    A ``match`` process is the benchmark. An ``entrypoint`` process is stopped only when it is the benchmark's:
    an ancestor of a benchmark process, in a benchmark process's group, or running the program ``start`` runs
    (the last start's entrypoint, left waiting after its benchmark died). A generic entrypoint pattern
    (``python``) never takes other programs with it."""
    bench = config.get("benchmark") or DEFAULTS["benchmark"]
    match_pats = compile_patterns(bench.get("match"))
    entry_pats = compile_patterns(bench.get("entrypoint"))
    protected = protected_pids()
    live = [r for r in processes if int(r["pid"]) not in protected and (r.get("state") or "S") not in ("Z", "X")]
    by_pid = {int(r["pid"]): r for r in processes}
    benchmark = [r for r in live if match_pats and matches_program(r, match_pats)]
    bench_pids = {int(r["pid"]) for r in benchmark}
    entries = [r for r in live if int(r["pid"]) not in bench_pids and entry_pats and matches_program(r, entry_pats)]
    ancestors: Set[int] = set()
    for rec in benchmark:
        ancestors |= _ancestors(int(rec["pid"]), by_pid)
    bench_groups = {_pgid(p) for p in bench_pids} - {None}
    started = _program_of_start(bench.get("start"))
    targets, spared = list(benchmark), []
    for rec in entries:
        pid = int(rec["pid"])
        if pid in ancestors or _pgid(pid) in bench_groups or (started and program_name(rec) == started):
            targets.append(rec)
        else:
            spared.append(rec)
    return targets, spared, entries


def _ancestors(pid: int, by_pid: Mapping[int, Mapping[str, Any]]) -> Set[int]:
    out: Set[int] = set()
    rec = by_pid.get(pid)
    for _ in range(256):
        parent = int(rec.get("ppid") or 0) if rec is not None else 0
        if parent <= 1 or parent in out:
            break
        out.add(parent)
        rec = by_pid.get(parent)
    return out


def _proc(rec: Mapping[str, Any], now: float) -> PlanProc:
    start = float(rec.get("start") or 0.0)
    return {"pid": int(rec["pid"]), "program": program_name(rec) or str(rec.get("name") or "?"),
            "start": start, "age": round(max(0.0, now - start), 1) if start else 0.0}


def plan(config: AgentConfig, processes: Optional[Sequence[Mapping[str, Any]]] = None) -> RestartPlan:
    """What a restart would do now (op ``restart_plan``): the process groups it stops, each with its targets
    (top one first: pid, program, start, age), its live members and the top target's entrypoint parent; the
    entrypoint matches it leaves running; the argv it starts. Stops nothing."""
    if processes is None:
        from ..sample.procs import read_process_table

        processes = read_process_table(plain(config))
    return _plan(config, processes, *_classify(config, processes))


def _plan(config: AgentConfig, processes: Sequence[Mapping[str, Any]], targets: List[Any], spared: List[Any],
          entries: List[Any]) -> RestartPlan:
    bench = config.get("benchmark") or DEFAULTS["benchmark"]
    now = time.time()
    by_pid = {int(r["pid"]): r for r in processes}
    own_groups = {_pgid(p) for p in protected_pids()} | {os.getpgrp(), 0, 1}
    grouped: Dict[Tuple[int, bool], List[Mapping[str, Any]]] = {}
    for rec in targets:
        pgid = _pgid(int(rec["pid"]))
        if pgid is not None:
            alone = pgid in own_groups
            grouped.setdefault((int(rec["pid"]) if alone else pgid, alone), []).append(rec)
    groups: List[PlanGroup] = []
    for (pgid, alone), recs in sorted(grouped.items()):
        pids = {int(r["pid"]) for r in recs}
        recs.sort(key=lambda r: (int(r.get("ppid") or 0) in pids, float(r.get("start") or 0), int(r["pid"])))
        top = recs[0]
        members = 1 if alone else sum(1 for r in processes if _pgid(int(r["pid"])) == pgid)
        why = "benchmark" if any(r not in entries for r in recs) else (
            "its entrypoint" if _runs_benchmark(top, targets, entries, by_pid) else "the last start's entrypoint")
        groups.append({"pgid": pgid, "alone": alone, "targets": [_proc(r, now) for r in recs],
                       "members": max(members, len(recs)), "parent": _parent_entry(top, entries, by_pid),
                       "why": why})
    try:
        argv = start_argv(bench.get("start"))
    except ValueError:
        argv = []
    left = [{**_proc(r, now), "why": "matches the entrypoint pattern only: not the benchmark's, not what start runs"}
            for r in spared]
    return {"groups": groups, "spared": cast(List[SparedProc], left), "start": argv, "log": bench.get("log")}


def _runs_benchmark(top: Mapping[str, Any], targets: Sequence[Any], entries: Sequence[Any],
                    by_pid: Mapping[int, Mapping[str, Any]]) -> bool:
    """Is the entrypoint ``top`` above a live benchmark process?"""
    pid = int(top["pid"])
    return any(pid in _ancestors(int(r["pid"]), by_pid) for r in targets if r not in entries)


def _parent_entry(rec: Mapping[str, Any], entries: Sequence[Any], by_pid: Mapping[int, Mapping[str, Any]]
                  ) -> Optional[str]:
    """``"entrypoint.sh (pid 12)"``: the nearest ancestor of ``rec`` that matches the entrypoint pattern."""
    entry_pids = {int(r["pid"]) for r in entries}
    pid = int(rec["pid"])
    chain = by_pid.get(pid)
    for _ in range(256):
        parent = int(chain.get("ppid") or 0) if chain is not None else 0
        if parent <= 1:
            return None
        if parent in entry_pids:
            return "%s (pid %d)" % (program_name(by_pid[parent]) or "?", parent)
        chain = by_pid.get(parent)
    return None


def check_confirmed(current: RestartPlan, confirmed: Any) -> None:
    """Refuse (``PlanChanged``) when the restart would stop a process the operator was not shown: one not in the
    confirmed plan, or a pid now held by another process (its start time differs)."""
    shown: Dict[int, float] = {}
    groups = confirmed.get("groups") if isinstance(confirmed, dict) else None
    for group in groups or []:
        for proc in group.get("targets") or []:
            shown[int(proc["pid"])] = float(proc.get("start") or 0.0)
    new = [p for g in current["groups"] for p in g["targets"]
           if p["pid"] not in shown or abs(shown[p["pid"]] - p["start"]) > START_TOLERANCE]
    if new:
        listed = ", ".join("%s (pid %d)" % (p["program"], p["pid"]) for p in new[:6])
        raise PlanChanged("what a restart would stop changed since it was confirmed (not shown: %s); "
                          "nothing stopped, ask again" % listed)


def _signal_all(groups: Set[int], singles: Set[int], sig: int) -> None:
    for pgid in sorted(groups):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
    for pid in sorted(singles):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _wait_gone(pids: Set[int], timeout: float) -> Set[int]:
    """Wait until every pid has exited or ``timeout`` passes; return the survivors."""
    deadline = time.monotonic() + timeout
    left = set(pids)
    while True:
        left = {p for p in left if not is_gone(p)}
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def stop_processes(
    targets: Sequence[Mapping[str, Any]], timeout: float = 10.0, processes: Optional[Sequence[Mapping[str, Any]]] = None
) -> StopResult:
    """TERM the targets' process groups (or the pids alone where a group is unsafe), wait, then KILL.

    Returns ``{"stopped": [pids that exited after TERM], "killed": [pids that needed KILL],
    "survivors": [pids still there], "groups": [pgids signalled]}``.
    """
    protected = protected_pids()
    own_pgid = os.getpgrp()
    protected_groups = {_pgid(p) for p in protected} | {own_pgid, 0, 1}
    groups: Set[int] = set()
    singles: Set[int] = set()
    for rec in targets:
        pid = int(rec["pid"])
        if pid in protected:
            continue
        pgid = _pgid(pid)
        if pgid is None:
            continue
        if pgid in protected_groups:
            singles.add(pid)
        else:
            groups.add(pgid)
    # everything in those groups exits too; wait for all of it
    watch = set(singles) | {int(r["pid"]) for r in targets if int(r["pid"]) not in protected}
    for rec in processes or []:
        pid = int(rec["pid"])
        if pid not in protected and _pgid(pid) in groups:
            watch.add(pid)
    watch = {p for p in watch if not is_gone(p)}
    if not watch:
        return {"stopped": [], "killed": [], "survivors": [], "groups": []}
    _signal_all(groups, singles, signal.SIGTERM)
    left = _wait_gone(watch, timeout)
    killed: Set[int] = set()
    if left:
        kill_groups = {g for g in groups if any(_pgid(p) == g for p in left)}
        kill_singles = {p for p in left if _pgid(p) not in kill_groups}
        _signal_all(kill_groups, kill_singles, signal.SIGKILL)
        killed = set(left)
        left = _wait_gone(left, KILL_WAIT_SECONDS)
    return {
        "stopped": sorted(watch - killed),
        "killed": sorted(killed - left),
        "survivors": sorted(left),
        "groups": sorted(groups),
    }


def start_argv(start: Any) -> List[str]:
    """The argv for ``benchmark.start``: a list as given, a string through ``/bin/sh -c``."""
    if isinstance(start, str):
        if not start.strip():
            raise ValueError("benchmark.start is empty")
        return ["/bin/sh", "-c", start]
    argv = [str(a) for a in (start or [])]
    if not argv:
        raise ValueError("no benchmark start command configured (benchmark.start)")
    return argv


def start_benchmark(bench: BenchmarkConfig, check_seconds: float = START_CHECK_SECONDS) -> Started:
    """Start ``bench["start"]`` detached (new session, re-parented away from the agent), output appended to
    ``bench["log"]``."""
    argv = start_argv(bench.get("start"))
    log = bench.get("log") or None
    cwd = bench.get("cwd") or None
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in (bench.get("env") or {}).items()})
    if log:
        parent = os.path.dirname(os.path.abspath(log))
        os.makedirs(parent, exist_ok=True)
        out = open(log, "ab")  # noqa: SIM115 - handed to the child, closed below
        out.write(("%s%s\n" % (RESTART_MARKER, time.strftime("%Y-%m-%dT%H:%M:%S%z"))).encode())
        out.flush()
    else:
        out = open(os.devnull, "wb")  # noqa: SIM115
    try:  # not the agent's child: it outlives the agent and is not shown under it (detach.py)
        pid, rc = spawn_detached(argv, cwd, env, out.fileno(), check_seconds)
    finally:
        out.close()
    started: Started = {"pid": pid, "pgid": _pgid(pid) or pid, "argv": argv, "alive": rc is None}
    if rc is not None:
        started["returncode"] = rc
        started["log_tail"] = start_output(log) if log else []
    return started


def start_output(log: str, max_lines: int = LOG_TAIL_LINES) -> List[str]:
    """The last lines the latest start wrote to ``log``: after the agent's restart marker, at most ``max_lines``."""
    try:
        lines, _ = read_tail(log, max_lines + 1)
    except OSError:
        return []
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith(RESTART_MARKER):
            lines = lines[i + 1 :]
            break
    return lines[-max_lines:]


def stop_benchmark(config: AgentConfig, confirmed: Any = None) -> StopResult:
    """The stop half of a restart: every target of the plan, by group, TERM then KILL. With ``confirmed`` (the plan
    the operator saw) nothing is stopped when the plan now holds a process that was not shown (``PlanChanged``)."""
    from ..sample.procs import read_process_table

    bench = config.get("benchmark") or DEFAULTS["benchmark"]
    processes = read_process_table(plain(config))
    targets, spared, entries = _classify(config, processes)
    now_plan = _plan(config, processes, targets, spared, entries)
    if confirmed is not None:
        check_confirmed(now_plan, confirmed)
    timeout = float(bench.get("stop_timeout") or DEFAULTS["benchmark"]["stop_timeout"])
    result = stop_processes(targets, timeout, processes)
    result["matched"] = sorted(int(r["pid"]) for r in targets)
    result["plan"] = now_plan
    return result


def stop_only(config: AgentConfig, confirmed: Any = None) -> StopResult:
    """Stop the benchmark without starting it again; refused while a restart runs."""
    if not _LOCK.acquire(blocking=False):
        raise RuntimeError("a restart is already in progress")
    try:
        return stop_benchmark(config, confirmed)
    finally:
        _LOCK.release()


def restart(config: AgentConfig, check_seconds: float = START_CHECK_SECONDS, confirmed: Any = None) -> RestartResult:
    """Stop the benchmark, start it again detached; ``{stopped, killed, ..., plan, started, log}`` (and ``error``).

    ``confirmed``: the plan (``plan``) the operator was shown; a process to stop that it did not list refuses the
    restart before anything is stopped."""
    bench = config.get("benchmark") or DEFAULTS["benchmark"]
    start_argv(bench.get("start"))  # refuse before stopping anything
    if not _LOCK.acquire(blocking=False):
        raise RuntimeError("a restart is already in progress")
    try:
        stopped = stop_benchmark(config, confirmed)
        if stopped["survivors"]:
            raise RuntimeError("could not stop pids %s; not starting a second copy" % stopped["survivors"])
        result: RestartResult = {**stopped}
        started = start_benchmark(bench, check_seconds)
        result["started"] = started
        result["log"] = bench.get("log")
        if not started["alive"]:
            result["error"] = "the benchmark died at once: it exited right after start (code %s); see %s" % (
                started.get("returncode"), bench.get("log") or "its output")
        return result
    finally:
        _LOCK.release()
