"""The HTTP rules every endpoint shares (the web console, MCP over HTTP, ``/metrics``), in one place.

- A token from ``--token-file PATH`` or ``$FLEET_CONSOLE_TOKEN`` (never a command-line value), sent as
  ``Authorization: Bearer TOKEN``; the web page also takes ``?token=TOKEN`` once and answers with a redirect that
  sets a session cookie (an HMAC of the token: a new token ends every session). ``/healthz`` needs none.
- A Host/Origin allowlist on every bind address (DNS-rebinding protection): ``localhost``, IP literals (a rebinding
  attack needs a DNS name), this machine's names, the bind name and ``--allow-host`` names.
- No token and a non-loopback bind: refused unless ``--insecure-no-auth``; a loopback bind without one stays open.

``Policy.decide`` is the rule; ``aiohttp_middleware`` and ``AsgiAuth`` apply it to aiohttp and to Starlette/ASGI.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import ipaddress
import os
import socket
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

TOKEN_ENV = "FLEET_CONSOLE_TOKEN"
COOKIE = "fleet_console_session"
MIN_TOKEN = 16  # characters; `openssl rand -hex 32` gives 64
OPEN_PATHS = frozenset({"/healthz"})


class AuthConfigError(ValueError):
    """A bad token file, TLS pair or bind: one line for the user."""


def load_token(token_file: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The token from ``token_file`` (first), else ``$FLEET_CONSOLE_TOKEN``; None when neither is set."""
    env = os.environ if environ is None else environ
    if token_file:
        path = Path(token_file).expanduser()
        try:
            token = path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise AuthConfigError(f"--token-file {path}: cannot read it ({exc.__class__.__name__})") from None
        where = f"--token-file {path}"
    else:
        token = env.get(TOKEN_ENV, "").strip()
        if not token:
            return None
        where = f"${TOKEN_ENV}"
    if len(token) < MIN_TOKEN or any(c.isspace() or not c.isprintable() for c in token):
        raise AuthConfigError(f"{where}: the token must be one line of at least {MIN_TOKEN} printable characters "
                              "without spaces (e.g. `openssl rand -hex 32`)")
    return token


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def host_name(value: str) -> str:
    """The name in a ``Host`` header or URL netloc, without port or brackets, lower case."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value[1:]
    if value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value.rstrip(".")


def machine_names() -> set[str]:
    names = {"localhost"}
    with contextlib.suppress(OSError):
        names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
    return {n for n in names if n}


@dataclass(frozen=True)
class Decision:
    """What to answer: ``status`` 0 lets the request through; else the status, its one-line reason, and for a
    ``?token=`` login the ``location`` to redirect to with the session cookie."""

    status: int = 0
    reason: str = ""
    location: str | None = None
    cookie: str | None = None


@dataclass(frozen=True)
class Policy:
    token: str | None = None
    allowed_hosts: frozenset[str] = field(default_factory=frozenset)
    tls: bool = False
    login_paths: frozenset[str] = frozenset()  # where ?token= logs in (the web page)

    @classmethod
    def build(cls, token: str | None, bind_host: str, allow_hosts: tuple[str, ...] = (), tls: bool = False,
              login_paths: frozenset[str] = frozenset()) -> Policy:
        names = machine_names() | {host_name(h) for h in allow_hosts if h.strip()}
        if bind_host and not _is_ip(bind_host.strip("[]")):
            names.add(host_name(bind_host))
        return cls(token, frozenset(names), tls, login_paths)

    def host_allowed(self, host: str | None) -> bool:
        if not host:
            return False
        name = host_name(host)
        return _is_ip(name) or name in self.allowed_hosts

    def origin_allowed(self, origin: str | None) -> bool:
        """No Origin (curl, Prometheus, the MCP SDK) is fine; a browser's must name an allowed host."""
        if origin is None:
            return True
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and self.host_allowed(parts.netloc)

    def session_value(self) -> str:
        assert self.token is not None
        return hmac.new(self.token.encode(), b"fleet-console web session", hashlib.sha256).hexdigest()

    def _token_matches(self, given: str) -> bool:
        assert self.token is not None
        return hmac.compare_digest(given.encode(), self.token.encode())

    def decide(self, path: str, headers: Mapping[str, str], query: str = "") -> Decision:
        """The rule for one request; ``headers`` with lower-case names."""
        if not self.host_allowed(headers.get("host")):
            return Decision(403, "host not allowed (add it with --allow-host)")
        if not self.origin_allowed(headers.get("origin")):
            return Decision(403, "origin not allowed")
        if self.token is None or path in OPEN_PATHS:
            return Decision()
        scheme, _, credentials = headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and self._token_matches(credentials.strip()):
            return Decision()
        cookie = SimpleCookie()
        with contextlib.suppress(Exception):
            cookie.load(headers.get("cookie", ""))
        if COOKIE in cookie and hmac.compare_digest(cookie[COOKIE].value, self.session_value()):
            return Decision()
        if path in self.login_paths and query:
            pairs = parse_qsl(query, keep_blank_values=True)
            given = [v for k, v in pairs if k == "token"]
            if given and self._token_matches(given[0]):
                rest = urlencode([(k, v) for k, v in pairs if k != "token"])
                return Decision(303, "logged in", location=path + ("?" + rest if rest else ""),
                                cookie=self.set_cookie())
        return Decision(401, "a token is needed: Authorization: Bearer TOKEN" +
                        (" or ?token=TOKEN" if path in self.login_paths else ""))

    def set_cookie(self) -> str:
        secure = "; Secure" if self.tls else ""
        return f"{COOKIE}={self.session_value()}; Path=/; HttpOnly; SameSite=Strict{secure}"


def check_bind(host: str, token: str | None, insecure: bool, what: str) -> str | None:
    """Why ``what`` (the listener's name) must not start on ``host`` (a non-loopback bind with no token), or None."""
    if token is None and not insecure and not is_loopback(host):
        return (f"refusing to serve {what} on {host} without a token: set ${TOKEN_ENV} or --token-file PATH "
                "(or pass --insecure-no-auth)")
    return None


def tls_context(cert: str | None, key: str | None) -> ssl.SSLContext | None:
    """The server's TLS context from ``--tls-cert``/``--tls-key`` (both or neither)."""
    if not cert and not key:
        return None
    if not (cert and key):
        raise AuthConfigError("--tls-cert and --tls-key go together")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(str(Path(cert).expanduser()), str(Path(key).expanduser()))
    except (OSError, ssl.SSLError) as exc:
        raise AuthConfigError(f"--tls-cert {cert} / --tls-key {key}: {exc}") from None
    return context


@dataclass(frozen=True)
class HttpSecurity:
    """What one listener needs: the policy and the TLS context (None: plain HTTP)."""

    policy: Policy
    ssl: ssl.SSLContext | None

    @property
    def scheme(self) -> str:
        return "https" if self.ssl is not None else "http"

    def describe(self) -> str:
        """For the line a listener logs when it starts: open or token, TLS or not."""
        auth = "token required" if self.policy.token else "OPEN: no token configured (loopback only)"
        return f"{auth}; {'TLS' if self.ssl else 'plain HTTP'}"


def security_from_args(args: Any, bind_host: str, what: str,
                       login_paths: frozenset[str] = frozenset()) -> HttpSecurity:
    """The listener's rules from the shared options (``--token-file``, ``--allow-host``, ``--tls-*``,
    ``--insecure-no-auth``); AuthConfigError with one line when they do not hold."""
    token = load_token(getattr(args, "token_file", None))
    refused = check_bind(bind_host, token, bool(getattr(args, "insecure_no_auth", False)), what)
    if refused:
        raise AuthConfigError(refused)
    context = tls_context(getattr(args, "tls_cert", None), getattr(args, "tls_key", None))
    policy = Policy.build(token, bind_host, tuple(getattr(args, "allow_host", None) or ()), context is not None,
                          login_paths)
    return HttpSecurity(policy, context)


# -- the rule applied ---------------------------------------------------------------------------------------------


def aiohttp_middleware(policy: Policy) -> Any:
    """An aiohttp middleware applying ``policy`` to every request (the websocket's upgrade included)."""
    from aiohttp import web

    @web.middleware
    async def auth(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                   ) -> web.StreamResponse:
        headers = {k.lower(): v for k, v in request.headers.items()}
        decision = policy.decide(request.path, headers, request.query_string)
        if decision.status == 0:
            return await handler(request)
        if decision.location is not None:
            response = web.Response(status=decision.status, headers={"Location": decision.location})
            response.headers["Set-Cookie"] = decision.cookie or ""
            return response
        extra = {"WWW-Authenticate": 'Bearer realm="fleet-console"'} if decision.status == 401 else {}
        return web.Response(status=decision.status, text=decision.reason + "\n", headers=extra)

    return auth


class AsgiAuth:
    """The same rule as ASGI middleware (MCP's Starlette app); lifespan passes through."""

    def __init__(self, app: Any, policy: Policy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        decision = self.policy.decide(scope.get("path", ""), headers, scope.get("query_string", b"").decode())
        if decision.status == 0:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = (decision.reason + "\n").encode()
        out = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
        if decision.status == 401:
            out.append((b"www-authenticate", b'Bearer realm="fleet-console"'))
        await send({"type": "http.response.start", "status": decision.status, "headers": out})
        await send({"type": "http.response.body", "body": body})
