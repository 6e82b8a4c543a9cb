"""The failure-signature table, progress bars and the log-tail reader, on real-looking log text."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.agent.diagnosis import signatures
from console.agent.diagnosis.signatures import (
    SIGNATURES,
    collapse_cr,
    match_line,
    progress_percent,
    read_tail,
    scan_lines,
)

CASES = [
    # transport_error: gRPC / h2 broken pipe and friends
    ('Error: status: Unavailable, message: "error sending request: broken pipe", details: []', "transport_error"),
    ("    0: transport error", "transport_error"),
    ("    1: Broken pipe (os error 32)", "transport_error"),
    ("grpc: Connection reset by peer (os error 104)", "transport_error"),
    ('status: OutOfRange, message: "decoded message length too large: found 53687091 bytes"', "transport_error"),
    ("h2 protocol error: error reading a body from connection", "transport_error"),
    # cuda_oom before the generic cuda_error
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 23.69 GiB total)",
     "cuda_oom"),
    ("ERROR cuzk_daemon::prove: CUDA error: out of memory (CUDA_ERROR_OUT_OF_MEMORY)", "cuda_oom"),
    ("cudaMalloc failed: cudaErrorMemoryAllocation", "cuda_oom"),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "cuda_error"),
    ("thrust::system_error: CUDA error: invalid device function", "cuda_error"),
    # kernel OOM killer (dmesg)
    ("[ 8123.456789] Out of memory: Killed process 4242 (cuzk-daemon) total-vm:987654321kB, "
     "anon-rss:123456789kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:241000kB oom_score_adj:0", "host_oom_kill"),
    ("[ 8123.400000] cuzk-daemon invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0",
     "host_oom_kill"),
    ("[ 8123.450000] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,task=cuzk-daemon",
     "host_oom_kill"),
    # disk
    ("write /data/32gbench/c2.bin: No space left on device", "disk_full"),
    ("Error: Os { code: 28, kind: StorageFull, message: \"ENOSPC\" }", "disk_full"),
    # downloads
    ("curl: (6) Could not resolve host: example-bucket.r2.dev", "download_failed"),
    ("curl: (7) Failed to connect to example-bucket.r2.dev port 443 after 3 ms: Connection refused",
     "download_failed"),
    ("curl: (22) The requested URL returned error: 404", "download_failed"),
    ("curl: (28) Operation timed out after 300000 milliseconds with 0 bytes received", "download_failed"),
    ("curl: (56) Recv failure: Connection reset by peer", "download_failed"),
    ("Failed to download https://example-bucket.r2.dev/c1.json", "download_failed"),
    ("HTTP/1.1 403 Forbidden", "download_failed"),
    # missing input (the seed's first line)
    ("C1 output not found at /data/32gbench/c1.json", "missing_input"),
    ("cat: /data/32gbench/c1.json: No such file or directory", "missing_input"),
    # GPU lost / Xid
    ("[ 9001.000001] NVRM: Xid (PCI:0000:01:00): 79, pid=1234, GPU has fallen off the bus.", "gpu_lost"),
    ("[ 9001.000002] NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.", "gpu_lost"),
    ("Unable to determine the device handle for GPU0000:01:00.0: GPU is lost.  Reboot the system", "gpu_lost"),
    ("[ 9001.000003] NVRM: Xid (PCI:0000:41:00): 31, pid=5555, name=cuzk-daemon, Ch 00000008, "
     "intr 10000000. MMU Fault", "gpu_xid"),
    # panics, tracebacks, crashes, kills
    ("thread 'tokio-runtime-worker' panicked at src/prove.rs:211:14:", "panic"),
    ("thread 'main' panicked at 'called `Result::unwrap()` on an `Err` value', src/main.rs:42:5", "panic"),
    ("panic: runtime error: invalid memory address or nil pointer dereference", "panic"),
    ("Traceback (most recent call last):", "python_traceback"),
    ("Segmentation fault (core dumped)", "segfault"),
    ("[12345.678] cuzk-bench[4321]: segfault at 0 ip 000055d5 sp 00007ffd error 4 in cuzk-bench", "segfault"),
    ("Fatal signal: SIGSEGV", "segfault"),
    ("Killed", "killed"),
    ("/entrypoint.sh: line 42:  4242 Killed                  ./cuzk-bench --warmup", "killed"),
    ("Error: process exited with signal: 9 (SIGKILL)", "killed"),
    ("bash: cuzk-bench: command not found", "command_not_found"),
    ("ModuleNotFoundError: No module named 'torch'", "command_not_found"),
    ("Error: Os { code: 98, kind: AddrInUse, message: \"Address already in use\" }", "address_in_use"),
    ('status: DeadlineExceeded, message: "Timeout expired"', "timeout"),
    # new classes (issue 11), in the real programs' wording
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
     "NVIDIA driver is installed and running.", "no_gpu_driver"),
    ("RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU", "no_gpu_driver"),
    ("Failed to initialize NVML: Driver/library version mismatch", "driver_mismatch"),
    ("RuntimeError: The NVIDIA driver on your system is too old (found version 11040).", "driver_mismatch"),
    ("CUDA error: 35 (0x23) cudaErrorInsufficientDriver : CUDA driver version is insufficient for CUDA runtime "
     "version", "driver_mismatch"),
    ("NVRM: Xid (PCI:0000:07:00): 48, pid=2134, name=python3, An uncorrectable double bit error (DBE) has been "
     "detected on GPU in the framebuffer at partition 6, subpartition 0.", "gpu_ecc"),
    ("RuntimeError: CUDA error: uncorrectable ECC error encountered", "gpu_ecc"),
    ("ae05277d311f:9292:9355 [0] misc/shmutils.cc:112 NCCL WARN Error while creating shared memory segment "
     "/dev/shm/nccl-KWfVyt (size 5967872)", "shm_exhausted"),
    ("ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).",
     "shm_exhausted"),
    ("[rank1]:[E1002 18:16:40.662329700 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation "
     "timeout: WorkNCCL(SeqNum=2521, OpType=ALLREDUCE, NumelIn=160672064, NumelOut=160672064, Timeout(ms)=600000) "
     "ran for 600000 milliseconds before timing out.", "nccl_timeout"),
    ("PermissionError: [Errno 13] Permission denied: '/workspace/checkpoints/checkpoint-500'", "permission_denied"),
    ("    1: Permission denied (os error 13)", "permission_denied"),
    ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "child_failed"),
    ("[setup] benchmark exited with status 2", "child_failed"),
    ("ggml_backend_cuda_buffer_type_alloc_buffer: allocating 35533.34 MiB on device 0: cudaMalloc failed: "
     "out of memory", "cuda_oom"),
    ("ERROR 11-18 18:07:28 engine.py:366] ValueError: No available memory for the cache blocks. Try increasing "
     "`gpu_memory_utilization` when initializing the engine.", "cuda_oom"),
    ("huggingface_hub.errors.GatedRepoError: 401 Client Error. (Request ID: Root=1-66f4b037)", "download_failed"),
    ("2024-08-21 09:07:15 ERROR 403: Forbidden.", "download_failed"),
    ("2019-10-18T02:12:01.429Z\tWARN\tmain\tlotus-storage-miner/main.go:71\tfetching proof parameters: read tcp "
     "172.17.0.3:53648->198.211.99.118:443: read: connection reset by peer", "download_failed"),
]

HEALTHY = [
    "2026-12-01T21:04:11Z INFO cuzk_daemon: starting cuzk-daemon",
    "2026-12-01T21:06:40Z INFO cuzk_daemon::prove: received C2 request (51.2 MB)",
    "[setup] parameters ok",
    "Running warmup proof...",
    "proof 17/100 done in 41.2s",
    "######################################################################## 100.0%",
    "",
    "ggml_cuda_host_malloc: failed to allocate 1024.00 MiB of pinned memory: out of memory",  # harmless noise
]


@pytest.mark.parametrize(("text", "code"), CASES)
def test_signature_matches(text: str, code: str) -> None:
    sig = match_line(text)
    assert sig is not None, text
    assert sig.code == code, (text, sig.code)


@pytest.mark.parametrize("text", HEALTHY)
def test_healthy_lines_match_nothing(text: str) -> None:
    assert match_line(text) is None or signatures.is_harmless(text)


def test_harmless_and_completed_tables() -> None:
    assert signatures.is_harmless("ae05277d311f:55932:55932 [0] NCCL INFO NET/Plugin: Plugin load returned 2 : "
                                  "libnccl-net.so: cannot open shared object file: No such file or directory")
    assert not signatures.is_harmless("RuntimeError: CUDA error: out of memory")
    assert signatures.is_completion("benchmark finished: 10 proofs in 812.4s")
    assert signatures.is_completion("build: 3f1ae2e3 (4651)")
    assert not signatures.is_completion("build: 4651 (3f1ae2e3) with cc (Ubuntu 11.4.0) for x86_64-linux-gnu")
    assert not signatures.is_completion("[setup] benchmark exited with status 137")


def test_custom_signatures_come_first() -> None:
    rows = signatures.compile_custom([{"code": "license_expired", "severity": "error", "pattern": r"licen[cs]e",
                                       "explanation": "the prover's license expired"},
                                      {"code": "bad", "pattern": "(("}])
    assert [r.code for r in rows] == ["license_expired"]
    sig = match_line("Error: license check failed: No such file or directory", rows + SIGNATURES)
    assert sig is not None and sig.code == "license_expired"


def test_every_signature_has_a_case_and_table_shape() -> None:
    covered = {code for _, code in CASES}
    assert {s.code for s in SIGNATURES} <= covered
    for sig in SIGNATURES:
        assert sig.severity in ("info", "warning", "error", "critical")
        assert sig.explanation
    required = {"transport_error", "cuda_oom", "cuda_error", "host_oom_kill", "disk_full", "download_failed",
                "missing_input", "gpu_lost", "panic", "python_traceback", "segfault", "killed"}
    assert required <= set(signatures.SIGNATURE_CODES)


def test_scan_lines_numbers_and_codes() -> None:
    lines = ["Running warmup proof...", "    0: transport error", "ok", "Killed"]
    hits = scan_lines(lines, "/tmp/x.log", first_line=10)
    assert [(h["line"], h["code"]) for h in hits] == [(11, "transport_error"), (13, "killed")]
    assert hits[0]["path"] == "/tmp/x.log" and hits[0]["text"] == "    0: transport error"


@pytest.mark.parametrize(
    ("text", "pct"),
    [
        ("######################################################################## 100.0%", 100.0),
        ("########                                                                  11.7%", 11.7),
        ("                                                                           0.0%", 0.0),
        (" 45%|#####     | 463M/1.02G [00:45<00:55, 10.2MB/s]", 45.0),
        ("c1.json            45%[=======>           ] 463M  10.2MB/s    eta 55s", 45.0),
        (" 45 1024M   45  463M    0     0  10.2M      0  0:01:40  0:00:45  0:00:55 10.3M", 45.0),
        ("GPU util 45% on device 0 while proving", None),
        ("Running warmup proof...", None),
    ],
)
def test_progress_percent(text: str, pct: object) -> None:
    assert progress_percent(text) == pct


def test_collapse_cr() -> None:
    assert collapse_cr("#=#=#   \r   0.0%\r####  48.3%\r######## 100.0%") == "######## 100.0%"
    assert collapse_cr("windows line\r") == "windows line"
    assert collapse_cr("plain") == "plain"


def test_read_tail_line_numbers_match_the_file(tmp_path: Path) -> None:
    path = tmp_path / "big.log"
    with open(path, "wb") as fh:
        for i in range(1, 50001):
            if i == 49000:
                fh.write(b"\r  0.0%\r#### 33.9%\r######## 100.0%\n")
            else:
                fh.write(b"line %d\n" % i)
        fh.write(b"partial last")
    lines, first = read_tail(str(path), max_lines=2000)
    assert first == 50001 - 2000 + 1
    assert lines[-1] == "partial last"
    assert lines[-2] == "line 50000"
    assert lines[49000 - first] == "######## 100.0%"
    assert lines[0] == "line %d" % first


def test_read_tail_small_and_empty(tmp_path: Path) -> None:
    path = tmp_path / "small.log"
    path.write_bytes(b"a\nb\nc\n")
    assert read_tail(str(path)) == (["a", "b", "c"], 1)
    assert read_tail(str(path), max_lines=2) == (["b", "c"], 2)
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    assert read_tail(str(empty)) == ([], 1)


def test_read_tail_on_seed_fixture() -> None:
    path = Path(__file__).parent / "fixtures" / "seed-warmup-broken-pipe" / "tmp" / "benchmark-full.log"
    lines, first = read_tail(str(path))
    assert first == 1 and len(lines) == 9
    assert lines[2].endswith("100.0%") and "\r" not in lines[2]
    assert lines[4].startswith("Error: status: Unavailable")


def test_read_tail_counts_again_after_growth_and_truncation(tmp_path: Path) -> None:
    path = tmp_path / "grow.log"
    path.write_bytes(b"".join(b"l%d\n" % i for i in range(1, 5001)))
    assert read_tail(str(path), max_lines=10) == (["l%d" % i for i in range(4991, 5001)], 4991)
    with open(path, "ab") as fh:
        fh.write(b"".join(b"l%d\n" % i for i in range(5001, 6001)))
    assert read_tail(str(path), max_lines=10) == (["l%d" % i for i in range(5991, 6001)], 5991)
    path.write_bytes(b"".join(b"m%d\n" % i for i in range(1, 101)))  # truncated and rewritten
    assert read_tail(str(path), max_lines=10) == (["m%d" % i for i in range(91, 101)], 91)


def test_read_tail_truncated_then_grown_past_the_old_offset(tmp_path: Path) -> None:
    path = tmp_path / "rot.log"
    path.write_bytes(b"".join(b"a%d\n" % i for i in range(1, 3001)))
    assert read_tail(str(path), max_lines=5)[1] == 2996
    with open(path, "r+b") as fh:  # copytruncate, then a longer life with longer lines
        fh.truncate(0)
        fh.write(b"".join(b"bb%d\n" % i for i in range(1, 4001)))
    assert read_tail(str(path), max_lines=5) == (["bb%d" % i for i in range(3996, 4001)], 3996)
