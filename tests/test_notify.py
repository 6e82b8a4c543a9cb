"""``[[notify]]`` sinks without a fleet of hosts: bad rows are one ``file:line: reason``; against local stand-ins
(HTTP and SMTP on 127.0.0.1) and a real fleet state, ten instances failing together are one message per sink,
a flapping host gives none until it stays down, a 429 then 200 gets the message once, quiet hours hold it, host
text cannot inject markup, and a dead sink holds up no other."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from console.core.state import FleetState
from console.inventory import Instance
from console.notify.dispatch import Notifier
from tests.support.fleet_text import error, load
from tests.support.standins import HttpStandIn, Post, SmtpStandIn, sink_rows, standins
from tests.support.wait import until

HTTP_SINKS = {"ntfy": "/ntfy/", "slack": "/slack", "discord": "/discord", "telegram": "/tg/bot123:abc/sendMessage",
              "webhook": "/hook"}


@pytest.fixture
def stands() -> Iterator[tuple[HttpStandIn, SmtpStandIn]]:
    yield from standins()



@pytest.mark.parametrize(("text", "expected"), [
    ('[[notify]]\ntype = "pager"\n', "F:6: notify #1: type must be 'ntfy', 'slack', 'discord', 'telegram', "
     "'email' or 'webhook', not 'pager'"),
    ('[[notify]]\ntype = "ntfy"\nurl = "https://ntfy.sh"\n', "F:5: notify 'ntfy': ntfy needs topic"),
    ('[[notify]]\ntype = "slack"\nurl = "https://h/x"\ntopic = "t"\n',
     "F:8: notify 'slack': topic does not apply to slack (it takes url)"),
    ('[[notify]]\ntype = "discord"\nurl = "ftp://h/secret-path"\n',
     "F:7: notify 'discord': url must be an http:// or https:// URL, not 'ftp://h'"),
    ('[[notify]]\ntype = "telegram"\ntoken = "env:FLEET_TEST_UNSET_TOKEN"\nchat_id = 1\n',
     "F:7: notify 'telegram': token: env:FLEET_TEST_UNSET_TOKEN is not set in the environment"),
    ('[[notify]]\ntype = "telegram"\ntoken = "file:nothere"\nchat_id = 1\n',
     "F:7: notify 'telegram': token: file:nothere: cannot read F/../nothere: No such file or directory"),
    ('[[notify]]\ntype = "webhook"\nurl = "http://h/x"\nmin_duration = "soon"\n',
     "F:8: notify 'webhook': min_duration must be a duration from 0 to 24h like \"30s\" or \"2m\", not 'soon'"),
    ('[[notify]]\ntype = "webhook"\nurl = "http://h/x"\nquiet_hours = "22-7"\n',
     "F:8: notify 'webhook': quiet_hours must be \"HH:MM-HH:MM\" (local time, like \"22:00-07:00\"), not '22-7'"),
    ('[[notify]]\ntype = "webhook"\nurl = "http://h/x"\nstatuses = ["down"]\n',
     "F:8: notify #1: statuses must be a status or a list of them: failed, needs_action, unreachable, "
     "benchmark_down, stale, gpu_idle, connecting, ok, not ['down']"),
    ('[[notify]]\ntype = "email"\nhost = "h"\nfrom = "me"\nto = "ops@x.org"\n',
     "F:8: notify 'email': 'me' is not an email address"),
    ('[[notify]]\ntype = "webhook"\nurl = "http://h/x"\n\n[[notify]]\nname = "webhook"\ntype = "slack"\n'
     'url = "http://h/y"\n', "F:10: duplicate notify name 'webhook' (first is notify #1)"),
])
def test_bad_notify_rows_are_one_line_with_file_and_line(tmp_path: Path, text: str, expected: str) -> None:
    got = error(tmp_path, text)
    assert got == expected.replace("F/../", str(tmp_path) + "/")


def test_a_notify_row_keeps_its_secret_as_the_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEET_TEST_NTFY", "tk_live_0123456789")
    fleet = load(tmp_path, '[[notify]]\ntype = "ntfy"\nurl = "https://ntfy.sh"\ntopic = "gpus"\n'
                           'token = "env:FLEET_TEST_NTFY"\nquiet_hours = "22:00-07:30"\nmin_duration = "2m"\n')
    (spec,) = fleet.notify
    assert (spec.name, spec.token, spec.min_duration, spec.quiet_hours) == ("ntfy", "env:FLEET_TEST_NTFY", 120.0,
                                                                            (1320, 450))
    assert spec.statuses == ("failed", "benchmark_down", "gpu_idle", "unreachable") and spec.group_wait == 10.0
    assert "tk_live" not in repr(fleet)


# -- delivery against the stand-ins ------------------------------------------------------------------------------


def text_of(post: Post) -> str:
    """What a person reads of one post, markup as sent."""
    b = post.body
    if "topic" in b:
        return b["title"] + "\n" + b["message"]
    if "blocks" in b:
        return json.dumps(b["blocks"], ensure_ascii=False)
    if "embeds" in b:
        return b["embeds"][0]["title"] + "\n" + b["embeds"][0]["description"]
    if "chat_id" in b:
        return b["text"]
    return json.dumps(b["alerts"], ensure_ascii=False)


def notifier(tmp_path: Path, stands: tuple[HttpStandIn, SmtpStandIn], n: int, extra: str,
             more: str = "") -> tuple[Notifier, FleetState]:
    http, smtp = stands
    fleet = load(tmp_path, sink_rows(http, smtp, extra) + more)
    state = FleetState()
    for i in range(n):
        state.add_instance(Instance(name=f"gpu-{i:02d}", host=f"10.0.0.{i + 1}"))
        state.set_link_status(f"gpu-{i:02d}", "connected", "")
    notify = Notifier(fleet.notify, state)
    notify.start()
    return notify, state


async def test_ten_instances_failing_together_are_one_message_per_sink_and_a_dead_sink_holds_up_none(
    tmp_path: Path, stands: tuple[HttpStandIn, SmtpStandIn], caplog: pytest.LogCaptureFixture
) -> None:
    http, smtp = stands
    dead = f'[[notify]]\nname = "dead"\ntype = "webhook"\nurl = "http://127.0.0.1:{_closed_port()}/x"\n' \
           'min_duration = "1s"\ngroup_wait = "2s"\n'
    notify, state = notifier(tmp_path, stands, 10, 'min_duration = "1s"\ngroup_wait = "2s"\n', dead)
    caplog.set_level(logging.INFO, "fleet_console")
    t0 = time.time()
    try:
        for i in range(10):  # within 1.5 s of each other
            state.set_link_status(f"gpu-{i:02d}", "unreachable", "connection refused")
            notify.evaluate(t0 + i * 0.15)
        for step in range(1, 12):
            notify.evaluate(t0 + 1.5 + step * 0.5)
        await until(lambda: all(len(http.at(p)) == 1 for p in HTTP_SINKS.values()) and len(smtp.messages) == 1,
                    timeout=15, detail=lambda: [p.path for p in http.posts])
        for sink, path in HTTP_SINKS.items():
            text = text_of(http.at(path)[0])
            assert all(f"gpu-{i:02d}" in text for i in range(10)), (sink, text)
            assert "unreachable" in text
        assert http.at("/ntfy/")[0].body["title"].startswith("10 instances in trouble: gpu-00, gpu-01")
        assert http.at("/ntfy/")[0].body["priority"] == 5
        assert smtp.messages[0]["Subject"].startswith("10 instances in trouble")
        assert "fleet-console diagnose gpu-07" in smtp.messages[0].get_payload()
        for i in range(10):  # all back: one resolved message each
            state.set_link_status(f"gpu-{i:02d}", "connected", "")
        for step in range(1, 12):
            notify.evaluate(t0 + 10 + step * 0.5)
        await until(lambda: all(len(http.at(p)) == 2 for p in HTTP_SINKS.values()) and len(smtp.messages) == 2,
                    timeout=15)
        assert http.at("/ntfy/")[1].body["title"].startswith("10 instances ok again")
        assert http.at("/hook")[1].body["status"] == "resolved"
    finally:
        await notify.stop()
    dead_lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("notify dead:")
                  and r.levelno >= logging.WARNING]
    assert len(dead_lines) == 1 and "no answer" in dead_lines[0], dead_lines  # logged once, then retried


def _closed_port() -> int:
    from tests.support.sshd import free_port

    return free_port()


async def test_a_flapping_host_gives_nothing_until_it_stays_down(
    tmp_path: Path, stands: tuple[HttpStandIn, SmtpStandIn]
) -> None:
    http, smtp = stands
    notify, state = notifier(tmp_path, stands, 1, 'min_duration = "5s"\ngroup_wait = "0s"\n')
    t = time.time()
    try:
        for _ in range(4):  # down 3 s, up 3 s: never down for 5 s
            state.set_link_status("gpu-00", "unreachable", "connection refused")
            for k in range(4):
                notify.evaluate(t + k)
            state.set_link_status("gpu-00", "connected", "")
            for k in range(3, 7):
                notify.evaluate(t + k)
            t += 7
        assert http.posts == [] and smtp.messages == []
        assert [s.flaps for s in notify.sinks] == [4] * 6
        state.set_link_status("gpu-00", "unreachable", "connection refused")
        for k in range(7):
            notify.evaluate(t + k)
        await until(lambda: len(http.posts) == 5 and len(smtp.messages) == 1, timeout=15)
        assert "flapped 4 times before" in http.at("/ntfy/")[0].body["message"]
        assert "gpu-00 unreachable" in http.at("/ntfy/")[0].body["title"]
    finally:
        await notify.stop()


async def test_a_sink_answering_429_then_200_gets_the_message_once(
    tmp_path: Path, stands: tuple[HttpStandIn, SmtpStandIn]
) -> None:
    http, _ = stands
    http.answers["/slack"] = [(429, {"Retry-After": "1"})]
    http.answers["/ntfy/"] = [(503, {})]
    notify, state = notifier(tmp_path, stands, 1, 'min_duration = "0s"\ngroup_wait = "0s"\n')
    try:
        state.set_link_status("gpu-00", "unreachable", "connection refused")
        t = time.time()
        for k in range(3):
            notify.evaluate(t + k)
        await until(lambda: len(http.at("/slack")) == 1 and len(http.at("/ntfy/")) == 1, timeout=15)
        tries = [at for path, at in http.attempts if path == "/slack"]
        assert len(tries) == 2 and tries[1] - tries[0] >= 0.9  # Retry-After honoured
        notify.evaluate(t + 5)
        assert len(http.at("/slack")) == 1
    finally:
        await notify.stop()


async def test_quiet_hours_hold_the_message_until_they_end(
    tmp_path: Path, stands: tuple[HttpStandIn, SmtpStandIn]
) -> None:
    http, _ = stands
    three_am = time.mktime((*time.localtime()[:3], 3, 0, 0, 0, 0, -1))
    notify, state = notifier(tmp_path, stands, 2, 'min_duration = "0s"\ngroup_wait = "0s"\n'
                                                  'quiet_hours = "02:00-04:00"\n')
    try:
        state.set_link_status("gpu-00", "unreachable", "connection refused")
        for k in range(3):
            notify.evaluate(three_am + k)
        state.set_link_status("gpu-01", "unreachable", "no route to host")
        for k in range(3, 600, 60):
            notify.evaluate(three_am + k)
        assert http.attempts == []
        notify.evaluate(three_am + 3600 + 60)  # 04:01: both together
        await until(lambda: len(http.posts) == 5, timeout=15)
        assert http.at("/ntfy/")[0].body["title"] == "2 instances in trouble: gpu-00, gpu-01"
    finally:
        await notify.stop()


async def test_host_text_cannot_inject_markup(tmp_path: Path, stands: tuple[HttpStandIn, SmtpStandIn]) -> None:
    http, _ = stands
    notify, state = notifier(tmp_path, stands, 1, 'min_duration = "0s"\ngroup_wait = "0s"\n')
    evil = "<!channel> <b>x</b> [click](http://evil.example) @everyone"
    try:
        state.set_link_status("gpu-00", "unreachable", evil)
        t = time.time()
        for k in range(3):
            notify.evaluate(t + k)
        await until(lambda: len(http.posts) == 5, timeout=15)
    finally:
        await notify.stop()
    slack = text_of(http.at("/slack")[0])
    assert "&lt;!channel&gt;" in slack and "<!channel>" not in slack
    telegram = http.at("/tg/bot123:abc/sendMessage")[0].body
    assert telegram["parse_mode"] == "HTML" and "&lt;b&gt;x&lt;/b&gt;" in telegram["text"]
    assert "<b>x</b>" not in telegram["text"]
    discord = http.at("/discord")[0].body
    assert discord["allowed_mentions"] == {"parse": []}
    assert r"\[click\](http://evil.example)" in discord["embeds"][0]["description"]
    assert not re.search(r"(?<!\\)\[click", discord["embeds"][0]["description"])
