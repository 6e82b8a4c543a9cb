"""GPU sampler over NVML (``pynvml`` from nvidia-ml-py, or ``nvml_sim`` when the config simulates).

Every NVML call goes through ``Nvml.call`` (the way nvitop's ``libnvml`` wraps pynvml): a field the
device does not support comes back as ``None``; an error that means the device itself is gone
(GPU is lost, Unknown, Uninitialized, reset required...) raises ``DeviceError`` so that one device is
marked lost while the others go on.  A machine without the driver (library not found, driver not
loaded, pynvml not importable) is state ``no_gpu``: one frame, then at most one a minute.

Frames stay small: the static fields (name, uuid, mem_total, power_limit, and the frame's ``driver``
and ``simulated``) travel only in ``full`` frames (the first one, every 60 s, and when a device comes
back).  In the other frames of state ``ok`` a healthy device's record leaves out what a consumer already
knows or can take as the default: ``lost`` (false), ``error`` (null), any field that is null, and
``procs`` when that device's list is the same as in the previous frame (consumers keep the last one).
A lost device's record is always complete.  Watts are rounded to 0.1 W.

Processes: NVML's pids are the host's; ``gpumap.PidMapper`` maps them onto this ``/proc`` (checked against the
/dev/nvidiaN fds, N = the device's minor number; the directory is config ``gpu.dev_dir``), and the frame says
``pid_ns`` (full frames) and ``mapping`` (full frames and when it changes).  A MIG-enabled GPU's record has
``mig``: its instances (profile, memory, processes), sent in slim frames only when they changed.  The driver
going away while the agent runs (NVML's "Driver Not Loaded" / "Library Not Found" from a device call) is state
``no_gpu`` again, NVML initialized anew after ``gpu.lost_retry`` seconds (as a lost device is re-probed).

At detail level "summary" (``summary = True``, op ``detail``: the console does not show this host) a slim frame
is sent only when ``_summary_due``: a device was lost or came back, its process list changed, a GPU went from idle
to busy or back, one of the host's overview figures moved beyond its threshold since the last frame sent, or
SUMMARY_EVERY seconds passed; NVML is still read every sample. The overview figures are what the console shows
of a host it does not show in full (``overview``: the mean util and memory use, the total memory and power, the
hottest GPU: its table columns, sort keys and header counts), so one GPU's jitter on a busy 8-GPU host does not
cost a frame a second that nobody sees.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple, cast

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
from ..wire.protocol import GpuDevice, GpuMig, GpuProc
from .gpumap import PidMapper

# FULL_EVERY, LOST_RETRY, STATE_REPEAT and sum_memory_by_pid are shared with agentless mode (frames.py); they stay
# importable from here, and LOST_RETRY is read as this module's global (a test shortens it).

# Error codes (same values in pynvml and nvml_sim) after which a field is just "not available".
_FIELD_CODES = {
    2,  # INVALID_ARGUMENT
    3,  # NOT_SUPPORTED
    4,  # NO_PERMISSION
    6,  # NOT_FOUND
    7,  # INSUFFICIENT_SIZE
    10,  # TIMEOUT
    13,  # FUNCTION_NOT_FOUND
    21,  # NO_DATA
    24,  # FREQ_NOT_SUPPORTED
    25,  # ARGUMENT_VERSION_MISMATCH
    26,  # DEPRECATED
    27,  # NOT_READY
}
_NO_DRIVER_CODES = {9, 12}  # DRIVER_NOT_LOADED, LIBRARY_NOT_FOUND
# Detail level "summary" (an instance the console does not show): a frame only when an overview figure moved more
# than this since the last frame sent, a GPU changed class, a device was lost or came back, its processes changed,
# or SUMMARY_EVERY passed.
SUMMARY_EVERY = 5.0
SUMMARY_UTIL = 5  # points of the mean util / mean mem_util
SUMMARY_MEM = 0.01  # of the host's GPU memory
SUMMARY_TEMP = 2  # degrees C of the hottest GPU
SUMMARY_POWER = 0.05  # of the last total power sent
IDLE_UTIL = 5  # % at or under which the console counts a GPU idle (console/core/state.py IDLE_UTIL)
BUSY_UTIL = 10  # % from which it counts a GPU busy (console/core/state.py BUSY_UTIL)
_NOT_AVAILABLE = (1 << 64) - 1  # NVML_VALUE_NOT_AVAILABLE_ulonglong


class DeviceError(Exception):
    """An NVML error that puts the whole device out of reach (it is reported as lost)."""


class NoDriver(DeviceError):
    """The driver (or library) went away: every device is out of reach, state ``no_gpu``."""


def _device_error(exc: BaseException) -> DeviceError:
    code = getattr(exc, "value", None)
    return NoDriver(describe(exc)) if code in _NO_DRIVER_CODES else DeviceError(describe(exc))


class Nvml:
    """A pynvml-like module plus one ``call`` helper that maps NVML errors."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.error_class = getattr(module, "NVMLError", Exception)
        self._missing: set = set()

    def has(self, name: str) -> bool:
        return name not in self._missing and hasattr(self.module, name)

    def call(self, name: str, *args: Any) -> Any:
        """Call ``module.name(*args)``: ``None`` when unsupported, ``DeviceError`` when the device is gone."""
        fn: Optional[Callable[..., Any]] = getattr(self.module, name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except self.error_class as exc:
            code = getattr(exc, "value", None)
            if code in _FIELD_CODES:
                return None
            raise _device_error(exc) from None
        except (AttributeError, TypeError, ValueError):
            return None  # an older pynvml without this function/struct
        except Exception as exc:
            if type(exc).__name__ == "NVMLLibraryMismatchError":
                return None
            raise

    def compute_processes(self, handle: Any) -> Optional[List[Any]]:
        """Compute processes via the newest variant this pynvml and driver offer (v3, v2, v1)."""
        for name in (
            "nvmlDeviceGetComputeRunningProcesses_v3",
            "nvmlDeviceGetComputeRunningProcesses_v2",
            "nvmlDeviceGetComputeRunningProcesses",
        ):
            if not self.has(name):
                continue
            fn = getattr(self.module, name)
            try:
                return list(fn(handle))
            except self.error_class as exc:
                code = getattr(exc, "value", None)
                if code == 13:  # FUNCTION_NOT_FOUND: the driver predates this variant
                    self._missing.add(name)
                    continue
                if code in _FIELD_CODES:
                    return None
                raise _device_error(exc) from None
            except Exception as exc:
                if type(exc).__name__ == "NVMLLibraryMismatchError":
                    self._missing.add(name)
                    continue
                raise
        return None


def describe(exc: BaseException) -> str:
    name = type(exc).__name__
    text = str(exc) or name
    return text if name in ("NVMLError", "Exception") else "%s (%s)" % (text, name)


def _text(value: Any) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _int(value: Any) -> Optional[int]:
    if value is None:
        return None
    try:
        out = int(value)
    except (TypeError, ValueError):
        return None
    if out >= _NOT_AVAILABLE or out < 0 or out == 0xFFFFFFFF:
        return None
    return out


def _watts(milliwatts: Any) -> Optional[float]:
    value = _int(milliwatts)
    return None if value is None else round(value / 1000.0, 1)


def load_nvml(config: Dict[str, Any]) -> tuple[Optional[Any], bool, Optional[str]]:
    """The NVML module for this config: (module or None, simulated, reason when None)."""
    simulate = (config.get("gpu") or {}).get("simulate")
    if isinstance(simulate, dict):
        from . import nvml_sim

        nvml_sim.configure(simulate)
        return nvml_sim, True, None
    try:
        import pynvml
    except Exception as exc:  # ImportError, or a broken install
        return None, False, "pynvml not available: %s" % exc
    return pynvml, False, None


class _Device:
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
        self.mig: Optional[List[Tuple[int, Any, Dict[str, Any]]]] = None  # MIG instances: (index, handle, static)
        self.sent_mig: Optional[List[GpuMig]] = None


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
        self.summary = False  # detail level "summary": slim frames only on change (``_summary_due``)
        self._sent_records: Optional[List[GpuDevice]] = None  # the devices of the last frame sent
        self._sent_overview: Optional[Overview] = None  # their overview, once worked out (``_summary_due``)
        self._overview: Optional[Overview] = None  # this sample's, if ``_summary_due`` made it (``sample`` resets it)
        self._sent_at = 0.0
        self._init()

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
            self.state = "no_gpu" if code in _NO_DRIVER_CODES else "error"
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
            self.driver = _text(self.nvml.call("nvmlSystemGetDriverVersion"))
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
        self._overview = None  # this sample's, should ``_summary_due`` work it out (a full frame does not)
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
                dev.procs, dev.mig = [], None
                records.append(lost_gpu_record(dev.index, dev.error))
                continue
            if was_lost and not full:  # a device that came (back): everyone gets static fields again
                full = True
            dev.lost, dev.error = False, None
            records.append(record)
        self._map_processes(records)
        if full:
            self._next_full = now + FULL_EVERY
            for dev, record in zip(self.devices, records):
                with_static(record, dev.static)
                dev.unsupported.clear()
        self._mem_by_pid = sum_memory_by_pid(dev.procs for dev in self.devices)
        self._last_records = records
        if self.summary and not full and not self._summary_due(records, now):
            return None  # nothing sent: the next slim frame is still relative to the last one sent
        self._sent_records, self._sent_at, self._sent_overview = records, now, self._overview
        if full:
            for dev, record in zip(self.devices, records):
                dev.sent_procs, dev.sent_mig = record["procs"], record.get("mig")
            self._sent_mapping = self.mapper.mapping
            return self._frame(True, records)
        slim = []
        for dev, record in zip(self.devices, records):
            slim.append(slim_gpu_record(record, dev.sent_procs, dev.sent_mig))
            dev.sent_procs, dev.sent_mig = record["procs"], record.get("mig")
        mapping = self.mapper.mapping
        changed, self._sent_mapping = mapping != self._sent_mapping, mapping
        return slim_gpu_frame(slim, mapping if changed else None)

    def _summary_due(self, records: List[GpuDevice], now: float) -> bool:
        """At detail "summary": is this sample worth a frame (a device lost or back, its processes changed, a GPU
        changed class, an overview figure moved beyond its threshold since the last frame sent, or
        SUMMARY_EVERY passed)?"""
        sent = self._sent_records
        if sent is None or len(sent) != len(records) or now - self._sent_at >= SUMMARY_EVERY:
            return True
        for old, new in zip(sent, records):
            if bool(old.get("lost")) != bool(new.get("lost")) or _util_class(old) != _util_class(new):
                return True
            if [p.get("pid") for p in old.get("procs") or ()] != [p.get("pid") for p in new.get("procs") or ()]:
                return True
        totals = [(dev.static or {}).get("mem_total") for dev in self.devices]
        memory = sum(t for t in totals if t)
        was = self._sent_overview = self._sent_overview or overview(sent)
        now_ = self._overview = overview(records)
        return (_moved(was.util, now_.util, SUMMARY_UTIL) or _moved(was.mem_util, now_.mem_util, SUMMARY_UTIL)
                or _moved(was.mem_used, now_.mem_used, memory * SUMMARY_MEM if memory else 1 << 20)
                or _moved(was.power, now_.power, max(1.0, abs(was.power or 0.0) * SUMMARY_POWER))
                or _moved(was.temp, now_.temp, SUMMARY_TEMP))

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
                inst["procs"] = _remap(inst.get("procs") or [], procs)
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
            merged.append(cast(GpuDevice, {**(dev.static or {}), **record}))  # the record's fields win
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
            dev.minor = _int(nvml.call("nvmlDeviceGetMinorNumber", handle))
        util = self._q(dev, "nvmlDeviceGetUtilizationRates")
        meminfo = self._q(dev, "nvmlDeviceGetMemoryInfo")
        clock_sm = getattr(mod, "NVML_CLOCK_SM", 1)
        clock_mem = getattr(mod, "NVML_CLOCK_MEM", 2)
        sm = nvml.call("nvmlDeviceGetClockInfo", dev.handle, clock_sm)
        memclk = nvml.call("nvmlDeviceGetClockInfo", dev.handle, clock_mem)
        raw_procs = None if "procs" in dev.unsupported else nvml.compute_processes(dev.handle)
        if raw_procs is None:
            dev.unsupported.add("procs")
        procs = _gpu_procs(raw_procs)
        if static_too or dev.static is None:
            dev.mig = self._mig_instances(dev)
        mig = self._sample_mig(dev) if dev.mig else None
        if mig is not None and not procs:  # a parent that does not list its instances' processes
            procs = [p for inst in mig for p in inst.get("procs") or []]
        dev.procs = procs
        record = gpu_record(
            dev.index,
            util=_int(getattr(util, "gpu", None)) if util is not None else None,
            mem_util=_int(getattr(util, "memory", None)) if util is not None else None,
            mem_used=_int(getattr(meminfo, "used", None)) if meminfo is not None else None,
            temp=_int(self._q(dev, "nvmlDeviceGetTemperature", getattr(mod, "NVML_TEMPERATURE_GPU", 0))),
            power=_watts(self._q(dev, "nvmlDeviceGetPowerUsage")),
            sm_clock=_int(sm),
            mem_clock=_int(memclk),
            fan=_int(self._q(dev, "nvmlDeviceGetFanSpeed")),
            procs=procs,
        )
        if mig is not None:
            record["mig"] = mig
        if static_too or dev.static is None:
            dev.static = {
                "name": _text(nvml.call("nvmlDeviceGetName", dev.handle)),
                "uuid": _text(nvml.call("nvmlDeviceGetUUID", dev.handle)),
                "mem_total": _int(getattr(meminfo, "total", None)) if meminfo is not None else None,
                "power_limit": _watts(nvml.call("nvmlDeviceGetEnforcedPowerLimit", dev.handle)),
            }
        return record

    # -- MIG ------------------------------------------------------------------------------------------------
    def _mig_instances(self, dev: _Device) -> Optional[List[Tuple[int, Any, Dict[str, Any]]]]:
        """A MIG-enabled GPU's instances (index, handle, static fields); None when MIG is off or unsupported.

        Asked with the static fields (full frames). A MIG query that fails leaves the device as it is."""
        nvml = self.nvml
        assert nvml is not None
        try:
            mode = nvml.call("nvmlDeviceGetMigMode", dev.handle)
            if not mode or _int(mode[0]) != 1:
                return None
            count = _int(nvml.call("nvmlDeviceGetMaxMigDeviceCount", dev.handle)) or 0
            out = []
            for i in range(count):
                handle = nvml.call("nvmlDeviceGetMigDeviceHandleByIndex", dev.handle, i)
                if handle is None:  # an empty slot (NOT_FOUND)
                    continue
                name = _text(nvml.call("nvmlDeviceGetName", handle)) or ""
                meminfo = nvml.call("nvmlDeviceGetMemoryInfo", handle)
                out.append((i, handle, {
                    "profile": name.rpartition(" MIG ")[2] or None if " MIG " in name else None,
                    "uuid": _text(nvml.call("nvmlDeviceGetUUID", handle)),
                    "mem_total": _int(getattr(meminfo, "total", None)) if meminfo is not None else None,
                }))
        except NoDriver:
            raise
        except DeviceError:
            return None
        return out

    def _sample_mig(self, dev: _Device) -> Optional[List[GpuMig]]:
        """Each MIG instance's memory and processes (NVML's pids; mapped with the device's)."""
        nvml = self.nvml
        assert nvml is not None and dev.mig is not None
        out: List[GpuMig] = []
        for index, handle, static in dev.mig:
            try:
                meminfo = nvml.call("nvmlDeviceGetMemoryInfo", handle)
                procs = _gpu_procs(nvml.compute_processes(handle))
            except NoDriver:
                raise
            except DeviceError:  # the instance went away (reconfigured): look again at the next full frame
                meminfo, procs = None, []
            inst: GpuMig = {
                "index": index,
                "profile": static["profile"],
                "uuid": static["uuid"],
                "mem_total": static["mem_total"],
                "mem_used": _int(getattr(meminfo, "used", None)) if meminfo is not None else None,
                "procs": procs,
            }
            out.append(inst)
        return out


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


def _util_class(record: GpuDevice) -> int:
    """0 idle, 1 in between, 2 busy (the console's counts), -1 unknown."""
    util = record.get("util")
    if not isinstance(util, (int, float)):
        return -1
    return 0 if util <= IDLE_UTIL else 2 if util >= BUSY_UTIL else 1


def _moved(old: Any, new: Any, limit: float) -> bool:
    """A figure appeared, went away, or changed by more than ``limit``."""
    if old is None or new is None:
        return (old is None) != (new is None)
    return abs(float(new) - float(old)) > limit


def _gpu_procs(raw: Optional[List[Any]]) -> List[GpuProc]:
    """NVML process structs as ``[{pid, mem}]`` (NVML's pids)."""
    procs: List[GpuProc] = []
    for proc in raw or []:
        pid = _int(getattr(proc, "pid", None))
        if pid is not None:
            procs.append({"pid": pid, "mem": _int(getattr(proc, "usedGpuMemory", None))})
    return procs


def _remap(entries: List[GpuProc], device: List[GpuProc]) -> List[GpuProc]:
    """A MIG instance's NVML entries mapped as its GPU's were (``device``: the GPU's mapped entries)."""
    local: Dict[int, int] = {}  # NVML pid -> local pid
    groups: Dict[int, List[int]] = {}  # NVML pid -> its group's members
    for e in device:
        pid = e["pid"]
        if pid is not None:
            local[e.get("nvml_pid", pid)] = pid
        for nvml_pid in e.get("nvml_pids") or ():
            groups[nvml_pid] = e.get("group") or []
    out: List[GpuProc] = []
    grouped: List[GpuProc] = []
    for e in entries:
        pid = e["pid"]
        if pid is not None and pid in local:
            mapped: GpuProc = {"pid": local[pid], "mem": e["mem"]}
            if local[pid] != pid:
                mapped["nvml_pid"] = pid
            out.append(mapped)
        elif pid is not None and pid in groups:
            grouped.append(e)
        else:
            out.append({"pid": None, "mem": e["mem"], "nvml_pid": pid} if pid is not None else e)
    if grouped:
        mems = [e["mem"] for e in grouped]
        members = sorted({m for e in grouped for m in groups[cast(int, e["pid"])]})
        out.append({"pid": None, "mem": None if None in mems else sum(m or 0 for m in mems), "group": members,
                    "nvml_pids": sorted(cast(int, e["pid"]) for e in grouped)})
    return out
