"""The rental bill (issue 31): prices from the fleet file and a vast.ai import, the guarded stop and the automatic
one (tests/test_spend_surfaces.py: the figures agreeing on every real surface; test_spend_alerts.py: the alerts).

Real agents (local transport: no SSH in between) with simulated GPUs; the benchmarks are real processes whose
program names match; the stop command is a stand-in ``vastai`` on PATH that records its argv.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from console.inventory import Fleet, load_fleet
from console.monitor.monitoring import MonitoredController, Monitoring
from console.monitor.report_command import csv_cell, to_csv
from tests.support.wait import until

ROOT = Path(__file__).resolve().parents[1]
PRICES = {"healthy": 36.0, "gone": 72.0, "vast-l4": 54.0}  # per hour: 1, 2 and 1.5 cents a second


def write_fleet(tmp: Path, stop_idle_after: str | None = None, currency: str = "$") -> Path:
    """fleet.toml: [defaults] price (gone), an own price (healthy), a vast.ai JSON with dph_total (vast-l4)."""
    (tmp / "v.json").write_text(json.dumps([{"id": 4242, "label": "vast-l4", "ssh_host": "127.0.0.1",
                                             "ssh_port": 2222, "actual_status": "running", "dph_total": 54.0}]))
    auto = f'stop_idle_after = "{stop_idle_after}"\n' if stop_idle_after else ""
    (tmp / "fleet.toml").write_text(f"""[defaults]
currency = "{currency}"
price_per_hour = 72

[actions]
stop = ["vastai", "stop", "instance", "{{vast_id}}", "--label", "{{name}}"]
{auto}
[[instance]]
name = "healthy"
host = "localhost"
price_per_hour = 36

[[instance]]
name = "gone"
host = "localhost"

[[import]]
vastai_json = "v.json"
""")
    return tmp / "fleet.toml"


def bench_program(tmp: Path, name: str) -> Path:
    """A copy of ``sleep`` whose program name is the benchmark's (the match is on the program, not its args)."""
    path = tmp / name
    shutil.copy(shutil.which("sleep") or "/bin/sleep", path)
    return path


def local_fleet(tmp: Path, path: Path, loads: dict[str, int]) -> Fleet:
    """The loaded fleet, each instance watched by a local agent with one simulated GPU at ``loads[name]`` %."""
    fleet = load_fleet(path)
    out = []
    for inst in fleet.instances:
        state = tmp / f"{inst.name}.gpu.json"
        state.write_text(json.dumps({"gpus": [{"load": loads[inst.name]}]}))
        out.append(dataclasses.replace(
            inst, transport="local", host="localhost", watch_dirs=(), interval=0.5,
            benchmark=dataclasses.replace(inst.benchmark, match=(f"b{inst.name[:6]}{os.getpid() % 10000}",)),
            agent_extra={"heartbeat_interval": 0.5, "log_interval": 0.2,
                         "gpu": {"simulate": {"gpus": 1, "state_file": str(state)}}}))
    fleet.instances = out
    return fleet


def start_bench(tmp: Path, name: str) -> subprocess.Popen[bytes]:
    program = bench_program(tmp, f"b{name[:6]}{os.getpid() % 10000}")
    return subprocess.Popen([str(program), "300"], start_new_session=True)


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``vastai`` on PATH that appends its argv (JSON) to a file; the state dir (audit, history) in tmp."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "vastai.argv"
    script = bin_dir / "vastai"
    script.write_text(f"#!{sys.executable}\nimport json, sys\n"
                      f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FLEET_CONSOLE_STATE_DIR", str(tmp_path / "state"))
    return log


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def audit_records(tmp: Path) -> list[dict[str, Any]]:
    path = tmp / "state" / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_prices_come_from_the_instance_the_import_then_defaults(tmp_path: Path) -> None:
    fleet = load_fleet(write_fleet(tmp_path))
    got = {i.name: (i.price_per_hour, i.price_source, i.vast_id) for i in fleet.instances}
    assert got == {"healthy": (36.0, "fleet.toml:11", None), "gone": (72.0, "fleet.toml:3 [defaults]", None),
                   "vast-l4": (54.0, "vast.ai dph_total", "4242")}
    (tmp_path / "bad.toml").write_text('[defaults]\nprice_per_hour = "0.5"\n')
    out = subprocess.run([sys.executable, "-m", "console", "check", "--fleet", str(tmp_path / "bad.toml")],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 2 and out.stderr.strip() == (
        f"fleet-console: {tmp_path / 'bad.toml'}:2: defaults.price_per_hour must be a price per hour from 0 to "
        "10000 (a number, like 0.45), not '0.5'")
    assert csv_cell("=cmd|' /C calc'!A0") == "'=cmd|' /C calc'!A0" and csv_cell("-1") == "'-1"
    assert to_csv({"instances": [{"name": "@x", "price_per_hour": 1.0, "watched_s": 1, "benchmark_s": 0, "idle_s": 1,
                                  "spend": 0.0, "idle_spend": 0.0, "restarts": 0, "verdicts": {"+oom": 1}}],
                   "totals": {}}).splitlines()[1] == "'@x,1.0,1,0,1,0.0,0.0,0,'+oom:1"


def test_cli_stop_asks_refuses_read_only_and_audits(tmp_path: Path, stand_in: Path) -> None:
    path = write_fleet(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def stop(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "console", "stop", "--fleet", str(path), *args],
                              capture_output=True, text=True, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, timeout=60)

    refused = stop("vast-l4", "--yes", "--read-only")
    assert refused.returncode == 2 and "stop refused" in refused.stderr and calls(stand_in) == []
    asked = stop("vast-l4")
    assert asked.returncode == 2 and "pass --yes" in asked.stderr and calls(stand_in) == []
    no_id = stop("healthy", "--yes")
    assert no_id.returncode == 2 and "needs a vast.ai id" in no_id.stderr and calls(stand_in) == []
    done = stop("vast-l4", "--yes")
    assert done.returncode == 0, done.stderr
    assert calls(stand_in) == [["stop", "instance", "4242", "--label", "vast-l4"]]
    records = [(r["instance"], r["action"], r["outcome"], r["origin"]) for r in audit_records(tmp_path)]
    assert records == [("vast-l4", "stop", "refused", "cli"), ("vast-l4", "stop", "ok", "cli")]
    pending = (tmp_path / "state" / "audit.pending.jsonl").read_text()
    intent = next(json.loads(line) for line in pending.splitlines() if "intent" in line)
    assert intent["action"] == "stop" and intent["instance"] == "vast-l4"  # the intent went first


@pytest.mark.slow
async def test_automatic_stop_is_announced_and_cancelled_by_activity(tmp_path: Path, stand_in: Path) -> None:
    """stop_idle_after = 12s: both instances lose their benchmark; one gets it back after the announcement
    and is not stopped, the other is stopped (audited, origin auto) only after its announcement."""
    fleet = local_fleet(tmp_path, write_fleet(tmp_path, "12s"), {"healthy": 0, "gone": 0, "vast-l4": 0})
    fleet.instances = [i for i in fleet.instances if i.name in ("healthy", "vast-l4")]
    fleet.instances[0] = dataclasses.replace(fleet.instances[0], vast_id="77")  # healthy: comes back
    monitoring = Monitoring(fleet)
    controller = MonitoredController(fleet, monitoring)
    state = controller.state
    notes: list[str] = []
    proc = None
    await controller.start()
    try:
        def announced() -> bool:
            notes.extend(text for text, _ in state.take_notes())
            return all(state.instances[n].stop_due is not None for n in ("healthy", "vast-l4"))

        await until(announced, 30, "both automatic stops announced")
        assert calls(stand_in) == [] and sum("stops itself in" in n for n in notes) == 2
        proc = start_bench(tmp_path, "healthy")  # work resumes on one
        await until(lambda: calls(stand_in), 30, "the automatic stop of vast-l4")
        notes.extend(text for text, _ in state.take_notes())
        assert calls(stand_in) == [["stop", "instance", "4242", "--label", "vast-l4"]]
        assert state.instances["healthy"].stop_due is None
        assert any("healthy: automatic stop cancelled" in n for n in notes)
        await until(lambda: any(r["outcome"] == "ok" for r in audit_records(tmp_path)), 10, "the outcome")
        assert [(r["instance"], r["outcome"], r["origin"]) for r in audit_records(tmp_path)] == [
            ("vast-l4", "ok", "auto")]
        assert "idle" in audit_records(tmp_path)[0]["reason"]
    finally:
        await controller.stop()
        if proc is not None:
            proc.kill()
            proc.wait()
