"""End to end on a real sshd fleet: a benchmark killed on a host reaches every sink's stand-in (ntfy, Slack,
Discord, Telegram, a webhook, email over SMTP) with the automatic diagnosis's verdict and its evidence line;
and secrets given as ``env:`` appear in no log line, ``check`` or ``notify test`` output, history, recording or
``/metrics``."""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from console import cli
from console.inventory import BenchmarkSpec, load_fleet
from console.monitor.monitoring import MonitoredController, Monitoring
from tests.support.sshd import Sshd, ssh_instance
from tests.support.standins import HttpStandIn, SmtpStandIn, sink_rows, standins
from tests.support.wait import until
from tests.test_notify import text_of
from tests.test_serve import bench_process  # noqa: F401 (a fixture)

NTFY_TOKEN = "tk_ntfy_5f1c9e0a7b3d42"
TG_TOKEN = "7012345678:AAE-tg-secret-e2e-91c4"
HOOK_KEY = "hk-secret-77a1b2c3d4"
SETUP_LOG = ("fetching params\n" * 20 + "curl: (22) The requested URL returned error: 404\n"
             "Failed to download c1.json\n")


@pytest.fixture
def stands() -> Iterator[tuple[HttpStandIn, SmtpStandIn]]:
    yield from standins()


@pytest.mark.slow
async def test_a_killed_benchmark_reaches_every_sink_with_its_verdict_and_no_secret_leaks(
    sshd: Sshd, tmp_path: Path, stands: tuple[HttpStandIn, SmtpStandIn], bench_process: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str],
) -> None:
    http, smtp = stands
    http.echo_auth = True  # a sink that repeats the token in its answer: `notify test` must not print it
    monkeypatch.setenv("FLEET_E2E_NTFY", NTFY_TOKEN)
    monkeypatch.setenv("FLEET_E2E_TG", TG_TOKEN)
    monkeypatch.setenv("FLEET_E2E_HOOK", f"{http.base}/hook?key={HOOK_KEY}")
    monkeypatch.setenv("FLEET_CONSOLE_STATE_DIR", str(tmp_path / "state"))
    rows = sink_rows(http, smtp, 'min_duration = "1s"\ngroup_wait = "2s"\n', telegram_token="env:FLEET_E2E_TG",
                     ntfy_token="env:FLEET_E2E_NTFY").replace(f'url = "{http.base}/hook"', 'url = "env:FLEET_E2E_HOOK"')
    fleet_file = tmp_path / "fleet.toml"
    fleet_file.write_text('[[instance]]\nname = "C.32710471"\nhost = "127.0.0.1"\n\n' + rows)
    proc, token, _ = bench_process
    setup = tmp_path / "setup.log"
    setup.write_text(SETUP_LOG)
    fleet = load_fleet(fleet_file)
    fleet.instances = [ssh_instance(sshd, "C.32710471", benchmark=BenchmarkSpec(match=(token,)),
                                    logs=(str(setup),))]
    caplog.set_level(logging.DEBUG, "fleet_console")
    monitoring = Monitoring(fleet, metrics=("127.0.0.1", 0), history=tmp_path / "history.sqlite3",
                            record=tmp_path / "rec.jsonl.gz", log_transitions=True)
    controller = MonitoredController(fleet, monitoring, read_only=True)
    await controller.start()
    tg_path = f"/tg/bot{TG_TOKEN}/sendMessage"
    paths = ("/ntfy/", "/slack", "/discord", tg_path, f"/hook?key={HOOK_KEY}")
    try:
        box = controller.state.instances["C.32710471"]
        await until(lambda: box.status == "ok" and box.bench_running, timeout=30)
        proc.kill()
        proc.wait()
        await until(lambda: all(http.at(p) for p in paths) and smtp.messages, timeout=40,
                    detail=lambda: (box.status, box.verdict_summary(), [p.path for p in http.posts]))
        metrics = (await asyncio.to_thread(lambda: urllib.request.urlopen(monitoring.server.url, timeout=5).read())
                   ).decode()
    finally:
        await controller.stop()
    for path in paths:
        (post,) = http.at(path)
        text = text_of(post).replace("\\", "")
        assert re.search(r"C\.32710471 (failed|benchmark down)", text), (path, text)
        assert "download failed" in text and "setup.log:21" in text and "error: 404" in text, (path, text)
        assert "fleet-console diagnose C.32710471" in text, (path, text)
    assert http.at("/ntfy/")[0].headers["Authorization"] == f"Bearer {NTFY_TOKEN}"
    mail = smtp.messages[0]
    assert "C.32710471" in mail["Subject"] and "setup.log:21" in mail.get_payload()
    assert 'fleet_notify_sent_total{sink="slack"} 1.0' in metrics

    assert cli.main(["check", "--fleet", str(fleet_file)]) == 0
    assert cli.main(["notify", "test", "--fleet", str(fleet_file)]) == 0
    printed = capsys.readouterr()
    assert "ntfy             ntfy      ok: HTTP 200" in printed.out and "Bearer ***" in printed.out
    everything = {
        "logs": "\n".join(r.getMessage() for r in caplog.records),
        "check and notify test": printed.out + printed.err,
        "history": b"".join(p.read_bytes() for p in tmp_path.glob("history.sqlite3*")).decode("latin-1"),
        "recording": gzip.decompress((tmp_path / "rec.jsonl.gz").read_bytes()).decode(),
        "metrics": metrics,
        "audit and state": b"".join(p.read_bytes() for p in (tmp_path / "state").rglob("*") if p.is_file()
                                    ).decode("latin-1"),
    }
    assert "verdict C.32710471" in everything["logs"] and "notify slack: sent" in everything["logs"]
    for where, text in everything.items():
        for secret in (NTFY_TOKEN, TG_TOKEN, HOOK_KEY):
            assert secret not in text, f"{secret} in the {where}"
    assert json.loads(everything["recording"].splitlines()[0])  # a real recording was read
