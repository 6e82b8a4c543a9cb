"""The one table of instance statuses: name, rank, badge, colour and whether it is trouble.

The fleet state derives a status per instance (``console/core/status_rules.py``); the grid, the instance screen, the
header and the command line read its badge, colour and rank from here, so adding a status is one row.
Link statuses (what the SSH link reports) are a second, smaller table: every bad one shows as UNREACHABLE
with its own label in the detail.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class Status:
    """One derived status. ``rank`` sorts trouble first; ``theme_var`` names the TCSS variable of its colour."""

    name: str
    rank: int
    badge: str
    theme_var: str
    trouble: bool  # counted as trouble in the header and filters
    failing: bool  # counted as "failing" in the fleet totals


FAILED: Final = "failed"
NEEDS_ACTION: Final = "needs_action"
UNREACHABLE: Final = "unreachable"
BENCHMARK_DOWN: Final = "benchmark_down"
STALE: Final = "stale"
GPU_IDLE: Final = "gpu_idle"
CONNECTING: Final = "connecting"
OK: Final = "ok"

# Worst first: the order is the rank.
TABLE: Final[tuple[Status, ...]] = (
    Status(FAILED, 0, "FAILED", "error", trouble=True, failing=True),
    # a key, known_hosts entry or file on this side to fix: retrying alone will not help, the operator must act
    Status(NEEDS_ACTION, 1, "NEEDS ACTION", "warning", trouble=True, failing=True),
    Status(UNREACHABLE, 2, "UNREACHABLE", "error", trouble=True, failing=True),
    Status(BENCHMARK_DOWN, 3, "BENCH DOWN", "warning", trouble=True, failing=True),
    Status(STALE, 4, "STALE", "status-stale", trouble=True, failing=False),
    Status(GPU_IDLE, 5, "GPU IDLE", "status-idle", trouble=True, failing=False),
    Status(CONNECTING, 6, "CONNECTING", "status-connecting", trouble=False, failing=False),
    Status(OK, 7, "OK", "success", trouble=False, failing=False),
)
BY_NAME: Final[dict[str, Status]] = {s.name: s for s in TABLE}
STATUSES: Final[tuple[str, ...]] = tuple(s.name for s in TABLE)
RANK: Final[dict[str, int]] = {s.name: s.rank for s in TABLE}
TROUBLE: Final[frozenset[str]] = frozenset(s.name for s in TABLE if s.trouble)
FAILING: Final[frozenset[str]] = frozenset(s.name for s in TABLE if s.failing)
BADGES: Final[dict[str, str]] = {s.name: s.badge for s in TABLE}
THEME_VARS: Final[dict[str, str]] = {s.name: s.theme_var for s in TABLE}

# Colours of the theme variables that are ours (Textual's own themes lack them; every theme gets these defaults).
THEME_DEFAULTS: Final[dict[str, str]] = {
    "status-stale": "#af87ff",
    "status-idle": "#ffd75f",
    "status-connecting": "#8a8a8a",
}

# What the link reports (console/link): connecting, connected, or one of the bad ones with its label.
LINK_CONNECTING: Final = "connecting"
LINK_CONNECTED: Final = "connected"
LINK_LABELS: Final[dict[str, str]] = {
    "unreachable": "unreachable",
    "auth_failed": "auth failed",
    "needs_action": "needs action",  # a local file or key to fix (the detail names it); not retried until reload
    "hostkey_unknown": "unknown host key",  # the detail has its fingerprint; the operator may accept it
    "hostkey_changed": "host key changed",  # refused; the detail has both fingerprints
    "hostkey_mismatch": "host key mismatch",  # older name of hostkey_changed
    "agent_failed": "agent failed",
    "closed": "link closed",
}
BAD_LINK: Final[frozenset[str]] = frozenset(LINK_LABELS)
# The derived status of each bad link status: what the operator must fix here is NEEDS ACTION, the rest UNREACHABLE.
LINK_DERIVED: Final[dict[str, str]] = {
    link: NEEDS_ACTION if link in ("auth_failed", "needs_action", "hostkey_unknown", "hostkey_changed",
                                   "hostkey_mismatch") else UNREACHABLE
    for link in LINK_LABELS
}
LINK_STATUSES: Final[frozenset[str]] = frozenset((LINK_CONNECTING, LINK_CONNECTED)) | BAD_LINK


def rank(name: str) -> int:
    """The sort rank of a status name; unknown names sort last."""
    return RANK.get(name, len(TABLE))


def badge(name: str) -> str:
    """The badge text of a status name (its upper-cased name when unknown)."""
    status = BY_NAME.get(name)
    return status.badge if status else name.upper()
