"""The verdict codes: label, explanation, and where each stands in the causal ranking.

Tiers: ``hardware`` faults (a lost or failing GPU, no or mismatched driver) explain everything on the host;
``cause`` codes are root causes, ranked by time (the earliest explains the later ones); ``symptom`` codes
are what a cause leaves behind (a broken pipe to a dead daemon, a launcher's wrapper error, idle GPUs) and
head the verdict only when no cause is found. ``RANK`` orders codes inside a tier and breaks ties between
events that happened together (the more specific wins: the permission error over the panic it unwrapped).
"""

from __future__ import annotations

from typing import Dict

# code: (tier, rank, label, explanation)
CODES: Dict[str, tuple] = {
    "gpu_lost": ("hardware", 100, "GPU lost",
                 "a GPU fell off the bus or stopped answering; the host needs a GPU reset or a reboot"),
    "gpu_ecc": ("hardware", 98, "GPU memory ECC error",
                "uncorrectable ECC error or failed row remapping: reset the GPU; if it repeats, replace it"),
    "no_gpu_driver": ("hardware", 97, "no NVIDIA driver",
                      "the NVIDIA driver is not loaded or the container cannot see the GPUs"),
    "driver_mismatch": ("hardware", 96, "driver mismatch",
                        "the NVIDIA driver is too old for the CUDA runtime, or was upgraded under a loaded module"),
    "host_oom_kill": ("cause", 95, "host out of memory (kernel OOM kill)",
                      "the kernel OOM killer killed a process: the host ran out of RAM"),
    "disk_full": ("cause", 92, "disk full", "a filesystem is full"),
    "shm_exhausted": ("cause", 91, "/dev/shm exhausted",
                      "/dev/shm is too small for NCCL or DataLoader workers (--shm-size, --ipc=host)"),
    "cuda_oom": ("cause", 90, "CUDA out of memory", "GPU memory ran out"),
    "nccl_timeout": ("cause", 88, "NCCL collective timeout",
                     "a collective did not complete in time; NCCL's watchdog took the job down"),
    "permission_denied": ("cause", 86, "permission denied",
                          "a file or directory could not be opened or written (owner/mode or a read-only mount)"),
    "address_in_use": ("cause", 84, "address already in use", "a port is still held by another process"),
    "command_not_found": ("cause", 83, "command/module not found", "a command, module or library is missing"),
    "download_failed": ("cause", 82, "download failed", "a download failed (network, DNS, URL, access)"),
    "download_stalled": ("cause", 81, "download stalled", "a download's bytes have not moved for stall_seconds"),
    "segfault": ("cause", 80, "segmentation fault", "a process crashed with a memory fault"),
    "cuda_error": ("cause", 75, "CUDA error", "a CUDA call failed"),
    "panic": ("cause", 70, "panic", "a Rust or Go program panicked"),
    "killed": ("cause", 65, "process killed (SIGKILL)",
               "a process got SIGKILL (the OOM killer, a timeout or an operator) and nothing says why"),
    "missing_input": ("cause", 50, "missing input", "an input file or path was missing"),
    "hung": ("symptom", 58, "hung", "the benchmark is alive but has made no progress for stall_seconds"),
    "transport_error": ("symptom", 55, "transport error",
                        "an RPC/HTTP2 connection broke: its peer died, or closed the stream"),
    "timeout": ("symptom", 45, "timeout", "an operation timed out"),
    "python_traceback": ("symptom", 40, "Python exception", "a Python exception ended the program"),
    "child_failed": ("symptom", 35, "child process failed",
                     "a launcher reported a failed child (torchrun, a shell's exit status)"),
    "gpu_xid": ("symptom", 33, "GPU Xid error", "the driver reported an Xid (often an application's GPU fault)"),
    "benchmark_not_running": ("symptom", 20, "benchmark not running", "no benchmark process is alive"),
    "waiting_on_child": ("symptom", 15, "entrypoint waiting", "the entrypoint waits on a child that does nothing"),
    "gpu_idle": ("symptom", 10, "GPUs idle", "every GPU is idle while the benchmark should run"),
    "finished": ("done", 0, "finished", "the run completed (summary written, exit 0, nothing left running)"),
    "healthy": ("done", 0, "healthy", "the benchmark runs and makes progress"),
    "starting": ("done", 0, "starting", "the entrypoint is young and still setting up"),
}
CUSTOM_RANK = 60  # a [[signature]] code the table does not know: a cause, between panic and killed


def tier(code: str) -> str:
    return CODES[code][0] if code in CODES else "cause"


def rank(code: str) -> int:
    return int(CODES[code][1]) if code in CODES else CUSTOM_RANK


def label(code: str) -> str:
    return str(CODES[code][2]) if code in CODES else code.replace("_", " ")


def explanation(code: str) -> str:
    return str(CODES[code][3]) if code in CODES else ""


RANK: Dict[str, int] = {code: int(row[1]) for code, row in CODES.items()}
LABELS: Dict[str, str] = {code: str(row[2]) for code, row in CODES.items()}
