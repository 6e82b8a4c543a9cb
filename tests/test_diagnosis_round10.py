"""Diagnosis classes learned from blind round 10 (tests/fixtures/incidents-blind/round-10), fixed after its
first-seen score was recorded: each rule reads a class of wordings or facts (docs/diagnosis.md). Pure: lines
through the signature table, the completion words and the progress parser, or ``analyze`` on built facts. The
wordings are the class's other programs' where there are some, not only the incidents'."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Dict

import pytest

from console.agent.diagnosis import codes, completion, progress
from console.agent.diagnosis import diagnose as dg
from console.agent.diagnosis.events import level_cap
from tests.test_diagnose import code_of, logs_of, rec


# -- the fabric between hosts failed: a code of its own (the operator checks NICs, links, ports, not the GPU) -------
@pytest.mark.parametrize("line", [
    "gpu-b07:22910:23188 [0] transport/net_ib.cc:1697 NCCL WARN NET/IB : Got completion from peer 10.40.2.18<54731> "
    "with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_RDMA_WRITE(0) len=0 vendor_err=129",
    "kp-ddp-worker-0:3468:3905 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer 10.216.210.236<54862> "
    "with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid fd00:1148:9000:5000:4:200:3:ff22",
    "[master:19546:0:19546] ib_mlx5_log.c:139  Transport retry count exceeded on mlx5_0:1/IB (synd 0x15 vend 0x81 "
    "hw_synd 0/0)",
    "[1516700569.600192] [clx-orion-010:31714:0]    ib_mlx5_log.c:113  UCX  ERROR Error on QP 0x61f5 wqe[0]: Transport "
    "retry count exceeded (synd 0x15 vend 0x81) opcode SEND",
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:589] Read error [192.168.70.92]:25266: Connection "
    "reset by peer",
    "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.0.0.3]:10895",
    "node2:1123:1190 [3] misc/socket.cc:538 NCCL WARN socketProgress: Connection closed by remote peer node3<46312>",
    "The InfiniBand retry count between two MPI processes has been exceeded.",
])
def test_the_fabric_between_hosts_failing_is_a_network_error(line: str) -> None:
    assert code_of(line) == "network_error", line
    assert codes.tier("network_error") == "cause"
    assert codes.rank("network_error") >= codes.rank("nccl_timeout")  # it explains the watchdog's timeout


# -- the host's clock is wrong: certificates not valid yet, a Release file not valid yet, a server's skew check -------
@pytest.mark.parametrize("line", [
    "ssl.SSLCertVerificationError: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: certificate is not yet "
    "valid (_ssl.c:1006)",
    "curl: (60) SSL certificate problem: certificate is not yet valid",
    "E: Release file for http://archive.ubuntu.com/ubuntu/dists/jammy-updates/InRelease is not valid yet (invalid for "
    "another 2d 3h 4min 5s). Updates for this repository will not be applied.",
    "x509: certificate has expired or is not yet valid: current time 1970-01-01T00:02:11Z is before "
    "2024-11-20T00:00:00Z",
    "kinit: Clock skew too great while getting initial credentials",
    "botocore.exceptions.ClientError: An error occurred (RequestTimeTooSkewed) when calling the PutObject operation: "
    "The difference between the request time and the current time is too large.",
])
def test_a_wrong_host_clock_is_clock_skew(line: str) -> None:
    assert code_of(line) == "clock_skew", line


def test_an_expired_certificate_stays_a_failed_download() -> None:
    assert code_of("ssl.SSLCertVerificationError: [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: "
                   "certificate has expired (_ssl.c:1006)") == "download_failed"


# -- RDMA queues refused under the locked-memory limit; an RDMA NIC's EIO is not a disk's ---------------------------
@pytest.mark.parametrize("line", [
    "msm-h200-2:4009:4659 [9] misc/ibvwrap.cc:190 NCCL WARN Call to ibv_create_cq failed with error Cannot allocate "
    "memory",
    "[1733561201.418220] [worker-0:41:0]   ib_log.c:246  UCX  ERROR mlx5_0: ibv_create_cq(cqe=4096) failed: Cannot "
    "allocate memory",
    "ibv_create_qp failed: Cannot allocate memory",
    "libibverbs: ibv_alloc_pd() failed: ENOMEM",
])
def test_rdma_queues_refused_memory_are_the_locked_memory_limit(line: str) -> None:
    assert code_of(line) == "resource_limit", line


def test_an_rdma_nics_input_output_error_is_no_disk_error() -> None:
    assert code_of("[1733561201.421877] [worker-1:40:0]   uct_iface.c:191  UCX  ERROR mlx5_0:1: failed to create "
                   "iface: Input/output error") != "io_error"
    assert code_of("OSError: [Errno 5] Input/output error: '/data/shard_0007.tar'") == "io_error"
    assert code_of("cp: error reading 'ckpt/model.pt': Input/output error") == "io_error"


# -- NVLink: the GPUs' fabric failed; the GPU-hardware code (gpu_faulty), not a lost GPU
@pytest.mark.parametrize("line", [
    "NVRM: Xid (PCI:0000:66:00): 145, RLW_REMAP Fatal XC0 i0 Link 13 (0x0409a0c1 0x00000002 0x00000000)",
    "NVRM: Xid (PCI:0000:41:00): 74, pid=58210, name=python3, NVLink: fatal error detected on link 2(0x10000, 0x0)",
    "NVRM: Xid (PCI:0000:18:00): 144, NVLINK: SAW_MVB Nonfatal XC0 i0 Link 00",
    "RuntimeError: CUDA error: uncorrectable NVLink error detected during the execution",
])
def test_an_nvlink_fault_is_the_gpu_hardware_code(line: str) -> None:
    assert code_of(line) == "gpu_faulty", line


def test_other_fatal_xids_stay_a_lost_gpu() -> None:
    assert code_of("NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.") == "gpu_lost"


def test_an_nvlink_xid_in_the_kernel_log_is_no_chatter(tmp_path: Path) -> None:
    now = time.time()
    facts = {"now": now, "benchmark": {"match": ["train.py"], "entrypoint": [r"entrypoint\.sh"]},
             "processes": [rec(2, 1, "python3 train.py", state="R", cpu=100.0, start=now - 600)],
             "logs": [], "files": [],
             "dmesg": {"lines": ["[%.1f] NVRM: Xid (PCI:0000:66:00): 145, RLW_REMAP Fatal XC0 i0 Link 13" % 9990.0],
                       "uptime": 10000.0, "error": None},
             "gpu": {"state": "ok", "devices": [{"index": 0, "util": 100, "mem_used": 40 << 30, "power": 300.0,
                                                 "power_limit": 700.0}]}}
    assert dg.analyze(facts)["verdict"]["code"] == "gpu_faulty"


# -- a device the process cannot see: on a MIG-split GPU, the MIG layout
ORDINALS = [
    "[rank1]: RuntimeError: device >= 0 && device < num_gpus INTERNAL ASSERT FAILED at "
    "\"../aten/src/ATen/cuda/CUDAContext.cpp\":50, please report a bug to PyTorch. device=1, num_gpus=1",
    "RuntimeError: CUDA error: invalid device ordinal",
    "RuntimeError: Attempting to deserialize object on CUDA device 1 but torch.cuda.device_count() is 1.",
]


def _ordinal_facts(tmp_path: Path, line: str, mig: bool) -> Dict[str, Any]:
    (tmp_path / "train.log").write_text("Traceback (most recent call last):\n  File \"train.py\", line 9\n%s\n" % line)
    now = time.time()
    device: Dict[str, Any] = {"index": 0, "util": 0, "mem_used": 0, "power": 60.0, "power_limit": 400.0}
    if mig:
        device["mig"] = [{"profile": "3g.40gb", "mem_total": 40 << 30}, {"profile": "3g.40gb", "mem_total": 40 << 30}]
    return {"now": now, "benchmark": {"match": ["train.py"], "entrypoint": [r"entrypoint\.sh"]},
            "processes": [], "logs": logs_of(tmp_path), "files": [], "gpu": {"state": "ok", "devices": [device]}}


@pytest.mark.parametrize("line", ORDINALS)
def test_a_device_a_process_cannot_see_on_mig_slices_is_mig_misconfigured(tmp_path: Path, line: str) -> None:
    assert dg.analyze(_ordinal_facts(tmp_path, line, mig=True))["verdict"]["code"] == "mig_misconfigured"
    assert dg.analyze(_ordinal_facts(tmp_path, line, mig=False))["verdict"]["code"] == "cuda_error"


# -- a kernel the GPU cannot launch; no host compiler for a JIT
@pytest.mark.parametrize("line", [
    "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 98304, Hardware limit: 49152. "
    "Reducing block sizes or `num_stages` may help.",
    "ERROR 12-07 07:43:20 engine.py:135] OutOfResources('out of resource: shared memory, Required: 131072, Hardware "
    "limit: 101376. Reducing block sizes or `num_stages` may help.')",
])
def test_a_kernel_asking_more_shared_memory_than_the_gpu_has_is_a_cuda_error(line: str) -> None:
    assert code_of(line) == "cuda_error", line


@pytest.mark.parametrize("line", [
    "RuntimeError: Failed to find C compiler. Please specify via CC environment variable.",
    "torch._inductor.exc.InvalidCxxCompiler: No working C++ compiler found in torch._inductor.config.cpp.cxx: "
    "(None, 'g++')",
    "/bin/sh: 1: gcc: not found",
])
def test_no_host_compiler_for_a_jit_is_a_missing_command(line: str) -> None:
    assert code_of(line) == "command_not_found", line


# -- a task killed with 137 in a workflow manager's words; its retry notice is a warning ------------------------------
def test_exit_status_137_in_parentheses_is_a_kill() -> None:
    assert code_of("  Process `CRUMBLE (Macahu1)` terminated with an error exit status (137)") == "killed"
    assert code_of("Error: exit status: 137") == "killed"


@pytest.mark.parametrize("line", [
    "[a4/19f0c2] NOTE: Process `HYBRID:pilon (x)` terminated with an error exit status (137) -- Execution is retried "
    "(1)",
    "Error in rule embed: jobid: 12 ... Trying to restart job 12.",
    "WARNING: task train_shard_3 failed (exit 1) and will be retried",
])
def test_a_failed_attempt_that_is_retried_is_a_warning(line: str) -> None:
    assert level_cap(line) == "warning", line


# -- a scheduler that cannot place the job waits for ever: hung; the scheduler's own refusal to place it is
# unschedulable since blind round 15 (its code), Ray Tune's hedged warning stays hung
@pytest.mark.parametrize("line, code", [
    ("2024-12-07 07:58:32,950\tWARNING insufficient_resources_manager.py:163 -- Ignore this message if the cluster is "
     "autoscaling. No trial is running and no new trial has been started within the last 60 seconds.", "hung"),
    ("(autoscaler +1m2s) Warning: The following resource request cannot be scheduled right now: {'GPU': 8.0}",
     "unschedulable"),
    ("Warning  FailedScheduling  2m  default-scheduler  0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
     "unschedulable"),
])
def test_a_job_the_scheduler_cannot_place_is_hung(line: str, code: str) -> None:
    assert code_of(line) == code, line


# -- how runs end: workflow tallies, outputs counted, a results table of numbers
@pytest.mark.parametrize("line", [
    "Succeeded   : 40",
    "41 of 41 steps (100%) done",
    "Wrote 2000 completions to out/opt67b_spec.jsonl",
    "Saved 500 images to renders/",
])
def test_closing_tallies_and_counted_outputs_close_a_run(line: str) -> None:
    assert completion.is_completion_line(line), line


@pytest.mark.parametrize("line", ["Succeeded   : 0", "12 of 41 steps (29%) done", "wrote 0 files to out/"])
def test_partial_tallies_do_not_close_a_run(line: str) -> None:
    assert not completion.is_completion_line(line), line


def test_a_share_that_failed_in_a_summary_is_no_failure() -> None:
    assert not completion.FAILED_WORDS.search("CPU hours   : 141.8 (3.4% failed)")
    assert completion.FAILED_WORDS.search("task failed")


def _finished_facts(tmp_path: Path, text: str) -> Dict[str, Any]:
    log = tmp_path / "bench.log"
    log.write_text(text)
    now = time.time()
    os.utime(log, (now - 50, now - 50))
    return {"now": now, "benchmark": {"match": ["osu_bcast"], "entrypoint": [r"entrypoint\.sh"]},
            "processes": [], "logs": logs_of(tmp_path), "files": [],
            "gpu": {"state": "ok", "devices": [{"index": 0, "util": 0, "mem_used": 0}]}}


UCX = ("[1733559503.473099] [node:1188443:0]  ib_log.c:246  UCX  ERROR mlx5_0: ibv_create_cq() failed: Cannot "
       "allocate memory. Please set max locked memory (ulimit -l) to 'unlimited' (current: 64 kbytes)\n")


def test_a_numeric_results_table_after_transport_errors_is_a_finished_run(tmp_path: Path) -> None:
    rows = "".join("%-10d %10.2f\n" % (1 << i, 0.2 + i * 0.1) for i in range(12))
    text = "$ mpirun -n 2 osu_bcast\n" + UCX * 2 + "\n# OSU MPI Broadcast Latency Test v7.4\n# Size  Avg Latency(us)\n"
    assert dg.analyze(_finished_facts(tmp_path, text + rows))["verdict"]["code"] == "finished"
    # the same errors, no table after them: the run failed on them
    assert dg.analyze(_finished_facts(tmp_path, text))["verdict"]["code"] == "resource_limit"


def test_numbers_without_a_header_are_no_results_table() -> None:
    assert completion.closing_table(["Traceback (most recent call last):", "1 2", "3 4", "5 6", "7 8"]) is None
    assert completion.closing_table(["x", "# size latency", "1 2", "3 4", "5 6", "7 8"]) == 2


def test_a_task_log_that_ends_in_its_failure_outweighs_a_pipelines_success(tmp_path: Path) -> None:
    task = tmp_path / "colabfold.log"
    task.write_text("2024-12-07 08:03:14,020 Running on GPU\n2024-12-07 08:14:57,636 Could not predict T1104. Not "
                    "Enough GPU memory? RESOURCE_EXHAUSTED: Out of memory while trying to allocate 28931194880 bytes.\n"
                    "2024-12-07 08:14:57,812 Done\n")
    pipe = tmp_path / "nextflow.log"
    pipe.write_text("[8a/11c0de] COLABFOLD_BATCH (T1104) [100%] 1 of 1 \u2714\n-[nf-core/proteinfold] Pipeline "
                    "completed successfully-\nSucceeded   : 3\n")
    now = time.time()
    os.utime(task, (now - 130, now - 130))
    os.utime(pipe, (now - 30, now - 30))
    facts = {"now": now, "benchmark": {"match": ["nextflow"], "entrypoint": [r"entrypoint\.sh"]},
             "processes": [], "logs": logs_of(tmp_path), "files": [],
             "gpu": {"state": "ok", "devices": [{"index": 0, "util": 0, "mem_used": 0}]}}
    assert dg.analyze(facts)["verdict"]["code"] == "cuda_oom"
    task.write_text("2024-12-07 08:03:14,020 Running on GPU\n2024-12-07 08:14:57,812 Done\n")  # the task went well
    os.utime(task, (now - 130, now - 130))
    facts["logs"] = logs_of(tmp_path)
    assert dg.analyze(facts)["verdict"]["code"] == "finished"


# -- a download's percent in words is a meter --------------------------------------------------------------------------
@pytest.mark.parametrize("line,pct", [
    ("Download progress: 17%, ETA 46:02", 17.0),
    ("Download progress: 13%, waiting for network or Hugging Face", 13.0),
    ("Downloading model weights... 42%", 42.0),
])
def test_a_downloads_percent_in_words_is_a_meter(line: str, pct: float) -> None:
    sample = progress.parse(line)
    assert sample is not None and sample.kind == "download" and sample.percent == pct, sample
