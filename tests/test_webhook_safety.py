"""Webhook URLs carry secrets and receivers answer what they like: local receivers on 127.0.0.1 check that a
token in the URL stays out of the log, ``/metrics`` and task names, that a redirect is never followed, and that
``user:password@`` in the URL is HTTP basic auth (what curl does), not part of the host name."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from console.core.state import FleetState
from console.inventory import Instance, load_fleet
from console.inventory.schema import AlertSpec
from console.monitor import alerts as alerts_mod
from console.monitor.alerts import AlertEngine, fleet_alerts
from console.monitor.metrics import gather, render_text
from tests.support.wait import until

TOKEN = "S3CRET-T0KEN"


class Receiver:
    """Keeps every request (method, path, headers, body); answers ``fail_first`` posts with 503, every post with a
    302 to ``redirect`` when set, else 200."""

    def __init__(self, fail_first: int = 0, redirect: str | None = None) -> None:
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.fail_first, self.redirect = fail_first, redirect
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def answer(self) -> None:
                data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.requests.append((self.command, self.path, dict(self.headers), data))
                if outer.redirect is not None:
                    self.send_response(302)
                    self.send_header("Location", outer.redirect)
                elif len(outer.requests) <= outer.fail_first:
                    self.send_response(503)
                else:
                    self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_POST = do_GET = answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receivers() -> Iterator[list[Receiver]]:
    made: list[Receiver] = []
    try:
        yield made
    finally:
        for r in made:
            r.close()


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(alerts_mod, "BACKOFF_FIRST", 0.05)
    monkeypatch.setattr(alerts_mod, "MAX_ATTEMPTS", 3)


def down_state() -> FleetState:
    state = FleetState()
    state.add_instance(Instance(name="n1", host="10.0.0.1"))
    state.set_link_status("n1", "unreachable", "connection refused")
    return state


def engine_for(url: str, counters: dict[str, dict[tuple[str, ...], float]] | None = None) -> AlertEngine:
    def count(metric: str, labels: tuple[str, ...]) -> None:
        if counters is not None:
            per = counters.setdefault(metric, {})
            per[labels] = per.get(labels, 0.0) + 1

    engine = AlertEngine([AlertSpec(name="Down", statuses=("unreachable",), webhooks=(url,))], down_state(),
                         count=count)
    engine.start()
    engine.evaluate()
    return engine


async def test_a_token_in_the_url_is_used_to_post_and_shown_nowhere(
    receivers: list[Receiver], caplog: pytest.LogCaptureFixture
) -> None:
    receiver = Receiver(fail_first=2)
    receivers.append(receiver)
    counters: dict[str, dict[tuple[str, ...], float]] = {}
    caplog.set_level(logging.INFO, logger="fleet_console")
    engine = engine_for(f"{receiver.origin}/hook/{TOKEN}?token={TOKEN}", counters)
    try:
        await until(lambda: len(receiver.requests) == 3, timeout=10)
        tasks = [t.get_name() for t in asyncio.all_tasks()]
    finally:
        await engine.stop()
    assert all(path == f"/hook/{TOKEN}?token={TOKEN}" for _, path, _, _ in receiver.requests)
    exposition = render_text(gather(down_state(), counters, time.time())).decode()
    assert f'fleet_webhook_failures_total{{webhook="{receiver.origin}"}} 2.0' in exposition
    failures = [r.getMessage() for r in caplog.records if "failed (attempt" in r.getMessage()]
    assert len(failures) == 2 and all(m.startswith(f"webhook {receiver.origin}: ") for m in failures), failures
    assert f"webhook {receiver.origin}" in tasks
    for text in (caplog.text, exposition, *tasks):
        assert TOKEN not in text


async def test_a_redirect_is_a_failed_post_never_followed(
    receivers: list[Receiver], caplog: pytest.LogCaptureFixture
) -> None:
    """A receiver answering 302 to another origin: the alert never reaches it (before: urllib followed, as a GET,
    every time); each try is a failure that says where the redirect pointed."""
    elsewhere = Receiver()
    redirecting = Receiver(redirect=f"{elsewhere.origin}/steal?x=1")
    receivers += [elsewhere, redirecting]
    counters: dict[str, dict[tuple[str, ...], float]] = {}
    caplog.set_level(logging.INFO, logger="fleet_console.alerts")
    engine = engine_for(f"{redirecting.origin}/hook", counters)
    try:
        await until(lambda: elsewhere.requests or any("gave up" in r.getMessage() for r in caplog.records),
                    timeout=10)
    finally:
        await engine.stop()
    assert [(method, path) for method, path, _, _ in elsewhere.requests] == []
    assert len(redirecting.requests) == 3
    assert counters["fleet_webhook_failures"] == {(redirecting.origin,): 3.0}
    gave_up = [r.getMessage() for r in caplog.records if "gave up" in r.getMessage()]
    assert gave_up == [f"webhook {redirecting.origin}: gave up on Down firing (n1) after 3 attempts: HTTP 302 "
                       f"redirect to {elsewhere.origin} not followed (redirects never are)"]


async def test_user_and_password_in_the_url_are_basic_auth(
    receivers: list[Receiver], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``check`` takes the URL, the post reaches 127.0.0.1 with ``Authorization: Basic`` (percent-escapes
    decoded), the password is in no log line."""
    receiver = Receiver(fail_first=1)
    receivers.append(receiver)
    url = f"http://alerts:p%40ss%20w0rd@{receiver.origin[len('http://'):]}/hook"
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text(f'[[instance]]\nname = "n1"\nhost = "10.0.0.1"\n\n[[alert]]\nname = "Down"\n'
                          f'statuses = "unreachable"\nwebhook = "{url}"\n')
    (rule,) = fleet_alerts(load_fleet(fleet_file))
    assert rule.webhooks == (url,)
    caplog.set_level(logging.INFO, logger="fleet_console.alerts")
    engine = engine_for(url)
    try:
        await until(lambda: len(receiver.requests) == 2, timeout=10)
    finally:
        await engine.stop()
    method, path, headers, body = receiver.requests[-1]
    assert (method, path) == ("POST", "/hook")
    assert headers["Authorization"] == "Basic " + base64.b64encode(b"alerts:p@ss w0rd").decode()
    assert headers["Host"] == receiver.origin[len("http://"):]
    assert json.loads(body)["alerts"][0]["labels"]["name"] == "n1"
    said = "\n".join(r.getMessage() for r in caplog.records)
    assert "p%40ss" not in said and "alerts:" not in said
    assert f"webhook {receiver.origin}: Down firing (n1) failed (attempt 1): HTTP Error 503" in said, said
