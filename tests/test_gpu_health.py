"""GPU health through NVML (issue 30), on the real pynvml path: the fake libnvidia-ml.so.1 scripts ECC counters,
clock event reasons, a narrow PCIe link and an Xid event on a host where ``dmesg`` is denied; the agent runs over
a real sshd; the state, the pane, the table, the GPUs tab, ``status --json``, ``/metrics`` and the diagnosis say it.
One sshd and one fake state for the module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from console.core.controller import FleetController
from console.core.state import FleetState
from console.inventory import Fleet
from console.link.validate import decode
from console.monitor.metrics import gather, render_text
from tests.fakes import nvml
from tests.support.sshd import Sshd, ssh_instance
from tests.support.wait import until
from themes import DARK
from widgets.gpu_panel import gpu_tab_lines
from widgets.palette import Palette
from widgets.pane import pane_lines
from widgets.table_rows import row_values

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "console"]
TOKEN = uuid.uuid4().hex[:8]  # this run's GPUs: Xids an agent keeps on this host are sent again only for them
HEALTHY = {
    "ecc_mode": True,
    "ecc": {"volatile": {"corrected": 1, "uncorrected": 0}, "aggregate": {"corrected": 7, "uncorrected": 0}},
    "remapped_rows": {"corrected": 0, "uncorrected": 0, "pending": 0, "failure": 0},
    "clock_events": [],
    "pcie": {"gen": 4, "width": 16, "max_gen": 4, "max_width": 16, "replays": 0},
    "pstate": 0,
    "persistence": True,
}


def datacenter_card(index: int, **over: Any) -> dict[str, Any]:
    """An A100-like device that reports every health field (healthy unless ``over`` says otherwise)."""
    fields = json.loads(json.dumps(HEALTHY))
    fields.update(over)
    return nvml.device(index, name="NVIDIA A100-SXM4-80GB", uuid=f"GPU-{TOKEN}-{index:04d}-hlth-0000-000000000000",
                       **fields)


def troubled_host() -> list[dict[str, Any]]:
    """GPU 0 at x8 of x16, GPU 1 in HW slowdown, GPU 3 with 2 uncorrectable ECC errors, GPU 5 an Xid 48."""
    devices = [datacenter_card(i) for i in range(6)]
    devices[0]["pcie"]["width"] = 8
    devices[1]["clock_events"] = ["hw_slowdown"]
    devices[3]["ecc"]["volatile"]["uncorrected"] = 2
    devices[5]["xids"] = [{"xid": 48, "pending": True}]  # happens right after any registration
    return devices


@pytest.fixture(scope="module")
def health_fake(tmp_path_factory: pytest.TempPathFactory) -> nvml.FakeNvml:
    """The module's fake NVML (the four-fault host); a test that changes it puts it back."""
    fake = nvml.FakeNvml(nvml.build_libnvml(), tmp_path_factory.mktemp("gpu-health-nvml") / "nvml-state.json")
    fake.write(nvml.state(troubled_host()))
    return fake


@pytest.fixture(scope="module")
def health_host(tmp_path_factory: pytest.TempPathFactory, health_fake: nvml.FakeNvml) -> Iterator[tuple[Sshd, Path]]:
    tmp = tmp_path_factory.mktemp("gpu-health")
    fake = health_fake
    server = Sshd(tmp / "sshd", env={**fake.env, "FAKE_DMESG_DENY": "1"})
    server.start()
    fleet = tmp / "fleet.toml"
    fleet.write_text("\n".join([
        "[[instance]]", 'name = "box1"', 'host = "127.0.0.1"', f"port = {server.port}", f'user = "{server.user}"',
        f'key = "{server.client_key_path}"', f'known_hosts = "{server.known_hosts}"', "watch_dirs = []", ""]))
    try:
        yield server, fleet
    finally:
        server.stop()


def cli(fleet: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, FLEET_CONSOLE_STATE_DIR=str(fleet.parent / "state"), PYTHONPATH=str(ROOT))
    return subprocess.run([*CLI, *args, "--fleet", str(fleet)], capture_output=True, text=True, timeout=90, env=env,
                          cwd=fleet.parent, stdin=subprocess.DEVNULL)


def test_status_json_shows_ecc_slowdown_link_and_xid_and_the_instance_failed(health_host: tuple[Sshd, Path]) -> None:
    _server, fleet = health_host
    result = cli(fleet, "status", "--json", "--timeout", "30")
    row = json.loads(result.stdout)["instances"][0]
    gpus = {g["index"]: g["health"] for g in row["gpus"]}
    assert gpus[3]["ecc_uncorrected"] == 2 and gpus[3]["ecc_corrected"] == 1
    assert gpus[1]["clock_events"] == ["hw_slowdown"]
    assert gpus[0]["pcie"] == {"gen": 4, "width": 8, "max_gen": 4, "max_width": 16, "replays": 0}
    assert [x["xid"] for x in gpus[5]["xids"]] == [48]
    assert gpus[2]["remapped_rows"] == {"corrected": 0, "uncorrected": 0, "pending": False, "failure": False}
    assert "retired_pages" not in gpus[2]  # an A100 answers NOT_SUPPORTED: absent, never an error
    assert row["status"] == "failed" and result.returncode == 1
    assert "GPU 3: 2 uncorrectable ECC errors" in row["detail"] and "GPU 5: Xid 48" in row["detail"]


def test_diagnose_gives_the_hardware_verdict_with_slowdown_and_link_checked(health_host: tuple[Sshd, Path]) -> None:
    _server, fleet = health_host
    result = cli(fleet, "diagnose", "box1", "--json", "--timeout", "30")
    data = json.loads(result.stdout)
    assert data["verdict"]["code"] == "gpu_ecc", data["verdict"]
    summaries = [f["summary"] for f in data["findings"] if f["code"] == "gpu_ecc"]
    assert any("GPU 3: 2 uncorrectable ECC errors" in s for s in summaries)
    assert any("GPU 5: Xid 48" in s for s in summaries)
    steps = {s["name"]: s for s in data["steps"]}
    checked = "\n".join(steps["gpu_health"]["lines"])
    assert "gpu1 clocks held down: HW slowdown" in checked and "gpu0 PCIe link x8 of x16" in checked
    assert any("dmesg: not permitted" in line for line in steps["signatures"]["lines"])  # seen without dmesg


async def test_pane_table_gpu_tab_and_metrics_show_the_four(health_host: tuple[Sshd, Path]) -> None:
    server, _fleet = health_host
    controller = FleetController(Fleet([ssh_instance(server)], source="fleet.toml"), read_only=True)
    await controller.start()
    try:
        inst = controller.state.get("box1")
        assert inst is not None
        await until(lambda: len(inst.gpus) == 6 and bool(inst.gpus[5].xids) and inst.status == "failed", timeout=30)
        now = time.time()
        pane = "\n".join(line.plain for line in pane_lines(inst, Palette.from_theme(DARK), 160, 14, now, compact=False))
        for mark in ("GPU3 ECC 2", "GPU5 Xid 48", "GPU1 HW slowdown", "GPU0 PCIe x8/16"):
            assert mark in pane, pane
        health = row_values(inst, now)["health"]
        assert "GPU3 ECC 2" in health and "GPU0 PCIe x8/16" in health
        tab = "\n".join(t.plain for t in gpu_tab_lines(inst, 200, now)[0])
        assert "[3] health ECC 2" in tab and "uncorrected 2, corrected 1" in tab
        assert "[1] health HW slowdown" in tab and "clocks: HW slowdown" in tab
        assert "PCIe gen 4/4 x8/16" in tab and "Xid 48" in tab and "changed" in tab
        metrics = render_text(gather(controller.state, {}, now)).decode()
        assert 'fleet_gpu_ecc_errors_total{name="box1",gpu="3"' in metrics
        line = next(m for m in metrics.splitlines() if m.startswith("fleet_gpu_ecc_errors_total") and 'gpu="3"' in m
                    and 'type="uncorrected"' in m and 'counter="volatile"' in m)
        assert line.endswith(" 2.0")
        assert any('gpu="1"' in m and 'reason="hw_slowdown"' in m and m.endswith(" 1.0") for m in metrics.splitlines())
        assert any(m.startswith("fleet_gpu_pcie_link_width{") and 'gpu="0"' in m and m.endswith(" 8.0")
                   for m in metrics.splitlines())
        assert any(m.startswith("fleet_gpu_xid_errors_total{") and 'gpu="5"' in m and 'xid="48"' in m
                   for m in metrics.splitlines())
    finally:
        await controller.stop()


def test_consumer_card_answering_not_supported_shows_no_error_and_no_mark(tmp_path: Path) -> None:
    """A GeForce answers NOT_SUPPORTED to every health call (and a container NO_PERMISSION to the events)."""
    fake = nvml.FakeNvml(nvml.build_libnvml(), tmp_path / "state.json")
    denied = nvml.device(1, no_permission=["events", "ecc", "pcie"], ecc_mode=True, pcie={"width": 16})
    fake.write(nvml.state([nvml.device(0), denied]))
    env = dict(os.environ, **fake.env, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "console.agent", "--no-stdin", "--max-seconds", "1.5",
                          "--state-dir", str(tmp_path / "agent")], env=env, capture_output=True, timeout=30)
    frames = [decode(line) for line in out.stdout.splitlines()]
    assert not [f for f in frames if f["type"] in ("error", "xid")], out.stderr
    gpu_frames = [f for f in frames if f["type"] == "gpu"]
    assert gpu_frames and all("health" not in d for f in gpu_frames for d in f["devices"])
    state = FleetState()
    state.add_instance(ssh_instance_like())
    state.set_link_status("box", "connected")
    for frame in frames:
        state.apply_frame("box", frame)
    inst = state.get("box")
    assert inst is not None and inst.status != "failed"
    now = time.time()
    assert row_values(inst, now)["health"] == ""
    assert not any("GPU0" in n or "GPU1" in n for n in pane_lines_text(inst, now))


def ssh_instance_like() -> Any:
    from console.inventory import BenchmarkSpec, Instance

    return Instance(name="box", host="127.0.0.1", watch_dirs=(), benchmark=BenchmarkSpec())  # type: ignore[call-arg]


def pane_lines_text(inst: Any, now: float) -> list[str]:
    return [line.plain for line in pane_lines(inst, Palette.from_theme(DARK), 160, 14, now, compact=False)]


def test_history_records_a_reason_switching_on_and_an_xid_once(tmp_path: Path) -> None:
    """The agent's frames (real pynvml path) into the history: HW slowdown switching on is one event, the
    minute's full frames repeating it are none, an Xid queued while it runs is one event."""
    from console.monitor.history import History
    from console.monitor.monitoring import HistoryObserver

    fake = nvml.FakeNvml(nvml.build_libnvml(), tmp_path / "state.json")
    devices = [datacenter_card(0), datacenter_card(1)]
    fake.write(nvml.state(devices))
    env = dict(os.environ, **fake.env, PYTHONPATH=str(ROOT))
    agent = subprocess.Popen([sys.executable, "-m", "console.agent", "--no-stdin", "--interval", "0.2",
                              "--max-seconds", "20"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    history = History(tmp_path / "h.sqlite3")
    observer = HistoryObserver(history)
    try:
        assert agent.stdout is not None
        frames: list[dict[str, Any]] = []

        def read_until(pred: Any) -> None:
            while not pred():
                line = agent.stdout.readline()  # type: ignore[union-attr]
                assert line, "the agent ended"
                frame = decode(line)
                frames.append(frame)
                observer.on_frame("box", frame, time.time())

        read_until(lambda: sum(f["type"] == "gpu" for f in frames) >= 2)
        devices[1]["clock_events"] = ["hw_slowdown"]
        devices[0]["xids"] = [{"xid": 79}]
        fake.write(nvml.state(devices))
        read_until(lambda: any(f["type"] == "xid" for f in frames)
                   and any("health" in d and d["health"].get("clock_events") for f in frames if f["type"] == "gpu"
                           for d in f["devices"]))
    finally:
        agent.kill()
        agent.wait()
    from console.monitor.history import HistoryReader

    history.close()
    reader = HistoryReader(tmp_path / "h.sqlite3")
    events = reader.events("box", kinds=["gpu_health"])
    reader.close()
    assert [(e["status"], e["detail"]) for e in events if e["status"] == "xid"] == [("xid", "GPU 0: Xid 79")]
    health = [e for e in events if e["status"] == "health"]
    assert len(health) == 1 and health[0]["detail"].startswith("GPU 1: clock_events [\"hw_slowdown\"]")


@pytest.mark.slow
async def test_a_gpu_health_alert_fires_once_per_gpu_episode_and_resolves(
    health_host: tuple[Sshd, Path], health_fake: nvml.FakeNvml
) -> None:
    """``gpu_health = [...]`` in the fleet file: GPU 1 (HW slowdown) and GPU 3 (ECC) fire once each and stay
    firing; GPU 2 switched into HW slowdown fires, and is resolved when the fake NVML switches it off."""
    from console.inventory import load_fleet
    from console.monitor.monitoring import MonitoredController, Monitoring
    from tests.test_alerts import Receiver

    _server, fleet_file = health_host
    receiver = Receiver()
    path = fleet_file.parent / "alerting.toml"
    path.write_text(fleet_file.read_text() + "\n".join([
        "[[alert]]", 'name = "GpuHealth"', 'gpu_health = ["hw_slowdown", "ecc_uncorrected", "pcie_degraded"]',
        f'webhook = "{receiver.url}"', 'severity = "critical"', ""]))
    fleet = load_fleet(path)
    monitoring = Monitoring(fleet, history=False)
    controller = MonitoredController(fleet, monitoring, read_only=True)
    await controller.start()
    devices = troubled_host()

    def by_gpu(status: str) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        for alert in receiver.alerts(status):
            out.setdefault(alert["labels"]["gpu"], []).append(alert)
        return out

    try:
        await until(lambda: set(by_gpu("firing")) == {"0", "1", "3"}, timeout=30, what="GPUs 0, 1 and 3 firing")
        devices[2]["clock_events"] = ["hw_slowdown"]
        health_fake.write(nvml.state(devices))
        await until(lambda: "2" in by_gpu("firing"), timeout=30, what="GPU 2 firing")
        devices[2]["clock_events"] = []
        health_fake.write(nvml.state(devices))
        await until(lambda: "2" in by_gpu("resolved"), timeout=30, what="GPU 2 resolved")
    finally:
        health_fake.write(nvml.state(troubled_host()))
        await controller.stop()
        receiver.close()
    firing, resolved = by_gpu("firing"), by_gpu("resolved")
    assert {gpu: len(alerts) for gpu, alerts in firing.items()} == {"0": 1, "1": 1, "2": 1, "3": 1}
    assert list(resolved) == ["2"] and len(resolved["2"]) == 1  # the others' trouble goes on
    ecc, slow, link = firing["3"][0], firing["1"][0], firing["0"][0]
    assert ecc["annotations"]["description"] == "GPU 3: 2 uncorrectable ECC errors"
    assert ecc["labels"]["gpu_health"] == "ecc_uncorrected" and ecc["labels"]["uuid"].startswith(f"GPU-{TOKEN}-0003")
    assert slow["annotations"]["description"].startswith("GPU 1: HW slowdown")
    assert link["annotations"]["description"] == "GPU 0: PCIe x8/16"
    assert ecc["labels"]["name"] == "box1" and ecc["labels"]["severity"] == "critical"
    assert len({a["fingerprint"] for alerts in firing.values() for a in alerts}) == 4
    assert resolved["2"][0]["fingerprint"] == firing["2"][0]["fingerprint"]
    assert resolved["2"][0]["endsAt"] > resolved["2"][0]["startsAt"]


async def test_the_app_shows_the_four_on_the_pane_the_table_and_the_gpus_tab(
    health_host: tuple[Sshd, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the real app: the grid pane's marks, the table's HEALTH column (the failing GPU first), the GPUs
    tab's per-GPU health lines."""
    from console.ui.app import FleetApp
    from tests.support.app import wait_until
    from widgets.fleet_table import FleetTable
    from widgets.instance_screen import InstanceScreen

    monkeypatch.setenv("FLEET_CONSOLE_CONFIG_DIR", str(tmp_path / "config"))
    server, _fleet = health_host
    controller = FleetController(Fleet([ssh_instance(server)], source="fleet.toml"), read_only=True)
    app = FleetApp(controller, theme="dark")
    async with app.run_test(size=(220, 40)) as pilot:  # the table keeps HEALTH beside the pane
        inst = app.state.instances["box1"]
        await wait_until(pilot, lambda: len(inst.gpus) == 6 and bool(inst.gpus[5].xids) and inst.status == "failed",
                         what="the four faults")
        grid = await wait_until(pilot, lambda: shown(app, "GPU0 PCIe x8/16"),
                                what="the pane's marks")
        for mark in ("GPU3 ECC 2", "GPU5 Xid 48", "GPU1 HW slowdown"):
            assert mark in grid, grid
        await pilot.press("v")
        table = app.query_one(FleetTable)
        await wait_until(pilot, lambda: table.display, what="the table")
        text = await wait_until(pilot, lambda: shown(app, "HEALTH", "box1"), what="the table's rows")
        row = next(line for line in text.splitlines() if "box1" in line and "A100" in line)
        assert "GPU3 ECC" in row, text
        await pilot.press("v")
        await wait_until(pilot, lambda: not table.display, what="the grid again")
        await pilot.press("enter")
        await wait_until(pilot, lambda: isinstance(app.screen, InstanceScreen) and app.screen.is_mounted,
                         what="the instance screen")
        tab = await wait_until(pilot, lambda: shown(app, "[3] health"),
                               what="the GPUs tab's health lines")
        assert "[3] health ECC 2" in tab and "uncorrected 2, corrected 1" in tab, tab
        assert "[1] health HW slowdown" in tab and "[0] health PCIe x8/16" in tab and "[5] health Xid 48" in tab


def shown(app: Any, *needles: str) -> str:
    """The screen's text when it holds every needle, else ""."""
    from tests.support.app import screen_text

    text = screen_text(app)
    return text if all(n in text for n in needles) else ""



async def test_diagnose_reads_the_counters_afresh_not_the_last_slow_reading(
    health_host: tuple[Sshd, Path], health_fake: nvml.FakeNvml
) -> None:
    """A running agent reads the ECC counters every 10 s; a diagnosis asked right after one reading (its first)
    still sees an uncorrectable error that came after it: the agent reads them again to answer."""
    server, _fleet = health_host
    controller = FleetController(Fleet([ssh_instance(server, interval=0.5)], source="fleet.toml"), read_only=True)
    await controller.start()
    devices = troubled_host()
    try:
        inst = controller.state.get("box1")
        assert inst is not None
        await until(lambda: len(inst.gpus) == 6 and inst.status == "failed", timeout=30)  # read: 10 s to the next
        devices[4]["ecc"]["volatile"]["uncorrected"] = 5
        health_fake.write(nvml.state(devices))
        result = await controller.diagnose("box1")
    finally:
        health_fake.write(nvml.state(troubled_host()))
        await controller.stop()
    summaries = [f["summary"] for f in result["findings"] if f["code"] == "gpu_ecc"]
    assert any("GPU 4: 5 uncorrectable ECC errors" in s for s in summaries), summaries
