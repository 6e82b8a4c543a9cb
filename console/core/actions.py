"""What an operator can do to instances, and the rules around it (read-only, built-in probes)."""

from __future__ import annotations

from dataclasses import dataclass


class ActionError(Exception):
    """An action could not be carried out; the text is one line for the operator."""


class ReadOnlyError(ActionError):
    """Destructive actions are disabled (``--read-only``)."""

    def __init__(self, action: str = "restart") -> None:
        super().__init__(f"{action} refused: the console runs with --read-only")


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
