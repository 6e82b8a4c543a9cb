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


# -- blind round 5's classes ----------------------------------------------------------------------------------
@pytest.mark.parametrize("text,evidence", [
    ("Number of File Transfers Completed: 412\nNumber of File Transfers Failed: 0\n"
     "Number of Folder Transfers Failed: 0\nFinal Job Status: Completed\n", "Final Job Status: Completed"),
    ("[1,0]<stdout>:Iter #9: 396.9 img/sec per GPU\n[1,0]<stdout>:Img/sec per GPU: 397.8 +-1.6\n"
     "[1,0]<stdout>:Total img/sec on 8 GPU(s): 3182.6 +-12.8\n", "Total img/sec on 8 GPU(s)"),
    ("+ snarkjs groth16 verify verification_key.json public.json proof.json\n[INFO]  snarkJS: OK!\n"
     "proof verified in 0.41s (rapidsnark), 0 errors\n", "proof verified"),
    ("ERROR: pip's dependency resolver does not currently take into account all the packages that are installed.\n"
     "Successfully installed torch-2.3.1+cu121\n+ echo 'setup done'\nsetup done\n", "setup done"),
], ids=["azcopy-status", "horovod-total", "verified", "setup-done"])
def test_a_run_that_reports_its_end_in_other_words_is_finished(tmp_path: Path, text: str, evidence: str) -> None:
    result = dg.analyze(finished_facts(tmp_path, text))
    assert result["verdict"]["code"] == "finished", result["verdict"]
    assert any(evidence in e["text"] for e in by_code(result)["finished"]["evidence"])


def test_a_validation_pass_is_not_compared_with_the_training_steps() -> None:
    train = ["Epoch 3:  %d%%|#| %d/1000 [01:00<10:00,  3.35it/s, loss=0.9]" % (i // 10, i) for i in range(1, 41)]
    val = ["Validation DataLoader 0:  %d%%|#| %d/100 [04:47<06:53,  7.11s/it]" % (i, i) for i in range(1, 41)]
    lines = train + val
    assert step_slowdown(lines, list(range(len(lines)))) is None
    slower = train + ["Epoch 3:  %d%%|#| %d/1000 [01:00<10:00,  0.50it/s, loss=0.9]" % (50, 500 + i) for i in range(10)]
    assert step_slowdown(slower, list(range(len(slower)))) is not None


def test_a_warning_the_program_logs_does_not_head_a_working_servers_verdict(tmp_path: Path) -> None:
    now = time.time()
    (tmp_path / "tgi.log").write_text(
        "2024-06-26T08:11:10.119322Z  WARN text_generation_launcher: Could not import Mamba: No module named "
        "'mamba_ssm'\n2024-06-26T08:11:30.501Z  INFO text_generation_router: Connected\n"
        "2024-06-26T08:12:01.221Z  INFO generate{parameters=..} text_generation_router::server: Success\n")
    os.utime(str(tmp_path / "tgi.log"), (now - 5, now - 5))
    procs = [rec(700, 1, "text-generation-launcher --model-id bigscience/bloom-560m --port 8080", start=now - 600)]
    facts = {"now": now, "benchmark": {"match": ["text-generation-launcher"]}, "logs": logs_of(tmp_path),
             "files": [], "processes": procs, "stall_seconds": 120,
             "gpu": {"state": "ok", "devices": [gpu(0, 70.0, holder=700)]},
             "activity": activity(act(700, listen=[8080]))}
    result = dg.analyze(facts)
    assert result["verdict"]["code"] == "healthy", result["verdict"]
    assert by_code(result)["command_not_found"]["severity"] == "info"


@pytest.mark.parametrize("line,done", [
    ("pulling a3de86cd1c13:  69% ▕██████████████████████▏ 3.6 GB/5.2 GB  2.2 MB/s   12m04s", False),
    ("pulling 170370233dd5... 100% ▕█████████████████████████▏  42 GB/ 42 GB", True),
])
def test_a_meter_with_its_percent_before_the_sizes_is_a_download(line: str, done: bool) -> None:
    sample = parse(line)
    assert sample is not None and sample.kind == "download" and sample.done is done


def test_a_bar_at_zero_after_an_error_is_not_the_run_going_on(tmp_path: Path) -> None:
    """Blind round 5: a device-side assert under torchrun, then the rank's tqdm bar redrawn at 0/993 as it exits."""
    (tmp_path / "train.log").write_text(
        "Traceback (most recent call last):\n  File \"supervised_finetuning.py\", line 9, in <module>\n"
        "RuntimeError: CUDA error: device-side assert triggered\n"
        "  0%|                                                   | 0/993 [00:03<?, ?it/s]\n"
        "[2023-11-30 14:21:13,502] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: 1) "
        "local_rank: 0 (pid: 1464610) of binary: /opt/conda/bin/python\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n")
    facts = {"now": time.time(), "benchmark": TRAIN_BENCH, "logs": logs_of(tmp_path), "files": [], "processes": []}
    assert dg.analyze(facts)["verdict"]["code"] == "cuda_error"


def test_a_cause_in_the_configured_log_outranks_one_in_a_stray_file(tmp_path: Path) -> None:
    """Issue 35 item 2: another program's fresh output in the watch dir ('permission denied', earlier) does not
    outrank the benchmark log's own 'No space left on device'; a kernel line still counts beside the log."""
    now = time.time()
    bench_dir, stray_dir = tmp_path / "bench", tmp_path / "stray"
    bench_dir.mkdir()
    stray_dir.mkdir()
    (stray_dir / "other-tool.log").write_text("2026-12-06 09:58:01 ERROR open /var/lib/x: Permission denied\n")
    (bench_dir / "benchmark-full.log").write_text(
        "2026-12-06 10:00:05 proof 1/10 done\n2026-12-06 10:00:09 Error: No space left on device (os error 28)\n")
    for f, age in ((stray_dir / "other-tool.log", 600), (bench_dir / "benchmark-full.log", 50)):
        os.utime(str(f), (now - age, now - age))
    logs = [*logs_of(stray_dir), dict(logs_of(bench_dir)[0], configured=True)]
    facts = {"now": now, "benchmark": TRAIN_BENCH, "logs": logs, "files": [], "processes": []}
    assert dg.analyze(facts)["verdict"]["code"] == "disk_full"
    logs[-1]["configured"] = False  # nobody named it: the earliest cause leads, as before
    assert dg.analyze(facts)["verdict"]["code"] == "permission_denied"
