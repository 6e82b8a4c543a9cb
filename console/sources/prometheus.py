"""GPU panes from a Prometheus that already scrapes DCGM-exporter: one instant query per metric for the fleet.

Why: a fleet that runs DCGM-exporter already pays for collection; ten thousand GPUs cost the console a handful
of HTTP requests per interval instead of a thousand SSH links.  Each interval the source asks
``/api/v1/query`` for every metric in ``METRICS`` (all hosts at once), groups the samples by the host label
(``Hostname`` by default) and the ``gpu`` label, and hands each host one full ``gpu`` frame
(``console/agent/wire/frames.py``) to ``FleetState.apply_frame``.  A host matches an instance by name or by host;
a host known only from Prometheus gets an instance of its own (transport ``prometheus``: no SSH is opened
for it; it is shown, not acted on).

A Prometheus that is down or slow never stalls the UI: every request has a timeout and runs on the event loop
without blocking it; the failure is one line in ``report`` (the controller's ``fleet_errors``), cleared on
the next good answer, and one log line per reason (again when the reason changes, and when it answers again).

What an answer brings is someone else's text: every label (host, GPU model, UUID, driver) goes through
``console/core/text_safety.py`` (the agents' frames' cleaning) before it names anything, a non-finite value
(``+Inf``, ``NaN``) is a missing one, and one source creates at most ``MAX_NEW_HOSTS`` instances (the rest are
left out, and a ``report`` line says how many).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import time
from collections.abc import Callable
from typing import Any

import httpx2
import msgspec

from console.agent.wire.frames import gpu_frame, gpu_record
from console.core.state import FleetState
from console.core.text_safety import one_line, url_origin
from console.inventory import Instance
from console.inventory.records import SourceSpec

MIB = 2**20
APPLY_SLICE = 100  # hosts applied per turn of the event loop
MAX_NEW_HOSTS = 2000  # instances one source may create (hosts the fleet file does not name); the rest left out
MAX_LABEL = 200  # characters kept of a label (a host name, a GPU model)

log = logging.getLogger("fleet_console.sources")

# field -> DCGM-exporter metric (names as dcgm-exporter's default counters file spells them)
METRICS = {
    "util": "DCGM_FI_DEV_GPU_UTIL",
    "fb_used": "DCGM_FI_DEV_FB_USED",  # MiB
    "fb_free": "DCGM_FI_DEV_FB_FREE",  # MiB
    "temp": "DCGM_FI_DEV_GPU_TEMP",
    "power": "DCGM_FI_DEV_POWER_USAGE",  # W
    "xid": "DCGM_FI_DEV_XID_ERRORS",  # the last XID error's code (0: none)
    "sm_clock": "DCGM_FI_DEV_SM_CLOCK",  # MHz
    "mem_clock": "DCGM_FI_DEV_MEM_CLOCK",  # MHz
}


class SourceDown(Exception):
    """Prometheus did not answer, or answered with an error: the message says which, for the one line."""


def _num(value: Any) -> float | None:
    try:
        v = float(value[1])
    except (TypeError, ValueError, IndexError):
        return None
    return v if math.isfinite(v) else None  # NaN, +Inf, -Inf: no value (round(inf) would raise)


def _int(v: float | None) -> int | None:
    return None if v is None else round(v)


@functools.lru_cache(maxsize=8)
def answer_type(host_label: str) -> Any:
    """The instant-query answer as msgspec decodes it: only the labels the panes use, the rest skipped.

    Why typed: dcgm-exporter's series carry a dozen labels; 10,000 GPUs x 8 metrics is ~26 MB of JSON a poll,
    and decoding all of it into dicts made ~2 million objects (the decode and the garbage collector it woke held
    the interpreter ~150 ms at a time, a stall every key press would feel).
    """
    labels = msgspec.defstruct(
        "Labels", [("host", str | None, None), ("gpu", str | None, None), ("uuid", str | None, None),
                   ("model", str | None, None), ("driver", str | None, None)],
        rename={"host": host_label, "uuid": "UUID", "model": "modelName", "driver": "DCGM_FI_DRIVER_VERSION"},
        gc=False)
    sample = msgspec.defstruct("Sample", [("metric", labels | None, None), ("value", tuple[float, str] | None, None)],
                               gc=False)  # no cycles: not tracked, so the collector has ~100,000 fewer objects to walk
    data = msgspec.defstruct("Data", [("result", list[sample] | None, None)])  # type: ignore[valid-type]
    return msgspec.defstruct("Answer", [("status", str | None, None), ("data", data | None, None),
                                        ("error", str | None, None)])


def group(results: dict[str, list[Any]]) -> dict[str, dict[int, dict[str, Any]]]:
    """host -> gpu index -> {field: value, plus the labels ``modelName``, ``UUID``, ``driver``}, from each
    field's samples as ``answer_type`` decodes them."""
    hosts: dict[str, dict[int, dict[str, Any]]] = {}
    text = _label_cleaner()
    for field, samples in results.items():
        for sample in samples:
            labels = sample.metric
            host = text(labels.host) if labels is not None else None
            if not host:  # no host label, or one with nothing printable in it
                continue
            try:
                index = int(labels.gpu or "")
            except ValueError:
                continue
            gpu = hosts.setdefault(host, {}).get(index)
            if gpu is None:
                gpu = hosts[host][index] = {"name": text(labels.model), "uuid": text(labels.uuid),
                                            "driver": text(labels.driver)}
            gpu[field] = _num(sample.value)
    return hosts


def _label_cleaner() -> Callable[[str | None], str | None]:
    """A label value as one printable line (``one_line``; None when nothing is left), each distinct value
    cleaned once: a host's name and its GPUs' model come on every one of its series."""
    seen: dict[str, str | None] = {}

    def text(raw: str | None) -> str | None:
        if raw is None:
            return None
        if raw not in seen:
            seen[raw] = one_line(raw, MAX_LABEL) or None
        return seen[raw]

    return text


def frames(hosts: dict[str, dict[int, dict[str, Any]]], max_gpus: int = 64) -> dict[str, dict[str, Any]]:
    """One full ``gpu`` frame per host from :func:`group`'s table."""
    out: dict[str, dict[str, Any]] = {}
    now = time.time()
    for host, gpus in hosts.items():
        devices: list[Any] = []
        driver = None
        for index in sorted(gpus)[:max_gpus]:
            g = gpus[index]
            driver = driver or g.get("driver")
            used, free = g.get("fb_used"), g.get("fb_free")
            power = g.get("power")
            rec: dict[str, Any] = dict(gpu_record(
                index, _int(g.get("util")), None, None if used is None else int(used * MIB), _int(g.get("temp")),
                None if power is None else round(power, 1), _int(g.get("sm_clock")), _int(g.get("mem_clock")),
                None, []))
            xid = _int(g.get("xid"))
            if xid:
                rec["error"] = f"XID {xid}"
            rec["name"], rec["uuid"] = g.get("name"), g.get("uuid")
            rec["mem_total"] = None if used is None or free is None else int((used + free) * MIB)
            rec["power_limit"] = None
            devices.append(rec)
        frame = gpu_frame("ok", False, driver, None, True, devices)
        frame["type"], frame["ts"] = "gpu", now
        out[host] = frame
    return out


def _vector(metric: str, content: bytes, host_label: str) -> list[Any]:
    """An instant-query answer's samples; SourceDown when it is not a successful one."""
    try:
        body = msgspec.json.decode(content, type=answer_type(host_label))
    except msgspec.ValidationError as exc:
        raise SourceDown(f"not a Prometheus answer for {metric}: {exc}") from None
    except msgspec.DecodeError:
        raise SourceDown(f"not JSON for {metric}") from None
    if body.status != "success":
        raise SourceDown(f"{metric}: {body.error or body.status}")
    return (body.data.result if body.data is not None else None) or []


def decode_answers(contents: dict[str, bytes], host_label: str, known: frozenset[str] = frozenset(),
                   room: int | None = None) -> tuple[dict[str, dict[str, Any]], int]:
    """The answers' bodies (field -> bytes) to one ``gpu`` frame per host, and how many hosts were left out: of
    the hosts not in ``known``, ``room`` at most are kept (the first by name, so the same ones each round).
    CPU-bound (10,000 GPUs: 80,000 series): ``PrometheusSource`` runs it in a thread, so the event loop (keys,
    paints) keeps its turns."""
    hosts = group({field: _vector(METRICS[field], body, host_label) for field, body in contents.items()})
    left_out = 0
    if room is not None:
        new = sorted(h for h in hosts if h not in known)
        for host in new[room:]:
            del hosts[host]
        left_out = max(0, len(new) - room)
    return frames(hosts), left_out


async def query_all(client: httpx2.AsyncClient, url: str, timeout: float) -> dict[str, bytes]:
    """Every metric's instant-query answer (field -> body), asked at once; SourceDown with one reason when any
    fails to arrive (the bodies are checked by ``decode_answers``)."""
    api = url.rstrip("/") + "/api/v1/query"

    async def one(metric: str) -> bytes:
        try:
            resp = await client.get(api, params={"query": metric}, timeout=timeout)
        except httpx2.TimeoutException:
            raise SourceDown(f"no answer within {timeout:g} s") from None
        except httpx2.HTTPError as exc:
            raise SourceDown(str(exc) or type(exc).__name__) from None
        if resp.status_code != 200:
            raise SourceDown(f"HTTP {resp.status_code} for {metric}")
        return resp.content

    fields = list(METRICS)
    answers = await asyncio.gather(*(one(METRICS[f]) for f in fields), return_exceptions=True)
    for answer in answers:  # the first failure in METRICS' order, not the first to arrive: the same reason each round
        if isinstance(answer, BaseException):
            raise answer
    return dict(zip(fields, answers, strict=True))  # type: ignore[arg-type]


class PrometheusSource:
    """One ``[[source]] prometheus = URL``: polls every ``spec.interval``; ``status`` "starting" | "ok" | "down"."""

    def __init__(self, spec: SourceSpec, state: FleetState, report: Callable[[str, str | None], None]) -> None:
        self.spec, self.state, self.report = spec, state, report
        self.key = f"prometheus {spec.prometheus}"
        self.shown = url_origin(spec.prometheus, path=True)  # for lines and logs: no user or password
        self.status, self.detail = "starting", ""
        self.left_out = 0  # hosts the last answer had beyond MAX_NEW_HOSTS
        self._logged: str | None = None  # the failure reason last logged (None: up, or never failed)
        self.last_ok: float | None = None
        self.polls = 0
        self.hosts_only: set[str] = set()  # instances known only from this Prometheus
        self.covered: set[str] = set()  # fleet-file instances its last good answer had GPUs for
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self.key)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        async with httpx2.AsyncClient() as client:
            while True:
                started = time.monotonic()
                try:
                    await self.poll(client)
                except Exception as exc:  # an answer this code did not foresee: a reason, never a dead source
                    self._down(f"unusable answer ({type(exc).__name__}: {exc})")
                await asyncio.sleep(max(0.1, self.spec.interval - (time.monotonic() - started)))

    async def poll(self, client: httpx2.AsyncClient) -> None:
        """One round: query, apply; a failure is a status and a line, never an exception."""
        self.polls += 1
        try:
            contents = await asyncio.wait_for(query_all(client, self.spec.prometheus, self.spec.timeout),
                                              self.spec.timeout + 1)
            room = max(0, MAX_NEW_HOSTS - len(self.hosts_only))
            by_host, left_out = await asyncio.to_thread(decode_answers, contents, self.spec.host_label,
                                                        frozenset(self.match_table()), room)
        except (SourceDown, TimeoutError) as exc:
            self._down(str(exc) or f"no answer within {self.spec.timeout:g} s")
            return
        await self.apply(by_host)
        self._capped(left_out)
        if self._logged is not None:
            log.info("Prometheus %s: answering again (was: %s)", self.shown, self._logged)
            self._logged = None
        self.status, self.detail, self.last_ok = "ok", "", time.time()
        self.report(self.key, None)

    def _down(self, reason: str) -> None:
        """Status "down" with ``reason`` (its one line); logged once per reason, not every round."""
        self.status, self.detail = "down", one_line(reason, 300)
        since = "" if self.last_ok is None else f" (last answer {time.time() - self.last_ok:.0f} s ago)"
        self.report(self.key, f"Prometheus {self.shown}: {self.detail}{since}")
        if self.detail != self._logged:
            log.warning("Prometheus %s: %s", self.shown, self.detail)
            self._logged = self.detail

    def _capped(self, left_out: int) -> None:
        """A line (and a log line when it starts) while answers carry more new hosts than one source may create."""
        key = f"{self.key} hosts"
        if left_out:
            line = (f"Prometheus {self.shown}: {left_out} hosts left out (a source creates at most "
                    f"{MAX_NEW_HOSTS} instances)")
            self.report(key, line)
            if not self.left_out:
                log.warning("%s", line)
        elif self.left_out:
            self.report(key, None)
        self.left_out = left_out

    async def apply(self, by_host: dict[str, dict[str, Any]]) -> None:
        """Each host's frame into the fleet state, ``APPLY_SLICE`` hosts per turn of the event loop."""
        names = self.match_table()
        state = self.state
        covered: set[str] = set()
        for n, (host, frame) in enumerate(by_host.items(), 1):
            if n % APPLY_SLICE == 0:
                await asyncio.sleep(0)  # a key or a paint between slices
            name = names.get(host)
            if name is None:
                name = host
                state.add_instance(Instance(name=host, host=host, transport="prometheus",
                                            tags=("prometheus",), source=self.key))
                state.set_link_status(host, "connected", f"via {self.key} (no SSH)")
                self.hosts_only.add(host)
                names[host] = host
            elif name not in self.hosts_only:
                covered.add(name)
            state.apply_frame(name, frame)  # a GpuFrame built by frames.gpu_frame
        self.covered = covered

    def match_table(self) -> dict[str, str]:
        """Prometheus host label value -> instance name (by name first, then by host)."""
        table: dict[str, str] = {}
        for name, inst in self.state.instances.items():
            host = getattr(inst.instance, "host", None)
            if host:
                table.setdefault(host, name)
        for name in self.state.instances:
            table[name] = name
        return table
