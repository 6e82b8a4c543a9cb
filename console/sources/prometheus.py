"""GPU panes from a Prometheus that already scrapes DCGM-exporter: one instant query per metric for the fleet.

Why: a fleet that runs DCGM-exporter already pays for collection; ten thousand GPUs cost the console a handful
of HTTP requests per interval instead of a thousand SSH links.  Each interval the source asks
``/api/v1/query`` for every metric in ``METRICS`` (all hosts at once), groups the samples by the host label
(``Hostname`` by default) and the ``gpu`` label, and hands each host one full ``gpu`` frame
(``console/agent/frames.py``) to ``FleetState.apply_frame``.  A host matches an instance by name or by host;
a host known only from Prometheus gets an instance of its own (transport ``prometheus``: no SSH is opened
for it; it is shown, not acted on).

A Prometheus that is down or slow never stalls the UI: every request has a timeout and runs on the event loop
without blocking it; the failure is one line in ``report`` (the controller's ``fleet_errors``), cleared on
the next good answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import httpx2

from console.agent.frames import gpu_frame, gpu_record
from console.inventory import Instance
from console.inventory.records import SourceSpec
from console.state import FleetState

MIB = 2**20

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
    return None if v != v else v  # NaN: no value


def _int(v: float | None) -> int | None:
    return None if v is None else round(v)


def group(results: dict[str, list[dict[str, Any]]], host_label: str) -> dict[str, dict[int, dict[str, Any]]]:
    """host -> gpu index -> {field: value, plus the labels ``modelName``, ``UUID``, ``driver``}."""
    hosts: dict[str, dict[int, dict[str, Any]]] = {}
    for field, samples in results.items():
        for sample in samples:
            labels = sample.get("metric") or {}
            host = labels.get(host_label)
            try:
                index = int(labels.get("gpu", ""))
            except ValueError:
                continue
            if not host:
                continue
            gpu = hosts.setdefault(host, {}).get(index)
            if gpu is None:
                gpu = hosts[host][index] = {"name": labels.get("modelName"), "uuid": labels.get("UUID"),
                                            "driver": labels.get("DCGM_FI_DRIVER_VERSION")}
            gpu[field] = _num(sample.get("value"))
    return hosts


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


async def query_all(client: httpx2.AsyncClient, url: str, timeout: float) -> dict[str, list[dict[str, Any]]]:
    """Every metric's instant vector, asked at once; SourceDown with one reason when any fails."""
    api = url.rstrip("/") + "/api/v1/query"

    async def one(metric: str) -> list[dict[str, Any]]:
        try:
            resp = await client.get(api, params={"query": metric}, timeout=timeout)
        except httpx2.TimeoutException:
            raise SourceDown(f"no answer within {timeout:g} s") from None
        except httpx2.HTTPError as exc:
            raise SourceDown(str(exc) or type(exc).__name__) from None
        if resp.status_code != 200:
            raise SourceDown(f"HTTP {resp.status_code} for {metric}")
        try:
            body = resp.json()
        except ValueError:
            raise SourceDown(f"not JSON for {metric}") from None
        if body.get("status") != "success":
            raise SourceDown(f"{metric}: {body.get('error') or body.get('status')}")
        result = (body.get("data") or {}).get("result") or []
        return result if isinstance(result, list) else []

    fields = list(METRICS)
    answers = await asyncio.gather(*(one(METRICS[f]) for f in fields))
    return dict(zip(fields, answers, strict=True))


class PrometheusSource:
    """One ``[[source]] prometheus = URL``: polls every ``spec.interval``; ``status`` "starting" | "ok" | "down"."""

    def __init__(self, spec: SourceSpec, state: FleetState, report: Callable[[str, str | None], None]) -> None:
        self.spec, self.state, self.report = spec, state, report
        self.key = f"prometheus {spec.prometheus}"
        self.status, self.detail = "starting", ""
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
                await self.poll(client)
                await asyncio.sleep(max(0.1, self.spec.interval - (time.monotonic() - started)))

    async def poll(self, client: httpx2.AsyncClient) -> None:
        """One round: query, apply; a failure is a status and a line, never an exception."""
        self.polls += 1
        try:
            results = await asyncio.wait_for(query_all(client, self.spec.prometheus, self.spec.timeout),
                                             self.spec.timeout + 1)
        except (SourceDown, TimeoutError) as exc:
            self.status, self.detail = "down", str(exc) or f"no answer within {self.spec.timeout:g} s"
            since = "" if self.last_ok is None else f" (last answer {time.time() - self.last_ok:.0f} s ago)"
            self.report(self.key, f"Prometheus {self.spec.prometheus}: {self.detail}{since}")
            return
        self.apply(frames(group(results, self.spec.host_label)))
        self.status, self.detail, self.last_ok = "ok", "", time.time()
        self.report(self.key, None)

    def apply(self, by_host: dict[str, dict[str, Any]]) -> None:
        names = self.match_table()
        state = self.state
        covered: set[str] = set()
        for host, frame in by_host.items():
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
