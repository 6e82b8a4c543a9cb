"""The Prometheus exporter: ``/metrics`` read from the fleet state at scrape time.

A custom ``Collector`` walks ``FleetState`` when Prometheus asks (every 15 s or so) instead of updating
gauges on every frame: frames stay a few dict updates, and a scrape costs what it costs once. The HTTP
side is a small asyncio server in the console's own event loop, so a scrape sees the state between two
frames (no thread reads dicts the loop is changing). Bound to 127.0.0.1 unless told otherwise.

Labels: ``name`` (the instance; ``instance`` is Prometheus's own target label), ``host``, ``tags`` (comma
separated), and per GPU ``gpu`` (index), ``uuid``, ``model``. docs/monitoring.md lists every metric.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from console.state import FleetState, InstanceState
from console.status import STATUSES

DEFAULT_PORT = 9847
DEFAULT_BIND = "127.0.0.1"
MAX_REQUEST_BYTES = 16 * 1024
REQUEST_TIMEOUT = 10.0

INST = ["name", "host", "tags"]
GPU = [*INST, "gpu", "uuid", "model"]
# (metric suffix, help, sample key, scale); the GPU gauges
GPU_GAUGES = (
    ("utilization_percent", "GPU utilization (%)", "util", 1.0),
    ("memory_used_bytes", "GPU memory used", "mem_used", 1.0),
    ("memory_total_bytes", "GPU memory total", "mem_total", 1.0),
    ("temperature_celsius", "GPU temperature", "temp", 1.0),
    ("power_watts", "GPU power draw", "power", 1.0),
    ("power_limit_watts", "GPU power limit", "power_limit", 1.0),
    ("sm_clock_hertz", "GPU SM clock", "sm_clock", 1e6),
    ("memory_clock_hertz", "GPU memory clock", "mem_clock", 1e6),
)


class FleetCollector(Collector):
    """The fleet state as metric families, built per scrape.

    ``counters()`` gives monotonically growing counts kept elsewhere (restarts, transitions, alerts), as
    ``{metric: {(label values...): value}}`` with each metric's label names in ``counter_labels``.
    """

    def __init__(self, state: FleetState, counters: Callable[[], dict[str, dict[tuple[str, ...], float]]] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.state = state
        self.counters = counters
        self.clock = clock

    def describe(self) -> list[Metric]:
        return []  # no collect() at registration time

    def collect(self) -> Iterator[Metric]:
        now = self.clock()
        g = GaugeMetricFamily
        up = g("fleet_instance_up", "1 when the console's link to the instance is connected", labels=INST)
        status = g("fleet_instance_status", "1 for the instance's current status", labels=[*INST, "status"])
        age = g("fleet_instance_data_age_seconds", "seconds since the instance's last data", labels=INST)
        bench = g("fleet_benchmark_up", "1 when a benchmark process runs (absent: unknown)", labels=INST)
        verdict = g("fleet_instance_verdict", "1 for the last diagnosis verdict", labels=[*INST, "code", "severity"])
        verdict_ts = g("fleet_instance_verdict_timestamp_seconds", "when the last diagnosis ran", labels=INST)
        findings = g("fleet_diagnosis_findings", "findings of the last diagnosis by code",
                     labels=[*INST, "code", "severity"])
        lost = g("fleet_gpu_lost", "1 when the GPU is lost or missing from the instance's report", labels=GPU)
        gauges = [(g("fleet_gpu_" + suffix, text, labels=GPU), key, scale) for suffix, text, key, scale in GPU_GAUGES]
        proc_mem = g("fleet_process_gpu_memory_bytes", "GPU memory of the benchmark's processes",
                     labels=[*INST, "gpu", "pid", "process"])
        totals = g("fleet_instances", "instances by status", labels=["status"])
        for inst in self.state.instances.values():
            base = [inst.name, inst.host, ",".join(inst.tags)]
            up.add_metric(base, 1.0 if inst.link_status == "connected" else 0.0)
            for s in STATUSES:
                status.add_metric([*base, s], 1.0 if inst.status == s else 0.0)
            a = inst.age(now)
            if a is not None:
                age.add_metric(base, a)
            if inst.bench_running is not None:
                bench.add_metric(base, 1.0 if inst.bench_running else 0.0)
            self._diagnosis(inst, base, verdict, verdict_ts, findings)
            bench_pids = _bench_pids(inst)
            for gpu in inst.gpus.values():
                labels = [*base, str(gpu.index), str(gpu.static.get("uuid") or ""), str(gpu.static.get("name") or "")]
                lost.add_metric(labels, 1.0 if gpu.lost or gpu.missing else 0.0)
                if gpu.lost or gpu.missing:
                    continue
                sample: dict[str, Any] = gpu.sample  # type: ignore[assignment]
                static: dict[str, Any] = gpu.static  # type: ignore[assignment]
                for family, key, scale in gauges:
                    value = sample.get(key)
                    if value is None:
                        value = static.get(key)
                    if value is not None:
                        family.add_metric(labels, value * scale)
                if bench_pids:
                    for p in sample.get("procs") or ():
                        name = bench_pids.get(p.get("pid"))
                        if name is not None and p.get("mem") is not None:
                            proc_mem.add_metric([*base, str(gpu.index), str(p["pid"]), name], p["mem"])
        counts = self.state.totals()
        for s in STATUSES:
            totals.add_metric([s], counts[s])
        yield from (up, status, age, bench, verdict, verdict_ts, findings, lost)
        yield from (family for family, _, _ in gauges)
        yield from (proc_mem, totals)
        yield from self._counters()

    def _counters(self) -> Iterator[Metric]:
        frames = CounterMetricFamily("fleet_frames", "frames received from the agents")
        frames.add_metric([], self.state.frames)
        yield frames
        values = self.counters() if self.counters is not None else {}
        for metric, (text, names) in COUNTERS.items():
            counter = CounterMetricFamily(metric, text, labels=names)
            for labels, value in values.get(metric, {}).items():
                counter.add_metric(list(labels), value)
            yield counter

    @staticmethod
    def _diagnosis(inst: InstanceState, base: list[str], verdict: GaugeMetricFamily, verdict_ts: GaugeMetricFamily,
                   findings: GaugeMetricFamily) -> None:
        diag = inst.diagnosis
        if not diag:
            return
        v = diag.get("verdict") or {}
        verdict.add_metric([*base, str(v.get("code") or ""), str(v.get("severity") or "")], 1.0)
        if inst.diagnosis_at is not None:
            verdict_ts.add_metric(base, inst.diagnosis_at)
        by_code: dict[tuple[str, str], int] = {}
        for f in diag.get("findings") or ():
            key = (str(f.get("code") or ""), str(f.get("severity") or ""))
            by_code[key] = by_code.get(key, 0) + 1
        for (code, severity), n in by_code.items():
            findings.add_metric([*base, code, severity], n)


# Counter metrics the monitoring keeps: name -> (help, label names).
COUNTERS: dict[str, tuple[str, list[str]]] = {
    "fleet_restarts": ("benchmark restarts by outcome (ok, failed, refused)", ["name", "host", "outcome"]),
    "fleet_status_changes": ("status transitions by the status entered", ["name", "host", "status"]),
    "fleet_alert_notifications": ("alert notifications queued by rule and state", ["alertname", "state"]),
    "fleet_webhook_failures": ("webhook posts that failed (each retry counts)", ["webhook"]),
}


def _bench_pids(inst: InstanceState) -> dict[int, str]:
    """pid -> process name of the instance's benchmark processes (its ``match`` patterns)."""
    if not inst.bench_patterns or not inst.procs:
        return {}
    out = {}
    for pid, rec in inst.procs.items():
        text = rec.get("cmdline") or rec.get("name") or ""
        if any(p.search(text) for p in inst.bench_patterns):
            out[pid] = str(rec.get("name") or "")
    return out


def make_registry(collector: Collector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def render(registry: CollectorRegistry, accept: str = "") -> tuple[bytes, str]:
    """The exposition text for a scrape (OpenMetrics when the scraper asks for it) and its content type."""
    encoder, content_type = choose_encoder(accept)
    return encoder(registry), content_type


class MetricsServer:
    """``GET /metrics`` (and ``/``, ``/healthz``) on an asyncio server; one request per connection."""

    def __init__(self, registry: CollectorRegistry, host: str = DEFAULT_BIND, port: int = DEFAULT_PORT) -> None:
        self.registry = registry
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None
        self.scrapes = 0
        self.last_scrape_seconds = 0.0

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self.port, limit=MAX_REQUEST_BYTES)
        sock = self._server.sockets[0] if self._server.sockets else None
        if sock is not None:
            self.port = int(sock.getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT)
            lines = head.decode("latin-1").split("\r\n")
            method, target = [*lines[0].split(" "), "", ""][:2]
            headers = {}
            for line in lines[1:]:
                key, sep, value = line.partition(":")
                if sep:
                    headers[key.strip().lower()] = value.strip()
            path = target.split("?", 1)[0]
            if method not in ("GET", "HEAD"):
                await _respond(writer, 405, b"only GET\n", "text/plain", method)
            elif path == "/metrics":
                started = time.perf_counter()
                body, ctype = render(self.registry, headers.get("accept", ""))
                self.last_scrape_seconds = time.perf_counter() - started
                self.scrapes += 1
                extra = {}
                if "gzip" in headers.get("accept-encoding", ""):
                    body = gzip.compress(body, compresslevel=1)
                    extra["Content-Encoding"] = "gzip"
                await _respond(writer, 200, body, ctype, method, extra)
            elif path == "/healthz":
                await _respond(writer, 200, b"ok\n", "text/plain", method)
            elif path == "/":
                page = b"fleet-console exporter: see /metrics\n"
                await _respond(writer, 200, page, "text/plain", method)
            else:
                await _respond(writer, 404, b"not found\n", "text/plain", method)
        except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


async def _respond(writer: asyncio.StreamWriter, code: int, body: bytes, ctype: str, method: str,
                   extra: dict[str, str] | None = None) -> None:
    reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed"}.get(code, "")
    head = [f"HTTP/1.1 {code} {reason}", f"Content-Type: {ctype}", f"Content-Length: {len(body)}",
            "Connection: close"]
    head += [f"{k}: {v}" for k, v in (extra or {}).items()]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
    if method != "HEAD":
        writer.write(body)
    await writer.drain()

