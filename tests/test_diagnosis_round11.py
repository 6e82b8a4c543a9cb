"""Diagnosis classes learned from blind round 11 (tests/fixtures/incidents-blind/round-11), fixed after its
first-seen score was recorded: each rule reads a class of wordings or facts (docs/diagnosis.md). Pure: lines
through the signature table, the completion words and the progress parser, or ``analyze`` on built facts. The
wordings are the class's other programs' where there are some, not only the incidents'."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

from console.agent.diagnosis import completion, events
from console.agent.diagnosis import diagnose as dg
from console.agent.diagnosis.timeline import Timeline
from tests.test_diagnose import code_of, logs_of, rec


# -- how finished runs with no process left say so: a package manager's, a logger's, a script's closing word -------
@pytest.mark.parametrize("line", [
    "Successfully installed flash-attn-2.0.4",
    "Successfully installed nvidia-cudnn-cu12-9.1.0.70 torch-2.4.0 triton-3.0.0",
    "Executing transaction: done",
    "INFO:main:Done!",
    "INFO:__main__:Finished.",
    "batch_transcribe.sh: done, 5 files, 0 failed",
    "run_all.sh: finished.",
    "[run_mlperf] 2026-07-11T04:16:41Z resnet50 offline performance run_1 finished (exit 0), results in /results/r1",
    "worker 3 stopped (exit 0)",
    "job 4411 ended, rc=0",
    "I0701 03:30:41.812450 139871 train.py:1212] train.py exited cleanly",
    "Done running 1 fold jobs.",
    "Finished processing 12 files",
    "Fold job 2PV7 done, output written to /root/af_output/2pv7",
    "success",
    "Status: Downloaded newer image for nvcr.io/nvidia/pytorch:24.05-py3",
    "Result is : VALID",
    ':::MLLOG {"namespace": "", "time_ms": 1788999621242, "event_type": "INTERVAL_END", "key": "run_stop", "value": '
    'null, "metadata": {"file": "train.py", "lineno": 412, "status": "success"}}',
])
def test_closing_words_of_finished_runs_close_a_run(line: str) -> None:
    assert completion.is_completion_line(line), line


@pytest.mark.parametrize("line", [
    "INFO:main:Done loading the model",
    "Result is : INVALID",
    ':::MLLOG {"namespace": "", "time_ms": 1, "event_type": "INTERVAL_END", "key": "run_stop", "value": null, '
    '"metadata": {"status": "aborted"}}',
    "process exited (exit code 1)",
    "Installing collected packages: flash-attn",
])
def test_words_that_are_no_closing_stay_open(line: str) -> None:
    assert not completion.is_completion_line(line), line


def test_a_source_line_a_traceback_quotes_is_no_closing_word() -> None:
    lines = ["Traceback (most recent call last):", '  File "rnn.py", line 761, in forward',
             "    result = _VF.lstm(input, hx, self._flat_weights, self.bias, self.num_layers,",
             "RuntimeError: something went wrong", "You can try to repro this exception using the following code."]
    assert completion.last_words({"lines": lines}) == []


# -- a CUDA library's failure status is a CUDA error (an allocation failure stays an OOM) --------------------------
@pytest.mark.parametrize("line", [
    "RuntimeError: cuDNN error: CUDNN_STATUS_EXECUTION_FAILED",
    "RuntimeError: cuDNN error: CUDNN_STATUS_MAPPING_ERROR",
    "RuntimeError: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input.",
    "torch._C._LinAlgError: cusolver error: CUSOLVER_STATUS_EXECUTION_FAILED, when calling `cusolverDnXgeqrf`",
    "RuntimeError: cuFFT error: CUFFT_INTERNAL_ERROR",
    "RuntimeError: CUSPARSE_STATUS_INTERNAL_ERROR when calling `cusparseSpMM`",
])
def test_a_cuda_librarys_failure_status_is_a_cuda_error(line: str) -> None:
    assert code_of(line) == "cuda_error", line


def test_a_cuda_librarys_allocation_failure_stays_an_oom() -> None:
    assert code_of("RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED") == "cuda_oom"


# -- a download whose body ended early or whose retries ran out failed ----------------------------------------------
@pytest.mark.parametrize("line", [
    "Error: max retries exceeded: EOF",
    "Error: max retries exceeded: unexpected EOF",
    'Error: max retries exceeded: Get "https://example.r2.cloudflarestorage.com/ollama/blobs/sha256/6a": dial tcp: '
    "i/o timeout",
    "Exception: Error while downloading: reqwest::Error { kind: Body, source: hyper::Error(Body, Custom { kind: "
    "UnexpectedEof, error: IncompleteBody }) }",
    "RuntimeError: An error occurred while downloading using `hf_transfer`. Consider disabling "
    "HF_HUB_ENABLE_HF_TRANSFER for better error handling.",
    "Error: error decoding response body: operation timed out",
])
def test_a_body_that_ended_early_or_retries_that_ran_out_are_a_failed_download(line: str) -> None:
    assert code_of(line) == "download_failed", line


def test_a_meter_redrawn_after_a_traceback_is_no_work_going_on() -> None:
    lines = ["config.json: 100%|##########| 663/663 [00:00<00:00, 4.31MB/s]", "Traceback (most recent call last):",
             '  File "dl.py", line 3, in <module>', "RuntimeError: An error occurred while downloading",
             "Fetching 14 files:  29%|##8       | 4/14 [01:33<03:53, 23.35s/it]"]
    assert events.last_resumed(lines, None) == 0
    lines[3] = "resuming shard 3"  # no exception line before it: the meter moved
    assert events.last_resumed(lines, None) == 4


# -- a failure another log says it retries, before the run's "done", is no ending -----------------------------------
def _retried_then_done(tmp_path: Path, stall: str) -> Dict[str, Any]:
    server = tmp_path / "server.log"
    server.write_text("time=2026-02-03T10:14:11.302Z level=INFO msg=\"downloading 6ae2 in 42 part(s)\"\n"
                      "time=2026-02-03T10:39:05.118Z level=INFO msg=\"%s\"\n"
                      "[GIN] 2026-02-03 - 10:49:41 | 200 |  9m38s | 127.0.0.1 | POST \"/api/pull\"\n"
                      "[GIN] 2026-02-03 - 10:51:00 | 200 |  36.1us | 127.0.0.1 | GET \"/api/tags\"\n" % stall)
    pull = tmp_path / "pull.log"
    pull.write_text("pulling 22e1b2e8dc2f... 100%\nverifying sha256 digest\nwriting manifest\nsuccess\n")
    now = time.time()
    os.utime(server, (now - 2, now - 2))
    os.utime(pull, (now - 80, now - 80))
    return {"now": now, "benchmark": {"match": ["ollama pull", r"pull_models\.sh"],
                                      "entrypoint": [r"pull_models\.sh"]},
            "processes": [rec(7, 1, "ollama serve", start=now - 4000)], "logs": logs_of(tmp_path), "files": [],
            "gpu": {"state": "ok", "devices": [{"index": 0, "util": 0, "mem_used": 0}]}}


def test_a_failure_another_log_retries_before_the_done_is_history(tmp_path: Path) -> None:
    facts = _retried_then_done(tmp_path, "6ae2 part 27 stalled; retrying. If this persists, press ctrl-c to exit")
    assert dg.analyze(facts)["verdict"]["code"] == "finished"


def test_gins_dash_date_is_a_timestamp() -> None:
    log = {"lines": ["time=2026-02-03T10:39:05.118Z level=INFO msg=x",
                     "[GIN] 2026-02-03 - 10:51:00 | 200 | 36.1us | 127.0.0.1 | GET \"/api/tags\""], "mtime": 1000.0}
    timeline = Timeline(log, 1000.0)
    assert 1000.0 - timeline.at(0) == pytest.approx(715.0, abs=1.0)


# -- a busy GPU left in an idle performance state is throttled ------------------------------------------------------
def _pstate_facts(tmp_path: Path, util: int, pstate: int) -> Dict[str, Any]:
    now = time.time()
    (tmp_path / "train.log").write_text("".join("%d\timages/sec: 61.0 +/- 0.4\t7.4\n" % s for s in range(10, 600, 10)))
    devices: List[Dict[str, Any]] = [
        {"index": i, "util": util, "mem_used": 10 << 30, "power": 142.0 if i < 3 else 41.0, "power_limit": 149.0,
         "health": {"clock_events": [], "pstate": 0 if i < 3 else pstate}} for i in range(4)]
    return {"now": now, "benchmark": {"match": ["tf_cnn_benchmarks"], "entrypoint": [r"entrypoint\.sh"]},
            "logs": logs_of(tmp_path), "files": [], "stall_seconds": 120,
            "processes": [rec(501, 1, "python3 tf_cnn_benchmarks.py --num_gpus=4", state="R", cpu=100.0,
                              start=now - 600)],
            "gpu": {"state": "ok", "devices": devices}}


def test_a_busy_gpu_in_an_idle_performance_state_is_throttled(tmp_path: Path) -> None:
    result = dg.analyze(_pstate_facts(tmp_path, 100, 8))
    assert result["verdict"]["code"] == "throttled", result["verdict"]
    assert any(e["path"] == "gpu:3" for f in result["findings"] if f["code"] == "throttled" for e in f["evidence"])


def test_an_idle_gpu_in_p8_is_not_throttled(tmp_path: Path) -> None:
    facts = _pstate_facts(tmp_path, 100, 2)  # P2: a working state
    assert dg.analyze(facts)["verdict"]["code"] != "throttled"
    facts = _pstate_facts(tmp_path, 0, 8)  # idle at P8: what an idle card does
    assert all(f["code"] != "throttled" for f in dg.analyze(facts)["findings"])


# -- a task blocked on swap is memory pressure, not storage ---------------------------------------------------------
HUNG_HEAD = ["[9000.0] INFO: task python3:41822 blocked for more than 122 seconds.",
             "[9000.0]       Not tainted 6.5.0-41-generic #41~22.04.2-Ubuntu",
             '[9000.0] "echo 0 > /proc/sys/kernel/hung_task_timeout_secs" disables this message.',
             "[9000.0] task:python3         state:D stack:0     pid:41822 ppid:41790  flags:0x00004002",
             "[9000.0] Call Trace:", "[9000.0]  <TASK>", "[9000.0]  __schedule+0x2cb/0x750",
             "[9000.0]  io_schedule+0x46/0x80"]


def _kernel_codes(lines: List[str]) -> List[str]:
    facts = {"dmesg": {"lines": lines, "uptime": 9100.0, "error": None}}
    return [ep.code for ep in events.kernel_episodes(facts, time.time(), None)]


@pytest.mark.parametrize("frames", [
    ["[9000.0]  swap_readpage+0x1b0/0x2a0", "[9000.0]  do_swap_page+0x1ae/0xa30"],
    ["[9000.0]  swap_read_folio+0x61/0x1b0", "[9000.0]  swapin_readahead+0x6f/0x5a0"],
])
def test_a_task_blocked_on_swap_is_no_storage_stall(frames: List[str]) -> None:
    assert "storage_stall" not in _kernel_codes(HUNG_HEAD + frames)
    assert "storage_stall" not in _kernel_codes(["[9050.0] INFO: task kswapd0:98 blocked for more than 122 seconds."])


def test_a_task_blocked_on_a_disk_stays_a_storage_stall() -> None:
    frames = ["[9000.0]  wait_on_page_bit+0x7a/0x90", "[9000.0]  nfs_wait_bit_killable+0x21/0x90 [nfs]"]
    assert "storage_stall" in _kernel_codes(HUNG_HEAD + frames)


# -- an OOM the program caught and skipped its item: the run failed for GPU memory ----------------------------------
@pytest.mark.parametrize("line", [
    "Predicting DataLoader 0:   0%|          | 0/1 [00:00<?, ?it/s]| WARNING: ran out of memory, skipping batch",
    "| WARNING: ran out of memory, skipping batch",
    "WARNING: OOM, skipping batch 12",
    "Skipping batch due to OOM",
])
def test_an_oom_skipping_its_item_is_a_cuda_oom(line: str) -> None:
    assert code_of(line) == "cuda_oom", line


def test_a_failed_count_after_a_skipped_oom_keeps_it_current(tmp_path: Path) -> None:
    log = tmp_path / "predict.log"
    log.write_text("Running structure prediction for 1 input.\n"
                   "Predicting:   0%|          | 0/1 [00:00<?, ?it/s]| WARNING: ran out of memory, skipping batch\n"
                   "Predicting: 100%|##########| 1/1 [07:08<00:00,  0.00it/s]Number of failed examples: 1\n"
                   "Predicting: 100%|##########| 1/1 [07:08<00:00,  0.00it/s]\n")
    now = time.time()
    os.utime(log, (now - 60, now - 60))
    facts = {"now": now, "benchmark": {"match": ["predict"], "entrypoint": [r"run\.sh"]}, "processes": [],
             "logs": logs_of(tmp_path), "files": [], "gpu": {"state": "ok", "devices": [{"index": 0, "util": 0,
                                                                                        "mem_used": 0}]}}
    assert dg.analyze(facts)["verdict"]["code"] == "cuda_oom"
