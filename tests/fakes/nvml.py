"""The NVIDIA boundary faked for tests: a ``libnvidia-ml.so.1`` built from ``nvml/fake_nvml.c`` and a
``bin/nvidia-smi``, both answering from one JSON state file, so the agent's real nvidia-ml-py (ctypes)
path and the agentless ``nvidia-smi`` path run on a machine without a GPU.

The state file is named by ``$FAKE_NVML_STATE`` and re-read whenever it is replaced (``write_state``
writes a temporary file and renames it over the old one), so a test changes the GPUs of a running agent.
Schema (every helper writes this)::

    {"driver": "550.54.15", "cuda_driver_version": 12040, "init_error": null | "DRIVER_NOT_LOADED",
     "devices": [{"name", "uuid", "minor", "mem_total_mib", "mem_used_mib", "util", "mem_util", "temp",
                  "power_mw", "power_limit_mw", "sm_clock", "mem_clock", "fan",
                  "error": null | "GPU_IS_LOST" | "UNKNOWN" | <any NVML_ERROR_ name without the prefix>,
                  "not_supported": ["fan", "power", ...],
                  "processes": [{"pid": 12345, "mem_mib": 500}],
                  "mig": null | {"instances": [{"profile", "mem_total_mib", "mem_used_mib", "processes"}]}}]}

``init_error`` fails ``nvmlInit`` (and every later call while it is set). A device's ``error`` fails every
query of it except name/uuid/minor/index. ``not_supported`` names fields (``util``, ``mem_util``,
``memory``, ``temp``, ``power``, ``power_limit``, ``clocks``, ``sm_clock``, ``mem_clock``, ``fan``,
``processes``, ``mig``, ``minor``) whose query answers ``NVML_ERROR_NOT_SUPPORTED``, as does a numeric
field that is null or missing. A process's ``mem_mib`` null is NVML's "not available".

The agent trusts an NVML pid only when that process holds ``/dev/nvidiaN`` (N = the device's ``minor``), in the
device directory of its config (``gpu.dev_dir``): ``make_dev_dir`` makes such a directory of plain files and
``hold_devices`` starts a "GPU workload" holding some of them open (``gpu_config`` is the agent config part).
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "nvml" / "fake_nvml.c"
BIN_DIR = HERE / "bin"  # nvidia-smi (and whatever other fake host tools join it)
STATE_ENV = "FAKE_NVML_STATE"
LIB_NAME = "libnvidia-ml.so.1"
DEFAULT_CACHE = Path(tempfile.gettempdir()) / f"fleet-console-fake-nvml-{os.getuid()}"
MIB = 1024 * 1024

_HEALTHY: dict[str, Any] = {
    "name": "NVIDIA GeForce RTX 3090",
    "minor": 0,
    "mem_total_mib": 24576,
    "mem_used_mib": 1200,
    "util": 97,
    "mem_util": 40,
    "temp": 71,
    "power_mw": 310000,
    "power_limit_mw": 350000,
    "sm_clock": 1695,
    "mem_clock": 9751,
    "fan": 65,
    "error": None,
    "not_supported": [],
    "processes": [],
    "mig": None,
}


def build_libnvml(dest: Path | None = None, *, no_v3: bool = False) -> Path:
    """The directory holding a built ``libnvidia-ml.so.1`` (put it on ``LD_LIBRARY_PATH``).

    Built with ``cc`` once per source and flags: the result is cached under ``dest`` (default: a folder in
    the system temp dir) by a hash, so a test session compiles it once. ``no_v3`` leaves out
    ``nvmlDeviceGetComputeRunningProcesses_v3``, as drivers before 510 do. Skips the calling test when
    there is no C compiler.
    """
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        import pytest

        pytest.skip("no C compiler (cc): cannot build the fake libnvidia-ml.so.1")
    flags = ["-shared", "-fPIC", "-O2", "-pthread", "-fvisibility=hidden", f"-Wl,-soname,{LIB_NAME}"] + (
        ["-DFAKE_NVML_NO_V3"] if no_v3 else []
    )
    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join(flags).encode()).hexdigest()[:16]
    out_dir = (dest or DEFAULT_CACHE) / digest
    lib = out_dir / LIB_NAME
    if lib.exists():
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / f".{LIB_NAME}.{os.getpid()}"
    proc = subprocess.run([cc, *flags, "-o", str(tmp), str(SOURCE)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"building the fake {LIB_NAME} failed:\n{proc.stderr[-2000:]}")
    os.replace(tmp, lib)  # atomic: parallel sessions never load a half-written library
    return out_dir


def write_state(path: Path | str, state: dict[str, Any]) -> None:
    """Replace the state file atomically (temporary file + rename): readers see the old or the new one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(state, f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def device(index: int = 0, **fields: Any) -> dict[str, Any]:
    """A healthy RTX 3090 record (uuid and minor from ``index``) with ``fields`` overriding it."""
    record = copy.deepcopy(_HEALTHY)
    record["uuid"] = f"GPU-{index:08x}-1111-2222-3333-444455556666"
    record["minor"] = index
    record.update(fields)
    return record


def state(devices: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    """A whole state: driver 550.54.15, CUDA 12.4, no init error, these devices; ``fields`` override."""
    out: dict[str, Any] = {"driver": "550.54.15", "cuda_driver_version": 12040, "init_error": None, "devices": devices}
    out.update(fields)
    return out


@dataclass
class FakeNvml:
    """A built fake library and its state file (what the ``fake_nvml`` fixture gives a test)."""

    lib_dir: Path
    state_path: Path

    def write(self, state: dict[str, Any]) -> None:
        write_state(self.state_path, state)

    @property
    def env(self) -> dict[str, str]:
        return remote_env(self.lib_dir, self.state_path)


def remote_env(lib_dir: Path, state_path: Path, path: str | None = None) -> dict[str, str]:
    """The environment of a host with the fakes: for ``Sshd(env=...)`` or a local subprocess."""
    return {
        "LD_LIBRARY_PATH": str(lib_dir),
        STATE_ENV: str(state_path),
        "PATH": f"{BIN_DIR}:{path if path is not None else os.environ.get('PATH', os.defpath)}",
    }


def make_dev_dir(path: Path, count: int = 8) -> Path:
    """A device directory for ``gpu.dev_dir``: plain files ``nvidia0``..``nvidia{count-1}``, ``nvidiactl`` and
    ``nvidia-uvm`` (the agent matches the paths a process holds open, never opens them)."""
    path.mkdir(parents=True, exist_ok=True)
    for name in [*(f"nvidia{i}" for i in range(count)), "nvidiactl", "nvidia-uvm"]:
        (path / name).touch()
    return path


def device_paths(dev_dir: Path, minors: Sequence[int], uvm: bool = True) -> list[Path]:
    """What a CUDA process holds for ``minors``: ``nvidiaN`` each, ``nvidiactl``, and ``nvidia-uvm``."""
    held = [*(dev_dir / f"nvidia{m}" for m in minors), dev_dir / "nvidiactl"]
    return [*held, dev_dir / "nvidia-uvm"] if uvm else held


def hold_devices(
    dev_dir: Path, minors: Sequence[int], argv: Sequence[str] = ("sleep", "120"), uvm: bool = True, **popen: Any
) -> subprocess.Popen[bytes]:
    """A "GPU workload": ``argv`` started holding ``dev_dir``/nvidiaN (each of ``minors``) open, as CUDA does."""
    fds = [os.open(p, os.O_RDONLY) for p in device_paths(dev_dir, minors, uvm)]
    try:
        return subprocess.Popen(list(argv), pass_fds=fds, **popen)
    finally:
        for fd in fds:
            os.close(fd)


def gpu_config(dev_dir: Path, **fields: Any) -> dict[str, Any]:
    """The agent config's ``gpu`` table for the real (faked) NVML with this device directory."""
    return {"simulate": None, "dev_dir": str(dev_dir), **fields}
