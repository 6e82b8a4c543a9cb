"""The agent's SSH channel as lines, with real flow control.

asyncssh's stream readers pause the channel when their buffer is full and resume it as soon as one line
is read; every resume delivers a packet, and every delivered packet re-opens the whole SSH window, while
the packets already buffered stay buffered. A host that writes faster than the console parses thus grew
the console without bound (1 GB in 10 s in our flood test). Here the channel is paused above ``HIGH``
buffered bytes and resumed only below ``LOW``: the window stays shut while we catch up, so the host's
agent blocks on its writes and what one host can make us hold is about ``HIGH`` plus two windows.
"""

from __future__ import annotations

import asyncio

import asyncssh

from console.link.validate import MAX_FRAME_BYTES

HIGH = 8 * 1024 * 1024  # buffered bytes that pause the channel
LOW = 1 * 1024 * 1024  # ... and resume it
COMPACT = 1024 * 1024  # consumed bytes at the front before the buffer is compacted


class AgentChannel(asyncssh.SSHClientSession[bytes]):
    """stdout as lines (``readline``), stderr to ``on_stderr``, ``write`` to stdin."""

    def __init__(self, on_stderr: object = None) -> None:
        self._buf = bytearray()
        self._pos = 0  # start of the unread data in _buf
        self._eof = False
        self._error: Exception | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._chan: asyncssh.SSHClientChannel[bytes] | None = None
        self._paused = False
        self._skipping = False  # inside a line longer than MAX_FRAME_BYTES: dropped up to its newline
        self._on_stderr = on_stderr

    # -- asyncssh callbacks -----------------------------------------------------------------------------
    def connection_made(self, chan: asyncssh.SSHClientChannel[bytes]) -> None:
        self._chan = chan

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        if datatype == asyncssh.EXTENDED_DATA_STDERR:
            if callable(self._on_stderr):
                self._on_stderr(data)
            return
        self._buf += data
        if not self._paused and len(self._buf) - self._pos > HIGH and self._chan is not None:
            self._paused = True
            self._chan.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        self._error = exc
        self._wake()

    # -- the Session side -------------------------------------------------------------------------------
    async def readline(self) -> bytes:
        """The next line with its newline; a line over MAX_FRAME_BYTES comes as its first bytes (no newline,
        so it fails to parse) and the rest of it is dropped; b"" at the end."""
        while True:
            end = self._buf.find(b"\n", self._pos)
            if end >= 0:
                line = bytes(self._buf[self._pos:end + 1])
                self._consume(end + 1)
                if self._skipping:
                    self._skipping = False
                    continue
                return line
            pending = len(self._buf) - self._pos
            if pending > MAX_FRAME_BYTES:
                line = bytes(self._buf[self._pos:self._pos + MAX_FRAME_BYTES + 1])
                self._consume(len(self._buf))
                was, self._skipping = self._skipping, True
                if not was:
                    return line
                continue
            if self._eof:
                if self._error is not None and not pending:
                    raise self._error
                line = bytes(self._buf[self._pos:])
                self._consume(len(self._buf))
                return b"" if self._skipping else line
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    def write(self, data: bytes) -> None:
        if self._chan is not None:
            self._chan.write(data)

    def close(self) -> None:
        if self._chan is not None:
            self._chan.close()

    # -- internals ------------------------------------------------------------------------------------------
    def _consume(self, upto: int) -> None:
        self._pos = upto
        if self._pos >= COMPACT or self._pos == len(self._buf):
            del self._buf[:self._pos]
            self._pos = 0
        if self._paused and len(self._buf) - self._pos < LOW and self._chan is not None:
            self._paused = False
            self._chan.resume_reading()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
