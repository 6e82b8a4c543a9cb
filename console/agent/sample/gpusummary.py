"""Detail level "summary" for the GPU sampler: which samples are worth a slim frame nobody looks at closely.

At "summary" (op ``detail``: the console does not show this host) a slim frame is sent only when a device was
lost or came back, its process list changed, a GPU went from idle to busy or back, one of the host's overview
figures moved beyond its threshold since the last frame sent, or ``SUMMARY_EVERY`` seconds passed. The overview
figures are what the console shows of a host it does not show in full (``Overview``: the mean util and memory
use, the total memory and power, the hottest GPU: its table columns, sort keys and header counts), so one GPU's
jitter on a busy 8-GPU host does not cost a frame a second that nobody sees.
"""

from __future__ import annotations

from typing import Any, Iterable, List, NamedTuple, Optional

from ..wire.protocol import GpuDevice

# A frame when an overview figure moved more than this since the last frame sent (or SUMMARY_EVERY passed):
SUMMARY_EVERY = 5.0
SUMMARY_UTIL = 5  # points of the mean util / mean mem_util
SUMMARY_MEM = 0.01  # of the host's GPU memory
SUMMARY_TEMP = 2  # degrees C of the hottest GPU
SUMMARY_POWER = 0.05  # of the last total power sent
IDLE_UTIL = 5  # % at or under which the console counts a GPU idle (console/core/frame_handlers.py IDLE_UTIL)
BUSY_UTIL = 10  # % from which it counts a GPU busy (console/core/totals.py BUSY_UTIL)


class SummaryGate:
    """The last frame sent (its devices, when, their overview) and whether a sample is worth the next one."""

    def __init__(self) -> None:
        self._sent_records: Optional[List[GpuDevice]] = None  # the devices of the last frame sent
        self._sent_at = 0.0
        self._sent_overview: Optional[Overview] = None  # their overview, once worked out (``due``)
        self._overview: Optional[Overview] = None  # this sample's, if ``due`` made it (``begin`` resets it)

    def begin(self) -> None:
        """A new sample: the overview ``due`` works out is this sample's."""
        self._overview = None

    def due(self, records: List[GpuDevice], now: float, mem_totals: Iterable[Optional[int]]) -> bool:
        """Is this sample worth a frame (a device lost or back, its processes changed, a GPU changed class, an
        overview figure moved beyond its threshold since the last frame sent, or SUMMARY_EVERY passed)?

        ``mem_totals``: each device's memory total (the threshold for memory used is a share of their sum)."""
        sent = self._sent_records
        if sent is None or len(sent) != len(records) or now - self._sent_at >= SUMMARY_EVERY:
            return True
        for old, new in zip(sent, records):
            if bool(old.get("lost")) != bool(new.get("lost")) or util_class(old) != util_class(new):
                return True
            if [p.get("pid") for p in old.get("procs") or ()] != [p.get("pid") for p in new.get("procs") or ()]:
                return True
        memory = sum(t for t in mem_totals if t)
        was = self._sent_overview = self._sent_overview or overview(sent)
        now_ = self._overview = overview(records)
        return (moved(was.util, now_.util, SUMMARY_UTIL) or moved(was.mem_util, now_.mem_util, SUMMARY_UTIL)
                or moved(was.mem_used, now_.mem_used, memory * SUMMARY_MEM if memory else 1 << 20)
                or moved(was.power, now_.power, max(1.0, abs(was.power or 0.0) * SUMMARY_POWER))
                or moved(was.temp, now_.temp, SUMMARY_TEMP))

    def sent(self, records: List[GpuDevice], now: float) -> None:
        """A frame with ``records`` went out (at any detail level): what the next ``due`` compares with."""
        self._sent_records, self._sent_at, self._sent_overview = records, now, self._overview


class Overview(NamedTuple):
    """What the console shows of a host out of view, from its live devices: mean util, mean mem_util, memory
    used, total power, the hottest GPU's temperature; None where no device says."""

    util: Optional[float]
    mem_util: Optional[float]
    mem_used: Optional[float]
    power: Optional[float]
    temp: Optional[float]


def overview(records: List[GpuDevice]) -> Overview:
    """The ``Overview`` of ``records``."""
    live = [r for r in records if not r.get("lost")]

    def figures(key: str) -> List[float]:
        return [float(v) for v in (r.get(key) for r in live) if isinstance(v, (int, float))]

    util, mem_util, used, power, temp = (figures(k) for k in ("util", "mem_util", "mem_used", "power", "temp"))
    return Overview(sum(util) / len(util) if util else None, sum(mem_util) / len(mem_util) if mem_util else None,
                    sum(used) if used else None, sum(power) if power else None, max(temp) if temp else None)


def util_class(record: GpuDevice) -> int:
    """0 idle, 1 in between, 2 busy (the console's counts), -1 unknown."""
    util = record.get("util")
    if not isinstance(util, (int, float)):
        return -1
    return 0 if util <= IDLE_UTIL else 2 if util >= BUSY_UTIL else 1


def moved(old: Any, new: Any, limit: float) -> bool:
    """A figure appeared, went away, or changed by more than ``limit``."""
    if old is None or new is None:
        return (old is None) != (new is None)
    return abs(float(new) - float(old)) > limit
