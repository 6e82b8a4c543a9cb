"""The fleet state that tells observers what it was fed: the one hook the TUI, ``serve`` and replay share.

- :class:`ObservedState` calls its observers' ``on_*`` methods (each optional) after each frame, link status,
  diagnosis, probe and tick, and on every change of settled status (``on_transition``; "connecting" in
  between is not one). The history, the recorder, the alerts' counters and serve's log observe it.
- :class:`ObservedAudit` is the audit log that also tells listeners what it recorded.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from console.core.audit import AuditLog
from console.core.state import FleetState

HOOKS = ("on_frame", "on_link", "on_diagnosis", "on_probe", "on_tick", "on_transition", "on_audit", "on_instance",
         "on_removed", "on_spend")


class ObservedState(FleetState):
    """A ``FleetState`` that calls observers' ``on_*`` methods (each optional) after it changed.

    The frame path adds one call per frame observer and a status comparison; with no observers it is the
    plain state plus a few attribute reads.
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        super().__init__(clock)
        self.hooks: dict[str, list[Callable[..., Any]]] = {h: [] for h in HOOKS}
        self.seen: dict[str, str] = {}  # the last settled status per instance
        self.known: set[str] = set()  # the instances observers were told about (a reload drops some)

    def observe(self, observer: Any) -> None:
        for hook in HOOKS:
            method = getattr(observer, hook, None)
            if method is not None:
                self.hooks[hook].append(method)

    def _check(self, name: str, now: float) -> None:
        inst = self.instances.get(name)
        if inst is None:
            return
        status = inst.status
        old = self.seen.get(name, "connecting")
        if status != old and status != "connecting":
            self.seen[name] = status
            for hook in self.hooks["on_transition"]:
                hook(name, old, status, inst.status_detail, now)

    def _spent(self, inst: Any, mode: str, at: float) -> None:
        """A spend mode change (console/core/spend.py): ``on_spend(name, mode, at, price)``."""
        for hook in self.hooks["on_spend"]:
            hook(inst.name, mode, at, inst.instance.price_per_hour)

    def end_watch(self, now: float) -> None:
        """The console stops watching: ``on_spend(name, "end", now, price)`` for every instance."""
        for name, inst in self.instances.items():
            for hook in self.hooks["on_spend"]:
                hook(name, "end", now, inst.instance.price_per_hour)

    def add_instance(self, instance: Any) -> Any:
        """An instance added (or changed) while observed, e.g. by a reload: ``on_instance(instance, now)``."""
        inst = super().add_instance(instance)
        self.known.add(instance.name)
        for hook in self.hooks["on_instance"]:
            hook(instance, self.clock())
        return inst

    def forget_removed(self, now: float) -> None:
        """Instances a reload took out of the state (``fleet_watch.apply`` pops them): ``on_removed(name, now)``."""
        for name in [n for n in self.known if n not in self.instances]:
            self.known.discard(name)
            self.seen.pop(name, None)
            for hook in self.hooks["on_removed"]:
                hook(name, now)

    def apply_frame(self, name: str, frame: Any, now: float | None = None) -> None:
        if now is None:
            now = self.clock()
        super().apply_frame(name, frame, now)
        for hook in self.hooks["on_frame"]:
            hook(name, frame, now)
        self._check(name, now)

    def set_link_status(self, name: str, status: str, detail: str = "") -> None:
        super().set_link_status(name, status, detail)
        now = self.clock()
        for hook in self.hooks["on_link"]:
            hook(name, status, detail, now)
        self._check(name, now)

    def set_diagnosis(self, name: str, data: Any) -> None:
        super().set_diagnosis(name, data)
        now = self.clock()
        for hook in self.hooks["on_diagnosis"]:
            hook(name, data, now)
        self._check(name, now)

    def set_probe_result(self, name: str, probe: str, data: Any) -> None:
        super().set_probe_result(name, probe, data)
        now = self.clock()
        for hook in self.hooks["on_probe"]:
            hook(name, probe, data, now)

    def tick(self, now: float | None = None) -> None:
        if now is None:
            now = self.clock()
        super().tick(now)
        self.forget_removed(now)
        for hook in self.hooks["on_tick"]:
            hook(now)
        for name in self.instances:
            self._check(name, now)


class ObservedAudit(AuditLog):
    """The audit log that also tells the monitoring (restart counters, history) what it recorded."""

    def __init__(self, path: Path | None = None) -> None:
        super().__init__(path)
        self.listeners: list[Callable[[dict[str, Any]], None]] = []

    def _announce(self, entry: dict[str, Any]) -> None:
        """Every record written (an action's outcome, a dead console's intent reconciled as ``unknown``)."""
        for listener in self.listeners:
            with contextlib.suppress(Exception):
                listener(entry)
