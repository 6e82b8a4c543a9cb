"""The verdict codes: label, explanation, and where each stands in the causal ranking.

Tiers: ``hardware`` faults (a lost, failing or miscomputing GPU, no or mismatched driver, no container GPU
runtime) explain everything
on the host; ``cause`` codes are root causes, ranked by time (the earliest explains the later ones): the
storage and limits of the host (I/O errors, storage not answering, resource limits) rank above what they
make fail, the setup causes (credentials, versions, libraries, installs) above the crashes and wrappers they
explain, and the warnings on a running job (``diverged``) head only when no error does; ``symptom`` codes are
what a cause leaves behind (a broken pipe to a dead daemon, a launcher's wrapper error, idle GPUs) and head
the verdict only when no cause is found; ``throttled`` is a symptom-tier state (slowness, never a failure's
cause) below every symptom of a failed run. ``RANK`` orders codes inside a tier and breaks ties between
events that happened together (the more specific wins: the permission error over the panic it unwrapped).
"""

from __future__ import annotations

from typing import Dict

# code: (tier, rank, label, explanation)
CODES: Dict[str, tuple] = {
    "gpu_lost": ("hardware", 100, "GPU lost",
                 "a GPU fell off the bus or stopped answering; the host needs a GPU reset or a reboot"),
    "driver_hung": ("hardware", 100, "NVIDIA driver hung",
                    "the NVIDIA driver is wedged (NVML/nvidia-smi calls time out, processes stuck in the driver in D "
                    "state, often after an Xid storm): drain the host and reboot it"),
    "gpu_ecc": ("hardware", 99, "GPU memory ECC error",
                "uncorrectable ECC error or failed row remapping: reset the GPU; if it repeats, replace it"),
    "gpu_faulty": ("hardware", 98, "GPU faulty",
                   "a burn-in, diagnostic, memory test or verification step found a GPU computing wrong results "
                   "(gpu-burn FAULTY, dcgmi diag Fail, an invalid proof): take it out of service, reset and "
                   "retest, replace it if it repeats; an NVLink fault (NVLink Xid 74, 144-150) is the same: take the "
                   "node out, reset the GPUs and NVSwitch fabric, service the baseboard if it repeats"),
    "no_gpu_driver": ("hardware", 97, "no NVIDIA driver",
                      "the NVIDIA driver is not loaded or the container cannot see the GPUs"),
    "fabric_manager_down": ("hardware", 96, "NVSwitch fabric manager down",
                            "an NVSwitch machine's nvidia-fabricmanager is stopped, failed or of another version than "
                            "the driver, so CUDA answers 802 (system not yet initialized): install the Fabric Manager "
                            "of the driver's exact version and start it"),
    "cuda_init_failed": ("hardware", 96, "CUDA cannot initialize",
                         "CUDA's initialization fails with an unknown error (cuInit 999) while NVML still answers, "
                         "typically after a suspend/resume or with a stale nvidia_uvm module: reload nvidia_uvm "
                         "(no GPU process running) or reboot"),
    "driver_mismatch": ("hardware", 96, "driver mismatch",
                        "the NVIDIA driver is too old for the CUDA runtime, or was upgraded under a loaded module"),
    "container_runtime_missing": ("hardware", 95, "container GPU runtime missing",
                                  "the container runtime cannot give containers a GPU (NVIDIA Container Toolkit "
                                  "missing or not registered with docker/containerd); the host driver may be fine"),
    "host_oom_kill": ("cause", 95, "host out of memory (kernel OOM kill)",
                      "the kernel OOM killer killed a process: the host ran out of RAM"),
    "host_memory_exhausted": ("cause", 94, "host out of memory (allocation failed)",
                              "the host's memory ran out and an allocation was refused (no OOM killer): a bigger "
                              "host, fewer workers or a smaller job"),
    "io_error": ("cause", 94, "disk I/O error",
                 "a disk or filesystem failed (kernel I/O errors, a filesystem remounted read-only): check dmesg "
                 "and the device, move the data off it"),
    "disk_full": ("cause", 93, "disk full", "a filesystem is full"),
    "mig_misconfigured": ("cause", 92, "MIG layout does not fit the job",
                          "the job asks for GPUs that the GPU's MIG slices do not give it (a CUDA process sees one MIG "
                          "instance): run one process per slice (CUDA_VISIBLE_DEVICES=MIG-<uuid>) or change/disable "
                          "the MIG layout"),
    "shm_exhausted": ("cause", 92, "/dev/shm exhausted",
                      "/dev/shm is too small for NCCL or DataLoader workers (--shm-size, --ipc=host)"),
    "cuda_oom": ("cause", 91, "CUDA out of memory", "GPU memory ran out"),
    "storage_stall": ("cause", 90, "storage not answering",
                      "NFS/FUSE storage stopped answering and processes wait on it in the kernel: check the "
                      "server or the mount"),
    "network_error": ("cause", 89, "network between hosts failed",
                      "the fabric between the hosts failed (RDMA transport errors, NCCL/Gloo/UCX connections cut): "
                      "check the NICs, links, switch ports and routes (ibstat, RoCE/PFC), not the GPUs"),
    "nccl_timeout": ("cause", 89, "NCCL collective timeout",
                     "a collective did not complete in time; NCCL's watchdog took the job down"),
    "resource_limit": ("cause", 88, "resource limit reached",
                       "a per-process limit was hit (open files, threads/processes): raise ulimit -n/-u or the "
                       "container's limits, or use fewer workers"),
    "clock_skew": ("cause", 88, "host clock wrong",
                   "the host's clock is wrong, so certificates look not valid yet or servers refuse the request's "
                   "time: set the time (NTP/chrony, timedatectl) and retry"),
    # a storage client turns a refused credential into a PermissionError (s3fs: ExpiredToken, AccessDenied): the
    # credential is the cause when both are reported together
    "credentials_refused": ("cause", 87, "credentials refused",
                            "the storage or model hub refused the key/token (unknown, expired, no access): fix "
                            "the credentials; retrying does not help"),
    "permission_denied": ("cause", 86, "permission denied",
                          "a file or directory could not be opened or written (owner/mode)"),
    "version_mismatch": ("cause", 85, "version mismatch",
                         "a library, extension or wheel was built for other versions than those installed "
                         "(torch, CUDA, numpy, the GPU, the model format): install matching versions or rebuild"),
    "library_missing": ("cause", 84, "shared library missing",
                        "a shared library cannot be loaded: install it or fix LD_LIBRARY_PATH (libcuda: mount the "
                        "driver into the container)"),
    "install_failed": ("cause", 83, "install failed",
                       "installing packages failed (pip build/resolve, conda solve, apt): fix the requirements, use "
                       "a prebuilt wheel, or retry"),
    "address_in_use": ("cause", 82, "address already in use", "a port is still held by another process"),
    "command_not_found": ("cause", 81, "command/module not found", "a command or Python module is missing"),
    "download_failed": ("cause", 80, "download failed", "a download failed (network, DNS, URL, access)"),
    "download_stalled": ("cause", 79, "download stalled", "a download's bytes have not moved for stall_seconds"),
    "segfault": ("cause", 78, "segmentation fault", "a process crashed with a memory fault"),
    "cuda_error": ("cause", 75, "CUDA error", "a CUDA call failed"),
    "panic": ("cause", 70, "panic", "a Rust or Go program panicked"),
    "preempted": ("cause", 69, "spot VM preempted",
                  "the cloud reclaimed the spot/preemptible VM (AWS's instance-action interruption notice, GCP's "
                  "preemption, Azure's Preempt event), then SIGTERM: not the job's fault; resume from the last "
                  "checkpoint on another VM or use on-demand capacity"),
    "time_limit": ("cause", 69, "job hit its time limit",
                   "the batch scheduler killed the job at its wall-time limit (Slurm's CANCELLED ... DUE TO TIME "
                   "LIMIT, PBS walltime exceeded, LSF TERM_RUNLIMIT, SGE h_rt): ask for more time, or checkpoint "
                   "and resubmit"),
    "unschedulable": ("cause", 68, "cannot be scheduled",
                      "the scheduler cannot place the job or pod (Kubernetes' FailedScheduling \"Insufficient "
                      "nvidia.com/gpu\", Ray's \"No available node types can fulfill\"): it waits for resources no "
                      "node has free: free them (an old replica, another job), ask for less, or add nodes"),
    "waiting_input": ("cause", 67, "waiting for input",
                      "the job waits at an interactive prompt (login, yes/no, password, debugger) for ever: answer "
                      "it or run non-interactively"),
    "killed": ("cause", 65, "process killed (SIGKILL)",
               "a process got SIGKILL (the OOM killer, a timeout or an operator) and nothing says why"),
    "diverged": ("cause", 52, "training diverged",
                 "the loss is NaN/inf (or the fp16 loss scale hit its minimum) while the steps go on: lower the "
                 "learning rate, clip gradients, use bf16, check the data"),
    "result_invalid": ("cause", 51, "result invalid",
                       "the run completed but its result does not count by the tool's own rules (MLPerf loadgen's "
                       "\"Result is : INVALID\", HPCG's \"result is INVALID\", IO-500's invalid score): fix what the "
                       "tool says was not satisfied (min duration, query count, run time) and run again"),
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
    "pcie_degraded": ("symptom", 13, "PCIe link degraded",
                      "a busy GPU's PCIe link runs below what the card and slot support (narrower, or generations "
                      "slower): reseat the card or riser, check the slot and BIOS link settings"),
    "throttled": ("symptom", 12, "clocks throttled",
                  "GPU/CPU clocks are held down (thermal or power-brake slowdown): the job runs slow; check "
                  "cooling, fans and power"),
    "slowed_down": ("symptom", 11, "steps slowed down",
                    "the steps advance, but at least 3x slower than earlier in the same log (memory spilling, "
                    "throttled clocks, a slower data source): a warning on a running job, not a failure"),
    "gpu_idle": ("symptom", 10, "GPUs idle", "every GPU is idle while the benchmark should run"),
    "finished": ("done", 0, "finished", "the run completed (summary written, exit 0, nothing left running)"),
    "healthy": ("done", 0, "healthy", "the benchmark runs and makes progress"),
    "starting": ("done", 0, "starting", "the entrypoint is young and still setting up"),
}
CUSTOM_RANK = 66  # a [[signature]] code the table does not know: a cause, between panic and killed


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
