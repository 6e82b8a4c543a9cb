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
import subprocess
import threading
import time
from typing import Any, List, Mapping, Optional, Sequence, Set

from ..diagnosis.signatures import read_tail
from ..wire.config import DEFAULTS, AgentConfig, BenchmarkConfig, compile_patterns, plain
from ..wire.procmatch import matches_program
from ..wire.protocol import RESTART_MARKER, RestartResult, Started, StopResult

_LOCK = threading.Lock()
START_CHECK_SECONDS = 1.0
KILL_WAIT_SECONDS = 5.0
LOG_TAIL_LINES = 20  # lines of a dead start's output sent back with the result


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
    """Live processes whose program matches ``benchmark.match`` or ``benchmark.entrypoint``."""
    bench = config.get("benchmark") or DEFAULTS["benchmark"]
    pats = compile_patterns(bench.get("match")) + compile_patterns(bench.get("entrypoint"))
    if not pats:
        return []
    if processes is None:
        from ..sample.procs import read_process_table

        processes = read_process_table(plain(config))
    protected = protected_pids()
    out = []
    for rec in processes:
        pid = int(rec["pid"])
        if pid in protected or (rec.get("state") or "S") in ("Z", "X"):
            continue
        if matches_program(rec, pats):  # the program, never its arguments (procmatch.py)
            out.append(rec)
    return out


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
    """Start ``bench["start"]`` detached (new session), output appended to ``bench["log"]``."""
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
    try:
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    finally:
        out.close()
    threading.Thread(target=proc.wait, name="reap-%d" % proc.pid, daemon=True).start()
    deadline = time.monotonic() + check_seconds
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    rc = proc.poll()
    started: Started = {"pid": proc.pid, "pgid": _pgid(proc.pid) or proc.pid, "argv": argv, "alive": rc is None}
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


def stop_benchmark(config: AgentConfig) -> StopResult:
    """The stop half of a restart: every matching process, by group, TERM then KILL."""
    from ..sample.procs import read_process_table

    bench = config.get("benchmark") or DEFAULTS["benchmark"]
    processes = read_process_table(plain(config))
    targets = find_targets(config, processes)
    timeout = float(bench.get("stop_timeout") or DEFAULTS["benchmark"]["stop_timeout"])
    result = stop_processes(targets, timeout, processes)
    result["matched"] = sorted(int(r["pid"]) for r in targets)
    return result


def stop_only(config: AgentConfig) -> StopResult:
    """Stop the benchmark without starting it again; refused while a restart runs."""
    if not _LOCK.acquire(blocking=False):
        raise RuntimeError("a restart is already in progress")
    try:
        return stop_benchmark(config)
    finally:
        _LOCK.release()


def restart(config: AgentConfig, check_seconds: float = START_CHECK_SECONDS) -> RestartResult:
    """Stop the benchmark, start it again detached; ``{stopped, killed, ..., started, log}`` (and ``error``)."""
    bench = config.get("benchmark") or DEFAULTS["benchmark"]
    start_argv(bench.get("start"))  # refuse before stopping anything
    if not _LOCK.acquire(blocking=False):
        raise RuntimeError("a restart is already in progress")
    try:
        stopped = stop_benchmark(config)
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
