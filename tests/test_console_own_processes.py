"""The console's own processes are not the operator's (issue 35 item 21): a restarted benchmark is not the agent's
child, and the agent with the shell chain that started it is hidden from the Processes tab and MCP's
instance_detail. Real processes; the second test through a real sshd and the real agent."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from console.agent.actions import restart as rs
from console.core.controller import FleetController
from console.inventory import Fleet
from console.mcp.tools import instance_detail
from tests.support.sshd import Sshd, ssh_instance
from tests.support.wait import until


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_a_started_benchmark_is_not_the_starters_child_and_leads_its_own_group(tmp_path: Path) -> None:
    script = tmp_path / "bench.sh"
    script.write_text("while :; do sleep 0.2; done\n")
    started = rs.start_benchmark({"start": ["/bin/sh", str(script)], "log": str(tmp_path / "restart.log")})
    try:
        assert started["alive"]
        assert parent_of(started["pid"]) != os.getpid()  # re-parented: it outlives the agent, not shown under it
        assert started["pgid"] == started["pid"] == os.getsid(started["pid"])
    finally:
        os.killpg(started["pgid"], 9)
    died = rs.start_benchmark({"start": ["/bin/sh", "-c", "echo no input >&2; exit 3"],
                               "log": str(tmp_path / "restart.log")})
    assert not died["alive"] and died["returncode"] == 3 and died["log_tail"] == ["no input"]


async def test_the_agent_and_its_shell_are_not_among_the_hosts_processes(sshd: Sshd, tmp_path: Path) -> None:
    other = subprocess.Popen(["sleep", "300"])  # a process of the host, as the operator's would be
    controller = FleetController(Fleet([ssh_instance(sshd)], source="f"))
    try:
        await controller.start()
        inst = controller.state.get("box1")
        assert inst is not None
        await until(lambda: inst.hello.get("pid") in inst.procs and other.pid in inst.procs, 30,
                    what="the agent and the host's process in the table")
        agent = inst.hello["pid"]
        shown = inst.shown_procs()
        assert agent not in shown and other.pid in shown
        chain = [p for p in shown if p in inst.procs and inst.procs[p].get("ppid") == agent]
        assert not chain, "the agent's children are the console's too"
        detail = instance_detail(inst, time.time(), top=50)
        pids = {p.get("pid") for p in detail["processes"]}
        assert agent not in pids and detail["process_count"] == len(shown)
    finally:
        await controller.stop()
        other.kill()
        other.wait()
