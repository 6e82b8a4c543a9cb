"""The probe menu: the agent's built-in probes and the keys they take (custom probes from the fleet file
may not reuse them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProbeEntry:
    """A probe the menu offers: a built-in agent probe, or a custom command from the fleet file."""

    name: str
    key: str
    title: str
    builtin: bool = True
    command: str = ""
    timeout: float = 20.0


BUILTIN_PROBES = (
    ProbeEntry("tree", "1", "Process tree (state, wchan, cpu, rss)"),
    ProbeEntry("recent_files", "2", "Recently modified files in watched dirs"),
    ProbeEntry("resources", "3", "Disk, memory and load"),
    ProbeEntry("dmesg", "4", "Kernel log tail (Xid, OOM killer)"),
    ProbeEntry("nvidia_smi", "5", "nvidia-smi"),
)
BUILTIN_PROBE_KEYS = frozenset(p.key for p in BUILTIN_PROBES)
