"""The agent's configuration: plain JSON data handed over by the console (never shell text).

``AgentConfig`` is its shape and ``DEFAULTS`` its one table of defaults: a value the agent falls back
on is read from here, never restated where it is used (the console's ``status_rules.py`` takes its start-up
grace from here too, so the diagnosis and the grid agree on when a young entrypoint counts as trouble).
"""

from __future__ import annotations

import base64
import copy
import json
import os
import re

# typing has TypedDict since 3.8
from typing import Any, Dict, List, Mapping, Optional, Pattern, Tuple, TypedDict, Union, cast


class BenchmarkConfig(TypedDict):
    """What ``restart`` starts and stops and what ``diagnose`` looks for."""

    start: Union[str, List[str], None]  # argv list, or a command string run by /bin/sh -c
    match: List[str]  # regex patterns matched against process command lines
    entrypoint: List[str]  # patterns for the entrypoint (the chain's parent)
    log: Optional[str]  # the started benchmark's output is appended here
    cwd: Optional[str]
    stop_timeout: float  # seconds between TERM and KILL
    env: Dict[str, str]  # extra environment for the started benchmark (data, never shell text)
    kind: Optional[str]  # "batch" | "server" | None (diagnose guesses: docs/diagnosis.md "Liveness")


class GpuConfig(TypedDict):
    simulate: Optional[Dict[str, Any]]  # None: real pynvml; a scenario dict drives console.agent.sample.nvml_sim
    dev_dir: str  # where the /dev/nvidiaN files are (tests point it at a temporary directory)
    lost_retry: Optional[float]  # seconds before a lost device is probed again (None: gpu.LOST_RETRY, 30 s)


class AgentConfig(TypedDict):
    """The whole config as ``load`` returns it: ``DEFAULTS`` with the console's values merged over it."""

    interval: float  # seconds between GPU samples
    procs_interval: float  # seconds between process-table readings when no task came or went (Agent._procs_due)
    log_interval: float  # seconds between log polls
    heartbeat_interval: float
    logs: List[str]  # files always followed (may not exist yet)
    watch_dirs: List[str]  # directories searched for recently modified *.log (their top; "DIR/**": below too)
    discover_max_age: float  # a *.log modified within this many seconds is followed
    backlog_lines: int  # lines of each log sent on connect
    max_line_chars: int
    benchmark: BenchmarkConfig
    gpu: GpuConfig
    proc_root: Optional[int]  # only the subtree under this pid (demo instances share one host)
    proc_backend: str  # "auto" (psutil when importable) | "psutil" | "proc"
    stall_seconds: float  # a download log unchanged this long counts as stalled (diagnose)
    startup_grace: float  # an entrypoint younger than this, with no benchmark yet, is still setting up


DEFAULTS: AgentConfig = {
    "interval": 1.0,
    "procs_interval": 2.0,
    "log_interval": 0.5,
    "heartbeat_interval": 5.0,
    "logs": [],
    "watch_dirs": ["/tmp"],
    "discover_max_age": 6 * 3600.0,
    "backlog_lines": 200,
    "max_line_chars": 4096,
    "benchmark": {
        "start": None,
        "match": [],
        "entrypoint": [],
        "log": None,
        "cwd": None,
        "stop_timeout": 10.0,
        "env": {},
        "kind": None,
    },
    "gpu": {"simulate": None, "dev_dir": "/dev", "lost_retry": None},
    "proc_root": None,
    "proc_backend": "auto",
    "stall_seconds": 120.0,
    "startup_grace": 90.0,
}
# The start-up grace as a plain constant, for the console side (console/core/status_rules.py) and docs.
STARTUP_GRACE_SECONDS: float = DEFAULTS["startup_grace"]


def _merge(base: Dict[str, Any], extra: Dict[str, Any]) -> Dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def merged(extra: Dict[str, Any]) -> AgentConfig:
    """``DEFAULTS`` with ``extra`` merged over it (nested tables key by key)."""
    return cast(AgentConfig, _merge(cast(Dict[str, Any], DEFAULTS), extra))


def plain(config: AgentConfig) -> Dict[str, Any]:
    """The same config object, typed for the samplers that still take a plain dict (gpu, procs, logs)."""
    return cast(Dict[str, Any], config)


def load(encoded: Optional[str] = None, path: Optional[str] = None) -> AgentConfig:
    """Build the config from the defaults plus base64 JSON (``--config``) or a JSON file."""
    extra: Dict[str, Any] = {}
    if path:
        with open(path, encoding="utf-8") as fh:
            extra = json.load(fh)
    elif encoded:
        extra = json.loads(base64.b64decode(encoded.encode("ascii")).decode("utf-8"))
    if not isinstance(extra, dict):
        raise ValueError("agent config must be a JSON object")
    return merged(extra)


def encode(config: Mapping[str, Any]) -> str:
    """The ``--config`` argument for a config dict: base64 of its JSON (safe in any shell)."""
    return base64.b64encode(json.dumps(config, separators=(",", ":")).encode("utf-8")).decode("ascii")


def as_list(value: Any) -> List[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


RECURSIVE = "/**"  # a watch_dirs entry ending so is searched in its subdirectories too


def watch_dirs(config: Mapping[str, Any]) -> List[Tuple[str, bool]]:
    """``(absolute directory, recursive)`` per ``watch_dirs`` entry: only the top of a directory is searched
    unless the entry ends in ``/**`` (another program's files in a subdirectory of /tmp are not this run's)."""
    out: List[Tuple[str, bool]] = []
    for entry in as_list(config.get("watch_dirs")):
        recursive = entry.endswith(RECURSIVE)
        directory = entry[: -len(RECURSIVE)] or os.sep if recursive else entry
        out.append((os.path.abspath(directory), recursive))
    return out


def compile_patterns(patterns: Any) -> List[Pattern[str]]:
    """Regexes from a pattern or a list; a pattern that is not a valid regex matches as plain text."""
    out = []
    for pat in as_list(patterns):
        try:
            out.append(re.compile(pat))
        except re.error:
            out.append(re.compile(re.escape(pat)))
    return out
