"""The host side of agentless mode: is python3 there, the host's facts, and how poll output is cut up.

- ``probe_command``/``parse_probe``: what the link runs first (is the instance's python there and 3.8+, is
  the agent uploaded, the host's name); ``agentless_reason`` says why a host runs without the agent;
- ``FACTS_COMMAND``/``parse_facts`` (once per connection): clock ticks, page size, boot time, ``/proc``;
- sections: every poll command prints ``\n@@NONCE kind args\n`` before each part of its output
  (``section_fn``), and ``sections`` splits it again; the nonce keeps a log line from faking a section.
Every command carries ``MARK``: its processes (and their children) are left out of ``procs``.
"""

from __future__ import annotations

import secrets
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

AGENT_VERSION = "agentless"
MARK = "fleet-console-agentless"  # in every command agentless mode builds: its processes are left out of `procs`
MIN_INTERVAL = 2.0  # seconds between polls, whatever the instance's interval
MAX_INTERVAL = 10.0  # heartbeats come with the polls: keep them well inside the link's silence timeout
NEEDS_PYTHON = "needs python3 on the host (agentless mode)"
OPS = ("full_procs", "ping", "stop")  # answered without python; every other op fails with NEEDS_PYTHON
MIN_PYTHON = (3, 8)
POLL_TIMEOUT = 20.0  # procs and logs: past this the poll failed and the session reconnects


# -- sections: commands print "\n@@NONCE kind args\n" before each part of their output ------------------------


def new_nonce() -> str:
    return secrets.token_hex(8)


def section_fn(nonce: str) -> str:
    """A shell function ``S kind args...`` that prints a section header for ``sections``."""
    return "S() { printf '\\n@@%s %s\\n' " + shlex.quote(nonce) + ' "$*"; }; '


def sections(output: bytes, nonce: str) -> list[tuple[str, list[str], bytes]]:
    """``(kind, args, payload)`` for each section of a command's output, in order."""
    out = []
    for part in (b"\n" + output).split(b"\n@@" + nonce.encode() + b" ")[1:]:
        head, _, payload = part.partition(b"\n")
        words = head.decode("utf-8", "replace").split()
        if words:
            out.append((words[0], words[1:], payload))
    return out


# -- host facts -----------------------------------------------------------------------------------------------


def probe_command(python: str, agent_path: str) -> str:
    """What the link runs first: is ``python`` there and 3.8+, is the agent uploaded, the host's name."""
    py = shlex.quote(python)
    version = shlex.quote('import sys; sys.stdout.write("%d.%d.%d" % tuple(sys.version_info[:3]))')
    return (
        f": {MARK}; "
        f"if command -v {py} >/dev/null 2>&1; then "
        f"if v=$({py} -c {version} 2>/dev/null); then echo \"@@fleet python $v\"; "
        "else echo '@@fleet python broken'; fi; "
        "else echo '@@fleet python none'; fi; "
        f"test -s {shlex.quote(agent_path)} && echo '@@fleet agent present'; "
        'echo "@@fleet host $(uname -n 2>/dev/null)"; '
        "exit 0"
    )


@dataclass
class HostProbe:
    python: str  # "ok" | "none" | "broken" | "old" | "unknown" (the probe printed nothing readable)
    python_version: str | None
    agent_present: bool
    host: str

    @property
    def python_ok(self) -> bool:
        return self.python == "ok"


def parse_probe(text: str) -> HostProbe:
    python, version, present, host = "unknown", None, False, ""
    for line in text.splitlines():
        if not line.startswith("@@fleet "):
            continue
        words = line.split()[1:]
        if words[:1] == ["python"] and len(words) >= 2:
            value = words[1]
            if value in ("none", "broken"):
                python = value
            else:
                version = value
                try:
                    parts = tuple(int(x) for x in value.split(".")[:2])
                except ValueError:
                    python = "broken"
                else:
                    python = "ok" if parts >= MIN_PYTHON else "old"
        elif words[:2] == ["agent", "present"]:
            present = True
        elif words[:1] == ["host"]:
            host = " ".join(words[1:])
    return HostProbe(python, version, present, host)


def agentless_reason(probe: HostProbe, python: str) -> str:
    """Why this host runs without the agent, for the link's status detail."""
    if probe.python == "old":
        return f"{python} on the host is {probe.python_version}, the agent needs {'.'.join(map(str, MIN_PYTHON))}+"
    if probe.python == "broken":
        return f"{python} on the host does not run"
    if python == "python3":
        return "no python3 on the host"
    return f"no python3 on the host: {python} not found"


FACTS_COMMAND = (
    f": {MARK}; "
    'echo "@@fleet clk $(getconf CLK_TCK 2>/dev/null)"; '
    'echo "@@fleet page $(getconf PAGESIZE 2>/dev/null || getconf PAGE_SIZE 2>/dev/null)"; '
    "if [ -r /proc/self/stat ] && [ -r /proc/uptime ]; then echo '@@fleet proc yes'; "
    "sed -n 's/^btime /@@fleet btime /p' /proc/stat 2>/dev/null; fi; "
    "exit 0"
)


@dataclass
class HostFacts:
    clk_tck: float = 100.0
    page_size: int = 4096
    have_proc: bool = False
    btime: float = 0.0


def parse_facts(text: str) -> HostFacts:
    facts = HostFacts()
    for line in text.splitlines():
        words = line.split()
        if len(words) < 3 or words[0] != "@@fleet":
            continue
        key, value = words[1], words[2]
        try:
            if key == "clk" and int(value) > 0:
                facts.clk_tck = float(int(value))
            elif key == "page" and int(value) > 0:
                facts.page_size = int(value)
            elif key == "btime":
                facts.btime = float(value)
        except ValueError:
            continue
        if key == "proc" and value == "yes":
            facts.have_proc = True
    return facts


def poll_interval(config: Mapping[str, Any]) -> float:
    try:
        interval = float(config.get("interval") or 1.0)
    except (TypeError, ValueError):
        interval = 1.0
    return min(MAX_INTERVAL, max(MIN_INTERVAL, interval))
