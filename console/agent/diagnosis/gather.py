"""Gathering: the facts a diagnosis needs, read from this host (no analysis here).

``gather(config, ...)`` returns a plain dict: the process table, recent files, log tails (with the
``\\r`` repaints of their last lines), the kernel log, a GPU sample, the benchmark's activity (CPU time and
I/O of its processes over the gathering, at least a second apart, and the TCP ports they listen on:
``activity.py``), and the settings the analysis uses (benchmark patterns and kind, stall_seconds, the start-up
grace, ``[[signature]]`` rows, the progress regex).

Which logs: the configured ones (``logs``, ``[benchmark] log``: ``configured: true``, symlinks allowed) with their
companion streams (``.out`` beside ``.err``) and the worker logs they name below their folder, then the
``*.log``/``.out``/``.err`` files at the top of the watch dirs (below too for a ``DIR/**`` entry): regular files,
never symlinks, read with ``O_NOFOLLOW``, and none last written before the run began (the oldest live benchmark or
entrypoint process): another program's output in /tmp is not this run's evidence.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import time
from typing import Any, Dict, List, Optional

from ..sample.logread import named_paths, watched_entries
from ..wire.config import DEFAULTS, AgentConfig, as_list, compile_patterns, plain, watch_dirs
from ..wire.procmatch import matches_program
from . import activity, signatures
from .events import LOG_SLACK
from .text import short

TAIL_LINES = 2000
MAX_LOGS = 30
LOG_SUFFIXES = (".log", ".out", ".err")


def watched_files(config: AgentConfig, max_files: int = 200, max_scan: int = 5000) -> List[Dict[str, Any]]:
    """Regular files at the top of the watched dirs (below too for a ``DIR/**`` entry; symlinks never followed),
    plus the configured logs (``configured: true``; they may be symlinks): path, mtime, size."""
    out: Dict[str, Dict[str, Any]] = {}
    for path in named_paths(config):
        try:
            st = os.stat(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            out[path] = {"path": path, "mtime": st.st_mtime, "size": st.st_size, "configured": True}
    for entry in watched_entries(watch_dirs(config), max_scan):
        if entry.path in out:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        out[entry.path] = {"path": entry.path, "mtime": st.st_mtime, "size": st.st_size}
    files = sorted(out.values(), key=lambda f: -f["mtime"])
    return files[:max_files]


def run_started(config: AgentConfig, processes: List[Any]) -> Optional[float]:
    """When this run began: the start of the oldest live benchmark or entrypoint process (None: none alive)."""
    bench = config.get("benchmark") or {}
    pats = compile_patterns(as_list(bench.get("match")) + as_list(bench.get("entrypoint")))
    starts = [float(r.get("start") or 0.0) for r in processes
              if pats and r.get("state") not in ("Z", "X", "x") and matches_program(r, pats)]
    return min((s for s in starts if s > 0.0), default=None)


# one job's stdout and stderr, written side by side (Slurm's/LSF's -o/-e, nohup-style redirects): the configured
# one's companion is the same run's output, however old
COMPANIONS = ((".out", ".err"), (".err", ".out"), ("stdout", "stderr"), ("stderr", "stdout"))
# a path a launcher names as where its workers' logs are ("detail running logs maybe found in log/workerlog.0",
# "see logs/rank_3.log", "written to outputs/train.err"): a relative path with a log-ish component
LOG_REF_RE = re.compile(r"(?<![\w/.-])((?:\./)?(?:[\w.-]+/)*[\w.-]*(?:log|\.out|\.err)[\w.-]*)(?![\w/-])",
                        re.IGNORECASE)
MAX_REFERENCED = 4


def companions(path: str) -> List[str]:
    """The other stream of a job whose stdout or stderr is ``path`` (``slurm-4411.out`` -> ``slurm-4411.err``)."""
    folder, name = os.path.split(path)
    out = []
    for mine, other in COMPANIONS:
        if mine in name:
            at = name.rfind(mine)
            out.append(os.path.join(folder, name[:at] + other + name[at + len(mine):]))
    return [p for p in out if p != path and os.path.isfile(p) and not os.path.islink(p)]


def referenced_logs(lines: List[str], folder: str, known: List[str]) -> List[str]:
    """Files a log names as logs (relative paths, resolved in the log's folder) that exist below that folder:
    regular files, never symlinks, not already read."""
    base = os.path.realpath(folder)
    out: List[str] = []
    for text in lines:
        if "/" not in text and "log" not in text.lower():
            continue
        for ref in LOG_REF_RE.findall(text):
            if "/" not in ref or ref.startswith("/"):
                continue
            path = os.path.normpath(os.path.join(folder, ref))
            real = os.path.realpath(path)
            if not real.startswith(base + os.sep) or path in known or path in out:
                continue
            if os.path.isfile(path) and not os.path.islink(path):
                out.append(path)
                if len(out) >= MAX_REFERENCED:
                    return out
    return out


def log_candidates(config: AgentConfig, files: List[Dict[str, Any]], now: float,
                   started: Optional[float] = None) -> List[str]:
    """Configured logs and the benchmark log first (with their companion streams, ``.out`` beside ``.err``),
    then the *.log files found in the watch dirs, newest first: modified within ``discover_max_age`` and, when
    the run's start is known, since it began (another program's old output is not this run's evidence)."""
    paths = [p for p in named_paths(config) if os.path.isfile(p)]
    paths.extend(c for p in list(paths) for c in companions(p) if c not in paths)
    max_age = float(config.get("discover_max_age") or DEFAULTS["discover_max_age"])
    oldest = now - max_age if started is None else max(now - max_age, started - LOG_SLACK)
    for f in files:
        if f["path"].endswith(LOG_SUFFIXES) and f["mtime"] >= oldest and f["path"] not in paths:
            paths.append(f["path"])
    return paths[:MAX_LOGS]


def read_log(path: str, configured: bool, max_chars: int) -> Dict[str, Any]:
    """One log's tail for the analysis; a file found in a watch dir is opened without following a symlink."""
    entry: Dict[str, Any] = {"path": path, "mtime": None, "size": None, "first_line": 1, "lines": [],
                             "error": None, "repaints": {}, "configured": configured}
    try:
        st = os.stat(path) if configured else os.lstat(path)
        entry["mtime"], entry["size"] = st.st_mtime, st.st_size
        entry["lines"], entry["first_line"] = signatures.read_tail(
            path, TAIL_LINES, max_line_chars=max_chars, repaints=entry["repaints"], follow=configured)
    except OSError as exc:
        entry["error"] = exc.strerror or str(exc)
    return entry


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
        return {"lines": [], "error": "dmesg exited %d: %s" % (proc.returncode, short(err, 120))}
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
        "xids": list(getattr(gpu_sampler, "xid_history", None) or []),  # NVML Xid events (nvmlhealth.py)
    }


def gather(
    config: AgentConfig,
    gpu_sampler: Any = None,
    now: Optional[float] = None,
    include_dmesg: bool = True,
    processes: Optional[List[Any]] = None,
    measure_seconds: float = activity.MEASURE_SECONDS,
) -> Dict[str, Any]:
    """Collect the facts ``analyze`` needs from this host.

    The benchmark's processes are read at the start and again at the end, ``measure_seconds`` apart at least
    (the log reading in between); with none alive there is no wait."""
    now = time.time() if now is None else now
    facts: Dict[str, Any] = {
        "now": now,
        "benchmark": dict(config.get("benchmark") or {}),
        "stall_seconds": float(config.get("stall_seconds") or DEFAULTS["stall_seconds"]),
        "startup_grace": float(config.get("startup_grace") or DEFAULTS["startup_grace"]),
        "dmesg_max_age": float(config.get("discover_max_age") or DEFAULTS["discover_max_age"]),
        "self_pids": [os.getpid()],
        "signatures": list(plain(config).get("signatures") or []),  # fleet.toml [[signature]] rows
        "processes": [],
        "processes_error": None,
    }
    if processes is None:
        try:
            from ..sample.procs import read_process_table

            processes = read_process_table(plain(config))
        except Exception as exc:  # a broken /proc must not break the diagnosis
            facts["processes_error"] = "%s: %s" % (type(exc).__name__, exc)
            processes = []
    facts["processes"] = processes
    meter = activity.Meter(activity.targets(facts["benchmark"], processes, facts["self_pids"]), measure_seconds)
    files = watched_files(config)
    facts["files"] = files[:50]
    named = set(named_paths(config))
    max_chars = int(config.get("max_line_chars") or 4096)
    paths = log_candidates(config, files, now, run_started(config, processes))
    facts["logs"] = [read_log(path, path in named, max_chars) for path in paths]
    for log in list(facts["logs"]):  # the worker logs a configured log names (a launcher's "see log/workerlog.0")
        if log["configured"] and not log["error"]:
            for ref in referenced_logs(log["lines"][-200:], os.path.dirname(log["path"]), paths):
                paths.append(ref)
                entry = read_log(ref, False, max_chars)  # read as found (no symlink), then counted as named
                entry["configured"], entry["referenced_by"] = True, log["path"]
                facts["logs"].append(entry)
    facts["dmesg"] = read_dmesg() if include_dmesg else {"lines": [], "error": "skipped"}
    facts["gpu"] = gpu_facts(gpu_sampler)
    facts["activity"] = meter.finish()
    return facts
