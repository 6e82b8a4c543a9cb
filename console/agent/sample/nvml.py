"""NVML access for the GPU sampler: every call through ``Nvml.call``, errors sorted, values made plain.

A field the device does not support comes back as ``None``; an error that means the device itself is gone
(GPU is lost, Unknown, Uninitialized, reset required...) raises ``DeviceError``, and one that means the driver
went away (Driver Not Loaded, Library Not Found) ``NoDriver`` (the way nvitop's ``libnvml`` wraps pynvml).
The module is ``pynvml`` (nvidia-ml-py), or ``nvml_sim`` when the config simulates (``load_nvml``).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

from ..wire.protocol import GpuProc

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
NO_DRIVER_CODES = {9, 12}  # DRIVER_NOT_LOADED, LIBRARY_NOT_FOUND
_NOT_AVAILABLE = (1 << 64) - 1  # NVML_VALUE_NOT_AVAILABLE_ulonglong


class DeviceError(Exception):
    """An NVML error that puts the whole device out of reach (it is reported as lost)."""


class NoDriver(DeviceError):
    """The driver (or library) went away: every device is out of reach, state ``no_gpu``."""


def _device_error(exc: BaseException) -> DeviceError:
    """The error to raise for an NVML error that is not about one field."""
    code = getattr(exc, "value", None)
    return NoDriver(describe(exc)) if code in NO_DRIVER_CODES else DeviceError(describe(exc))


class Nvml:
    """A pynvml-like module plus one ``call`` helper that maps NVML errors."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.error_class = getattr(module, "NVMLError", Exception)
        self._missing: set = set()

    def has(self, name: str) -> bool:
        """Whether the module offers ``name`` (and the driver did not say it predates it)."""
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
    """An NVML error as a message (its class named unless it is the plain NVMLError)."""
    name = type(exc).__name__
    text = str(exc) or name
    return text if name in ("NVMLError", "Exception") else "%s (%s)" % (text, name)


def as_text(value: Any) -> Optional[str]:
    """An NVML string (bytes in older pynvml) as text."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def as_int(value: Any) -> Optional[int]:
    """An NVML number as an int; None for NVML's "not available" values and what is not a number."""
    if value is None:
        return None
    try:
        out = int(value)
    except (TypeError, ValueError):
        return None
    if out >= _NOT_AVAILABLE or out < 0 or out == 0xFFFFFFFF:
        return None
    return out


def as_watts(milliwatts: Any) -> Optional[float]:
    """NVML milliwatts as watts, to 0.1 W."""
    value = as_int(milliwatts)
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


def gpu_procs(raw: Optional[List[Any]]) -> List[GpuProc]:
    """NVML process structs as ``[{pid, mem}]`` (NVML's pids)."""
    procs: List[GpuProc] = []
    for proc in raw or []:
        pid = as_int(getattr(proc, "pid", None))
        if pid is not None:
            procs.append({"pid": pid, "mem": as_int(getattr(proc, "usedGpuMemory", None))})
    return procs
