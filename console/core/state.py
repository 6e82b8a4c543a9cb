"""Fleet state: plain data fed by the links (frames, link status, diagnoses), read by the UI.

No Textual here. Everything is bounded: GPU history rings (10 minutes at 1 Hz), log rings per file,
a capped number of followed files, error and event lists. ``apply_frame`` is on the hot path
(hundreds of instances x 8 GPUs at 1 Hz) and stays a handful of dict updates and deque appends.

The UI asks ``take_dirty()`` for the names changed since it last painted, ``take_events()`` for the
"got worse" transitions it turns into notifications, and calls ``tick()`` about once a second so that
time-based states (stale, idle GPUs) are re-derived even when no frame arrives.

``FleetState`` is the fleet and its change tracking; the rest lives beside it and is re-exported here:
one instance's record (``instance.py``), its GPU and log rings (``rings.py``), the frame handlers
(``frame_handlers.py``), the status rules (``status_rules.py``) and the header totals (``totals.py``).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Callable, Deque, Dict, Iterable, List, Optional, Set, Tuple

from console.agent.wire.protocol import DiagnosisResult, Frame, ProbeResult
from console.core import predicates
from console.core.frame_handlers import FRAME_HANDLERS, IDLE_UTIL, MAX_LOG_FILES
from console.core.instance import (
    BAD_SEVERITIES,
    BENCH_DOWN_CODES,
    DEFAULT_HEARTBEAT,
    FLAP_WINDOW,
    MAX_ERRORS,
    SETTLE_SECONDS,
    STALE_FACTOR,
    InstanceState,
    ProbeView,
)
from console.core.rings import GAP_MARKER, HISTORY_SECONDS, LOG_RING_LINES, GpuState, LogRing
from console.core.spend import SpendMeter, mode_of
from console.core.status import RANK
from console.core.status_rules import (
    DEFAULT_CONNECT_TIMEOUT,
    FLAP_NOTICES,
    IDLE_WINDOW,
    RENOTIFY_AFTER,
    STABLE_FOR,
    derive_status,
    is_flapping,
)
from console.core.text_safety import clean, clean_deep, clean_lines
from console.core.totals import BUSY_UTIL, FleetTotals
from console.inventory import Instance

__all__ = [  # the names other modules import from here (the ones defined elsewhere are re-exported)
    "BAD_SEVERITIES",
    "BENCH_DOWN_CODES",
    "BUSY_UTIL",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_HEARTBEAT",
    "FLAP_NOTICES",
    "FLAP_WINDOW",
    "GAP_MARKER",
    "HISTORY_SECONDS",
    "IDLE_UTIL",
    "IDLE_WINDOW",
    "LOG_RING_LINES",
    "MAX_ERRORS",
    "MAX_EVENTS",
    "MAX_LOG_FILES",
    "MAX_PROBE_LINES",
    "RENOTIFY_AFTER",
    "SETTLE_SECONDS",
    "STABLE_FOR",
    "STALE_FACTOR",
    "FleetState",
    "GpuState",
    "InstanceState",
    "LogRing",
    "ProbeView",
    "matches",
]

MAX_EVENTS = 200
# An instance whose status was derived less than this long ago (a frame came) is current to within a tick:
# the tick (about once a second) leaves it. A frame of a third of a thousand hosts comes in any second, so the
# tick derives two thirds of them, not all; what time alone changes (stale, a connect timeout, the start-up
# grace, all seconds to minutes) is at most this much later than its own second.
TICK_FRESH = 1.0
MAX_PROBE_LINES = 2000


class FleetState:
    """All instances; fed by links and the controller, read by the UI."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.instances: Dict[str, InstanceState] = {}
        self._dirty: Set[str] = set()
        self._events: Deque[Tuple[str, str, str, str]] = deque(maxlen=MAX_EVENTS)
        self.order_version = 0  # bumped when statuses (hence the ordering) change
        self.frames = 0
        self._totals = FleetTotals()  # totals(): running sums, recounted per changed instance
        self._currency = "$"  # [defaults] currency: how the money is written (each instance has it too)
        self._notes: Deque[Tuple[str, str]] = deque(maxlen=MAX_EVENTS)  # (text, severity): the UI toasts them

    @property
    def currency(self) -> str:
        return self._currency

    @currency.setter
    def currency(self, value: str) -> None:
        self._currency = value
        for inst in self.instances.values():
            inst.currency = value
        self.mark_dirty(self.instances)

    # -- feeding ----------------------------------------------------------------------------------
    def add_instance(self, instance: Instance) -> InstanceState:
        inst = self.instances.get(instance.name)
        if inst is None:
            inst = InstanceState(instance)
            inst.meter = SpendMeter(self.clock())  # the console begins watching it (console/core/spend.py)
            inst.currency = self._currency
            self.instances[inst.name] = inst
            self.order_version += 1
        else:
            inst.adopt(instance)  # a reload: everything the record says, patterns included, applies now
            inst.quiet_connect = True  # its new link's connect is the reload's, no reconnect (the flap counter)
            inst.settle_until = self.clock() + SETTLE_SECONDS
        now = self.clock()
        self._touch(inst, now)
        self._rederive(inst, now)
        return inst

    def get(self, name: str) -> Optional[InstanceState]:
        return self.instances.get(name)

    def __contains__(self, name: str) -> bool:
        return name in self.instances

    def __len__(self) -> int:
        return len(self.instances)

    def _touch(self, inst: InstanceState, now: float) -> None:
        inst.version += 1
        inst.updated_at = now
        self._dirty.add(inst.name)
        self._totals.note_changed(inst.name)

    def _rederive(self, inst: InstanceState, now: float) -> None:
        inst.derived_at = now
        status, detail = derive_status(inst, now)
        old = inst.status
        if status != old:
            inst.status = status
            self.order_version += 1
            if status != "connecting" and inst.link_status != "closed":  # (closed: the console stopped it, a reload)
                # Compare with the last settled status, so a host that keeps failing to reconnect
                # (unreachable -> connecting -> unreachable ...) reports once, not on every retry.
                before = inst.settled_status
                first_bad = before is None and status in ("unreachable", "needs_action", "failed")
                worse = first_bad or (before is not None and RANK[status] < RANK.get(before, 99))
                if worse and not is_flapping(inst, status, now):
                    self._events.append((inst.name, before or old, status, detail))
                    inst.notified.setdefault(status, deque(maxlen=FLAP_NOTICES)).append(now)
                inst.settled_status, inst.settled_detail = status, detail
        if status != old or detail != inst.status_detail:
            inst.status_detail = detail
            self._touch(inst, now)
        mode, since = mode_of(inst, now)
        at = inst.meter.update(mode, since)
        if at is not None:
            self._touch(inst, now)
            self._spent(inst, mode, at)

    def _spent(self, inst: InstanceState, mode: str, at: float) -> None:
        """``inst`` entered spend ``mode`` at ``at`` (``ObservedState`` tells the history)."""

    def apply_frame(self, name: str, frame: Frame, now: Optional[float] = None) -> None:
        inst = self.instances.get(name)
        if inst is None:
            return
        if now is None:
            now = self.clock()
        self.frames += 1
        inst.last_frame = now
        kind = frame.get("type")
        handler = FRAME_HANDLERS.get(kind) if isinstance(kind, str) else None
        if handler is not None:
            handler(inst, frame, now)
        if kind != "heartbeat" or inst.status == "stale":
            self._touch(inst, now)
        self._rederive(inst, now)

    def set_link_status(self, name: str, status: str, detail: str = "") -> None:
        inst = self.instances.get(name)
        if inst is None:
            return
        now = self.clock()
        if status == "connected" and inst.link_status != "connected":
            if inst.ever_connected and not inst.quiet_connect:
                inst.reconnects.append(now)
            elif not inst.ever_connected or inst.settling(now):  # start-up, or a reload's new link
                inst.settle_until = now + SETTLE_SECONDS
        if status == "connected":
            inst.quiet_connect = False
        if status != inst.link_status or inst.link_since is None:
            inst.link_since = now
        inst.link_status = status
        inst.link_detail = clean(detail)  # error texts from the host (or its sshd) are host text
        if status == "connected":
            inst.ever_connected = True
            inst.connected_at = now
            if "agentless" in (detail or ""):
                inst.agentless = True
        self._touch(inst, now)
        self._rederive(inst, now)

    def expect_connect(self, name: str) -> None:
        """The next "connected" of ``name`` is a session opened on demand, not a reconnect (the flap counter)."""
        inst = self.instances.get(name)
        if inst is not None:
            inst.quiet_connect = True

    def set_diagnosis(self, name: str, data: Optional[DiagnosisResult]) -> None:
        inst = self.instances.get(name)
        if inst is None:
            return
        now = self.clock()
        inst.diagnosis = clean_deep(data) if data is not None else None  # summaries and evidence: host text
        inst.diagnosis_at = now if data is not None else None
        inst.log_moved_on = False
        self._touch(inst, now)
        self._rederive(inst, now)

    def set_probe_result(self, name: str, probe: str, data: ProbeResult) -> None:
        inst = self.instances.get(name)
        if inst is None:
            return
        lines = clean_lines((data.get("lines") or [])[-MAX_PROBE_LINES:])
        title = clean(data.get("title") or probe)
        inst.probes[probe] = {"title": title, "lines": lines, "at": self.clock()}
        self._touch(inst, self.clock())

    def note_restart(self, name: str) -> None:
        """A restart was sent: the verdict before it no longer counts; the pane says "restarted Ns ago"."""
        inst = self.instances.get(name)
        if inst is None:
            return
        now = self.clock()
        inst.restarted_at = now
        self._touch(inst, now)
        self._rederive(inst, now)

    def tick(self, now: Optional[float] = None) -> None:
        """Re-derive time-based states (of the instances not derived within ``TICK_FRESH``); stale panes are
        marked dirty so their age keeps counting."""
        if now is None:
            now = self.clock()
        for inst in self.instances.values():
            derived = inst.derived_at
            if derived is None or not 0.0 <= now - derived < TICK_FRESH:
                self._rederive(inst, now)
            if inst.status == "stale":
                self._dirty.add(inst.name)

    # -- reading ----------------------------------------------------------------------------------
    def take_dirty(self) -> Set[str]:
        dirty, self._dirty = self._dirty, set()
        return dirty

    def is_dirty(self, name: Optional[str]) -> bool:
        """Whether ``name`` changed since the last ``take_dirty``."""
        return name in self._dirty

    def peek_dirty(self) -> Set[str]:
        return set(self._dirty)

    def mark_dirty(self, names: Iterable[str]) -> None:
        """Have ``names`` repainted at the next ``take_dirty`` (panes whose text ages by itself)."""
        self._dirty.update(names)

    def note(self, text: str, severity: str = "information") -> None:
        """Something the core did by itself that the operator should see (the UI toasts it): an automatic stop."""
        self._notes.append((text, severity))

    def take_notes(self) -> List[Tuple[str, str]]:
        notes = list(self._notes)
        self._notes.clear()
        return notes

    def take_events(self) -> List[Tuple[str, str, str, str]]:
        """``(name, old_status, new_status, detail)`` for every change to a worse status."""
        events = list(self._events)
        self._events.clear()
        return events

    def ordered(self, query: str = "") -> List[InstanceState]:
        """Instances matching ``query`` (name, tag or host substring), trouble first then by name."""
        items: Iterable[InstanceState] = self.instances.values()
        if query:
            items = [i for i in items if matches(i, query)]
        return sorted(items, key=lambda i: (i.rank, i.name))

    def totals(self) -> Dict[str, int]:
        """Instances per status, GPUs busy / idle / lost, simulated instances, for the header (every paint).
        Running sums (``console/core/totals.py``): a call counts again only the instances changed since the
        last one (``_touch``)."""
        return self._totals.read(self.instances)


def matches(inst: InstanceState, query: str) -> bool:
    """Every whitespace-separated word must match the name, a tag, the host or the status, and every numeric
    predicate hold (``util<5 & power>300``: console/core/predicates.py); a bad predicate matches nothing."""
    if any(c in query for c in "<>=&"):
        try:
            parsed = predicates.parse_query(query)
        except predicates.PredicateError:
            return False
        if not predicates.holds(inst, parsed):
            return False
        query = parsed.plain
    for word in query.lower().split():
        if word.startswith("tag:"):
            if not any(word[4:] in t.lower() for t in inst.tags):
                return False
            continue
        if word.startswith("status:"):
            if word[7:] not in inst.status:
                return False
            continue
        if word in inst.name.lower() or word in inst.host.lower() or any(word in t.lower() for t in inst.tags):
            continue
        return False
    return True

