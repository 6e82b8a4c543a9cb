"""The embedded demo fleet, reached through the real SshLink (host keys verified, agent uploaded)."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncssh
import pytest
import pytest_asyncio

from console.demo import DemoFleet, start_demo
from console.link import SshLink
from tests.recorder import Recorder
from tests.support.wait import until

pytestmark = pytest.mark.asyncio(loop_scope="module")

HEALTHY, IDLE, STALLED, SEED, OOM, FLAPPY = "healthy-01", "idle-02", "dlstall-03", "warmup-04", "oom-05", "flappy-06"


class Demo:
    def __init__(self, demo: DemoFleet) -> None:
        self.demo = demo
        self.rec = Recorder()
        self.links: dict[str, SshLink] = {}
        self.all_pids: set[int] = set()
        self.ports = [inst.port for inst in demo.fleet.instances]

    def link(self, name: str) -> SshLink:
        if name not in self.links:
            link = SshLink(self.demo.fleet.get(name), self.rec.on_frame, self.rec.on_status)
            self.links[name] = link
            link.start()
        return self.links[name]

    async def connected(self, name: str, timeout: float = 40.0) -> SshLink:
        link = self.link(name)
        await self.rec.wait_for(lambda: link.status == "connected", timeout, f"{name} connected")
        return link

    def procs(self, name: str) -> dict[int, dict[str, Any]]:
        """The process table as the frames built it (full, then upserts and gones)."""
        table: dict[int, dict[str, Any]] = {}
        for frame in self.rec.of_type("procs", name):
            if frame["full"]:
                table = {p["pid"]: p for p in frame["procs"]}
            else:
                for p in frame["upsert"]:
                    table[p["pid"]] = p
                for pid in frame["gone"]:
                    table.pop(pid, None)
        return table

    def names(self, name: str) -> set[str]:
        return {p["name"] for p in self.procs(name).values()}

    def log_lines(self, name: str, suffix: str) -> list[str]:
        return [line for f in self.rec.of_type("log", name) if f["path"].endswith(suffix) for line in f["lines"]]

    def last_devices(self, name: str) -> list[dict[str, Any]]:
        frames = [f for f in self.rec.of_type("gpu", name) if f.get("devices")]
        return frames[-1]["devices"] if frames else []


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def demo(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Demo]:
    fleet = await start_demo(6, tmp_path_factory.mktemp("demo"), flap_up=(6.0, 8.0), flap_down=(2.0, 3.0))
    d = Demo(fleet)
    try:
        for name in (HEALTHY, IDLE, SEED, FLAPPY):
            d.link(name)
        yield d
    finally:
        await asyncio.gather(*(link.stop() for link in d.links.values()), return_exceptions=True)
        d.all_pids |= set(fleet.scenario_pids())
        await fleet.stop()


async def test_fleet_records_point_at_the_demo_server(demo: Demo) -> None:
    fleet = demo.demo.fleet
    assert [i.name for i in fleet.instances] == [HEALTHY, IDLE, STALLED, SEED, OOM, FLAPPY]
    for inst in fleet.instances:
        assert inst.host == "127.0.0.1" and inst.user == "root" and not inst.accept_new_host_key
        assert inst.key and Path(inst.key).is_file() and inst.known_hosts and Path(inst.known_hosts).is_file()
        assert f"[127.0.0.1]:{inst.port} " in Path(inst.known_hosts).read_text()
        assert inst.tags[0] == "demo" and inst.agent_extra["gpu"]["simulate"]["state_file"]
        assert inst.agent_extra["proc_root"] == demo.demo.init_pid(inst.name)
    assert len(set(demo.ports)) == 6


@pytest.mark.slow
async def test_hello_gpu_procs_and_logs_through_ssh(demo: Demo) -> None:
    rec = demo.rec
    for name in (HEALTHY, IDLE, SEED):
        await demo.connected(name)
    hello = rec.of_type("hello", HEALTHY)[0]
    assert hello["features"]["simulated_gpu"] is True and hello["features"]["gpu"] == "ok"

    # simulated GPUs: busy on the healthy box, idle on the idle one
    await rec.wait_for(lambda: len(demo.last_devices(HEALTHY)) == 4, 30, "healthy GPU frames")
    await rec.wait_for(
        lambda: all((d["util"] or 0) >= 80 for d in demo.last_devices(HEALTHY)), 40, "healthy GPUs busy"
    )
    await rec.wait_for(lambda: len(demo.last_devices(IDLE)) == 2, 30, "idle GPU frames")
    # the idle daemon is up and holds memory, but its GPUs do nothing
    await rec.wait_for(
        lambda: all(d["util"] == 0 and d["mem_used"] > 1000 * 2**20 for d in demo.last_devices(IDLE)),
        30, "idle GPUs at 0 % with memory held",
    )
    full = next(f for f in rec.of_type("gpu", HEALTHY) if f.get("full"))
    assert full["simulated"] and full["devices"][0]["name"] == "NVIDIA GeForce RTX 4090"

    # real processes with their names, each instance seeing only its own
    await rec.wait_for(
        lambda: {"entrypoint.sh", "benchmark.sh", "cuzk-daemon", "cuzk-bench"} <= demo.names(HEALTHY),
        30, "healthy process names",
    )
    # the idle box's chain may still be in its download (curl) on a busy machine: its daemon comes, no client
    await rec.wait_for(lambda: "cuzk-daemon" in demo.names(IDLE), 30, "the idle box's daemon")
    assert "cuzk-bench" not in demo.names(IDLE)
    healthy_pids = set(demo.procs(HEALTHY))
    assert demo.demo.init_pid(HEALTHY) in healthy_pids
    assert not healthy_pids & set(demo.procs(IDLE)), "instances must not see each other's processes"
    daemon = next(p for p in demo.procs(HEALTHY).values() if p["name"] == "cuzk-daemon")
    assert "bin/cuzk-daemon --config" in daemon["cmdline"]

    # log frames carry each scenario's lines
    await rec.wait_for(lambda: any("[setup] Starting benchmark" in x for x in demo.log_lines(HEALTHY, "setup.log")),
                       30, "healthy setup log")
    await rec.wait_for(lambda: any("proof 1: C2 done" in x for x in demo.log_lines(HEALTHY, "benchmark-full.log")),
                       40, "a healthy proof")
    await rec.wait_for(
        lambda: "warmup proof failed, aborting benchmark" in demo.log_lines(SEED, "benchmark-full.log"),
        40, "the seed failure in the log",
    )
    seed_log = demo.log_lines(SEED, "benchmark-full.log")
    assert "    1: Broken pipe (os error 32)" in seed_log
    assert any(x.endswith("100.0%") for x in seed_log), "the download's \\r progress collapses to its last state"
    await rec.wait_for(
        lambda: any("received C2 request (51.2 MB)" in x for x in demo.log_lines(SEED, "cuzk-bench-daemon.log")),
        20, "daemon log",
    )


async def test_exec_channels_run_real_commands(demo: Demo) -> None:
    link = await demo.connected(HEALTHY)
    root = demo.demo.root(HEALTHY)
    result = await link.run_command('echo "$HOME"; pwd; echo oops >&2; exit 3', timeout=20)
    assert result.exit_status == 3
    assert result.stdout.split() == [str(root), str(root)] and result.stderr.strip() == "oops"
    assert (root / ".cache" / "fleet-console").is_dir(), "the agent was uploaded into the instance's own HOME"

    # a command whose channel closes first is killed with its process group
    def sleepers() -> list[int]:
        out = []
        for pid in os.listdir("/proc"):
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes() == b"sleep\x0047.5\x00":
                    out.append(int(pid))
            except OSError:
                pass
        return out

    inst = demo.demo.fleet.get(HEALTHY)
    async with asyncssh.connect(
        inst.host, inst.port, username=inst.user, client_keys=[inst.key], known_hosts=inst.known_hosts,
        config=[], agent_path=None,
    ) as conn:
        process = await conn.create_process("sleep 47.5 & sleep 47.5; echo never")
        await demo.rec.wait_for(lambda: len(sleepers()) == 2, 15, "the session's processes")
        process.close()
        await process.wait_closed()

    await demo.rec.wait_for(lambda: not sleepers(), 15, "the session's processes killed")


@pytest.mark.slow
async def test_diagnose_and_restart_the_seed_instance(demo: Demo) -> None:
    rec = demo.rec
    link = await demo.connected(SEED)
    await rec.wait_for(
        lambda: "warmup proof failed, aborting benchmark" in demo.log_lines(SEED, "benchmark-full.log"),
        40, "the seed failure",
    )
    await rec.wait_for(lambda: "cuzk-daemon" not in demo.names(SEED) and "benchmark.sh" not in demo.names(SEED),
                       20, "the benchmark gone")
    assert "entrypoint.sh" in demo.names(SEED)
    await rec.wait_for(lambda: demo.last_devices(SEED) and all(d["util"] == 0 for d in demo.last_devices(SEED)),
                       20, "seed GPUs idle")

    answer = await link.request("diagnose", timeout=60)
    assert answer["ok"], answer
    codes = {f["code"] for f in answer["data"]["findings"]}
    assert answer["data"]["verdict"]["code"] == "transport_error", answer["data"]["verdict"]
    assert {"benchmark_not_running", "waiting_on_child"} <= codes, codes

    before = {p["pid"] for p in demo.procs(SEED).values() if p["name"] in ("entrypoint.sh", "sleep")}
    answer = await link.request("restart", timeout=60)
    assert answer["ok"], answer
    started = answer["data"]["started"]
    assert started["alive"] and started["pid"] not in before
    await rec.wait_for(lambda: "cuzk-daemon" in demo.names(SEED), 30, "the daemon back after restart")
    new = {p["pid"] for p in demo.procs(SEED).values() if p["name"] in ("entrypoint.sh", "cuzk-daemon")}
    assert new and not new & before
    # this time the warmup proof goes through and the proving loop runs
    await rec.wait_for(lambda: "warmup proof ok, starting proving loop" in demo.log_lines(SEED, "benchmark-full.log"),
                       40, "the warmup passing after restart")


@pytest.mark.slow
async def test_flapping_host_drops_and_comes_back(demo: Demo) -> None:
    rec = demo.rec
    await demo.connected(FLAPPY)
    seen_at = len(rec.statuses)

    def after() -> list[str]:
        return [s for n, s, _ in rec.statuses[seen_at:] if n == FLAPPY]

    await rec.wait_for(lambda: "unreachable" in after(), 30, "the flapping host dropping")
    # down 3-6 s, then the link's next try: its backoff (jittered, capped at 30 s) may be long by then
    await rec.wait_for(lambda: "connected" in after()[after().index("unreachable"):], 75, "the host back")
    assert demo.demo.hosts[FLAPPY].drops >= 1


async def test_stop_leaves_nothing_behind(demo: Demo) -> None:
    fleet = demo.demo
    pids = set(fleet.scenario_pids())
    assert len(pids) > 12
    await asyncio.gather(*(link.stop() for link in demo.links.values()))
    demo.links.clear()
    await fleet.stop()
    await until(lambda: not [p for p in pids if _alive(p)], 10, "the scenario processes to exit after stop()",
                detail=lambda: "survivors: %s" % [p for p in pids if _alive(p)])
    for port in demo.ports:
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still open"
    assert not fleet.dir.exists()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return False
    return data[data.rfind(b")") + 2 : data.rfind(b")") + 3] != b"Z"
