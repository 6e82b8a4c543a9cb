"""Replay: a fleet state fed from a recording (console/monitor/record.py) on a virtual clock.

``ReplaySource`` reads the file and feeds a fresh ``ReplayState`` up to the replay's position: played in the
background at a speed, paused, seeked. It is the controller of the usual console on the file (a
``FleetControl``, read-only: console/ui/replay.py opens it). Replayed, the state derives the same statuses at
the same recorded times, so the transitions match what was recorded.

The widgets age what they show by the wall clock (``time.time() - inst.last_frame``: "12s ago", "last
seen", the GPU charts). So that a replay of yesterday shows ages as they were at that point of the
recording, every time the replayed state holds is the recorded one plus ``shift`` (wall clock minus replay
position), and :meth:`ReplaySource.align` moves them all when that difference changes (paused, another
speed, a seek): the console itself needs no clock of its own.

A recording is host data at one remove, so it is checked as live frames are: each record's shape, each frame
against the agent's contract (``console/link/validate.py``), names one printable line. The first bad record
ends the replay there with one line naming the file and the record (``RecordingError``); what came before it
is shown. A file cut short (a killed console) ends at the cut, as it always did.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import io
import json
import math
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import msgspec

from console.core.actions import ActionError, ReadOnlyError
from console.core.control import OfflineControl
from console.core.observed import ObservedState
from console.inventory import Fleet, Instance
from console.link.validate import MAX_FRAME_BYTES, BadFrame, check_result, decode
from console.monitor.record import FORMAT, VERSION, instance_from_record

if TYPE_CHECKING:
    from console.core.control import FleetControl
    from console.core.controller import RestartOutcome

SEEK_STEP = 10.0
SEEK_BIG = 60.0
SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)


MAX_RECORD_BYTES = MAX_FRAME_BYTES + 64 * 1024  # a frame as the link takes it, and the record around it
KINDS = ("frame", "link", "diag", "probe", "tick", "tr", "inst", "gone")


class RecordingError(ActionError):
    """A recording that is not one, or a bad record in it: ``file: record N: reason``, one line."""


class _Bench(msgspec.Struct):
    match: list[str] = []
    entrypoint: list[str] = []
    log: str | None = None


class _InstanceRecord(msgspec.Struct):  # what ``record.instance_record`` writes
    name: str
    host: str = ""
    port: int = 22
    user: str = "root"
    tags: list[str] = []
    transport: Literal["ssh", "local"] = "ssh"
    gpus: int | None = None
    source: str = ""
    benchmark: _Bench | None = None
    heartbeat_interval: float | None = None
    agentless: bool = False


def _instance(raw: Any) -> Instance:
    """An instance record, checked (its text is shown: one printable line each)."""
    try:
        rec = msgspec.convert(raw, _InstanceRecord)
    except msgspec.ValidationError as exc:
        raise BadFrame(f"instance: {str(exc)[:200]}") from None
    for text in (rec.name, rec.host, rec.user, *rec.tags):
        if not text or not text.isprintable():
            raise BadFrame(f"instance: {text[:60]!r} is not one printable line")
    return instance_from_record(raw)


def _time(rec: dict[str, Any]) -> float:
    t = rec.get("t")
    if not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t):
        raise BadFrame(f"time {str(t)[:40]!r} is not a number")
    return float(t)


def _name(rec: dict[str, Any]) -> str:
    name = rec.get("n")
    if not isinstance(name, str) or not name.isprintable():
        raise BadFrame(f"instance name {str(name)[:60]!r} is not one printable line")
    return name


def _text(rec: dict[str, Any], key: str) -> None:
    if not isinstance(rec.get(key, ""), str):
        raise BadFrame(f"{key} is not a string")


def check_record(rec: Any) -> dict[str, Any]:
    """``rec`` as the replay may apply it (frames as the link would take them); BadFrame otherwise."""
    if not isinstance(rec, dict):
        raise BadFrame(f"not an object but {type(rec).__name__}")
    _time(rec)
    kind = rec.get("k")
    if kind not in KINDS:
        raise BadFrame(f"unknown record kind {str(kind)[:40]!r}")
    if kind in ("frame", "link", "diag", "probe", "tr", "gone"):
        _name(rec)
    if kind == "frame":
        try:
            rec["f"] = decode(msgspec.json.encode(rec.get("f")))
        except UnicodeEncodeError:  # a lone surrogate ("\\ud800"): the link would refuse those bytes too
            raise BadFrame("frame: text that is not UTF-8 (a lone surrogate)") from None
    elif kind in ("link", "tr"):
        for key in ("s", "d", "o"):
            _text(rec, key)
    elif kind == "diag" and rec.get("d") is not None:
        rec["d"] = check_result("diagnose", rec["d"])
    elif kind == "probe":
        _text(rec, "p")
        rec["d"] = check_result("probe", rec.get("d") or {})
    elif kind == "inst":
        rec["i"] = _instance(rec.get("i"))
    return rec


def read_checked(path: Path) -> Iterator[dict[str, Any]]:
    """The records of ``path``, each checked; RecordingError at the first bad one. A cut file ends at the cut."""
    number = 0
    try:
        with gzip.open(path, "rb") as fh:
            reader = io.BufferedReader(fh)
            while True:
                try:
                    line = reader.readline(MAX_RECORD_BYTES + 1)
                except (EOFError, zlib.error):
                    return  # cut short: the console was killed
                number += 1
                if not line or (not line.endswith(b"\n") and len(line) <= MAX_RECORD_BYTES):
                    return  # the end, or a last line cut
                yield _parsed(line, number)
    except gzip.BadGzipFile as exc:
        raise RecordingError(f"{path}: not a fleet-console recording (not gzip: {exc})") from None
    except OSError as exc:
        raise RecordingError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except BadFrame as exc:
        what = "the header" if number == 1 else f"record {number}"
        raise RecordingError(f"{path}: {what}: {exc}") from None


def _parsed(line: bytes, number: int) -> dict[str, Any]:
    if len(line) > MAX_RECORD_BYTES:
        raise BadFrame(f"longer than {MAX_RECORD_BYTES // 1024} KB")
    try:
        rec = json.loads(line)
    except ValueError as exc:
        raise BadFrame(f"not JSON ({exc})") from None
    except RecursionError:
        raise BadFrame("nested too deep") from None
    return _header(rec) if number == 1 else check_record(rec)


def _header(rec: Any) -> dict[str, Any]:
    if not isinstance(rec, dict) or rec.get("k") != "header" or rec.get("format") != FORMAT:
        raise BadFrame("not a fleet-console recording")
    if rec.get("v") != VERSION:
        raise BadFrame(f"recording format {str(rec.get('v'))[:20]}, this console reads {VERSION}")
    _time(rec)
    instances = rec.get("instances") or []
    if not isinstance(instances, list):
        raise BadFrame("instances is not a list")
    rec["instances"] = [_instance(r) for r in instances]
    return rec


def read_header(path: Path) -> dict[str, Any]:
    """The checked header of ``path`` (its ``instances`` as Instances); RecordingError if it has none."""
    first = next(read_checked(path), None)
    if first is None:
        raise RecordingError(f"{path}: not a fleet-console recording (empty or cut before its header)")
    return first


class ReplayState(ObservedState):
    """A fleet state on the replay's clock: the app's ``tick(time.time())`` is taken at the replay's time.

    ``virtual_now`` is the recording's time; what the state stores is that plus ``shift`` (see
    :meth:`ReplaySource.align`), so the widgets' wall-clock ages are the recording's. An ``ObservedState``,
    so a replay sees its transitions by the same rule as the live console recorded them.
    """

    def __init__(self) -> None:
        self.virtual_now = 0.0
        self.shift = 0.0  # added to the recording's times in everything the state holds
        super().__init__(clock=lambda: self.virtual_now + self.shift)

    def tick(self, now: float | None = None) -> None:
        super().tick(self.virtual_now + self.shift)

    def add_instance(self, instance: Any) -> Any:
        new = instance.name not in self.instances
        inst = super().add_instance(instance)
        if new:  # no process table yet: the host's clock taken as the recording's, i.e. ours minus the shift
            inst.clock_offset = -self.shift
        return inst

    def reshift(self, delta: float) -> None:
        """Move every console-clock time the state holds by ``delta`` (statuses and relative ages unchanged)."""
        self.shift += delta
        for inst in self.instances.values():
            shift_instance(inst, delta)


# the InstanceState fields on the console's clock (a field added there must be added here: the test in
# tests/test_replay_clock.py compares a shifted state with one fed shifted and names what differs)
_TIMES = ("link_since", "connected_at", "last_frame", "diagnosis_at", "restarted_at", "gpu_at", "settle_until",
          "derived_at")
_TIME_RINGS = ("reconnects", "gpu_ts")


def _shift_ring(ring: Any, delta: float) -> None:
    items = list(ring)
    ring.clear()
    ring.extend(t + delta for t in items)


def shift_instance(inst: Any, delta: float) -> None:
    """``inst``'s console-clock times moved by ``delta``; its host-clock offset the other way."""
    for name in _TIMES:
        value = getattr(inst, name, None)
        if value is not None:
            setattr(inst, name, value + delta)
    if inst.updated_at:
        inst.updated_at += delta
    inst.clock_offset -= delta  # host clock minus ours: process start times stay where they were
    for name in _TIME_RINGS:
        ring = getattr(inst, name, None)
        if ring is not None:
            _shift_ring(ring, delta)
    for ring in inst.notified.values():
        _shift_ring(ring, delta)
    errors = list(inst.errors)
    inst.errors.clear()
    inst.errors.extend((t + delta, text) for t, text in errors)
    for log in inst.logs.values():
        if log.updated:
            log.updated += delta
    for probe in inst.probes.values():
        probe["at"] += delta
    meter = inst.meter  # the spend meter's interval bounds (its totals are durations)
    meter.since += delta
    meter.mode_since += delta
    if meter.bench_left is not None:
        meter.bench_left += delta


class ReplaySource(OfflineControl):
    """The console's controller (``FleetControl``) fed from a recording; read-only, no history.

    ``start()`` plays in the background at ``speed``; ``pause()``/``resume()``, ``seek(seconds)`` (relative),
    ``seek_to(position)`` and ``set_speed()`` control it. Seeking back rebuilds the state from the start
    (the file is streamed, never held in memory), fast, without pauses.
    """

    PLAYBACK_TICK: ClassVar[float] = 0.05  # seconds of wall time between feeding steps
    ALIGN_SLACK: ClassVar[float] = 0.2  # seconds the state's times may lag the wall clock before they move

    def __init__(self, path: Path, speed: float = 1.0, start_at: float = 0.0, paused: bool = False) -> None:
        self.path = Path(path)
        self.header = read_header(self.path)
        self.instances: list[Instance] = self.header["instances"]
        self.fleet = Fleet(instances=self.instances, source=f"replay of {self.path}")
        self.fleet_source = self.fleet.source
        self.state = ReplayState()
        self.state.observe(self)
        self.started_at = _time(self.header)
        self.end_at = self.started_at
        self.speed = speed
        self.paused = paused
        self.position = self.started_at + max(0.0, start_at)  # the virtual time the state has been fed up to
        self.transitions: list[tuple[float, str, str, str]] = []  # (t, name, old, new) as replayed
        self.transition_at: dict[str, float] = {}  # name -> recording time of its last replayed transition
        self.recorded: list[tuple[float, str, str, str]] = []  # the ``tr`` lines read so far
        self._reset()
        self._task: asyncio.Task[None] | None = None
        self.finished = False
        self.error: str | None = None  # the bad record the replay stopped at

    # -- feeding ----------------------------------------------------------------------------------
    def _reset(self) -> None:
        self.state.instances.clear()
        self.state.order_version += 1
        self.state.virtual_now = self.started_at  # the spend meters begin where the recording does
        for inst in self.instances:
            self.state.add_instance(inst)
        self.state.seen.clear()
        self.state.known.intersection_update(self.state.instances)
        self._records = read_checked(self.path)
        next(self._records, None)  # the header
        self._pending: dict[str, Any] | None = None
        self.state.virtual_now = self.started_at
        self.transitions.clear()
        self.transition_at.clear()
        self.recorded.clear()

    def _apply(self, rec: dict[str, Any]) -> None:
        kind, t = rec.get("k"), float(rec["t"])
        state = self.state
        state.virtual_now = t
        name = rec.get("n")
        if kind == "frame":
            state.apply_frame(name, rec["f"], now=t + state.shift)  # type: ignore[arg-type]
        elif kind == "link":
            state.set_link_status(name, rec.get("s") or "", rec.get("d") or "")  # type: ignore[arg-type]
        elif kind == "diag":
            state.set_diagnosis(name, rec.get("d"))  # type: ignore[arg-type]
        elif kind == "probe":
            state.set_probe_result(name, rec.get("p") or "?", rec.get("d") or {})  # type: ignore[arg-type]
        elif kind == "tick":
            state.tick()
        elif kind == "tr":
            self.recorded.append((t, str(name), str(rec.get("o")), str(rec.get("s"))))
        elif kind == "inst":
            state.add_instance(rec["i"])
        elif kind == "gone" and state.instances.pop(str(name), None) is not None:
            state.order_version += 1
            state.seen.pop(str(name), None)

    def on_transition(self, name: str, old: str, new: str, detail: str, now: float) -> None:
        # at the recording's time (``now`` is shifted): the same times as the ``tr`` lines
        self.transitions.append((self.state.virtual_now, name, old, new))
        self.transition_at[name] = self.state.virtual_now

    def feed_until(self, until: float) -> bool:
        """Apply every record up to virtual time ``until``; False at the end of the file."""
        while True:
            rec = self._pending if self._pending is not None else self._next()
            self._pending = None
            if rec is None:
                self.finished = True
                self.state.virtual_now = max(self.state.virtual_now, min(until, self.end_at or until))
                return False
            t = float(rec["t"])
            self.end_at = max(self.end_at, t)
            if t > until:
                self._pending = rec
                self.state.virtual_now = until
                self.position = until
                return True
            self._apply(rec)

    def _next(self) -> dict[str, Any] | None:
        """The next record; None at the end, or at a bad record (then ``error`` says which)."""
        if self.error is not None:
            return None
        try:
            return next(self._records, None)
        except RecordingError as exc:
            self.error = str(exc)
            return None

    def run_to_end(self) -> None:
        """Feed the whole file as fast as it goes (tests, ``replay --check``)."""
        self.feed_until(float("inf"))

    # -- controls ---------------------------------------------------------------------------------
    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False

    def toggle(self) -> None:
        self.paused = not self.paused

    def set_speed(self, speed: float) -> None:
        self.speed = min(max(speed, SPEEDS[0]), SPEEDS[-1])

    def faster(self) -> None:
        self.set_speed(next((s for s in SPEEDS if s > self.speed), SPEEDS[-1]))

    def slower(self) -> None:
        self.set_speed(next((s for s in reversed(SPEEDS) if s < self.speed), SPEEDS[0]))

    def seek(self, delta: float) -> None:
        self.seek_to(self.position + delta)

    def seek_to(self, position: float) -> None:
        position = max(self.started_at, position)
        if position < self.state.virtual_now:
            self._reset()
            self.finished = False
        self.feed_until(position)
        self.position = position
        self.align()

    def align(self, wall: float | None = None) -> None:
        """Make the state's times the recording's as seen from now: ``shift`` = wall clock - replayed time.

        Playing at speed 1 this holds by itself; paused, at another speed or after a seek the difference
        moves, and once it is more than ``ALIGN_SLACK`` every stored time moves with it (cheap: a few
        fields and rings per instance), so "12s ago" stays what it was at this point of the recording.
        """
        want = (time.time() if wall is None else wall) - self.state.virtual_now  # (the end, past it)
        if abs(want - self.state.shift) >= self.ALIGN_SLACK:
            self.state.reshift(want - self.state.shift)

    @property
    def offset(self) -> float:
        """Seconds into the recording."""
        return self.position - self.started_at

    # -- the controller interface the app uses ------------------------------------------------------
    async def start(self, names: list[str] | None = None) -> None:
        if self._task is None:
            self.feed_until(self.position)
            self.align()
            self._task = asyncio.get_running_loop().create_task(self._play(), name="replay")

    async def _play(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(self.PLAYBACK_TICK)
            now = time.monotonic()
            if not self.paused and not self.finished:
                self.position += (now - last) * self.speed
                self.feed_until(self.position)
            self.align()
            last = now

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def diagnose(self, name: str, timeout: float = 90.0) -> dict[str, Any]:
        raise ActionError("a replay shows what was recorded: no diagnosis now (the recorded ones are shown)")

    async def restart(self, names: list[str], origin: str | None = None, *,
                      plans: dict[str, Any] | None = None) -> dict[str, RestartOutcome]:
        raise ReadOnlyError("restart")

    async def probe(self, name: str, probe_name: str) -> dict[str, Any]:
        raise ActionError("a replay cannot run probes")

    async def reload(self) -> str:
        return "a replay shows its recording's fleet: not reloaded"


if TYPE_CHECKING:

    def _source_conforms(source: ReplaySource) -> FleetControl:
        return source  # mypy: a replay is a FleetControl (FleetController: console/core/control.py)
