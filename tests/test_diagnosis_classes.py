"""Diagnosis classes learned from blind round 4 (tests/fixtures/incidents-blind/round-4) and the operator's review
(issue 35): each rule reads a class of wordings, not one incident's line (docs/diagnosis.md). Pure: the engine on
facts built here."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

from console.agent.diagnosis import diagnose as dg
from console.agent.diagnosis.progress import parse, step_slowdown
from tests.test_diagnose import TRAIN_BENCH, act, activity, by_code, gpu, logs_of, rec


def finished_facts(tmp_path: Path, text: str) -> Dict[str, Any]:
    (tmp_path / "run.log").write_text(text)
    return {"now": time.time(), "benchmark": TRAIN_BENCH, "logs": logs_of(tmp_path), "files": [], "processes": []}


@pytest.mark.parametrize("text,evidence", [
    ("[1,0]<stdout>:   2147483648     536870912     float     sum      -1  88640.00   24.23   45.43      0\n"
     "[1,0]<stdout>:# Out of bounds values : 0 OK\n[1,0]<stdout>:# Avg bus bandwidth    : 92.3405 \n"
     "[1,0]<stdout>:#\n", "Avg bus bandwidth"),
    ("2024/07/08 15:10:45 ERROR : a.bin: Failed to copy: Post \"https://x/upload\": EOF\n"
     "2024/07/08 16:02:41 ERROR : Attempt 1/3 failed with 1 errors and: EOF\n"
     "Transferred:   \t   1.181 TiB / 1.181 TiB, 100%, 16.648 MiB/s, ETA 0s\n"
     "2024/07/08 16:09:58 INFO  : Attempt 2/3 succeeded\n", "Attempt 2/3 succeeded"),
    ("warmup done\nlatency p50 12.1 ms\nmean latency = 11.8 ms\n", "mean latency = 11.8 ms"),
], ids=["nccl-tests-summary", "retry-succeeded", "mean-latency"])
def test_a_summary_figure_or_a_last_attempt_that_succeeded_closes_a_finished_run(
        tmp_path: Path, text: str, evidence: str) -> None:
    result = dg.analyze(finished_facts(tmp_path, text))
    assert result["verdict"]["code"] == "finished", result["verdict"]
    assert any(evidence in e["text"] for e in by_code(result)["finished"]["evidence"])


@pytest.mark.parametrize("text", [
    "Total params: 7.2B\nAverage seq length: 512\nloading shards\nstep 10/500 loss 2.1\n",  # went on after it
    "Attempt 1/3 failed\nnothing succeeded\n",
    "Avg bus bandwidth : 92.3\n" + "".join("step %d/500 loss 1.0\n" % i for i in range(1, 9)),
], ids=["summary-early", "none-succeeded", "summary-then-steps"])
def test_summary_words_early_in_a_log_do_not_finish_it(tmp_path: Path, text: str) -> None:
    assert dg.analyze(finished_facts(tmp_path, text))["verdict"]["code"] != "finished"


@pytest.mark.parametrize("line,done,amount", [
    ("7:04PM DBG Downloading mistral-7b.Q5_K_M.gguf: 2.0 GiB/4.8 GiB (41.67%) ETA: 5m8.3s", False, "2.0 GiB"),
    ("[#2089b1 1.2GiB/4.8GiB(25%) CN:16 DL:98MiB ETA:37s]", False, "1.2GiB"),
    ("fetched 4 GiB of 4 GiB, 100%", True, "4 GiB"),
])
def test_any_sized_meter_with_a_percent_is_a_download(line: str, done: bool, amount: str) -> None:
    sample = parse(line)
    assert sample is not None and sample.kind == "download" and sample.done is done and sample.amount == amount


def epoch_log(durations: List[float], word: str = "Time Taken") -> List[str]:
    out = []
    for i, d in enumerate(durations, 1):
        out.append("(epoch: %d, iters: 100, time: 0.210, data: 0.006) D_A: 0.1" % i)
        out.append("End of epoch %d / 200 \t %s: %d sec" % (i, word, d))
    return out


def test_the_time_each_unit_takes_is_a_pace_and_a_running_clock_is_not() -> None:
    slow = epoch_log([390.0] * 26 + [700.0, 1190.0, 1198.0, 1200.0, 1204.0])
    events = [i for i, line in enumerate(slow) if "epoch" in line]
    found = step_slowdown(slow, events)
    assert found is not None and found[0] >= 3.0 and "Time Taken: 1204" in slow[found[3]]
    steady = epoch_log([390.0 + (i % 3) for i in range(31)])
    assert step_slowdown(steady, [i for i, line in enumerate(steady) if "epoch" in line]) is None
    clock = epoch_log([60.0 * i for i in range(1, 32)], word="elapsed time")  # grows: a clock, not a pace
    assert step_slowdown(clock, [i for i, line in enumerate(clock) if "epoch" in line]) is None
    stamps = epoch_log([390.0] * 31, word="time")[::2]  # "time: 0.210" every line, equal: no slowdown
    assert step_slowdown(stamps, list(range(len(stamps)))) is None


@pytest.mark.parametrize("line,code", [
    ("urllib3.exceptions.IncompleteRead: IncompleteRead(11082547 bytes read, 1170628640 more expected)",
     "download_failed"),
    ("requests.exceptions.ChunkedEncodingError: ('Connection broken: IncompleteRead(0 bytes read)', "
     "IncompleteRead(0 bytes read))", "download_failed"),
    ("OSError: [Errno 116] Stale file handle", "io_error"),
    ("  -> [RequestGroup.cc:942] errorCode=1 Size mismatch Expected:366253506 Actual:0", "download_failed"),
    ("05/06 21:51:06 [ERROR] CUID#7 - Download aborted. URI=https://mirror.example.net/v28.params",
     "download_failed"),
    ("  RuntimeError: Cuda extensions are being compiled with a version of Cuda that does not match the version "
     "used to compile Pytorch binaries.  Pytorch binaries were compiled with Cuda 12.1.", "version_mismatch"),
])
def test_the_cause_inside_a_traceback_names_the_verdict(tmp_path: Path, line: str, code: str) -> None:
    (tmp_path / "run.log").write_text("Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\n"
                                      "    main()\n%s\n" % line)
    facts = {"now": time.time(), "benchmark": TRAIN_BENCH, "logs": logs_of(tmp_path), "files": [], "processes": []}
    result = dg.analyze(facts)
    assert result["verdict"]["code"] == code, result["verdict"]


def test_a_run_compiling_what_it_needs_is_starting_with_the_build_line(tmp_path: Path) -> None:
    now = time.time()
    (tmp_path / "train.log").write_text(
        "Using /root/.cache/torch_extensions/py310_cu124 as PyTorch extensions root...\n"
        "Emitting ninja build file /root/.cache/torch_extensions/py310_cu124/cpu_adam/build.ninja...\n"
        "Building extension module cpu_adam...\n"
        "[1/4] c++ -MMD -MF cpu_adam.o.d -DTORCH_EXTENSION_NAME=cpu_adam -O3 -c cpu_adam.cpp -o cpu_adam.o\n")
    os.utime(str(tmp_path / "train.log"), (now - 30, now - 30))
    procs = [rec(500, 1, "python3 train.py --deepspeed zero3.json", start=now - 60),
             rec(510, 500, "ninja -v", state="R", start=now - 40),
             rec(511, 510, "/usr/lib/gcc/x86_64-linux-gnu/11/cc1plus -quiet cpu_adam.cpp", state="R", start=now - 35)]
    facts = {"now": now, "benchmark": TRAIN_BENCH, "logs": logs_of(tmp_path), "files": [], "stall_seconds": 120,
             "processes": procs, "gpu": {"state": "ok", "devices": [gpu(0, 118.0, holder=500)]},
             "activity": activity(act(511, 1.0))}
    result = dg.analyze(facts)
    assert result["verdict"]["code"] == "starting", result["verdict"]
    evidence = by_code(result)["starting"]["evidence"]
    assert any("Building extension module cpu_adam" in e["text"] for e in evidence), evidence


def test_the_phase_of_a_failure_is_the_one_it_happened_in(tmp_path: Path) -> None:
    """Issue 35 item 4: an OOM in the proving loop after "warmup proof ok" is not "during the warmup"."""
    log = tmp_path / "benchmark-full.log"
    log.write_text("Running warmup proof...\nwarmup proof ok (41.2s)\nproof 1/10 done\nproof 2/10 done\n"
                   "Error: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    facts = {"now": time.time(), "benchmark": TRAIN_BENCH, "logs": logs_of(tmp_path), "files": [], "processes": []}
    summary = by_code(dg.analyze(facts))["cuda_oom"]["summary"]
    assert "warmup" not in summary, summary
    log.write_text("Running warmup proof...\nError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    facts["logs"] = logs_of(tmp_path)
    assert "during the warmup proof" in by_code(dg.analyze(facts))["cuda_oom"]["summary"]
