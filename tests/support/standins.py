"""Local stand-ins for notification sinks: one HTTP server on 127.0.0.1 that keeps every POST (path, headers,
JSON body) and answers from a script per path, and an SMTP server (aiosmtpd) that keeps every message."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiosmtpd.controller import Controller

from tests.support.sshd import free_port


@dataclass
class Post:
    path: str
    headers: dict[str, str]
    body: Any
    at: float


@dataclass
class HttpStandIn:
    """``answers[path]``: a list of (status, headers) used up one per POST, then 200. ``echo_auth``: the 200's
    body repeats the Authorization header (a sink that echoes a token: the console must not print it)."""

    answers: dict[str, list[tuple[int, dict[str, str]]]] = field(default_factory=dict)
    posts: list[Post] = field(default_factory=list)
    attempts: list[tuple[str, float]] = field(default_factory=list)
    echo_auth: bool = False

    def start(self) -> None:
        import time

        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                now = time.monotonic()
                outer.attempts.append((self.path, now))
                script = outer.answers.get(self.path) or []
                if script:
                    status, headers = script.pop(0)
                    self.send_response(status)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    return
                outer.posts.append(Post(self.path, dict(self.headers.items()), json.loads(data), now))
                reply = json.dumps({"ok": True, "auth": self.headers.get("Authorization") if outer.echo_auth
                                    else None}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def at(self, path: str) -> list[Post]:
        return [p for p in self.posts if p.path == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Keep:
    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(message_from_bytes(envelope.content))
        return "250 Message accepted for delivery"


class SmtpStandIn:
    def __init__(self) -> None:
        self.handler = _Keep()
        self.port = free_port()
        self.controller = Controller(self.handler, hostname="127.0.0.1", port=self.port)

    @property
    def messages(self) -> list[Message]:
        return self.handler.messages

    def start(self) -> None:
        self.controller.start()

    def close(self) -> None:
        self.controller.stop()


def standins() -> Iterator[tuple[HttpStandIn, SmtpStandIn]]:
    """Both stand-ins started, stopped at the end (wrap in a fixture)."""
    http, smtp = HttpStandIn(), SmtpStandIn()
    http.start()
    smtp.start()
    try:
        yield http, smtp
    finally:
        http.close()
        smtp.close()


def sink_rows(http: HttpStandIn, smtp: SmtpStandIn, extra: str = "", telegram_token: str = "123:abc",
              ntfy_token: str = "") -> str:
    """``[[notify]]`` rows for every sink type, pointing at the stand-ins (``extra`` goes into each)."""
    token = f'token = "{ntfy_token}"\n' if ntfy_token else ""
    return (f'[[notify]]\ntype = "ntfy"\nurl = "{http.base}/ntfy"\ntopic = "gpus"\n{token}{extra}\n'
            f'[[notify]]\ntype = "slack"\nurl = "{http.base}/slack"\n{extra}\n'
            f'[[notify]]\ntype = "discord"\nurl = "{http.base}/discord"\n{extra}\n'
            f'[[notify]]\ntype = "telegram"\nurl = "{http.base}/tg"\ntoken = "{telegram_token}"\nchat_id = "42"\n'
            f'{extra}\n'
            f'[[notify]]\ntype = "webhook"\nurl = "{http.base}/hook"\n{extra}\n'
            f'[[notify]]\ntype = "email"\nhost = "127.0.0.1"\nport = {smtp.port}\nstarttls = false\n'
            f'from = "fleet@example.org"\nto = ["ops@example.org"]\n{extra}\n')
