"""What a link worker holds of an instance the operator cannot see: the newest state, merged, not every frame.

An instance out of view (or every instance while the console is behind) has its frames held here until the
worker's next delivery (``console/link/shard_process.py``): what the console applies then is the state the
instance reached, not the way there.

- ``heartbeat``: the newest replaces the older one.
- ``gpu``: the newest replaces the older one, keeping what a slim frame leaves out because the older one said
  it (a device's ``procs`` and ``health``, and the static fields, ``simulated`` and ``driver`` of a full frame).
- ``procs``: a full table with the deltas after it applied is one full table; deltas merge into one delta.
- ``log``: merged per file while the numbering runs on, at most ``LOG_CAP`` lines a file (the oldest become a
  ``[... N lines skipped ...]`` marker), as the agent holds them at detail "summary" (``hold_frames``).
- anything else (``hello``, ``xid``, ``result``, ``error``) is not held: the caller delivers what this instance
  has held first, then it, so an instance's frames keep their order.
"""

from __future__ import annotations

from typing import Any

from console.agent.wire.loglines import hold_frames

Frame = dict[str, Any]
LOG_CAP = 200  # lines held per log file of one instance (a pane shows a few; the instance screen reads the host)
_STATIC = ("name", "uuid", "mem_total", "power_limit")
_KEPT = ("procs", "health")  # a slim frame's device leaves these out while unchanged (absent = keep the last)
HELD_KINDS = frozenset(("heartbeat", "gpu", "procs", "log"))


def merge_gpu(old: Frame, new: Frame) -> Frame:
    """One gpu frame that tells a consumer what ``old`` then ``new`` told it."""
    if new.get("full") or new.get("state") != "ok":
        return new  # complete in itself
    out = dict(new)
    if old.get("full"):
        out["full"] = True
        for key in ("simulated", "driver"):
            if key not in out and key in old:
                out[key] = old[key]
    before = {d.get("index"): d for d in old.get("devices") or ()}
    devices = []
    for dev in new.get("devices") or ():
        was = before.get(dev.get("index"))
        if was is not None:
            missing = [k for k in _KEPT if k not in dev and k in was]
            if old.get("full"):
                missing += [k for k in _STATIC if k not in dev and k in was]
            if missing:
                dev = dict(dev)
                for key in missing:
                    dev[key] = was[key]
        devices.append(dev)
    out["devices"] = devices
    return out


def merge_procs(old: Frame, new: Frame) -> Frame:
    """One procs frame that leaves a consumer's table as ``old`` then ``new`` would."""
    if new.get("full"):
        return new
    upsert = new.get("upsert") or ()
    gone = set(new.get("gone") or ())
    if old.get("full"):
        table = {rec["pid"]: rec for rec in old.get("procs") or ()}
        for pid in gone:
            table.pop(pid, None)
        for rec in upsert:
            table[rec["pid"]] = rec
        return dict(old, ts=new.get("ts"), procs=list(table.values()))
    changed = {rec["pid"]: rec for rec in old.get("upsert") or ()}
    dropped = set(old.get("gone") or ())
    for pid in gone:
        changed.pop(pid, None)
        dropped.add(pid)
    for rec in upsert:
        changed[rec["pid"]] = rec
        dropped.discard(rec["pid"])
    return dict(new, upsert=list(changed.values()), gone=sorted(dropped))


class Held:
    """One instance's held frames."""

    __slots__ = ("count", "frames", "logs")

    def __init__(self) -> None:
        self.frames: dict[str, Frame] = {}  # kind -> the merged frame (heartbeat, gpu, procs)
        self.logs: dict[str, list[Frame]] = {}  # path -> merged log frames
        self.count = 0  # frames taken in (the merge's saving: count - what ``take`` gives)

    def add(self, frame: Frame) -> None:
        self.count += 1
        kind = frame["type"]
        if kind == "log":
            hold_frames(self.logs, [frame], LOG_CAP)
            return
        old = self.frames.get(kind)
        if old is None:
            self.frames[kind] = frame
        elif kind == "gpu":
            self.frames[kind] = merge_gpu(old, frame)
        elif kind == "procs":
            self.frames[kind] = merge_procs(old, frame)
        else:
            self.frames[kind] = frame

    def take(self) -> list[Frame]:
        """The held frames in the order a consumer wants them: processes, GPUs (their holders), logs, heartbeat."""
        out = [self.frames[k] for k in ("procs", "gpu") if k in self.frames]
        for frames in self.logs.values():
            out.extend(frames)
        if "heartbeat" in self.frames:
            out.append(self.frames["heartbeat"])
        return out


class Coalescer:
    """The held frames of every instance out of view, taken out together at each delivery."""

    def __init__(self) -> None:
        self.held: dict[str, Held] = {}
        self.taken_in = 0
        self.given_out = 0

    @staticmethod
    def holds(frame: Frame) -> bool:
        """A frame of a kind that merges (a log frame only with its line number)."""
        kind = frame.get("type")
        return kind in HELD_KINDS and (kind != "log" or (type(frame.get("first_line")) is int
                                                         and isinstance(frame.get("lines"), list)))

    def add(self, name: str, frame: Frame) -> None:
        held = self.held.get(name)
        if held is None:
            held = self.held[name] = Held()
        held.add(frame)
        self.taken_in += 1

    def take(self, name: str) -> list[Frame]:
        held = self.held.pop(name, None)
        if held is None:
            return []
        out = held.take()
        self.given_out += len(out)
        return out

    def take_all(self) -> list[tuple[str, Frame]]:
        held, self.held = self.held, {}
        out = [(name, frame) for name, h in held.items() for frame in h.take()]
        self.given_out += len(out)
        return out

    def __len__(self) -> int:
        return len(self.held)
