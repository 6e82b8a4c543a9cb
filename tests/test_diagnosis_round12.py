"""Diagnosis classes learned from blind round 12 (tests/fixtures/incidents-blind/round-12), fixed after its
first-seen score was recorded: each rule reads a class of wordings or facts (docs/diagnosis.md). Pure: lines
through the signature table and the completion words, the kernel log's episodes, or ``analyze`` on built facts.
The wordings are the class's other programs' where there are some, not only the incidents'."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

from console.agent.diagnosis import codes, completion, events
from console.agent.diagnosis import diagnose as dg
from tests.test_diagnose import code_of, logs_of, rec


# -- a diagnostic's or a benchmark's closing verdict or summary closes a finished run ------------------------------
@pytest.mark.parametrize("line", [
    "# Out of bounds values : 0 OK",  # nccl-tests
    "Test PASSED",  # CUDA samples
    "&&&& PASSED TensorRT.sample_onnx_mnist [TensorRT v8601] # ./sample_onnx_mnist",
    "[burnin] gpu-node-22: dcgmi diag -r 3 exit 0",
    "stress.sh: gpu-burn 3600 exit 0",
    "Diagnostics: PASSED",
])
def test_a_tools_pass_verdict_closes_a_run(line: str) -> None:
    assert completion.is_completion_line(line), line


@pytest.mark.parametrize("line", [
    "Result = FAIL",  # bandwidthTest, deviceQuery
    "&&&& FAILED TensorRT.trtexec [TensorRT v8601] # trtexec --onnx=model.onnx",
    "Test FAILED",
    "[burnin] gpu-node-22: dcgmi diag -r 3 exit 1",
])
def test_a_tools_fail_verdict_closes_nothing(line: str) -> None:
    assert not completion.is_completion_line(line), line


@pytest.mark.parametrize("tail", [
    ["SUM device_to_device_memcpy_read_ce 715.53", "",
     "NOTE: The reported results may not reflect the full capabilities of the platform.",
     "Performance can vary with software drivers, hardware clocks, and system topology."],  # nvbandwidth
    ["TOTAL all_reduce 182.4 GB/s"],
])
def test_a_closing_total_without_a_colon_closes_a_run(tail: List[str]) -> None:
    lines = ["Running host_to_device_memcpy_ce.", " 0  1  2", " 0  24.1  N/A  24.0", *tail]
    assert completion.last_words({"lines": lines}) != []


DCGMI = ["Successfully ran diagnostic for group.",
         "+---------------------------+------------------------------------------------+",
         "| Diagnostic                | Result                                         |",
         "+===========================+================================================+",
         "|-----  Deployment  --------+------------------------------------------------|",
         "| Denylist                  | Pass                                           |",
         "| NVML Library              | Pass                                           |",
         "+-----  Hardware  ----------+------------------------------------------------+",
         "| GPU Memory                | Pass - All                                     |",
         "+-----  Stress  ------------+------------------------------------------------+",
         "| Targeted Stress           | Pass - All                                     |",
         "+---------------------------+------------------------------------------------+"]


def test_a_verdict_table_whose_tests_passed_closes_a_run() -> None:
    assert completion.last_words({"lines": ["$ dcgmi diag -r 3", *DCGMI]}) != []
    failed = [r.replace("| Pass - All     ", "| Fail - GPU: 3  ") if "Targeted" in r else r for r in DCGMI]
    assert completion.last_words({"lines": ["$ dcgmi diag -r 3", *failed]}) == []


def test_a_boxed_table_of_numbers_is_no_verdict() -> None:
    smi = ["+-----------------------------------------------------------------------------+",
           "| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |",
           "|   0  NVIDIA A100  Off         | 00000000:05:00.0 Off |                  N/A |",
           "| N/A   51C    P0    15W /  N/A |      0MiB /  4096MiB |      0%      Default |",
           "+-------------------------------+----------------------+----------------------+"]
    assert completion.last_words({"lines": ["+ nvidia-smi", *smi]}) == []  # nvidia-smi's box, no verdict


def test_finished_diagnostic_with_no_process_left_is_finished(tmp_path: Path) -> None:
    log = tmp_path / "diag.log"
    log.write_text("\n".join(["$ dcgmi diag -r 3", *DCGMI]) + "\n")
    now = time.time()
    os.utime(log, (now - 40, now - 40))
    facts = {"now": now, "benchmark": {"match": ["dcgmi", r"burnin\.sh"], "entrypoint": [r"entrypoint\.sh"]},
             "processes": [], "logs": logs_of(tmp_path), "files": [],
             "gpu": {"state": "ok", "devices": [{"index": 0, "util": 0, "mem_used": 0}]}}
    assert dg.analyze(facts)["verdict"]["code"] == "finished"


# -- an NVSwitch machine whose Fabric Manager is not up: CUDA error 802 -------------------------------------------
@pytest.mark.parametrize("line", [
    "-> system not yet initialized",  # cuda-samples' deviceQuery
    "Couldn't init CUDA: Error (gpu_burn-drv.cpp:304): system not yet initialized",
    "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
    "NumCudaDevices() that might have already set an error? Error 802: system not yet initialized",
    "CUDA error at bandwidthTest.cu:256 code=802(cudaErrorSystemNotReady) \"cudaSetDevice(currentDevice)\"",
    "cuInit failed: CUDA_ERROR_SYSTEM_NOT_READY",
    "Jan 14 09:58:40 node nv-fabricmanager[2411]: fabric manager NVIDIA GPU driver interface version 535.104.05 "
    "don't match with driver version 535.129.03. Please update with matching NVIDIA driver package.",
    "Jan 14 09:58:40 node systemd[1]: nvidia-fabricmanager.service: Main process exited, code=exited, "
    "status=1/FAILURE",
    "Jan 14 09:58:40 node systemd[1]: Failed to start NVIDIA fabric manager service.",
])
def test_cuda_802_and_fabric_managers_failure_are_fabric_manager_down(line: str) -> None:
    assert code_of(line) == "fabric_manager_down", line


def test_fabric_manager_down_is_a_hardware_verdict_over_the_scripts_exit(tmp_path: Path) -> None:
    assert codes.tier("fabric_manager_down") == "hardware" and codes.explanation("fabric_manager_down")
    log = tmp_path / "burnin.log"
    log.write_text("+ ./deviceQuery\ncudaGetDeviceCount returned 802\n-> system not yet initialized\n"
                   "Result = FAIL\n+ ./bandwidthTest\nCUDA error at bandwidthTest.cu:256 "
                   "code=802(cudaErrorSystemNotReady) \"cudaSetDevice(currentDevice)\"\n"
                   "node-burnin: 3 checks FAILED, exit status 3\n")
    now = time.time()
    os.utime(log, (now - 120, now - 120))
    facts = {"now": now, "benchmark": {"match": [r"burnin\.sh"], "entrypoint": [r"entrypoint\.sh"]},
             "processes": [], "logs": logs_of(tmp_path), "files": [],
             "gpu": {"state": "ok", "devices": [{"index": i, "util": 0, "mem_used": 0} for i in range(8)]}}
    assert dg.analyze(facts)["verdict"]["code"] == "fabric_manager_down"


# -- a wedged NVIDIA driver: tasks stuck inside it, NVML calls timing out ------------------------------------------
HUNG_HEAD = ["[9000.0] INFO: task python3:41822 blocked for more than 122 seconds.",
             "[9000.0]       Tainted: P           OE     5.15.0-97-generic #107-Ubuntu",
             '[9000.0] "echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.',
             "[9000.0] task:python3         state:D stack:0     pid:41822 ppid:41790  flags:0x00004002",
             "[9000.0] Call Trace:", "[9000.0]  <TASK>", "[9000.0]  __schedule+0x24e/0x590",
             "[9000.0]  rwsem_down_read_slowpath+0x33b/0x390", "[9000.0]  down_read+0x43/0xa0"]


def _kernel_codes(lines: List[str]) -> List[str]:
    facts = {"dmesg": {"lines": lines, "uptime": 9100.0, "error": None}}
    return [ep.code for ep in events.kernel_episodes(facts, time.time(), None)]


@pytest.mark.parametrize("lines", [
    [*HUNG_HEAD, "[9000.0]  os_acquire_rwlock_read+0x35/0x50 [nvidia]", "[9000.0]  _nv051482rm+0x10/0x40 [nvidia]"],
    [*HUNG_HEAD, "[9000.0]  uvm_va_space_down_read+0x2b/0x60 [nvidia_uvm]"],
    ["[9050.0] INFO: task nvidia-smi:620917 blocked for more than 120 seconds."],
    ["[9050.0] INFO: task nvidia-persistenced:1804 blocked for more than 241 seconds."],
])
def test_a_task_stuck_in_the_nvidia_driver_is_driver_hung(lines: List[str]) -> None:
    found = _kernel_codes(lines)
    assert "driver_hung" in found and "storage_stall" not in found, found


def test_a_task_stuck_on_nfs_stays_a_storage_stall() -> None:
    frames = ["[9000.0]  nfs_wait_bit_killable+0x21/0x90 [nfs]", "[9000.0]  __wait_on_bit+0x42/0x90"]
    assert _kernel_codes(HUNG_HEAD + frames) == ["storage_stall"]


@pytest.mark.parametrize("line", [
    "2024-10-12T18:35:31.870Z WARN  worker::health > nvml query timed out after 30s (nvmlDeviceGetUtilizationRates)",
    "nvmlDeviceGetMemoryInfo failed: NVML_ERROR_TIMEOUT",
    "level=error msg=\"nvidia-smi timed out after 60s\" component=gpu-exporter",
])
def test_gpu_management_calls_timing_out_are_driver_hung(line: str) -> None:
    assert code_of(line) == "driver_hung", line
    assert codes.tier("driver_hung") == "hardware"


# -- known classes in other wordings --------------------------------------------------------------------------------
@pytest.mark.parametrize("line, code", [
    # the container toolkit's check of the image's CUDA requirement against the host driver
    ("nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.4, please update your driver to a "
     "newer version, or use an earlier cuda container: unknown", "driver_mismatch"),
    ("nvidia-container-cli: requirement error: unsatisfied condition: driver>=525", "driver_mismatch"),
    # other GPU APIs' allocation failures, servers' start-up memory checks
    ("Error executing function: clEnqueueNDRangeKernel(\"radix_fft\") Status error code: CL_OUT_OF_RESOURCES (-5)",
     "cuda_oom"),
    ("clCreateBuffer failed: CL_MEM_OBJECT_ALLOCATION_FAILURE", "cuda_oom"),
    ("ggml_vulkan: Device memory allocation of size 2147483648 failed. vk::Device::allocateMemory: "
     "ErrorOutOfDeviceMemory", "cuda_oom"),
    ("ValueError: Free memory on device (12.1/23.6 GiB) on startup is less than desired GPU memory utilization "
     "(0.9, 21.24 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.", "cuda_oom"),
    ("RuntimeError: Not enough memory to handle 4096 prefill tokens. You need to decrease `--max-batch-prefill-tokens`",
     "cuda_oom"),
    # a shared library the loader cannot find, in a loader's words
    ("RuntimeError: (PreconditionNotMet) The third-party dynamic library (libcudnn.so) that Paddle depends on is "
     "not configured correctly.", "library_missing"),
    ("\tlibcublas.so.11 => not found", "library_missing"),
    # an object store refusing the copy in the AWS Go SDK's words (s5cmd, rclone)
    ("ERROR \"cp s3://bucket/prefix /scratch/prefix\": AccessDenied: Access Denied status code: 403, request id: "
     "2HZ44EQ5VX276MJ5", "download_failed"),
    ("ERROR \"cp s3://bucket/missing.tar out/\": NotFound: Not Found status code: 404, request id: X1",
     "download_failed"),
])
def test_known_classes_in_other_wordings(line: str, code: str) -> None:
    assert code_of(line) == code, line


def test_a_warning_that_an_opencl_error_may_come_is_no_oom() -> None:
    assert code_of('             This may cause "CL_OUT_OF_RESOURCES" or related errors.') != "cuda_oom"


# -- a missing file the program answers with its default, a resume probe: no missing input ------------------------
@pytest.mark.parametrize("line", [
    "WARNING 2022-08-07 10:21:03,101 launch.py:423] Not found distinct arguments and compiled with cuda or xpu. "
    "Default use collective mode",
    "(main_task pid=43871) Checkpoint tracker file does not exist: %s /ckpt/run/latest_checkpointed_iteration.txt",
    "No checkpoint found at ./outputs, training from scratch",
    "config.yaml not found, using defaults",
])
def test_a_handled_not_found_is_no_missing_input(line: str) -> None:
    assert code_of(line) is None, line


def test_an_unhandled_not_found_stays_missing_input() -> None:
    assert code_of("Checkpoint /ckpt/run/step_400 does not exist") == "missing_input"


# -- a start-up phase that prints nothing: a package manager's solve, a step announced as long ---------------------
def test_a_package_manager_solving_in_the_runs_tree_is_starting(tmp_path: Path) -> None:
    log = tmp_path / "setup.log"
    log.write_text("+ mamba create -y -n rapids rapids=24.06\nCollecting package metadata (repodata.json): done\n"
                   "Solving environment: ...working... ")
    now = time.time()
    os.utime(log, (now - 45, now - 45))
    facts = {"now": now, "benchmark": {"match": [r"entrypoint\.sh", "mamba"], "entrypoint": [r"entrypoint\.sh"]},
             "stall_seconds": 30, "logs": logs_of(tmp_path), "files": [],
             "processes": [rec(2, 1, "bash /entrypoint.sh", start=now - 90),
                           rec(3, 2, "/opt/conda/bin/python3 /opt/conda/bin/mamba create -y -n rapids", state="R",
                               cpu=99.0, start=now - 80)],
             "gpu": {"state": "ok", "devices": [{"index": 0, "util": 0, "mem_used": 0}]}}
    assert dg.analyze(facts)["verdict"]["code"] == "starting"


def _long_step(tmp_path: Path, age: float, util: int) -> Dict[str, Any]:
    log = tmp_path / "infer.log"
    log.write_text("INFO loading model resnet50.onnx\n"
                   "WARNING building the TensorRT engine for the first run; this may take several minutes\n"
                   "INFO creating session with providers ['TensorrtExecutionProvider', 'CPUExecutionProvider']\n")
    now = time.time()
    os.utime(log, (now - age, now - age))
    facts: Dict[str, Any] = {
        "now": now, "benchmark": {"match": [r"infer\.py"], "entrypoint": [r"entrypoint\.sh"]},
        "stall_seconds": 60, "logs": logs_of(tmp_path), "files": [],
        "processes": [rec(5, 1, "python3 infer.py --model resnet50.onnx", state="R", cpu=0.0, start=now - 900)],
        "gpu": {"state": "ok", "devices": [{"index": 0, "util": util, "mem_used": 3 << 30, "power": 60.0,
                                            "power_limit": 72.0}]}}
    return facts


def test_a_step_announced_as_long_with_the_gpu_working_is_starting(tmp_path: Path) -> None:
    assert dg.analyze(_long_step(tmp_path, 300, 60))["verdict"]["code"] == "starting"


def test_a_step_announced_as_long_stays_no_excuse_for_ever(tmp_path: Path) -> None:
    assert dg.analyze(_long_step(tmp_path, 4000, 60))["verdict"]["code"] != "starting"
