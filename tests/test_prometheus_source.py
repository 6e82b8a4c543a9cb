"""[[source]] prometheus: a real Prometheus (Debian package) scraping a local DCGM-exporter-format endpoint.

No mock of the HTTP client or of Prometheus: the test serves DCGM-exporter's exposition format (its metric
names and labels) with http.server, starts ``prometheus`` on 127.0.0.1 with a temp data dir scraping it every
second, and points the source at it.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx2
import pytest

from console.core.state import FleetState
from console.inventory import Instance, load_fleet
from console.inventory.errors import ConfigError
from console.inventory.records import SourceSpec
from console.sources.prometheus import PrometheusSource
from tests.support.wait import until_sync

PROMETHEUS = shutil.which("prometheus")
HOSTS, GPUS = 3, 8

# dcgm-exporter's default counters, as its /metrics shows them (HELP/TYPE lines, labels in its order)
_HELP = {
    "DCGM_FI_DEV_SM_CLOCK": ("gauge", "SM clock frequency (in MHz)."),
    "DCGM_FI_DEV_MEM_CLOCK": ("gauge", "Memory clock frequency (in MHz)."),
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", "GPU temperature (in C)."),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W)."),
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %)."),
    "DCGM_FI_DEV_FB_FREE": ("gauge", "Framebuffer memory free (in MiB)."),
    "DCGM_FI_DEV_FB_USED": ("gauge", "Framebuffer memory used (in MiB)."),
    "DCGM_FI_DEV_XID_ERRORS": ("gauge", "Value of the last XID error encountered."),
}


def exposition(hosts: int = HOSTS, gpus: int = GPUS) -> bytes:
    lines = []
    for metric, (kind, text) in _HELP.items():
        lines += [f"# HELP {metric} {text}", f"# TYPE {metric} {kind}"]
        for h in range(hosts):
            for g in range(gpus):
                labels = (f'gpu="{g}",UUID="GPU-{h:04x}{g:04x}-d9cf-fef3-62e9-d92044ab6e52",'
                          f'pci_bus_id="00000000:{g + 7:02X}:00.0",device="nvidia{g}",'
                          f'modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-{h:04d}",'
                          f'DCGM_FI_DRIVER_VERSION="550.54.15"')
                value = {"DCGM_FI_DEV_SM_CLOCK": 1980, "DCGM_FI_DEV_MEM_CLOCK": 2619, "DCGM_FI_DEV_GPU_TEMP": 60 + g,
                         "DCGM_FI_DEV_POWER_USAGE": 612.25, "DCGM_FI_DEV_GPU_UTIL": 90 + g % 10,
                         "DCGM_FI_DEV_FB_FREE": 20000, "DCGM_FI_DEV_FB_USED": 61000,
                         "DCGM_FI_DEV_XID_ERRORS": 79 if (h, g) == (1, 3) else 0}[metric]
                lines.append(f"{metric}{{{labels}}} {value}")
    return ("\n".join(lines) + "\n").encode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Exporter:
    """dcgm-exporter's /metrics, served from a thread."""

    def __init__(self, body: bytes) -> None:
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(outer.body)))
                self.end_headers()
                self.wfile.write(outer.body)

            def log_message(self, *args: object) -> None:
                pass

        self.body = body
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_prometheus(tmp: Path, targets: list[int], scrape: float = 1.0) -> tuple[subprocess.Popen[bytes], str]:
    assert PROMETHEUS is not None
    port = free_port()
    config = tmp / "prometheus.yml"
    config.write_text(
        f"global:\n  scrape_interval: {scrape:g}s\n  scrape_timeout: {scrape:g}s\nscrape_configs:\n  - job_name: dcgm\n"
        "    static_configs:\n      - targets: [" + ", ".join(f"'127.0.0.1:{p}'" for p in targets) + "]\n")
    log = open(tmp / "prometheus.log", "wb")  # noqa: SIM115 - the child keeps it
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=log,
                            start_new_session=True)
    log.close()
    return proc, f"http://127.0.0.1:{port}"


def stop(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture
def prometheus(tmp_path: Path):
    if PROMETHEUS is None:
        pytest.skip("no prometheus binary (Debian: apt-get install prometheus)")
    exporter = Exporter(exposition())
    proc, url = start_prometheus(tmp_path, [exporter.port])
    try:

        def scraped() -> bool:  # the first scrape is in
            with contextlib.suppress(httpx2.HTTPError, ValueError):
                r = httpx2.get(url + "/api/v1/query", params={"query": "DCGM_FI_DEV_GPU_UTIL"}, timeout=2)
                return len(r.json()["data"]["result"]) == HOSTS * GPUS
            return False

        until_sync(scraped, 60, "prometheus to scrape the exporter", interval=0.3,
                   detail=lambda: (tmp_path / "prometheus.log").read_text()[-800:])
        yield url
    finally:
        stop(proc)
        exporter.close()


@pytest.mark.slow
async def test_prometheus_fills_gpu_panes_matched_and_prometheus_only(prometheus: str) -> None:
    state = FleetState()
    state.add_instance(Instance(name="gpu-node-0000", host="10.0.0.5"))  # matched by name
    state.add_instance(Instance(name="b", host="gpu-node-0001"))  # matched by host
    lines: dict[str, str | None] = {}
    source = PrometheusSource(SourceSpec(prometheus=prometheus, interval=1.0, timeout=3.0), state,
                              lambda key, line: lines.__setitem__(key, line))
    async with httpx2.AsyncClient() as client:
        await source.poll(client)
    assert source.status == "ok", source.detail
    assert set(state.instances) == {"gpu-node-0000", "b", "gpu-node-0002"}
    assert source.hosts_only == {"gpu-node-0002"}
    only = state.instances["gpu-node-0002"]
    assert only.instance.transport == "prometheus" and only.link_status == "connected"
    for name in state.instances:
        gpus = state.instances[name].gpus
        assert sorted(gpus) == list(range(GPUS)), name
    g = state.instances["b"].gpus[3]
    assert g.util == 93 and g.get("temp") == 63 and g.get("power") == 612.2
    assert g.get("mem_used") == 61000 * 2**20 and g.get("mem_total") == 81000 * 2**20
    assert g.get("name") == "NVIDIA H100 80GB HBM3" and g.get("sm_clock") == 1980
    assert g.get("error") == "XID 79"
    assert lines[source.key] is None


async def test_prometheus_down_is_a_line_not_a_stall() -> None:
    port = free_port()  # nothing listens there
    state = FleetState()
    lines: dict[str, str | None] = {}
    source = PrometheusSource(SourceSpec(prometheus=f"http://127.0.0.1:{port}", interval=1.0, timeout=1.0), state,
                              lambda key, line: lines.__setitem__(key, line))
    t0 = time.monotonic()
    async with httpx2.AsyncClient() as client:
        await source.poll(client)
    assert time.monotonic() - t0 < 3
    assert source.status == "down"
    assert lines[source.key] and f"127.0.0.1:{port}" in str(lines[source.key])


async def test_slow_prometheus_times_out_while_the_loop_runs() -> None:
    """A server that accepts and never answers: the poll gives up at its timeout; the loop keeps ticking."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    try:
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        source = PrometheusSource(SourceSpec(prometheus=url, interval=1.0, timeout=0.8), FleetState(),
                                  lambda key, line: None)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.05)
                ticks += 1

        task = asyncio.create_task(ticker())
        t0 = time.monotonic()
        async with httpx2.AsyncClient() as client:
            await source.poll(client)
        took = time.monotonic() - t0
        task.cancel()
        assert source.status == "down" and "0.8" in source.detail, source.detail
        assert took < 3 and ticks >= 10
    finally:
        listener.close()


def test_source_rows_load_and_bad_rows_say_file_and_line(tmp_path: Path) -> None:
    good = tmp_path / "fleet.toml"
    good.write_text('[[source]]\nprometheus = "http://127.0.0.1:9090/"\ninterval = 10\n\n'
                    '[[source]]\nprometheus = "http://10.0.0.1:9090"\nhost_label = "instance"\nssh = "always"\n')
    fleet = load_fleet(good)
    assert [(s.prometheus, s.host_label, s.interval, s.ssh) for s in fleet.sources] == [
        ("http://127.0.0.1:9090", "Hostname", 10.0, "on_demand"), ("http://10.0.0.1:9090", "instance", 5.0, "always")]
    assert fleet.sources[0].source == f"{good}:1"
    for text, line, words in [
        ('[[source]]\nprometheus = "ftp://x"\n', 2, "http"),
        ('[[source]]\nprometheus = "http://x:9090"\ninterval = 0\n', 3, "1 to 3600"),
        ('[[source]]\nprometheus = "http://x:9090"\nhost_label = "host-name"\n', 3, "label"),
        ('[[source]]\nhost_label = "Hostname"\n', 1, "prometheus"),
        ('[[source]]\nprometheus = "http://x:9090"\nssh = "sometimes"\n', 3, "on_demand"),
        ('[[source]]\nprometheus = "http://x:9090"\n\n[[source]]\nprometheus = "http://x:9090/"\n', 5, "already"),
    ]:
        bad = tmp_path / "bad.toml"
        bad.write_text(text)
        with pytest.raises(ConfigError) as info:
            load_fleet(bad)
        assert str(info.value).startswith(f"{bad}:{line}:"), (text, str(info.value))
        assert words in str(info.value), str(info.value)


async def test_an_answer_that_is_not_prometheus_is_a_line_naming_it() -> None:
    """A login page from a proxy, or JSON of another shape, is "down" with a reason, not an exception."""
    for body, words in [(b"<html>proxy login</html>", "not JSON"),
                        (b'{"status": "success", "data": {"result": [{"metric": {}, "value": "93"}]}}',
                         "not a Prometheus answer")]:
        server = Exporter(body)
        try:
            lines: dict[str, str | None] = {}
            source = PrometheusSource(SourceSpec(prometheus=f"http://127.0.0.1:{server.port}", timeout=3.0),
                                      FleetState(), lines.__setitem__)
            async with httpx2.AsyncClient() as client:
                await source.poll(client)
            assert source.status == "down" and words in source.detail, source.detail
            assert words in (lines[source.key] or "")
        finally:
            server.close()
