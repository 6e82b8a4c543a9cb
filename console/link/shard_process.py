"""A link worker process: runs the SSH links of the instances the console hands it, off the UI's thread.

Started by ``console.link.shards.ShardPool`` as ``python -m console.link.shard_process``. It speaks one
message format both ways on its stdin/stdout: a 4-byte big-endian length, then a pickle (parent and child are
the same program, so pickle is the natural data format; nothing from a host is unpickled: host data arrives
as JSON lines and is decoded and validated by the link here, as in the console process).

In (console -> worker): ``("add", Instance)``, ``("remove", request_id, name)``, ``("retry", name)``,
``("forget_offer", name)``, ``("request", request_id, name, op, args, timeout)``,
``("command", request_id, name, command, timeout)``, ``("view", names)`` (the instances the operator sees:
their frames go out as they come), ``("tap", on)`` (a recording wants every frame), ``("stop",)``.

Out (worker -> console), in batches (a list of events per message, one message per ``FLUSH_EVERY`` at most
while frames flow, at once for a status change or a reply): ``("frame", name, frame)``,
``("status", name, status, detail, offer, retry_at)`` (``offer``: ``OfferData`` of an unknown host key, or
None; ``retry_at``: the link's ``next_retry_at``) and
``("reply", request_id, ok, value)`` (``value``: the result, or the exception to raise) and, while tapped,
``("rec", name, json)`` (every frame as the link decoded it, JSON bytes, for the recording).

Backpressure: frames of an instance out of view are held and merged (``console/link/coalesce.py``: the newest
GPU and process state, log lines merged and capped) and delivered together every ``HOLD_EVERY`` seconds, one
paint of a large fleet; while the console has not read ``HIGH_WATER`` bytes already written, every instance's
frames are held, so what waits for the console is bounded whatever the hosts send.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pickle
import signal
import struct
import sys
from typing import Any

from console.link.base import AgentLink, LinkError
from console.link.coalesce import Coalescer
from console.link.hostkeys import HostKeyOffer

FLUSH_EVERY = 0.05  # seconds: frames wait at most this long, so one message carries many hosts' frames
HOLD_EVERY = 1.0  # seconds: held frames of instances out of view go out this often (a large fleet's paint)
HIGH_WATER = 1024 * 1024  # bytes written and not yet read by the console: past this, every instance is held
HEADER = struct.Struct(">I")
MAX_MESSAGE = 256 * 1024 * 1024

OfferData = tuple[str, int, bytes, str, list[bytes]]  # host, port, key (OpenSSH public), known_hosts, listed keys


def offer_data(offer: HostKeyOffer | None) -> OfferData | None:
    """A host key offer as plain data (asyncssh's key objects do not pickle)."""
    if offer is None:
        return None
    return (offer.host, offer.port, offer.key.export_public_key(), str(offer.known_hosts),
            [k.export_public_key() for k in offer.listed])


def pack(message: Any) -> bytes:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return HEADER.pack(len(body)) + body


async def read_message(reader: asyncio.StreamReader) -> Any:
    """The next message; EOFError (``asyncio.IncompleteReadError``) when the other side closed."""
    (size,) = HEADER.unpack(await reader.readexactly(HEADER.size))
    if size > MAX_MESSAGE:
        raise ValueError(f"message of {size} bytes")
    return pickle.loads(await reader.readexactly(size))


def portable_error(exc: BaseException) -> BaseException:
    """``exc`` if it survives a pickle round trip, else a LinkError with its text."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:
        return LinkError(str(exc) or type(exc).__name__)


class Worker:
    """The links of this process and the batch of events on its way to the console."""

    def __init__(self, out: asyncio.WriteTransport) -> None:
        self.out = out
        self.links: dict[str, AgentLink] = {}
        self.outbox: list[tuple[Any, ...]] = []
        self._flush_at: asyncio.Handle | None = None
        self._release_at: asyncio.Handle | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        self.view: frozenset[str] = frozenset()  # instances the operator sees: every frame, as it comes
        self.tap = False  # a recording: every frame also as JSON ("rec")
        self.held = Coalescer()
        self.delivered = 0  # frames sent to the console
        self.shown: set[str] = set()  # instances whose session's first GPU frame went out

    # -- out -----------------------------------------------------------------------------------------
    def _emit(self, event: tuple[Any, ...], urgent: bool) -> None:
        self.outbox.append(event)
        if urgent:
            self._flush_soon()
        elif self._flush_at is None:
            self._flush_at = asyncio.get_running_loop().call_later(FLUSH_EVERY, self.flush)

    def _flush_soon(self) -> None:
        if self._flush_at is not None:
            self._flush_at.cancel()
        self._flush_at = asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self._flush_at = None
        if self.outbox:
            batch, self.outbox = self.outbox, []
            self.out.write(pack(batch))

    @property
    def behind(self) -> bool:
        """The console has not read what was written already: hold every instance's frames."""
        return self.out.get_write_buffer_size() > HIGH_WATER

    def on_frame(self, name: str, frame: dict[str, Any]) -> None:
        if self.tap:
            data = json.dumps(frame, separators=(",", ":"), default=str).encode()
            self._emit(("rec", name, data), urgent=False)
        if (name in self.view or name not in self.shown) and not self.behind:
            if frame.get("type") == "gpu":
                self.shown.add(name)  # a session's first GPU frame goes at once: the header counts its GPUs
            self._deliver(name, frame)
        elif self.held.holds(frame):
            self.held.add(name, frame)
            if self._release_at is None:
                self._release_at = asyncio.get_running_loop().call_later(HOLD_EVERY, self.release)
        else:  # (an xid, a result): what the instance has held first, so its frames keep their order
            self._deliver(name, frame)

    def _deliver(self, name: str, frame: dict[str, Any]) -> None:
        for earlier in self.held.take(name):
            self._emit(("frame", name, earlier), urgent=False)
            self.delivered += 1
        self._emit(("frame", name, frame), urgent=False)
        self.delivered += 1

    def release(self) -> None:
        """The held frames go out (later while the console is behind)."""
        self._release_at = None
        if not len(self.held):
            return
        if self.behind:
            self._release_at = asyncio.get_running_loop().call_later(FLUSH_EVERY, self.release)
            return
        for name, frame in self.held.take_all():
            self.outbox.append(("frame", name, frame))
            self.delivered += 1
        self.flush()

    def set_view(self, names: frozenset[str]) -> None:
        """The instances in view now; one that came into view gets what it had held at once."""
        came = [n for n in names - self.view if n in self.held.held]
        self.view = names
        for name in came:
            for frame in self.held.take(name):
                self.outbox.append(("frame", name, frame))
                self.delivered += 1
        if came:
            self._flush_soon()

    def on_status(self, name: str, status: str, detail: str) -> None:
        self.shown.discard(name)
        link = self.links.get(name)
        offer = offer_data(getattr(link, "host_key_offer", None))
        retry_at = getattr(link, "next_retry_at", None)
        self._emit(("status", name, status, detail, offer, retry_at), urgent=True)

    def reply(self, request_id: int, ok: bool, value: Any) -> None:
        if not ok:
            value = portable_error(value)
        self._emit(("reply", request_id, ok, value), urgent=True)

    # -- in ------------------------------------------------------------------------------------------
    def handle(self, message: tuple[Any, ...]) -> bool:
        """Carry out one message; False for ``stop``."""
        kind = message[0]
        if kind == "stop":
            return False
        if kind == "add":
            from console.link import make_link

            inst = message[1]
            link = make_link(inst, self.on_frame, self.on_status)
            self.links[inst.name] = link
            link.start()
        elif kind == "retry":
            if (known := self.links.get(message[1])) is not None:
                known.retry_now()
        elif kind == "view":
            self.set_view(frozenset(message[1]))
        elif kind == "tap":
            self.tap = bool(message[1])
        elif kind == "forget_offer":
            if (known := self.links.get(message[1])) is not None and hasattr(known, "host_key_offer"):
                known.host_key_offer = None
        elif kind in ("remove", "request", "command"):
            self._spawn(self._answer(message))
        return True

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _answer(self, message: tuple[Any, ...]) -> None:
        kind, request_id, name = message[0], message[1], message[2]
        try:
            if kind == "remove":
                link = self.links.pop(name, None)
                if link is not None:
                    await link.stop()
                value: Any = None
            else:
                link = self.links.get(name)
                if link is None:
                    raise LinkError(f"{name}: no link in this worker")
                if kind == "request":
                    value = await link.request(message[3], message[4], message[5])
                else:
                    value = await link.run_command(message[3], message[4])
        except Exception as exc:
            self.reply(request_id, False, exc)
        else:
            self.reply(request_id, True, value)

    async def stop(self) -> None:
        links, self.links = list(self.links.values()), {}
        await asyncio.gather(*(link.stop() for link in links), return_exceptions=True)
        for task in list(self.tasks):
            task.cancel()
        if self._release_at is not None:
            self._release_at.cancel()
        self.flush()


async def serve() -> None:
    """Read messages from stdin until ``stop`` or end of file (the console went away), then stop every link."""
    loop = asyncio.get_running_loop()
    out_fd = os.dup(1)
    os.dup2(2, 1)  # a stray print goes to stderr, never into the message stream
    sys.stdout = sys.stderr
    reader = asyncio.StreamReader(limit=2**20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin.buffer)
    transport, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(out_fd, "wb", buffering=0))
    worker = Worker(transport)
    try:
        while True:
            try:
                message = await read_message(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            if not worker.handle(message):
                break
    finally:
        await worker.stop()
        with contextlib.suppress(Exception):
            transport.close()


def run(main: Any) -> None:
    """``main`` on uvloop where it is installed (libuv's loop: the worker's transports, timers and callbacks
    cost ~12 % less CPU at 1000 hosts, bench/scale.py), else on asyncio's own loop; the links are the same."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in the console's terminal is the console's to handle
    run(serve())


if __name__ == "__main__":
    main()
