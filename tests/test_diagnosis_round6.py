"""Diagnosis classes learned from blind round 6 (tests/fixtures/incidents-blind/round-6): each rule reads a class
of wordings or facts, not one incident's line (docs/diagnosis.md). Pure: the engine on facts built here."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict

import pytest

from console.agent.diagnosis import diagnose as dg
from console.agent.diagnosis import signatures
from console.agent.diagnosis.progress import parse
from tests.test_diagnose import TRAIN_BENCH, by_code, gpu, logs_of, rec


@pytest.mark.parametrize("line,code", [
    # an SSH login refused on the way to another node, a registry or git server refusing the credentials
    ("gpu-a02: mlops@gpu-a02: Permission denied (publickey).", "credentials_refused"),
    ("root@10.0.0.7: Permission denied (publickey,password).", "credentials_refused"),
    ('Get "https://nvcr.io/v2/nvidia/pytorch/manifests/24.05-py3": unauthorized: authentication required',
     "credentials_refused"),
    ("Error response from daemon: pull access denied for org/private, repository does not exist or may require "
     "'docker login': denied: requested access to the resource is denied", "credentials_refused"),
    ("fatal: Authentication failed for 'https://huggingface.co/meta-llama/Llama-3.1-8B/'", "credentials_refused"),
    ("PermissionError: [Errno 13] Permission denied: '/models/cache'", "permission_denied"),  # a file: unchanged
    # the build tools a JIT extension or a source build needs
    ('    raise RuntimeError("Ninja is required to load C++ extensions")', "command_not_found"),
    ("CMake must be installed to build the following extensions: llama_cpp", "command_not_found"),
    ("error: command 'gcc' failed: No such file or directory", "command_not_found"),
    # RDMA registration under a small locked-memory limit
    ("misc/ibvwrap.cc:278 NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory",
     "resource_limit"),
    # the host's memory refused an allocation, no OOM killer involved
    ("memory allocation of 8606711792 bytes failed", "host_memory_exhausted"),
    ("terminate called after throwing an instance of 'std::bad_alloc'", "host_memory_exhausted"),
    ("numpy.core._exceptions._ArrayMemoryError: Unable to allocate 35.4 GiB for an array with shape (1,)",
     "host_memory_exhausted"),
    ("MemoryError", "host_memory_exhausted"),
    ("fatal error: runtime: out of memory", "host_memory_exhausted"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "cuda_oom"),  # the GPU's: unchanged
    # Lustre's client losing its server
    ("Lustre: fsx-MDT0000-mdc-0000: Connection to fsx-MDT0000 (at 10.0.47.232@tcp) was lost; in progress "
     "operations using this service will wait for recovery to complete", "storage_stall"),
    # round 3's classes left from before (fixed after round 6 was scored): torch's own OOM class, SGLang's memory
    # check, libmamba's unsatisfiable pin, TLS that never came up, an HTTP fetch timing out inside requests
    ("torch.OutOfMemoryError: Allocation on device", "cuda_oom"),
    ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.", "cuda_oom"),
    ("  - package conda-23.11.0-py311h06a4308_0 requires python >=3.11,<3.12.0a0, but none of the providers can "
     "be installed", "install_failed"),
    ("OpenSSL: error:1407742E:SSL routines:SSL23_GET_SERVER_HELLO:tlsv1 alert protocol version", "download_failed"),
    ("Unable to establish SSL connection.", "download_failed"),
    ("requests.exceptions.ConnectionError: HTTPSConnectionPool(host='cdn-lfs.huggingface.co', port=443): Read "
     "timed out.", "download_failed"),
    ("ERROR: torch 2.1.0 requires numpy>=1.26, but you have numpy 1.24.4 which is incompatible.",
     "version_mismatch"),  # pip's own pin conflict: unchanged
])
def test_round_6_wordings_join_their_classes(line: str, code: str) -> None:
    sig = signatures.match_line(line)
    assert sig is not None and sig.code == code, (line, sig and sig.code)


@pytest.mark.parametrize("line,amount", [
    ("Filtering content:   9% (3/33), 15.23 GiB | 34.24 MiB/s", "15.23 GiB"),  # git-lfs
    ("Receiving objects:  45% (1234/2700), 12.34 MiB | 5.67 MiB/s", "12.34 MiB"),  # git
    ("  63932750K .......... .......... .......... .......... .......... 55% 11.2M 5h43m", "63932750"),  # wget dots
])
def test_meters_of_bytes_in_git_and_wget_dot_form_are_downloads(line: str, amount: str) -> None:
    sample = parse(line)
    assert sample is not None and sample.kind == "download" and sample.amount == amount


def dead_run(tmp_path: Path, text: str) -> Dict[str, Any]:
    (tmp_path / "run.log").write_text(text)
    return {"now": time.time(), "benchmark": TRAIN_BENCH, "logs": logs_of(tmp_path), "files": [], "processes": []}


def test_a_test_programs_closing_words_finish_the_run(tmp_path: Path) -> None:
    text = ("||Ax-b||_oo/(eps*(||A||_oo*||x||_oo+||b||_oo)*N)=        0.0022153 ...... PASSED\n" + "=" * 80 + "\n\n"
            "Finished      1 tests with the following results:\n"
            "              1 tests completed and passed residual checks,\n"
            "              0 tests completed and failed residual checks,\n"
            "              0 tests skipped because of illegal input values.\n" + "-" * 80 + "\n\nEnd of Tests.\n")
    assert dg.analyze(dead_run(tmp_path, text))["verdict"]["code"] == "finished"


@pytest.mark.parametrize("text", [
    "*** Public inputs: 33 35937\n*** Verification status: True\n",
    "Model checkpoint of size 4.66 GiB saved to /out/epoch_0/ft-model-00030-of-00030.safetensors\n"
    "Saving final epoch checkpoint.\nThe full model checkpoint has been saved successfully.\n"
    "Saving checkpoint took 611.48 secs\n",
], ids=["verification-status", "saved-successfully"])
def test_a_verification_status_or_a_save_that_succeeded_finishes_the_run(tmp_path: Path, text: str) -> None:
    assert dg.analyze(dead_run(tmp_path, text))["verdict"]["code"] == "finished"


def test_a_tls_failure_before_a_scripts_done_is_the_verdict(tmp_path: Path) -> None:
    text = ("done.\n+ wget https://files.example.org/weights.tar.gz\nConnecting to files.example.org|10.0.0.1|:443... "
            "connected.\nOpenSSL: error:1407742E:SSL routines:SSL23_GET_SERVER_HELLO:tlsv1 alert protocol version\n"
            "Unable to establish SSL connection.\n")
    assert dg.analyze(dead_run(tmp_path, text))["verdict"]["code"] == "download_failed"


def test_a_long_line_is_cited_around_what_it_names(tmp_path: Path) -> None:
    """onnxruntime's 400-character line names the missing library at its end: the evidence keeps that part."""
    line = ("2025-11-08 19:02:18.488 [E:onnxruntime:Default, provider_bridge_ort.cc:1546 TryGetProviderInfo_CUDA] "
            + "/onnxruntime_src/onnxruntime/core/session/provider_bridge_ort.cc:1209 " * 3
            + "Failed to load library libonnxruntime_providers_cuda.so with error: libcublasLt.so.11: cannot open "
              "shared object file: No such file or directory\n")
    result = dg.analyze(dead_run(tmp_path, "loading model\n" + line))
    assert result["verdict"]["code"] == "library_missing"
    assert any("cannot open shared object file" in e["text"] for e in by_code(result)["library_missing"]["evidence"])


XFORMERS = ("WARNING[XFORMERS]: xFormers can't load C++/CUDA extensions. xFormers was built for:\n"
            "    PyTorch 2.3.0+cu121 with CUDA 1201 (you have 2.1.0+cu121)\n"
            "Loading checkpoint shards: 100%|##########| 4/4 [00:07<00:00,  1.86s/it]\n"
            "*** starting training ***\n"
            "Traceback (most recent call last):\n  File \"train.py\", line 9, in <module>\n"
            "NotImplementedError: No operator found for `memory_efficient_attention_forward` with inputs:\n"
            "     query       : shape=(1, 2, 1, 40) (torch.float16)\n")


def test_a_warning_the_run_went_past_heads_when_the_failure_names_it_again(tmp_path: Path) -> None:
    text = XFORMERS + "`cutlassF` is not supported because:\n    xFormers wasn't build with CUDA support\n"
    result = dg.analyze(dead_run(tmp_path, text))
    assert result["verdict"]["code"] == "version_mismatch", result["verdict"]
    assert "xformers" in by_code(result)["version_mismatch"]["summary"]


def test_a_warning_the_failure_does_not_name_stays_behind_it(tmp_path: Path) -> None:
    text = XFORMERS + "`cutlassF` is not supported because:\n    operator wasn't built for this device\n"
    assert dg.analyze(dead_run(tmp_path, text))["verdict"]["code"] == "python_traceback"


def throttled_facts(tmp_path: Path, reasons: list[str]) -> Dict[str, Any]:
    now = time.time()
    (tmp_path / "train.log").write_text("".join("step %d/5000 loss 2.1\n" % s for s in range(1, 60)))
    device = dict(gpu(100, 240.0, limit=400.0, holder=501), health={"clock_events": reasons})
    return {"now": now, "benchmark": TRAIN_BENCH, "logs": logs_of(tmp_path), "files": [], "stall_seconds": 120,
            "processes": [rec(501, 1, "python3 train.py", start=now - 600)],
            "gpu": {"state": "ok", "devices": [device]}}


def test_nvml_slowdown_reasons_are_a_throttled_finding_and_the_power_cap_is_not(tmp_path: Path) -> None:
    result = dg.analyze(throttled_facts(tmp_path, ["hw_slowdown"]))
    assert "throttled" in by_code(result), result["findings"]
    assert "HW slowdown" in by_code(result)["throttled"]["summary"]
    capped = dg.analyze(throttled_facts(tmp_path, ["sw_power_cap"]))  # a card at its power limit: the load's cap
    assert "throttled" not in by_code(capped)
