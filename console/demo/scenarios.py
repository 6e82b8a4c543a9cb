"""The demo fleet's scenarios, and laying out one demo instance's directory.

Each demo instance is a directory that plays the role of one rented container::

    ROOT/bin/       entrypoint.sh, benchmark.sh, cuzk-daemon, cuzk-bench, curl (from ``scripts/``)
    ROOT/sbin/init  the instance's pid root (tini-like; see scripts/init)
    ROOT/etc/       scenario, instance-id, gpu-summary, gpu.json, environment (JSON env for processes)
    ROOT/tmp/       the logs (setup.log, benchmark-full.log, cuzk-bench-daemon.log): the watched dir
    ROOT/data/      inputs the benchmark downloads
    ROOT/gpu-state.json   the simulated NVML state, written by cuzk-daemon (console/agent/sample/nvml_sim.py)

The scripts are real processes with their real names (``comm`` is the script's file name because the
shebang names the interpreter by absolute path), so the agent's process sampler, diagnosis and restart
work on them as on a real host.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SCRIPTS_DIR = Path(__file__).with_name("scripts")
BIN_SCRIPTS = ("entrypoint.sh", "benchmark.sh", "cuzk-daemon", "cuzk-bench", "curl")


@dataclass(frozen=True)
class Scenario:
    key: str  # also written to ROOT/etc/scenario, read by the scripts
    title: str
    gpus: int
    gpu_name: str
    mem_total_mib: int
    power_limit_w: int
    c1_present: bool = True  # the benchmark's input is already there (no download)
    flapping: bool = False  # the SSH side drops the host now and then


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("healthy", "proving loop running", 4, "NVIDIA GeForce RTX 4090", 24564, 450),
    Scenario("gpu-idle", "daemon up, nothing to prove", 2, "NVIDIA GeForce RTX 3090", 24576, 350),
    Scenario("download-stalled", "input download stuck at 37.2 %", 2, "NVIDIA RTX A5000", 24564, 230,
             c1_present=False),
    Scenario("warmup-broken-pipe", "the seed: warmup proof fails, entrypoint left waiting", 2,
             "NVIDIA GeForce RTX 3090", 24576, 350, c1_present=False),
    Scenario("cuda-oom", "prover runs out of GPU memory", 1, "NVIDIA GeForce RTX 3090", 24576, 350),
    Scenario("flapping", "host drops off the network every 20-40 s", 2, "NVIDIA GeForce RTX 4090", 24564, 450,
             flapping=True),
)

# short names for instance names ("healthy-01", "idle-02", ...)
SHORT = {
    "healthy": "healthy",
    "gpu-idle": "idle",
    "download-stalled": "dlstall",
    "warmup-broken-pipe": "warmup",
    "cuda-oom": "oom",
    "flapping": "flappy",
}


def scenario_for(index: int) -> Scenario:
    """Instances cycle through the scenarios."""
    return SCENARIOS[index % len(SCENARIOS)]


def instance_name(index: int) -> str:
    return f"{SHORT[scenario_for(index).key]}-{index + 1:02d}"


def script_python() -> str:
    """The interpreter named in the scripts' shebangs (an absolute path: the process keeps the
    script's name as its ``comm``, as a real binary would)."""
    return os.path.realpath(sys.executable)


def _install_script(src: Path, dst: Path, python: str) -> None:
    text = src.read_text(encoding="utf-8")
    if text.startswith("#!/usr/bin/env python3"):
        text = f"#!{python}" + text[len("#!/usr/bin/env python3"):]
    dst.write_text(text, encoding="utf-8")
    dst.chmod(0o755)


def process_env(root: Path, scenario: Scenario) -> dict[str, str]:
    """The environment every process of the instance gets (sessions, entrypoint, restarts)."""
    path = os.pathsep.join([str(root / "bin"), str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"])
    return {
        "HOME": str(root),
        "USER": "root",
        "LOGNAME": "root",
        "SHELL": "/bin/sh",
        "PATH": path,
        "LANG": "C.UTF-8",
        "TZ": "UTC",
        "DEMO_ROOT": str(root),
        "DEMO_SCENARIO": scenario.key,
    }


def layout(root: Path, index: int, scenario: Scenario) -> dict[str, Any]:
    """Create the instance directory; returns the simulated-GPU scenario for the agent config."""
    python = script_python()
    for sub in ("bin", "sbin", "etc", "tmp", "data/params", "data/32gbench", "run", "var/log", ".cache"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for name in BIN_SCRIPTS:
        _install_script(SCRIPTS_DIR / name, root / "bin" / name, python)
    _install_script(SCRIPTS_DIR / "init", root / "sbin" / "init", python)
    instance_id = f"C.{32710471 + index * 7919}"
    (root / "etc" / "scenario").write_text(scenario.key + "\n")
    (root / "etc" / "instance-id").write_text(instance_id + "\n")
    short = scenario.gpu_name.replace("NVIDIA GeForce ", "").replace("NVIDIA ", "")
    (root / "etc" / "gpu-summary").write_text(f"{scenario.gpus}x {short}\n")
    gpu = {"gpus": scenario.gpus, "name": scenario.gpu_name, "mem_total_mib": scenario.mem_total_mib}
    (root / "etc" / "gpu.json").write_text(json.dumps(gpu) + "\n")
    (root / "etc" / "environment").write_text(json.dumps(process_env(root, scenario)) + "\n")
    (root / "tmp" / "cuzk-bench-config.toml").write_text(
        "[daemon]\nlisten = \"127.0.0.1:9820\"\ngpu_threads = %d\n\n[prove]\npartitions = 10\n" % scenario.gpus
    )
    if scenario.c1_present:
        (root / "data" / "32gbench" / "c1.json").write_text('{"sector_size": 34359738368, "demo": true}\n')
    state_file = root / "gpu-state.json"
    state_file.write_text(json.dumps({"gpus": [{"load": 0, "processes": []} for _ in range(scenario.gpus)]}))
    return {
        "gpus": scenario.gpus,
        "name": scenario.gpu_name,
        "mem_total_mib": scenario.mem_total_mib,
        "power_limit_w": scenario.power_limit_w,
        "uuid_seed": instance_id,
        "state_file": str(state_file),
    }
