"""Gathering: the facts a diagnosis needs, read from this host (no analysis here).

``gather(config, ...)`` returns a plain dict: the process table, recent files, log tails (with the
``\\r`` repaints of their last lines), the kernel log, a GPU sample, the benchmark's activity (CPU time and
I/O of its processes over the gathering, at least a second apart, and the TCP ports they listen on:
``activity.py``), and the settings the analysis uses (benchmark patterns and kind, stall_seconds, the start-up
grace, ``[[signature]]`` rows, the progress regex).
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any, Dict, List, Optional

from ..wire.config import DEFAULTS, AgentConfig, as_list, plain
from . import activity, signatures
from .text import short

TAIL_LINES = 2000
MAX_LOGS = 30
LOG_SUFFIXES = (".log", ".out", ".err")


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
    logs = []
    max_chars = int(config.get("max_line_chars") or 4096)
    for path in log_candidates(config, files, now):
        entry: Dict[str, Any] = {"path": path, "mtime": None, "size": None, "first_line": 1, "lines": [],
                                 "error": None, "repaints": {}}
        try:
            st = os.stat(path)
            entry["mtime"], entry["size"] = st.st_mtime, st.st_size
            entry["lines"], entry["first_line"] = signatures.read_tail(
                path, TAIL_LINES, max_line_chars=max_chars, repaints=entry["repaints"])
        except OSError as exc:
            entry["error"] = exc.strerror or str(exc)
        logs.append(entry)
    facts["logs"] = logs
    facts["dmesg"] = read_dmesg() if include_dmesg else {"lines": [], "error": "skipped"}
    facts["gpu"] = gpu_facts(gpu_sampler)
    facts["activity"] = meter.finish()
    return facts
