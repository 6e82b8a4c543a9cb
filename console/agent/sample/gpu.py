"""GPU sampler over NVML (``pynvml`` from nvidia-ml-py, or ``nvml_sim`` when the config simulates).

Every NVML call goes through ``nvml.Nvml.call``: a field the device does not support comes back as ``None``;
an error that means the device itself is gone raises ``DeviceError`` so that one device is marked lost while
the others go on.  A machine without the driver (library not found, driver not loaded, pynvml not importable)
is state ``no_gpu``: one frame, then at most one a minute.

The fan and the memory clock move slowly: they are read every ``SLOW_FIELDS_EVERY`` s (and for full frames and
a diagnosis's fresh sample), the last reading repeated between; the rest is read every sample.

Frames stay small: the static fields (name, uuid, mem_total, power_limit, and the frame's ``driver``
and ``simulated``) travel only in ``full`` frames (the first one, every 60 s, and when a device comes
back).  In the other frames of state ``ok`` a healthy device's record leaves out what a consumer already
knows or can take as the default: ``lost`` (false), ``error`` (null), any field that is null, and
``procs`` when that device's list is the same as in the previous frame (consumers keep the last one).
A lost device's record is always complete.  Watts are rounded to 0.1 W.

Processes: NVML's pids are the host's; ``gpumap.PidMapper`` maps them onto this ``/proc`` (checked against the
/dev/nvidiaN fds, N = the device's minor number; the directory is config ``gpu.dev_dir``), and the frame says
``pid_ns`` (full frames) and ``mapping`` (full frames and when it changes).  A MIG-enabled GPU's record has
``mig``: its instances (profile, memory, processes; ``gpumig.py``), sent in slim frames only when they changed.
The driver going away while the agent runs (NVML's "Driver Not Loaded" / "Library Not Found" from a device call)
is state ``no_gpu`` again, NVML initialized anew after ``gpu.lost_retry`` seconds (as a lost device is re-probed).

At detail level "summary" (``summary = True``, op ``detail``: the console does not show this host) a slim frame
is sent only when it is worth one (``gpusummary.SummaryGate.due``: a device lost or back, processes or a GPU's
idle/busy class changed, an overview figure moved, or ``SUMMARY_EVERY`` passed); NVML is still read every sample.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Deque, Dict, List, Optional, Tuple, cast

from ..wire.frames import (
    FULL_EVERY,
    LOST_RETRY,
    STATE_REPEAT,
    gpu_frame,
    gpu_record,
    lost_gpu_record,
    slim_gpu_frame,
    slim_gpu_record,
    sum_memory_by_pid,
    with_static,
)
from ..wire.protocol import GpuDevice, GpuHealth, GpuMig, GpuProc
from .gpuhealth import DeviceHealth, HealthReader
from .gpumap import PidMapper
from .gpumig import MigInstance, mig_instances, remap, sample_mig
from .gpusummary import SummaryGate
from .gpuxid import XidEvent, XidWatcher
from .nvml import (
    NO_DRIVER_CODES,
    DeviceError,
    NoDriver,
    Nvml,
    as_int,
    as_text,
    as_watts,
    describe,
    gpu_procs,
    load_nvml,
)

# The frame rules (FULL_EVERY, LOST_RETRY, ...) are shared with agentless mode (wire/frames.py); LOST_RETRY is
# read as this module's global (a test shortens it).
SLOW_FIELDS_EVERY = 5.0  # seconds between readings of the fan and the memory clock (they move slowly)
POWER_WINDOW = 60  # samples of (util, power) kept per device for the diagnosis
BUSY_UTIL = 90  # % at or above which a sample counts toward the card's busy draw


class _Device:
    """One GPU as the sampler knows it: its handle, static fields, state and what was last sent of it."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.handle: Any = None
        self.lost = False
        self.error: Optional[str] = None
        self.retry_at = 0.0
        self.static: Optional[Dict[str, Any]] = None
        self.unsupported: set = set()  # NVML functions that said "not supported" (until next full frame)
        self.minor: Optional[int] = None  # /dev/nvidiaN (None: unknown; any /dev/nvidia device then counts)
        self.procs: List[GpuProc] = []
        self.sent_procs: Optional[List[GpuProc]] = None  # procs as the last frame carried them
        self.mig: Optional[List[MigInstance]] = None  # MIG instances: (index, handle, static)
        self.sent_mig: Optional[List[GpuMig]] = None
        self.health = DeviceHealth()  # ECC, rows, clock events, PCIe... (gpuhealth.py)
        self.sent_health: Optional[GpuHealth] = None
        # (util %, watts) of the last POWER_WINDOW samples and the most it drew while busy: what the diagnosis needs
        # to tell "util pinned at 100 % with power far below its busy draw" (a stuck collective)
        self.power_window: Deque[Tuple[Optional[int], Optional[float]]] = deque(maxlen=POWER_WINDOW)
        self.busy_power: Optional[float] = None
        self.slow_at = -1e9  # when the fan and the memory clock were last read (monotonic)
        self.fan: Any = None
        self.mem_clock: Any = None


class GpuSampler:
    """Samples every GPU once per call; ``sample()`` returns the ``gpu`` frame fields or None."""

    def __init__(self, config: Dict[str, Any], module: Any = None) -> None:
        self.config = config
        if module is not None:
            self._module, self.simulated, reason = module, False, None
        else:
            self._module, self.simulated, reason = load_nvml(config)
        self.nvml: Optional[Nvml] = Nvml(self._module) if self._module is not None else None
        self.state = "no_gpu"
        self.message: Optional[str] = reason
        self.driver: Optional[str] = None
        self.devices: List[_Device] = []
        self._last_records: Optional[List[GpuDevice]] = None
        self._initialized = False
        self._next_full = 0.0
        self._next_state_frame = 0.0
        self._next_init = 0.0
        self._mem_by_pid: Dict[int, Optional[int]] = {}
        gpu_config = config.get("gpu") or {}
        retry = gpu_config.get("lost_retry")
        self.lost_retry: Optional[float] = float(retry) if isinstance(retry, (int, float)) else None
        self.mapper = PidMapper(gpu_config.get("dev_dir"), trust_unverified=self.simulated)
        self._sent_mapping: Optional[str] = None
        self.summary = False  # detail level "summary": slim frames only when ``SummaryGate.due``
        self._gate = SummaryGate()
        self.health = HealthReader(self.nvml) if self.nvml is not None else None
        self.xids = XidWatcher(self.nvml) if self.nvml is not None else None
        self._xid_queue: List[XidEvent] = []  # events for the loop to send (``take_xids``) before the gpu frame
        self.xid_history: Deque[XidEvent] = deque(maxlen=64)  # every Xid this agent knows of (the diagnosis's)
        self._register_due = False
        self._earlier_due = False
        self.fresh = False  # this sample reads the health counters again (a diagnosis asked: Agent.fresh_sample)
        self._init()

    def set_xid_log(self, path: Optional[str]) -> None:
        """Where this host's Xids are kept across agents (``gpuxid.py``); the earlier ones are sent again."""
        if self.xids is not None and path:
            self.xids.log_path = path
            self._earlier_due = True  # sent at the first poll: only those of the GPUs this host has now (uuid)

    def take_xids(self) -> List[XidEvent]:
        """The Xid events not sent yet (``xid`` frames, sent before the gpu frame of the same sample)."""
        out, self._xid_queue = self._xid_queue, []
        return out

    @property
    def _retry(self) -> float:
        """Seconds before a lost device (or a driver that went away) is tried again: ``gpu.lost_retry``."""
        return LOST_RETRY if self.lost_retry is None else self.lost_retry

    def features(self) -> Dict[str, Any]:
        """The hello's GPU fields beyond ``gpu``: ``pid_ns`` and ``gpu_mapping``."""
        return {"pid_ns": self.mapper.pid_ns, "gpu_mapping": self.mapper.mapping}

    # -- init / shutdown ----------------------------------------------------------------------
    def _init(self) -> None:
        self._next_init = time.monotonic() + STATE_REPEAT
        if self.nvml is None:
            self.state = "no_gpu"
            return
        mod = self.nvml.module
        try:
            mod.nvmlInit()
        except self.nvml.error_class as exc:
            code = getattr(exc, "value", None)
            self.state = "no_gpu" if code in NO_DRIVER_CODES else "error"
            self.message = describe(exc)
            return
        except OSError as exc:
            self.state, self.message = "no_gpu", "NVML not loadable: %s" % exc
            return
        except Exception as exc:
            self.state, self.message = "error", describe(exc)
            return
        self._initialized = True
        try:
            self.driver = as_text(self.nvml.call("nvmlSystemGetDriverVersion"))
            count = self.nvml.call("nvmlDeviceGetCount")
        except DeviceError as exc:
            self.state, self.message = "no_gpu" if isinstance(exc, NoDriver) else "error", str(exc)
            return
        if not count:
            self.state, self.message = "no_gpu", "NVIDIA driver present but no devices"
            return
        self.devices = [_Device(i) for i in range(int(count))]
        self.state, self.message = "ok", None
        self._next_full = 0.0

    def close(self) -> None:
        if self.xids is not None:
            self.xids.close()
        if self._initialized and self.nvml is not None:
            try:
                self.nvml.module.nvmlShutdown()
            except Exception:
                pass
            self._initialized = False

    # -- sampling -----------------------------------------------------------------------------
    def memory_by_pid(self) -> Dict[int, Optional[int]]:
        """GPU memory per pid (summed over devices) from the last sample; None = on a GPU, amount unknown."""
        return dict(self._mem_by_pid)

    def sample(self) -> Optional[Dict[str, Any]]:
        now = time.monotonic()
        self._gate.begin()
        if self.state != "ok":
            if not self._initialized and now >= self._next_init and self.nvml is not None:
                self._init()
                if self.state == "ok":
                    return self.sample()
            if now < self._next_state_frame:
                return None
            self._next_state_frame = now + STATE_REPEAT
            return self._frame(False, [])
        full = now >= self._next_full
        records: List[GpuDevice] = []
        for dev in self.devices:
            if dev.lost and now < dev.retry_at:
                records.append(lost_gpu_record(dev.index, dev.error))
                continue
            was_lost = dev.lost or dev.static is None
            try:
                record = self._sample_device(dev, full or was_lost)
            except NoDriver as exc:
                return self._driver_gone(str(exc), now)
            except DeviceError as exc:
                dev.lost, dev.error, dev.retry_at, dev.handle = True, str(exc), now + self._retry, None
                dev.procs, dev.mig, dev.health, dev.sent_health = [], None, DeviceHealth(), None
                if self.xids is not None:
                    self.xids.forget(dev.index)
                records.append(lost_gpu_record(dev.index, dev.error))
                continue
            if was_lost and not full:  # a device that came (back): everyone gets static fields again
                full = True
            dev.lost, dev.error = False, None
            records.append(record)
        self._map_processes(records)
        self._poll_xids()
        if full:
            self._next_full = now + FULL_EVERY
            for dev, record in zip(self.devices, records):
                with_static(record, dev.static)
                dev.unsupported.clear()
        self._mem_by_pid = sum_memory_by_pid(dev.procs for dev in self.devices)
        self._last_records = records
        totals = ((dev.static or {}).get("mem_total") for dev in self.devices)
        health_moved = any(rec.get("health") != dev.sent_health for dev, rec in zip(self.devices, records)
                           if not rec.get("lost"))
        if self.summary and not full and not health_moved and not self._gate.due(records, now, totals):
            return None  # nothing sent: the next slim frame is still relative to the last one sent
        self._gate.sent(records, now)
        if full:
            for dev, record in zip(self.devices, records):
                dev.sent_procs, dev.sent_mig, dev.sent_health = record["procs"], record.get("mig"), record.get("health")
            self._sent_mapping = self.mapper.mapping
            return self._frame(True, records)
        slim = []
        for dev, record in zip(self.devices, records):
            slim.append(slim_gpu_record(record, dev.sent_procs, dev.sent_mig, dev.sent_health))
            dev.sent_procs, dev.sent_mig, dev.sent_health = record["procs"], record.get("mig"), record.get("health")
        mapping = self.mapper.mapping
        changed, self._sent_mapping = mapping != self._sent_mapping, mapping
        return slim_gpu_frame(slim, mapping if changed else None)

    def _poll_xids(self) -> None:
        """Register devices that got a handle since, then take the Xid events NVML queued (never blocks)."""
        if self.xids is None:
            return
        if self._register_due:
            self._register_due = False
            self.xids.register([(dev.index, dev.handle) for dev in self.devices if not dev.lost])
        uuids = {dev.index: (dev.static or {}).get("uuid") for dev in self.devices}
        if self._earlier_due:
            self._earlier_due = False
            here = {u for u in uuids.values() if u}
            earlier = [e for e in self.xids.earlier() if e.get("uuid") in here]  # a GPU swapped out: not its Xids
            self._xid_queue[:0] = earlier
            self.xid_history.extendleft(reversed(earlier))
        if self.xids.registered:
            events = self.xids.poll(uuids)
            self._xid_queue.extend(events)
            self.xid_history.extend(events)

    def _driver_gone(self, message: str, now: float) -> Dict[str, Any]:
        """A device call said the driver is gone: state no_gpu, NVML initialized again after ``_retry`` s."""
        self.close()
        self.state, self.message = "no_gpu", message
        self.devices, self._last_records, self._mem_by_pid = [], None, {}
        self._next_init = now + self._retry
        self._next_state_frame = now + STATE_REPEAT
        return self._frame(False, [])

    def _map_processes(self, records: List[GpuDevice]) -> None:
        """NVML's entries (host pids) as local processes, per device and per MIG instance (gpumap.py)."""
        live = [(dev, rec) for dev, rec in zip(self.devices, records) if not rec.get("lost")]
        if not any(dev.procs for dev, _rec in live):
            return
        mapped = self.mapper.map([(dev.minor, dev.procs) for dev, _rec in live])
        for (dev, rec), procs in zip(live, mapped):
            if procs is dev.procs:
                continue
            for inst in rec.get("mig") or ():
                inst["procs"] = remap(inst.get("procs") or [], procs)
            dev.procs = rec["procs"] = procs

    def last_sample(self) -> Optional[Dict[str, Any]]:
        """The latest sample as a full frame (static fields merged in), for diagnosis; no NVML calls."""
        if self.state != "ok":
            return self._frame(True, [])
        records = self._last_records
        if records is None:
            return None
        merged: List[GpuDevice] = []
        for dev, record in zip(self.devices, records):
            full_record: Dict[str, Any] = {**(dev.static or {}), **record}  # the record's fields win
            full_record["power_tell"] = {"busy_power": dev.busy_power,
                                         "recent": [list(pair) for pair in dev.power_window]}
            merged.append(cast(GpuDevice, full_record))
        return self._frame(True, merged)

    def _frame(self, full: bool, devices: List[GpuDevice]) -> Dict[str, Any]:
        return gpu_frame(self.state, self.simulated, self.driver, self.message, full, devices,
                         pid_ns=self.mapper.pid_ns, mapping=self.mapper.mapping)

    def _q(self, dev: _Device, name: str, *args: Any) -> Any:
        if name in dev.unsupported:
            return None
        assert self.nvml is not None
        value = self.nvml.call(name, dev.handle, *args)
        if value is None:
            dev.unsupported.add(name)
        return value

    def _sample_device(self, dev: _Device, static_too: bool) -> GpuDevice:
        nvml = self.nvml
        assert nvml is not None
        mod = nvml.module
        if dev.handle is None:
            handle = nvml.call("nvmlDeviceGetHandleByIndex", dev.index)
            if handle is None:
                raise DeviceError("no handle for device %d" % dev.index)
            dev.handle = handle
            dev.minor = as_int(nvml.call("nvmlDeviceGetMinorNumber", handle))
            self._register_due = True
        util = self._q(dev, "nvmlDeviceGetUtilizationRates")
        meminfo = self._q(dev, "nvmlDeviceGetMemoryInfo")
        clock_sm = getattr(mod, "NVML_CLOCK_SM", 1)
        clock_mem = getattr(mod, "NVML_CLOCK_MEM", 2)
        sm = nvml.call("nvmlDeviceGetClockInfo", dev.handle, clock_sm)
        now = time.monotonic()
        if static_too or self.fresh or now - dev.slow_at >= SLOW_FIELDS_EVERY:
            dev.slow_at = now
            dev.mem_clock = nvml.call("nvmlDeviceGetClockInfo", dev.handle, clock_mem)
            dev.fan = self._q(dev, "nvmlDeviceGetFanSpeed")
        raw_procs = None if "procs" in dev.unsupported else nvml.compute_processes(dev.handle)
        if raw_procs is None:
            dev.unsupported.add("procs")
        procs = gpu_procs(raw_procs)
        if static_too or dev.static is None:
            dev.mig = mig_instances(nvml, dev.handle)
        mig = sample_mig(nvml, dev.mig) if dev.mig else None
        if mig is not None and not procs:  # a parent that does not list its instances' processes
            procs = [p for inst in mig for p in inst.get("procs") or []]
        dev.procs = procs
        record = gpu_record(
            dev.index,
            util=as_int(getattr(util, "gpu", None)) if util is not None else None,
            mem_util=as_int(getattr(util, "memory", None)) if util is not None else None,
            mem_used=as_int(getattr(meminfo, "used", None)) if meminfo is not None else None,
            temp=as_int(self._q(dev, "nvmlDeviceGetTemperature", getattr(mod, "NVML_TEMPERATURE_GPU", 0))),
            power=as_watts(self._q(dev, "nvmlDeviceGetPowerUsage")),
            sm_clock=as_int(sm),
            mem_clock=as_int(dev.mem_clock),
            fan=as_int(dev.fan),
            procs=procs,
        )
        if mig is not None:
            record["mig"] = mig
        if self.health is not None:
            health = self.health.read(dev.handle, dev.health, now, force_slow=self.fresh)
            if health is not None:
                record["health"] = health
        util_now, power_now = record["util"], record["power"]
        dev.power_window.append((util_now, power_now))
        if util_now is not None and power_now is not None and util_now >= BUSY_UTIL:
            dev.busy_power = power_now if dev.busy_power is None else max(dev.busy_power, power_now)
        if static_too or dev.static is None:
            dev.static = {
                "name": as_text(nvml.call("nvmlDeviceGetName", dev.handle)),
                "uuid": as_text(nvml.call("nvmlDeviceGetUUID", dev.handle)),
                "mem_total": as_int(getattr(meminfo, "total", None)) if meminfo is not None else None,
                "power_limit": as_watts(nvml.call("nvmlDeviceGetEnforcedPowerLimit", dev.handle)),
            }
        return record
