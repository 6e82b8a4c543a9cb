"""A short journal of the actions the console asked for, by action id: what each one did.

The console writes its audit intent before it sends a destructive request (``restart``) with an
``action_id``; when the link drops before the answer arrives, it asks the agent on reconnect (op
``journal``) what that id did. The answer must survive the agent that ran the action (a new agent for the
same console replaces the old one), so entries go to a file in the agent's own directory
(``journal-<key>.jsonl``, one JSON line per state change, the last ``KEEP`` ids kept), and stay in memory
when the agent has no directory (``fleet-console agent`` by hand, the local transport).
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from typing import Any, Dict, List, Optional

KEEP = 64  # action ids kept
MAX_BYTES = 256 * 1024  # the file is cut back to the last KEEP ids beyond this


class Journal:
    """``begin(id, op)`` before an action runs, ``finish(id, ok, data, error)`` after; ``get(ids)``."""

    def __init__(self, path: Optional[str] = None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._mem: Dict[str, Dict[str, Any]] = {}

    def begin(self, action_id: str, op: str) -> None:
        self._put({"id": action_id, "op": op, "state": "running", "started": time.time()})

    def finish(self, action_id: str, op: str, ok: bool, data: Any = None, error: Optional[str] = None) -> None:
        entry: Dict[str, Any] = {"id": action_id, "op": op, "state": "done", "ok": ok, "ended": time.time()}
        if ok:
            entry["data"] = data
        else:
            entry["error"] = error
        self._put(entry)

    def get(self, ids: List[str]) -> Dict[str, Optional[Dict[str, Any]]]:
        """The last entry of each id (None: never seen here)."""
        known = self._read()
        return {i: known.get(i) for i in ids}

    # -- storage ----------------------------------------------------------------------------------
    def _put(self, entry: Dict[str, Any]) -> None:
        with self._lock:
            self._mem[entry["id"]] = entry
            while len(self._mem) > KEEP:
                del self._mem[next(iter(self._mem))]
            if self.path is None:
                return
            line = (json.dumps(entry, separators=(",", ":"), default=str) + "\n").encode("utf-8")
            try:  # read and write: compacting reads the file back through this descriptor
                fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            except OSError:
                return  # the memory copy still answers while this agent lives
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                os.write(fd, line)
                os.fsync(fd)
                if os.fstat(fd).st_size > MAX_BYTES:
                    self._compact(fd)
            except OSError:
                pass  # a full disk or a bad file costs the record, never the action or its answer
            finally:
                os.close(fd)  # closing releases the lock

    def _compact(self, fd: int) -> None:
        entries = _parse(_read_fd(fd))
        keep = list(entries.values())[-KEEP:]
        data = "".join(json.dumps(e, separators=(",", ":"), default=str) + "\n" for e in keep).encode("utf-8")
        os.ftruncate(fd, 0)
        os.write(fd, data)  # O_APPEND: written at the (new) end, i.e. from 0
        os.fsync(fd)

    def _read(self) -> Dict[str, Dict[str, Any]]:
        with self._lock:
            out = dict(self._mem)
            if self.path is None:
                return out
            try:
                fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                return out
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)
                from_file = _parse(_read_fd(fd))
            finally:
                os.close(fd)
        from_file.update(out)
        return from_file


def _read_fd(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks: List[bytes] = []
    while True:
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _parse(data: bytes) -> Dict[str, Dict[str, Any]]:
    out: Dict[str, Dict[str, Any]] = {}
    for raw in data.splitlines():
        try:
            entry = json.loads(raw.decode("utf-8", "replace"))
        except ValueError:
            continue  # a line cut by a crash
        if isinstance(entry, dict) and isinstance(entry.get("id"), str):
            out.pop(entry["id"], None)
            out[entry["id"]] = entry
    return out
