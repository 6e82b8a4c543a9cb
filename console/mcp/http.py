"""MCP over streamable HTTP on a running controller: ``fleet-console mcp --http`` and ``serve --mcp``."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from console.web.auth import AsgiAuth, HttpSecurity, Policy


def parse_http(value: str, any_port: bool = False) -> tuple[str, int]:
    """``PORT`` or ``HOST:PORT`` (``[v6]:PORT``); the host defaults to 127.0.0.1; ``any_port``: 0 is a free one."""
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = "", value
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not (0 if any_port else 1) <= int(port) < 65536:
        raise ValueError(f"--http wants HOST:PORT or PORT, not {value!r}")
    return host, int(port)


def with_healthz(app: Any) -> Any:
    """``app`` with ``GET /healthz`` answering 200 (open: the rules in front let it through without a token)."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope.get("path") == "/healthz":
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/plain"), (b"content-length", b"3")]})
            await send({"type": "http.response.body", "body": b"ok\n"})
            return
        await app(scope, receive, send)

    return wrapped


def url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


async def serve_http_until(controller: Any, options: Any, host: str, port: int, stop: asyncio.Event,
                           security: HttpSecurity | None = None) -> None:
    """Serve MCP over streamable HTTP on ``controller`` (its links and state, not a second set) until ``stop``.

    Every request passes ``security``'s rules first (console/web/auth.py: the token, the Host/Origin allowlist on
    every bind address; the SDK's own check, on loopback only, is replaced by it), over TLS when it has a context.
    For ``fleet-console serve --mcp``: the service owns the signals, so uvicorn is kept from taking them.
    """
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    from console.mcp.server import build_server

    class _Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Any:  # the service's own handlers set ``stop``
            yield

    if security is None:
        security = HttpSecurity(Policy.build(None, host), None)
    app = build_server(controller, options).streamable_http_app(
        host=host, transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    context = security.ssl
    guarded = AsgiAuth(with_healthz(app), security.policy)
    server = _Server(uvicorn.Config(guarded, host=host, port=port, log_level="warning", lifespan="on",
                                    ssl_context_factory=(lambda _c, _d: context) if context is not None else None))
    task = asyncio.create_task(server.serve())
    stopped = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        server.should_exit = True
        stopped.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    if task.done() and task.exception() is not None:
        raise OSError(f"MCP on {url_host(host)}:{port}: {task.exception()}")
