"""When to send: the fleet state judged once a second against each sink's rules.

Per sink and instance it is edge-triggered: trouble (a status in ``statuses``) that lasts ``min_duration`` is
one message; trouble that ends sooner is a flap, counted (``fleet_notify_flaps``, and "flapped N times before" in the
instance's next message), never sent. A diagnosis that arrives after the first message is one follow-up; the
end of the trouble (out of it for ``min_duration`` too, so a host bouncing back for a second is no "resolved")
is one more. What is due waits ``group_wait`` for company (ten instances failing together are one message naming
them), then goes unless quiet hours or the sink's ``max_per_hour`` hold it: held, it merges with what follows, so
a storm is few messages and nothing is lost. The facts are read when the message is built, so a verdict that
came during the wait is in the first message.
"""

from __future__ import annotations

import fnmatch
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from console.core.state import FleetState, InstanceState
from console.inventory.schema import NotifySpec
from console.inventory.secrets import SecretError
from console.notify.deliver import Outbox
from console.notify.message import Event, Facts, Message, facts_of
from console.notify.sinks import open_sink

log = logging.getLogger("fleet_console.notify")


@dataclass
class Track:
    """One instance's trouble as one sink sees it."""

    since: float
    status: str
    detail: str = ""
    queued: bool = False  # due, waiting in the batch (or sent)
    sent: bool = False
    told_verdict: bool = False
    clear_since: float | None = None


@dataclass
class Pending:
    kind: str
    name: str
    track: Track
    lasted: float = 0.0


@dataclass
class SinkState:
    spec: NotifySpec
    outbox: Outbox
    tracks: dict[str, Track] = field(default_factory=dict)
    pending: list[Pending] = field(default_factory=list)
    first_pending: float | None = None
    sends: deque[float] = field(default_factory=deque)
    flaps: int = 0
    flaps_by_name: dict[str, int] = field(default_factory=dict)
    holding: str = ""  # why the batch is held ("quiet hours", "rate limit"), logged once per hold


def matches(spec: NotifySpec, inst: InstanceState) -> bool:
    if spec.instances and not any(fnmatch.fnmatchcase(inst.name, p) for p in spec.instances):
        return False
    return not spec.tags or any(t in inst.tags for t in spec.tags)


def trouble(spec: NotifySpec, inst: InstanceState) -> tuple[bool, str, str]:
    """(in trouble for this sink?, the status, its detail); between reconnect attempts the settled status counts."""
    status, detail = inst.status, inst.status_detail
    if status == "connecting" and inst.settled_status is not None:
        status, detail = inst.settled_status, inst.settled_detail
    return status in spec.statuses, status, detail


def in_quiet_hours(spec: NotifySpec, now: float) -> bool:
    if spec.quiet_hours is None:
        return False
    t = time.localtime(now)
    minute = t.tm_hour * 60 + t.tm_min
    start, end = spec.quiet_hours
    return start <= minute < end if start < end else (minute >= start or minute < end)


class Notifier:
    """The ``[[notify]]`` sinks of one fleet: ``evaluate()`` about once a second, ``start()``/``stop()``."""

    def __init__(self, specs: Iterable[NotifySpec], state: FleetState,
                 count: Callable[[str, tuple[str, ...]], None] | None = None) -> None:
        self.state = state
        self.count = count
        self.sinks: list[SinkState] = []
        for spec in specs:
            try:
                sink = open_sink(spec)
            except SecretError as exc:  # the environment changed since `check`: this sink is off, the others not
                log.error("notify %s: off: %s (%s)", spec.name, exc, spec.source)
                continue
            self.sinks.append(SinkState(spec, Outbox(sink, count)))

    def start(self) -> None:
        for s in self.sinks:
            s.outbox.start()

    async def stop(self) -> None:
        import asyncio

        await asyncio.gather(*(s.outbox.close() for s in self.sinks), return_exceptions=True)

    def _count(self, metric: str, sink: str) -> None:
        if self.count is not None:
            self.count(metric, (sink,))

    def evaluate(self, now: float | None = None) -> None:
        now = self.state.clock() if now is None else now
        for s in self.sinks:
            self._judge(s, now)
            self._flush(s, now)

    def _judge(self, s: SinkState, now: float) -> None:
        spec = s.spec
        for name in [n for n in s.tracks if n not in self.state.instances]:  # left the fleet: nothing to say
            del s.tracks[name]
        for inst in self.state.instances.values():
            bad, status, detail = trouble(spec, inst) if matches(spec, inst) else (False, "", "")
            tr = s.tracks.get(inst.name)
            if bad:
                if tr is None:
                    s.tracks[inst.name] = Track(now, status, detail)
                    continue
                tr.status, tr.detail, tr.clear_since = status, detail, None
                if not tr.queued and now - tr.since >= spec.min_duration:
                    tr.queued = True
                    self._add(s, Pending("trouble", inst.name, tr), now)
                elif tr.sent and not tr.told_verdict and facts_of(inst, status, tr.since, detail).verdict:
                    tr.told_verdict = True
                    self._add(s, Pending("update", inst.name, tr), now)
                continue
            if tr is None:
                continue
            if not tr.queued:  # shorter than min_duration: a flap, counted
                del s.tracks[inst.name]
                s.flaps += 1
                s.flaps_by_name[inst.name] = s.flaps_by_name.get(inst.name, 0) + 1
                self._count("fleet_notify_flaps", spec.name)
                continue
            if tr.clear_since is None:
                tr.clear_since = now
            if now - tr.clear_since >= spec.min_duration:
                del s.tracks[inst.name]
                if not tr.sent:  # came and went while held: the batch forgets it
                    s.pending = [p for p in s.pending if p.track is not tr]
                elif spec.send_resolved:
                    self._add(s, Pending("resolved", inst.name, tr, lasted=tr.clear_since - tr.since), now)

    def _add(self, s: SinkState, item: Pending, now: float) -> None:
        if not s.pending:
            s.first_pending = now
        s.pending.append(item)

    def _flush(self, s: SinkState, now: float) -> None:
        if not s.pending or s.first_pending is None or now - s.first_pending < s.spec.group_wait:
            return
        while s.sends and now - s.sends[0] >= 3600:
            s.sends.popleft()
        held = ("quiet hours" if in_quiet_hours(s.spec, now) else
                "rate limit" if len(s.sends) >= s.spec.max_per_hour else "")
        if held:
            if s.holding != held:
                log.info("notify %s: %s: holding %d events (they go together later)", s.spec.name, held,
                         len(s.pending))
            s.holding = held
            return
        s.holding = ""
        message = Message(flaps=s.flaps)
        for p in s.pending:
            inst = self.state.instances.get(p.name)
            facts = facts_of(inst, p.track.status, p.track.since, p.track.detail) if inst else Facts(
                name=p.name, status=p.track.status, since=p.track.since)
            if p.kind == "trouble":
                p.track.sent, p.track.told_verdict = True, bool(facts.verdict)
                facts.flaps = s.flaps_by_name.pop(p.name, 0)
            elif p.kind == "update" and not facts.verdict:
                continue
            message.events.append(Event(p.kind, facts, p.lasted))
        s.pending, s.first_pending, s.flaps = [], None, 0
        if not message.events:
            return
        s.sends.append(now)
        self._count("fleet_notify_messages", s.spec.name)
        s.outbox.put(message)
