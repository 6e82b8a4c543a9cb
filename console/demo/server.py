"""The demo's SSH server: asyncssh on 127.0.0.1, one port per demo instance, real processes behind it.

Every exec request (a shell request: an interactive bash, else sh) runs ``/bin/sh -c COMMAND`` for real, as a
child of that instance's init (see ``scripts/init``), in the instance's directory with ``HOME`` there, so the
agent the console uploads lands in the instance's own ``.cache`` and sees only that instance's processes.
stdin/stdout/stderr are piped through the channel, the exit status is returned, and when the channel closes
first the command's process group is killed, as sshd does with a session. A session that asks for a PTY (``s``, the
operator's shell) gets one of its size, followed on resize, as its controlling terminal.

A flapping host drops every connection from the server side and refuses new ones (its listener is
closed: "Connection refused") for a few seconds, then listens again on the same port.  While it is down
the port stays bound (not listening) so that no outgoing connection on this machine is given it as its
local port, which would keep the host from listening again.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import json
import os
import random
import signal
import socket
import struct
import subprocess
import termios
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh

KILL_GRACE = 3.0  # seconds between SIGHUP/SIGTERM and SIGKILL for a closed session's processes
SHELL = 'if command -v bash >/dev/null 2>&1; then exec bash -i; else exec sh -i; fi'  # a session without a command
# a started session command: its pid (= pgid), its exit, the task feeding its stdin, those pumping its output
Started = tuple[int, "asyncio.Future[int]", "asyncio.Task[None]", "list[asyncio.Task[None]]"]


def _set_size(fd: int, size: tuple[int, int, int, int]) -> None:
    """The PTY's window size from the client's (columns, rows, pixel width, pixel height)."""
    cols, rows, xpix, ypix = size
    if cols and rows:
        with contextlib.suppress(OSError):
            fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, xpix, ypix))


class InitClient:
    """The server's side of one instance init's socket: spawn commands, learn their exit codes."""

    def __init__(self, root: Path, sock_name: str) -> None:
        self.root, self.sock_name = root, sock_name
        self.proc: subprocess.Popen[bytes] | None = None
        self.sock: socket.socket | None = None
        self._ids = itertools.count(1)
        self._started: dict[int, asyncio.Future[int]] = {}
        self._exited: dict[int, asyncio.Future[int]] = {}

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    async def start(self, env: dict[str, str], timeout: float = 15.0) -> None:
        log = open(self.root / "var" / "log" / "init.log", "ab")  # noqa: SIM115 - the child keeps it
        try:
            self.proc = subprocess.Popen(
                [str(self.root / "sbin" / "init"), str(self.root), self.sock_name],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=str(self.root), env=env,
                start_new_session=True,
            )
        finally:
            log.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                sock.connect("\0" + self.sock_name)
                break
            except OSError:
                sock.close()
                if self.proc.poll() is not None or loop.time() > deadline:
                    raise RuntimeError(f"demo init for {self.root.name} did not start") from None
                await asyncio.sleep(0.05)
        sock.setblocking(False)
        self.sock = sock
        loop.add_reader(sock.fileno(), self._on_readable)

    def _on_readable(self) -> None:
        assert self.sock is not None
        while True:
            try:
                data = self.sock.recv(65536)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self._lost()
                return
            msg = json.loads(data.decode())
            req_id = msg.get("id")
            if "pid" in msg or "error" in msg:
                fut = self._started.pop(req_id, None)
                if fut is not None and not fut.done():
                    if "error" in msg:
                        fut.set_exception(OSError(msg["error"]))
                    else:
                        fut.set_result(int(msg["pid"]))
            elif "exit" in msg:
                fut = self._exited.pop(req_id, None)
                if fut is not None and not fut.done():
                    fut.set_result(int(msg["exit"]))

    def _lost(self) -> None:
        if self.sock is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(self.sock.fileno())
            self.sock.close()
            self.sock = None
        for futs in (self._started, self._exited):
            for fut in futs.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("the instance's init is gone"))
                    fut.exception()  # retrieved here: a finished session need not await it
            futs.clear()

    async def spawn(self, command: str, fds: tuple[int, int, int], cwd: str | None = None,
                    env: dict[str, str] | None = None, tty: bool = False) -> tuple[int, asyncio.Future[int]]:
        """Run ``/bin/sh -c command`` under init with the given stdin/stdout/stderr (``tty``: they are a PTY's
        slave, made its controlling terminal); (pid, exit future)."""
        if self.sock is None:
            raise ConnectionError("the instance's init is gone")
        loop = asyncio.get_running_loop()
        req_id = next(self._ids)
        started: asyncio.Future[int] = loop.create_future()
        exited: asyncio.Future[int] = loop.create_future()
        self._started[req_id], self._exited[req_id] = started, exited
        msg = json.dumps({"id": req_id, "cmd": command, "cwd": cwd, "env": env or {}, "tty": tty}).encode()
        try:
            socket.send_fds(self.sock, [msg], list(fds))
        except OSError:
            self._started.pop(req_id, None)
            self._exited.pop(req_id, None)
            raise
        pid = await asyncio.wait_for(started, 15)
        return pid, exited

    async def stop(self, timeout: float = 8.0) -> None:
        """TERM init (it kills everything below it), then KILL it."""
        self._lost()
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while proc.poll() is None and loop.time() < deadline:
            await asyncio.sleep(0.05)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await asyncio.to_thread(proc.wait)


@dataclass
class DemoHost:
    """One demo instance as the SSH server sees it."""

    name: str
    root: Path
    init: InitClient
    port: int = 0
    flapping: bool = False
    flap_up: tuple[float, float] = (20.0, 40.0)
    flap_down: tuple[float, float] = (3.0, 6.0)
    down: bool = False
    acceptor: Any = None
    port_hold: socket.socket | None = None  # keeps the port while the host is down (see the module doc)
    conns: set[asyncssh.SSHServerConnection] = field(default_factory=set)
    sessions: set[int] = field(default_factory=set)  # pids (= pgids) of live session commands
    flap_task: asyncio.Task[None] | None = None
    drops: int = 0


class _Server(asyncssh.SSHServer):
    def __init__(self, host: DemoHost) -> None:
        self.host = host
        self.conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.conn = conn
        self.host.conns.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.conn is not None:
            self.host.conns.discard(self.conn)

    def begin_auth(self, username: str) -> bool:
        return True  # public key auth against the demo's throwaway client key


def _hold_port(host: DemoHost) -> None:
    """Bind the down host's port without listening: connects are refused, and the kernel hands it to no
    outgoing connection (a bound port is skipped when choosing a local port), so ``bring_up`` can listen."""
    hold = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    hold.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        hold.bind(("127.0.0.1", host.port))
    except OSError:  # taken in the instant since the listener closed: bring_up retries
        hold.close()
        return
    host.port_hold = hold


def _release_port(host: DemoHost) -> None:
    if host.port_hold is not None:
        host.port_hold.close()
        host.port_hold = None


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class DemoSshServer:
    """asyncssh listeners on 127.0.0.1, one per demo host, sharing one throwaway host key."""

    def __init__(self, host_key: asyncssh.SSHKey, client_public_key: bytes) -> None:
        self.host_key = host_key
        self.authorized = asyncssh.import_authorized_keys(client_public_key.decode())
        self.hosts: dict[str, DemoHost] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    async def add_host(self, host: DemoHost) -> int:
        self.hosts[host.name] = host
        await self._listen(host)
        if host.flapping:
            host.flap_task = asyncio.create_task(self._flap_loop(host), name=f"demo-flap:{host.name}")
        return host.port

    async def _listen(self, host: DemoHost) -> None:
        host.acceptor = await asyncssh.listen(
            host="127.0.0.1",
            port=host.port,
            reuse_address=True,
            server_host_keys=[self.host_key],
            authorized_client_keys=self.authorized,
            server_factory=lambda: _Server(host),
            process_factory=lambda process: self._session(host, process),
            encoding=None,
            allow_pty=True,  # `s` (the operator's shell) asks for one
            agent_forwarding=False,
            x11_forwarding=False,
            allow_scp=False,
            sftp_factory=None,
            keepalive_interval=0,
            login_timeout=30,
        )
        host.port = host.acceptor.get_port()
        host.down = False
        _release_port(host)

    async def take_down(self, name: str) -> None:
        """The host drops off the network: connections cut, new ones refused."""
        host = self.hosts[name]
        host.down = True
        host.drops += 1
        await self._disconnect(host)
        _hold_port(host)

    @staticmethod
    async def _disconnect(host: DemoHost) -> None:
        """Stop listening for the host and cut its open connections."""
        if host.acceptor is not None:
            host.acceptor.close()
            with contextlib.suppress(Exception):
                await host.acceptor.wait_closed()
            host.acceptor = None
        for conn in list(host.conns):
            conn.abort()
        host.conns.clear()

    async def bring_up(self, name: str) -> None:
        host = self.hosts[name]
        if host.acceptor is None:
            await self._listen(host)

    async def _flap_loop(self, host: DemoHost) -> None:
        while True:
            await asyncio.sleep(random.uniform(*host.flap_up))
            await self.take_down(host.name)
            await asyncio.sleep(random.uniform(*host.flap_down))
            while host.acceptor is None:  # a host that stayed down a whole cycle would look dead
                try:
                    await self.bring_up(host.name)
                except OSError:  # the port is briefly busy: try again shortly
                    await asyncio.sleep(0.5)

    async def _session(self, host: DemoHost, process: asyncssh.SSHServerProcess[bytes]) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._run_session(host, process)
        finally:
            if task is not None:
                self._tasks.discard(task)

    async def _run_session(self, host: DemoHost, process: asyncssh.SSHServerProcess[bytes]) -> None:
        term = process.get_terminal_type()
        command = process.command or SHELL  # no command: a login shell, as sshd gives
        try:
            if term:
                pid, exited, feed, pumps = await self._start_pty(host, process, command, term)
            else:
                pid, exited, feed, pumps = await self._start_pipes(host, process, command)
        except (OSError, ConnectionError, TimeoutError) as exc:
            process.stderr.write(f"fleet-console demo: cannot run the command: {exc}\n".encode())
            process.exit(127)
            return
        host.sessions.add(pid)
        closed = asyncio.create_task(process.wait_closed())
        ends: list[asyncio.Future[Any]] = [exited, closed]
        try:
            await asyncio.wait(ends, return_when=asyncio.FIRST_COMPLETED)
            if not exited.done():
                # the client went away first: hang up the session's process group, as sshd does
                _kill_group(pid, signal.SIGHUP)
                _kill_group(pid, signal.SIGTERM)
                try:
                    await asyncio.wait_for(asyncio.shield(exited), KILL_GRACE)
                except (TimeoutError, ConnectionError):
                    _kill_group(pid, signal.SIGKILL)
                return
            await asyncio.wait(pumps, timeout=5)
            code = exited.result()
            with contextlib.suppress(Exception):
                if code < 0:
                    name = signal.Signals(-code).name.removeprefix("SIG")
                    process.exit_with_signal(name)
                else:
                    process.exit(code)
        except ConnectionError:
            with contextlib.suppress(Exception):
                process.exit(255)
        finally:
            host.sessions.discard(pid)
            for t in [feed, *pumps, closed]:
                t.cancel()
            await asyncio.gather(feed, *pumps, closed, return_exceptions=True)

    async def _start_pipes(self, host: DemoHost, process: asyncssh.SSHServerProcess[bytes], command: str) -> Started:
        """The command with its stdin, stdout and stderr on pipes to the channel's."""
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            pid, exited = await host.init.spawn(command, (in_r, out_w, err_w), cwd=str(host.root))
        except BaseException:
            for fd in (in_w, out_r, err_r):
                os.close(fd)
            raise
        finally:
            for fd in (in_r, out_w, err_w):
                os.close(fd)
        feed = asyncio.create_task(self._feed(process.stdin, in_w))
        pumps = [asyncio.create_task(self._pump(out_r, process.stdout)),
                 asyncio.create_task(self._pump(err_r, process.stderr))]
        return pid, exited, feed, pumps

    async def _start_pty(self, host: DemoHost, process: asyncssh.SSHServerProcess[bytes], command: str,
                         term: str) -> Started:
        """The command on a PTY of the client's size (its controlling terminal), the channel on the master side."""
        master, slave = os.openpty()
        _set_size(master, process.get_terminal_size())
        slaves = (slave, os.dup(slave), os.dup(slave))
        try:
            pid, exited = await host.init.spawn(command, slaves, cwd=str(host.root), env={"TERM": term}, tty=True)
        except BaseException:
            os.close(master)
            raise
        finally:
            for fd in slaves:  # init holds its own copies now: the master sees EOF when the command's are gone
                os.close(fd)
        out = os.dup(master)
        feed = asyncio.create_task(self._feed(process.stdin, master, resize=master))
        return pid, exited, feed, [asyncio.create_task(self._pump(out, process.stdout))]

    @staticmethod
    async def _feed(reader: asyncssh.SSHReader[bytes], fd: int, resize: int | None = None) -> None:
        """The channel's stdin into the command's stdin pipe; EOF closes the pipe."""
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, os.fdopen(fd, "wb", 0))
        writer = asyncio.StreamWriter(transport, protocol, None, loop)
        try:
            while True:
                try:
                    data = await reader.read(65536)
                except asyncssh.TerminalSizeChanged as change:  # the client's window was resized
                    if resize is not None:
                        _set_size(resize, (change.width, change.height, change.pixwidth, change.pixheight))
                    continue
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        except (asyncssh.Error, OSError):
            pass
        finally:
            transport.close()

    @staticmethod
    async def _pump(fd: int, writer: asyncssh.SSHWriter[bytes]) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=1 << 20)
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                                    os.fdopen(fd, "rb", 0))
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (asyncssh.Error, OSError, BrokenPipeError):
            pass
        finally:
            transport.close()

    def kill_sessions(self, sig: int = signal.SIGKILL) -> None:
        for host in self.hosts.values():
            for pgid in list(host.sessions):
                _kill_group(pgid, sig)

    async def close(self) -> None:
        for host in self.hosts.values():
            if host.flap_task is not None:
                host.flap_task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await host.flap_task
            await self._disconnect(host)
            _release_port(host)
        self.kill_sessions()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5)
