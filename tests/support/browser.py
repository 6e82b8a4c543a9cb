"""Headless Chromium driven over the Chrome DevTools protocol (a websocket; no browser download).

``async with Browser.launch(tmp_path) as browser: page = await browser.new_page()`` then ``page.goto(url)``,
``page.key("Enter")``, ``page.screenshot(path)``; ``page.ws_text()`` is what the page's own websockets received
(decoded, ANSI stripped): a canvas-drawn terminal shows no text in the DOM, but this is what it drew.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import re
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import websockets

from tests.support.wait import until

ANSI = re.compile(r"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]")
KEYS = {"Enter": 13, "Escape": 27, "Tab": 9}


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class Page:
    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session
        self.frames: list[bytes] = []
        self.responses: dict[str, int] = {}  # url -> HTTP status of the document and other loads

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        return await self.browser.send(method, params, session=self.session)

    def on_event(self, method: str, params: dict[str, Any]) -> None:
        if method == "Network.webSocketFrameReceived":
            response = params["response"]
            data = response.get("payloadData", "")
            self.frames.append(base64.b64decode(data) if response.get("opcode") == 2 else data.encode())
        elif method == "Network.responseReceived":
            self.responses[params["response"]["url"]] = int(params["response"]["status"])

    async def goto(self, url: str) -> None:
        await self.send("Page.navigate", url=url)

    def ws_text(self, start: int = 0) -> str:
        return ANSI.sub("", b"".join(self.frames[start:]).decode("utf-8", "replace"))

    async def key(self, key: str) -> None:
        code = KEYS[key]
        for kind in ("rawKeyDown", "keyUp"):
            await self.send("Input.dispatchKeyEvent", type=kind, key=key, code=key, windowsVirtualKeyCode=code,
                            nativeVirtualKeyCode=code)

    async def focus_terminal(self) -> None:
        await self.send("Runtime.evaluate",
                        expression="document.querySelector('.xterm-helper-textarea')?.focus()")

    async def screenshot(self, path: Path) -> Path:
        shot = await self.send("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


class Browser:
    def __init__(self, proc: subprocess.Popen[bytes], ws: Any) -> None:
        self.proc = proc
        self.ws = ws
        self.ids = itertools.count(1)
        self.waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.pages: dict[str, Page] = {}
        self.reader = asyncio.create_task(self._read())

    @classmethod
    @contextlib.asynccontextmanager
    async def launch(cls, tmp_path: Path, width: int = 1400, height: int = 900) -> AsyncIterator[Browser]:
        exe = chromium()
        assert exe, "no chromium on PATH"
        profile = tmp_path / "chromium-profile"
        profile.mkdir()
        argv = [exe, "--headless", "--remote-debugging-port=0", f"--user-data-dir={profile}",
                f"--window-size={width},{height}", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", "--disable-background-networking", "--disable-dev-shm-usage", "about:blank"]
        if os.geteuid() == 0:
            argv.insert(1, "--no-sandbox")  # Chromium's sandbox refuses root
        log = (tmp_path / "chromium.log").open("wb")
        proc = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        browser = None
        try:
            port_file = profile / "DevToolsActivePort"
            await until(lambda: (port_file.exists() and len(port_file.read_text().split()) >= 2) or proc.poll(),
                        30, "chromium's DevTools port", detail=lambda: (tmp_path / "chromium.log").read_text())
            assert proc.poll() is None, (tmp_path / "chromium.log").read_text()
            port, path = port_file.read_text().split()[:2]
            ws = await websockets.connect(f"ws://127.0.0.1:{port}{path}", max_size=None)
            browser = cls(proc, ws)
            yield browser
        finally:
            if browser is not None:
                browser.reader.cancel()
                with contextlib.suppress(BaseException):
                    await browser.ws.close()
            proc.terminate()
            try:
                await asyncio.to_thread(proc.wait, 10)
            except subprocess.TimeoutExpired:
                proc.kill()
                await asyncio.to_thread(proc.wait)
            log.close()

    async def _read(self) -> None:
        async for raw in self.ws:
            message = json.loads(raw)
            if "id" in message:
                future = self.waiting.pop(message["id"], None)
                if future is not None and not future.done():
                    if "error" in message:
                        future.set_exception(RuntimeError(str(message["error"])))
                    else:
                        future.set_result(message.get("result", {}))
            elif message.get("sessionId") in self.pages:
                self.pages[message["sessionId"]].on_event(message["method"], message.get("params", {}))

    async def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None
                   ) -> dict[str, Any]:
        ident = next(self.ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiting[ident] = future
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        await self.ws.send(json.dumps(message))
        return await asyncio.wait_for(future, 30)

    async def new_page(self) -> Page:
        """A tab in its own browser context (no cookies shared with other pages)."""
        context = (await self.send("Target.createBrowserContext"))["browserContextId"]
        target = (await self.send("Target.createTarget", {"url": "about:blank", "browserContextId": context}))
        session = (await self.send("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}))
        page = self.pages[session["sessionId"]] = Page(self, session["sessionId"])
        for domain in ("Page", "Network", "Runtime"):
            await page.send(f"{domain}.enable")
        return page
