"""GPU health through NVML (issue 30): ECC, retired pages, remapped rows, clock event reasons, PCIe, pstate.

``HealthReader.read`` gives one device's ``health`` record (``wire/protocol.py`` ``GpuHealth``). Every call goes
through ``Nvml.call``: ``NOT_SUPPORTED`` / ``NO_PERMISSION`` (consumer cards, MIG, containers) come back as None,
the field is left out, and the group is not asked again while the device keeps its handle. Counters change
slowly and cost a dozen calls: they are read every ``SLOW_EVERY`` s (and at the first sample, so a one-shot
``status`` has them); the clock event reasons (one call) every sample, with the wall time each became active.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Set, Tuple

from ..wire.protocol import GpuHealth
from .nvml import Nvml, as_int

SLOW_EVERY = 10.0  # seconds between readings of the counters (ECC, pages, rows, PCIe, pstate, NVLink)
NVLINK_MAX = 18  # links asked at most (NVML_NVLINK_MAX_LINKS is 18 up to Hopper)

# The clock event reasons that mean trouble (NVML bits); idle, application clocks, sync boost are normal.
CLOCK_REASONS: Tuple[Tuple[int, str], ...] = (
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"),
)


_PCIE = (("gen", "nvmlDeviceGetCurrPcieLinkGeneration"), ("width", "nvmlDeviceGetCurrPcieLinkWidth"),
         ("max_gen", "nvmlDeviceGetMaxPcieLinkGeneration"), ("max_width", "nvmlDeviceGetMaxPcieLinkWidth"),
         ("replays", "nvmlDeviceGetPcieReplayCounter"))


class DeviceHealth:
    """What the reader keeps of one device: the last counters, unsupported groups, when reasons began."""

    __slots__ = ("next_slow", "since", "slow", "unsupported")

    def __init__(self) -> None:
        self.next_slow = 0.0
        self.slow: Dict[str, Any] = {}
        self.unsupported: Set[str] = set()
        self.since: Dict[str, float] = {}  # clock event reason -> wall time it became active (as seen here)


class HealthReader:
    """Reads the health fields of devices through one ``Nvml``."""

    def __init__(self, nvml: Nvml) -> None:
        self.nvml = nvml

    def read(self, handle: Any, dh: DeviceHealth, now: float, force_slow: bool = False) -> Optional[GpuHealth]:
        """The device's health record (None when it supports none of it); ``now`` is monotonic."""
        if force_slow or now >= dh.next_slow:
            dh.slow = self._slow(handle, dh)
            dh.next_slow = now + SLOW_EVERY
        out: Dict[str, Any] = dict(dh.slow)
        reasons = self._clock_events(handle, dh)
        if reasons is not None:
            out["clock_events"] = reasons
            if reasons:
                out["clock_since"] = {name: dh.since[name] for name in reasons}
        return out or None  # type: ignore[return-value]

    def _get(self, handle: Any, dh: DeviceHealth, group: str, name: str, *args: Any) -> Any:
        if group in dh.unsupported:
            return None
        value = self.nvml.call(name, handle, *args)
        if value is None:
            dh.unsupported.add(group)
        return value

    def _clock_events(self, handle: Any, dh: DeviceHealth) -> Optional[List[str]]:
        name = "nvmlDeviceGetCurrentClocksEventReasons"
        if not self.nvml.has(name):  # nvidia-ml-py before 12.535 (driver API before the rename)
            name = "nvmlDeviceGetCurrentClocksThrottleReasons"
        mask = as_int(self._get(handle, dh, "clock_events", name))
        if mask is None:
            return None
        active = [label for bit, label in CLOCK_REASONS if mask & bit]
        wall = round(time.time(), 1)
        for label in active:
            dh.since.setdefault(label, wall)
        for label in list(dh.since):
            if label not in active:
                del dh.since[label]
        return active

    def _slow(self, handle: Any, dh: DeviceHealth) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        self._ecc(handle, dh, out)
        self._pages_and_rows(handle, dh, out)
        self._pcie(handle, dh, out)
        pstate = as_int(self._get(handle, dh, "pstate", "nvmlDeviceGetPerformanceState"))
        if pstate is not None and pstate < 32:  # 32: NVML_PSTATE_UNKNOWN
            out["pstate"] = pstate
        persistence = self._get(handle, dh, "persistence", "nvmlDeviceGetPersistenceMode")
        if persistence is not None:
            out["persistence"] = bool(persistence)
        self._nvlink(handle, dh, out)
        return out

    def _ecc(self, handle: Any, dh: DeviceHealth, out: Dict[str, Any]) -> None:
        mode = self._get(handle, dh, "ecc", "nvmlDeviceGetEccMode")
        if mode is None:
            return
        current = mode[0] if isinstance(mode, (list, tuple)) else mode
        out["ecc_mode"] = bool(current)
        if not current:
            return  # counters are not kept while ECC is off
        for key, error_type, counter in (("ecc_corrected", 0, 0), ("ecc_uncorrected", 1, 0),
                                          ("ecc_corrected_agg", 0, 1), ("ecc_uncorrected_agg", 1, 1)):
            value = as_int(self.nvml.call("nvmlDeviceGetTotalEccErrors", handle, error_type, counter))
            if value is not None:
                out[key] = value

    def _pages_and_rows(self, handle: Any, dh: DeviceHealth, out: Dict[str, Any]) -> None:
        if "retired_pages" not in dh.unsupported:
            counts = [self.nvml.call("nvmlDeviceGetRetiredPages", handle, cause) for cause in (0, 1)]
            if all(c is None for c in counts):
                dh.unsupported.add("retired_pages")
            else:
                pending = self.nvml.call("nvmlDeviceGetRetiredPagesPendingStatus", handle)
                pages: Dict[str, Any] = {"count": sum(len(c) for c in counts if c is not None)}
                if pending is not None:
                    pages["pending"] = bool(pending)
                out["retired_pages"] = pages
        rows = self._get(handle, dh, "remapped_rows", "nvmlDeviceGetRemappedRows")
        if isinstance(rows, (list, tuple)) and len(rows) == 4:
            out["remapped_rows"] = {"corrected": as_int(rows[0]) or 0, "uncorrected": as_int(rows[1]) or 0,
                                    "pending": bool(rows[2]), "failure": bool(rows[3])}

    def _pcie(self, handle: Any, dh: DeviceHealth, out: Dict[str, Any]) -> None:
        if "pcie" in dh.unsupported:
            return
        pcie: Dict[str, int] = {}
        for key, name in _PCIE:
            value = as_int(self.nvml.call(name, handle))
            if value is not None:
                pcie[key] = value
        if pcie:
            out["pcie"] = pcie
        else:
            dh.unsupported.add("pcie")

    def _nvlink(self, handle: Any, dh: DeviceHealth, out: Dict[str, Any]) -> None:
        if "nvlink" in dh.unsupported:
            return
        up = down = 0
        for link in range(NVLINK_MAX):
            state = self.nvml.call("nvmlDeviceGetNvLinkState", handle, link)
            if state is None:
                break
            if state:
                up += 1
            else:
                down += 1
        if up or down:
            out["nvlink"] = {"up": up, "down": down}
        else:
            dh.unsupported.add("nvlink")
