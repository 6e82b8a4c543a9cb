"""``fleet-console mcp`` end to end: the SDK's own ``ClientSession`` against ``python -m console mcp``, over stdio
and over streamable HTTP on 127.0.0.1, on a real sshd fleet running the fake benchmark chains (and the demo)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from console.mcp import safe
from console.mcp.tools import log_command, parse_log_output
from tests.fixtures.chains.harness import Harness, alive, wait_for
from tests.support.sshd import Sshd, free_port
from tests.test_cli_over_sshd import ROOT, audit_records, instance_table, write_fleet

TOOLS = {"fleet_status", "instance_detail", "diagnose", "read_log", "run_probe", "restart"}
RESULT_LIMIT = 32 * 1024
CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")  # all but \t
NASTY = [
    "plain start",
    "\x1b[31mred\x1b[0m text",
    "\x1b]0;owned title\x07after osc",
    "\x1b]8;;http://evil.example\x1b\\link\x1b]8;;\x1b\\ done",
    "\x1bP+q544e\x1b\\dcs gone",
    "c1 \x9b31m csi and \x9d osc \x9c end",
    "bell\x07 backspace\x08 del\x7f",
    "\u202eevil bidi",
    "progress 10%\rprogress 100%",
]
BIG_LINE = len(NASTY) + 1  # the 10 MB line's number
LONG_LINES = 600


def env(tmp_path: Path) -> dict[str, str]:
    return {"FLEET_CONSOLE_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(ROOT)}


@asynccontextmanager
async def mcp_session(tmp_path: Path, fleet: Path | None, *extra: str, transport: str = "stdio"
                      ) -> AsyncIterator[ClientSession]:
    """``fleet-console mcp`` started the way an MCP client starts it, and an initialized session to it."""
    args = ["-m", "console", "mcp", *(["--fleet", str(fleet)] if fleet else []), *extra]
    errlog = (tmp_path / f"mcp-{transport}.err").open("a")
    try:
        if transport == "stdio":
            params = StdioServerParameters(command=sys.executable, args=args, env=env(tmp_path), cwd=str(tmp_path))
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                yield session
            return
        port = free_port()
        proc = subprocess.Popen([sys.executable, *args, "--http", f"127.0.0.1:{port}"], cwd=tmp_path,
                                env=dict(os.environ, **env(tmp_path)), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=errlog)
        try:
            assert wait_for(lambda: proc.poll() is not None or _listening(port), timeout=60), "no HTTP listener"
            assert proc.poll() is None, (tmp_path / f"mcp-{transport}.err").read_text()
            async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                yield session
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                raise
            assert code == 0, (tmp_path / f"mcp-{transport}.err").read_text()
    finally:
        errlog.close()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


async def call(session: ClientSession, tool: str, /, **args: Any) -> tuple[dict[str, Any], str]:
    """(structured result, text) of a successful call; every result stays under the size limit."""
    result = await session.call_tool(tool, args)
    assert not result.is_error, result.content
    assert len(result.model_dump_json(by_alias=True).encode()) < RESULT_LIMIT
    assert result.structured_content is not None
    return result.structured_content, result.content[0].text  # type: ignore[union-attr]


async def call_error(session: ClientSession, tool: str, /, **args: Any) -> str:
    result = await session.call_tool(tool, args)
    assert result.is_error, result.structured_content
    return result.content[0].text  # type: ignore[union-attr]


def assert_clean(value: Any) -> None:
    """No escape sequence or control character anywhere in a result (tabs allowed)."""
    text = json.dumps(value, ensure_ascii=False)
    for s in _strings(value):
        assert not CONTROL.search(s), repr(s)[:300]
    assert "\x1b" not in text and "owned title" not in text and "evil.example" not in text


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def write_nasty_log(path: Path) -> None:
    with path.open("w", encoding="utf-8") as fh:
        fh.write("\n".join(NASTY) + "\n")
        fh.write("A" * 10_000_000 + "\x1b[2J tail of the big line\n")
        for i in range(LONG_LINES):
            fh.write(f"long-{i:04d} " + "x" * 900 + "\n")
        fh.write("the end\n")


@pytest.fixture
def mute_port() -> Iterator[int]:
    """A port that accepts TCP connections and never says a word (a host that hangs in the SSH handshake)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


# -- the hunt on a real sshd fleet ------------------------------------------------------------------------
@pytest.mark.timeout(300)
@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_the_hunt_over_mcp_on_a_real_fleet(
    sshd: Sshd, chains: Harness, tmp_path: Path, mute_port: int, transport: str
) -> None:
    chains.start("seed")
    assert wait_for(lambda: "benchmark exited" in chains.log_text("setup.log"), timeout=30)
    nasty = chains.logdir / "nasty.log"
    write_nasty_log(nasty)
    bench_log = str(chains.logdir / "benchmark-full.log")
    closed = free_port()
    fleet = write_fleet(
        tmp_path, chains, "seed",
        instance_table(sshd, chains, logs=[bench_log, str(nasty)]),
        instance_table(sshd, chains, "dead", port=closed),
        instance_table(sshd, chains, "mute", port=mute_port),
    )
    old = set(chains.bench_pids() + chains.entry_pids())

    async with mcp_session(tmp_path, fleet, "--timeout", "15", transport=transport) as session:
        # the tools, each with an input and an output schema; nothing from a host in their names or descriptions
        listed = (await session.list_tools()).tools
        assert {t.name for t in listed} == TOOLS
        for tool in listed:
            assert tool.input_schema and tool.output_schema, tool.name
            words = f"{tool.name} {tool.title} {tool.description}"
            assert str(chains.logdir) not in words and "127.0.0.1" not in words and "box1" not in words

        # status: what the fleet is
        status, text = await call(session, "fleet_status")
        rows = {r["name"]: r for r in status["instances"]}
        assert set(rows) == {"box1", "dead", "mute"}
        assert rows["box1"]["link"] == "connected" and rows["box1"]["data_age_s"] is not None
        assert rows["box1"]["benchmark"] in ("not_running", "starting"), rows["box1"]  # the chain's benchmark died
        assert rows["dead"]["status"] == "unreachable" and "refused" in rows["dead"]["detail"].lower(), rows["dead"]
        assert rows["dead"]["address"] == f"{sshd.user}@127.0.0.1:{closed}"
        assert rows["mute"]["status"] == "connecting"
        assert status["instances"][0]["name"] == "dead"  # trouble first
        assert "dead: unreachable" in text
        only, _ = await call(session, "fleet_status", status="unreachable")
        assert [r["name"] for r in only["instances"]] == ["dead"]

        # diagnose: the seed's verdict, with file:line evidence
        for _ in range(30):  # the chain may still be getting there
            diag, text = await call(session, "diagnose", name="box1")
            if diag["verdict"]["code"] == "transport_error":
                break
            await asyncio.sleep(0.5)
        verdict = diag["verdict"]
        assert verdict["code"] == "transport_error", diag
        assert verdict["severity"] in ("error", "critical")
        assert "warmup proof" in verdict["summary"].lower() and "broken pipe" in verdict["summary"].lower()
        evidence = next(f for f in diag["findings"] if f["code"] == "transport_error")["evidence"]
        lines = Path(bench_log).read_bytes().decode("utf-8", "replace").split("\n")
        assert evidence and all(e["path"] == bench_log and e["line"] >= 1 for e in evidence)
        for e in evidence:
            assert e["text"].strip(".… ") in lines[e["line"] - 1].split("\r")[-1], e
        broken = next(e for e in evidence if "broken pipe" in e["text"].lower())
        assert f"{bench_log}:{broken['line']}: " in text
        after, _ = await call(session, "fleet_status", name="box1")
        box = after["instances"][0]
        assert box["status"] == "failed" and box["verdict"]["code"] == "transport_error"

        # the evidence in its context, as the host has the file now
        around, text = await call(session, "read_log", name="box1", path=bench_log, mode="around",
                                  line=broken["line"], lines=9)
        assert around["source"] == "host"
        numbered = {it["line"]: it["text"] for it in around["lines"]}
        assert broken["line"] in numbered and broken["text"].strip(".… ") in numbered[broken["line"]]
        assert min(numbered) == max(1, broken["line"] - 4)
        found, _ = await call(session, "read_log", name="box1", path=bench_log, mode="match", pattern="BROKEN PIPE")
        assert broken["line"] in [it["line"] for it in found["lines"]] and found["matched"] >= 1

        # a hostile log: escapes gone, the 10 MB line cut, the result capped and saying so
        head, _ = await call(session, "read_log", name="box1", path=str(nasty), mode="around", line=1, lines=12)
        assert_clean(head)
        texts = {it["line"]: it["text"] for it in head["lines"]}
        assert texts[2] == "red text" and texts[3] == "after osc" and texts[4] == "link done"
        assert texts[9] == "progress 100%"
        big = next(it for it in head["lines"] if it["line"] == BIG_LINE)
        assert big["cut_from"] >= 10_000_000 and len(big["text"]) <= safe.LINE_CHARS and big["text"].endswith("…")
        tail, text = await call(session, "read_log", name="box1", path=str(nasty), lines=500)
        assert_clean(tail)
        assert tail["truncated"] and "left out" in tail["note"] and "left out" in text
        assert tail["lines"][-1]["text"] == "the end" and tail["file_lines"] == BIG_LINE + LONG_LINES + 1
        hits, _ = await call(session, "read_log", name="box1", path=str(nasty), mode="match", pattern="tail of the big")
        assert [it["line"] for it in hits["lines"]] == [BIG_LINE]
        assert "not a log this instance follows" in await call_error(session, "read_log", name="box1",
                                                                    path="/etc/passwd")
        detail, _ = await call(session, "instance_detail", name="box1")
        assert_clean(detail)
        assert any(p["entrypoint"] for p in detail["processes"]), detail["processes"]
        assert {bench_log, str(nasty)} <= {log["path"] for log in detail["logs"]}
        resource = await session.read_resource("fleet://instances/box1/logs")
        body = json.loads(resource.contents[0].text)  # type: ignore[union-attr]
        assert_clean(body)
        assert len(resource.contents[0].text.encode()) < RESULT_LIMIT  # type: ignore[union-attr]
        prompt = await session.get_prompt("hunt", {"instance": "box1"})
        assert "fleet_status" in prompt.messages[0].content.text  # type: ignore[union-attr]

        # hosts that are down or hang: a clear error within the call's timeout, never a hung server
        started = time.monotonic()
        assert "refused" in (await call_error(session, "diagnose", name="dead")).lower()
        mute = await call_error(session, "diagnose", name="mute")  # the link's own words once it gave up, or ours
        assert re.search(r"not reachable within|no answer within|timed out", mute), mute
        assert time.monotonic() - started < 15 + 8
        probe, _ = await call(session, "run_probe", name="box1", probe="resources")
        assert probe["lines"] and "no probe named" in await call_error(session, "run_probe", name="box1",
                                                                       probe="rm -rf /")

        # restart: refused without --allow-restart, and nothing touched
        assert "--allow-restart" in await call_error(session, "restart", name="box1", reason="seed: broken pipe")
        assert all(alive(p) for p in old)

    async with mcp_session(tmp_path, fleet, "--allow-restart", transport=transport) as session:
        done, _ = await call(session, "restart", name="box1", reason="warmup proof died on a broken pipe")
        assert done["outcome"] == "ok" and done["started_pid"] not in old
    assert wait_for(lambda: all(not alive(p) for p in old), timeout=10)
    assert wait_for(chains.entry_pids, timeout=30)

    records = [r for r in audit_records(tmp_path) if r["action"] == "restart"]
    assert [(r["instance"], r["outcome"]) for r in records] == [("box1", "refused"), ("box1", "ok")]
    assert all(r["origin"] == "mcp" for r in records)
    assert records[0]["reason"] == "seed: broken pipe"
    assert records[1]["reason"] == "warmup proof died on a broken pipe"
    assert records[1]["result"]["started"]["pid"] == done["started_pid"]


async def test_read_only_wins_over_allow_restart(sshd: Sshd, chains: Harness, tmp_path: Path) -> None:
    fleet = write_fleet(tmp_path, chains, "run", instance_table(sshd, chains))
    async with mcp_session(tmp_path, fleet, "--allow-restart", "--read-only") as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert "--read-only" in (tools["restart"].description or "")
        assert "--read-only" in await call_error(session, "restart", name="box1", reason="should not happen")
    records = audit_records(tmp_path)
    assert [(r["outcome"], r["origin"], r["reason"]) for r in records] == [
        ("refused", "mcp", "should not happen")
    ]


# -- the demo: an assistant-like script does the seed's hunt ------------------------------------------------
@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_an_assistant_does_the_seed_hunt_on_the_demo_in_four_calls(tmp_path: Path) -> None:
    async with mcp_session(tmp_path, None, "--demo", "--instances", "4") as session:
        # the fleet is up, and the seed instance has failed, once the console has seen its benchmark go
        # (read from a resource: not a tool call)
        deadline = time.monotonic() + 90
        while True:
            res = await session.read_resource("fleet://status")
            rows = {r["name"]: r for r in json.loads(res.contents[0].text)["instances"]}  # type: ignore[union-attr]
            if rows["warmup-04"]["benchmark"] == "not_running":
                break
            assert time.monotonic() < deadline, f"the demo's seed instance never failed: {rows['warmup-04']}"
            await asyncio.sleep(0.5)

        calls = 0

        async def tool(tool_name: str, /, **args: Any) -> dict[str, Any]:
            nonlocal calls
            calls += 1
            data, _ = await call(session, tool_name, **args)
            return data

        started = time.monotonic()
        status = await tool("fleet_status")
        down = [r for r in status["instances"] if r["status"] in ("failed", "unreachable", "benchmark_down")]
        down += [r for r in status["instances"] if r not in down and r["benchmark"] != "running"]
        verdict = evidence = None
        for row in down:
            if calls >= 3:
                break
            diag = await tool("diagnose", name=row["name"])
            if diag["verdict"]["severity"] in ("error", "critical"):
                verdict = (row["name"], diag["verdict"])
                evidence = next(e for f in diag["findings"] for e in f["evidence"] if e.get("line"))
                break
        assert verdict and evidence, [(r["name"], r["status"], r["benchmark"]) for r in status["instances"]]
        lines = await tool("read_log", name=verdict[0], path=evidence["path"], mode="around", line=evidence["line"],
                           lines=7)
        elapsed = time.monotonic() - started

    print(f"the hunt: {calls} tool calls, {elapsed:.2f} s")
    assert calls <= 4 and elapsed < 5, (calls, elapsed)
    assert verdict[0] == "warmup-04" and "broken pipe" in verdict[1]["summary"].lower(), verdict
    shown = {it["line"]: it["text"] for it in lines["lines"]}
    assert evidence["line"] in shown and any("broken pipe" in t.lower() for t in shown.values()), shown


# -- the pieces ---------------------------------------------------------------------------------------------
def test_clean_strips_every_kind_of_escape() -> None:
    assert [safe.clean(x) for x in NASTY] == [
        "plain start", "red text", "after osc", "link done", "dcs gone", "c1  csi and  end",
        "bell backspace del", "evil bidi", "progress 100%",
    ]
    assert safe.clean("unterminated \x1b]0;title to the end") == "unterminated "
    assert safe.clean("tab\tstays\r\n") == "tab\tstays"
    assert safe.clean("a\nb") == "a b" and safe.clean("a\nb", keep_newlines=True) == "a\nb"
    assert safe.clip("x" * 10, 5) == "xxxx…"


def test_log_command_reads_numbered_cut_lines_with_awk(tmp_path: Path) -> None:
    path = tmp_path / "it's a log"
    write_nasty_log(path)

    def run(cmd: str) -> str:
        return subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, errors="replace").stdout

    lines, _, read, missing = parse_log_output(run(log_command(str(path), "tail", 3)))
    assert not missing and read == BIG_LINE + LONG_LINES + 1
    assert [it["line"] for it in lines] == [read - 2, read - 1, read] and lines[-1]["text"] == "the end"
    lines, count, _, _ = parse_log_output(run(log_command(str(path), "match", 5, pattern="'; echo pwned; '")))
    assert lines == [] and count == 0
    lines, _, _, _ = parse_log_output(run(log_command(str(path), "around", 3, line=BIG_LINE)))
    assert [it["line"] for it in lines] == [BIG_LINE - 1, BIG_LINE, BIG_LINE + 1]
    assert lines[1]["cut_from"] > 10_000_000 and len(lines[1]["text"]) <= safe.LINE_CHARS
    _, _, _, missing = parse_log_output(run(log_command(str(tmp_path / "nope"), "tail", 3)))
    assert missing


async def test_serve_mcp_shares_the_services_links_and_state(tmp_path: Path) -> None:
    """``serve --demo --mcp``: one process, one set of links; MCP answers from the state /metrics reports."""
    port = free_port()
    err = (tmp_path / "serve.err").open("a")
    proc = subprocess.Popen([sys.executable, "-m", "console", "serve", "--demo", "--instances", "2",
                             "--metrics-port", "0", "--mcp", f"127.0.0.1:{port}"],
                            cwd=tmp_path, env=dict(os.environ, **env(tmp_path)), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=err)
    try:
        assert wait_for(lambda: proc.poll() is not None or _listening(port), timeout=60), "no MCP listener"
        assert proc.poll() is None, (tmp_path / "serve.err").read_text()
        async with streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            assert {t.name for t in (await session.list_tools()).tools} == TOOLS
            deadline = time.monotonic() + 60
            while True:
                status, _ = await call(session, "fleet_status")
                if len(status["instances"]) == 2 and all(r["status"] != "connecting" for r in status["instances"]):
                    break
                assert time.monotonic() < deadline, status
                await asyncio.sleep(0.5)
            refused = await call_error(session, "restart", name=status["instances"][0]["name"], reason="test")
            assert "allow-restart" in refused
        text = (tmp_path / "serve.err").read_text()
        # the demo's hosts were connected once: by the service, not a second time for MCP
        assert text.count("starting 2 demo instances") == 1 and "MCP on http://127.0.0.1:" in text, text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, (tmp_path / "serve.err").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- issue 35: fleet_status's enum and filter, details cut at a word ---------------------------------------
@pytest.mark.timeout(180)
async def test_fleet_status_offers_every_status_and_takes_the_consoles_filter(tmp_path: Path) -> None:
    from console.core.status import STATUSES

    async with mcp_session(tmp_path, None, "--demo", "--instances", "2") as session:
        listed = {t.name: t for t in (await session.list_tools()).tools}
        enum = listed["fleet_status"].input_schema["properties"]["status"]["enum"]
        assert set(STATUSES) <= set(enum) and "needs_action" in enum, enum
        assert "filter" in listed["fleet_status"].input_schema["properties"]
        deadline = time.monotonic() + 60
        while not (await call(session, "fleet_status", filter="util>=0"))[0]["matched"]:
            assert time.monotonic() < deadline, "the demo's GPUs never reported"
            await asyncio.sleep(0.5)
        assert (await call(session, "fleet_status", filter="temp>1000"))[0]["matched"] == 0
        bad = await call_error(session, "fleet_status", filter="util<5 & bogus>1")
        assert "bogus" in bad and "\n" not in bad.strip() and "Traceback" not in bad, bad
        assert "no prices yet" in await call_error(session, "fleet_status", filter="$/h>1")


def test_status_detail_is_cut_at_a_word() -> None:
    from console.core.state import FleetState
    from console.inventory import Instance
    from console.mcp.tools import status_row

    state = FleetState()
    inst = state.add_instance(Instance(name="a", host="h"))
    inst.status_detail = " ".join(["download"] * 80)
    detail = status_row(inst, time.time())["detail"]
    assert detail.endswith("download…") and len(detail) <= safe.FIELD_CHARS, detail
