"""Issue 15, the link under faults: floods, reconnect storms, orphan agents, dead hosts, stale agents, lost
lines, and restarts whose answer is lost. Real sshd on loopback, a fault-injecting proxy (``faultproxy.py``)
and hostile fake python3 scripts (``hostile.py``); the figures printed here are in docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import resource
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from console.core.audit import AuditLog
from console.core.controller import FleetController
from console.core.state import GAP_MARKER, FleetState
from console.inventory import BenchmarkSpec, Fleet
from console.link import SshLink
from tests.faultproxy import FaultProxy
from tests.hostile import fake_python
from tests.recorder import Recorder
from tests.support.sshd import Sshd, ssh_instance

FAST = {"heartbeat_interval": 0.5, "interval": 0.5}


def via(proxy: FaultProxy, sshd: Sshd, tmp_path: Path, **extra: Any) -> Any:
    """An instance that reaches ``sshd`` through ``proxy`` (known_hosts names the proxy's port)."""
    kh = tmp_path / f"known_hosts_{proxy.port}"
    kh.write_text(f"[127.0.0.1]:{proxy.port} {sshd.host_key.export_public_key().decode().strip()}\n")
    return dataclasses.replace(ssh_instance(sshd, known_hosts=str(kh), **extra), port=proxy.port)


def agents_of(console_id: str) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if console_id.encode() in (entry / "cmdline").read_bytes():
                    out.append(int(entry.name))
            except OSError:
                pass
    return out


class Watched:
    """A link feeding a real FleetState, with a recorder."""

    def __init__(self, inst: Any, keep_frames: bool = True) -> None:
        self.keep_frames = keep_frames  # off for a flood: the recorder would hold every frame
        self.state = FleetState()
        self.state.add_instance(inst)
        self.rec = Recorder()
        self.link = SshLink(inst, self.on_frame, self.on_status)
        self.name = inst.name

    def on_frame(self, name: str, frame: dict[str, Any]) -> None:
        if self.keep_frames or frame["type"] == "hello":
            self.rec.on_frame(name, frame)
        self.state.apply_frame(name, frame)

    def on_status(self, name: str, status: str, detail: str) -> None:
        self.rec.on_status(name, status, detail)
        self.state.set_link_status(name, status, detail)

    @property
    def inst(self) -> Any:
        return self.state.get(self.name)


# -- 9: orphan agents -----------------------------------------------------------------------------------------
async def test_a_forgotten_connection_leaves_no_second_agent_and_an_orphan_exits(
    sshd: Sshd, tmp_path: Path
) -> None:
    proxy = FaultProxy(sshd.port)
    await proxy.start()
    w = Watched(via(proxy, sshd, tmp_path, agent_extra=FAST))
    w.link.backoff.base, w.link.backoff.cap = 0.2, 1.0
    w.link.start()
    cid = w.link.console_id
    try:
        await w.rec.wait_for(lambda: w.rec.of_type("heartbeat"), what="first heartbeat")
        assert len(agents_of(cid)) == 1
        proxy.forget()  # the host never learns: its sshd session and agent go on
        await w.rec.wait_for(lambda: len(w.rec.of_type("hello")) >= 2, what="a new agent after the reconnect")
        await w.rec.wait_for(lambda: len(agents_of(cid)) == 1, timeout=15, what="the old agent replaced")

        proxy.forget()
        await w.link.stop()  # the console is gone too: nobody pings the agent any more
        t0 = time.monotonic()
        await w.rec.wait_for(lambda: not agents_of(cid), timeout=45, what="the orphan to exit")
        print(f"\norphan agent exited {time.monotonic() - t0:.1f} s after its console's side was lost")
    finally:
        await w.link.stop()
        await proxy.stop()
        for pid in agents_of(cid):
            os.kill(pid, signal.SIGKILL)


# -- 8: a session that fails right after connecting -----------------------------------------------------------
async def test_a_session_that_dies_at_once_backs_off_and_notifies_once(sshd: Sshd, tmp_path: Path) -> None:
    python = fake_python(tmp_path, "hello()\ntime.sleep(0.2)")
    w = Watched(ssh_instance(sshd, python=python, agent_extra=FAST))
    w.link.start()
    try:
        await asyncio.sleep(20)
        connects = sum(1 for _, s, _ in w.rec.statuses if s == "connected")
        events = w.state.take_events()
        print(f"\nsession dying at once: {connects} sessions in 20 s, {len(events)} notifications")
        assert 2 <= connects <= 5, w.rec.statuses
        assert len(events) <= 2, events
    finally:
        await w.link.stop()


# -- 12: a host that never answers ----------------------------------------------------------------------------
async def test_a_first_attempt_that_never_gets_an_answer_is_unreachable(sshd: Sshd, tmp_path: Path) -> None:
    python = fake_python(tmp_path, "time.sleep(120)")  # logs in, never says hello
    w = Watched(ssh_instance(sshd, python=python, connect_timeout=2.0, agent_extra=FAST))
    w.link.start()
    try:
        await asyncio.sleep(1.0)
        w.state.tick()
        assert w.inst.status == "connecting"
        seen = []
        for _ in range(20):
            await asyncio.sleep(0.25)
            w.state.tick()
            seen.append(w.inst.status)
        assert seen[-1] == "unreachable" and seen.count("unreachable") >= 14, seen
        assert w.state.totals()["failing"] == 1
    finally:
        await w.link.stop()


# -- 13: stale after two heartbeats, lines lost while disconnected marked -------------------------------------
async def test_a_stopped_agent_is_stale_after_two_heartbeats(sshd: Sshd) -> None:
    w = Watched(ssh_instance(sshd, agent_extra={"heartbeat_interval": 1.0, "interval": 1.0}))
    w.link.start()
    try:
        await w.rec.wait_for(lambda: len(w.rec.of_type("heartbeat")) >= 2, what="heartbeats")
        pid = w.rec.of_type("hello")[0]["pid"]
        await w.rec.wait_for(lambda: len(w.rec.of_type("heartbeat")) >= 3, what="a fresh heartbeat")
        os.kill(pid, signal.SIGSTOP)
        t0 = time.monotonic()
        try:
            while w.inst.status != "stale":
                await asyncio.sleep(0.05)
                w.state.tick()
                assert time.monotonic() - t0 < 10
            took = time.monotonic() - t0
        finally:
            os.kill(pid, signal.SIGCONT)
        print(f"\nstopped agent (heartbeat 1 s) shown stale after {took:.1f} s")
        assert took < 2.6, took
    finally:
        await w.link.stop()


async def test_lines_lost_while_disconnected_are_marked(sshd: Sshd, tmp_path: Path) -> None:
    log = tmp_path / "bench.log"
    log.write_text("".join(f"line {i}\n" for i in range(1, 11)))
    proxy = FaultProxy(sshd.port)
    await proxy.start()
    w = Watched(via(proxy, sshd, tmp_path, logs=(str(log),),
                    agent_extra={**FAST, "log_interval": 0.2, "backlog_lines": 20}))
    w.link.backoff.base, w.link.backoff.cap = 0.2, 1.0
    w.link.start()
    try:
        ring = lambda: w.inst.logs.get(str(log))  # noqa: E731
        await w.rec.wait_for(lambda: ring() and ring().last and ring().last[0] == 10, what="the first lines")
        proxy.blackhole = True
        proxy.cut()
        await w.rec.wait_for(lambda: w.link.status != "connected", what="the drop")
        with log.open("a") as fh:
            fh.write("".join(f"line {i}\n" for i in range(11, 501)))
        proxy.blackhole = False
        proxy.cut()
        await w.rec.wait_for(lambda: ring().last and ring().last[0] == 500, timeout=60, what="the backlog")
        texts = [t for n, t in ring().lines]
        assert GAP_MARKER in texts and texts.index(GAP_MARKER) == texts.index("line 10") + 1, texts[:15]
        assert "line 481" in texts and "line 400" not in texts
    finally:
        await w.link.stop()
        await proxy.stop()


# -- 7: a host flooding frames --------------------------------------------------------------------------------
FLOOD = r'''
hello()
dev = {"index": 0, "util": 50, "mem_util": 3, "mem_used": 10**10, "temp": 60, "power": 200.5, "sm_clock": 1000,
       "mem_clock": 2000, "fan": None, "procs": [{"pid": 5, "mem": 100}], "name": "A100", "uuid": "GPU-x",
       "mem_total": 8 * 10**10, "power_limit": 300.0}
gpu = json.dumps({"type": "gpu", "ts": 1.0, "state": "ok", "full": True, "simulated": False, "driver": "x",
                  "devices": [dict(dev, index=i) for i in range(8)]})
huge = json.dumps({"type": "gpu", "ts": 1.0, "state": "ok", "full": True, "devices": [dict(dev, index=i)
                   for i in range(5000)]})
logf = json.dumps({"type": "log", "ts": 1.0, "path": "/tmp/flood.log", "lines": ["x" * 100] * 500,
                   "first_line": None, "backlog": False, "event": None})
out = sys.stdout
n = 0
end = time.time() + 12
while time.time() < end:
    n += 1
    out.write(gpu + "\n" + logf + "\n")
    if n % 200 == 0:
        out.write(huge + "\n")
        out.write(json.dumps({"type": "heartbeat", "ts": time.time(), "seq": n, "samples": n, "sent": 0}) + "\n")
    out.flush()
'''


def rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def test_a_flooding_host_costs_bounded_memory_and_is_told(sshd: Sshd, tmp_path: Path) -> None:
    python = fake_python(tmp_path, FLOOD)
    w = Watched(ssh_instance(sshd, python=python, agent_extra=FAST), keep_frames=False)
    lag = [0.0]

    async def ticker() -> None:
        while True:
            t = time.monotonic()
            await asyncio.sleep(0.05)
            lag[0] = max(lag[0], time.monotonic() - t - 0.05)

    before = rss_mb()
    peak = before
    tick = asyncio.create_task(ticker())
    w.link.start()
    try:
        await w.rec.wait_for(lambda: w.rec.of_type("hello"), what="hello")
        t0 = time.monotonic()
        while time.monotonic() - t0 < 10:
            await asyncio.sleep(0.2)
            peak = max(peak, rss_mb())
        errors = [m for _, m in w.inst.errors]
        print(f"\nflood: console RSS {before:.0f} -> peak {peak:.0f} MB, max loop lag {lag[0] * 1000:.0f} ms, "
              f"{w.link.flood.dropped_total} frames dropped, reading paused {w.link.flood.paused_total:.1f} s, "
              f"{w.state.frames} frames applied")
        assert any(m.startswith("flooding: dropped") for m in errors), errors
        assert any("5000 devices" in m for m in errors), errors
        assert len(w.inst.gpus) <= 64
        assert peak - before < 150, (before, peak)
        assert lag[0] < 1.0, lag
    finally:
        tick.cancel()
        await w.link.stop()


# -- 15: the audit ---------------------------------------------------------------------------------------------
SLOW_BENCH = "trap 'sleep 3; exit 0' TERM\nwhile :; do sleep 0.2; done\n"


def slow_bench(tmp_path: Path) -> tuple[BenchmarkSpec, subprocess.Popen[bytes]]:
    script = tmp_path / "slowbench.sh"
    script.write_text(SLOW_BENCH)
    spec = BenchmarkSpec(start=("/bin/sh", str(script)), match=("slowbench",), stop_timeout=10.0)
    proc = subprocess.Popen(["/bin/sh", str(script)], start_new_session=True)
    return spec, proc


async def test_an_unwritable_audit_log_refuses_the_restart(sshd: Sshd, tmp_path: Path) -> None:
    spec, bench = slow_bench(tmp_path)
    audit_path = tmp_path / "audit.jsonl"
    audit_path.mkdir()  # cannot be appended to, even by root
    controller = FleetController(Fleet([ssh_instance(sshd, benchmark=spec, agent_extra=FAST)], source="f"),
                                 audit=AuditLog(audit_path))
    try:
        await controller.start()
        await controller.wait_ready("box1", 30)
        result = await controller.restart(["box1"], origin="cli")
        assert not result["box1"]["ok"]
        assert result["box1"]["error"].startswith(f"not sent: cannot write the audit log {audit_path}")
        assert "\n" not in result["box1"]["error"]
        await asyncio.sleep(1)
        assert bench.poll() is None, "the benchmark was touched"
    finally:
        await controller.stop()
        bench.kill()
        bench.wait()


async def test_a_link_drop_mid_restart_records_what_the_agent_did(sshd: Sshd, tmp_path: Path) -> None:
    spec, bench = slow_bench(tmp_path)
    proxy = FaultProxy(sshd.port)
    await proxy.start()
    audit = AuditLog(tmp_path / "audit.jsonl")
    inst = via(proxy, sshd, tmp_path, benchmark=spec, agent_extra=FAST)
    controller = FleetController(Fleet([inst], source="f"), audit=audit)
    try:
        await controller.start()
        link = await controller.wait_ready("box1", 30)
        link.backoff.base, link.backoff.cap = 0.2, 1.0
        restart = asyncio.create_task(controller.restart(["box1"], origin="tui", reason="test"))
        await asyncio.sleep(1.0)  # the agent is stopping the benchmark (it takes ~3 s)
        proxy.forget()
        result = await asyncio.wait_for(restart, 120)
        records = [r for r in audit.read() if r["action"] == "restart"]
        assert [(r["outcome"], r["origin"], r["reason"]) for r in records] == [("ok", "tui", "test")], records
        assert "journal" in records[0]["note"] and records[0]["action_id"]
        assert result["box1"]["ok"], result
        new_pid = records[0]["result"]["started"]["pid"]
        assert records[0]["result"]["started"]["alive"] and new_pid != bench.pid
        os.killpg(new_pid, signal.SIGKILL)
        assert not audit.pending_path.read_text().count('"intent"') - audit.pending_path.read_text().count('"done"')
    finally:
        await controller.stop()
        await proxy.stop()
        bench.kill()
        bench.wait()


def test_an_intent_whose_console_died_is_recorded_as_unknown(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path / "audit.jsonl")
    child = subprocess.Popen(["/bin/true"])
    child.wait()
    audit.pending_path.write_text(
        '{"intent":"abc","time":"t","user":"u","pid":%d,"instance":"box1","host":"h","action":"restart",'
        '"origin":"cli","reason":null}\n' % child.pid)
    audit.intent("box2", "h2", "restart", origin="tui")
    records = audit.read()
    assert [(r["instance"], r["outcome"], r["origin"]) for r in records] == [("box1", "unknown", "cli")]
    assert "stopped before the outcome" in records[0]["note"]
