"""Fixtures over the fake NVIDIA boundary (tests/fakes/nvml.py); a test module enables them with
``pytest_plugins = ["tests.fakes.conftest_plugin"]``.

- ``fake_nvml``: the built fake library and a state file (two healthy RTX 3090s to start with), with the
  environment that puts both, and the fake ``nvidia-smi``, in front of whatever runs with it.
- ``nvml_sshd``: a real sshd whose sessions get that environment: an agent started over SSH loads the fake
  ``libnvidia-ml.so.1`` through nvidia-ml-py exactly as on a GPU host.
- ``gpu_dev``: a device directory (``gpu.dev_dir``) of fake ``/dev/nvidiaN`` files for workloads to hold.
- ``nvml_in_process``: the fake library loaded into the test process itself (by its soname, as
  ``LD_LIBRARY_PATH`` would), for tests that drive ``GpuSampler`` directly with the real pynvml.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fakes import nvml
from tests.fakes.nvml import FakeNvml
from tests.support.sshd import Sshd


@pytest.fixture
def fake_nvml(tmp_path: Path) -> FakeNvml:
    fake = FakeNvml(nvml.build_libnvml(), tmp_path / "nvml-state.json")
    fake.write(nvml.state([nvml.device(0), nvml.device(1)]))
    return fake


@pytest.fixture
def gpu_dev(tmp_path: Path) -> Path:
    return nvml.make_dev_dir(tmp_path / "dev")


@pytest.fixture
def nvml_sshd(fake_nvml: FakeNvml, tmp_path: Path) -> Iterator[Sshd]:
    server = Sshd(tmp_path / "sshd", env=fake_nvml.env)
    server.start()
    try:
        yield server
    finally:
        server.stop()


_loaded: ctypes.CDLL | None = None


@pytest.fixture
def nvml_in_process(fake_nvml: FakeNvml, monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    """``fake_nvml`` loaded into this process: pynvml's ``CDLL("libnvidia-ml.so.1")`` finds it by soname."""
    global _loaded
    if _loaded is None:
        _loaded = ctypes.CDLL(str(fake_nvml.lib_dir / nvml.LIB_NAME), mode=ctypes.RTLD_GLOBAL)
    import pynvml

    lib = getattr(pynvml, "nvmlLib", None)
    if lib is not None and lib._handle != _loaded._handle:
        pytest.skip("a real libnvidia-ml.so.1 is already loaded in this test process")
    monkeypatch.setenv(nvml.STATE_ENV, str(fake_nvml.state_path))
    return fake_nvml
