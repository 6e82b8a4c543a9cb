"""Recordings for post-mortems: every frame as gzip-compressed JSON lines, and reading them back.

``--record FILE`` writes, in order: a header (format version, the fleet's instances as far as the state
needs them), then one line per thing the fleet state was fed: ``frame``, ``link`` (status), ``diag``
(a diagnosis), ``probe``, ``tick`` (the 1 Hz re-derivation), ``inst``/``gone`` (an instance a reload of
the fleet file added, changed or removed), each with the console's time ``t``; and,
for checking a replay, ``tr`` lines (the status transitions seen live). The gzip stream is flushed every
few seconds, so a killed console leaves a readable file (the reader stops at the cut).

``fleet-console replay FILE`` feeds a fresh fleet state from the file on a virtual clock
(console/monitor/replay.py) and opens the usual console on it (console/ui/replay.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import io
import json
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from console.core.actions import ActionError
from console.inventory import BenchmarkSpec, Fleet, Instance

FORMAT = "fleet-console-record"
VERSION = 1
FLUSH_EVERY = 2.0  # seconds between gzip sync flushes
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
        self.tapped: set[str] = set()  # instances whose frames come whole from a link worker (``on_frame_json``)
        self._write({"k": "header", "format": FORMAT, "v": VERSION, "t": clock(), "fleet": fleet.source,
                     "instances": [instance_record(i) for i in fleet.instances]})

    def _write(self, rec: dict[str, Any]) -> None:
        self._gz.write(json.dumps(rec, separators=(",", ":"), default=str).encode() + b"\n")
        self.lines += 1

    def on_frame(self, name: str, frame: Any, now: float) -> None:
        if name not in self.tapped:
            self._write({"t": now, "k": "frame", "n": name, "f": frame})

    def on_frame_json(self, name: str, data: bytes, now: float) -> None:
        """Every frame of an instance whose link runs in a worker, as the worker encoded it (the state gets
        them merged while out of view, the recording every one): written as it is, never decoded here."""
        self.tapped.add(name)
        self._gz.write(b'{"t":%s,"k":"frame","n":%s,"f":%s}\n' % (repr(now).encode(), json.dumps(name).encode(), data))
        self.lines += 1

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
