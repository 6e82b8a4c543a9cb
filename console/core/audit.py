"""The audit log: one JSON line per action (time, user, instance, action, outcome, result, origin, reason),
never rewritten, each fsynced before the call returns.

A destructive action is written ahead: ``intent()`` puts the intent (its action id, who, why) in
``audit.pending.jsonl`` with fsync before anything is sent, and fails (OSError) when the log cannot be
written, so the caller refuses the action; the outcome goes to the log with ``record(..., action_id=...)``,
which also closes the intent. An intent whose console died before its outcome (its pid is gone) is written
to the log as outcome ``unknown`` by ``reconcile()``, which everything that opens the audit calls when it starts
(the TUI, serve, mcp, the CLI, ``history``), and again whenever an intent is taken: no sent action goes
unrecorded. ``pending()`` lists the intents whose console still runs (``history`` shows them).
"""

from __future__ import annotations

import datetime as dt
import getpass
import json
import os
import secrets
import threading
from pathlib import Path
from typing import Any

import platformdirs


def default_audit_path() -> Path:
    """``$FLEET_CONSOLE_STATE_DIR/audit.jsonl``, else the user's state dir."""
    base = os.environ.get("FLEET_CONSOLE_STATE_DIR") or platformdirs.user_state_dir("fleet-console")
    return Path(base) / "audit.jsonl"


class AuditLog:
    """Appends records; a write failure is reported to the caller (OSError), never swallowed.

    ``origin`` is the default origin of this log's records ("tui", "cli", "mcp"); a call may name its own.
    """

    def __init__(self, path: Path | None = None, origin: str | None = None) -> None:
        self.path = path or default_audit_path()
        self.origin = origin
        self._lock = threading.Lock()

    @property
    def pending_path(self) -> Path:
        return self.path.with_name(self.path.stem + ".pending.jsonl")

    def record(
        self,
        instance: str,
        host: str,
        action: str,
        outcome: str,
        result: Any = None,
        origin: str | None = None,
        reason: str | None = None,
        action_id: str | None = None,
        note: str | None = None,
    ) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "time": _now(),
            "user": _user(),
            "instance": instance,
            "host": host,
            "action": action,
            "outcome": outcome,
            "result": result,
            "origin": origin or self.origin,
            "reason": reason,
        }
        if action_id is not None:
            entry["action_id"] = action_id
        if note is not None:
            entry["note"] = note
        with self._lock:
            _append(self.path, entry)
            if action_id is not None:
                _append(self.pending_path, {"done": action_id}, sync=False)
        self._announce(entry)
        return entry

    def intent(
        self, instance: str, host: str, action: str, origin: str | None = None, reason: str | None = None
    ) -> str:
        """Write the intent of a destructive action (fsync) and return its action id; OSError: refuse it."""
        with self._lock:
            recovered = self._recover()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8"):  # the outcome must have somewhere to go too
                pass
            action_id = secrets.token_hex(8)
            _append(self.pending_path, {
                "intent": action_id, "time": _now(), "user": _user(), "pid": os.getpid(), "instance": instance,
                "host": host, "action": action, "origin": origin or self.origin, "reason": reason,
            })
        for entry in recovered:
            self._announce(entry)
        return action_id

    def reconcile(self) -> list[dict[str, Any]]:
        """Write the intents of consoles that died before their outcome as ``unknown`` now; returns those
        records. OSError when the log cannot be written (the caller says so; nothing is lost: the intents stay)."""
        with self._lock:
            written = self._recover()
        for entry in written:
            self._announce(entry)
        return written

    def pending(self) -> list[dict[str, Any]]:
        """Intents sent by a console that still runs and whose outcome is not recorded yet."""
        return [item for item in _open_intents(self.pending_path).values() if _alive(item.get("pid"))]

    def _announce(self, entry: dict[str, Any]) -> None:
        """A record was written (a subclass tells its listeners)."""

    def done(self, action_id: str) -> None:
        """Close an intent whose outcome was recorded without its action id."""
        with self._lock:
            _append(self.pending_path, {"done": action_id}, sync=False)

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]

    def _recover(self) -> list[dict[str, Any]]:
        """Intents of consoles that died before their outcome: written as ``unknown``; the file compacted."""
        if not self.pending_path.exists():
            return []
        live, written = {}, []
        for action_id, item in _open_intents(self.pending_path).items():
            if _alive(item.get("pid")):
                live[action_id] = item  # another console of this user, still waiting for its outcome
                continue
            entry = {
                "time": _now(), "user": item.get("user"), "instance": item.get("instance"), "host": item.get("host"),
                "action": item.get("action"), "outcome": "unknown", "result": None, "origin": item.get("origin"),
                "reason": item.get("reason"), "action_id": action_id,
                "note": f"sent at {item.get('time')} by a console (pid {item.get('pid')}) that stopped before "
                        "the outcome was known",
            }
            _append(self.path, entry)
            written.append(entry)
        tmp = self.pending_path.with_name(self.pending_path.name + ".tmp")
        tmp.write_text("".join(json.dumps(i, separators=(",", ":")) + "\n" for i in live.values()), encoding="utf-8")
        os.replace(tmp, self.pending_path)
        return written


def _open_intents(pending_path: Path) -> dict[str, dict[str, Any]]:
    """The intents in the pending file without their ``done`` line (a torn line is skipped)."""
    try:
        text = pending_path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return {}
    open_intents: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if not isinstance(item, dict):
            continue
        if "intent" in item:
            open_intents[str(item["intent"])] = item
        elif "done" in item:
            open_intents.pop(str(item["done"]), None)
    return open_intents


def _append(path: Path, entry: dict[str, Any], sync: bool = True) -> None:
    line = json.dumps(entry, separators=(",", ":"), default=str) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(line)
        fh.flush()
        if sync:
            os.fsync(fh.fileno())


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())
