"""The fleet changes while the console runs: reload (call, file change, SIGHUP) and the vastai import.

Real sshd, real fleet files, a stand-in ``vastai`` on PATH printing ``vastai show instances --raw`` JSON.
Instances run agentless (``python`` points nowhere) so the tests are about links, not the agent.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
from pathlib import Path

import pytest

from console.core.audit import AuditLog
from console.core.controller import FleetController
from console.inventory import load_fleet
from tests.support.sshd import Sshd
from tests.support.wait import until

NO_PYTHON = "/nonexistent/python3"


@pytest.fixture(autouse=True)
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.setenv("FLEET_CONSOLE_STATE_DIR", str(tmp_path / "state"))


def defaults(sshd: Sshd) -> str:
    return (f'[defaults]\nuser = "{sshd.user}"\nkey = "{sshd.client_key_path}"\nknown_hosts = "{sshd.known_hosts}"\n'
            f'python = "{NO_PYTHON}"\nwatch_dirs = []\n\n')


def instance(name: str, sshd: Sshd) -> str:
    return f'[[instance]]\nname = "{name}"\nhost = "127.0.0.1"\nport = {sshd.port}\n\n'


def write(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def controller_for(path: Path, tmp_path: Path, watch: bool = False) -> FleetController:
    return FleetController(load_fleet(path), watch=watch, audit=AuditLog(tmp_path / "audit.jsonl"))


async def test_reload_adds_and_removes_without_touching_the_others(sshd: Sshd, tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    write(path, defaults(sshd) + instance("a", sshd) + instance("b", sshd))
    controller = controller_for(path, tmp_path)
    await controller.start()
    try:
        await until(lambda: all(controller.links[n].status == "connected" for n in "ab"), what="a and b connected")
        link_a, state_a = controller.links["a"], controller.state.get("a")
        await until(lambda: state_a.procs, what="a's process table")
        link_b = controller.links["b"]
        frames_before = controller.state.frames
        # c above a (a's line moves: not a change), b gone
        write(path, defaults(sshd) + instance("c", sshd) + instance("a", sshd))
        message = await controller.reload()
        assert "added c" in message and "removed b" in message, message
        assert controller.links["a"] is link_a and controller.state.get("a") is state_a
        assert link_a.status == "connected" and state_a.procs, "a kept its link and its history"
        assert "b" not in controller.links and controller.state.get("b") is None
        assert link_b.status == "closed"
        await until(lambda: controller.links["c"].status == "connected", what="c connected")
        assert [i.name for i in controller.fleet.instances] == ["c", "a"]
        assert controller.state.frames > frames_before
        # a changed instance keeps its state (history) and gets a new link
        write(path, defaults(sshd) + instance("c", sshd) + instance("a", sshd).replace("\n\n", '\ntags = ["x"]\n\n'))
        await controller.reload()
        assert controller.links["a"] is not link_a and controller.state.get("a") is state_a
        assert state_a.tags == ["x"]
        # a bad file changes nothing and says why in one line
        path.write_text(path.read_text() + "[[instance]]\nname = 3\n")
        message = await controller.reload()
        assert "not reloaded" in message and f"{path}:" in message, message
        assert set(controller.links) == {"a", "c"} and controller.fleet_errors
    finally:
        await controller.stop()


async def test_file_change_and_sighup_reload(sshd: Sshd, tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    write(path, defaults(sshd) + instance("a", sshd))
    controller = controller_for(path, tmp_path, watch=True)
    controller.watch.poll = 0.2
    await controller.start()
    try:
        write(path, defaults(sshd) + instance("a", sshd) + instance("b", sshd))
        os.utime(path, ns=(1, 1))  # a different mtime even within the file system's granularity
        await until(lambda: "b" in controller.links, what="b added after the file changed")
        controller.watch.poll = 3600.0  # only the reload signal from here on
        await asyncio.sleep(0.3)
        path.write_text(defaults(sshd) + instance("b", sshd))  # the poll no longer looks
        os.kill(os.getpid(), signal.SIGUSR1)
        await until(lambda: "a" not in controller.links, what="a removed after SIGHUP")
        assert set(controller.state.instances) == {"b"}
    finally:
        await controller.stop()


VAST_ROW = {
    "actual_status": "running", "cur_state": "running", "intended_status": "running", "next_state": "running",
    "gpu_name": "RTX 4090", "num_gpus": 1, "gpu_ram": 24564, "cpu_cores_effective": 16.0, "disk_space": 100.0,
    "image_uuid": "pytorch/pytorch:latest", "machine_id": 12345, "host_id": 678, "dph_total": 0.412,
    "public_ipaddr": "203.0.113.9", "ssh_idx": "5", "direct_port_start": 40000, "direct_port_end": 40010,
    "start_date": 1714560000.0, "status_msg": "success, running pytorch/pytorch_latest/ssh",
}


def vast_rows(sshd: Sshd, *ids: int, loading: int | None = None) -> list[dict[str, object]]:
    rows = [{**VAST_ROW, "id": i, "label": None if i % 2 else f"bench-{i}", "ssh_host": "127.0.0.1",
             "ssh_port": sshd.port} for i in ids]
    if loading is not None:
        rows.append({**VAST_ROW, "id": loading, "label": None, "ssh_host": "127.0.0.1", "ssh_port": sshd.port,
                     "actual_status": "loading", "cur_state": "running"})
    return rows


@pytest.fixture
def vastai(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in ``vastai`` on PATH: ``show instances --raw`` prints ``$VAST_JSON``; exits 1 when it says to."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    data = tmp_path / "vast.json"
    script = bin_dir / "vastai"
    script.write_text(
        "#!/bin/sh\n"
        '[ "$1 $2 $3" = "show instances --raw" ] || { echo "unexpected: $*" >&2; exit 2; }\n'
        f'if [ -e {tmp_path}/vast.fail ]; then echo "failed with error 401: Unauthorized" >&2; exit 1; fi\n'
        f"cat {data}\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return data


async def test_vastai_import_adds_and_removes_rentals(sshd: Sshd, tmp_path: Path, vastai: Path) -> None:
    vastai.write_text(json.dumps(vast_rows(sshd, 101, 102, loading=103)))
    path = tmp_path / "fleet.toml"
    write(path, defaults(sshd) + instance("own", sshd) + '[[import]]\nvastai = true\nrefresh = 60\ntags = ["rented"]\n')
    controller = controller_for(path, tmp_path)
    await controller.start()
    try:
        assert set(controller.links) == {"own", "vast-101", "bench-102"}, "loading rentals are not imported"
        rented = controller.fleet.get("bench-102")
        assert rented.port == sshd.port and rented.user == sshd.user and rented.gpus == 1
        assert "rented" in rented.tags and "vast" in rented.tags
        await until(lambda: controller.links["bench-102"].status == "connected", what="a rental connected")
        kept = controller.links["bench-102"]
        # 101 destroyed, 104 rented
        vastai.write_text(json.dumps(vast_rows(sshd, 102, 104)))
        await controller.refresh_imports()
        assert set(controller.links) == {"own", "bench-102", "bench-104"}
        assert controller.links["bench-102"] is kept and "vast-101" not in controller.state.instances
        # the CLI fails: one line on the fleet, the rentals stay
        (tmp_path / "vast.fail").write_text("")
        await controller.refresh_imports()
        (error,) = controller.fleet_errors.values()
        assert "failed with error 401: Unauthorized" in error and "\n" not in error and str(path) in error
        assert set(controller.links) == {"own", "bench-102", "bench-104"}
        (tmp_path / "vast.fail").unlink()
        # and it runs by itself every `refresh` seconds
        vastai.write_text(json.dumps(vast_rows(sshd, 104)))
        await controller.watch.stop()
        controller.fleet.imports = [dataclasses.replace(s, refresh=0.3) for s in controller.fleet.imports]
        controller.watch.sync_imports()
        await until(lambda: set(controller.links) == {"own", "bench-104"}, what="the refresh loop dropped bench-102")
        assert not controller.fleet_errors
    finally:
        await controller.stop()


async def test_a_missing_vastai_cli_is_one_line(sshd: Sshd, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    path = tmp_path / "fleet.toml"
    write(path, defaults(sshd) + instance("own", sshd) + "[[import]]\nvastai = true\n")
    controller = controller_for(path, tmp_path)
    await controller.start()
    try:
        (error,) = controller.fleet_errors.values()
        assert "cannot run vastai" in error and "pip install vastai" in error, error
        assert set(controller.links) == {"own"}
    finally:
        await controller.stop()


async def test_a_benchmark_section_added_or_changed_live_applies_at_once(sshd: Sshd, tmp_path: Path) -> None:
    """Issue 35's blocker: after adding ``[benchmark]`` to a running console's fleet file, a benchmark that is not
    running showed "all ok" for good (the reload kept the old, empty patterns); a fresh console said BENCH DOWN."""
    import subprocess

    path = tmp_path / "fleet.toml"
    write(path, defaults(sshd) + instance("a", sshd))
    controller = controller_for(path, tmp_path)
    sleeper = subprocess.Popen(["sleep", "321"])  # a stand-in benchmark, running on the (loopback) host
    await controller.start()
    try:
        state = controller.state.get("a")
        assert state is not None
        await until(lambda: controller.links["a"].status == "connected" and state.procs, what="a's process table")
        assert state.bench_running is None and state.status != "benchmark_down"  # not watched without [benchmark]

        write(path, defaults(sshd) + '[benchmark]\nmatch = ["no-such-benchmark"]\n\n' + instance("a", sshd))
        await controller.reload()
        await until(lambda: state.status == "benchmark_down", timeout=10, what="BENCH DOWN once [benchmark] is added",
                    detail=lambda: (state.status, state.status_detail, state.bench_patterns))

        write(path, defaults(sshd) + '[benchmark]\nmatch = ["sleep 321"]\n\n' + instance("a", sshd))
        await controller.reload()
        await until(lambda: state.bench_running and state.status != "benchmark_down", timeout=10,
                    what="the benchmark seen running once [benchmark] names it",
                    detail=lambda: (state.status, state.status_detail, state.bench_patterns))
    finally:
        await controller.stop()
        sleeper.kill()
        sleeper.wait()
