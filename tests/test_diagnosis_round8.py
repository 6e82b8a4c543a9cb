"""Diagnosis classes learned from blind round 8 (tests/fixtures/incidents-blind/round-8), fixed after its
first-seen score was recorded: each rule reads a class of wordings or facts (docs/diagnosis.md). Pure, except the
log gathering tests, which read files a test wrote."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

from console.agent.diagnosis import codes, completion
from console.agent.diagnosis import diagnose as dg
from console.agent.diagnosis.gather import companions, log_candidates, referenced_logs
from console.agent.diagnosis.liveness import LOADING_RE
from tests.test_diagnose import TRAIN_BENCH, act, activity, busy_gpus, code_of, gpu, logs_of, rec, silent_log_facts


# -- a refused or corrupted download -------------------------------------------------------------------------
@pytest.mark.parametrize("line", [
    "Error response from daemon: toomanyrequests: You have reached your pull rate limit. You may increase the limit "
    "by authenticating and upgrading: https://www.docker.com/increase-rate-limit",
    "requests.exceptions.HTTPError: 429 Client Error: Too Many Requests for url: https://huggingface.co/api/models/x",
    "urllib.error.HTTPError: HTTP Error 429: Too Many Requests",
    "remote: API rate limit exceeded for 203.0.113.7.",
    "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE. If you have updated the package "
    "versions, please update the hashes.",
    "ChecksumMismatchError: Conda detected a mismatch between the expected content and downloaded content",
    "sha256sum: WARNING: 1 computed checksum did NOT match",
    "verifying github.com/x/y@v1.2.3: checksum mismatch",
    "OSError: Consistency check failed: file should be of size 4976698672 but has size 2147483648 "
    "(model-00001-of-00004.safetensors).",
    "failed to register layer: filesystem layer verification failed for digest sha256:3f1d...",
])
def test_a_download_the_remote_refused_for_a_rate_limit_or_that_arrived_corrupt_failed(line: str) -> None:
    assert code_of(line) == "download_failed", line


def test_a_rate_limited_pull_in_a_young_setup_script_is_a_failed_download_not_starting(tmp_path: Path) -> None:
    log = tmp_path / "prepare.log"
    log.write_text("Using default tag: latest\nError response from daemon: toomanyrequests: You have reached your "
                   "pull rate limit.\n[prepare] docker pull failed (exit 1)\n")
    old = time.time() - 20
    os.utime(log, (old, old))
    now = time.time()
    facts = {"now": now, "benchmark": {"match": [r"prepare\.sh"], "entrypoint": [r"prepare\.sh"]},
             "processes": [rec(2, 1, "bash prepare.sh", wchan="do_wait", start=now - 5)],
             "logs": logs_of(tmp_path), "files": [],
             "gpu": {"state": "ok", "devices": [{"index": 0, "util": 0, "mem_used": 0}]}}
    assert dg.analyze(facts)["verdict"]["code"] == "download_failed"


# -- GPU memory in the allocators' own words ---------------------------------------------------------------------
@pytest.mark.parametrize("line", [
    "Out of memory error on GPU 0. Cannot allocate 3.125000GB memory on GPU 0, available memory is only 117.750000MB.",
    "ResourceExhaustedError: Out of memory error on GPU 1. Cannot allocate 512.000244MB memory on GPU 1",
    "bfc_arena.cc:368 void* onnxruntime::BFCArena::AllocateRawInternal(size_t, bool, onnxruntime::Stream*, bool, "
    "onnxruntime::WaitNotificationFn) Failed to allocate memory for requested buffer of size 2830172160",
    "RuntimeError: HIP out of memory. Tried to allocate 2.00 GiB (GPU 0; 63.98 GiB total capacity)",
    "hipErrorOutOfMemory: out of memory",
])
def test_an_allocators_out_of_gpu_memory_from_any_framework_is_cuda_oom(line: str) -> None:
    assert code_of(line) == "cuda_oom", line


# -- a container runtime that cannot give the container a GPU (a new code) --------------------------------------
@pytest.mark.parametrize("line", [
    'docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].',
    "docker: Error response from daemon: unknown or invalid runtime name: nvidia.",
    "Error response from daemon: Unknown runtime specified nvidia",
    'OCI runtime create failed: container_linux.go:380: starting container process caused: exec: '
    '"nvidia-container-runtime-hook": executable file not found in $PATH: unknown',
    "Error: unresolvable CDI devices nvidia.com/gpu=all",
])
def test_a_container_runtime_that_cannot_give_the_container_a_gpu(line: str) -> None:
    assert code_of(line) == "container_runtime_missing", line
    assert codes.tier("container_runtime_missing") == "hardware"


def test_a_driver_not_loaded_under_the_container_toolkit_stays_no_gpu_driver() -> None:
    line = ("nvidia-container-cli: initialization error: nvml error: driver not loaded: unknown")
    assert code_of(line) == "no_gpu_driver"


# -- an error report is no results block; an install check's verdict closes a run -----------------------------
def test_an_error_summary_header_is_not_a_results_block() -> None:
    for line in ("Error Message Summary:", "Failure summary:", "---- Warnings summary ----",
                 "=== Exception summary ==="):
        assert not completion.is_completion_line(line), line
    assert completion.is_completion_line("==== benchmark summary ====")
    assert completion.is_completion_line("Summary:")


def test_an_install_checks_success_verdict_closes_the_run() -> None:
    for line in ("PaddlePaddle is installed successfully! Let's start deep learning with PaddlePaddle now.",
                 "MMCV has been installed successfully.", "Installation successful.", "installation was successful"):
        assert completion.is_completion_line(line), line
    assert not completion.is_completion_line("Successfully installed pip-24.2 wheel-0.44.0")  # one pip step


# -- the loss blown up, in the guards' own words ---------------------------------------------------------------
@pytest.mark.parametrize("line", [
    "FloatingPointError: Loss became infinite or NaN at iteration=2137!",
    "Loss is nan, stopping training",
    "RuntimeError: the loss is non-finite at step 300",
    "ValueError: Encountered a non-finite loss; aborting",
    "Batch 812: Invalid loss, terminating training",
])
def test_a_guard_that_stops_on_a_nan_or_infinite_loss_is_diverged(line: str) -> None:
    assert code_of(line) == "diverged", line


# -- an import-time version check, a binary for another GPU generation -------------------------------------------
@pytest.mark.parametrize("line", [
    "AssertionError: MMCV==2.2.0 is used but incompatible. Please install mmcv>=2.0.0rc4, <2.2.0.",
    "AssertionError: MMEngine==0.7.0 is used but incompatible. Please install mmengine>=0.7.1, <1.0.0.",
    "ImportError: tokenizers>=0.11.1,!=0.11.3,<0.14 is required for a normal functioning of this module, but found "
    "tokenizers==0.14.0.",
    "    Could not start backend: Runtime compute cap 70 is not compatible with compile time compute cap 80",
    "Found GPU0 Tesla K80 which is of cuda capability 3.7. PyTorch no longer supports this GPU because it is too old.",
    "ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0.",
    "RuntimeError: FlashAttention only supports Ampere GPUs or newer.",
])
def test_a_version_check_or_a_binary_for_another_gpu_generation_is_a_version_mismatch(line: str) -> None:
    assert code_of(line) == "version_mismatch", line


# -- a read-only system path in a container is no disk fault ---------------------------------------------------
def test_a_containers_read_only_system_path_is_not_a_disk_io_error() -> None:
    for line in ("/sbin/ldconfig.real: Can't create temporary cache file /etc/ld.so.cache~: Read-only file system",
                 "sysctl: setting key \"vm.max_map_count\": Read-only file system",
                 "sh: 1: cannot create /proc/sys/vm/drop_caches: Read-only file system",
                 "OSError: [Errno 30] Read-only file system: '/usr/lib/x86_64-linux-gnu/libcuda.so'"):
        assert code_of(line) is None, line
    # a data path on a filesystem the kernel remounted read-only stays io_error
    assert code_of("OSError: [Errno 30] Read-only file system: '/data/ckpt/step_600.pt'") == "io_error"
    assert code_of("EXT4-fs (nvme0n1p1): Remounting filesystem read-only") == "io_error"


# -- a storage client's PermissionError wrapping a refused credential ------------------------------------------
def test_a_permission_error_wrapping_an_expired_token_is_the_credentials(tmp_path: Path) -> None:
    (tmp_path / "train.log").write_text(
        "step 599/1000 loss 0.41\nTraceback (most recent call last):\n"
        "ray.exceptions.RayTaskError(PermissionError): ray::entrypoint() (pid=40211, ip=10.0.7.23)\n"
        "botocore.exceptions.ClientError: An error occurred (ExpiredToken) when calling the CreateMultipartUpload "
        "operation: The provided token has expired.\nPermissionError: The provided token has expired.\n")
    now = time.time()
    facts = {"now": now, "benchmark": TRAIN_BENCH, "processes": [], "logs": logs_of(tmp_path), "files": [],
             "gpu": {"state": "ok", "devices": [{"index": 0, "util": 0, "mem_used": 0}]}}
    assert dg.analyze(facts)["verdict"]["code"] == "credentials_refused"
    assert codes.rank("credentials_refused") > codes.rank("permission_denied")


# -- the run's other logs: the companion stream, the worker logs a launcher names -------------------------------
def _config(log: Path) -> Any:
    return {"benchmark": {"match": [r"main\.py"], "log": str(log)}}


def test_a_configured_logs_companion_stream_is_read_however_old(tmp_path: Path) -> None:
    out, err = tmp_path / "slurm-4411.out", tmp_path / "slurm-4411.err"
    out.write_text("Epoch: [0][511/1736]\t Loss 0.5488\n")
    err.write_text("slurmstepd: error: Detected 1 oom-kill event(s) in StepId=4411.batch cgroup.\n")
    old = time.time() - 300
    os.utime(err, (old, old))
    assert companions(str(out)) == [str(err)]
    assert companions(str(tmp_path / "job-stdout.log")) == []  # no such file
    (tmp_path / "job-stderr.log").write_text("x\n")
    assert companions(str(tmp_path / "job-stdout.log")) == [str(tmp_path / "job-stderr.log")]
    now = time.time()
    paths = log_candidates(_config(out), [], now, started=now - 3)  # the run looks 3 s old
    assert str(err) in paths


def test_the_worker_logs_a_launcher_names_below_its_folder_are_read(tmp_path: Path) -> None:
    (tmp_path / "log").mkdir()
    worker = tmp_path / "log" / "workerlog.0"
    worker.write_text("RuntimeError: can't start new thread\n")
    (tmp_path / "outputs").mkdir()
    (tmp_path / "outputs" / "rank3.err").write_text("x\n")
    lines = ["INFO launch_utils.py:532] detail running logs maybe found in log/workerlog.0",
             "see outputs/rank3.err and ../../etc/passwd.log, /var/log/syslog",
             "ERROR launch_utils.py:604] ABORT!!! the trainer process with rank=[0] was aborted. Please check its log."]
    found = referenced_logs(lines, str(tmp_path), [])
    assert found == [str(worker), str(tmp_path / "outputs" / "rank3.err")]  # nothing outside the folder
    assert referenced_logs(lines, str(tmp_path), [str(worker)]) == [str(tmp_path / "outputs" / "rank3.err")]


# -- start-up: preparing data, a first run that builds its engine -------------------------------------------------
@pytest.mark.parametrize("line", [
    "Tokenizing Prompts (num_proc=64):  96%|#########  | 348000/359152 [07:42<06:38, 26.66 examples/s]",
    "Running tokenizer on dataset (num_proc=16):  40%|####      | 4000/10000 [00:12<00:18, 330.1 examples/s]",
    "Map (num_proc=8):  73%|#######3  | 7300/10000 [00:40<00:15, 180.2 examples/s]",
    "Generating train split: 812345 examples [00:31, 26011.30 examples/s]",
    "INFO service: session created in 9.1s; warming up (first run builds the TensorRT engine)",
    "[TRT] building an engine for rtdetr_l.onnx",
])
def test_preparing_data_or_building_an_engine_is_start_up(line: str) -> None:
    assert LOADING_RE.search(line), line


def _preprocess(tmp_path: Path) -> Dict[str, Any]:
    now = time.time()
    stamps: List[str] = []
    for i, rate in enumerate([5000.0] * 8 + [30.0] * 3):
        stamps.append("Tokenizing Prompts (num_proc=64):  %d%%|#  | %d/359152 [0%d:00<01:00, %.2f examples/s]"
                      % (50 + i * 4, 180000 + i * 15000, i, rate))
    (tmp_path / "preprocess.log").write_text("\r".join(stamps) + "\n")
    procs = [rec(700, 1, "python3 -m axolotl.cli.preprocess cfg.yml", start=now - 600)]
    procs += [rec(701 + i, 700, "python3 -m axolotl.cli.preprocess cfg.yml", state="R", cpu=1.0,
                  start=now - 590) for i in range(4)]
    return {"now": now, "benchmark": {"match": ["axolotl"], "entrypoint": [r"entrypoint\.sh"]},
            "processes": procs, "logs": logs_of(tmp_path), "files": [], "stall_seconds": 120,
            "activity": activity(*(act(701 + i, cpu=1.0) for i in range(4))),
            "gpu": {"state": "ok", "devices": [gpu(0, 30.0)]}}


def test_a_tokenizing_pass_that_slows_near_its_end_is_still_starting(tmp_path: Path) -> None:
    result = dg.analyze(_preprocess(tmp_path))
    assert result["verdict"]["code"] == "starting", result["findings"]


def test_a_young_service_whose_last_words_build_its_engine_while_its_cpu_works_is_starting(tmp_path: Path) -> None:
    log = tmp_path / "detector.log"
    log.write_text("INFO detector: loading model /models/rtdetr.onnx (providers: TensorrtExecutionProvider)\n"
                   "INFO detector: session created in 9.1s; warming up (first run builds the TensorRT engine)\n")
    now = time.time()
    os.utime(log, (now - 60, now - 60))
    facts = {"now": now, "benchmark": {"match": [r"detector\.py"], "entrypoint": [r"entrypoint\.sh"]},
             "processes": [rec(800, 1, "python3 detector.py --port 8080", state="R", cpu=1.0, start=now - 70)],
             "logs": logs_of(tmp_path), "files": [], "stall_seconds": 120, "activity": activity(act(800, cpu=1.0)),
             "gpu": {"state": "ok", "devices": [gpu(4, 71.0, limit=300.0, mem=2114 << 20, holder=800)]}}
    assert dg.analyze(facts)["verdict"]["code"] == "starting"
    facts["activity"] = activity(act(800, cpu=0.0))  # nothing computes: no start-up to wait for
    assert dg.analyze(facts)["verdict"]["code"] != "starting"


# -- GPUs busy at 80-90 % that draw little power spin too -------------------------------------------------------
def test_gpus_mostly_pinned_at_low_power_with_a_silent_log_are_hung(tmp_path: Path) -> None:
    facts = silent_log_facts(tmp_path, "2022-05-12 22:05:41 - mmdet - INFO - workflow: [('train', 1)], max: 12 "
                             "epochs\n2022-05-12 22:06:13 - mmcv - INFO - Reducer buckets have been rebuilt in this "
                             "iteration.\n")
    facts["gpu"] = busy_gpus([86, 91, 100, 97], 75.0)  # 25 % of the limit
    assert dg.analyze(facts)["verdict"]["code"] == "hung"
    facts["gpu"] = busy_gpus([86, 91, 100, 97], 105.0)  # 35 %: a memory-bound job at 86 % may draw that much
    assert dg.analyze(facts)["verdict"]["code"] != "hung"
