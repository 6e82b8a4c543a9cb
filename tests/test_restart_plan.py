"""What a restart stops is what it shows (issue 35 item 3): the agent's plan on real processes, the host refusing
what was not shown, the CLI printing the plan over a real sshd, and the TUI's dialog listing it."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.agent.actions import restart as rs
from console.agent.ops import OPS
from console.agent.wire import config as agent_config
from console.core.audit import AuditLog
from console.core.controller import FleetController
from console.core.restart_plan import NOTHING_RUNNING, describe_plan
from console.inventory import BenchmarkSpec
from console.ui.app import FleetApp
from tests.fixtures.chains.harness import alive
from tests.support.app import make_fleet, wait_until
from tests.support.sshd import Sshd
from tests.support.wait import until_sync
from widgets.confirm_screen import ConfirmScreen

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "console"]
WAIT = "sleep 100000 &\nwait\n"


class Box:
    """Scripts named ``<token>-NAME.sh`` in tmp_path, each started in its own session; ``stop()`` kills them all."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.token = "fc" + uuid.uuid4().hex[:10]
        self.procs: list[subprocess.Popen[bytes]] = []

    def script(self, name: str, body: str = WAIT) -> Path:
        path = self.tmp / f"{self.token}-{name}.sh"
        path.write_text(body)
        return path

    def run(self, name: str, body: str = WAIT) -> int:
        proc = subprocess.Popen(["bash", str(self.script(name, body))], start_new_session=True,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(proc)
        return proc.pid

    def config(self, **bench: object) -> dict:
        """The benchmark is ``<token>-bench.sh``, started by ``<token>-entry.sh``; the entrypoint pattern is generic:
        it matches every script of this box."""
        extra = {"watch_dirs": [], "logs": [], "benchmark": {
            "start": ["bash", str(self.script("entry", f"bash {self.tmp}/{self.token}-bench.sh &\nwait\n"))],
            "match": [f"{self.token}-bench"], "entrypoint": [f"{self.token}-"],
            "log": str(self.tmp / "restart.log"), "stop_timeout": 2.0, **bench}}
        self.script("bench")
        return agent_config._merge(agent_config.DEFAULTS, extra)

    def pids(self, name: str) -> list[int]:
        needle = f"{self.token}-{name}.sh"
        out = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                except OSError:
                    continue
                if needle in cmd and alive(int(entry)):
                    out.append(int(entry))
        return sorted(out)

    def stop(self) -> None:
        for name in ("entry", "bench", "notebook", "monitor"):
            for pid in self.pids(name):
                with _quiet():
                    os.killpg(os.getpgid(pid), signal.SIGKILL)
        for proc in self.procs:
            with _quiet():
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


class _quiet:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return exc[0] is not None and issubclass(exc[0], OSError)  # type: ignore[arg-type]


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Box]:
    b = Box(tmp_path)
    try:
        yield b
    finally:
        b.stop()


def test_a_dead_benchmarks_restart_leaves_what_only_a_generic_entrypoint_pattern_matches(box: Box) -> None:
    config = box.config()
    entry = box.run("entry", WAIT)  # the last start's entrypoint, waiting after its benchmark died
    others = [box.run("notebook"), box.run("monitor")]  # other programs the generic pattern matches
    # each script's `sleep &` child carries the script's command line between its fork and its exec: wait until only
    # the scripts themselves match, or the plan would rightly spare a fork caught in between
    started = {"entry": entry, "notebook": others[0], "monitor": others[1]}
    until_sync(lambda: all(box.pids(n) == [p] for n, p in started.items()), 10,
               "the processes to run, their children exec'd")

    plan = rs.plan(config)
    assert [g["targets"][0]["pid"] for g in plan["groups"]] == [entry]
    assert plan["groups"][0]["why"] == "the last start's entrypoint"
    assert sorted(p["pid"] for p in plan["spared"]) == sorted(others)

    class Agent:
        pass

    agent = Agent()
    agent.config = config  # type: ignore[attr-defined]
    result = OPS["restart"](agent, {})  # type: ignore[arg-type]  # (no plan sent: the host's own rule)

    assert entry in result["stopped"] + result["killed"]
    assert all(alive(p) for p in others), "a process shown as left running was stopped"
    assert result["started"]["alive"]
    assert [g["targets"][0]["pid"] for g in result["plan"]["groups"]] == [entry]


def test_a_confirmed_plan_stops_nothing_it_did_not_show(box: Box) -> None:
    config = box.config()
    shown = rs.plan(config)  # nothing runs: "will only start"
    assert shown["groups"] == [] and describe_plan(shown)[-1].startswith(NOTHING_RUNNING)
    bench = box.run("bench")  # started by someone else after the operator confirmed
    until_sync(lambda: box.pids("bench"), 10, "the benchmark to run")

    with pytest.raises(rs.PlanChanged, match=r"not shown: .*bench\.sh \(pid %d\)" % bench):
        rs.restart(config, confirmed=shown)
    assert alive(bench), "the restart stopped a process the operator was not shown"
    assert not box.pids("entry"), "it started a second copy"


def test_the_plan_names_each_group_with_pid_program_age_and_parent_entrypoint(box: Box) -> None:
    entry_body = f"setsid bash {box.tmp}/{box.token}-bench.sh &\nwait\n"  # the benchmark in its own group
    config = box.config()
    entry = box.run("entry", entry_body)
    bench = until_sync(lambda: box.pids("bench"), 10, "the benchmark to run")[0]

    lines = describe_plan(rs.plan(config))

    stop_bench = [line for line in lines if f"-bench.sh (pid {bench}, up " in line]
    assert stop_bench and stop_bench[0].startswith("stop ")
    assert f"under {box.token}-entry.sh (pid {entry})" in stop_bench[0]
    assert any(line.startswith(f"stop {box.token}-entry.sh (pid {entry}, up ") for line in lines)
    assert lines[-1].startswith("then start: bash ")


def _fleet(box: Box, sshd: Sshd) -> Path:
    box.config()  # writes the entry and bench scripts
    fleet = box.tmp / "fleet.toml"
    fleet.write_text(f"""\
[benchmark]
start = ["bash", "{box.tmp}/{box.token}-entry.sh"]
match = ["{box.token}-bench"]
entrypoint = ["{box.token}-"]
log = "{box.tmp}/restart.log"
stop_timeout = 2

[[instance]]
name = "box1"
host = "127.0.0.1"
port = {sshd.port}
user = "{sshd.user}"
key = "{sshd.client_key_path}"
known_hosts = "{sshd.known_hosts}"
""")
    return fleet


def _cli(box: Box, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, FLEET_CONSOLE_STATE_DIR=str(box.tmp / "state"), PYTHONPATH=str(ROOT))
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=90, env=env, stdin=subprocess.DEVNULL)


@pytest.mark.sshd
def test_cli_restart_prints_what_it_stops_and_the_audit_keeps_it(box: Box, sshd: Sshd) -> None:
    fleet = _fleet(box, sshd)
    notebook = box.run("notebook")

    first = _cli(box, "restart", "box1", "--yes", "--fleet", str(fleet))
    assert first.returncode == 0, first.stderr
    out = first.stdout
    assert f"  {NOTHING_RUNNING}: bash " in out and out.index(NOTHING_RUNNING) < out.index("restarted")
    assert f"leave running {box.token}-notebook.sh (pid {notebook}, up " in out
    entry = until_sync(lambda: box.pids("entry"), 10, "the started entrypoint")[0]
    bench = until_sync(lambda: box.pids("bench"), 10, "the started benchmark")[0]

    second = _cli(box, "restart", "box1", "--yes", "--fleet", str(fleet))
    assert second.returncode == 0, second.stderr
    assert f"stop {box.token}-entry.sh (pid {entry}, up " in second.stdout
    assert f"with {box.token}-bench.sh: group {entry}, " in second.stdout
    assert second.stdout.index(f"pid {entry}") < second.stdout.index("restarted")
    assert not alive(bench) and alive(notebook)
    records = [json.loads(x) for x in (box.tmp / "state" / "audit.jsonl").read_text().splitlines()]
    last = [r for r in records if r["action"] == "restart"][-1]
    assert last["outcome"] == "ok"
    assert [t["pid"] for g in last["result"]["plan"]["groups"] for t in g["targets"]] == [entry, bench]


def _dialog_text(app: object) -> str:
    screen = app.screen  # type: ignore[attr-defined]
    return str(screen.query_one("#confirm-list").render()) if isinstance(screen, ConfirmScreen) else ""


async def test_the_restart_dialog_lists_what_it_stops_or_that_it_will_only_start(tmp_path: Path) -> None:
    marker = "fcplan-%s" % uuid.uuid4().hex[:8]
    script = tmp_path / f"{marker}.sh"
    script.write_text(WAIT)
    fleet = make_fleet(tmp_path, names=("alpha",))
    bench = BenchmarkSpec(start=("bash", str(script)), match=(marker,), stop_timeout=2.0)
    fleet.instances[0] = dataclasses.replace(fleet.instances[0], benchmark=bench)
    app = FleetApp(FleetController(fleet, audit=AuditLog(tmp_path / "audit.jsonl")), theme="dark")
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_until(pilot, lambda: app.state.instances["alpha"].link_status == "connected", what="the link")
            await pilot.press("r")
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="confirm dialog")
            assert f"{NOTHING_RUNNING}: " in _dialog_text(app) and marker in _dialog_text(app)
            await pilot.press("y")
            await wait_until(pilot, lambda: any("restarted" in m for _, _, m in app.notices), timeout=30,
                             what="the restart")
            started = json.loads((tmp_path / "audit.jsonl").read_text().splitlines()[-1])["result"]["started"]["pid"]
            await pilot.press("r")
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="confirm dialog")
            text = _dialog_text(app)
            assert f"stop {marker}.sh (pid {started}, up " in text and "then start: bash " in text
            await pilot.press("n")
    finally:
        subprocess.run(["pkill", "-KILL", "-f", marker], check=False)


@pytest.mark.sshd
async def test_the_mcp_restart_tool_says_what_it_stopped(box: Box, sshd: Sshd) -> None:
    from tests.test_mcp import call, mcp_session

    fleet = _fleet(box, sshd)
    notebook = box.run("notebook")  # matches the generic entrypoint pattern only
    async with mcp_session(box.tmp, fleet, "--allow-restart") as session:
        done, text = await call(session, "restart", name="box1", reason="the benchmark died; start it again")
        assert done["plan"][-1].startswith(f"{NOTHING_RUNNING}: bash ")
        assert f"leave running {box.token}-notebook.sh (pid {notebook}, up " in done["plan"][0]
        entry = until_sync(lambda: box.pids("entry"), 10, "the started entrypoint")[0]
        done, text = await call(session, "restart", name="box1", reason="restart the running one")
        assert done["plan"][0].startswith(f"stop {box.token}-entry.sh (pid {entry}, up ")
        assert done["plan"][0] in text
    assert alive(notebook)
