"""``[[alert]]`` rules: bad rows are one ``file:line: reason``; on a real sshd fleet a local HTTP receiver gets
the firing and the resolved notification once each, in Alertmanager's webhook shape; a failing receiver is
retried with backoff; a receiver that never answers does not hold up the console."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from console.inventory import BenchmarkSpec, Fleet
from console.inventory.schema import AlertSpec
from console.monitor import alerts as alerts_mod
from console.monitor.alerts import AlertEngine, fleet_alerts
from console.monitor.monitoring import MonitoredController, Monitoring
from tests.support.fleet_text import error, load
from tests.support.sshd import Sshd, ssh_instance
from tests.support.wait import until
from tests.test_serve import bench_process  # noqa: F401 (a fixture)


class Receiver:
    """A webhook receiver on 127.0.0.1: keeps every JSON body; answers ``fail_first`` posts with 503."""

    def __init__(self, fail_first: int = 0) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.times: list[float] = []  # when each body arrived
        self.attempts = 0
        self.fail_first = fail_first
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.attempts += 1
                if outer.attempts <= outer.fail_first:
                    self.send_response(503)
                    self.end_headers()
                    return
                outer.bodies.append(json.loads(data))
                outer.times.append(time.time())
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def alerts(self, status: str) -> list[dict[str, Any]]:
        return [a for b in self.bodies for a in b["alerts"] if a["status"] == status]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    try:
        yield r
    finally:
        r.close()


# -- the fleet file ---------------------------------------------------------------------------------------



def test_an_alert_row_becomes_a_rule(tmp_path: Path) -> None:
    fleet = load(tmp_path, '[[alert]]\nname = "BenchDown"\nstatuses = ["benchmark_down", "failed"]\n'
                           'verdicts = "oom"\ninstances = "vast-*"\ntags = ["bench"]\nfor = 30\nrepeat = 600\n'
                           'webhook = ["http://127.0.0.1:9/a", "https://example.org/b"]\nbell = true\n'
                           'severity = "critical"\nsend_resolved = false\nsummary = "benchmark down"\n')
    (rule,) = fleet_alerts(fleet)
    assert rule == AlertSpec(
        name="BenchDown", statuses=("benchmark_down", "failed"), verdicts=("oom",), instances=("vast-*",),
        tags=("bench",), for_seconds=30.0, repeat=600.0, webhooks=("http://127.0.0.1:9/a", "https://example.org/b"),
        bell=True, severity="critical", send_resolved=False, summary="benchmark down", source=rule.source)
    assert rule.source.endswith("fleet.toml:5")
    assert fleet_alerts(load(tmp_path, "")) == []


@pytest.mark.parametrize(("text", "expected"), [
    ('[[alert]]\nname = "X"\nstatuses = ["okk"]\nbell = true\n',
     "F:7: alert 'X': statuses must be a status or a list of them: failed, needs_action, unreachable, "
     "benchmark_down, stale, gpu_idle, connecting, ok, not ['okk']"),
    ('[[alert]]\nname = "X"\nbell = true\n', "F:5: alert 'X': needs statuses = [...], verdicts = [...], "
     'idle_for = "20m" or gpu_health = [...] (what to alert on)'),
    ('[[alert]]\nname = "X"\nstatuses = "failed"\n', 'F:5: alert \'X\': needs webhook = "http://..." or '
     "bell = true (where to send it)"),
    ('[[alert]]\nname = "X"\nstatuses = "failed"\nwebhook = "ftp://h/x"\n',
     "F:8: alert 'X': webhook must be an http:// or https:// URL or a list of them, not 'ftp://h/x'"),
    ('[[alert]]\nname = "X"\nstatuses = "failed"\nwebhook = "http://user:pw@h:99999/x"\n',  # no such port
     "F:8: alert 'X': webhook must be an http:// or https:// URL or a list of them, not 'http://user:pw@h:99999/x'"),
    ('[[alert]]\nname = "X"\nstatuses = "failed"\nbell = "yes"\n',
     "F:8: alert 'X': bell must be true or false (not a string), not 'yes'"),
    ('[[alert]]\nname = "X"\nstatuses = "failed"\nbell = true\nfor = -1\n',
     "F:9: alert 'X': for must be a number of seconds from 0 to 86400, not -1"),
    ('[[alert]]\nname = "X"\nstatuses = "failed"\nbell = true\nrepeat = 1e9\n',
     "F:9: alert 'X': repeat must be a number of seconds from 0 (never) to 604800, not 1000000000.0"),
    ('[[alert]]\nname = "X"\nstatuses = "failed"\nbell = true\nwebhok = "http://h"\n',
     "F:9: alert 'X': unknown alert key 'webhok' (did you mean 'webhook'?)"),
    ('[[alert]]\nname = "X"\nverdicts = ["Not A Code"]\nbell = true\n',
     "F:7: alert 'X': verdicts must be a verdict code or a list of them, like [\"oom\", \"benchmark_not_running\"], "
     "not ['Not A Code']"),
    ('[[alert]]\nstatuses = "failed"\nbell = true\n', "F:5: alert #1 needs name"),
    ('[[alert]]\nname = "X"\nstatuses = "failed"\nbell = true\n\n[[alert]]\nname = "X"\nstatuses = "ok"\n'
     'bell = true\n', "F:11: duplicate alert name 'X' (first is alert #1)"),
    ('[[alert]]\nname = "X"\ngpu_health = ["hw_slowdown", "ecc"]\nbell = true\n',
     "F:7: alert 'X': gpu_health must be a GPU health field or a list of them: ecc_uncorrected, row_remap_failure, "
     "row_remap_pending, retired_pages_pending, xid, hw_slowdown, hw_thermal, hw_power_brake, sw_thermal, "
     "sw_power_cap, pcie_degraded, not ['hw_slowdown', 'ecc']"),
    ('[[alert]]\nname = "X"\nstatuses = "failed"\ngpu_health = "xid"\nbell = true\n',
     "F:8: alert 'X': gpu_health is a rule of its own: leave out statuses, verdicts and idle_for (write two rules)"),
    ('[[alert]]\nname = "X"\nstatuses = "failed"\nseverity = "page"\nbell = true\n',
     "F:8: alert 'X': severity must be 'info', 'warning', 'error' or 'critical', not 'page'"),
])
def test_bad_alert_rows_are_one_line_with_file_and_line(tmp_path: Path, text: str, expected: str) -> None:
    assert error(tmp_path, text) == expected


def test_the_alert_gpu_health_fields_are_the_ones_evaluated(tmp_path: Path) -> None:
    import typing

    from console.core.gpu_health import ALERT_FIELDS
    from console.inventory.schema import HealthField

    assert typing.get_args(HealthField) == ALERT_FIELDS
    (rule,) = fleet_alerts(load(tmp_path, '[[alert]]\nname = "G"\ngpu_health = ["xid", "hw_slowdown", "xid"]\n'
                                          'bell = true\n'))
    assert rule.gpu_health == ("xid", "hw_slowdown") and rule.statuses == ()


def test_the_alert_statuses_are_the_status_table() -> None:
    import typing

    from console.core.status import STATUSES
    from console.inventory.schema import StatusName

    assert set(typing.get_args(StatusName)) == set(STATUSES)


# -- on a real fleet ------------------------------------------------------------------------------------------


async def test_firing_and_resolved_once_each_on_an_sshd_fleet(
    sshd: Sshd, tmp_path: Path, receiver: Receiver, bench_process: Any  # noqa: F811 (the fixture)
) -> None:
    proc, token, argv = bench_process
    inst = ssh_instance(sshd, "box1", tags=("obs",), benchmark=BenchmarkSpec(match=(token,)))
    other = ssh_instance(sshd, "box2", tags=("other",), benchmark=BenchmarkSpec(match=(token + "-never",)))
    fleet = Fleet(instances=[inst, other], source="test")
    rule = AlertSpec(name="BenchmarkDown", statuses=("benchmark_down",), tags=("obs",), for_seconds=1.0,
                     webhooks=(receiver.url,), severity="critical", summary="the benchmark stopped")
    fleet.alerts = [rule]  # type: ignore[attr-defined]  (as load_fleet carries them)
    monitoring = Monitoring(fleet, history=False)
    controller = MonitoredController(fleet, monitoring, read_only=True)
    await controller.start()
    restarted = None
    try:
        box = controller.state.instances["box1"]
        await until(lambda: box.status == "ok" and box.bench_running)
        await until(lambda: controller.state.instances["box2"].status == "benchmark_down")
        await asyncio.sleep(2.5)  # box2 is down but out of the rule's tags: nothing is sent
        assert receiver.bodies == []
        proc.kill()
        proc.wait()
        await until(lambda: len(receiver.alerts("firing")) == 1, timeout=30)
        restarted = subprocess.Popen(argv)
        await until(lambda: len(receiver.alerts("resolved")) == 1, timeout=30)
        await asyncio.sleep(3)  # and nothing more comes
    finally:
        await controller.stop()
        if restarted is not None:
            restarted.kill()
            restarted.wait()
    assert len(receiver.bodies) == 2
    firing, resolved = receiver.bodies
    for body, status in ((firing, "firing"), (resolved, "resolved")):
        assert body["version"] == "4" and body["status"] == status and body["receiver"] == "fleet-console"
        assert body["groupLabels"] == {"alertname": "BenchmarkDown"}
        assert body["groupKey"] == '{}:{alertname="BenchmarkDown"}'
        (alert,) = body["alerts"]
        assert alert["labels"]["alertname"] == "BenchmarkDown" and alert["labels"]["name"] == "box1"
        assert alert["labels"]["severity"] == "critical" and alert["labels"]["host"] == "127.0.0.1"
        assert alert["annotations"]["summary"] == "the benchmark stopped"
        assert alert["fingerprint"] == alerts_mod.fingerprint("BenchmarkDown", "box1")
        assert alert["startsAt"].endswith("Z")
    assert firing["alerts"][0]["labels"]["status"] == "benchmark_down"
    assert firing["alerts"][0]["endsAt"] == alerts_mod.ZERO_TIME
    assert resolved["alerts"][0]["endsAt"] > resolved["alerts"][0]["startsAt"]
    assert monitoring.counters["fleet_alert_notifications"] == {("BenchmarkDown", "firing"): 1.0,
                                                                ("BenchmarkDown", "resolved"): 1.0}


# -- delivery ---------------------------------------------------------------------------------------------------


def _down_state(name: str = "n1") -> Any:
    from console.core.state import FleetState
    from console.inventory import Instance

    state = FleetState()
    state.add_instance(Instance(name=name, host="10.0.0.1"))
    state.set_link_status(name, "unreachable", "connection refused")
    return state


async def test_a_failing_receiver_is_retried_with_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(alerts_mod, "BACKOFF_FIRST", 0.05)
    flaky = Receiver(fail_first=2)
    try:
        state = _down_state()
        engine = AlertEngine([AlertSpec(name="Down", statuses=("unreachable",), webhooks=(flaky.url,))], state)
        engine.start()
        engine.evaluate()
        await until(lambda: len(flaky.bodies) == 1, timeout=10)
        assert flaky.attempts == 3
        engine.evaluate()  # still firing: deduplicated
        await asyncio.sleep(0.3)
        assert len(flaky.bodies) == 1
        await engine.stop()
    finally:
        flaky.close()


@pytest.mark.slow
async def test_a_receiver_that_never_answers_does_not_block(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(alerts_mod, "POST_TIMEOUT", 1.0)
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(16)  # accepts (in the kernel) and never answers
    url = f"http://127.0.0.1:{hole.getsockname()[1]}/hook"
    try:
        state = _down_state()
        for i in range(50):
            from console.inventory import Instance

            state.add_instance(Instance(name=f"x{i}", host="h"))
            state.set_link_status(f"x{i}", "unreachable", "")
        engine = AlertEngine([AlertSpec(name="Down", statuses=("unreachable",), webhooks=(url,), repeat=1.0)], state)
        engine.start()
        lag = []
        for _ in range(5):
            started = time.perf_counter()
            engine.evaluate()
            lag.append(time.perf_counter() - started)
            await asyncio.sleep(0.2)
        # a sender that waited for the receiver would take POST_TIMEOUT (1 s) a call; the bound is on that, not
        # on speed (the first call builds 50 alerts, ~0.2 s on a loaded 2-core box: CI failed a 0.05 s bound)
        assert max(lag) < alerts_mod.POST_TIMEOUT / 2, lag
        stop_started = time.perf_counter()
        await engine.stop()  # bounded even with a queue that cannot drain
        assert time.perf_counter() - stop_started < 5
    finally:
        hole.close()
