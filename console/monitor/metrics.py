"""The Prometheus exporter: ``/metrics`` read from the fleet state at scrape time.

A custom ``Collector`` walks ``FleetState`` when Prometheus asks (every 15 s or so) instead of updating
gauges on every frame: frames stay a few dict updates, and a scrape costs what it costs once. The HTTP
side is a small asyncio server in the console's own event loop, so a scrape sees the state between two
frames (no thread reads dicts the loop is changing). Bound to 127.0.0.1 unless told otherwise.

Labels: ``name`` (the instance; ``instance`` is Prometheus's own target label) on every instance series;
``host`` and ``tags`` (comma separated) only on ``fleet_instance_info``, joined on ``name``; per GPU ``name``,
``gpu`` (index), ``uuid``, ``model``. No ``pid`` label (a restart would start a new series each time): a GPU's
benchmark memory is summed per program. Utilization is a 0-1 ``_ratio``; every counter is there at 0 from the
first scrape (per instance, per alert rule, per webhook). docs/monitoring.md lists every metric.
The text format is written by ``render_text`` from plain tuples (a scrape of 100 x 8 GPUs in a few tens of
ms); OpenMetrics, when asked for, goes through prometheus-client's encoder from the same ``gather``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import math
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from console.core.state import FleetState, InstanceState
from console.core.status import STATUSES
from console.web.auth import HttpSecurity, Policy

DEFAULT_PORT = 9847
DEFAULT_BIND = "127.0.0.1"
MAX_REQUEST_BYTES = 16 * 1024
REQUEST_TIMEOUT = 10.0

INFO = ["name", "host", "tags"]  # only on fleet_instance_info: join on name for the others
INST = ["name"]
GPU = ["name", "gpu", "uuid", "model"]  # host and tags by a join on fleet_instance_info (keeps 8 GPUs' series small)
# (metric suffix, help, sample key, scale); the GPU gauges
GPU_GAUGES = (
    ("utilization_ratio", "GPU utilization (0-1)", "util", 0.01),
    ("memory_used_bytes", "GPU memory used", "mem_used", 1.0),
    ("memory_total_bytes", "GPU memory total", "mem_total", 1.0),
    ("temperature_celsius", "GPU temperature", "temp", 1.0),
    ("power_watts", "GPU power draw", "power", 1.0),
    ("power_limit_watts", "GPU power limit", "power_limit", 1.0),
    ("sm_clock_hertz", "GPU SM clock", "sm_clock", 1e6),
    ("memory_clock_hertz", "GPU memory clock", "mem_clock", 1e6),
)


class Family:
    """One metric's samples as plain tuples: cheap to build per scrape, rendered by ``render_text`` (the
    hot path) or turned into prometheus-client families by ``FleetCollector.collect``."""

    __slots__ = ("help", "kind", "labels", "name", "samples")

    def __init__(self, name: str, help: str, labels: list[str], kind: str = "gauge") -> None:
        self.name, self.help, self.labels, self.kind = name, help, labels, kind
        self.samples: list[tuple[tuple[str, ...], float]] = []


Counts = dict[str, dict[tuple[str, ...], float]]
Seeds = dict[str, list[tuple[str, ...]]]
RESTART_OUTCOMES = ("ok", "failed", "refused", "unknown")


def gather(state: FleetState, counters: Counts, now: float, seeds: Seeds | None = None) -> list[Family]:
    """Every metric of the fleet at ``now``: one walk over the state. ``seeds``: counter label sets shown at 0
    before their first event (alert rules, webhooks); the per-instance ones are seeded here."""
    f = Family
    info = f("fleet_instance_info", "1 per instance; join on name for host and tags", INFO)
    up = f("fleet_instance_up", "1 when the console's link to the instance is connected", INST)
    status = f("fleet_instance_status", "1 for the instance's current status", [*INST, "status"])
    age = f("fleet_instance_data_age_seconds", "seconds since the instance's last data", INST)
    bench = f("fleet_benchmark_up", "1 when a benchmark process runs (absent: unknown)", INST)
    verdict = f("fleet_instance_verdict", "1 for the last diagnosis verdict", [*INST, "code", "severity"])
    verdict_ts = f("fleet_instance_verdict_timestamp_seconds", "when the last diagnosis ran", INST)
    findings = f("fleet_diagnosis_findings", "findings of the last diagnosis by code", [*INST, "code", "severity"])
    lost = f("fleet_gpu_lost", "1 when the GPU is lost or missing from the instance's report", GPU)
    gauges = [(f("fleet_gpu_" + suffix, text, GPU), key, scale) for suffix, text, key, scale in GPU_GAUGES]
    proc_mem = f("fleet_process_gpu_memory_bytes", "GPU memory of the benchmark's processes, summed per program",
                 [*INST, "gpu", "process"])
    totals = f("fleet_instances", "instances by status", ["status"])
    price = f("fleet_instance_price_per_hour", f"the rental's price per hour ({state.currency})", INST)
    idle_s = f("fleet_instance_idle_seconds", "seconds benchmark-down or GPU-idle since the console began watching",
               INST, "counter")
    spend = f("fleet_instance_spend", f"money spent ({state.currency}) since the console began watching", INST,
              "counter")
    for inst in state.instances.values():
        base = (inst.name,)
        idle_s.samples.append((base, inst.meter.seconds("idle", now)))
        cost = inst.instance.price_per_hour
        if cost is not None:
            price.samples.append((base, cost))
            spend.samples.append((base, inst.meter.watched(now) * cost / 3600.0))
        info.samples.append(((inst.name, inst.host, ",".join(inst.tags)), 1.0))
        up.samples.append((base, 1.0 if inst.link_status == "connected" else 0.0))
        current = inst.status
        status.samples.extend(((*base, s), 1.0 if current == s else 0.0) for s in STATUSES)
        a = inst.age(now)
        if a is not None:
            age.samples.append((base, a))
        if inst.bench_running is not None:
            bench.samples.append((base, 1.0 if inst.bench_running else 0.0))
        _diagnosis(inst, base, verdict, verdict_ts, findings)
        bench_pids = _bench_pids(inst)
        for gpu in inst.gpus.values():
            static: dict[str, Any] = gpu.static  # type: ignore[assignment]
            labels = (inst.name, str(gpu.index), str(static.get("uuid") or ""), str(static.get("name") or ""))
            gone = gpu.lost or gpu.missing
            lost.samples.append((labels, 1.0 if gone else 0.0))
            if gone:
                continue
            sample: dict[str, Any] = gpu.sample  # type: ignore[assignment]
            for family, key, scale in gauges:
                value = sample.get(key)
                if value is None:
                    value = static.get(key)
                if value is not None:
                    family.samples.append((labels, value * scale))
            if bench_pids:
                proc_mem.samples.extend(_program_memory(inst.name, str(gpu.index), sample, bench_pids))
    health = _health_families(state)
    counts = state.totals()
    totals.samples.extend(((s,), float(counts[s])) for s in STATUSES)
    frames = f("fleet_frames", "frames received from the agents", [], "counter")
    frames.samples.append(((), float(state.frames)))
    out = [info, up, status, age, bench, verdict, verdict_ts, findings, lost, *(g for g, _, _ in gauges), proc_mem,
           *health, totals, frames, price, idle_s, spend]
    zeros = _counter_zeros(state, seeds or {})
    for metric, (text, names) in COUNTERS.items():
        counter = f(metric, text, names, "counter")
        seen = counters.get(metric, {})
        counter.samples.extend(seen.items())
        counter.samples.extend((key, 0.0) for key in zeros.get(metric, ()) if key not in seen)
        out.append(counter)
    return out


# NVML health (issue 30; docs/monitoring.md lists each next to its DCGM field): (name, help, labels beyond GPU, kind)
HEALTH_FAMILIES: tuple[tuple[str, str, list[str], str], ...] = (
    ("fleet_gpu_ecc_errors", "ECC errors NVML counted (counter: volatile since the driver loaded, aggregate: "
     "the card's lifetime)", ["type", "counter"], "counter"),
    ("fleet_gpu_retired_pages", "memory pages retired", [], "gauge"),
    ("fleet_gpu_retired_pages_pending", "1 while a page retirement waits for a reboot", [], "gauge"),
    ("fleet_gpu_remapped_rows", "memory rows remapped", ["type"], "counter"),
    ("fleet_gpu_row_remap_pending", "1 while a row remap waits for a GPU reset", [], "gauge"),
    ("fleet_gpu_row_remap_failure", "1 when a row remap failed (the GPU needs service)", [], "gauge"),
    ("fleet_gpu_clock_event_active", "1 while this clock event (throttle) reason holds the clocks down", ["reason"],
     "gauge"),
    ("fleet_gpu_pcie_link_generation", "PCIe link generation now", [], "gauge"),
    ("fleet_gpu_pcie_link_max_generation", "PCIe link generation the card and slot can do", [], "gauge"),
    ("fleet_gpu_pcie_link_width", "PCIe lanes now", [], "gauge"),
    ("fleet_gpu_pcie_link_max_width", "PCIe lanes the card and slot can do", [], "gauge"),
    ("fleet_gpu_pcie_replays", "PCIe replays (link errors the GPU retried)", [], "counter"),
    ("fleet_gpu_xid_errors", "NVML Xid critical-error events seen, by Xid", ["xid"], "counter"),
    ("fleet_gpu_performance_state", "performance state (0: P0, full speed)", [], "gauge"),
)
CLOCK_REASONS = ("sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake")


def _health_families(state: FleetState) -> list[Family]:
    """The NVML health metrics of every GPU that reports them (a field the card does not support: no series)."""
    fams = {name: Family(name, text, [*GPU, *extra], kind) for name, text, extra, kind in HEALTH_FAMILIES}

    def put(name: str, labels: tuple[str, ...], value: Any) -> None:
        if isinstance(value, (bool, int, float)):
            fams[name].samples.append((labels, float(value)))

    for inst in state.instances.values():
        for gpu in inst.gpus.values():
            h: dict[str, Any] = gpu.health  # type: ignore[assignment]
            if not h and not gpu.xids:
                continue
            static: dict[str, Any] = gpu.static  # type: ignore[assignment]
            g = (inst.name, str(gpu.index), str(static.get("uuid") or ""), str(static.get("name") or ""))
            for key, kind, counter in (("ecc_corrected", "corrected", "volatile"),
                                       ("ecc_uncorrected", "uncorrected", "volatile"),
                                       ("ecc_corrected_agg", "corrected", "aggregate"),
                                       ("ecc_uncorrected_agg", "uncorrected", "aggregate")):
                put("fleet_gpu_ecc_errors", (*g, kind, counter), h.get(key))
            pages = h.get("retired_pages") or {}
            put("fleet_gpu_retired_pages", g, pages.get("count"))
            put("fleet_gpu_retired_pages_pending", g, pages.get("pending"))
            rows = h.get("remapped_rows") or {}
            put("fleet_gpu_remapped_rows", (*g, "corrected"), rows.get("corrected"))
            put("fleet_gpu_remapped_rows", (*g, "uncorrected"), rows.get("uncorrected"))
            put("fleet_gpu_row_remap_pending", g, rows.get("pending"))
            put("fleet_gpu_row_remap_failure", g, rows.get("failure"))
            active = h.get("clock_events")
            if isinstance(active, list):
                for reason in CLOCK_REASONS:
                    put("fleet_gpu_clock_event_active", (*g, reason), reason in active)
            pcie = h.get("pcie") or {}
            for name, key in (("fleet_gpu_pcie_link_generation", "gen"), ("fleet_gpu_pcie_link_max_generation",
                              "max_gen"), ("fleet_gpu_pcie_link_width", "width"),
                              ("fleet_gpu_pcie_link_max_width", "max_width"), ("fleet_gpu_pcie_replays", "replays")):
                put(name, g, pcie.get(key))
            counts: dict[int, int] = {}
            for event in gpu.xids:
                counts[event["xid"]] = counts.get(event["xid"], 0) + 1
            for xid, n in sorted(counts.items()):
                put("fleet_gpu_xid_errors", (*g, str(xid)), n)
            put("fleet_gpu_performance_state", g, h.get("pstate"))
    return list(fams.values())


def _counter_zeros(state: FleetState, seeds: Seeds) -> Seeds:
    """The label sets every counter has from the start: restarts per instance and outcome, status changes per
    instance and status, and the ``seeds`` given (alert rules x firing/resolved, webhooks)."""
    names = list(state.instances)
    return {**seeds,
            "fleet_restarts": [(n, o) for n in names for o in RESTART_OUTCOMES],
            "fleet_status_changes": [(n, s) for n in names for s in STATUSES]}


def _program_memory(name: str, gpu: str, sample: dict[str, Any], bench_pids: dict[int, str]
                    ) -> list[tuple[tuple[str, ...], float]]:
    """A GPU's benchmark memory summed per program (no pid label: a restart does not start new series)."""
    by_program: dict[str, float] = {}
    for p in sample.get("procs") or ():
        program = bench_pids.get(p.get("pid"))
        if program is not None and p.get("mem") is not None:
            by_program[program] = by_program.get(program, 0.0) + float(p["mem"])
    return [((name, gpu, program), mem) for program, mem in sorted(by_program.items())]


def _diagnosis(inst: InstanceState, base: tuple[str, ...], verdict: Family, verdict_ts: Family,
               findings: Family) -> None:
    diag = inst.diagnosis
    if not diag:
        return
    v = diag.get("verdict") or {}
    verdict.samples.append(((*base, str(v.get("code") or ""), str(v.get("severity") or "")), 1.0))
    if inst.diagnosis_at is not None:
        verdict_ts.samples.append((base, inst.diagnosis_at))
    by_code: dict[tuple[str, str], int] = {}
    for finding in diag.get("findings") or ():
        key = (str(finding.get("code") or ""), str(finding.get("severity") or ""))
        by_code[key] = by_code.get(key, 0) + 1
    for (code, severity), n in by_code.items():
        findings.samples.append(((*base, code, severity), float(n)))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if value != value:
        return "NaN"
    if value in (math.inf, -math.inf):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def render_text(families: list[Family]) -> bytes:
    """The Prometheus text format (0.0.4), as prometheus-client writes it, without its per-sample objects:
    a label set shared by several metrics (a GPU's) is escaped once."""
    out: list[str] = []
    cache: dict[int, str] = {}
    for fam in families:
        name = fam.name + "_total" if fam.kind == "counter" else fam.name
        out.append(f"# HELP {name} {fam.help}\n# TYPE {name} {fam.kind}\n")
        names = fam.labels
        for values, value in fam.samples:
            text = cache.get(id(values))
            if text is None:
                text = cache[id(values)] = (
                    "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in zip(names, values, strict=True)) + "}"
                    if values else "")
            out.append(f"{name}{text} {value!r}\n" if value - value == 0 else f"{name}{text} {_number(value)}\n")
    return "".join(out).encode()


class FleetCollector(Collector):
    """The fleet state as prometheus-client metric families, built per scrape (``gather``).

    ``counters()`` gives monotonically growing counts kept elsewhere (restarts, transitions, alerts), as
    ``{metric: {(label values...): value}}`` with each metric's label names in ``COUNTERS``.
    """

    def __init__(self, state: FleetState, counters: Callable[[], Counts] | None = None,
                 clock: Callable[[], float] = time.time, seeds: Callable[[], Seeds] | None = None) -> None:
        self.state = state
        self.counters = counters
        self.clock = clock
        self.seeds = seeds

    def describe(self) -> list[Metric]:
        return []  # no collect() at registration time

    def gather(self) -> list[Family]:
        return gather(self.state, self.counters() if self.counters is not None else {}, self.clock(),
                      self.seeds() if self.seeds is not None else None)

    def collect(self) -> Iterator[Metric]:
        for fam in self.gather():
            metric: Metric
            if fam.kind == "counter":
                metric = CounterMetricFamily(fam.name, fam.help, labels=fam.labels)
            else:
                metric = GaugeMetricFamily(fam.name, fam.help, labels=fam.labels)
            for values, value in fam.samples:
                metric.add_metric(list(values), value)
            yield metric


# Counter metrics the monitoring keeps: name -> (help, label names).
COUNTERS: dict[str, tuple[str, list[str]]] = {
    "fleet_restarts": ("benchmark restarts by outcome (ok, failed, refused, unknown)", ["name", "outcome"]),
    "fleet_status_changes": ("status transitions by the status entered", ["name", "status"]),
    "fleet_alert_notifications": ("alert notifications queued by rule and state", ["alertname", "state"]),
    # webhook: its scheme://host[:port] (console/monitor/alerts.py webhook_names), never the URL and its secrets
    "fleet_webhook_failures": ("webhook posts that failed (each retry counts), by receiver", ["webhook"]),
    # sink: the [[notify]] row's name (never its URL, token or password)
    "fleet_notify_messages": ("notification messages queued, by sink", ["sink"]),
    "fleet_notify_sent": ("notification messages the sink accepted", ["sink"]),
    "fleet_notify_failures": ("notification sends that failed (each retry counts), by sink", ["sink"]),
    "fleet_notify_flaps": ("troubles shorter than the sink's min_duration: counted, not sent", ["sink"]),
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


def render(collector: FleetCollector, registry: CollectorRegistry, accept: str = "") -> tuple[bytes, str]:
    """The exposition for a scrape and its content type: the text format from ``render_text`` (fast), or
    OpenMetrics through prometheus-client when the scraper asks for it."""
    encoder, content_type = choose_encoder(accept)
    if content_type.startswith("text/plain"):
        return render_text(collector.gather()), content_type
    return encoder(registry), content_type


class MetricsServer:
    """``GET /metrics`` (and ``/``, ``/healthz``) on an asyncio server; one request per connection."""

    def __init__(self, collector: FleetCollector, host: str = DEFAULT_BIND, port: int = DEFAULT_PORT,
                 security: HttpSecurity | None = None) -> None:
        self.collector = collector
        # the token (when one is set), TLS, the Host/Origin allowlist: console/web/auth.py; /healthz stays open
        self.security = security or HttpSecurity(Policy.build(None, host), None)
        self.registry = make_registry(collector)
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None
        self.scrapes = 0
        self.last_scrape_seconds = 0.0

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.security.scheme}://{host}:{self.port}/metrics"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, self.host, self.port, limit=MAX_REQUEST_BYTES,
                                                  ssl=self.security.ssl)
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
            path, _, query = target.partition("?")
            decision = self.security.policy.decide(path, headers, query)
            if decision.status:
                extra = {"WWW-Authenticate": 'Bearer realm="fleet-console"'} if decision.status == 401 else {}
                await _respond(writer, decision.status, (decision.reason + "\n").encode(), "text/plain", method,
                               extra)
            elif method not in ("GET", "HEAD"):
                await _respond(writer, 405, b"only GET\n", "text/plain", method)
            elif path == "/metrics":
                started = time.perf_counter()
                body, ctype = render(self.collector, self.registry, headers.get("accept", ""))
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
    reason = {200: "OK", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found", 405: "Method Not Allowed"
              }.get(code, "")
    head = [f"HTTP/1.1 {code} {reason}", f"Content-Type: {ctype}", f"Content-Length: {len(body)}",
            "Connection: close"]
    head += [f"{k}: {v}" for k, v in (extra or {}).items()]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
    if method != "HEAD":
        writer.write(body)
    await writer.drain()

