"""MIG for the GPU sampler: a MIG-enabled GPU's instances, their memory and processes.

An instance's static fields (profile, uuid, memory total) are read with the GPU's (full frames); its memory
use and processes every sample. Its processes are NVML's pids, mapped as its GPU's were (``remap``).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, cast

from ..wire.protocol import GpuMig, GpuProc
from .nvml import DeviceError, NoDriver, Nvml, as_int, as_text, gpu_procs

MigInstance = Tuple[int, Any, Dict[str, Any]]  # (index, handle, static fields)


def mig_instances(nvml: Nvml, gpu_handle: Any) -> Optional[List[MigInstance]]:
    """A MIG-enabled GPU's instances (index, handle, static fields); None when MIG is off or unsupported.

    Asked with the static fields (full frames). A MIG query that fails leaves the device as it is."""
    try:
        mode = nvml.call("nvmlDeviceGetMigMode", gpu_handle)
        if not mode or as_int(mode[0]) != 1:
            return None
        count = as_int(nvml.call("nvmlDeviceGetMaxMigDeviceCount", gpu_handle)) or 0
        out = []
        for i in range(count):
            handle = nvml.call("nvmlDeviceGetMigDeviceHandleByIndex", gpu_handle, i)
            if handle is None:  # an empty slot (NOT_FOUND)
                continue
            name = as_text(nvml.call("nvmlDeviceGetName", handle)) or ""
            meminfo = nvml.call("nvmlDeviceGetMemoryInfo", handle)
            out.append((i, handle, {
                "profile": name.rpartition(" MIG ")[2] or None if " MIG " in name else None,
                "uuid": as_text(nvml.call("nvmlDeviceGetUUID", handle)),
                "mem_total": as_int(getattr(meminfo, "total", None)) if meminfo is not None else None,
            }))
    except NoDriver:
        raise
    except DeviceError:
        return None
    return out


def sample_mig(nvml: Nvml, instances: List[MigInstance]) -> List[GpuMig]:
    """Each MIG instance's memory and processes (NVML's pids; mapped with the device's: ``remap``)."""
    out: List[GpuMig] = []
    for index, handle, static in instances:
        try:
            meminfo = nvml.call("nvmlDeviceGetMemoryInfo", handle)
            procs = gpu_procs(nvml.compute_processes(handle))
        except NoDriver:
            raise
        except DeviceError:  # the instance went away (reconfigured): look again at the next full frame
            meminfo, procs = None, []
        inst: GpuMig = {
            "index": index,
            "profile": static["profile"],
            "uuid": static["uuid"],
            "mem_total": static["mem_total"],
            "mem_used": as_int(getattr(meminfo, "used", None)) if meminfo is not None else None,
            "procs": procs,
        }
        out.append(inst)
    return out


def remap(entries: List[GpuProc], device: List[GpuProc]) -> List[GpuProc]:
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
