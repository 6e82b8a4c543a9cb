"""``fleet-console web --demo`` in headless Chromium, and the HTTP rules every endpoint shares (console/web/auth.py):
the token, the ``?token=`` login cookie, the Host/Origin allowlist, the refusal of an open non-loopback bind, on
the web console, MCP over HTTP (the SDK's own client) and ``/metrics`` (TLS too)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import pytest
import websockets
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from console.core.state import FleetState
from console.demo.scenarios import instance_name
from console.monitor.metrics import FleetCollector, MetricsServer
from console.web.auth import COOKIE, HttpSecurity, Policy, tls_context
from tests.support.browser import Browser, chromium
from tests.support.sshd import free_port
from tests.support.wait import until, until_sync

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "0123456789abcdef-web-test-token"
NAMES = [instance_name(i) for i in range(2)]


def cli_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), FLEET_CONSOLE_STATE_DIR=str(tmp_path / "state"), **extra)
    env.pop("FLEET_CONSOLE_TOKEN", None)
    env.update(extra)
    return env


def cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "console", *args], cwd=tmp_path, env=cli_env(tmp_path, **env),
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


class Web:
    def __init__(self, proc: subprocess.Popen[bytes], err: Path, port: int) -> None:
        self.proc, self.err, self.port = proc, err, port
        self.url = f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Web]:
    """One ``fleet-console web --demo --instances 2`` with a token, for the module."""
    tmp = tmp_path_factory.mktemp("web")
    err = tmp / "web.err"
    with err.open("wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "console", "web", "--demo", "--instances", "2",
                                 "--bind", "127.0.0.1:0"], cwd=tmp, env=cli_env(tmp, FLEET_CONSOLE_TOKEN=TOKEN),
                                stdin=subprocess.DEVNULL, stdout=fh, stderr=fh)
    try:
        found = until_sync(lambda: proc.poll() is not None or re.search(r"serving http://127\.0\.0\.1:(\d+)/",
                                                                         err.read_text()),
                           60, "the web console's listening line", detail=err.read_text)
        assert proc.poll() is None, err.read_text()
        assert isinstance(found, re.Match)
        yield Web(proc, err, int(found.group(1)))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        assert code == 0, err.read_text()
        assert TOKEN not in err.read_text()  # the token is never printed


def test_the_web_console_refuses_requests_without_the_token_or_from_a_foreign_host(web: Web) -> None:
    text = web.err.read_text()
    assert "token required" in text and "read-only" in text, text
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=web.url, follow_redirects=False, timeout=10) as client:
        for path in ("/", "/ws", "/static/js/textual.js", "/?token=wrong-token-wrong-token"):
            answer = client.get(path)
            assert answer.status_code == 401, (path, answer.text)
        assert client.get("/", headers={"Authorization": "Bearer nope"}).status_code == 401
        assert client.get("/healthz").status_code == 200  # open for probes
        page = client.get("/", headers=bearer)
        assert page.status_code == 200 and f"ws://127.0.0.1:{web.port}/ws" in page.text
        # Host or Origin not allowed: refused even with the token (DNS rebinding, cross-site websockets)
        for headers in ({"Host": "evil.example"}, {"Origin": "http://evil.example"}):
            for path in ("/", "/healthz", "/ws"):
                assert client.get(path, headers={**bearer, **headers}).status_code == 403, (path, headers)
        login = client.get("/?token=" + TOKEN + "&fontsize=14")
        assert login.status_code == 303 and login.headers["location"] == "/?fontsize=14"
        cookie = login.headers["set-cookie"]
        assert cookie.startswith(COOKIE + "=") and "HttpOnly" in cookie and TOKEN not in cookie
        client.cookies.set(COOKIE, cookie.split(";")[0].split("=", 1)[1])
        assert client.get("/").status_code == 200


async def test_the_websocket_needs_the_cookie_and_an_allowed_origin(web: Web) -> None:
    ws_url = f"ws://127.0.0.1:{web.port}/ws?width=80&height=24"
    with pytest.raises(websockets.InvalidStatus) as refused:
        await websockets.connect(ws_url)
    assert refused.value.response.status_code == 401
    cookie = {"Cookie": f"{COOKIE}={Policy(TOKEN).session_value()}"}
    with pytest.raises(websockets.InvalidStatus) as foreign:
        await websockets.connect(ws_url, additional_headers=cookie, origin="http://evil.example")  # type: ignore[arg-type]
    assert foreign.value.response.status_code == 403


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_headless_chromium_logs_in_sees_the_demo_grid_and_drives_it(web: Web, tmp_path: Path) -> None:
    if chromium() is None:
        if os.geteuid() == 0:
            pytest.fail("chromium is missing: `make sshd-deps` installs it (apt-get install chromium)")
        pytest.skip("chromium is not installed and cannot be as non-root: sudo apt-get install chromium")
    async with Browser.launch(tmp_path) as browser:
        anonymous = await browser.new_page()
        await anonymous.goto(web.url + "/")
        await until(lambda: anonymous.responses.get(web.url + "/"), 20, "the page's answer without a token")
        assert anonymous.responses[web.url + "/"] == 401

        page = await browser.new_page()
        started = time.monotonic()
        await page.goto(f"{web.url}/?token={TOKEN}")
        await until(lambda: all(n in page.ws_text() for n in NAMES), 30, "the demo grid in the browser",
                    detail=lambda: page.ws_text()[-2000:])
        opened_in = time.monotonic() - started
        shot = await page.screenshot(tmp_path / "web-grid.png")
        print(f"\nweb console in chromium: the demo grid after {opened_in:.1f} s; screenshot {shot}")
        assert opened_in < 10, f"the grid took {opened_in:.1f} s"
        # the footer is laid out once the app knows the terminal's width: it may come a paint after the panes
        await until(lambda: "Diagnose" in page.ws_text(), 20, "the footer's keys",
                    detail=lambda: page.ws_text()[-2000:])
        assert "Shell" not in page.ws_text()  # no shell key in the browser
        assert page.responses.get(web.url + "/") == 200  # after the ?token= redirect, with the cookie

        await page.focus_terminal()
        mark, pressed = len(page.frames), time.monotonic()
        await page.key("Enter")  # open the instance under the cursor
        await until(lambda: "Processes" in page.ws_text(mark) and "Diagnosis" in page.ws_text(mark), 20,
                    "the instance screen's tabs", detail=lambda: page.ws_text(mark)[-2000:])
        opened = time.monotonic() - pressed
        await page.screenshot(tmp_path / "web-instance.png")
        mark, pressed = len(page.frames), time.monotonic()
        await page.key("Escape")  # back to the fleet: the grid is drawn again
        await until(lambda: all(n in page.ws_text(mark) for n in NAMES), 20, "the grid again",
                    detail=lambda: page.ws_text(mark)[-2000:])
        print(f"Enter: the instance screen after {opened:.2f} s; Escape: the grid after "
              f"{time.monotonic() - pressed:.2f} s")
        await page.screenshot(tmp_path / "web-back.png")
        assert shot.stat().st_size > 10_000


# -- MCP over HTTP ---------------------------------------------------------------------------------------------


def test_an_open_non_loopback_bind_is_refused_with_one_line(tmp_path: Path) -> None:
    for args in (["mcp", "--demo", "--http", f"0.0.0.0:{free_port()}"],
                 ["web", "--demo", "--bind", f"0.0.0.0:{free_port()}"],
                 ["serve", "--demo", "--metrics-bind", "0.0.0.0", "--metrics-port", str(free_port())]):
        done = cli(tmp_path, *args)
        assert done.returncode == 2, (args, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "refusing" in lines[0] and "FLEET_CONSOLE_TOKEN" in lines[0], (args, lines)
    short = cli(tmp_path, "web", "--demo", "--bind", "0.0.0.0:0", FLEET_CONSOLE_TOKEN="short")
    assert short.returncode == 2 and "at least 16" in short.stderr and "Traceback" not in short.stderr


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_mcp_on_a_non_loopback_bind_lists_its_tools_only_to_a_client_with_the_token(tmp_path: Path) -> None:
    port = free_port()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    err = (tmp_path / "mcp.err").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "console", "mcp", "--demo", "--instances", "1",
                             "--http", f"0.0.0.0:{port}", "--token-file", str(token_file)],
                            cwd=tmp_path, env=cli_env(tmp_path), stdin=subprocess.DEVNULL, stdout=err, stderr=err)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        await until(lambda: proc.poll() is not None or "serving http://0.0.0.0" in (tmp_path / "mcp.err").read_text(),
                    60, "the MCP listener", detail=(tmp_path / "mcp.err").read_text)
        assert proc.poll() is None, (tmp_path / "mcp.err").read_text()
        await until(lambda: _answers(url), 30, "MCP answering")
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as client, \
                streamable_http_client(url, http_client=client) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            assert "fleet_status" in {t.name for t in (await session.list_tools()).tools}
        listed: list[str] = []
        with pytest.raises(BaseException) as refused:  # the SDK's client gets the 401 and gives up
            async with httpx.AsyncClient(timeout=10) as client, \
                    streamable_http_client(url, http_client=client) as (read, write), \
                    ClientSession(read, write) as session:
                await asyncio.wait_for(session.initialize(), 15)
                listed += [t.name for t in (await session.list_tools()).tools]
        assert not listed and "error response" in repr(refused.value), repr(refused.value)
        async with httpx.AsyncClient(timeout=10) as client:
            evil = await client.post(url, headers={"Authorization": f"Bearer {TOKEN}", "Host": "evil.example"},
                                     json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            assert evil.status_code == 403
            assert (await client.post(url, json={})).status_code == 401
            assert (await client.get(url.replace("/mcp", "/healthz"))).status_code == 200  # open
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.to_thread(proc.wait, 30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        err.close()
    assert code == 0, (tmp_path / "mcp.err").read_text()


def _answers(url: str) -> bool:
    try:
        httpx.get(url.replace("/mcp", "/healthz"), timeout=2)
    except httpx.HTTPError:
        return False
    return True


# -- /metrics ---------------------------------------------------------------------------------------------------


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


async def test_metrics_with_a_token_over_tls_and_healthz_open(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    security = HttpSecurity(Policy.build(TOKEN, "127.0.0.1", ("grafana.internal",), tls=True),
                            tls_context(str(cert), str(key)))
    server = MetricsServer(FleetCollector(FleetState()), "127.0.0.1", 0, security=security)
    await server.start()
    try:
        assert server.url.startswith("https://127.0.0.1:")
        async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=str(cert)), timeout=10) as client:
            assert (await client.get(server.url)).status_code == 401
            assert (await client.get(server.url, headers={"Authorization": "Bearer wrong"})).status_code == 401
            ok = await client.get(server.url, headers={"Authorization": f"Bearer {TOKEN}"})
            assert ok.status_code == 200 and "fleet_instance_info" in ok.text
            allowed = await client.get(server.url, headers={"Authorization": f"Bearer {TOKEN}",
                                                            "Host": "grafana.internal:9847"})
            assert allowed.status_code == 200  # an --allow-host name
            evil = await client.get(server.url, headers={"Authorization": f"Bearer {TOKEN}", "Host": "evil.example"})
            assert evil.status_code == 403
            assert (await client.get(server.url.replace("/metrics", "/healthz"))).status_code == 200
        async with httpx.AsyncClient(timeout=10) as plain:  # no plain HTTP on a TLS port
            with pytest.raises(httpx.HTTPError):
                await plain.get(server.url.replace("https:", "http:"))
    finally:
        await server.stop()


def test_the_policy_rules() -> None:
    policy = Policy.build(TOKEN, "0.0.0.0", ("console.example.org",), login_paths=frozenset({"/"}))
    assert policy.host_allowed("10.1.2.3:8080") and policy.host_allowed("[::1]:8080")
    assert policy.host_allowed("localhost:8080") and policy.host_allowed("Console.Example.org")
    assert not policy.host_allowed("evil.example") and not policy.host_allowed(None)
    assert policy.origin_allowed(None) and not policy.origin_allowed("null")
    assert not policy.origin_allowed("https://console.example.org.evil.example")
    assert policy.decide("/", {"host": "localhost"}, "token=" + TOKEN).status == 303
    assert policy.decide("/metrics", {"host": "localhost"}, "token=" + TOKEN).status == 401  # ?token= is the page's
    assert Policy.build(None, "127.0.0.1").decide("/", {"host": "127.0.0.1:8080"}).status == 0  # open on loopback


def test_a_loopback_bind_without_a_token_stays_open_says_so_and_still_checks_the_host(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.toml"
    fleet.write_text('[[instance]]\nname = "box1"\nhost = "127.0.0.1"\nport = 1\n')
    err = tmp_path / "web.err"
    with err.open("wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "console", "web", "--fleet", str(fleet), "--bind",
                                 "127.0.0.1:0", "--allow-actions"], cwd=tmp_path, env=cli_env(tmp_path),
                                stdin=subprocess.DEVNULL, stdout=fh, stderr=fh)
    try:
        found = until_sync(lambda: proc.poll() is not None or re.search(r"serving http://127\.0\.0\.1:(\d+)/ \((.*)\)",
                                                                         err.read_text()),
                           30, "the listening line", detail=err.read_text)
        assert isinstance(found, re.Match), err.read_text()
        assert "OPEN: no token configured" in found.group(2) and "actions allowed" in found.group(2)
        url = f"http://127.0.0.1:{found.group(1)}/"
        assert httpx.get(url, timeout=10).status_code == 200
        assert httpx.get(url, headers={"Host": "evil.example"}, timeout=10).status_code == 403
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, err.read_text()


def test_browser_sessions_are_read_only_unless_actions_are_allowed() -> None:
    from console.cli import build_parser
    from console.web.command import session_command

    def command(*flags: str) -> str:
        return session_command(build_parser().parse_args(["web", "--demo", *flags]), None, Path("/d/fleet.json"))

    assert command().endswith("--read-only") and command().startswith("exec ")
    assert "--read-only" not in command("--allow-actions")
    assert "--read-only" in command("--allow-actions", "--read-only")
