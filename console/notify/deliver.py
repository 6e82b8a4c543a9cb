"""Delivery to one sink: a bounded queue worked by its own task, so a sink that is slow or down never holds up
another sink, the links or the UI. HTTP posts and SMTP run in threads with a timeout; a 429 or 5xx (or no
answer) is retried with backoff (1 s doubling to 5 min, or the ``Retry-After`` the sink asked for), a message
older than ``MAX_AGE`` is given up. Another 4xx is the sink refusing the message (a wrong token): logged, not
retried. A sink that stays down is logged once, and once more when it answers again.

As ``[[alert]]``'s webhooks: redirects are never followed, ``user:password@`` is sent as basic auth, and no
log line holds a URL or a secret (the sink's name, and ``redact`` over any text a sink or library wrote).
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import smtplib
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from email.message import EmailMessage

from console.core.text_safety import one_line
from console.inventory.secrets import redact
from console.monitor.alerts import NO_REDIRECTS, drain_then_cancel, redirect_refused, split_userinfo
from console.notify.message import Message
from console.notify.sinks import RENDER, Request, Sink
from console.notify.sinks import email as render_email

log = logging.getLogger("fleet_console.notify")

TIMEOUT = 10.0
BACKOFF_FIRST = 1.0
BACKOFF_MAX = 300.0
RETRY_AFTER_MAX = 3600.0
MAX_AGE = 6 * 3600.0  # a message this old is no news any more
MAX_QUEUE = 50


@dataclass
class Answer:
    """What the sink said: ``ok``, whether a retry may help, its status and text (redacted, one line)."""

    ok: bool
    status: str
    text: str = ""
    retry: bool = False
    retry_after: float | None = None

    def line(self) -> str:
        return f"{self.status} {self.text}".strip()


def retry_after(value: str | None) -> float | None:
    """``Retry-After``: seconds, or an HTTP date (None: not given or not understood)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), RETRY_AFTER_MAX)
    with contextlib.suppress(TypeError, ValueError):
        when = email.utils.parsedate_to_datetime(value)
        return min(max(0.0, when.timestamp() - time.time()), RETRY_AFTER_MAX)
    return None


def post(request: Request, timeout: float = TIMEOUT) -> Answer:
    """One POST (JSON), never following a redirect; the answer, never an exception."""
    target, auth = split_userinfo(request.url)
    headers = {"Content-Type": "application/json", "User-Agent": "fleet-console", **request.headers}
    if auth is not None:
        headers["Authorization"] = auth
    req = urllib.request.Request(target, data=request.body, method="POST", headers=headers)
    try:
        with NO_REDIRECTS.open(req, timeout=timeout) as response:
            text = response.read(2048).decode("utf-8", "replace")
            return Answer(True, f"HTTP {response.status}", redact(one_line(text, 300)))
    except urllib.error.HTTPError as exc:
        text = ""
        with contextlib.suppress(Exception):
            text = exc.read(2048).decode("utf-8", "replace")
        code = exc.code
        after = retry_after(exc.headers.get("Retry-After")) if exc.headers else None
        if 300 <= code < 400:
            text = redirect_refused(target, exc)
        exc.close()
        return Answer(False, f"HTTP {code}", redact(one_line(text, 300)), retry=code == 429 or code >= 500,
                      retry_after=after)
    except Exception as exc:  # no answer: refused, timed out, TLS, DNS
        reason = getattr(exc, "reason", None) or exc
        return Answer(False, "no answer", redact(one_line(reason, 300)), retry=True)


def send_mail(sink: Sink, mail: EmailMessage, timeout: float = TIMEOUT) -> Answer:
    """One email over SMTP (STARTTLS unless ``starttls = false``; login when ``user`` is given)."""
    spec = sink.spec
    try:
        with smtplib.SMTP(spec.host, spec.port, timeout=timeout) as smtp:
            if spec.starttls:
                smtp.starttls(context=ssl.create_default_context())
            if spec.user:
                smtp.login(spec.user, sink.password)
            refused = smtp.send_message(mail)
            code = smtp.noop()[0]
            if refused:
                return Answer(False, "refused", redact(one_line(", ".join(refused), 300)))
            return Answer(True, f"SMTP {code}", "accepted for " + ", ".join(spec.to))
    except smtplib.SMTPResponseException as exc:
        text = exc.smtp_error.decode("utf-8", "replace") if isinstance(exc.smtp_error, bytes) else str(exc.smtp_error)
        return Answer(False, f"SMTP {exc.smtp_code}", redact(one_line(text, 300)), retry=exc.smtp_code >= 400
                      and exc.smtp_code < 500)
    except Exception as exc:
        return Answer(False, "no answer", redact(one_line(exc, 300)), retry=True)


def send_once(sink: Sink, message: Message, timeout: float = TIMEOUT) -> Answer:
    """Render and send ``message`` once (blocking: a thread's work, or ``notify test``)."""
    if sink.spec.type == "email":
        return send_mail(sink, render_email(sink, message), timeout)
    return post(RENDER[sink.spec.type](sink, message), timeout)


class Outbox:
    """One sink's queue and task. ``count(metric, labels)`` gets ``fleet_notify_sent``/``_failures``."""

    def __init__(self, sink: Sink, count: Callable[[str, tuple[str, ...]], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.sink = sink
        self.count = count
        self.clock = clock
        self.queue: deque[tuple[float, Message]] = deque()
        self.sent = 0
        self.dropped = 0
        self.failures = 0
        self.down_since: float | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return self.sink.name

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"notify {self.name}")

    def put(self, message: Message) -> None:
        if len(self.queue) >= MAX_QUEUE:
            self.queue.popleft()
            self.dropped += 1
            log.warning("notify %s: queue full (%d), dropped the oldest message", self.name, MAX_QUEUE)
        self.queue.append((self.clock(), message))
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            delay = BACKOFF_FIRST
            while self.queue:
                queued, message = self.queue[0]
                answer = await asyncio.to_thread(send_once, self.sink, message)
                if answer.ok:
                    self._delivered(message)
                    delay = BACKOFF_FIRST
                    self.queue.popleft()
                    continue
                self._failed(answer)
                if not answer.retry or self.clock() - queued > MAX_AGE:
                    log.error("notify %s: gave up on %r: %s", self.name, message.title()[:80], answer.line())
                    self.dropped += 1
                    self.queue.popleft()
                    continue
                wait = answer.retry_after if answer.retry_after is not None else delay
                delay = min(delay * 2, BACKOFF_MAX)
                await asyncio.sleep(wait)

    def _delivered(self, message: Message) -> None:
        self.sent += 1
        if self.count is not None:
            self.count("fleet_notify_sent", (self.name,))
        if self.down_since is not None:
            log.info("notify %s: delivering again (down %.0fs)", self.name, self.clock() - self.down_since)
            self.down_since = None
        log.info("notify %s: sent %r", self.name, message.title()[:120])

    def _failed(self, answer: Answer) -> None:
        self.failures += 1
        if self.count is not None:
            self.count("fleet_notify_failures", (self.name,))
        if self.down_since is None:
            self.down_since = self.clock()
            more = "; retrying with backoff (logged again when it answers)" if answer.retry else ""
            log.warning("notify %s: %s%s", self.name, answer.line(), more)
        else:
            log.debug("notify %s: still failing: %s", self.name, answer.line())

    async def close(self, grace: float = 2.0) -> None:
        """Give queued messages ``grace`` seconds (a resolve at shutdown), then stop."""
        await drain_then_cancel(self.queue, self._task, grace)
        self._task = None
