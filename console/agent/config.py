"""The agent's configuration: plain JSON data handed over by the console (never shell text)."""

from __future__ import annotations

import base64
import copy
import json
import re
from typing import Any, Dict, List, Optional, Pattern

DEFAULTS: Dict[str, Any] = {
    "interval": 1.0,  # seconds between GPU/process samples
    "log_interval": 0.5,  # seconds between log polls
    "heartbeat_interval": 5.0,
    "logs": [],  # files always followed (may not exist yet)
    "watch_dirs": ["/tmp"],  # directories searched for recently modified *.log
    "discover_max_age": 6 * 3600.0,  # a *.log modified within this many seconds is followed
    "backlog_lines": 200,  # lines of each log sent on connect
    "max_line_chars": 4096,
    "benchmark": {
        "start": None,  # argv list or a command string run by /bin/sh -c
        "match": [],  # regex patterns matched against process command lines
        "entrypoint": [],  # patterns for the entrypoint (the chain's parent)
        "log": None,
        "cwd": None,
        "stop_timeout": 10.0,
        "env": {},  # extra environment for the started benchmark (data, never shell text)
    },
    "gpu": {"simulate": None},  # None: real pynvml; a scenario dict drives console.agent.nvml_sim
    "proc_root": None,  # only the subtree under this pid (demo instances share one host)
    "proc_backend": "auto",  # "auto" (psutil when importable) | "psutil" | "proc"
    "stall_seconds": 120.0,  # a download log unchanged this long counts as stalled (diagnose)
}


def _merge(base: Dict[str, Any], extra: Dict[str, Any]) -> Dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def load(encoded: Optional[str] = None, path: Optional[str] = None) -> Dict[str, Any]:
    """Build the config from the defaults plus base64 JSON (``--config``) or a JSON file."""
    extra: Dict[str, Any] = {}
    if path:
        with open(path, encoding="utf-8") as fh:
            extra = json.load(fh)
    elif encoded:
        extra = json.loads(base64.b64decode(encoded.encode("ascii")).decode("utf-8"))
    if not isinstance(extra, dict):
        raise ValueError("agent config must be a JSON object")
    return _merge(DEFAULTS, extra)


def encode(config: Dict[str, Any]) -> str:
    """The ``--config`` argument for a config dict: base64 of its JSON (safe in any shell)."""
    return base64.b64encode(json.dumps(config, separators=(",", ":")).encode("utf-8")).decode("ascii")


def as_list(value: Any) -> List[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


def compile_patterns(patterns: Any) -> List[Pattern[str]]:
    """Regexes from a pattern or a list; a pattern that is not a valid regex matches as plain text."""
    out = []
    for pat in as_list(patterns):
        try:
            out.append(re.compile(pat))
        except re.error:
            out.append(re.compile(re.escape(pat)))
    return out
