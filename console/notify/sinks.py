"""Each sink's own format for a :class:`Message`, within its size limits, with host text escaped for its markup:
ntfy (JSON publish: title, priority, tags), Slack (blocks, ``&<>`` escaped: no ``<!channel>`` from a log line),
Discord (an embed, markdown escaped, mentions off), Telegram (HTML, escaped), email (plain text), and the
generic webhook (Alertmanager's shape, as ``[[alert]]`` sends)."""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any

from console.inventory.schema import NotifySpec
from console.inventory.secrets import resolve
from console.notify.message import Message, cut

NTFY_LIMIT = 4000  # ntfy keeps 4096 bytes of a message
SLACK_SECTION = 3000
SLACK_HEADER = 150
DISCORD_TITLE = 256
DISCORD_DESCRIPTION = 4096
TELEGRAM_LIMIT = 4096
TELEGRAM_API = "https://api.telegram.org"


@dataclass
class Request:
    """One HTTP POST: where, its headers, its body."""

    url: str
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Sink:
    """A ``[[notify]]`` row with its secrets resolved (the notifier holds it; nothing prints it)."""

    spec: NotifySpec
    url: str = ""
    token: str = ""
    password: str = ""

    @property
    def name(self) -> str:
        return self.spec.name


def open_sink(spec: NotifySpec) -> Sink:
    """Resolve the row's ``env:``/``file:`` secrets (SecretError: one line naming the reference)."""
    from pathlib import Path

    base = Path(spec.base) if spec.base else None
    return Sink(spec, url=resolve(spec.url, base) if spec.url else "",
                token=resolve(spec.token, base) if spec.token else "",
                password=resolve(spec.password, base) if spec.password else "")


def _json(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


def slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


_DISCORD_MD = re.compile(r"([\\*_~`|>\[\]#])")  # links need [..]; mentions are off (allowed_mentions)


def discord_escape(text: str) -> str:
    return _DISCORD_MD.sub(r"\\\1", text)


def _lines(message: Message) -> list[tuple[str, str, str]]:
    """(summary, evidence "file:line: text" or "", look command or "") per event."""
    out = []
    for e in message.events:
        evidence = f"{e.facts.where}: {e.facts.evidence}" if e.kind != "resolved" and e.facts.evidence else ""
        out.append((message.summary(e), evidence, message.look(e) if e.kind != "resolved" else ""))
    return out


def ntfy(sink: Sink, message: Message) -> Request:
    priority = 3 if message.resolved_only or message.test else (5 if message.severe else 4)
    tags = ["white_check_mark"] if message.resolved_only else (["test_tube"] if message.test else ["rotating_light"])
    body = {"topic": sink.spec.topic, "title": cut(message.title(), 250), "message": message.text(NTFY_LIMIT),
            "priority": priority, "tags": tags}
    headers = {"Authorization": f"Bearer {sink.token}"} if sink.token else {}
    return Request(sink.url.rstrip("/") + "/", _json(body), headers)


def slack(sink: Sink, message: Message) -> Request:
    blocks: list[dict[str, Any]] = [{"type": "header", "text": {"type": "plain_text", "emoji": False,
                                                                "text": cut(message.title(), SLACK_HEADER)}}]
    if message.test:
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": slack_escape(message.text())}})
    for summary, evidence, look in _lines(message)[:45]:  # 50 blocks at most
        text = slack_escape(summary)
        if evidence:
            text += "\n`" + slack_escape(evidence).replace("`", "'") + "`"
        if look:
            text += "\nlook: `" + slack_escape(look) + "`"
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": cut(text, SLACK_SECTION)}})
    if message.flaps:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text":
                                                        f"{message.flaps} shorter troubles held back as flaps"}]})
    return Request(sink.url, _json({"text": slack_escape(cut(message.title(), 300)), "blocks": blocks}))


def discord(sink: Sink, message: Message) -> Request:
    parts = []
    for summary, evidence, look in _lines(message):
        text = discord_escape(summary)
        if evidence:
            text += "\n> " + discord_escape(evidence)
        if look:
            text += "\nlook: " + discord_escape(look)
        parts.append(text)
    if message.test or message.flaps:
        parts.append(discord_escape(message.text() if message.test else
                                    f"{message.flaps} shorter troubles held back as flaps"))
    colour = 0x2EB67D if message.resolved_only or message.test else (0xE01E5A if message.severe else 0xECB22E)
    embed = {"title": cut(message.title(), DISCORD_TITLE), "description": cut("\n\n".join(parts), DISCORD_DESCRIPTION),
             "color": colour, "footer": {"text": "fleet-console"}}
    body = {"username": "fleet-console", "embeds": [embed], "allowed_mentions": {"parse": []}}
    return Request(sink.url, _json(body))


def telegram(sink: Sink, message: Message) -> Request:
    parts = [f"<b>{html.escape(message.title())}</b>"]
    for summary, evidence, look in _lines(message):
        text = html.escape(summary)
        if evidence:
            text += f"\n<code>{html.escape(evidence)}</code>"
        if look:
            text += f"\nlook: <code>{html.escape(look)}</code>"
        parts.append(text)
    if message.test or message.flaps:
        parts.append(html.escape(message.text() if message.test else
                                 f"{message.flaps} shorter troubles held back as flaps"))
    text = "\n\n".join(parts)
    while len(text) > TELEGRAM_LIMIT and len(parts) > 2:  # whole entries go (a cut tag would be refused)
        parts.pop(-1)
        text = "\n\n".join([*parts, "…"])
    base = (sink.url or TELEGRAM_API).rstrip("/")
    body = {"chat_id": sink.spec.chat_id, "text": text[:TELEGRAM_LIMIT], "parse_mode": "HTML",
            "disable_web_page_preview": True}
    return Request(f"{base}/bot{sink.token}/sendMessage", _json(body))


def webhook(sink: Sink, message: Message) -> Request:
    from console.monitor.alerts import ZERO_TIME, _iso, fingerprint

    alerts = []
    for e in message.events:
        f = e.facts
        labels = {"alertname": "fleet-console", "name": f.name, "host": f.host, "status": f.status}
        if f.verdict:
            labels["verdict"] = f.verdict
        resolved = e.kind == "resolved"
        alerts.append({"status": "resolved" if resolved else "firing", "labels": labels,
                       "annotations": {"summary": message.summary(e), "description":
                                       f"{f.where}: {f.evidence}" if f.evidence else f.detail,
                                       "look": message.look(e)},
                       "startsAt": _iso(f.since), "endsAt": _iso(f.since + e.lasted) if resolved else ZERO_TIME,
                       "generatorURL": "", "fingerprint": fingerprint("fleet-console", f.name)})
    status = "resolved" if message.resolved_only else "firing"
    body = {"version": "4", "groupKey": '{}:{alertname="fleet-console"}', "truncatedAlerts": 0, "status": status,
            "receiver": sink.name, "groupLabels": {"alertname": "fleet-console"}, "commonLabels": {},
            "commonAnnotations": {"summary": message.title()}, "externalURL": "", "alerts": alerts}
    return Request(sink.url, _json(body))


def email(sink: Sink, message: Message) -> EmailMessage:
    mail = EmailMessage()
    mail["Subject"] = cut(message.title(), 200)
    mail["From"] = sink.spec.sender
    mail["To"] = ", ".join(sink.spec.to)
    mail.set_content(message.text(100_000) + "\n")
    return mail


RENDER = {"ntfy": ntfy, "slack": slack, "discord": discord, "telegram": telegram, "webhook": webhook}
