"""The audit log: one JSON line per action (time, user, instance, action, result), never rewritten."""

from __future__ import annotations

import datetime as dt
import getpass
import json
import os
import threading
from pathlib import Path
from typing import Any

import platformdirs


def default_audit_path() -> Path:
    """``$FLEET_CONSOLE_STATE_DIR/audit.jsonl``, else the user's state dir."""
    base = os.environ.get("FLEET_CONSOLE_STATE_DIR") or platformdirs.user_state_dir("fleet-console")
    return Path(base) / "audit.jsonl"


class AuditLog:
    """Appends records; a write failure is reported to the caller, never swallowed."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_audit_path()
        self._lock = threading.Lock()

    def record(self, instance: str, host: str, action: str, outcome: str, result: Any = None) -> dict[str, Any]:
        entry = {
            "time": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "user": _user(),
            "instance": instance,
            "host": host,
            "action": action,
            "outcome": outcome,
            "result": result,
        }
        line = json.dumps(entry, separators=(",", ":"), default=str) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write(line)
        return entry

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())
