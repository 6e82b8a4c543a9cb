"""Is this process the benchmark? One answer for diagnose, restart and the console's grid.

A ``[benchmark] match`` pattern names a *program*: the process's ``argv[0]``, or the script an interpreter
runs (``python3 /usr/local/bin/torchrun ...`` is ``torchrun``, ``bash /root/entrypoint.sh`` is
``entrypoint.sh``). A match must begin inside that program's name, so text that only appears in the
arguments never counts: ``tail -f /tmp/cuzk-daemon.log``, ``watch pgrep -af cuzk-bench`` or
``bash -c "grep ... benchmark.sh"`` are not the benchmark. A pattern may go on into the arguments
(``cuzk-bench \\w+ /data/run1`` picks one run of several), as long as it starts in the program.

Viewers, editors, pagers, grep and friends, ``watch`` and ``sshd`` are never matches, whatever their
command line says. Stdlib only (this module travels with the agent).
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterable, List, Mapping, Optional, Pattern, Tuple

# Programs that look at, search or relay a benchmark but never are one.
NEVER = frozenset((
    "tail", "less", "more", "most", "pg", "view", "vi", "vim", "nvim", "nano", "pico", "emacs", "emacsclient", "ed",
    "joe", "micro", "mcedit", "cat", "tac", "head", "bat", "batcat", "grep", "egrep", "fgrep", "zgrep", "rg", "ag",
    "ack", "watch", "sshd", "ssh", "scp", "sftp", "rsync", "sudo", "su", "pgrep", "pkill", "kill", "killall", "ps",
    "top", "htop", "btop", "atop", "nvtop", "nvidia-smi", "journalctl", "lnav", "multitail", "tmux", "screen",
    "script", "strace", "ltrace", "gdb", "lsof", "file", "stat", "wc", "sort", "uniq", "awk", "gawk", "mawk", "sed",
    "cut", "tee", "xargs", "find", "locate", "ls",
))
_PYTHON_RE = re.compile(r"^(?:python|pypy)[\d.]*[mdu]?$")
_SHELLS = frozenset(("sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox"))
_OTHER_INTERPRETERS = frozenset(("perl", "ruby", "node", "nodejs", "Rscript", "julia", "lua", "php", "tclsh"))
_LAUNCHERS = frozenset(("env", "nohup", "setsid", "stdbuf", "nice", "ionice", "chrt", "taskset", "numactl",
                        "time", "exec"))
# options that take the next word as their value
_PY_ARG_OPTS = frozenset(("-W", "-X", "-Q"))
_SH_ARG_OPTS = frozenset(("-o", "+o", "-O", "+O", "--rcfile", "--init-file"))
_TOKEN_RE = re.compile(r"\S+")


def _program_basename(token: str) -> str:
    return os.path.basename(token.rstrip(":"))


def _tokens(cmdline: str) -> List[Tuple[int, str]]:
    return [(m.start(), m.group(0)) for m in _TOKEN_RE.finditer(cmdline)]


def _script_index(tokens: List[Tuple[int, str]], start: int, kind: str) -> Optional[int]:
    """The index of the script an interpreter runs (``python3 -u x.py``), or None (``-c``, ``-m``, stdin)."""
    i = start
    while i < len(tokens):
        word = tokens[i][1]
        if word == "--":
            return i + 1 if i + 1 < len(tokens) else None
        if kind == "python" and word == "-m":
            return i + 1 if i + 1 < len(tokens) else None  # the module is the program
        if word == "-c" or (kind == "python" and word.startswith("-c")):
            return None
        if word.startswith(("-", "+")) and word not in ("-", "+"):
            if (kind == "python" and word in _PY_ARG_OPTS) or (kind == "shell" and word in _SH_ARG_OPTS):
                i += 2
            else:
                i += 1
            continue
        return i
    return None


def program_views(cmdline: str, name: str = "") -> List[Tuple[str, int]]:
    """``(text, program_length)`` pairs: the command line from the program on, and how many of its first
    characters are the program's name. Full path and basename both; ``name`` (comm) when no command line."""
    tokens = _tokens(cmdline or "")
    if not tokens:
        return [(name, len(name))] if name else []
    i = 0
    while i < len(tokens):  # env VAR=1 nohup prog ...: the launcher is not the program
        base = _program_basename(tokens[i][1])
        if base not in _LAUNCHERS:
            break
        i += 1
        while i < len(tokens) and ("=" in tokens[i][1] or tokens[i][1].startswith("-")):
            i += 1
    if i >= len(tokens):
        i = 0
    base = _program_basename(tokens[i][1])
    kind = "python" if _PYTHON_RE.match(base) else "shell" if base in _SHELLS else (
        "other" if base in _OTHER_INTERPRETERS else "")
    if kind:
        script = _script_index(tokens, i + 1, kind)
        if script is not None:  # else the interpreter itself (``bash -c "..."``): its arguments are text
            i = script
    pos, token = tokens[i]
    text = cmdline[pos:]
    views = [(text, len(token))]
    base = os.path.basename(token)
    if base != token and base:
        views.append((base + text[len(token):], len(base)))
    return views


def program_name(rec: Mapping[str, Any]) -> str:
    """The basename of the program a process runs (the script for an interpreter)."""
    views = program_views(str(rec.get("cmdline") or ""), str(rec.get("name") or ""))
    if not views:
        return ""
    text, length = views[-1]
    return _program_basename(text[:length])


def is_viewer(rec: Mapping[str, Any]) -> bool:
    """A pager, editor, grep, watch, sshd...: never the benchmark."""
    views = program_views(str(rec.get("cmdline") or ""), str(rec.get("name") or ""))
    tokens = _tokens(str(rec.get("cmdline") or ""))
    first = _program_basename(tokens[0][1]) if tokens else str(rec.get("name") or "")
    if first in NEVER or first.split(":", 1)[0] in NEVER:
        return True
    return bool(views) and _program_basename(views[-1][0][: views[-1][1]]) in NEVER


def matches_program(rec: Mapping[str, Any], patterns: Iterable[Pattern[str]]) -> bool:
    """Does any pattern match this process's program (a match that begins inside the program's name)?"""
    pats = list(patterns)
    if not pats or is_viewer(rec):
        return False
    views = program_views(str(rec.get("cmdline") or ""), str(rec.get("name") or ""))
    for pat in pats:
        for text, length in views:
            m = pat.search(text)
            if m is not None and m.start() < max(1, length):
                return True
    return False
