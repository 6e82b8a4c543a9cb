"""Diagnosis classes learned from blind round 9 (tests/fixtures/incidents-blind/round-9), fixed after its
first-seen score was recorded: each rule reads a class of wordings or facts (docs/diagnosis.md). Pure: lines
through the signature table, the completion words and the progress parser, or ``analyze`` on built facts."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Dict

import pytest

from console.agent.diagnosis import completion, progress
from console.agent.diagnosis import diagnose as dg
from console.agent.diagnosis.liveness import LOADING_RE
from tests.test_diagnose import code_of, logs_of, rec


# -- GPU memory in the allocators' own words: a device allocation call, RMM's pools, CuPy's pool -----------------
@pytest.mark.parametrize("line", [
    "Out of memory in cuMemAlloc(&device_pointer, size) (intern/cycles/device/cuda/device_impl.cpp:731)",
    "System is out of GPU and shared host memory",
    "Out of memory in cuMemAllocManaged(&device_pointer, size)",
    "MemoryError: std::bad_alloc: out_of_memory: RMM failure at:/opt/conda/include/rmm/mr/device/"
    "pool_memory_resource.hpp:196: Maximum pool size exceeded",
    "MemoryError: std::bad_alloc: RMM failure at:/src/rmm/mr/device/pool_memory_resource.hpp:179: Maximum pool size "
    "exceeded",
    "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 200,000,000,000 bytes (allocated so far: 4,096 "
    "bytes).",
    "Exception in main training loop: Out of memory allocating 25,600,000 bytes (allocated so far: 3,635,267,072 "
    "bytes).",
    "cupy.cuda.memory.OutOfMemoryError: out of memory to allocate 1073741824 bytes (total 12373894656 bytes)",
])
def test_an_allocators_out_of_gpu_memory_in_its_own_words_is_cuda_oom(line: str) -> None:
    assert code_of(line) == "cuda_oom", line


def test_a_host_allocation_failure_stays_host_memory() -> None:
    assert code_of("MemoryError: std::bad_alloc") == "host_memory_exhausted"
    assert code_of("numpy.core._exceptions._ArrayMemoryError: Unable to allocate 3.2 GiB for an array with shape "
                   "(1, 2)") == "host_memory_exhausted"


# -- code built for a newer driver: PTX from a newer toolkit, an NVENC API the driver lacks ------------------------
@pytest.mark.parametrize("line", [
    "openmm.OpenMMException: Error loading CUDA module: CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222)",
    "CUDA platform error: Error loading CUDA module: CUDA_ERROR_UNSUPPORTED_PTX_VERSION (222)",
    "RuntimeError: cudaErrorUnsupportedPtxVersion: the provided PTX was compiled with an unsupported toolchain.",
    "[hevc_nvenc @ 0x55d1c2e8a4c0] Driver does not support the required nvenc API version. Required: 13.0 Found: 12.2",
    "[h264_nvenc @ 0x7ff3e9b83c00] Driver does not support the required nvenc API version. Required: 9.1 Found: 9.0",
    "ERROR:libav.h264_nvenc:The minimum required Nvidia driver for nvenc is (unknown) or newer",
    "22:45:40.550: error:   The minimum required Nvidia driver for nvenc is 471.41 or newer",
])
def test_code_built_for_a_newer_driver_is_a_driver_mismatch(line: str) -> None:
    assert code_of(line) == "driver_mismatch", line


# -- storage that authenticated the identity but refused it the operation ------------------------------------------
@pytest.mark.parametrize("line", [
    "===== RESPONSE ERROR (ServiceCode=AuthorizationPermissionMismatch) =====",
    "Description=This request is not authorized to perform this operation using this permission.",
    "azure.core.exceptions.HttpResponseError: This request is not authorized to perform this operation. "
    "ErrorCode:AuthorizationFailure",
    "An error occurred (AccessDenied) when calling the PutObject operation: User: arn:aws:iam::123456789012:user/ci is "
    "not authorized to perform: s3:PutObject on resource: \"arn:aws:s3:::ckpt/step-100/model.pt\"",
    "google.api_core.exceptions.Forbidden: 403 POST https://storage.googleapis.com/upload/storage/v1/b/ckpt/o: "
    "Permission 'storage.objects.create' denied on resource (or it may not exist).",
])
def test_storage_that_refuses_the_identity_an_operation_is_credentials_refused(line: str) -> None:
    assert code_of(line) == "credentials_refused", line


# -- a request to a daemon cut off mid-way, and a panic that only reports it ------------------------------------------
def test_a_request_cut_off_mid_way_is_a_transport_error() -> None:
    for line in ("hyper::Error(IncompleteMessage)",
                 "error sending request for url (http://127.0.0.1:3000/twirp/api.ProverService/Prove): connection "
                 "closed before message completed"):
        assert code_of(line) == "transport_error", line


def test_a_panic_that_reports_a_request_cut_off_is_the_transport_error(tmp_path: Path) -> None:
    (tmp_path / "prove.log").write_text(
        "executed program with 4444875 cycles\n"
        "thread 'main' panicked at /root/.cargo/registry/src/sp1-cuda-4.2.1/src/lib.rs:283:77:\n"
        "called `Result::unwrap()` on an `Err` value: ReqwestError(reqwest::Error { kind: Request, url: "
        "\"http://localhost:3000/twirp/api.ProverService/Setup\", source: hyper_util::client::legacy::Error("
        "SendRequest, hyper::Error(IncompleteMessage)) })\n"
        "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n")
    facts = {"now": time.time(), "benchmark": {"match": ["dcap-prove"], "entrypoint": [r"entrypoint\.sh"]},
             "processes": [], "logs": logs_of(tmp_path), "files": [],
             "gpu": {"state": "ok", "devices": [{"index": 0, "util": 0, "mem_used": 0}]}}
    verdict = dg.analyze(facts)["verdict"]
    assert verdict["code"] == "transport_error", verdict


# -- the GPU library's own start-up error names the driver's state: a fact of the host now --------------------------
def _driver_facts(tmp_path: Path, message: str, state: str = "no_gpu") -> Dict[str, Any]:
    log = tmp_path / "webui.log"
    log.write_text("Launching launch.py...\n/venv/lib/python3.10/site-packages/torch/cuda/__init__.py:129: "
                   "UserWarning: CUDA initialization: Found no NVIDIA driver on your system. Please check that you "
                   "have an NVIDIA GPU and installed a driver\nTraceback (most recent call last):\n"
                   "RuntimeError: Torch is not able to use GPU; add --skip-torch-cuda-test to COMMANDLINE_ARGS\n")
    now = time.time()
    os.utime(log, (now - 20, now - 20))  # written before the wrapper that is alive now started
    return {"now": now, "benchmark": {"match": [r"webui\.sh"], "entrypoint": [r"entrypoint\.sh"]},
            "processes": [rec(2, 1, "bash webui.sh", wchan="do_wait", start=now - 1)],
            "logs": logs_of(tmp_path), "files": [], "gpu": {"state": state, "message": message, "devices": []}}


def test_nvml_saying_the_driver_is_not_loaded_makes_the_drivers_absence_current(tmp_path: Path) -> None:
    result = dg.analyze(_driver_facts(tmp_path, "Driver Not Loaded (NVMLError_DriverNotLoaded)"))
    assert result["verdict"]["code"] == "no_gpu_driver", result["findings"]
    head = result["findings"][0]
    assert any("Found no NVIDIA driver" in e["text"] for e in head["evidence"])
    assert any("Driver Not Loaded" in e["text"] for e in head["evidence"])


def test_nvml_words_alone_name_the_driver_state(tmp_path: Path) -> None:
    facts = _driver_facts(tmp_path, "RM has detected an NVML/RM version mismatch. (NVMLError_LibRmVersionMismatch)",
                          state="error")
    facts["logs"] = []
    assert dg.analyze(facts)["verdict"]["code"] == "driver_mismatch"
    facts = _driver_facts(tmp_path, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    facts["logs"] = []
    assert dg.analyze(facts)["verdict"]["code"] == "no_gpu_driver"


def test_no_gpu_library_at_all_is_a_host_without_gpus_not_a_fault(tmp_path: Path) -> None:
    facts = _driver_facts(tmp_path, "NVML not loadable: libnvidia-ml.so.1: cannot open shared object file")
    facts["logs"] = []
    assert dg.analyze(facts)["verdict"]["code"] not in ("no_gpu_driver", "driver_mismatch")


# -- a run that says it ended: its own closing word, its work counted to its total ---------------------------------
@pytest.mark.parametrize("line", [
    "2024-03-12 09:03:02,992 INFO Done: 1 file(s), 292.1 s of audio in 51.6 s (5.7x realtime)",
    "Done: 412 files, 0 errors",
    "[INFO] Done in 12.3s",
    "Done in 3m 12s.",
    "[18:56:31.246] [times] [INFO] | [render 24 frames] finished in 0:02:30.489657",
    "Progress.........: 14344384/14344384 (100.00%)",
    "render_turntable.sh: 24/24 frames written to /srv/renders/turntable_v3",
    "Processed 1000/1000 images",
    "upload: 412/412 files uploaded",
])
def test_a_closing_done_or_the_work_counted_to_its_total_closes_a_run(line: str) -> None:
    assert completion.is_completion_line(line), line


@pytest.mark.parametrize("line", [
    "Loading done in 3.2s",
    "    Finished `release` profile [optimized] target(s) in 0.41s",
    "Progress.........: 4734913/14344384 (33.01%)",
    "Recovered........: 0/1 (0.00%) Digests (total), 0/1 (0.00%) Digests (new)",
    "Epoch 3/10 done",
    "Loading checkpoint shards: 100%|##########| 4/4 [00:02<00:00,  1.60it/s]",
    "0/0 files uploaded",
])
def test_a_step_of_the_run_or_a_partial_count_does_not_close_it(line: str) -> None:
    assert not completion.is_completion_line(line), line


def _render_facts(tmp_path: Path, last: str) -> Dict[str, Any]:
    log = tmp_path / "render.log"
    log.write_text("".join("Fra:%d Mem:412.18M | Time:00:05.10 | Scene, ViewLayer | Finished\nSaved: "
                           "'/srv/renders/frame_%04d.png'\n" % (i, i) for i in range(1, 25))
                   + "Blender quit\nError: Not freed memory blocks: 49, total unfreed memory 0.010432 MB\n" + last)
    now = time.time()
    os.utime(log, (now - 50, now - 50))
    procs = [rec(2, 1, "bash /srv/render_turntable.sh", wchan="do_wait", start=now - 400),
             rec(3, 2, "sleep 100000", wchan="hrtimer_nanosleep", start=now - 400)]
    return {"now": now, "benchmark": {"match": [r"render_turntable\.sh", "blender"], "entrypoint": [r"entrypoint\.sh"]},
            "processes": procs, "logs": logs_of(tmp_path), "files": [],
            "gpu": {"state": "ok", "devices": [{"index": 0, "util": 0, "mem_used": 0, "power": 16.0,
                                                "power_limit": 140.0}]}}


def test_a_script_left_waiting_on_an_idle_helper_after_its_closing_words_is_finished(tmp_path: Path) -> None:
    facts = _render_facts(tmp_path, "render_turntable.sh: 24/24 frames written to /srv/renders/turntable_v3\n")
    assert dg.analyze(facts)["verdict"]["code"] == "finished"
    busy = dict(facts, processes=[*facts["processes"][:1], rec(3, 2, "blender -b scene.blend", state="R", cpu=95.0)])
    assert dg.analyze(busy)["verdict"]["code"] != "finished"  # a benchmark program still works under it
    facts["gpu"]["devices"][0]["util"] = 97  # a GPU works: not over
    assert dg.analyze(facts)["verdict"]["code"] != "finished"


# -- waiting on a job submitted to a remote service, its meter moving: start-up -------------------------------------
def test_a_meter_whose_bar_format_names_its_clocks_is_read() -> None:
    sample = progress.parse("RUNNING:  35%|###       | 106/300 [elapsed: 01:49 remaining: 03:23]2024-05-01 "
                            "07:59:34,033 Sleeping for 9s. Reason: RUNNING")
    assert sample is not None and sample.amount == "106" and sample.percent == 35.0 and sample.elapsed == 109.0
    done = progress.parse("COMPLETE: 100%|##########| 300/300 [elapsed: 02:04 remaining: 00:00]")
    assert done is not None and done.done


@pytest.mark.parametrize("line", [
    "RUNNING:  35%|###       | 106/300 [elapsed: 01:49 remaining: 03:23]",
    "PENDING:   0%|          | 0/300 [elapsed: 00:00 remaining: ?]",
    "2025-03-15 10:15:20,787 Sleeping for 7s. Reason: PENDING",
    "INFO waiting for job 8812 (state: QUEUED)",
    "polling batch batch_abc123: status RUNNING",
])
def test_waiting_on_a_remote_job_is_start_up(line: str) -> None:
    assert LOADING_RE.search(line), line


def test_a_lowercase_running_is_no_remote_job() -> None:
    assert not LOADING_RE.search("waiting for the running workers to report")


def test_a_run_polling_its_remote_job_with_the_meter_moving_and_gpus_idle_is_starting(tmp_path: Path) -> None:
    log = tmp_path / "colabfold.log"
    rows = ["2024-05-01 07:57:44,746 Query 1/1: K13 (length 1841)"]
    for i in range(1, 13):
        n = i * 9
        rows.append("RUNNING: %3d%%|#         | %d/300 [elapsed: 00:%02d remaining: 04:00]2024-05-01 07:58:%02d,000 "
                    "Sleeping for 9s. Reason: RUNNING" % (n * 100 // 300, n, i * 4, i * 4))
    log.write_text("\n".join(rows) + "\n")
    now = time.time()
    os.utime(log, (now - 3, now - 3))
    facts = {"now": now, "benchmark": {"match": ["colabfold_batch"], "entrypoint": [r"entrypoint\.sh"]},
             "processes": [rec(2, 1, "colabfold_batch query.fasta out/", start=now - 130)],
             "logs": logs_of(tmp_path), "files": [], "stall_seconds": 60,
             "gpu": {"state": "ok", "devices": [{"index": 0, "util": 0, "mem_used": 0, "power": 23.0,
                                                 "power_limit": 230.0}]}}
    assert dg.analyze(facts)["verdict"]["code"] == "starting"


# -- the cited line: wordings of known classes the kernel or a library prints ---------------------------------------
@pytest.mark.parametrize(("line", "code"), [
    ("[42310.118000] CIFS: VFS: \\\\nas01 has not responded in 180 seconds. Reconnecting...", "storage_stall"),
    ("CIFS VFS: Server 10.0.0.5 has not responded in 120 seconds. Reconnecting...", "storage_stall"),
    ("[ 9312.114000] cgroup: fork rejected by pids controller in /system.slice/nnunet-fold3.service", "resource_limit"),
    ("numba.cuda.cudadrv.error.NvvmSupportError: libNVVM cannot be found. Do `conda install cudatoolkit`:",
     "library_missing"),
    ("OSError: library nvvm not found", "library_missing"),
])
def test_kernel_and_library_wordings_of_known_classes(line: str, code: str) -> None:
    assert code_of(line) == code, line


# -- a GPU backend that failed at INFO level, the run gone on on the CPU ---------------------------------------------
def _fallback_facts(tmp_path: Path, fallback: str, util: int = 0) -> Dict[str, Any]:
    (tmp_path / "pulldown.log").write_text(
        "I0105 14:05:05.749943 140453630969664 xla_bridge.py:660] Unable to initialize backend 'cuda': Found cuSOLVER "
        "version 11002, but JAX was built against version 11401, which is newer. The copy of cuSOLVER that is "
        "installed must be at least as new as the version against which JAX was built.\n"
        "I0105 14:05:05.750792 140453630969664 xla_bridge.py:660] Unable to initialize backend 'tpu': INTERNAL: Failed "
        "to open libtpu.so: libtpu.so: cannot open shared object file: No such file or directory\n"
        + fallback + "\nI0105 14:05:07.1 run_multimer_jobs.py:120] Predicting model 1 of 5\n")
    now = time.time()
    return {"now": now, "benchmark": {"match": [r"run_multimer_jobs\.py"], "entrypoint": [r"entrypoint\.sh"]},
            "processes": [rec(2, 1, "python3 run_multimer_jobs.py --mode=pulldown", state="R", cpu=100.0,
                              start=now - 60)],
            "logs": logs_of(tmp_path), "files": [],
            "gpu": {"state": "ok", "devices": [{"index": 0, "util": util, "mem_used": 0, "power": 60.0,
                                                "power_limit": 400.0}]}}


def test_a_gpu_backend_that_failed_quietly_while_the_run_fell_back_to_the_cpu_is_the_fault(tmp_path: Path) -> None:
    line = ("W0105 14:05:05.750941 140453630969664 xla_bridge.py:727] An NVIDIA GPU may be present on this machine, "
            "but a CUDA-enabled jaxlib is not installed. Falling back to cpu.")
    result = dg.analyze(_fallback_facts(tmp_path, line))
    assert result["verdict"]["code"] == "version_mismatch", result["findings"]
    assert any("but JAX was built against version 11401" in e["text"] for e in result["findings"][0]["evidence"])
    busy = dg.analyze(_fallback_facts(tmp_path, line, util=97))  # the GPU works: the INFO line stays a note
    assert busy["verdict"]["code"] != "version_mismatch"
    quiet = dg.analyze(_fallback_facts(tmp_path, "I0105 14:05:06.0 run.py:10] Using 1 devices"))
    assert quiet["verdict"]["code"] != "version_mismatch"


@pytest.mark.parametrize("line", [
    "Unable to initialize backend 'cuda': Found cuSOLVER version 11002, but JAX was built against version 11401, which "
    "is newer.",
    "RuntimeError: Found cuDNN version 8600, but JAX was built against version 8800, which is newer. The copy of cuDNN "
    "that is installed must be at least as new as the version against which JAX was built.",
])
def test_a_library_older_than_the_framework_was_built_against_is_a_version_mismatch(line: str) -> None:
    assert code_of(line) == "version_mismatch", line
