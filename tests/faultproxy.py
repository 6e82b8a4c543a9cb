"""A fault-injecting TCP proxy on 127.0.0.1 (asyncio): forwards to a real sshd, and can lose connections.

``forget()`` drops the console's side of every connection and keeps the host's side open and silent, as a
NAT or port forwarder that forgot the connection: the host never learns that the console went away.
``cut()`` closes both sides. ``blackhole = True`` accepts and never answers (a dead host).
"""

from __future__ import annotations

import asyncio
import contextlib

from tests.support.sshd import free_port


class FaultProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.blackhole = False
        self.accepted = 0
        self._pairs: list[tuple[asyncio.StreamWriter, asyncio.StreamWriter | None]] = []
        self._forgotten: list[asyncio.StreamWriter] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self.cut()
        for w in self._forgotten:
            w.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def cut(self) -> None:
        for client, upstream in self._pairs:
            client.close()
            if upstream is not None:
                upstream.close()
        self._pairs.clear()

    def forget(self) -> None:
        for client, upstream in self._pairs:
            client.transport.abort()
            if upstream is not None:
                upstream.transport.pause_reading()  # the host's side stays open, unread and unanswered
                self._forgotten.append(upstream)
        self._pairs.clear()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.blackhole:
            self._pairs.append((writer, None))
            with contextlib.suppress(Exception):
                await reader.read()  # never answer
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        pair = (writer, up_writer)
        self._pairs.append(pair)
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pump(src, dst, pair))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter,
                    pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter | None]) -> None:
        with contextlib.suppress(Exception):
            while data := await src.read(65536):
                if pair not in self._pairs:
                    return  # forgotten or cut: nothing more goes through
                dst.write(data)
                await dst.drain()
        if pair in self._pairs:
            dst.close()
