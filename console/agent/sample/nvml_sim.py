"""A simulated NVML with the same API surface as ``pynvml`` (package nvidia-ml-py).

The GPU sampler imports this module instead of ``pynvml`` when the agent config has
``gpu.simulate`` set to a scenario dict.  It is the one fake of the GPU boundary in this project
(the demo fleet and the tests drive it), so it keeps nvidia-ml-py's names, types and error classes:
functions ``nvmlInit``, ``nvmlDeviceGetUtilizationRates`` ... return the same kinds of values
(ctypes structs with ``.gpu``/``.memory``, ``.total``/``.free``/``.used``; milliwatts; MHz;
``nvmlFriendlyObject`` process records with ``.pid``/``.usedGpuMemory``) and failures raise
``NVMLError(code)``, which ``__new__`` turns into the ``NVMLError_<Name>`` subclass exactly as pynvml does.
``tests/test_nvml_sim.py`` checks every ``nvml*``/``NVML*`` name here against the real module.

Scenario (``configure(scenario)``; the ``gpu.simulate`` dict)::

    {"gpus": 2, "name": "NVIDIA GeForce RTX 3090", "mem_total_mib": 24576, "power_limit_w": 350,
     "driver": "550.54.15", "uuid_seed": "demo-a", "jitter": true,
     "state_file": "/path/state.json" | null, "state": {...inline initial state...}}

State (JSON; the state file is re-read whenever its mtime/size changes; scenario processes write it,
see ``write_state``)::

    {"gpus": [{"load": 0..100, "mem_used_mib": 1200,            # or "mem_used" in bytes
               "processes": [{"pid": 123, "mem_mib": 20000}],   # or "mem" in bytes; null = unknown
               "not_supported": ["fan"]}, ...],                  # per GPU (optional)
     "failures": {"lost": [1], "unknown": [], "no_driver": false, "no_library": false,
                  "not_supported": ["fan", "power", ...],         # for every GPU
                  "function_not_found": ["nvmlDeviceGetComputeRunningProcesses_v3"]}}  # older driver

``failures`` keys are also accepted at the top level.  Field names for ``not_supported``: ``name``,
``uuid``, ``util``, ``mem``, ``temp``, ``power``, ``power_limit``, ``clocks`` (or ``sm_clock`` /
``mem_clock``), ``fan``, ``procs``.  A listed process whose pid is not alive (or a zombie) is dropped.
A GPU with no ``load`` given follows its processes (95 % when any is alive, else 0).
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import string
import sys
import threading
import time
from typing import Any, Dict, List, Optional

# ---------------------------------------------------------------------------------------------
# Constants (values identical to pynvml)
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
NVML_ERROR_FREQ_NOT_SUPPORTED = 24
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_DEPRECATED = 26
NVML_ERROR_NOT_READY = 27
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_INVALID_STATE = 29
NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30
NVML_ERROR_UNKNOWN = 999

NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_GPU_MAX = 1
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_CLOCK_VIDEO = 3
NVML_VALUE_NOT_AVAILABLE_ulonglong = ctypes.c_ulonglong(-1)
NVML_VALUE_NOT_AVAILABLE_uint = ctypes.c_uint(-1)


# ---------------------------------------------------------------------------------------------
# Errors, built the way pynvml builds them
class NVMLError(Exception):
    value: int  # the NVML return code, as pynvml's NVMLError carries it
    _valClassMapping: Dict[int, Any] = {}
    _errcode_to_string = {
        NVML_ERROR_UNINITIALIZED: "Uninitialized",
        NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
        NVML_ERROR_NOT_SUPPORTED: "Not Supported",
        NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
        NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
        NVML_ERROR_NOT_FOUND: "Not Found",
        NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
        NVML_ERROR_INSUFFICIENT_POWER: "Insufficient External Power",
        NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
        NVML_ERROR_TIMEOUT: "Timeout",
        NVML_ERROR_IRQ_ISSUE: "Interrupt Request Issue",
        NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
        NVML_ERROR_CORRUPTED_INFOROM: "Corrupted infoROM",
        NVML_ERROR_GPU_IS_LOST: "GPU is lost",
        NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
        NVML_ERROR_OPERATING_SYSTEM: "The operating system has blocked the request.",
        NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
        NVML_ERROR_MEMORY: "Insufficient Memory",
        NVML_ERROR_UNKNOWN: "Unknown Error",
    }

    def __new__(typ, value):
        if typ == NVMLError:
            typ = NVMLError._valClassMapping.get(value, typ)
        obj = Exception.__new__(typ)
        obj.value = value
        return obj

    def __str__(self) -> str:
        return NVMLError._errcode_to_string.get(self.value, "NVML Error with code %d" % self.value)

    def __eq__(self, other: object) -> bool:
        return self.value == getattr(other, "value", None)

    __hash__ = Exception.__hash__


def nvmlExceptionClass(nvmlErrorCode):
    if nvmlErrorCode not in NVMLError._valClassMapping:
        raise ValueError("nvmlErrorCode %s is not valid" % nvmlErrorCode)
    return NVMLError._valClassMapping[nvmlErrorCode]


def _extractNVMLErrorsAsClasses() -> None:
    this_module = sys.modules[__name__]
    for err_name in [x for x in dir(this_module) if x.startswith("NVML_ERROR_")]:
        class_name = "NVMLError_" + string.capwords(err_name.replace("NVML_ERROR_", ""), "_").replace("_", "")
        err_val = getattr(this_module, err_name)

        def gen_new(val):
            def new(typ, *args):
                return NVMLError.__new__(typ, val)

            return new

        new_error_class = type(class_name, (NVMLError,), {"__new__": gen_new(err_val)})
        new_error_class.__module__ = __name__
        setattr(this_module, class_name, new_error_class)
        NVMLError._valClassMapping[err_val] = new_error_class


_extractNVMLErrorsAsClasses()


def nvmlErrorString(result):
    return NVMLError._errcode_to_string.get(result, "Unknown Error")


# ---------------------------------------------------------------------------------------------
# Value types, as pynvml returns them
class c_nvmlUtilization_t(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class c_nvmlMemory_t(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class nvmlFriendlyObject:
    def __init__(self, dictionary):
        for x in dictionary:
            setattr(self, x, dictionary[x])

    def __str__(self) -> str:
        return self.__dict__.__str__()


class _SimDevice:
    """What ``nvmlDeviceGetHandleByIndex`` returns (pynvml returns an opaque ctypes pointer)."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return "<sim nvmlDevice %d>" % self.index


# ---------------------------------------------------------------------------------------------
# Simulation state
MIB = 1024 * 1024
_lock = threading.RLock()
_scenario: Dict[str, Any] = {}
_state: Dict[str, Any] = {}
_state_sig: Optional[tuple] = None
_state_checked = 0.0
_initialized = 0
_rand = random.Random(1234)
_STATE_CHECK_EVERY = 0.05


def configure(scenario: Optional[Dict[str, Any]]) -> None:
    """Load a scenario (the ``gpu.simulate`` dict); resets the simulated library."""
    global _scenario, _state, _state_sig, _state_checked, _initialized, _rand
    with _lock:
        _scenario = dict(scenario or {})
        _state = dict(_scenario.get("state") or {})
        _state_sig = None
        _state_checked = 0.0
        _initialized = 0
        _rand = random.Random(str(_scenario.get("uuid_seed", "sim")))
        _alive_cache.clear()


def write_state(path: str, state: Dict[str, Any]) -> None:
    """Write a state file atomically (for scenario processes, the demo and tests)."""
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(state, fh)
    os.replace(tmp, path)


def _refresh_state() -> Dict[str, Any]:
    global _state, _state_sig, _state_checked
    path = _scenario.get("state_file")
    if not path:
        return _state
    now = time.monotonic()
    if now - _state_checked < _STATE_CHECK_EVERY and _state_sig is not None:
        return _state
    _state_checked = now
    try:
        st = os.stat(path)
    except OSError:
        return _state
    sig = (st.st_ino, st.st_mtime_ns, st.st_size)
    if sig != _state_sig:
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, ValueError):
            return _state  # half-written or unreadable: keep the last good state
        if isinstance(data, dict):
            _state = data
            _state_sig = sig
    return _state


def _failures(state: Dict[str, Any]) -> Dict[str, Any]:
    keys = ("lost", "unknown", "no_driver", "no_library", "not_supported", "function_not_found")
    out = {k: state[k] for k in keys if k in state}
    out.update(state.get("failures") or {})
    return out


def _gpu_count() -> int:
    return int(_scenario.get("gpus", 1))


_alive_cache: Dict[int, tuple] = {}
_ALIVE_TTL = 0.5


def _pid_alive(pid: int) -> bool:
    now = time.monotonic()
    hit = _alive_cache.get(pid)
    if hit is not None and now - hit[0] < _ALIVE_TTL:
        return hit[1]
    alive = _pid_alive_now(pid)
    if len(_alive_cache) > 4096:
        _alive_cache.clear()
    _alive_cache[pid] = (now, alive)
    return alive


def _pid_alive_now(pid: int) -> bool:
    try:
        fd = os.open("/proc/%d/stat" % pid, os.O_RDONLY)
        try:
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
        right = data.rfind(b")")
        return data[right + 2 : right + 3] not in (b"Z", b"X")
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    return not os.path.isdir("/proc") or os.path.exists("/proc/%d" % pid)


_derived: Optional[tuple] = None  # (state, lost, unknown, [(gpu, unsupported)...]) for the current state


def _derive(state: Dict[str, Any]) -> tuple:
    """What ``_check`` needs from one state, worked out once per state (re)load."""
    global _derived
    derived = _derived
    if derived is not None and derived[0] is state:
        return derived
    fail = _failures(state)
    common = set(fail.get("not_supported") or [])
    per_gpu = []
    for gpu in state.get("gpus") or []:
        gpu = gpu if isinstance(gpu, dict) else {}
        per_gpu.append((gpu, frozenset(common | set(gpu.get("not_supported") or []))))
    derived = (state, set(fail.get("lost") or []), set(fail.get("unknown") or []), per_gpu, frozenset(common))
    _derived = derived
    return derived


def _check(handle: Any, field: Optional[str] = None) -> Dict[str, Any]:
    """Raise what the real library would for this device/field; return the GPU's state."""
    with _lock:
        if not _initialized:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        index = handle.index if isinstance(handle, _SimDevice) else -1
        if not 0 <= index < _gpu_count():
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        _, lost, unknown, per_gpu, common = _derive(_refresh_state())
        if index in lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        if index in unknown:
            raise NVMLError(NVML_ERROR_UNKNOWN)
        gpu, unsupported = per_gpu[index] if index < len(per_gpu) else ({}, common)
        if field is not None and (
            field in unsupported or (field in ("sm_clock", "mem_clock") and "clocks" in unsupported)
        ):
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return gpu


def _jitter(amount: float) -> float:
    if _scenario.get("jitter", True) is False:
        return 0.0
    return _rand.uniform(-amount, amount)


def _alive_procs(gpu: Dict[str, Any]) -> List[Dict[str, Any]]:
    out = []
    for proc in gpu.get("processes") or []:
        try:
            pid = int(proc["pid"])
        except (KeyError, TypeError, ValueError):
            continue
        if not _pid_alive(pid):
            continue
        if "mem" in proc:
            mem = proc["mem"]
        elif "mem_mib" in proc:
            mem = None if proc["mem_mib"] is None else int(proc["mem_mib"] * MIB)
        else:
            mem = None
        out.append({"pid": pid, "mem": mem})
    return out


def _load(gpu: Dict[str, Any]) -> float:
    base = gpu.get("load")
    if base is None:  # no load given: busy while any of its processes lives
        base = 95.0 if _alive_procs(gpu) else 0.0
    base = float(base)
    if base <= 0:
        return 0.0
    return max(0.0, min(100.0, base + _jitter(3.0)))


def _mem_total() -> int:
    return int(float(_scenario.get("mem_total_mib", 24576)) * MIB)


def _mem_used(gpu: Dict[str, Any]) -> int:
    if gpu.get("mem_used") is not None:
        used = int(gpu["mem_used"])
    elif gpu.get("mem_used_mib") is not None:
        used = int(float(gpu["mem_used_mib"]) * MIB)
    else:
        used = 5 * MIB + sum(p["mem"] or 0 for p in _alive_procs(gpu))
    return max(0, min(_mem_total(), used))


# ---------------------------------------------------------------------------------------------
# The pynvml API
def nvmlInit():
    global _initialized
    with _lock:
        fail = _failures(_refresh_state())
        if fail.get("no_library"):
            raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
        if fail.get("no_driver"):
            raise NVMLError(NVML_ERROR_DRIVER_NOT_LOADED)
        _initialized += 1


def nvmlInitWithFlags(flags):
    nvmlInit()


def nvmlShutdown():
    global _initialized
    with _lock:
        if not _initialized:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        _initialized -= 1


def nvmlSystemGetDriverVersion():
    if not _initialized:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    return str(_scenario.get("driver", "550.54.15"))


def nvmlSystemGetNVMLVersion():
    if not _initialized:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    return "12." + str(_scenario.get("driver", "550.54.15"))


def nvmlDeviceGetCount():
    if not _initialized:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    return _gpu_count()


def nvmlDeviceGetHandleByIndex(index):
    handle = _SimDevice(int(index))
    _check(handle)
    return handle


def nvmlDeviceGetIndex(handle):
    _check(handle)
    return handle.index


def nvmlDeviceGetName(handle):
    _check(handle, "name")
    return str(_scenario.get("name", "NVIDIA GeForce RTX 3090"))


def nvmlDeviceGetUUID(handle):
    _check(handle, "uuid")
    seed = "%s/%d" % (_scenario.get("uuid_seed", "sim"), handle.index)
    digest = "%032x" % (abs(_hash_str(seed)) % (1 << 128))
    return "GPU-%s-%s-%s-%s-%s" % (digest[:8], digest[8:12], digest[12:16], digest[16:20], digest[20:32])


def _hash_str(text: str) -> int:
    """A stable string hash (Python's ``hash`` is salted per process)."""
    value = 1469598103934665603
    for ch in text.encode("utf-8"):
        value = ((value ^ ch) * 1099511628211) % (1 << 128)
    return value


def nvmlDeviceGetUtilizationRates(handle):
    gpu = _check(handle, "util")
    load = _load(gpu)
    util = c_nvmlUtilization_t()
    util.gpu = round(load)
    util.memory = round(load * 0.6)
    return util


def nvmlDeviceGetMemoryInfo(handle, version=None):
    gpu = _check(handle, "mem")
    mem = c_nvmlMemory_t()
    mem.total = _mem_total()
    mem.used = _mem_used(gpu)
    mem.free = mem.total - mem.used
    return mem


def nvmlDeviceGetTemperature(handle, sensor):
    gpu = _check(handle, "temp")
    if sensor != NVML_TEMPERATURE_GPU:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return round(34 + _load(gpu) * 0.42 + _jitter(1.0))


def nvmlDeviceGetPowerUsage(handle):
    gpu = _check(handle, "power")
    limit = float(_scenario.get("power_limit_w", 350.0))
    watts = 22.0 + _load(gpu) / 100.0 * (limit * 0.9 - 22.0) + _jitter(4.0)
    return int(max(0.0, watts) * 1000)


def nvmlDeviceGetEnforcedPowerLimit(handle):
    _check(handle, "power_limit")
    return int(float(_scenario.get("power_limit_w", 350.0)) * 1000)


def nvmlDeviceGetPowerManagementLimit(handle):
    return nvmlDeviceGetEnforcedPowerLimit(handle)


def nvmlDeviceGetClockInfo(handle, type):
    if type in (NVML_CLOCK_SM, NVML_CLOCK_GRAPHICS):
        gpu = _check(handle, "sm_clock")
        load = _load(gpu)
        return int(210 + (1695 - 210) * min(1.0, load / 30.0)) if load > 0 else 210
    if type == NVML_CLOCK_MEM:
        gpu = _check(handle, "mem_clock")
        return 9751 if _load(gpu) > 0 or _alive_procs(gpu) else 405
    _check(handle, "clocks")
    raise NVMLError(NVML_ERROR_NOT_SUPPORTED)


def nvmlDeviceGetFanSpeed(handle):
    gpu = _check(handle, "fan")
    return int(max(0, min(100, round(30 + _load(gpu) * 0.5 + _jitter(1.0)))))


def _procs(handle, name="nvmlDeviceGetComputeRunningProcesses"):
    gpu = _check(handle, "procs")
    if name in (_failures(_refresh_state()).get("function_not_found") or []):
        raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)  # an older driver without this entry point
    out = []
    for proc in _alive_procs(gpu):
        out.append(
            nvmlFriendlyObject(
                {
                    "pid": proc["pid"],
                    "usedGpuMemory": proc["mem"],
                    "gpuInstanceId": 0xFFFFFFFF,
                    "computeInstanceId": 0xFFFFFFFF,
                }
            )
        )
    return out


def nvmlDeviceGetComputeRunningProcesses_v3(handle):
    return _procs(handle, "nvmlDeviceGetComputeRunningProcesses_v3")


def nvmlDeviceGetComputeRunningProcesses_v2(handle):
    return _procs(handle, "nvmlDeviceGetComputeRunningProcesses_v2")


def nvmlDeviceGetComputeRunningProcesses(handle):
    return _procs(handle)
