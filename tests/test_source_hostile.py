"""What a Prometheus ``[[source]]`` brings is someone else's text and numbers: a stand-in Prometheus on 127.0.0.1
(its ``/api/v1/query`` JSON, served with http.server) answers with escape sequences in labels, ``+Inf`` values,
more hosts than one source may create, and failures; the console takes what is usable and says the rest once."""

from __future__ import annotations

import http.server
import json
import logging
import threading
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest

from console.core.state import FleetState
from console.inventory import Fleet, Instance
from console.inventory.records import SourceSpec
from console.monitor.monitoring import MonitoredController, Monitoring
from console.sources import prometheus as prom
from console.sources.prometheus import PrometheusSource
from tests.support.wait import until

EVIL_HOST = "evil\x1b]0;pwned\x07\n2024-01-01 00:00:00 INFO transition forged: ok -> failed"
EVIL_MODEL = "\x1b]0;title set by a label\x07NVIDIA H100\x1b[2J\u202e"
GOOD_VALUES = {"DCGM_FI_DEV_GPU_UTIL": "97", "DCGM_FI_DEV_FB_USED": "1000", "DCGM_FI_DEV_FB_FREE": "79000",
               "DCGM_FI_DEV_GPU_TEMP": "61", "DCGM_FI_DEV_POWER_USAGE": "500", "DCGM_FI_DEV_XID_ERRORS": "0",
               "DCGM_FI_DEV_SM_CLOCK": "1980", "DCGM_FI_DEV_MEM_CLOCK": "2619"}


class StandIn:
    """Prometheus's instant-query API on 127.0.0.1: ``series`` is a list of (labels, {metric: value text}) that
    every query answers from; ``fail`` (an HTTP status) or ``raw`` (a body) replace the answer when set."""

    def __init__(self) -> None:
        self.series: list[tuple[dict[str, str], dict[str, str]]] = []
        self.fail: int | None = None
        self.raw: bytes | None = None
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query).get("query", [""])[0]
                code, body = (outer.fail, b"down") if outer.fail else (200, outer.raw or outer.answer(query))
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, metric: str) -> bytes:
        now = time.time()
        result: list[dict[str, Any]] = [{"metric": dict(labels, __name__=metric), "value": [now, values[metric]]}
                                        for labels, values in self.series if metric in values]
        return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stand_in() -> Iterator[StandIn]:
    server = StandIn()
    try:
        yield server
    finally:
        server.close()


def gpu(host: str, index: int = 0, model: str = "NVIDIA H100 80GB HBM3", **values: str) -> tuple[dict[str, str],
                                                                                                     dict[str, str]]:
    labels = {"Hostname": host, "gpu": str(index), "modelName": model, "UUID": f"GPU-{host[:8]}-{index}"}
    return labels, {**GOOD_VALUES, **values}


async def poll(source: PrometheusSource) -> None:
    async with httpx2.AsyncClient() as client:
        await source.poll(client)


def source_for(url: str, state: FleetState, lines: dict[str, str | None] | None = None) -> PrometheusSource:
    report = lines.__setitem__ if lines is not None else (lambda key, line: None)
    return PrometheusSource(SourceSpec(prometheus=url, interval=1.0, timeout=3.0), state, report)


async def test_escape_sequences_in_labels_reach_no_name_metric_or_log_line(
    stand_in: StandIn, caplog: pytest.LogCaptureFixture
) -> None:
    """serve with its exporter and transition log: a host label with an OSC title sequence and a newline, a GPU
    model with a screen clear and a bidi override; a host label that is only escapes names nothing."""
    stand_in.series = [gpu(EVIL_HOST, 0, EVIL_MODEL), gpu("\x1b[31m\x1b[0m", 0), gpu("node-ok", 0)]
    fleet = Fleet(instances=[], source="test", sources=[SourceSpec(prometheus=stand_in.url, interval=1.0)])
    monitoring = Monitoring(fleet, metrics=("127.0.0.1", 0), log_transitions=True)
    controller = MonitoredController(fleet, monitoring, read_only=True)
    caplog.set_level(logging.INFO, logger="fleet_console")
    await controller.start()
    try:
        state = controller.state
        await until(lambda: len(state.instances) == 2 and all(i.status == "ok" for i in state.instances.values()),
                    timeout=20)
        await until(lambda: sum("transition" in r.getMessage() for r in caplog.records) >= 2, timeout=10)
        async with httpx2.AsyncClient() as client:
            exposition = (await client.get(monitoring.server.url, timeout=5)).text
    finally:
        await controller.stop()
    evil = "evil 2024-01-01 00:00:00 INFO transition forged: ok -> failed"
    assert set(state.instances) == {evil, "node-ok"}
    assert state.instances[evil].gpus[0].get("name") == "NVIDIA H100"
    assert state.instances[evil].host == evil
    assert "\x1b" not in exposition and "\x07" not in exposition and "\u202e" not in exposition
    assert [line for line in exposition.splitlines() if line.startswith("fleet_instance_info")] == [
        f'fleet_instance_info{{name="{evil}",host="{evil}",tags="prometheus"}} 1.0',
        'fleet_instance_info{name="node-ok",host="node-ok",tags="prometheus"} 1.0']
    assert 'model="NVIDIA H100"' in exposition
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith(f"transition {evil}:") for m in messages), messages
    for message in messages:
        assert message.isprintable(), repr(message)


async def test_an_infinite_value_is_a_missing_one_and_the_source_keeps_answering(stand_in: StandIn) -> None:
    """``+Inf`` temperature, ``-Inf`` utilization, ``NaN`` power: those figures are absent, the rest of the answer
    is there, and the source's own loop keeps polling (before: the first ``+Inf`` ended it, every host went STALE)."""
    stand_in.series = [gpu("node-a", 0, DCGM_FI_DEV_GPU_TEMP="+Inf"), gpu("node-a", 1, DCGM_FI_DEV_GPU_UTIL="-Inf"),
                       gpu("node-a", 2, DCGM_FI_DEV_POWER_USAGE="NaN"), gpu("node-b", 0)]
    state = FleetState()
    lines: dict[str, str | None] = {}
    source = source_for(stand_in.url, state, lines)
    source.start()
    try:
        await until(lambda: source.polls >= 2 and source.status == "ok", timeout=15,
                    detail=lambda: f"{source.status} {source.detail} polls={source.polls}")
    finally:
        await source.stop()
    a = state.instances["node-a"].gpus
    assert a[0].get("temp") is None and a[0].util == 97
    assert a[1].util is None and a[1].get("temp") == 61
    assert a[2].get("power") is None and a[2].util == 97
    assert state.instances["node-b"].gpus[0].get("temp") == 61
    assert lines[source.key] is None


async def test_one_source_creates_at_most_max_new_hosts_and_says_how_many_it_left_out(
    stand_in: StandIn, caplog: pytest.LogCaptureFixture
) -> None:
    """2,500 unknown hosts: 2,000 instances, the same ones each round; a fleet-file host still gets its GPUs; one
    line (and one log line) says 500 were left out; it goes once the answer fits."""
    hosts = [f"node-{i:05d}" for i in range(2500)]
    stand_in.series = [gpu(h) for h in hosts]
    state = FleetState()
    state.add_instance(Instance(name="mine", host=hosts[-1]))  # named by the fleet file: not a new host
    lines: dict[str, str | None] = {}
    source = source_for(stand_in.url, state, lines)
    caplog.set_level(logging.INFO, logger="fleet_console.sources")
    await poll(source)
    await poll(source)
    assert source.status == "ok", source.detail
    assert len(state.instances) == 2001
    assert source.hosts_only == set(hosts[:2000])
    assert sorted(state.instances["mine"].gpus) == [0]
    cap_lines = [line for key, line in lines.items() if key != source.key and line]
    assert len(cap_lines) == 1 and "499 hosts left out" in cap_lines[0], lines
    assert f"at most {prom.MAX_NEW_HOSTS} instances" in cap_lines[0] and prom.MAX_NEW_HOSTS == 2000
    assert sum("hosts left out" in r.getMessage() for r in caplog.records) == 1
    stand_in.series = [gpu(h) for h in hosts[:100]]
    await poll(source)
    assert not any(line for line in lines.values())


async def test_a_failing_source_logs_its_reason_once_again_when_it_changes_and_its_recovery(
    stand_in: StandIn, caplog: pytest.LogCaptureFixture
) -> None:
    stand_in.series = [gpu("node-a")]
    source = source_for(stand_in.url, FleetState())
    caplog.set_level(logging.INFO, logger="fleet_console.sources")

    def said() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "fleet_console.sources"]

    stand_in.fail = 503
    for _ in range(3):
        await poll(source)
    assert said() == [f"Prometheus {stand_in.url}: HTTP 503 for DCGM_FI_DEV_GPU_UTIL"]
    stand_in.fail, stand_in.raw = None, b'{"status": "error", "error": "bad\\u001b]0;x\\u0007\\nforged line"}'
    await poll(source)
    await poll(source)
    assert said()[1:] == [f"Prometheus {stand_in.url}: DCGM_FI_DEV_GPU_UTIL: bad forged line"]
    stand_in.raw = None
    await poll(source)
    await poll(source)
    assert source.status == "ok"
    assert said()[2:] == [f"Prometheus {stand_in.url}: answering again (was: DCGM_FI_DEV_GPU_UTIL: bad forged line)"]
