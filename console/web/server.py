"""The web console's HTTP side: textual-serve's aiohttp server with the shared rules (console/web/auth.py) on
every route, ``/healthz``, websocket URLs taken from the request (right behind a proxy or on 0.0.0.0), a cap on
sessions, and every session's app process ended when the server stops.

Each browser session is one websocket and one app process (``command``), as textual-serve runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import aiohttp_jinja2
from aiohttp import web
from textual_serve.app_service import AppService
from textual_serve.server import Server, to_int

from console.web.auth import HttpSecurity, aiohttp_middleware

log = logging.getLogger("fleet_console")
QUIT_GRACE = 10.0  # seconds a session's app has to quit (its links closing) before it is killed


class ConsoleServer(Server):
    """``ConsoleServer(command, security, host, port)``; ``await run(stop)`` serves until ``stop`` is set."""

    def __init__(self, command: str, security: HttpSecurity, host: str, port: int, title: str = "fleet-console",
                 max_sessions: int = 8) -> None:
        super().__init__(command, host=host, port=port, title=title)
        self.security = security
        self.max_sessions = max_sessions
        self.sessions: set[web.WebSocketResponse] = set()
        self.services: set[AppService] = set()
        self.bound_port = port
        self.started = asyncio.Event()  # set once listening (``bound_port`` is the real one then)

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        app.middlewares.append(aiohttp_middleware(self.security.policy))
        app.router.add_get("/healthz", self.handle_healthz)
        return app

    async def on_startup(self, app: web.Application) -> None:
        """(textual-serve prints a logo here; the command prints its one line instead)"""

    async def on_shutdown(self, app: web.Application) -> None:
        for socket in list(self.sessions):
            with contextlib.suppress(Exception):
                await socket.close(code=1001, message=b"server stopping")

    async def handle_healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    @aiohttp_jinja2.template("app_index.html")
    async def handle_index(self, request: web.Request) -> dict[str, Any]:
        """The page, its websocket and static URLs on the host and scheme the browser used."""
        https = request.secure or request.headers.get("X-Forwarded-Proto", "").lower() == "https"
        base = f"{'https' if https else 'http'}://{request.host}"
        return {
            "font_size": to_int(request.query.get("fontsize", "16"), 16),
            "app_websocket_url": f"{'wss' if https else 'ws'}://{request.host}/ws",
            "config": {"static": {"url": f"{base}/static/"}},
            "application": {"name": self.title},
        }

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        """One browser session: its app process, fed the browser's keys and resizes, until either side ends."""
        if len(self.sessions) >= self.max_sessions:
            raise web.HTTPServiceUnavailable(text=f"already {self.max_sessions} sessions (--max-sessions)\n")
        websocket = web.WebSocketResponse(heartbeat=15)
        await websocket.prepare(request)
        self.sessions.add(websocket)

        async def close() -> None:
            await websocket.close()

        service = AppService(self.command, write_bytes=websocket.send_bytes, write_str=websocket.send_str,
                             close=close, download_manager=self.download_manager)
        self.services.add(service)
        try:
            await service.start(to_int(request.query.get("width", "80"), 80),
                                to_int(request.query.get("height", "24"), 24))
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await self._process_messages(websocket, service)
        except Exception as exc:  # a session's trouble is that session's, not the server's
            log.warning("web session ended: %s", exc)
        finally:
            self.sessions.discard(websocket)
            await _stop_service(service)
            self.services.discard(service)
            with contextlib.suppress(Exception):
                await websocket.close()
        return websocket

    async def run(self, stop: asyncio.Event) -> None:
        """Listen (the port is ``bound_port`` once this has started), serve until ``stop``, then end every session."""
        runner = web.AppRunner(await self._make_app(), handle_signals=False, access_log=None,
                               shutdown_timeout=QUIT_GRACE)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self.port, ssl_context=self.security.ssl)
            await site.start()
            server = getattr(site, "_server", None)
            sockets = getattr(server, "sockets", None) or []
            if sockets:
                self.bound_port = int(sockets[0].getsockname()[1])
            self.started.set()
            await stop.wait()
        finally:
            await runner.cleanup()
            await asyncio.gather(*(_stop_service(s) for s in list(self.services)), return_exceptions=True)


async def _stop_service(service: AppService) -> None:
    """Ask the session's app to quit; kill it when it has not after ``QUIT_GRACE`` seconds."""
    process = getattr(service, "_process", None)
    try:
        await asyncio.wait_for(service.stop(), QUIT_GRACE)
    except (TimeoutError, Exception):
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
    if process is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(process.wait(), QUIT_GRACE)
