"""Xid events through NVML's event API: what ``dmesg`` says of a failing GPU, seen where ``dmesg`` is denied.

``XidWatcher.register`` makes one event set and registers each device for ``nvmlEventTypeXidCriticalError``,
masked by what ``nvmlDeviceGetSupportedEventTypes`` says it supports (a consumer card, a MIG device or a
container may support none: then nothing is registered, never an error). ``poll`` asks ``nvmlEventSetWait_v2``
with a timeout of 0 until it has nothing more (NVML's TIMEOUT), so the agent's loop never blocks on it.

NVML reports only what happens after registration: the events seen are appended to ``xids.jsonl`` in the
agent's state directory, and a new agent (a reconnect, a one-shot ``status``) sends the last week's again
(``seen_before``), so a card that threw Xid 79 an hour ago still says so.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, List, Optional, Tuple

from .nvml import DeviceError, Nvml, as_int

XID_EVENT = 0x8  # nvmlEventTypeXidCriticalError
MAX_PER_POLL = 64  # events taken in one poll (a storm is read over several samples)
KEEP_SECONDS = 7 * 86400.0  # Xids a new agent sends again
KEEP_LINES = 256  # the file is cut back to this many lines when it grows past twice as many
SAME_EVENT = 5.0  # seconds: the same Xid on the same GPU seen by two agents within this is one event

_KEYS = ("gpu", "xid", "time")
XidEvent = Dict[str, Any]  # {"gpu": index, "xid": n, "time": epoch, "uuid"?: str, "seen_before"?: True}


class XidWatcher:
    """One NVML event set for the Xid events of every device; ``poll`` never blocks."""

    def __init__(self, nvml: Nvml, log_path: Optional[str] = None) -> None:
        self.nvml = nvml
        self.log_path = log_path
        self._set: Any = None
        self.registered: List[int] = []  # device indexes registered

    def register(self, devices: List[Tuple[int, Any]]) -> None:
        """Register ``(index, handle)`` for the Xid events they support (again after a device came back)."""
        try:
            if self._set is None:
                self._set = self.nvml.call("nvmlEventSetCreate")
            if self._set is None:
                return
            for index, handle in devices:
                if index in self.registered or handle is None:
                    continue
                supported = as_int(self.nvml.call("nvmlDeviceGetSupportedEventTypes", handle))
                mask = (supported or 0) & XID_EVENT
                if not mask:
                    continue
                try:
                    self.nvml.module.nvmlDeviceRegisterEvents(handle, mask, self._set)
                except Exception:  # NOT_SUPPORTED, NO_PERMISSION (a container), an old driver: no events
                    continue
                self.registered.append(index)
        except DeviceError:
            return

    def forget(self, index: int) -> None:
        """A lost device: registered again when it comes back."""
        if index in self.registered:
            self.registered.remove(index)

    def poll(self, uuids: Dict[int, Optional[str]]) -> List[XidEvent]:
        """The Xid events since the last poll (at most ``MAX_PER_POLL``), also appended to the log file."""
        if self._set is None or not self.registered:
            return []
        events: List[XidEvent] = []
        for _ in range(MAX_PER_POLL):
            try:
                data = self.nvml.call("nvmlEventSetWait_v2", self._set, 0)
            except DeviceError:
                break
            if data is None:  # TIMEOUT: nothing more
                break
            if not (as_int(getattr(data, "eventType", 0)) or 0) & XID_EVENT:
                continue
            try:
                index = as_int(self.nvml.call("nvmlDeviceGetIndex", data.device))
            except DeviceError:
                index = None
            xid = as_int(getattr(data, "eventData", None))
            if index is None or xid is None:
                continue
            event: XidEvent = {"gpu": index, "xid": xid, "time": round(time.time(), 3)}
            if uuids.get(index):
                event["uuid"] = uuids[index]
            events.append(event)
        if events:
            self._append(events)
        return events

    def close(self) -> None:
        if self._set is not None:
            try:
                self.nvml.module.nvmlEventSetFree(self._set)
            except Exception:
                pass
            self._set, self.registered = None, []

    # -- the log of Xids seen on this host ------------------------------------------------------------------
    def _append(self, events: List[XidEvent]) -> None:
        if not self.log_path:
            return
        try:
            os.makedirs(os.path.dirname(self.log_path), mode=0o700, exist_ok=True)
            with open(self.log_path, "a", encoding="utf-8") as f:
                for event in events:
                    f.write(json.dumps(event, sort_keys=True) + "\n")
            with open(self.log_path, "rb") as f:
                lines = f.read().splitlines()
            if len(lines) > 2 * KEEP_LINES:
                tmp = self.log_path + ".%d" % os.getpid()
                with open(tmp, "wb") as f:
                    f.write(b"\n".join(lines[-KEEP_LINES:]) + b"\n")
                os.replace(tmp, self.log_path)
        except OSError:
            pass

    def earlier(self, now: Optional[float] = None) -> List[XidEvent]:
        """The Xids earlier agents on this host saw in the last ``KEEP_SECONDS`` (same ones merged)."""
        if not self.log_path:
            return []
        now = time.time() if now is None else now
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                lines = f.readlines()[-KEEP_LINES:]
        except OSError:
            return []
        out: List[XidEvent] = []
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if not isinstance(event, dict) or not all(isinstance(event.get(k), (int, float)) for k in _KEYS):
                continue
            if now - event["time"] > KEEP_SECONDS or any(_same(event, seen) for seen in out):
                continue
            out.append({**event, "seen_before": True})
        return out


def _same(a: XidEvent, b: XidEvent) -> bool:
    return (a.get("uuid") or a["gpu"]) == (b.get("uuid") or b["gpu"]) and a["xid"] == b["xid"] and \
        abs(a["time"] - b["time"]) < SAME_EVENT
