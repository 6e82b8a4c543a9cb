"""``serve`` and the exporter: /metrics scraped over HTTP from a monitored controller on a real sshd fleet
(simulated GPUs at the NVML boundary, a real benchmark process) and from ``fleet-console serve --demo`` as a
subprocess, values checked against the fleet state; SIGTERM ends serve cleanly with one-line logs."""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from console.inventory import BenchmarkSpec, Fleet
from console.monitor.monitoring import MonitoredController, Monitoring
from tests.support import frames
from tests.support.sshd import Sshd, ssh_instance
from tests.support.wait import until, until_sync

ROOT = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """name+labels -> value for every sample of one scrape."""
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def pick(samples: dict, metric: str, **labels: str) -> list[float]:
    want = set(labels.items())
    return [v for (n, ls), v in samples.items() if n == metric and want <= set(ls)]


@pytest.fixture
def bench_process(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str, list[str]]]:
    """A long-lived process the instance's benchmark patterns match (this host is the sshd's host): a script
    named after a fresh token (a pattern names the program), its argv to start another."""
    token = f"fleet-obs-bench-{secrets.token_hex(4)}"
    script = tmp_path / f"{token}.py"
    script.write_text("import time\ntime.sleep(300)\n")
    argv = [sys.executable, str(script)]
    proc = subprocess.Popen(argv)
    try:
        yield proc, token, argv
    finally:
        proc.kill()
        proc.wait()


def simulated(pid: int) -> dict:
    return {"gpu": {"simulate": {
        "gpus": 2, "name": "NVIDIA GeForce RTX 3090", "mem_total_mib": 24576, "jitter": False,
        "state": {"gpus": [{"load": 40, "mem_used_mib": 3000, "processes": [{"pid": pid, "mem_mib": 1000}]},
                           {"load": 0, "mem_used_mib": 0}]},
    }}}


def statuses(state: Any) -> Callable[[], object]:
    """``until``'s detail on a time-out: each instance's (status, detail, link status)."""
    return lambda: {n: (i.status, i.status_detail, i.link_status) for n, i in state.instances.items()}


async def test_metrics_on_an_sshd_fleet_match_the_state(sshd: Sshd, tmp_path: Path, bench_process) -> None:
    proc, token, _ = bench_process
    inst = ssh_instance(sshd, "box1", tags=("obs", "rtx"), benchmark=BenchmarkSpec(match=(token,)),
                        agent_extra=simulated(proc.pid))
    down = ssh_instance(sshd, "gone", port=1, tags=("obs",))  # nothing listens on port 1
    fleet = Fleet(instances=[inst, down], source="test")
    monitoring = Monitoring(fleet, metrics=("127.0.0.1", 0), history=tmp_path / "history.sqlite3")
    controller = MonitoredController(fleet, monitoring, read_only=True)
    await controller.start()
    try:
        state = controller.state
        box = state.instances["box1"]
        await until(lambda: box.status == "ok" and len(box.gpus) == 2 and box.bench_running
                    and state.instances["gone"].status == "unreachable", detail=statuses(state))
        await until(lambda: all(g.sample.get("procs") is not None for g in box.gpus.values()))
        url = monitoring.server.url
        samples = await asyncio.to_thread(scrape, url)

        assert pick(samples, "fleet_instance_up", name="box1") == [1.0]
        assert pick(samples, "fleet_instance_up", name="gone") == [0.0]
        assert pick(samples, "fleet_instance_status", name="box1", status="ok") == [1.0]
        assert pick(samples, "fleet_instance_status", name="gone", status="unreachable") == [1.0]
        assert sum(pick(samples, "fleet_instance_status", name="box1")) == 1.0
        assert pick(samples, "fleet_benchmark_up", name="box1") == [1.0]
        assert pick(samples, "fleet_instance_info", name="box1", host="127.0.0.1", tags="obs,rtx") == [1.0]
        age = pick(samples, "fleet_instance_data_age_seconds", name="box1")
        assert len(age) == 1 and 0 <= age[0] < 10
        for gpu in box.gpus.values():
            labels = {"name": "box1", "gpu": str(gpu.index), "uuid": gpu.static["uuid"], "model": gpu.static["name"]}
            assert pick(samples, "fleet_gpu_utilization_ratio", **labels) == [gpu.util / 100]
            assert pick(samples, "fleet_gpu_memory_used_bytes", **labels) == [float(gpu.sample["mem_used"])]
            assert pick(samples, "fleet_gpu_memory_total_bytes", **labels) == [24576.0 * MIB]
            assert pick(samples, "fleet_gpu_temperature_celsius", **labels) == [float(gpu.sample["temp"])]
            assert pick(samples, "fleet_gpu_lost", **labels) == [0.0]
        assert pick(samples, "fleet_gpu_utilization_ratio", name="box1", gpu="0") == [0.4]
        assert pick(samples, "fleet_process_gpu_memory_bytes", name="box1", gpu="0") == [1000.0 * MIB]
        assert pick(samples, "fleet_instances", status="ok") == [1.0]
        assert pick(samples, "fleet_status_changes_total", name="gone", status="unreachable") == [1.0]

        # the benchmark stops: the metrics follow the state at the next scrape
        proc.kill()
        proc.wait()
        await until(lambda: box.status == "benchmark_down", timeout=30)
        samples = await asyncio.to_thread(scrape, url)
        assert pick(samples, "fleet_benchmark_up", name="box1") == [0.0]
        assert pick(samples, "fleet_instance_status", name="box1", status="benchmark_down") == [1.0]
        assert pick(samples, "fleet_process_gpu_memory_bytes", name="box1") == []
    finally:
        await controller.stop()
    assert monitoring.server is not None and monitoring.server._server is None  # the port is closed


def test_metrics_bound_to_loopback_by_default() -> None:
    from console.monitor.monitoring import parse_bind

    assert parse_bind(None, 9999, None) == ("127.0.0.1", 9999)
    assert parse_bind("0.0.0.0", None, 9847) == ("0.0.0.0", 9847)
    assert parse_bind(None, None, None) is None
    with pytest.raises(ValueError):
        parse_bind(None, 70000, None)


LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ (INFO |WARNING|ERROR|DEBUG) \S.*$")


def test_serve_demo_metrics_and_sigterm(tmp_path: Path) -> None:
    """``serve --demo`` as a service runs it: scrape it, check against the demo's known shape, TERM it."""
    env = dict(os.environ, FLEET_CONSOLE_STATE_DIR=str(tmp_path / "state"), PYTHONPATH=str(ROOT))
    err = (tmp_path / "serve.err").open("w+")
    proc = subprocess.Popen([sys.executable, "-m", "console", "serve", "--demo", "--instances", "2",
                             "--metrics-port", "0", "--record", str(tmp_path / "rec.gz")],
                            stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL, env=env, cwd=tmp_path)
    try:
        def up() -> dict | None:  # the scrape once both instances are up with GPUs
            text = (tmp_path / "serve.err").read_text()
            m = re.search(r"metrics on (http://127\.0\.0\.1:\d+/metrics)", text)
            if m:
                samples = scrape(m.group(1))
                ups = pick(samples, "fleet_instance_up")
                gpus = pick(samples, "fleet_gpu_utilization_ratio")
                if len(ups) == 2 and all(ups) and gpus:
                    return samples
            assert proc.poll() is None, text
            return None

        samples = until_sync(up, 60, "serve --demo to show 2 instances up with GPUs", interval=0.5,
                             detail=(tmp_path / "serve.err").read_text)
        from console.core.status import STATUSES

        assert len(pick(samples, "fleet_instance_status")) == 2 * len(STATUSES)  # a series per status and instance
        assert sum(pick(samples, "fleet_instance_status")) == 2.0
        assert sum(pick(samples, "fleet_instances")) == 2.0
        assert all(0 <= v <= 1 for v in pick(samples, "fleet_gpu_utilization_ratio"))
        assert pick(samples, "fleet_frames_total")[0] > 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = (tmp_path / "serve.err").read_text().splitlines()
    assert lines and all(LOG_LINE.match(line) for line in lines), lines
    assert lines[-1].endswith("INFO  stopped")
    assert not (tmp_path / "state" / "history.sqlite3").exists()  # the demo's history went with the demo
    assert not (tmp_path / "state" / "audit.jsonl").exists()
    assert (tmp_path / "rec.gz").stat().st_size > 0


def test_the_fast_text_is_what_prometheus_client_writes(tmp_path: Path) -> None:
    """``render_text`` (the scrape path) and prometheus-client's encoder give the same samples."""
    from prometheus_client import generate_latest

    from console.core.state import FleetState
    from console.inventory import Instance
    from console.monitor.metrics import FleetCollector, make_registry, render_text

    state = FleetState()
    for n in range(3):
        name = f'b"x\\{n}'  # escaping
        state.add_instance(Instance(name=name, host="h", tags=("a", "b")))
        state.set_link_status(name, "connected", "")
        state.apply_frame(name, frames.gpu([
            {"index": 0, "util": 7, "mem_used": 5, "mem_total": 10, "temp": 50, "power": 99.5, "name": "G\nX",
             "uuid": "GPU-1", "lost": False, "error": None, "procs": []},
            {"index": 1, "lost": True, "error": "gone", "procs": []}], 1.0))
    collector = FleetCollector(state, lambda: {"fleet_restarts": {('b"x\\0', "ok"): 2.0}})

    def parse(text: bytes) -> dict:
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for f in text_string_to_metric_families(text.decode()) for s in f.samples}

    fast, slow = parse(render_text(collector.gather())), parse(generate_latest(make_registry(collector)))
    age = [k for k in fast if k[0] == "fleet_instance_data_age_seconds"]
    for k in age:  # the clock moved between the two
        assert abs(fast.pop(k) - slow.pop(k)) < 5
    assert fast == slow and len(fast) > 40


def test_the_dashboard_and_the_alert_rules_use_metrics_that_exist() -> None:
    from console.core.state import FleetState
    from console.monitor.metrics import gather

    names = set()
    for fam in gather(FleetState(), {}, 0.0):
        names.add(fam.name + "_total" if fam.kind == "counter" else fam.name)
    for doc in ("docs/grafana-dashboard.json", "docs/alert-rules.yml", "docs/monitoring.md"):
        used = set(re.findall(r"\bfleet_[a-z_]+[a-z]\b", (ROOT / doc).read_text()))
        used = {u for u in used if not u.startswith("fleet_console")}
        assert used and used <= names, (doc, used - names)


def test_the_fleet_files_alert_rules_are_a_typed_field_of_the_fleet(tmp_path: Path) -> None:
    """``Fleet.alerts`` is a declared field (no attribute set on the side): mypy sees it, a ``Fleet`` built in
    code has none, ``dataclasses.replace`` keeps it."""
    import dataclasses

    from console.inventory import load_fleet
    from console.inventory.schema import AlertSpec

    assert "alerts" in {f.name for f in dataclasses.fields(Fleet)}
    assert Fleet(instances=[]).alerts == []
    path = tmp_path / "fleet.toml"
    path.write_text('[[instance]]\nname = "a"\nhost = "127.0.0.1"\n\n'
                    '[[alert]]\nname = "Down"\nstatuses = "benchmark_down"\nbell = true\n')
    fleet = load_fleet(path)
    assert [(r.name, r.statuses, r.bell) for r in fleet.alerts] == [("Down", ("benchmark_down",), True)]
    assert all(isinstance(r, AlertSpec) for r in dataclasses.replace(fleet).alerts)


def _fleet_text(sshd: Sshd, *names: str) -> str:
    """Agentless instances on the sshd (``python`` points nowhere): the test is about links and metrics."""
    head = (f'[defaults]\nuser = "{sshd.user}"\nkey = "{sshd.client_key_path}"\nknown_hosts = "{sshd.known_hosts}"\n'
            'python = "/nonexistent/python3"\nwatch_dirs = []\n\n')
    return head + "".join(f'[[instance]]\nname = "{n}"\nhost = "127.0.0.1"\nport = {sshd.port}\n\n' for n in names)


def _replace(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def test_serve_follows_fleet_file_edits_and_sighup(sshd: Sshd, tmp_path: Path) -> None:
    """``serve --fleet FILE``: an instance added to the file gets a link and metrics, a removed one leaves
    /metrics; SIGHUP (systemd's ExecReload) reloads and serve keeps running; each reload is one log line."""
    path = tmp_path / "fleet.toml"
    _replace(path, _fleet_text(sshd, "a"))
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    env.update(HOME=str(tmp_path), FLEET_CONSOLE_STATE_DIR=str(tmp_path / "state"), PYTHONPATH=str(ROOT))
    err_path = tmp_path / "serve.err"
    err = err_path.open("w")
    record = tmp_path / "rec.jsonl.gz"
    proc = subprocess.Popen([sys.executable, "-m", "console", "serve", "--fleet", str(path), "--metrics-port", "0",
                             "--no-history", "--no-auto-diagnose", "--record", str(record)],
                            stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL, env=env, cwd=tmp_path)

    def ups() -> dict[str, float]:
        m = re.search(r"metrics on (http://127\.0\.0\.1:\d+/metrics)", err_path.read_text())
        if not m:
            return {}
        return {dict(ls)["name"]: v for (n, ls), v in scrape(m.group(1)).items() if n == "fleet_instance_up"}

    def wait(pred: Any, what: str, timeout: float = 60.0) -> None:
        def done() -> bool:
            if pred():
                return True
            assert proc.poll() is None, f"serve exited ({what}):\n{err_path.read_text()}"
            return False

        until_sync(done, timeout, what, interval=0.3, detail=err_path.read_text)

    try:
        wait(lambda: ups() == {"a": 1.0}, "a up")
        _replace(path, _fleet_text(sshd, "a", "b"))
        wait(lambda: ups() == {"a": 1.0, "b": 1.0}, "b added by the edit, up")
        assert "reloaded: 2 instances; added b" in err_path.read_text()
        _replace(path, _fleet_text(sshd, "b"))
        wait(lambda: ups() == {"b": 1.0}, "a removed by the edit, gone from /metrics")
        reloads = err_path.read_text().count("reloaded:")
        proc.send_signal(signal.SIGHUP)  # the file as it is: reloaded all the same, nothing changes, serve runs on
        wait(lambda: err_path.read_text().count("reloaded:") > reloads, "the reload on SIGHUP")
        assert proc.poll() is None and ups() == {"b": 1.0}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        err.close()
    lines = err_path.read_text().splitlines()
    assert lines and all(LOG_LINE.match(line) for line in lines), lines
    assert lines[-1].endswith("INFO  stopped")

    # the recording follows the file too: b appears in the replay when it was added, a leaves when removed
    from console.monitor.record import read_records
    from console.monitor.replay import ReplaySource

    kinds = [(r["k"], r.get("n") or r["i"]["name"]) for r in read_records(record) if r["k"] in ("inst", "gone")]
    assert ("inst", "b") in kinds and ("gone", "a") in kinds and kinds.index(("inst", "b")) < kinds.index(("gone", "a"))
    source = ReplaySource(record)
    assert [i.name for i in source.instances] == ["a"]
    added = next(r["t"] for r in read_records(record) if r["k"] == "inst" and r["i"]["name"] == "b")
    source.seek_to(added + 0.001)
    assert set(source.state.instances) == {"a", "b"}
    source.run_to_end()
    assert set(source.state.instances) == {"b"} and source.state.instances["b"].ever_connected
    assert [t[1:] for t in source.transitions] == [t[1:] for t in source.recorded]


def test_the_exporter_follows_prometheus_conventions() -> None:
    """Utilization is a 0-1 ``_ratio``; host and tags only on ``fleet_instance_info`` (one label set per metric
    across instances); no ``pid`` label; every counter is there at 0 before its first event (issue 35.22)."""
    from console.core.state import FleetState
    from console.core.status import STATUSES
    from console.inventory import Instance
    from console.monitor.metrics import FleetCollector, render_text

    state = FleetState()
    for name, tags in (("a", ("x", "y")), ("b", ())):
        state.add_instance(Instance(name=name, host="10.0.0.1", tags=tags))
        state.set_link_status(name, "connected", "")
        state.apply_frame(name, frames.gpu([{"index": 0, "util": 40, "mem_used": 5, "mem_total": 10, "temp": 50,
                                            "uuid": "GPU-1", "name": "G", "lost": False, "error": None,
                                            "procs": [{"pid": 4242, "mem": 7}]}], 1.0))
    seeds = {"fleet_alert_notifications": [("Down", "firing"), ("Down", "resolved")],
             "fleet_webhook_failures": [("http://127.0.0.1:9",)]}
    collector = FleetCollector(state, lambda: {}, seeds=lambda: seeds)
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(render_text(collector.gather()).decode()) for s in f.samples}
    assert pick(samples, "fleet_gpu_utilization_ratio", name="a", gpu="0") == [0.4]
    assert not [n for n, _ in samples if n.endswith("_percent")]
    label_sets: dict[str, set[frozenset[str]]] = {}
    for metric, labels in samples:
        keys = {k for k, _ in labels}
        assert "pid" not in keys, metric
        if metric != "fleet_instance_info":
            assert not keys & {"host", "tags"}, (metric, keys)
        label_sets.setdefault(metric, set()).add(frozenset(keys))
    assert all(len(sets) == 1 for sets in label_sets.values()), label_sets
    assert pick(samples, "fleet_instance_info", name="a", host="10.0.0.1", tags="x,y") == [1.0]
    for name in ("a", "b"):
        assert pick(samples, "fleet_restarts_total", name=name, outcome="failed") == [0.0]
        assert len(pick(samples, "fleet_status_changes_total", name=name)) == len(STATUSES)
    assert pick(samples, "fleet_alert_notifications_total", alertname="Down", state="firing") == [0.0]
    assert pick(samples, "fleet_webhook_failures_total", webhook="http://127.0.0.1:9") == [0.0]
