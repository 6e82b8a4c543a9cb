"""Record and replay for post-mortems: every frame as gzip-compressed JSON lines, and a console on the file.

``--record FILE`` writes, in order: a header (format version, the fleet's instances as far as the state
needs them), then one line per thing the fleet state was fed: ``frame``, ``link`` (status), ``diag``
(a diagnosis), ``probe``, ``tick`` (the 1 Hz re-derivation), ``inst``/``gone`` (an instance a reload of
the fleet file added, changed or removed), each with the console's time ``t``; and,
for checking a replay, ``tr`` lines (the status transitions seen live). The gzip stream is flushed every
few seconds, so a killed console leaves a readable file (the reader stops at the cut).

``fleet-console replay FILE`` feeds a fresh ``FleetState`` from the file on a virtual clock and opens the
usual console on it (``FleetApp`` with :class:`ReplaySource` as its controller): pause, seek, speed.
Replayed, the state derives the same statuses at the same recorded times, so the transitions match.

The widgets age what they show by the wall clock (``time.time() - inst.last_frame``: "12s ago", "last
seen", the GPU charts). So that a replay of yesterday shows ages as they were at that point of the
recording, every time the replayed state holds is the recorded one plus ``shift`` (wall clock minus replay
position), and :meth:`ReplaySource.align` moves them all when that difference changes (paused, another
speed, a seek): the console itself needs no clock of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gzip
import io
import json
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from console.core.actions import ActionError, ReadOnlyError
from console.core.observed import ObservedState
from console.inventory import BenchmarkSpec, Fleet, Instance

FORMAT = "fleet-console-record"
VERSION = 1
FLUSH_EVERY = 2.0  # seconds between gzip sync flushes
SEEK_STEP = 10.0
SEEK_BIG = 60.0
SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
# the Instance fields a replay needs (no keys, known_hosts or agent settings: a recording may be shared)
_KEEP = ("name", "host", "port", "user", "tags", "transport", "gpus", "source")


def instance_record(inst: Instance) -> dict[str, Any]:
    out: dict[str, Any] = {k: getattr(inst, k) for k in _KEEP}
    out["tags"] = list(inst.tags)
    out["benchmark"] = {"match": list(inst.benchmark.match), "entrypoint": list(inst.benchmark.entrypoint),
                        "log": inst.benchmark.log}
    hb = inst.heartbeat or (inst.agent_extra or {}).get("heartbeat_interval")
    if hb:
        out["heartbeat_interval"] = hb
    out["agentless"] = bool(getattr(inst, "agentless", False))
    return out


def instance_from_record(rec: dict[str, Any]) -> Instance:
    bench = rec.get("benchmark") or {}
    fields = {f.name for f in dataclasses.fields(Instance)}
    kwargs = {k: v for k, v in rec.items() if k in fields and k not in ("benchmark", "tags")}
    extra = {"heartbeat_interval": rec["heartbeat_interval"]} if rec.get("heartbeat_interval") else {}
    return Instance(
        **kwargs,
        tags=tuple(rec.get("tags") or ()),
        benchmark=BenchmarkSpec(match=tuple(bench.get("match") or ()), entrypoint=tuple(bench.get("entrypoint") or ()),
                                log=bench.get("log")),
        agent_extra=extra,
    )


class Recorder:
    """The writer; an observer of the monitored state (console/serve.py calls its ``on_*`` methods)."""

    def __init__(self, path: Path, fleet: Fleet, clock: Any = time.time) -> None:
        self.path = Path(path)
        self.clock = clock
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._raw = self.path.open("wb")
        self._gz = gzip.GzipFile(fileobj=self._raw, mode="wb", compresslevel=6)
        self._last_flush = 0.0
        self.lines = 0
        self._write({"k": "header", "format": FORMAT, "v": VERSION, "t": clock(), "fleet": fleet.source,
                     "instances": [instance_record(i) for i in fleet.instances]})

    def _write(self, rec: dict[str, Any]) -> None:
        self._gz.write(json.dumps(rec, separators=(",", ":"), default=str).encode() + b"\n")
        self.lines += 1

    def on_frame(self, name: str, frame: Any, now: float) -> None:
        self._write({"t": now, "k": "frame", "n": name, "f": frame})

    def on_link(self, name: str, status: str, detail: str, now: float) -> None:
        self._write({"t": now, "k": "link", "n": name, "s": status, "d": detail})

    def on_diagnosis(self, name: str, data: Any, now: float) -> None:
        self._write({"t": now, "k": "diag", "n": name, "d": data})

    def on_probe(self, name: str, probe: str, data: Any, now: float) -> None:
        self._write({"t": now, "k": "probe", "n": name, "p": probe, "d": data})

    def on_transition(self, name: str, old: str, new: str, detail: str, now: float) -> None:
        self._write({"t": now, "k": "tr", "n": name, "o": old, "s": new, "d": detail})

    def on_instance(self, instance: Instance, now: float) -> None:
        """An instance added or changed while recording (the fleet file reloaded): ``inst``."""
        self._write({"t": now, "k": "inst", "i": instance_record(instance)})

    def on_removed(self, name: str, now: float) -> None:
        self._write({"t": now, "k": "gone", "n": name})

    def on_tick(self, now: float) -> None:
        self._write({"t": now, "k": "tick"})
        if now - self._last_flush >= FLUSH_EVERY:
            self.flush(now)

    def flush(self, now: float | None = None) -> None:
        self._last_flush = self.clock() if now is None else now
        self._gz.flush(zlib.Z_SYNC_FLUSH)
        self._raw.flush()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._gz.close()
        self._raw.close()


# -- reading ------------------------------------------------------------------------------------------------


def read_records(path: Path) -> Iterator[dict[str, Any]]:
    """Every line of a recording; a file cut short (the console was killed) ends at the last whole line."""
    with gzip.open(path, "rb") as fh:
        reader = io.BufferedReader(fh)
        while True:
            try:
                line = reader.readline()
            except (EOFError, OSError, zlib.error):
                return
            if not line:
                return
            if not line.endswith(b"\n"):
                return  # the last line was cut
            try:
                yield json.loads(line)
            except ValueError:
                return


def read_header(path: Path) -> dict[str, Any]:
    try:
        first = next(read_records(path), None)
    except (OSError, gzip.BadGzipFile) as exc:
        raise ActionError(f"{path}: not a recording ({exc})") from None
    if not first or first.get("k") != "header" or first.get("format") != FORMAT:
        raise ActionError(f"{path}: not a fleet-console recording")
    if first.get("v") != VERSION:
        raise ActionError(f"{path}: recording format {first.get('v')}, this console reads {VERSION}")
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
_TIMES = ("link_since", "connected_at", "last_frame", "diagnosis_at", "restarted_at", "gpu_at")
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


class ReplaySource:
    """What ``FleetApp`` needs from a controller, fed from a recording; read-only.

    ``start()`` plays in the background at ``speed``; ``pause()``/``resume()``, ``seek(seconds)`` (relative),
    ``seek_to(position)`` and ``set_speed()`` control it. Seeking back rebuilds the state from the start
    (the file is streamed, never held in memory), fast, without pauses.
    """

    read_only = True
    demo = False
    PLAYBACK_TICK: ClassVar[float] = 0.05  # seconds of wall time between feeding steps
    ALIGN_SLACK: ClassVar[float] = 0.2  # seconds the state's times may lag the wall clock before they move

    def __init__(self, path: Path, speed: float = 1.0, start_at: float = 0.0, paused: bool = False) -> None:
        self.path = Path(path)
        self.header = read_header(self.path)
        self.instances = [instance_from_record(r) for r in self.header.get("instances") or []]
        self.fleet = Fleet(instances=self.instances, source=f"replay of {self.path}")
        self.state = ReplayState()
        self.state.observe(self)
        self.started_at = float(self.header.get("t") or 0.0)
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

    # -- feeding ----------------------------------------------------------------------------------
    def _reset(self) -> None:
        self.state.instances.clear()
        self.state.order_version += 1
        for inst in self.instances:
            self.state.add_instance(inst)
        self.state.seen.clear()
        self.state.known.intersection_update(self.state.instances)
        self._records = read_records(self.path)
        next(self._records, None)  # the header
        self._pending: dict[str, Any] | None = None
        self.state.virtual_now = self.started_at
        self.transitions.clear()
        self.transition_at.clear()
        self.recorded.clear()

    def _apply(self, rec: dict[str, Any]) -> None:
        kind, t = rec.get("k"), float(rec.get("t") or 0.0)
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
        elif kind == "inst" and rec.get("i"):
            state.add_instance(instance_from_record(rec["i"]))
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
            rec = self._pending if self._pending is not None else next(self._records, None)
            self._pending = None
            if rec is None:
                self.finished = True
                self.state.virtual_now = max(self.state.virtual_now, min(until, self.end_at or until))
                return False
            t = float(rec.get("t") or 0.0)
            self.end_at = max(self.end_at, t)
            if t > until:
                self._pending = rec
                self.state.virtual_now = until
                self.position = until
                return True
            self._apply(rec)

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

    async def restart(self, names: list[str]) -> dict[str, Any]:
        raise ReadOnlyError("restart")

    def probe_specs(self, name: str | None = None) -> list[Any]:
        return []

    async def probe(self, name: str, probe_name: str) -> dict[str, Any]:
        raise ActionError("a replay cannot run probes")


# -- `fleet-console replay` -----------------------------------------------------------------------------------


def make_replay_app(source: ReplaySource, theme: str | None = None) -> Any:
    """``FleetApp`` on the replay, with keys for pause (z), seek ([ ] 10 s, { } 60 s) and speed (- +)."""
    from rich.text import Text
    from textual.binding import Binding

    from console.ui.app import FleetApp

    class ReplayApp(FleetApp):
        BINDINGS: ClassVar[list[Any]] = [
            Binding("z", "replay_pause", "Pause/play"),
            Binding("left_square_bracket", "replay_seek(-10)", "-10s"),
            Binding("right_square_bracket", "replay_seek(10)", "+10s"),
            Binding("left_curly_bracket", "replay_seek(-60)", "-60s", show=False),
            Binding("right_curly_bracket", "replay_seek(60)", "+60s", show=False),
            Binding("minus", "replay_speed(-1)", "Slower"),
            Binding("plus,equals_sign", "replay_speed(1)", "Faster"),
        ]

        def header_text(self) -> Text:
            text = super().header_text()
            src = source
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(src.position))
            total = max(0.0, src.end_at - src.started_at)
            where = f" · REPLAY {when} (+{src.offset:.0f}s" + (f" of {total:.0f}s" if src.finished else "") + ")"
            text.append(where, "bold reverse")
            text.append(" x%g" % src.speed + (" PAUSED" if src.paused else "") + (" END" if src.finished else ""),
                        "bold")
            return text

        def paint_frame(self) -> None:
            self._header_key = None  # the position moves every frame
            super().paint_frame()

        def report_events(self, events: list[tuple[Any, ...]]) -> None:
            """The timeline (e) says when a change happened in the recording, not when it was replayed."""
            super().report_events(events)
            entries = self.session_events
            for i in range(max(0, len(entries) - len(events)), len(entries)):
                _, name, text = entries[i]
                entries[i] = (source.transition_at.get(name, source.state.virtual_now), name, text)

        def action_replay_pause(self) -> None:
            source.toggle()

        def action_replay_seek(self, seconds: float) -> None:
            source.seek(float(seconds))
            self.grid.update_from_state(set(self.state.instances))

        def action_replay_speed(self, direction: int) -> None:
            source.faster() if direction > 0 else source.slower()

    return ReplayApp(source, theme=theme)


def run_replay(args: Any) -> int:
    import sys

    try:
        source = ReplaySource(Path(args.file).expanduser(), speed=args.speed, start_at=args.start, paused=args.paused)
    except ActionError as exc:
        print(f"fleet-console: {exc}", file=sys.stderr)
        return 2
    if args.check:
        source.run_to_end()
        for t, name, old, new in source.transitions:
            print(f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(t))}  {name}: {old} -> {new}")
        same = [x[1:] for x in source.transitions] == [x[1:] for x in source.recorded]
        print(f"{len(source.transitions)} transitions; recorded {len(source.recorded)}: "
              + ("the same" if same else "DIFFERENT"))
        return 0 if same else 1
    make_replay_app(source, theme=getattr(args, "theme", None)).run()
    return 0
