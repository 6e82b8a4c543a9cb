"""nvml_sim must stay faithful to nvidia-ml-py: names, kinds, values, error classes and struct fields."""

from __future__ import annotations

import ctypes
import inspect
import subprocess

import pynvml
import pytest

from console.agent.sample import nvml_sim
from tests.support.wait import until_sync


def _public_nvml_names():
    return [n for n in dir(nvml_sim) if n.startswith(("nvml", "NVML", "c_nvml"))]


def test_every_exported_name_exists_in_pynvml_with_the_same_kind():
    names = _public_nvml_names()
    assert "nvmlDeviceGetComputeRunningProcesses_v3" in names
    assert "NVMLError_GpuIsLost" in names
    for name in names:
        assert hasattr(pynvml, name), "nvml_sim exports %s, which pynvml does not have" % name
        sim, real = getattr(nvml_sim, name), getattr(pynvml, name)
        if inspect.isclass(sim):
            assert inspect.isclass(real), name
        elif callable(sim):
            assert callable(real) and not inspect.isclass(real), name
            assert inspect.isfunction(real), name
        elif isinstance(sim, ctypes._SimpleCData):
            assert type(sim) is type(real) and sim.value == real.value, name
        else:
            assert type(sim) is type(real), name
            assert sim == real, "%s: sim %r != pynvml %r" % (name, sim, real)


def test_error_classes_map_to_the_same_codes():
    codes = {n: getattr(pynvml, n) for n in dir(pynvml) if n.startswith("NVML_ERROR_")}
    for name, code in codes.items():
        assert getattr(nvml_sim, name) == code, name
        real_exc = pynvml.NVMLError(code)
        sim_exc = nvml_sim.NVMLError(code)
        assert type(sim_exc).__name__ == type(real_exc).__name__, name
        assert isinstance(sim_exc, nvml_sim.NVMLError)
        assert sim_exc.value == code
        cls = getattr(nvml_sim, type(real_exc).__name__)
        assert cls().value == code  # NVMLError_X() carries its code, as in pynvml
        assert isinstance(cls(), cls)
        if code in pynvml.NVMLError._errcode_to_string:
            assert str(sim_exc) == str(real_exc)
    assert isinstance(nvml_sim.NVMLError(nvml_sim.NVML_ERROR_GPU_IS_LOST), nvml_sim.NVMLError_GpuIsLost)
    assert nvml_sim.nvmlExceptionClass(15) is nvml_sim.NVMLError_GpuIsLost


def test_structs_have_pynvml_fields():
    for name in ("c_nvmlUtilization_t", "c_nvmlMemory_t"):
        sim_fields = [f[0] for f in getattr(nvml_sim, name)._fields_]
        real_fields = [f[0] for f in getattr(pynvml, name)._fields_]
        assert sim_fields == real_fields, name


@pytest.fixture
def sim(tmp_path):
    state_file = tmp_path / "state.json"
    nvml_sim.write_state(str(state_file), {"gpus": [{"load": 50, "mem_used_mib": 2048}, {"load": 0}]})
    nvml_sim.configure({"gpus": 2, "name": "NVIDIA GeForce RTX 3090", "state_file": str(state_file)})
    nvml_sim.nvmlInit()
    yield state_file
    nvml_sim.configure({})


def _write(path, state):
    nvml_sim.write_state(str(path), state)
    nvml_sim._state_checked = 0.0


def test_values_and_units(sim):
    assert nvml_sim.nvmlDeviceGetCount() == 2
    h = nvml_sim.nvmlDeviceGetHandleByIndex(0)
    assert nvml_sim.nvmlDeviceGetName(h) == "NVIDIA GeForce RTX 3090"
    assert nvml_sim.nvmlDeviceGetUUID(h).startswith("GPU-")
    util = nvml_sim.nvmlDeviceGetUtilizationRates(h)
    assert 40 <= util.gpu <= 60 and isinstance(util.gpu, int)
    mem = nvml_sim.nvmlDeviceGetMemoryInfo(h)
    assert mem.total == 24576 * 1024 * 1024 and mem.used == 2048 * 1024 * 1024 and mem.free == mem.total - mem.used
    assert 20 <= nvml_sim.nvmlDeviceGetTemperature(h, nvml_sim.NVML_TEMPERATURE_GPU) <= 100
    assert 10_000 < nvml_sim.nvmlDeviceGetPowerUsage(h) < nvml_sim.nvmlDeviceGetEnforcedPowerLimit(h)
    assert nvml_sim.nvmlDeviceGetClockInfo(h, nvml_sim.NVML_CLOCK_SM) > 210
    assert nvml_sim.nvmlDeviceGetClockInfo(h, nvml_sim.NVML_CLOCK_MEM) > 0
    assert 0 <= nvml_sim.nvmlDeviceGetFanSpeed(h) <= 100
    assert isinstance(nvml_sim.nvmlSystemGetDriverVersion(), str)
    idle = nvml_sim.nvmlDeviceGetHandleByIndex(1)
    assert nvml_sim.nvmlDeviceGetUtilizationRates(idle).gpu == 0


def test_processes_dead_pids_dropped(sim):
    child = subprocess.Popen(["sleep", "60"])
    try:
        _write(sim, {"gpus": [{"load": 90, "processes": [{"pid": child.pid, "mem_mib": 100}, {"pid": 999999999}]}]})
        h = nvml_sim.nvmlDeviceGetHandleByIndex(0)
        procs = nvml_sim.nvmlDeviceGetComputeRunningProcesses(h)
        assert [(p.pid, p.usedGpuMemory) for p in procs] == [(child.pid, 100 * 1024 * 1024)]
    finally:
        child.kill()
        child.wait()
    # liveness is re-checked at most every 0.5 s
    until_sync(lambda: nvml_sim.nvmlDeviceGetComputeRunningProcesses_v3(h) == [], 10, "the killed child gone")


def test_scripted_failures(sim):
    _write(sim, {"gpus": [{"load": 10}], "failures": {"lost": [1], "not_supported": ["fan"]}})
    h0 = nvml_sim.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(nvml_sim.NVMLError_NotSupported):
        nvml_sim.nvmlDeviceGetFanSpeed(h0)
    with pytest.raises(nvml_sim.NVMLError_GpuIsLost):
        nvml_sim.nvmlDeviceGetHandleByIndex(1)
    nvml_sim.nvmlShutdown()
    with pytest.raises(nvml_sim.NVMLError_Uninitialized):
        nvml_sim.nvmlDeviceGetCount()
    _write(sim, {"no_driver": True})
    with pytest.raises(nvml_sim.NVMLError_DriverNotLoaded):
        nvml_sim.nvmlInit()
    _write(sim, {"failures": {"no_library": True}})
    with pytest.raises(nvml_sim.NVMLError_LibraryNotFound):
        nvml_sim.nvmlInit()
    _write(sim, {})
    nvml_sim.nvmlInit()
