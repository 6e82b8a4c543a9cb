"""The seam between the UI and the core: what the console (console/ui, widgets/) may ask of the fleet.

``FleetControl`` is every call the app and its widgets make on their controller; ``FleetController``
(console/core/controller.py) and the replay's ``ReplaySource`` (console/monitor/replay.py) satisfy it, mypy
checks both (below, and in replay.py). ``OfflineControl`` answers it for a fleet with no hosts to ask.
``HistoryReader`` is what the UI reads from the history file (older chart points, the event timeline), so
that no widget opens the SQLite file itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from console.core.actions import ActionError, ReadOnlyError
from console.core.audit import AuditLog
from console.core.state import FleetState
from console.inventory.probes import ProbeEntry

if TYPE_CHECKING:
    from console.agent.wire.protocol import RestartPlan
    from console.core.controller import FleetController, RestartOutcome
    from console.core.restart_plan import PlanOutcome

# GPU index -> field (util, temp, power, mem) -> (minute start, min, avg, max), oldest first
GpuSeries = dict[int, dict[str, list[tuple[float, int, int, int]]]]


class HistoryReader(Protocol):
    """The history file's queries the UI makes; each may run in a worker thread."""

    def gpu_series(self, name: str, since: float) -> GpuSeries:
        """``name``'s GPU minute points since ``since`` (``time.time()``)."""
        ...

    def timeline(self, since: float) -> list[dict[str, Any]]:
        """Every instance's events since ``since``, oldest first (``ts``, ``instance``, ``kind``, ...)."""
        ...


class KeyOffer(Protocol):
    """An unknown host key an instance offered (console.link.hostkeys.HostKeyOffer), as the UI shows it."""

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...

    @property
    def known_hosts(self) -> Path: ...

    @property
    def changed(self) -> bool: ...

    @property
    def fingerprint(self) -> str: ...


class FleetControl(Protocol):
    """What the UI may ask of the core: the state it shows, the operator's actions, the history."""

    @property
    def state(self) -> FleetState: ...

    @property
    def read_only(self) -> bool: ...

    @property
    def demo(self) -> bool: ...

    @property
    def live(self) -> bool:
        """Hosts can be asked now (a log's older lines, a grep); False for a replay."""
        ...

    @property
    def detail_on_demand(self) -> bool:
        """Instances out of view may send a summary (console/core/detail.py); False where every stream is
        wanted in full (a metrics exporter, a recording) or nothing streams."""
        ...

    @property
    def fleet_source(self) -> str:
        """The fleet file (or what stands for it), for the empty grid's hint."""
        ...

    @property
    def audit(self) -> AuditLog | None: ...

    @property
    def keeps_history(self) -> bool:
        """A history file is kept: ``gpu_history`` and ``history_events`` read it."""
        ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def reload(self) -> str: ...

    async def diagnose(self, name: str) -> dict[str, Any]: ...

    async def restart_plans(self, names: list[str]) -> dict[str, PlanOutcome]: ...

    async def restart(self, names: list[str], origin: str | None = None, *,
                      plans: dict[str, RestartPlan] | None = None) -> dict[str, RestartOutcome]: ...

    def probe_specs(self, name: str | None = None) -> list[ProbeEntry]: ...

    async def probe(self, name: str, probe_name: str) -> dict[str, Any]: ...

    async def signal_process(self, name: str, pid: int, sig: str, origin: str | None = None,
                             start: float | None = None) -> dict[str, Any]: ...

    async def read_log(self, name: str, path: str, before_line: int | None, n: int = 200) -> dict[str, Any]: ...

    async def grep_log(self, name: str, path: str, pattern: str, regex: bool = False) -> dict[str, Any]: ...

    def set_detail(self, name: str, level: str) -> bool: ...

    def keep_open(self, name: str | None) -> None: ...

    def set_view(self, names: Iterable[str]) -> None:
        """The instances the operator sees now (their streams come in full, the others' merged)."""
        ...

    def retry_at(self, name: str) -> float | None:
        """When ``name``'s failing link tries again (``time.time()``), None when it is not waiting to."""
        ...

    def host_key_offer(self, name: str) -> KeyOffer | None: ...

    async def accept_host_key(self, name: str) -> str: ...

    def gpu_history(self, name: str, since: float) -> GpuSeries | None:
        """``name``'s GPU minute points since ``since``; None when no history is kept (may run in a thread)."""
        ...

    def history_events(self, since: float) -> list[dict[str, Any]]:
        """The history file's events since ``since``, oldest first; empty when no history is kept."""
        ...


class OfflineControl:
    """``FleetControl`` for a fleet with no hosts to ask (a replay, a benchmark's synthetic fleet): read-only,
    no links, no history, every action refused. A subclass gives ``state``, ``start()`` and ``stop()``."""

    read_only = True
    demo = False
    live = False
    detail_on_demand = False
    fleet_source = ""
    audit: AuditLog | None = None
    keeps_history = False

    async def reload(self) -> str:
        return "no fleet file here: not reloaded"

    async def diagnose(self, name: str) -> dict[str, Any]:
        raise ActionError(f"{name}: no host to diagnose here")

    async def restart_plans(self, names: list[str]) -> dict[str, PlanOutcome]:
        raise ReadOnlyError("restart")

    async def restart(self, names: list[str], origin: str | None = None, *,
                      plans: dict[str, RestartPlan] | None = None) -> dict[str, RestartOutcome]:
        raise ReadOnlyError("restart")

    def probe_specs(self, name: str | None = None) -> list[ProbeEntry]:
        return []

    async def probe(self, name: str, probe_name: str) -> dict[str, Any]:
        raise ActionError(f"{name}: no host to run probe {probe_name} on here")

    async def signal_process(self, name: str, pid: int, sig: str, origin: str | None = None,
                             start: float | None = None) -> dict[str, Any]:
        raise ReadOnlyError(f"{sig} to pid {pid}")

    async def read_log(self, name: str, path: str, before_line: int | None, n: int = 200) -> dict[str, Any]:
        raise ActionError(f"{name}: no agent to read {path} from")

    async def grep_log(self, name: str, path: str, pattern: str, regex: bool = False) -> dict[str, Any]:
        raise ActionError(f"{name}: no agent to grep {path} on")

    def set_detail(self, name: str, level: str) -> bool:
        return False

    def keep_open(self, name: str | None) -> None:
        return None

    def set_view(self, names: Iterable[str]) -> None:
        return None

    def retry_at(self, name: str) -> float | None:
        return None

    def host_key_offer(self, name: str) -> KeyOffer | None:
        return None

    async def accept_host_key(self, name: str) -> str:
        raise ActionError(f"{name}: no unknown host key to accept")

    def gpu_history(self, name: str, since: float) -> GpuSeries | None:
        return None

    def history_events(self, since: float) -> list[dict[str, Any]]:
        return []


if TYPE_CHECKING:

    def _controller_conforms(controller: FleetController) -> FleetControl:
        return controller  # mypy: FleetController is a FleetControl (ReplaySource: console/monitor/replay.py)


__all__ = ["FleetControl", "GpuSeries", "HistoryReader", "KeyOffer", "OfflineControl"]
