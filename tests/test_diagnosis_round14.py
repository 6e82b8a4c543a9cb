"""Diagnosis classes learned from blind round 14 (tests/fixtures/incidents-blind/round-14), fixed after its
first-seen score was recorded: each rule reads a class of wordings or facts (docs/diagnosis.md). Pure: lines
through the signature table, the completion words and the progress meters, or ``analyze`` on built facts. The
wordings are the class's other programs' where there are some, not only the incidents'."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from console.agent.diagnosis import codes, completion, progress
from console.agent.diagnosis import diagnose as dg
from console.agent.diagnosis.processes import benchmark_processes
from tests.test_diagnose import act, activity, code_of, logs_of, rec


def _facts(tmp_path: Path, text: str, age: float, procs: List[Dict[str, Any]], util: int = 0,
           act_: Optional[Dict[str, Any]] = None, match: Optional[List[str]] = None,
           entry: Optional[List[str]] = None, stall: int = 60) -> Dict[str, Any]:
    log = tmp_path / "run.log"
    log.write_text(text)
    now = time.time()
    os.utime(log, (now - age, now - age))
    device: Dict[str, Any] = {"index": 0, "util": util, "mem_used": (8 << 30) if util else 0,
                              "power": 230.0 if util else 15.0, "power_limit": 250.0}
    facts: Dict[str, Any] = {
        "now": now, "benchmark": {"match": match or [r"run\.py"], "entrypoint": entry or [r"entrypoint\.sh"]},
        "stall_seconds": stall, "processes": procs, "logs": logs_of(tmp_path), "files": [],
        "gpu": {"state": "ok", "devices": [device]}}
    if act_ is not None:
        facts["activity"] = act_
    return facts


def _code(facts: Dict[str, Any]) -> str:
    return str(dg.analyze(facts)["verdict"]["code"])


# -- (1) a tool's own verdict VALID outranks a count of logged errors it says do not void the result ----------------
@pytest.mark.parametrize("verdict", ["Result is : VALID", "HPCG result is VALID with a GFLOP/s rating of=812.4"])
def test_a_tools_valid_verdict_outranks_a_count_of_errors(tmp_path: Path, verdict: str) -> None:
    text = "\n".join(["MLPerf Results Summary", "Scenario : Offline", verdict, "Samples per second: 1843.2",
                      "min_duration (ms): 60000", "", "No warnings encountered during test.", "",
                      "1 ERROR encountered. See detailed log."]) + "\n"
    assert _code(_facts(tmp_path, text, 300, [])) == "finished"


def test_a_count_of_errors_without_a_valid_verdict_is_no_quiet_ending(tmp_path: Path) -> None:
    text = "Scenario : Offline\nSamples per second: 1843.2\n\n1 ERROR encountered. See detailed log.\n"
    assert _code(_facts(tmp_path, text, 300, [])) != "finished"


# -- (1) a retry the log shows going on, a step's success mid-setup: the transfer after it is under way -------------
@pytest.mark.parametrize("line, amount, pct", [
    ("   ━━━━━━━━━━━━╺━━━━━━━━━━━━━━━━━━━━━━━━━━━ 28.8/90.6 MB 2.4 MB/s eta 0:00:25", "28.8 MB", 31.8),  # pip (rich)
    ("Downloading torch 512.0/2048.0 MB 40.1 MB/s eta 0:00:38", "512.0 MB", 25.0),
    ("   ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 3.7/3.7 MB 5.1 MB/s eta 0:00:00", "3.7 MB", 100.0),
])
def test_a_download_column_with_one_unit_is_a_transfer(line: str, amount: str, pct: float) -> None:
    sample = progress.parse(line)
    assert sample is not None and sample.kind == "download" and sample.amount == amount
    assert sample.percent is not None and round(sample.percent, 1) == pct


@pytest.mark.parametrize("line, amount", [
    ("d8f1569ddae6: Downloading [=====>                                             ]  314.0MB/3.14GB", "314.0 MB"),
    ("7ddbc47eeb70: Extracting [==>                                                ]  32.77kB/1.2GB", "32.77 KB"),
    ("Copying blob 2b1a3c4d5e6f [===>----------------------------] 12.0MiB / 400.0MiB", "12.0 MB"),
])
def test_a_container_layers_meter_is_a_transfer(line: str, amount: str) -> None:
    sample = progress.parse(line)
    assert sample is not None and sample.kind == "download" and sample.amount == amount and not sample.done


def test_a_steps_success_with_a_layer_downloading_after_it_is_no_ending() -> None:
    lines = ["Error response from daemon: unauthorized: authentication required", "Login Succeeded",
             "v0.9: Pulling from nvidia/nemo", "45d437916d57: Pull complete",
             "d8f1569ddae6: Downloading [=======>                                           ]  439.6MB/3.14GB"]
    assert completion.last_words({"lines": lines}) == []


def test_a_retried_fetch_with_the_next_wheel_downloading_is_starting(tmp_path: Path) -> None:
    text = "\n".join([
        "Collecting numba==0.60.0", "  WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, "
        "status=None)) after connection broken by 'ReadTimeoutError(\"HTTPSConnectionPool(host='pypi.org', "
        "port=443): Read timed out. (read timeout=15)\")': /simple/numba/",
        "Downloading cupy_cuda12x-13.3.0-cp311-cp311-manylinux2014_x86_64.whl (90.6 MB)",
        "   ━━━━━╺━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 12.0/90.6 MB 2.4 MB/s eta 0:00:32",
        "   ━━━━━━━━━━━━╺━━━━━━━━━━━━━━━━━━━━━━━━━━━ 28.8/90.6 MB 2.4 MB/s eta 0:00:25"]) + "\n"
    now = time.time()
    procs = [rec(5, 1, "bash entrypoint.sh", start=now - 20),
             rec(6, 5, "python3 -m pip install -r requirements.txt", start=now - 19)]
    assert _code(_facts(tmp_path, text, 1, procs)) == "starting"


# -- (1) a server started as its own entrypoint is the benchmark: up and idle between queries is healthy -----------
def test_a_process_both_patterns_name_with_no_benchmark_child_is_the_benchmark() -> None:
    facts = {"now": time.time(), "benchmark": {"match": ["milvus"], "entrypoint": ["milvus"]},
             "processes": [rec(2, 1, "milvus run standalone")]}
    assert [r["pid"] for r in benchmark_processes(facts, [], []).bench] == [2]
    wrapper = {"now": time.time(), "benchmark": {"match": ["ollama"], "entrypoint": ["ollama"]},
               "processes": [rec(2, 1, "ollama serve"), rec(3, 2, "ollama runner --model x")]}
    assert [r["pid"] for r in benchmark_processes(wrapper, [], []).bench] == [3]


# -- (2) a run that completed with a result its tool declares invalid: result_invalid, never finished --------------
@pytest.mark.parametrize("line, code", [
    ("Result is : INVALID", "result_invalid"),  # MLPerf loadgen
    ("Final Summary::HPCG result is INVALID.", "result_invalid"),
    ("Result is : NOT VALID", "result_invalid"),
    ("INVALID RUN -- the run did not satisfy the reporting rules", "result_invalid"),  # SPEC-style
    ("Result is : VALID", None),
    ("HPCG result is VALID with a GFLOP/s rating of=812.4", None),
])
def test_a_tools_invalid_verdict_is_result_invalid(line: str, code: Optional[str]) -> None:
    assert code_of(line) == code, line


def test_result_invalid_is_a_cause_with_its_remedy(tmp_path: Path) -> None:
    assert codes.tier("result_invalid") == "cause" and "run again" in codes.explanation("result_invalid")
    text = "\n".join(["MLPerf Results Summary", "Scenario : SingleStream", "Result is : INVALID",
                      "  Min duration satisfied : NO", "  Min queries satisfied : Yes", "",
                      "QPS w/ loadgen overhead         : 418.27", "", "No warnings encountered during test.",
                      "", "No errors encountered during test."]) + "\n"
    assert _code(_facts(tmp_path, text, 300, [])) == "result_invalid"


# -- (3) causes in wordings the table lacked, under wrappers --------------------------------------------------------
@pytest.mark.parametrize("line, code", [
    # a GPU library's own out-of-memory status (cuQuantum)
    ("  what():  [custatevec] %out of memory in addQubitsToState (line 210)", "cuda_oom"),
    ("RuntimeError: [custatevec] %insufficient workspace in applyMatrix", "cuda_oom"),
    ("cutensornet error: CUTENSORNET_STATUS_INSUFFICIENT_WORKSPACE", "cuda_oom"),
    # git's transfer cut, conda's fetch that never reached the channel
    ("error: RPC failed; curl 56 GnuTLS recv error (-9): A TLS packet with unexpected length was received.",
     "download_failed"),
    ("error: RPC failed; curl 18 transfer closed with outstanding read data remaining", "download_failed"),
    ("error: RPC failed; HTTP 504 curl 22 The requested URL returned error: 504", "download_failed"),
    ("fetch-pack: unexpected disconnect while reading sideband packet", "download_failed"),
    ("fatal: early EOF", "download_failed"),
    ("fatal: index-pack failed", "download_failed"),
    ("CondaHTTPError: HTTP 000 CONNECTION FAILED for url <https://repo.anaconda.com/pkgs/main/linux-64/"
     "current_repodata.json>", "download_failed"),
    # git-lfs's batch API refusing the identity
    ("batch response: Authentication required: Authorization error: https://github.com/o/r.git/info/lfs/objects/"
     "batch", "credentials_refused"),
    ("Error downloading object: w.bin (abc1234): Smudge error: Error downloading w.bin (abc1234): batch response: "
     "Bad credentials", "credentials_refused"),
    # no CUDA driver library (Numba)
    ("CUDA driver library cannot be found.", "no_gpu_driver"),
    ("numba.cuda.cudadrv.error.CudaSupportError: Error at driver init: ", "no_gpu_driver"),
    # a binary built for another GPU architecture (Kokkos)
    ("Kokkos::Cuda::initialize ERROR: likely mismatch of architecture", "version_mismatch"),
    ("Kokkos::Cuda::initialize ERROR: running kernels compiled for compute capability 8.0 on device with "
     "compute capability 7.0 is not supported by CUDA!", "version_mismatch"),
])
def test_wrappers_over_causes_in_new_wordings(line: str, code: str) -> None:
    assert code_of(line) == code, line


# -- (4) a transfer whose structured progress repeats the same count: download_stalled -----------------------------
@pytest.mark.parametrize("line, amount", [
    ('info: {"percent":0,"transferred":23068672} {"service":"render"}', "23068672"),
    ('{"loaded":1048576,"total":4194304}', "1048576"),
    ('progress {"bytesDownloaded": 5242880, "totalBytes": 10485760}', "5242880"),
])
def test_a_json_progress_event_is_a_transfer(line: str, amount: str) -> None:
    sample = progress.parse(line)
    assert sample is not None and sample.kind == "download" and sample.amount == amount and not sample.done


def test_a_json_transfer_reprinting_the_same_count_is_download_stalled(tmp_path: Path) -> None:
    moving = ['info: {"percent":0,"transferred":%d}' % (n << 22) for n in range(1, 6)]
    frozen = ['info: {"percent":0,"transferred":23068672}'] * 90
    procs = [rec(5, 1, "node /app/dist/render.js")]
    facts = _facts(tmp_path, "\n".join(["info: Download Attempt 2", *moving, *frozen]) + "\n", 2, procs,
                   act_=activity(act(5)), match=["render\\.js"])
    assert _code(facts) == "download_stalled"
