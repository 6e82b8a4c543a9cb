"""The fleet file and the one-shot commands, run as a user would (the installed entry point)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from console.inventory import ConfigError, load_fleet

CLI = [sys.executable, "-m", "console"]


def run_cli(*args: str, timeout: float = 60, **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, **kw)  # type: ignore[call-overload]


GOOD = """\
[defaults]
user = "root"
watch_dirs = ["/tmp"]

[benchmark]
start = ["/root/entrypoint.sh"]
match = ["cuzk-daemon", "cuzk-bench"]
log = "/tmp/benchmark-full.log"
env = { CUZK_GPUS = "0,1", RUST_LOG = "info" }

[[instance]]
name = "a"
host = "10.0.0.1"
port = 2222
tags = ["3090"]

[[instance]]
name = "b"
host = "b.example"
benchmark = { stop_timeout = 3 }

[[probe]]
name = "disk"
key = "6"
command = "df -h /"
"""


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("[[instance]]\nname = 'a'\nhost = 'h'\nport = 'x'\n", 4, "port must be a number"),
        ("[[instance]]\nname = 'a'\nhost = \n", 3, "invalid TOML"),
        ("[[instance]]\nname = 'a'\n", 1, "needs a host"),
        ("\n[[instance]]\nname = 'a'\nhost = 'h'\n\n[[instance]]\nname = 'a'\nhost = 'h2'\n", 6, "duplicate instance"),
        ("[[instance]]\nname = 'a'\nhots = 'h'\n", 3, "unknown instance key 'hots'"),
        ("[[instance]]\nname = 'a'\nhost = 'h'\nstall_seconds = 0\n", 4, "stall_seconds must be a positive number"),
        ("[defaults]\nstall_seconds = 'x'\n\n[[instance]]\nname = 'a'\nhost = 'h'\n", 2,
         "stall_seconds must be a positive number"),
        ("[benchmark]\nmatch = ['(unclosed']\n", 2, "bad benchmark pattern"),
        ("[benchmark]\nenv = { 'A B' = 'x' }\n", 2, "benchmark.env must be a table"),
        ("[[probe]]\nname = 'x'\nkey = '1'\ncommand = 'true'\n", 3, "built-in probe"),
        ("[[import]]\nvastai_json = 'missing.json'\n", None, "cannot read vast.ai JSON"),
    ],
)
def test_check_reports_bad_fleet_files_in_one_line(tmp_path: Path, text: str, line: int | None, reason: str) -> None:
    bad = tmp_path / "BAD.toml"
    bad.write_text(text)
    result = run_cli("check", "--fleet", str(bad))
    assert result.returncode == 2
    err = result.stderr.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert reason in err
    if line is not None:
        assert f"{bad}:{line}:" in err
    else:
        assert "missing.json" in err


def test_check_accepts_a_good_file_and_lists_instances(tmp_path: Path) -> None:
    good = tmp_path / "fleet.toml"
    good.write_text(GOOD)
    result = run_cli("check", "--fleet", str(good))
    assert result.returncode == 0, result.stderr
    assert "2 instances, 1 custom probes" in result.stdout
    assert "root@10.0.0.1:2222" in result.stdout
    fleet = load_fleet(good)
    b = fleet.get("b")
    assert b.benchmark.stop_timeout == 3 and b.benchmark.match == ("cuzk-daemon", "cuzk-bench")
    assert b.agent_config()["benchmark"]["start"] == ["/root/entrypoint.sh"]
    assert b.agent_config()["benchmark"]["env"] == {"CUZK_GPUS": "0,1", "RUST_LOG": "info"}


def test_hosts_imported_from_ssh_config_and_vastai_json(tmp_path: Path) -> None:
    (tmp_path / "ssh_config").write_text(
        "Host *\n  ServerAliveInterval 30\n\nHost vast-a vast-b other\n  HostName 1.2.3.4\n  Port 40022\n"
        "  User root\n  IdentityFile ~/.ssh/vast\n\nHost vast-c\n  HostName 5.6.7.8\n"
    )
    (tmp_path / "instances.json").write_text(json.dumps([
        {"id": 101, "ssh_host": "ssh4.vast.ai", "ssh_port": 30101, "public_ipaddr": "9.9.9.9",
         "gpu_name": "RTX 3090", "num_gpus": 2, "label": "prover-1", "actual_status": "running"},
        {"id": 102, "ssh_host": "ssh5.vast.ai", "ssh_port": 30102, "gpu_name": "RTX 4090", "num_gpus": 1,
         "label": None, "actual_status": "running"},
        {"id": 103, "ssh_host": "ssh5.vast.ai", "ssh_port": 30103, "actual_status": "exited"},
    ]))
    (tmp_path / "fleet.toml").write_text(
        '[[import]]\nssh_config = "ssh_config"\nhosts = ["vast-*"]\n\n'
        '[[import]]\nvastai_json = "instances.json"\ntags = ["prod"]\n'
    )
    fleet = load_fleet(tmp_path / "fleet.toml")
    by_name = {i.name: i for i in fleet.instances}
    assert set(by_name) == {"vast-a", "vast-b", "vast-c", "prover-1", "vast-102"}
    assert by_name["vast-a"].host == "1.2.3.4" and by_name["vast-a"].port == 40022
    assert by_name["vast-a"].key == "~/.ssh/vast"
    assert by_name["vast-c"].port == 22
    assert by_name["prover-1"].address == "root@ssh4.vast.ai:30101"
    assert "2x RTX 3090" in by_name["prover-1"].tags and "prod" in by_name["prover-1"].tags


def test_vastai_json_error_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "instances.json").write_text('[\n  {"id": 1,\n   "ssh_port": }\n]\n')
    (tmp_path / "fleet.toml").write_text('[[import]]\nvastai_json = "instances.json"\n')
    with pytest.raises(ConfigError) as info:
        load_fleet(tmp_path / "fleet.toml")
    assert str(info.value).startswith(f"{tmp_path / 'instances.json'}:3: invalid JSON")


def test_missing_fleet_file_says_what_to_do(tmp_path: Path) -> None:
    result = run_cli("status", cwd=tmp_path, env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin",
                                                  "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert result.returncode == 2
    assert "no fleet file" in result.stderr and "fleet-console demo" in result.stderr


def test_agent_command_prints_hello_then_heartbeats() -> None:
    from console.agent.wire.config import encode

    config = encode({"heartbeat_interval": 0.3, "watch_dirs": []})
    result = run_cli("agent", "--config", config, "--max-seconds", "2", stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    frames = [json.loads(line) for line in result.stdout.splitlines()]
    assert frames[0]["type"] == "hello" and frames[0]["v"] == 1
    assert sum(f["type"] == "heartbeat" for f in frames) >= 3
    assert all("ts" in f for f in frames)


def test_restart_refused_read_only_and_audited(tmp_path: Path) -> None:
    good = tmp_path / "fleet.toml"
    good.write_text(GOOD)
    env = {"FLEET_CONSOLE_STATE_DIR": str(tmp_path / "state"), "PATH": "/usr/bin:/bin"}
    result = run_cli("restart", "a", "--yes", "--read-only", "--fleet", str(good), env=env)
    assert result.returncode == 2 and "read-only" in result.stderr
    audit = [json.loads(x) for x in (tmp_path / "state" / "audit.jsonl").read_text().splitlines()]
    assert audit[-1]["instance"] == "a" and audit[-1]["outcome"] == "refused" and audit[-1]["action"] == "restart"
    unconfirmed = run_cli("restart", "a", "--fleet", str(good), env=env, stdin=subprocess.DEVNULL)
    assert unconfirmed.returncode == 2 and "--yes" in unconfirmed.stderr
