"""The rental bill on its real surfaces (issue 31): three priced instances over a real sshd (one from a vast.ai
JSON's ``dph_total``): healthy, its benchmark gone, its GPUs idle. The header, the table, the pane, ``/metrics``
scraped over HTTP, MCP's ``fleet_status`` called through the MCP server by the SDK's client, and the real
``fleet-console report --json`` command on the history the console wrote all say the same spend and idle spend,
checked to the cent against the times the history recorded.

"Benchmark gone for 10 minutes": the history holds an earlier console session (written with the history's own
writer, as that console wrote it) in which ``gone`` lost its benchmark for exactly 600 s; the report over a day
adds it to the live session, the report over the live session alone agrees with the live views.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from prometheus_client.parser import text_string_to_metric_families

from console.inventory import Fleet, load_fleet
from console.mcp.http import serve_http_until
from console.mcp.server import Options
from console.monitor.history import History, HistoryReader
from console.monitor.monitoring import MonitoredController, Monitoring
from console.ui.app import FleetApp
from tests.support.app import screen_text, wait_until
from tests.support.sshd import Sshd, free_port, ssh_instance
from tests.support.wait import until
from tests.test_spend import (
    PRICES,
    ROOT,
    audit_records,
    bench_program,
    calls,
    stand_in,  # noqa: F401 (a fixture)
    write_fleet,
)
from widgets.confirm_screen import ConfirmScreen

EARLIER = 1500.0  # the earlier session began this long before the live one
GONE_FOR = 600.0  # ... and in it the benchmark of "gone" was gone for 10 minutes
PANE_COST = re.compile(r"GPUs idle for \S+ · €(\d+\.\d\d)")  # the pane's trouble line
CENT = 0.005  # half a cent: what rounding to the cent may move a figure


def ssh_fleet(tmp: Path, sshd: Sshd, loads: dict[str, int]) -> Fleet:
    """The fleet file's instances (their prices and sources kept) reached over the real sshd, each agent with one
    simulated GPU at ``loads[name]`` % and a benchmark pattern of its own."""
    fleet = load_fleet(write_fleet(tmp, currency="€"))
    out = []
    for inst in fleet.instances:
        state = tmp / f"{inst.name}.gpu.json"
        state.write_text(json.dumps({"gpus": [{"load": loads[inst.name]}]}))
        reach = ssh_instance(sshd, inst.name)
        out.append(dataclasses.replace(
            inst, host=reach.host, port=reach.port, user=reach.user, key=reach.key, known_hosts=reach.known_hosts,
            watch_dirs=(), interval=0.5, benchmark=dataclasses.replace(inst.benchmark, match=(bench_name(inst.name),)),
            agent_extra={"heartbeat_interval": 0.5, "log_interval": 0.2,
                         "gpu": {"simulate": {"gpus": 1, "state_file": str(state)}}}))
    fleet.instances = out
    return fleet


def bench_name(name: str) -> str:
    return f"s{name[:6]}{os.getpid() % 10000}"


def seed_earlier_session(path: Path, start: float) -> None:
    """What an earlier console wrote: all three watched for 660 s, ``gone``'s benchmark gone for the last 600."""
    history = History(path)
    try:
        for name, price in PRICES.items():
            history.spend(start, name, "watch", price)
            history.spend(start + 1, name, "bench", price)
            if name == "gone":
                history.spend(start + 60, name, "idle", price)
            history.spend(start + 60 + GONE_FOR, name, "end", price)
        history.flush(start + 60 + GONE_FOR)
    finally:
        history.close()


def session_events(path: Path, since: float) -> dict[str, list[tuple[float, str]]]:
    """Each instance's spend events (time, mode) from ``since`` on, as the history holds them."""
    reader = HistoryReader(path)
    try:
        events = reader.events(None, since, kinds=("spend",))
    finally:
        reader.close()
    out: dict[str, list[tuple[float, str]]] = {}
    for e in sorted(events, key=lambda e: e["ts"]):
        out.setdefault(e["instance"], []).append((e["ts"], e["status"]))
    return out


def figures(events: list[tuple[float, str]], at: float) -> tuple[float, float, float]:
    """(watched, idle, idle episode) seconds at ``at``, added up from one session's recorded times."""
    watched = at - events[0][0]
    idle = episode = 0.0
    for (ts, mode), nxt in zip(events, [*events[1:], (at, "")], strict=True):
        if mode == "idle":
            idle += nxt[0] - ts
            episode = at - ts if nxt[1] == "" else 0.0
    return watched, idle, episode


def scrape(url: str) -> dict[str, dict[str, float]]:
    """metric (a counter without its ``_total``) -> instance name -> value."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if "name" in sample.labels and sample.name in (family.name, family.name + "_total"):
                out.setdefault(family.name, {})[sample.labels["name"]] = sample.value
    return out


def report(tmp: Path, fleet_file: Path, since: str) -> dict[str, Any]:
    """The real ``fleet-console report --json`` on the history under the state dir."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), FLEET_CONSOLE_STATE_DIR=str(tmp / "state"))
    out = subprocess.run([sys.executable, "-m", "console", "report", "--json", "--since", since, "--fleet",
                          str(fleet_file)], capture_output=True, text=True, cwd=tmp, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def cell(text: str, name: str, title: str) -> float:
    """The number under ``title`` (right-aligned) in the table row of ``name`` on the screen."""
    lines = text.splitlines()
    head = next(line for line in lines if title in line and "NAME" in line)
    end = head.index(title) + len(title)
    row = next(line for line in lines if line is not head and re.match(rf"[\s▶]{re.escape(name)}\s", line))
    return float(row[:end].split()[-1])


def implied_time(spend: float, price: float, watch: float) -> float:
    """The moment a live ``spend`` figure was computed at, from when the history says watching began."""
    return watch + spend * 3600.0 / price


@pytest.mark.slow
@pytest.mark.sshd
async def test_spend_agrees_on_every_real_surface_and_stop_asks(
    tmp_path: Path, sshd: Sshd, stand_in: Path  # noqa: F811 (the fixture)
) -> None:
    fleet_file = tmp_path / "fleet.toml"
    fleet = ssh_fleet(tmp_path, sshd, {"healthy": 90, "gone": 0, "vast-l4": 0})
    fleet.instances[1] = dataclasses.replace(fleet.instances[1], vast_id="99")  # (gone: rented by hand)
    history = tmp_path / "state" / "history.sqlite3"  # where `report` finds it (FLEET_CONSOLE_STATE_DIR)
    earlier = time.time() - EARLIER
    seed_earlier_session(history, earlier)
    monitoring = Monitoring(fleet, metrics=("127.0.0.1", 0), history=history)
    controller = MonitoredController(fleet, monitoring)
    procs = [subprocess.Popen([str(bench_program(tmp_path, bench_name(n))), "300"], start_new_session=True)
             for n in ("healthy", "vast-l4")]
    app = FleetApp(controller, theme="dark")
    mcp_stop = asyncio.Event()
    mcp_port = free_port()
    mcp_task: asyncio.Task[None] | None = None
    try:
        async with app.run_test(size=(200, 50)) as pilot:
            state = controller.state
            modes = {"healthy": "bench", "gone": "idle", "vast-l4": "idle"}
            await wait_until(pilot, lambda: all(state.instances[n].meter.mode == m for n, m in modes.items())
                             and state.instances["vast-l4"].status == "gpu_idle", timeout=90, what="the three modes")
            live_start = min(i.meter.since for i in state.instances.values())
            await wait_until(pilot, lambda: all(session_events(history, live_start).get(n, [(0, "")])[-1][1] == m
                                                for n, m in modes.items()), what="the history's record of the modes")
            live = session_events(history, live_start)
            watch = {n: ev[0][0] for n, ev in live.items()}
            assert all(ev[0][1] == "watch" for ev in live.values())

            # /metrics over HTTP and MCP through its server: the time each figure was computed at, implied by its
            # spend and the history's start of watching, falls inside the call; its idle figure is the history's
            url = monitoring.server.url
            mcp_task = asyncio.create_task(serve_http_until(controller, Options(), "127.0.0.1", mcp_port, mcp_stop))
            await until(lambda: _listening(mcp_port), 30, "the MCP listener")
            before = time.time()
            metrics = await asyncio.to_thread(scrape, url)
            async with streamable_http_client(f"http://127.0.0.1:{mcp_port}/mcp") as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                result = await session.call_tool("fleet_status", {})
            after = time.time()
            status = result.structured_content or {}
            assert status["currency"] == "€" and not result.is_error
            mcp = {row["name"]: row["spend"] for row in status["instances"]}
            for name, price in PRICES.items():
                assert metrics["fleet_instance_price_per_hour"][name] == price == mcp[name]["price_per_hour"]
                at = implied_time(metrics["fleet_instance_spend"][name], price, watch[name])
                assert before - 0.01 <= at <= after + 0.01, name
                assert abs(metrics["fleet_instance_idle_seconds"][name] - figures(live[name], at)[1]) < 0.01, name
                at = implied_time(mcp[name]["spend"], price, watch[name])
                assert before - 0.01 <= at <= after + 0.01, name
                assert abs(mcp[name]["idle_spend"] - figures(live[name], at)[1] * price / 3600) < 0.0001, name
            assert figures(live["vast-l4"], after)[1] * PRICES["vast-l4"] / 3600 > 0.2  # GPU idle 30 s+ at 1.5 c/s

            # the header's rates, the table's IDLE € and the pane's episode, as painted (within a repaint)
            await pilot.press("v")  # the table
            await until(lambda: "IDLE €" in screen_text(app), 30, "the table in euros", sleep=pilot.pause,
                        detail=lambda: screen_text(app))
            text, shown_at = screen_text(app), time.time()
            assert "€/h" in text and "$/h" not in text and "IDLE $" not in text
            header = app.header_text().plain
            burning, idle_rate = sum(PRICES.values()), PRICES["gone"] + PRICES["vast-l4"]
            assert f"€{burning:.2f}/h burning, €{idle_rate:.2f}/h idle" in header
            for name, price in PRICES.items():
                shown = cell(text, name, "IDLE €")
                low, high = (figures(live[name], t)[1] * price / 3600 for t in (shown_at - 3.0, shown_at))
                assert low - CENT <= shown <= high + CENT, (name, shown, low, high)
            await pilot.press("v")  # the grid and the pane of the cursor's instance
            app.grid.cursor_name = "vast-l4"
            pane = await wait_until(pilot, lambda: PANE_COST.search(screen_text(app)),
                                    what="the pane's trouble line with its cost")
            shown, shown_at = float(pane.group(1)), time.time()
            low, high = (figures(live["vast-l4"], t)[2] * PRICES["vast-l4"] / 3600 for t in (shown_at - 3, shown_at))
            assert low - CENT <= shown <= high + CENT, (shown, low, high)

            # the real `report --json`: over the live session it is the history's arithmetic at its `until`;
            # over the day it adds the earlier session, with gone's 10 minutes without its benchmark
            window = f"{int(time.time() - (earlier + 60 + GONE_FOR + live_start) / 2)}s"
            for since, extra in ((window, False), ("24h", True)):
                bill = report(tmp_path, fleet_file, since)
                assert bill["currency"] == "€"
                rows = {r["name"]: r for r in bill["instances"]}
                for name, price in PRICES.items():
                    watched, idle, _ = figures(live[name], bill["until"])
                    if extra:
                        watched += 60 + GONE_FOR
                        idle += GONE_FOR if name == "gone" else 0.0
                    got = (rows[name]["spend"], rows[name]["idle_spend"], rows[name]["price_per_hour"])
                    assert got == (round(watched * price / 3600, 2), round(idle * price / 3600, 2), price), \
                        (since, name)
                assert bill["totals"]["spend"] == round(sum(r["spend"] for r in rows.values()), 2)
            assert rows["gone"]["idle_spend"] >= round(GONE_FOR * PRICES["gone"] / 3600, 2) == 12.0

            # X on gone: the dialog says what not stopping costs, y runs the stand-in with the right argv
            app.grid.cursor_name = "gone"
            await pilot.press("X")
            await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the stop dialog")
            dialog = screen_text(app)
            assert "Stop the rental of 1 instance" in dialog and "gone: idle " in dialog and "€72.00/h" in dialog
            assert calls(stand_in) == []  # nothing before the answer
            await pilot.press("y")
            await wait_until(pilot, lambda: calls(stand_in), what="the stand-in vastai")
            assert calls(stand_in) == [["stop", "instance", "99", "--label", "gone"]]
            await wait_until(pilot, lambda: len(audit_records(tmp_path)) == 1, what="the outcome audited")
    finally:
        mcp_stop.set()
        if mcp_task is not None:
            await mcp_task
        for proc in procs:
            proc.kill()
            proc.wait()
    assert [(r["instance"], r["action"], r["outcome"], r["origin"]) for r in audit_records(tmp_path)] == [
        ("gone", "stop", "ok", "tui")]


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
