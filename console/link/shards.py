"""Links in worker processes: the SSH, the decryption and the frame decoding of a big fleet off the UI's thread.

Past ``SHARD_FROM`` SSH instances, the controller hands its SSH links to a ``ShardPool``: a few
``console.link.shard_process`` children, each running the real ``SshLink`` of its share of the fleet (the
same code as in the console process: connect limiter, watchdog, validation, reconnects). A child batches
what its links say (one message per ``FLUSH_EVERY`` while frames flow), so the console process reads a few
dozen pickles a second instead of thousands of SSH packets, and spends its one thread on the fleet state and
the screen. Each instance is a ``ShardedLink`` here, with the ``AgentLink`` surface the controller and the
app use (status, events, ``request``, ``run_command``, ``retry_now``, host key offers).

What the console cannot use yet is not sent: the pool tells its workers which instances are in view
(``set_view``: the grid's panes, the open instance); a worker delivers their frames as they come and holds and
merges the others' for a second (``console/link/coalesce.py``). A recording gets every frame anyway
(``tap``): the worker sends each as JSON, written as it is, never applied.

A worker that dies takes only its share down: those links show ``unreachable`` ("link worker exited: ...")
and the pool starts a new worker for them a second later.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import asyncssh

from console.inventory import Instance
from console.link.base import CommandResult, FrameHandler, LinkError, LinkLost, StatusHandler
from console.link.hostkeys import HostKeyOffer
from console.link.shard_process import OfferData, pack, read_message
from console.link.surface import StatusRules

SHARD_FROM = 50  # SSH instances: from this many, links run in worker processes
HOSTS_PER_WORKER = 250
MAX_WORKERS = 8
RESPAWN_DELAY = 1.0  # seconds before a dead worker's links get a new one
DISPATCH_SLICE = 100  # events handled per turn of the event loop (1000 hosts: ~200 frames a batch)
REPLY_GRACE = 10.0  # seconds past a request's own timeout before the console stops waiting for the worker
ENV = "FLEET_CONSOLE_LINK_WORKERS"
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the folder that holds ``console``


def worker_count(ssh_instances: int, env: dict[str, str] | None = None) -> int:
    """How many link workers a fleet of ``ssh_instances`` gets: 0 (links in the console process) below
    ``SHARD_FROM``, else one per ``HOSTS_PER_WORKER`` up to the spare cores (at least one, at most
    ``MAX_WORKERS``). ``FLEET_CONSOLE_LINK_WORKERS=N`` sets it (0: never)."""
    value = (os.environ if env is None else env).get(ENV, "").strip()
    if value:
        try:
            return max(0, min(int(value), 64))
        except ValueError:
            pass
    if ssh_instances < SHARD_FROM:
        return 0
    spare = max(1, (os.cpu_count() or 1) - 1)
    return max(1, min(MAX_WORKERS, spare, math.ceil(ssh_instances / HOSTS_PER_WORKER)))


def offer_from_data(data: OfferData | None) -> HostKeyOffer | None:
    if data is None:
        return None
    host, port, key, known_hosts, listed = data
    return HostKeyOffer(host, port, asyncssh.import_public_key(key), Path(known_hosts),
                        [asyncssh.import_public_key(k) for k in listed])


class ShardedLink(StatusRules):
    """One instance's link as the console sees it while a worker process runs the real one."""

    def __init__(self, pool: ShardPool, instance: Instance, on_frame: FrameHandler, on_status: StatusHandler) -> None:
        self.pool = pool
        self.instance = instance
        self.name = instance.name
        self._on_frame = on_frame
        self._on_status = on_status
        self.status, self.detail = "idle", ""
        self.host_key_offer: HostKeyOffer | None = None
        self.next_retry_at: float | None = None
        self.last_frame_at = 0.0
        self.outcome_event = asyncio.Event()
        self.connected_event = asyncio.Event()
        self.worker: _Worker | None = None
        self._started = False

    # -- the AgentLink surface ------------------------------------------------------------------------
    def start(self) -> None:
        if not self._started:
            self._started = True
            self.pool.place(self)

    async def stop(self) -> None:
        worker, self.worker = self.worker, None
        if worker is not None:
            worker.links.pop(self.name, None)
            with contextlib.suppress(LinkError, OSError):
                await worker.call(("remove", self.name), 15.0)
        self.set_status("closed", "stopped", None, None)

    def retry_now(self) -> None:
        if self.worker is not None:
            self.worker.send(("retry", self.name))

    async def request(self, op: str, args: dict[str, Any] | None = None, timeout: float = 60.0) -> dict[str, Any]:
        worker = self._ready()
        answer: dict[str, Any] = await worker.call(("request", self.name, op, args or {}, timeout), timeout)
        return answer

    async def run_command(self, command: str, timeout: float = 20.0) -> CommandResult:
        worker = self._ready()
        result: CommandResult = await worker.call(("command", self.name, command, timeout), timeout)
        return result

    def _forget_offer(self) -> None:
        """``accept_host_key`` (StatusRules) wrote the key here (the console's files): the worker forgets it."""
        if self.worker is not None:
            self.worker.send(("forget_offer", self.name))

    # -- from the worker ------------------------------------------------------------------------------
    def _ready(self) -> _Worker:
        worker = self.worker
        if worker is None or self.status != "connected":
            raise LinkError(f"{self.name}: not connected ({self.status}: {self.detail})")
        return worker

    def set_status(self, status: str, detail: str, offer: OfferData | None, retry_at: float | None) -> None:
        self.status, self.detail = status, detail
        self.next_retry_at = retry_at
        self.host_key_offer = offer_from_data(offer)  # as the worker's link has it now
        self._set_status(status, detail)


class _Worker:
    """One worker process and the links it runs."""

    def __init__(self, pool: ShardPool, index: int) -> None:
        self.pool = pool
        self.index = index
        self.links: dict[str, ShardedLink] = {}
        self.proc: asyncio.subprocess.Process | None = None
        self._backlog: list[bytes] = []  # messages sent before the process was up
        self._replies: dict[int, asyncio.Future[Any]] = {}
        self._ids = itertools.count(1)
        self.stderr: deque[str] = deque(maxlen=20)
        self.exited = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"link-worker:{index}")
        self.frames = 0  # frames received from the worker (tests, benches)
        if pool.view:
            self.send(("view", sorted(pool.view)))
        if pool.tap is not None:
            self.send(("tap", True))

    def send(self, message: tuple[Any, ...]) -> None:
        data = pack(message)
        proc = self.proc
        if proc is None or proc.stdin is None:
            self._backlog.append(data)
            return
        with contextlib.suppress(ConnectionError, RuntimeError):
            proc.stdin.write(data)

    async def call(self, message: tuple[Any, ...], timeout: float) -> Any:
        request_id = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._replies[request_id] = future
        try:
            self.send((message[0], request_id, *message[1:]))
            ok, value = await asyncio.wait_for(future, timeout + REPLY_GRACE)
        except TimeoutError:
            raise LinkLost(f"{message[1]}: no answer from its link worker within {timeout + REPLY_GRACE:g} s") from None
        finally:
            self._replies.pop(request_id, None)
        if not ok:
            raise value
        return value

    async def _run(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "console.link.shard_process", env=env,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                limit=2**20, start_new_session=True,
            )
        except OSError as exc:  # out of processes or descriptors: its links say so and it is tried again
            self.exited.set()
            self._died(f"cannot start a link worker: {exc}")
            return
        self.proc = proc
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        backlog, self._backlog = self._backlog, []
        for data in backlog:
            proc.stdin.write(data)
        drain = asyncio.get_running_loop().create_task(self._keep_stderr(proc.stderr))
        try:
            while True:
                try:
                    batch = await read_message(proc.stdout)
                except (asyncio.IncompleteReadError, ConnectionError):
                    break
                for start in range(0, len(batch), DISPATCH_SLICE):
                    if start:
                        await asyncio.sleep(0)  # a key press or a paint between slices of a big batch
                    self._dispatch(batch[start:start + DISPATCH_SLICE])
        finally:
            rc = await proc.wait()
            await asyncio.gather(drain, return_exceptions=True)
            self.exited.set()
            tail = next((line for line in reversed(self.stderr) if line.strip()), "")
            self._died(f"link worker exited ({rc}){': ' + tail if tail else ''}")

    async def _keep_stderr(self, stream: asyncio.StreamReader) -> None:
        async for line in stream:
            self.stderr.append(line.decode(errors="replace").rstrip())

    def _dispatch(self, batch: Iterable[tuple[Any, ...]]) -> None:
        links = self.links
        now = time.time()
        for event in batch:
            kind = event[0]
            if kind == "frame":
                self.frames += 1
                link = links.get(event[1])
                if link is not None:
                    link.last_frame_at = now
                    link._on_frame(event[1], event[2])
            elif kind == "rec":
                tap = self.pool.tap
                if tap is not None and event[1] in links:
                    tap(event[1], event[2])
            elif kind == "status":
                link = links.get(event[1])
                if link is not None:
                    link.set_status(event[2], event[3], event[4], event[5])
            elif kind == "reply":
                future = self._replies.get(event[1])
                if future is not None and not future.done():
                    future.set_result((event[2], event[3]))

    def _died(self, why: str) -> None:
        for future in self._replies.values():
            if not future.done():
                future.set_exception(LinkLost(why))
        if self.pool.closing:
            return
        detail = f"{why}; restarting it"
        orphans = list(self.links.values())
        for link in orphans:
            link.worker = None
            link.set_status("unreachable", detail, None, time.time() + RESPAWN_DELAY)
        self.pool.respawn(self, orphans)

    async def close(self) -> None:
        proc = self.proc
        if proc is not None and proc.returncode is None:
            self.send(("stop",))
            with contextlib.suppress(Exception):
                await proc.stdin.drain()  # type: ignore[union-attr]
            try:
                await asyncio.wait_for(self.exited.wait(), 15.0)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


class ShardPool:
    """``size`` link workers; each new link goes to the one with the fewest."""

    def __init__(self, size: int, tap: Callable[[str, bytes], None] | None = None) -> None:
        self.size = max(1, size)
        self.workers: list[_Worker] = []
        self.closing = False
        self._respawns: set[asyncio.Task[None]] = set()
        self.view: frozenset[str] = frozenset()
        self.tap = tap  # (name, frame as JSON bytes) for every frame: a recording's

    def set_view(self, names: Iterable[str]) -> None:
        """The instances the operator sees now: their frames come as they arrive, the others' once a second."""
        view = frozenset(names)
        if view != self.view:
            self.view = view
            for worker in self.workers:
                worker.send(("view", sorted(view)))

    @property
    def frames(self) -> int:
        """Frames received from the workers so far."""
        return sum(w.frames for w in self.workers)

    def link(self, instance: Instance, on_frame: FrameHandler, on_status: StatusHandler) -> ShardedLink:
        return ShardedLink(self, instance, on_frame, on_status)

    def place(self, link: ShardedLink) -> None:
        if self.closing:
            link.set_status("closed", "stopped", None, None)
            return
        if len(self.workers) < self.size:
            self.workers.append(_Worker(self, len(self.workers)))
        worker = min(self.workers, key=lambda w: len(w.links))
        self._attach(worker, link)

    def _attach(self, worker: _Worker, link: ShardedLink) -> None:
        worker.links[link.name] = link
        link.worker = worker
        worker.send(("add", link.instance))

    def respawn(self, dead: _Worker, links: list[ShardedLink]) -> None:
        async def later() -> None:
            await asyncio.sleep(RESPAWN_DELAY)
            if self.closing:
                return
            fresh = _Worker(self, dead.index)
            self.workers[self.workers.index(dead)] = fresh
            for link in links:
                if link.status != "closed":
                    self._attach(fresh, link)

        task = asyncio.get_running_loop().create_task(later())
        self._respawns.add(task)
        task.add_done_callback(self._respawns.discard)

    @property
    def pids(self) -> list[int]:
        return [w.proc.pid for w in self.workers if w.proc is not None and w.proc.returncode is None]

    async def close(self) -> None:
        self.closing = True
        for task in list(self._respawns):
            task.cancel()
        workers, self.workers = self.workers, []
        await asyncio.gather(*(w.close() for w in workers), return_exceptions=True)
