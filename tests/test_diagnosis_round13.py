"""Diagnosis classes learned from blind round 13 (tests/fixtures/incidents-blind/round-13), fixed after its
first-seen score was recorded: each rule reads a class of wordings or facts (docs/diagnosis.md). Pure: lines
through the signature table, the completion words and the progress meters, or ``analyze`` on built facts. The
wordings are the class's other programs' where there are some, not only the incidents'."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from console.agent.diagnosis import codes, completion, events, liveness, progress
from console.agent.diagnosis import diagnose as dg
from tests.test_diagnose import act, activity, code_of, logs_of, rec


def _facts(tmp_path: Path, text: str, age: float, procs: List[Dict[str, Any]], util: int = 0,
           act_: Optional[Dict[str, Any]] = None, match: Optional[List[str]] = None, stall: int = 60,
           name: str = "run.log") -> Dict[str, Any]:
    log = tmp_path / name
    log.write_text(text)
    now = time.time()
    os.utime(log, (now - age, now - age))
    device: Dict[str, Any] = {"index": 0, "util": util, "mem_used": (8 << 30) if util else 0,
                              "power": 230.0 if util else 15.0, "power_limit": 250.0}
    facts: Dict[str, Any] = {
        "now": now, "benchmark": {"match": match or [r"run\.py"], "entrypoint": [r"entrypoint\.sh"]},
        "stall_seconds": stall, "processes": procs, "logs": logs_of(tmp_path), "files": [],
        "gpu": {"state": "ok", "devices": [device]}}
    if act_ is not None:
        facts["activity"] = act_
    return facts


def _code(facts: Dict[str, Any]) -> str:
    return str(dg.analyze(facts)["verdict"]["code"])


# -- (1) a finished run whose last words are a tool's own summary ---------------------------------------------------
@pytest.mark.parametrize("tail", [
    ["[synth] 6/6 lines synthesized, wav files in out/, total 14.36 s"],  # a wrapper's count to its total
    ["fetch_weights.sh: 12/12 files downloaded"],
    ["[backup] 2024-03-02 03:04:41 backup of /srv/train/ckpt complete"],
    [" > Text splitted to sentences.", " > Processing time: 0.97", " > Real-time factor: 0.236",
     " > Saving output to out/line_05.wav"],  # Coqui TTS's own closing figures
    ["whisper.cpp: RTF = 0.041"],
])
def test_a_tools_own_summary_closes_a_run(tail: List[str]) -> None:
    assert completion.last_words({"lines": ["starting", "working on it", *tail]}) != [], tail


@pytest.mark.parametrize("line, closes", [
    ("[backup] rsync exit 24 (vanished temp files) treated as success; backup of /srv/train/ckpt complete", True),
    ("sync.sh: robocopy exit code 1 ignored (files copied); sync finished", True),
    ("[backup] rsync exit 23 (partial transfer); backup of /srv/train/ckpt FAILED", False),
    ("[backup] rsync exited with code 12, backup incomplete", False),
])
def test_a_nonzero_exit_the_script_accepts_is_no_failure(line: str, closes: bool) -> None:
    lines = ["sent 61,880,412,311 bytes  received 1,140,227 bytes  223,622,604.12 bytes/sec",
             "rsync warning: some files vanished before they could be transferred (code 24) at main.c(1189)", line]
    assert (completion.last_words({"lines": lines}) != []) is closes, line


# -- (1) a failure the program recovers from by falling back to another path, the work going on ---------------------
FALLBACKS = [
    ["WARN bellperson::gpu::locks > GPU FFT failed! Falling back to CPU... Error: Ocl Error:", "",
     "Status error code: CL_MEM_OBJECT_ALLOCATION_FAILURE (-4)", "", "##########", "DEBUG gpu lock released!"],
    ["E0312 10:00:01 fft.cc:88] cuFFT plan failed, falling back to the CPU FFT:",
     "E0312 10:00:01 fft.cc:90] CUDA error: out of memory", "I0312 10:00:02 fft.cc:120] CPU FFT planned"],
]


@pytest.mark.parametrize("block", FALLBACKS)
def test_a_gpu_failure_the_program_falls_back_from_is_no_failure(tmp_path: Path, block: List[str]) -> None:
    work = ["INFO multiexp %d/10 (proof 1) done" % i for i in range(1, 8)]
    facts = _facts(tmp_path, "\n".join(["INFO GPU FFT kernel instantiated!", *block, *work]) + "\n", 2,
                   [rec(5, 1, "python3 run.py", state="R", cpu=100.0, start=time.time() - 900)], util=97)
    assert _code(facts) == "healthy"


def test_an_oom_with_no_fallback_stays_an_oom(tmp_path: Path) -> None:
    block = ["W0312 10:00:01 fft.cc:88] cuFFT plan failed", "W0312 10:00:01 fft.cc:90] CUDA error: out of memory",
             "Traceback (most recent call last):", "RuntimeError: CUDA error: out of memory"]
    facts = _facts(tmp_path, "\n".join(block) + "\n", 30, [])
    assert _code(facts) == "cuda_oom"


# -- (2) a GPU run that went on on the CPU because a GPU library would not load ------------------------------------
TF_PROBES = [
    "2022-07-10 15:08:07.014921: W tensorflow/stream_executor/platform/default/dso_loader.cc:64] Could not load "
    "dynamic library 'libcudart.so.11.0'; dlerror: libcudart.so.11.0: cannot open shared object file: No such file "
    "or directory",
    "2022-07-10 15:08:09.276131: W tensorflow/stream_executor/platform/default/dso_loader.cc:64] Could not load "
    "dynamic library 'libcudnn.so.8'; dlerror: libcudnn.so.8: cannot open shared object file: No such file or "
    "directory",
    "2022-07-10 15:08:09.276917: W tensorflow/core/common_runtime/gpu/gpu_device.cc:1850] Cannot dlopen some GPU "
    "libraries. Please make sure the missing libraries mentioned above are installed properly if you would like to "
    "use GPU.",
    "Skipping registering GPU devices...",
    "Epoch 1/100",
    " 148/4871 [>.....] - ETA: 40:09 - loss: 0.1190 - mae: 0.2582",
]


def test_a_gpu_library_missing_with_the_run_on_the_cpu_is_library_missing(tmp_path: Path) -> None:
    facts = _facts(tmp_path, "\n".join(TF_PROBES) + "\n", 1,
                   [rec(5, 1, "python3 run.py -g", state="R", cpu=100.0, start=time.time() - 600)],
                   act_=activity(act(5, cpu=1.0)))
    result = dg.analyze(facts)
    assert result["verdict"]["code"] == "library_missing"
    assert "libcudnn.so.8" in str(result["findings"][0]["evidence"])


def test_the_same_probes_with_the_gpu_working_stay_healthy(tmp_path: Path) -> None:
    lines = TF_PROBES[:2] + TF_PROBES[4:]
    facts = _facts(tmp_path, "\n".join(lines) + "\n", 1,
                   [rec(5, 1, "python3 run.py -g", state="R", cpu=100.0, start=time.time() - 600)], util=90,
                   act_=activity(act(5, cpu=1.0)))
    assert _code(facts) == "healthy"


# -- (2) a harness that says its test runs overdue, its CPU spinning, nothing else moving ---------------------------
def test_a_test_running_overdue_with_a_busy_cpu_and_a_silent_log_is_hung(tmp_path: Path) -> None:
    text = ("running 1 test\nPreimage length = 8192 bytes\nWill use 8 threads for witness resolution\n"
            "test cs::benchmarks::test::run_sha256_prover has been running for over 60 seconds\n")
    procs = [rec(5, 1, "cargo +nightly test --release -- run_sha256_prover", start=time.time() - 900),
             rec(6, 5, "/srv/zk/target/release/deps/boojum-5b1c0e1e --nocapture run_sha256_prover", state="R",
                 cpu=100.0, start=time.time() - 300)]
    facts = _facts(tmp_path, text, 200, procs, act_=activity(act(5), act(6, cpu=1.0)), match=["cargo", "boojum-"])
    assert _code(facts) == "hung"


def test_a_build_tool_that_runs_what_it_built_is_not_building() -> None:
    now = time.time()
    bench = [rec(5, 1, "cargo test --release", start=now - 900)]
    runs = [*bench, rec(6, 5, "/srv/target/release/deps/boojum-5b1c0e1e --nocapture", state="R", start=now - 300)]
    builds = [*bench, rec(6, 5, "rustc --crate-name boojum --edition=2021", state="R", start=now - 300)]
    via_shell = [rec(5, 1, "make -j8", start=now - 900), rec(6, 5, "/bin/sh -c gcc -c x.c", start=now - 10),
                 rec(7, 6, "gcc -c x.c", state="R", start=now - 10)]
    assert liveness.building({"processes": runs}, bench) is None
    assert liveness.building({"processes": builds}, bench) == "cargo, rustc"
    assert liveness.building({"processes": via_shell}, via_shell[:1]) == "gcc, make"


# -- (3) wrappers over causes in new wordings ----------------------------------------------------------------------
@pytest.mark.parametrize("line, code", [
    # a capped GPU resource: NVENC sessions on a consumer card, an exclusive-process GPU held by another process
    ("[h264_nvenc @ 0x5601aa5b40c0] OpenEncodeSessionEx failed: out of memory (10)", "resource_limit"),
    ("[hevc_nvenc @ 0x55d1] OpenEncodeSessionEx failed: incompatible client key (21): (no details)", "resource_limit"),
    ("NVENC Error: Too many concurrent sessions. Try closing other recording software", "resource_limit"),
    ("THCudaCheck FAIL file=THCGeneral.cpp line=70 error=46 : all CUDA-capable devices are busy or unavailable",
     "resource_limit"),
    ("RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable", "resource_limit"),
    ("cuCtxCreate failed: CUDA_ERROR_DEVICES_UNAVAILABLE", "resource_limit"),
    # a DAG that does not fit the GPU's memory (miners)
    ("TREX: Can't find nonce with device [ID=0, GPU #0], Device does not have enough free memory to hold the DAG "
     "for epoch 65. Required: 5.08 GB, free: 5.02 GB.", "cuda_oom"),
    ("GPU0: not enough free memory for DAG (epoch 430)", "cuda_oom"),
    ("Error: the DAG does not fit in GPU memory on device 1", "cuda_oom"),
    # a host allocation refused in C/C++ words
    ("Error: Prover::prove() failed calling malloc() of size 461239222272", "host_memory_exhausted"),
    ("fatal: calloc of 17179869184 bytes failed", "host_memory_exhausted"),
    ("posix_memalign() returned NULL", "host_memory_exhausted"),
    # wget's status line
    ("HTTP request sent, awaiting response... 401 Unauthorized", "download_failed"),
    ("HTTP request sent, awaiting response... 503 Service Unavailable", "download_failed"),
])
def test_wrappers_over_causes_in_new_wordings(line: str, code: str) -> None:
    assert code_of(line) == code, line


def test_a_plain_host_word_is_no_dag_oom() -> None:
    assert code_of("The system does not have enough free memory on disk") != "cuda_oom"


def test_a_supervisors_relay_of_a_workers_stderr_keeps_the_workers_severity() -> None:
    relay = ("2022-06-08 15:26:04,436 [INFO ] W-9000-maskrcnn_1.0-stderr org.pytorch.serve.wlm.WorkerLifeCycle - "
             "terminate called after throwing an instance of 'std::bad_alloc'")
    assert events.level_cap(relay) is None
    assert events.level_cap("2024-01-01 10:00:00,000 [INFO ] (raylet) [stderr] MemoryError") is None
    assert events.level_cap(relay.replace("-stderr", "-stdout")) == "info"
    assert events.level_cap(relay.replace("terminate called", "UserWarning: x")) == "warning"


def test_a_workers_bad_alloc_relayed_at_info_is_host_memory_exhausted(tmp_path: Path) -> None:
    lines = ["2022-06-08 15:26:04,436 [INFO ] W-9000-m_1.0-stdout org.pytorch.serve.wlm.WorkerLifeCycle - "
             "Connection accepted: /tmp/.ts.sock.9000.",
             "2022-06-08 15:26:04,436 [INFO ] W-9000-m_1.0-stderr org.pytorch.serve.wlm.WorkerLifeCycle - terminate "
             "called after throwing an instance of 'std::bad_alloc'",
             "2022-06-08 15:26:04,436 [INFO ] W-9000-m_1.0-stdout org.pytorch.serve.wlm.WorkerLifeCycle - Backend "
             "worker process died.",
             "2022-06-08 15:26:04,436 [INFO ] W-9000-m_1.0 org.pytorch.serve.wlm.WorkerThread - Retry worker: 9000 in "
             "8 seconds."]
    facts = _facts(tmp_path, "\n".join(lines) + "\n", 3, [], match=["torchserve"])
    assert _code(facts) == "host_memory_exhausted"


@pytest.mark.parametrize("probe", [
    '2022-06-08 15:27:12,104 [INFO ] pool-3-thread-1 ACCESS_LOG - /10.244.1.1:53190 "GET /ping HTTP/1.1" 200 1',
    'INFO:     10.0.0.7:51234 - "GET /health HTTP/1.1" 200 OK',
    '10.0.0.9 - - [08/Jun/2022:15:27:12 +0000] "GET /v2/health/ready HTTP/1.1" 200 0',
])
def test_a_health_probe_answered_is_no_sign_the_work_resumed(probe: str) -> None:
    lines = ["2022-06-08 15:26:04,436 [INFO ] W-9000-m_1.0-stderr org.pytorch.serve.wlm.WorkerLifeCycle - terminate "
             "called after throwing an instance of 'std::bad_alloc'", "Retry worker: 9000 in 8 seconds.", probe]
    assert events.last_resumed(lines, None) == -1
    assert events.last_resumed([*lines, '"POST /predictions/m HTTP/1.1" 200 512'], None) == 3


@pytest.mark.parametrize("trace, code", [
    ("+ wget -O models/loras/x.safetensors 'https://example.com/api/download/models/1?type=Model'",
     "download_failed"),  # an anonymous request for a login-gated asset
    ("+ curl -fL -o x.bin https://example.com/files/x.bin", "download_failed"),
    ("+ wget --header='Authorization: Bearer abc' -O x.bin https://example.com/files/x.bin", "credentials_refused"),
    ("+ curl -fL -u bench:secret -o x.bin https://example.com/files/x.bin", "credentials_refused"),
])
def test_a_401_to_a_request_that_sent_no_credentials_is_a_failed_download(tmp_path: Path, trace: str,
                                                                          code: str) -> None:
    text = "\n".join([trace, "Connecting to example.com|104.18.22.206|:443... connected.",
                      "HTTP request sent, awaiting response... 401 Unauthorized", "",
                      "setup.sh: line 37: wget exited with status 6, aborting"]) + "\n"
    assert _code(_facts(tmp_path, text, 70, [], match=["setup.sh"])) == code


# -- (4) stalls: a prompt inside a text UI's box, ranks repeating a barrier's count, a frozen rsync ------------------
EULA = ["\u250c" + "\u2500" * 20 + "\u2510", "\u2502  End User License Agreement  \u2502",
        "\u2502" + "\u2500" * 20 + "\u2502", "\u2502 Do you accept the above EULA? (accept/decline/quit):   \u2502",
        "\u2502" + " " * 20 + "\u2502", "\u2514" + "\u2500" * 20 + "\u2518"]


@pytest.mark.parametrize("tail", [
    EULA,
    ["Do you accept the previously read EULA?", "accept/decline/quit: "],
    ["Do you accept the license terms? [yes|no]", "[no] >>> "],
])
def test_an_installers_prompt_is_waiting_input(tmp_path: Path, tail: List[str]) -> None:
    procs = [rec(5, 1, "bash entrypoint.sh"), rec(6, 5, "bash cuda_12.3.1_linux.run --toolkit"),
             rec(7, 6, "./cuda-installer --toolkit")]
    facts = _facts(tmp_path, "\n".join(["Extracting...", *tail]) + "\n", 75, procs,
                   act_=activity(act(5), act(6), act(7)), match=["cuda-installer", r"linux\.run"])
    assert _code(facts) == "waiting_input"


def _barrier(count: int, step: int, rank: int) -> str:
    return ("[2021-12-17 16:%02d:%02d,811][torch.distributed.distributed_c10d][INFO] - Waiting in store based "
            "barrier to initialize process group for rank: %d, key: store_based_barrier_key:1 (world_size=16, "
            "worker_count=%d, timeout=0:30:00)" % (10 + step // 6, (step % 6) * 10, rank, count))


@pytest.mark.parametrize("wording", ["torch", "other"])
def test_ranks_repeating_a_barriers_count_are_hung(tmp_path: Path, wording: str) -> None:
    if wording == "torch":
        lines = [_barrier(7, step, rank) for step in range(24) for rank in range(4)]
    else:
        lines = ["2024-05-01 09:%02d:%02d INFO rendezvous: waiting for 7/16 workers to join" % (10 + s // 6,
                                                                                                (s % 6) * 10)
                 for s in range(24)]
    procs = [rec(5, 1, "python3 -m torch.distributed.launch run.py", start=time.time() - 3000)] + [
        rec(6 + r, 5, "python3 run.py --local_rank=%d" % r, start=time.time() - 3000) for r in range(4)]
    facts = _facts(tmp_path, "\n".join(lines) + "\n", 3, procs, act_=activity(*(act(p) for p in range(5, 10))))
    assert _code(facts) == "hung"


def test_a_barrier_whose_count_moves_is_no_hang(tmp_path: Path) -> None:
    lines = [_barrier(2 + step, step, 0) for step in range(14)]
    procs = [rec(5, 1, "python3 run.py", start=time.time() - 3000)]
    facts = _facts(tmp_path, "\n".join(lines) + "\n", 3, procs, act_=activity(act(5)))
    assert _code(facts) != "hung"


@pytest.mark.parametrize("line, amount, pct", [
    ("  3,406,823,424  37%    38.10MB/s    0:01:24  ", "3,406,823,424", 37.0),  # rsync --progress
    ("  61,873,025,024 100%  213.87MB/s    0:04:36 (xfr#57, to-chk=0/4112)", "61,873,025,024", 100.0),
    ("3.17GiB 0:01:24 [38.1MiB/s] [=====>          ] 37% ETA 0:02:21", "3.17GiB", 37.0),  # pv
])
def test_rsync_and_pv_meters_are_transfers(line: str, amount: str, pct: float) -> None:
    sample = progress.parse(line)
    assert sample is not None and sample.kind == "download" and sample.amount == amount and sample.percent == pct


def test_an_rsync_frozen_mid_transfer_is_download_stalled(tmp_path: Path) -> None:
    text = ("rsync -aPH --inplace rsync://dbsnap01/ezra/ /var/lib/mysql-bench\nreceiving incremental file list\n"
            "ibdata1\n  3,303,014,400  35%    40.05MB/s    0:01:21\r  3,406,823,424  37%    38.10MB/s    0:01:24  ")
    procs = [rec(5, 1, "bash entrypoint.sh"), rec(6, 5, "rsync -aPH --inplace rsync://dbsnap01/ezra/ /var/lib/x")]
    facts = _facts(tmp_path, text, 300, procs, act_=activity(act(5), act(6)), match=["rsync"])
    assert _code(facts) == "download_stalled"


# -- (5) CUDA that cannot initialize while NVML answers: cuda_init_failed ------------------------------------------
@pytest.mark.parametrize("line", [
    "RuntimeError: CUDA unknown error - this may be due to an incorrectly set up environment, e.g. changing env "
    "variable CUDA_VISIBLE_DEVICES after program start. Setting the available devices to be zero.",
    "UserWarning: CUDA initialization: CUDA unknown error - this may be due to an incorrectly set up environment",
    "E tensorflow/stream_executor/cuda/cuda_driver.cc:271] failed call to cuInit: CUDA_ERROR_UNKNOWN: unknown error",
    "RuntimeError: cuda runtime error (30) : unknown error at /pytorch/aten/src/THC/THCGeneral.cpp:50",
    "cuInit(0) returned 999",
    "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
    "NumCudaDevices() that might have already set an error? Error 999: unknown error",
])
def test_cuda_that_cannot_initialize_is_cuda_init_failed(line: str) -> None:
    assert code_of(line) == "cuda_init_failed", line


def test_cuda_init_failed_is_a_hardware_verdict_with_its_remedy(tmp_path: Path) -> None:
    assert codes.tier("cuda_init_failed") == "hardware" and "nvidia_uvm" in codes.explanation("cuda_init_failed")
    text = ("Traceback (most recent call last):\n  File \"run.py\", line 58, in <module>\n"
            "RuntimeError: CUDA unknown error - this may be due to an incorrectly set up environment, e.g. changing "
            "env variable CUDA_VISIBLE_DEVICES after program start. Setting the available devices to be zero.\n")
    assert _code(_facts(tmp_path, text, 40, [])) == "cuda_init_failed"


def test_a_cuda_unknown_error_mid_run_stays_a_cuda_error() -> None:
    assert code_of("RuntimeError: CUDA error: unknown error") == "cuda_error"
