"""Alerts out: the fleet file's ``[[alert]]`` rules, evaluated each second, posted to webhooks.

A rule matches instances (name patterns, tags) and fires for one that has been in one of its ``statuses``
(or whose last verdict is one of its ``verdicts``) for ``for`` seconds; while firing it is sent again every
``repeat`` seconds; when the condition clears a ``resolved`` notification follows (``send_resolved``).
Each (rule, instance) is one alert with a stable fingerprint, so nothing is sent twice for one change. A
``gpu_health`` rule (NVML's ECC, row remap, Xid, clock event reasons, PCIe link: console/core/gpu_health.py) is one
alert per GPU that shows one of its fields: labels ``gpu``, ``uuid``, ``gpu_health``; the detail says the value.

The JSON is Alertmanager's webhook payload (version 4), so receivers written for Alertmanager (chat
bridges, incident tools) take it as is. Delivery never blocks the console: each webhook has its own queue
and task; a post runs in a thread with a timeout, and a failing receiver is retried with exponential
backoff (1 s doubling to 5 min, at most ``MAX_ATTEMPTS`` tries) while newer notifications wait behind it.

A webhook URL may carry a secret (a token in its path or query, a ``user:password@``): the URL is used only to
post; logs, the ``fleet_webhook_failures`` label and task names say ``scheme://host[:port]`` (``webhook_names``).
``user:password@`` is sent as HTTP basic auth, not as part of the host. Redirects are never followed (a
receiver cannot send the alerts, or the credentials, elsewhere): a 3xx is a failed post naming where it pointed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import fnmatch
import hashlib
import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from console.agent.wire.timefmt import fmt_age
from console.core.gpu_health import alert_hits
from console.core.spend import fmt_money, money
from console.core.state import FleetState, InstanceState
from console.core.text_safety import one_line, url_origin
from console.inventory.schema import AlertSpec

log = logging.getLogger("fleet_console.alerts")

POST_TIMEOUT = 10.0
BACKOFF_FIRST = 1.0
BACKOFF_MAX = 300.0
MAX_ATTEMPTS = 12
MAX_QUEUE = 1000
ZERO_TIME = "0001-01-01T00:00:00Z"  # Alertmanager's "no end" for a firing alert
AUTO_STOP = "AutoStop"  # the announcement of an automatic stop, sent wherever the fleet's rules send


def auto_stop_rule(rules: list[AlertSpec]) -> AlertSpec | None:
    """The ``AutoStop`` announcement to every webhook of the rules (and the bell where one rings), once an
    episode; None with nowhere to send it."""
    hooks = tuple(dict.fromkeys(url for rule in rules for url in rule.webhooks))
    bell = any(rule.bell for rule in rules)
    if not hooks and not bell:
        return None
    return AlertSpec(name=AUTO_STOP, webhooks=hooks, bell=bell, repeat=0.0, severity="warning", idle_for=0.0,
                     summary="an idle instance will be stopped ([actions] stop_idle_after)", source=AUTO_STOP)


def fleet_alerts(fleet: Any) -> list[AlertSpec]:
    """The fleet file's rules (``load_fleet`` carries them as ``fleet.alerts``; none for the demo)."""
    return list(getattr(fleet, "alerts", None) or ())


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


Key = tuple[str, str, str]  # an alert: (rule, instance, GPU index of a gpu_health rule or "")
Out = dict[tuple[str, str], list[dict[str, Any]]]  # (rule, "firing" | "resolved") -> the alerts to send


def k_gpu(key: Key) -> int:
    """The GPU index of a gpu_health alert's key (-1 for the others)."""
    return int(key[2]) if key[2] else -1


def fingerprint(rule: str, name: str) -> str:
    return hashlib.sha256(f"{rule}\0{name}".encode()).hexdigest()[:16]


@dataclass
class Alert:
    rule: AlertSpec
    name: str
    pending_since: float
    labels: dict[str, str] = field(default_factory=dict)
    detail: str = ""
    firing: bool = False
    sub: str = ""  # the GPU of a gpu_health rule's alert ("" for the others)
    starts_at: float = 0.0
    last_sent: float = 0.0

    def as_json(self, status: str, now: float) -> dict[str, Any]:
        summary = self.rule.summary or f"{self.name}: {self.labels.get('status', '')}"
        return {
            "status": status,
            "labels": dict(self.labels),
            "annotations": {"summary": summary, "description": self.detail, "rule_source": self.rule.source},
            "startsAt": _iso(self.starts_at),
            "endsAt": _iso(now) if status == "resolved" else ZERO_TIME,
            "generatorURL": "",
            "fingerprint": fingerprint(self.rule.name, f"{self.name}\0gpu{self.sub}" if self.sub else self.name),
        }


def matches(rule: AlertSpec, inst: InstanceState) -> bool:
    if rule.instances and not any(fnmatch.fnmatchcase(inst.name, p) for p in rule.instances):
        return False
    return not rule.tags or any(t in inst.tags for t in rule.tags)


def idle_condition(rule: AlertSpec, inst: InstanceState, now: float, currency: str = "$") -> tuple[bool, str]:
    """An ``idle_for`` rule (idle spend): the instance idle (console/core/spend.py) that long at a price above
    ``price_above``; an ``AutoStop`` rule: an automatic stop is announced (console/core/autostop.py)."""
    if rule.name == AUTO_STOP and rule.source == AUTO_STOP:
        due = inst.stop_due
        return due is not None, f"stops itself in {fmt_age(max(0.0, due - now))} unless work resumes" if due else ""
    price = inst.instance.price_per_hour
    episode = inst.meter.episode(now)
    if price is None or price <= rule.price_above or inst.meter.mode != "idle" or episode < (rule.idle_for or 0):
        return False, ""
    return True, (f"idle {fmt_age(episode)} at {fmt_money(price, currency)}/h: "
                  f"{fmt_money(money(episode, price), currency)} so far")


def condition(rule: AlertSpec, inst: InstanceState, now: float = 0.0, currency: str = "$"
              ) -> tuple[bool, str, str, str]:
    """(true?, the status it is in, the verdict code, why) for one instance under one rule.

    A host between two reconnect attempts shows "connecting": its last settled status counts, so an
    unreachable host does not resolve and fire again on every retry.
    """
    status, detail = inst.status, inst.status_detail
    if status == "connecting" and inst.settled_status is not None:
        status, detail = inst.settled_status, inst.settled_detail
    diag: dict[str, Any] = dict(inst.diagnosis or {})
    verdict = str((diag.get("verdict") or {}).get("code") or "")
    if rule.idle_for is not None:
        true, why = idle_condition(rule, inst, now, currency)
        return true, status, verdict, why
    if rule.gpu_health:
        hits = alert_hits(inst.gpus.values(), rule.gpu_health, now or time.time())
        return bool(hits), status, verdict, "; ".join(f"GPU {gpu}: {text}" for gpu, _field, text in hits)
    if status in rule.statuses:
        return True, status, verdict, detail
    if verdict and verdict in rule.verdicts:
        return True, status, verdict, inst.verdict_summary() or detail
    return False, status, verdict, detail


def payload(
    rule: AlertSpec, status: str, alerts: list[dict[str, Any]], receiver: str = "fleet-console"
) -> dict[str, Any]:
    """Alertmanager's webhook body (version 4) for one rule's alerts that changed together."""
    common = {k: v for k, v in alerts[0]["labels"].items() if all(a["labels"].get(k) == v for a in alerts)}
    return {
        "version": "4",
        "groupKey": f'{{}}:{{alertname="{rule.name}"}}',
        "truncatedAlerts": 0,
        "status": status,
        "receiver": receiver,
        "groupLabels": {"alertname": rule.name},
        "commonLabels": common,
        "commonAnnotations": {"summary": rule.summary} if rule.summary else {},
        "externalURL": "",
        "alerts": alerts,
    }


def webhook_names(urls: Iterable[str]) -> dict[str, str]:
    """URL -> the name logs and metric labels use: ``scheme://host[:port]``, `` #2`` on a second URL to the same."""
    names: dict[str, str] = {}
    seen: dict[str, int] = {}
    for url in urls:
        if url not in names:
            base = url_origin(url)
            seen[base] = seen.get(base, 0) + 1
            names[url] = base if seen[base] == 1 else f"{base} #{seen[base]}"
    return names


def split_userinfo(url: str) -> tuple[str, str | None]:
    """(the URL without ``user:password@``, its ``Authorization: Basic`` value or None): what curl does with it."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    user = urllib.parse.unquote(parts.username or "")
    password = urllib.parse.unquote(parts.password or "")
    target = urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
    return target, "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


class WebhookSender:
    """One receiver: a queue of bodies posted in order; retried with backoff; never waited on by the console.
    ``name`` (default ``scheme://host[:port]``) is what logs and ``on_failure`` say, never the URL."""

    def __init__(self, url: str, on_failure: Callable[[str], None] | None = None, name: str | None = None) -> None:
        self.url = url
        self.name = name or url_origin(url)
        self.target, self.auth = split_userinfo(url)
        self.queue: deque[tuple[bytes, str]] = deque()
        self.on_failure = on_failure
        self.sent = 0
        self.dropped = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"webhook {self.name}")

    def post(self, body: dict[str, Any], what: str) -> None:
        if len(self.queue) >= MAX_QUEUE:
            self.queue.popleft()
            self.dropped += 1
            log.warning("webhook %s: queue full, dropped the oldest notification", self.name)
        self.queue.append((json.dumps(body, separators=(",", ":")).encode(), what))
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self.queue:
                body, what = self.queue[0]
                delay = BACKOFF_FIRST
                for attempt in range(1, MAX_ATTEMPTS + 1):
                    try:
                        await asyncio.to_thread(_post, self.target, body, self.auth)
                        self.sent += 1
                        break
                    except Exception as exc:  # any failure of the receiver is retried, none reaches the console
                        reason = one_line(exc, 300)  # a receiver's reason phrase is its text, not ours
                        if self.on_failure is not None:
                            self.on_failure(self.name)
                        if attempt == MAX_ATTEMPTS:
                            self.dropped += 1
                            log.error("webhook %s: gave up on %s after %d attempts: %s", self.name, what, attempt,
                                      reason)
                            break
                        log.warning("webhook %s: %s failed (attempt %d): %s; retry in %gs",
                                    self.name, what, attempt, reason, delay)
                        await asyncio.sleep(delay)
                        delay = min(delay * 2, BACKOFF_MAX)
                if self.queue and self.queue[0][0] is body:
                    self.queue.popleft()

    async def close(self, grace: float = 2.0) -> None:
        """Give queued notifications ``grace`` seconds (a resolved alert at shutdown), then stop."""
        await drain_then_cancel(self.queue, self._task, grace)
        self._task = None


class WebhookRedirected(Exception):
    """The receiver answered with a redirect: not followed, a failed post."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any) -> None:
        return None  # urllib then raises the 3xx as an HTTPError, which _post names


NO_REDIRECTS = urllib.request.build_opener(_NoRedirect)  # every outgoing POST of the monitor (alerts, notify)


def redirect_refused(url: str, exc: urllib.error.HTTPError) -> str:
    """What a 3xx answer to a POST to ``url`` says: where it pointed (its origin only), and that it was not followed."""
    where = url_origin(urllib.parse.urljoin(url, exc.headers.get("Location") or "")) or "nowhere"
    return f"redirect to {where} not followed (redirects never are)"


async def drain_then_cancel(queue: Any, task: asyncio.Task[None] | None, grace: float) -> None:
    """Give ``task`` up to ``grace`` seconds to empty ``queue`` (a resolve sent at shutdown), then cancel it."""
    deadline = time.monotonic() + grace
    while queue and time.monotonic() < deadline and task is not None and not task.done():
        await asyncio.sleep(0.05)
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


def _post(url: str, body: bytes, auth: str | None = None) -> None:
    headers = {"Content-Type": "application/json", "User-Agent": "fleet-console"}
    if auth is not None:
        headers["Authorization"] = auth
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with NO_REDIRECTS.open(request, timeout=POST_TIMEOUT) as response:  # http(s) only: the schema checks it
            response.read(65536)
    except urllib.error.HTTPError as exc:
        if not 300 <= exc.code < 400:
            raise
        note = f"HTTP {exc.code} {redirect_refused(url, exc)}"
        exc.close()
        raise WebhookRedirected(note) from None


class AlertEngine:
    """Evaluates the rules against the fleet state; ``evaluate()`` about once a second."""

    def __init__(self, rules: Iterable[AlertSpec], state: FleetState, bell: Callable[[], None] | None = None,
                 count: Callable[[str, tuple[str, ...]], None] | None = None) -> None:
        self.rules = list(rules)
        auto = auto_stop_rule(self.rules)
        if auto is not None and all(r.name != AUTO_STOP for r in self.rules):
            self.rules.append(auto)
        self.state = state
        self.bell = bell
        self.count = count
        self.active: dict[Key, Alert] = {}  # (rule, instance, GPU index of a gpu_health rule or "")
        names = webhook_names(url for rule in self.rules for url in rule.webhooks)
        self.senders: dict[str, WebhookSender] = {url: WebhookSender(url, self._failed, name)
                                                  for url, name in names.items()}

    def _failed(self, name: str) -> None:
        if self.count is not None:
            self.count("fleet_webhook_failures", (name,))

    def start(self) -> None:
        for sender in self.senders.values():
            sender.start()

    async def stop(self) -> None:
        await asyncio.gather(*(s.close() for s in self.senders.values()), return_exceptions=True)

    def firing(self) -> list[Alert]:
        return [a for a in self.active.values() if a.firing]

    def evaluate(self, now: float | None = None) -> None:
        now = self.state.clock() if now is None else now
        out: Out = {}
        ring = False
        for rule in self.rules:
            for inst in self.state.instances.values():
                if rule.gpu_health:
                    ring = self._gpu_rule(rule, inst, now, out) or ring
                    continue
                key = (rule.name, inst.name, "")
                if not matches(rule, inst):
                    self._clear(key, now, out)
                    continue
                true, status, verdict, detail = condition(rule, inst, now, self.state.currency)
                if not true:
                    self._clear(key, now, out)
                    continue
                labels = {"verdict": verdict} if verdict else {}
                if rule.idle_for is not None and inst.instance.price_per_hour is not None:  # idle spend
                    labels["price_per_hour"] = f"{inst.instance.price_per_hour:g}"
                    labels["idle_spend"] = f"{money(inst.meter.episode(now), inst.instance.price_per_hour):.2f}"
                ring = self._true(key, rule, inst, status, labels, detail, now, out) or ring
        for key in [k for k in self.active if k[1] not in self.state.instances]:  # instance left the fleet
            self._clear(key, now, out)
        self._send(out)
        if ring and self.bell is not None:
            self.bell()

    def _gpu_rule(self, rule: AlertSpec, inst: InstanceState, now: float, out: Out) -> bool:
        """A ``gpu_health`` rule: one alert per GPU that shows one of its fields (its own episode, its own
        resolved); True when one began firing."""
        hits: dict[int, list[tuple[str, str]]] = {}
        if matches(rule, inst):
            for gpu, name, text in alert_hits(inst.gpus.values(), rule.gpu_health, now):
                hits.setdefault(gpu, []).append((name, text))
        for key in [k for k in self.active if k[0] == rule.name and k[1] == inst.name]:
            if k_gpu(key) not in hits:
                self._clear(key, now, out)
        status, verdict = condition(rule, inst, now)[1:3]
        ring = False
        for gpu, found in hits.items():
            labels = {"gpu": str(gpu), "gpu_health": ",".join(dict.fromkeys(n for n, _t in found))}
            uuid = (inst.gpus[gpu].static or {}).get("uuid") if gpu in inst.gpus else None
            if uuid:
                labels["uuid"] = str(uuid)
            if verdict:
                labels["verdict"] = verdict
            detail = f"GPU {gpu}: " + ", ".join(t for _n, t in found)
            ring = self._true((rule.name, inst.name, str(gpu)), rule, inst, status, labels, detail, now, out) or ring
        return ring

    def _true(self, key: Key, rule: AlertSpec, inst: InstanceState, status: str, labels: dict[str, str],
              detail: str, now: float, out: Out) -> bool:
        """The rule's condition holds for ``key``: pending, firing once an episode, repeated every ``repeat``;
        True when it began firing now."""
        alert = self.active.get(key)
        if alert is None:
            alert = self.active[key] = Alert(rule, inst.name, pending_since=now, sub=key[2])
        alert.labels = {"alertname": rule.name, "name": inst.name, "host": inst.host, "status": status,
                        "severity": rule.severity, "tags": ",".join(inst.tags), **labels}
        alert.detail = detail
        if not alert.firing and now - alert.pending_since >= rule.for_seconds:
            alert.firing, alert.starts_at, alert.last_sent = True, now, now
            out.setdefault((rule.name, "firing"), []).append(alert.as_json("firing", now))
            return rule.bell
        if (alert.firing and rule.repeat > 0 and rule.idle_for is None  # idle spend: once an episode
                and now - alert.last_sent >= rule.repeat):
            alert.last_sent = now
            out.setdefault((rule.name, "firing"), []).append(alert.as_json("firing", now))
        return False

    def _clear(self, key: Key, now: float, out: Out) -> None:
        alert = self.active.pop(key, None)
        if alert is not None and alert.firing and alert.rule.send_resolved:
            out.setdefault((alert.rule.name, "resolved"), []).append(alert.as_json("resolved", now))

    def _send(self, out: Out) -> None:
        rules = {r.name: r for r in self.rules}
        for (name, status), alerts in out.items():
            rule = rules[name]
            body = payload(rule, status, alerts)
            names = ", ".join(a["labels"]["name"] for a in alerts)
            log.info("alert %s %s: %s", name, status, names)
            if self.count is not None:
                self.count("fleet_alert_notifications", (name, status))
            for url in rule.webhooks:
                self.senders[url].post(body, f"{name} {status} ({names})")
