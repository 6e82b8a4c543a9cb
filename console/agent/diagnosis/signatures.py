"""Known failure signatures: data tables, matched line by line.

``SIGNATURES``: a new failure wording is one more row. Rows are tried in order and the first match wins,
so specific rows come before general ones (``cuda_oom`` before ``cuda_error``, a reset while fetching
before ``transport_error``). The patterns follow the real programs' wording (PyTorch, NCCL, vLLM,
llama.cpp/ggml, lotus, curl, wget, huggingface_hub, the NVIDIA driver and the kernel).
``HARMLESS``: lines that look like failures but are known noise (never a finding).
``COMPLETED``: lines that say a run ended well (the ``finished`` verdict).
These and the other companion tables (panic causes, conditions and what clears them, the 401 rules) are data in
``sigtables.py``, re-exported here.
``[[signature]]`` rows of fleet.toml come in through ``compile_custom`` and are tried before the built-ins, in a
child process under a time budget per diagnosis (``CUSTOM_BUDGET``) on lines cut to ``CUSTOM_LINE_CAP``: a
pattern that backtracks for ever costs the diagnosis that budget, not its answer (``custom_notes`` says so).

``download_stalled`` and ``hung`` are not here: they come from progress that stopped moving
(``console.agent.diagnosis.progress``). The table's prefilter is ``prefilter.py``, reading a log's tail
``tails.py`` (both re-exported here).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from .prefilter import Plan, Signature, match_line_fast, plan, triggers
from .sigrows import (
    CLOCK_SKEW,
    COMPILER,
    CUDA_INIT,
    DAG_OOM,
    DRIVER_HUNG,
    FABRIC_MANAGER,
    GPU_BUSY,
    HOST_ALLOC,
    LAUNCH,
    NETWORK,
    NVLINK,
    ORDINAL,
    PROMPT,
    ROUND14,
    ROUND15,
    TRIAL_PENDING,
    UNSCHEDULABLE,
    WGET_STATUS,
)
from .sigtables import (
    CLEARED,
    COMPLETED,
    HARMLESS,
    NOT_CREDENTIALS,
    PANIC_CAUSES,
    PANIC_PAYLOAD_END,
    SECTION,
    UNAUTHORIZED,
)
from .tails import MAX_REPAINTS, collapse_cr, progress_percent, read_tail

__all__ = [
    "CLEARED", "COMPLETED", "CUSTOM_BUDGET", "CUSTOM_LINE_CAP", "DRIVER_HUNG", "HARMLESS", "MAX_REPAINTS",
    "NOT_CREDENTIALS",
    "PANIC_CAUSES", "PANIC_PAYLOAD_END", "SECTION", "SIGNATURES", "UNAUTHORIZED", "Plan", "Signature",
    "builtin_plan", "collapse_cr", "compile_custom", "custom_notes", "is_completion", "is_harmless", "match_line",
    "match_line_fast", "plan", "progress_percent", "read_tail", "scan_lines", "triggers",
]


def _sig(code: str, severity: str, pattern: str, explanation: str, flags: int = re.IGNORECASE) -> Signature:
    return Signature(code, severity, re.compile(pattern, flags), explanation)


# fmt: off
SIGNATURES: List[Signature] = [
    NVLINK, FABRIC_MANAGER, DRIVER_HUNG, CUDA_INIT,
    _sig("gpu_lost", "critical",
         r"fallen off the bus|GPU is lost|NVRM: Xid \([^)]*\):\s*(?:79|119|120)\b"
         r"|Unable to determine the device handle for GPU|GPU requires reset",
         "a GPU dropped off the PCIe bus or hit a fatal Xid; the host needs a reset/reboot"),
    _sig("gpu_ecc", "critical",
         r"NVRM: Xid \([^)]*\):\s*(?:48|63|64|92|94|95)\b|uncorrectable ECC error|ECC_UNCORRECTABLE"
         r"|cudaErrorECCUncorrectable|double bit error|Row Remapper Error|row remapping failure"
         r"|uncorrectable (?:ECC|memory) errors? (?:detected|encountered)",
         "the GPU's memory has an uncorrectable ECC error / failed row remapping: reset the GPU, then replace it"),
    _sig("no_gpu_driver", "critical",
         r"couldn't communicate with the NVIDIA driver|Found no NVIDIA driver|NVML_ERROR_DRIVER_NOT_LOADED"
         r"|Driver Not Loaded|NVIDIA driver is not loaded|no CUDA-capable device is detected|cudaErrorNoDevice"
         r"|CUDA_ERROR_NO_DEVICE|nvidia-smi: (?:command )?not found",
         "no usable NVIDIA driver: the kernel module is not loaded, or the container does not see the GPUs"),
    # docker/containerd/podman cannot hand the container a GPU: the NVIDIA Container Toolkit is missing or not
    # registered with the daemon (the host's driver may be fine)
    _sig("container_runtime_missing", "critical",
         r"could not select device driver \"[^\"]*\" with capabilities|unknown or invalid runtime name: nvidia"
         r"|Unknown runtime specified nvidia|\bnvidia-container-runtime(?:-hook)?\b.{0,60}(?:executable file not found"
         r"|not found in \$PATH|No such file or directory)|\bnvidia-container-cli: (?:command )?not found"
         r"|\bCDI device injection failed|unresolvable CDI devices? nvidia\.com/gpu",
         "the container runtime cannot give the container a GPU (the NVIDIA Container Toolkit is not installed or "
         "not registered with the daemon): install nvidia-container-toolkit, run nvidia-ctk runtime configure, "
         "restart the daemon"),
    _sig("driver_mismatch", "critical",
         r"Driver/library version mismatch|NVRM: API mismatch|NVML/RM version mismatch"
         r"|CUDA driver version is insufficient"
         r"|cudaErrorInsufficientDriver|CUDA_ERROR_SYSTEM_DRIVER_MISMATCH|driver on your system is too old"
         r"|unsupported display driver / cuda driver combination"
         r"|forward compatibility was attempted on non supported HW"
         r"|CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE|PTX was compiled with an unsupported toolchain"
         # code built by a newer toolkit or SDK than the driver knows: PTX (CUDA 222), the NVENC API (ffmpeg, OBS)
         r"|CUDA_ERROR_UNSUPPORTED_PTX_VERSION|cudaErrorUnsupportedPtxVersion"
         r"|Driver does not support the required nvenc API version|minimum required Nvidia driver for nvenc is"
         # the container toolkit's check of the image's requirement against the host driver (NVIDIA_REQUIRE_CUDA)
         r"|unsatisfied condition: (?:cuda|driver)\s*[<>=]|please update your driver to a newer version",
         "the NVIDIA driver and the CUDA libraries disagree (driver too old for the runtime, or upgraded "
         "under a loaded kernel module): update the driver or reboot, or use a build for this driver"),
    _sig("gpu_faulty", "critical",
         r"\bGPU \d+: FAULTY\b|errors:.{0,400}\(WARNING!\)"  # gpu-burn: its verdict, and a comparison's errors
         r"|^\|\s*(?:GPU Memory|Memory|Memtest|Diagnostic|SM Stress|Targeted Stress|Targeted Power|Memory Bandwidth"
         r"|Pulse Test|EUD Test|EUD|PCIe)?\s*\| Fail\b"  # dcgmi diag's table (a GPU's row, or its continuation)
         r"|\b[1-9]\d* errors so far\b"  # memtestG80
         r"|verification indicates proof is invalid|proof (?:for sector \d+ )?(?:was|is) invalid"
         r"|consecutive invalid proofs|proof verification failed|failed to verify (?:the )?proof"
         r"|\|\|Ax-b\|\|.{0,160}\bFAILED\b",  # HPL's residual check
         "the GPU fails its tests or computes wrong results (a burn-in, diagnostic, memory test or a proof's "
         "verification failed on it): take it out of service; reset it and test again, replace it if it repeats"),
    LAUNCH, ORDINAL, COMPILER, CLOCK_SKEW, NETWORK, GPU_BUSY, DAG_OOM, HOST_ALLOC, WGET_STATUS, PROMPT,
    *ROUND14, *ROUND15,
    _sig("host_oom_kill", "critical",
         r"Out of memory: Kill(?:ed)? process|invoked oom-killer|\boom-kill\b|oom_reaper: reaped"
         r"|Memory cgroup out of memory"
         # user-space killers: Ray's memory monitor, systemd-oomd, earlyoom
         r"|killed due to memory pressure \(OOM\)|killed due to the node running low on memory"
         r"|ray\.exceptions\.OutOfMemoryError|memory usage threshold of [\d.]+ was exceeded"
         r"|OutOfMemoryError: Task was killed"
         r"|systemd-oomd\[\d+\]: Killed |oomd\b.{0,80}\bKilled .{0,200}due to memory (?:pressure|used)"
         r"|earlyoom.{0,120}sending SIG(?:TERM|KILL) to process|low memory! at or below SIG(?:TERM|KILL)",
         "the host ran out of RAM and an OOM killer (the kernel's, Ray's memory monitor, systemd-oomd, earlyoom) "
         "killed a process"),
    _sig("shm_exhausted", "error",
         r"insufficient shared memory \(shm\)|out of shared memory|Error while creating shared memory segment"
         r"|failed to extend /dev/shm|/dev/shm\S*:? (?:No space left|is too small)|unable to write to file </torch_"
         r"|NCCL WARN .*\bshm\b|shared memory limit",
         "/dev/shm is too small (Docker's default is 64 MB): NCCL and DataLoader workers need it; "
         "run the container with --shm-size or --ipc=host"),
    _sig("disk_full", "critical", r"No space left on device|\bENOSPC\b|Disk quota exceeded|StorageFull",
         "a filesystem is full"),
    _sig("io_error", "critical",
         r"I/O error,? (?:on )?dev (?!fd\d|sr\d|loop\d)\w+|Buffer I/O error on dev(?:ice)? (?!fd\d|sr\d|loop\d)\w+"
         r"|critical medium error|EXT4-fs error|EXT4-fs \(\S+\): (?:I/O error|Remounting filesystem read-only)"
         r"|Remounting filesystem read-only|XFS \(\S+\): (?:metadata I/O error|Corruption|log I/O error)"
         # (an RDMA NIC's errno, in UCX/verbs/NCCL's words, is no disk's)
         r"|(?:^(?!.*(?:\bUCX\b|\buct_|\bmlx\d_\d|\bibv_|NET/IB|\brdma)).*?)Input/output error"
         r"|os error 5\b|Errno 5\]|Os \{ code: 5,"
         r"|Read-only file system|\bEROFS\b|os error 30\b|Errno 30\]|kind: ReadOnlyFilesystem"
         r"|Stale file handle|\bESTALE\b|os error 116\b|Errno 116\]|kind: StaleNetworkFileHandle",
         "a disk or filesystem failed (kernel I/O errors, a filesystem remounted read-only): check dmesg and the "
         "device's health (smartctl/nvme smart-log), move the data off it"),
    _sig("storage_stall", "error",
         r"nfs: server \S+ not responding|task \S+:\d+ blocked for more than \d+ seconds|hung_task_timeout_secs"
         r"|hung_task: blocked tasks|\S+': Transport endpoint is not connected"
         r"|/\S*: Transport endpoint is not connected|Transport endpoint is not connected: '/"
         r"|unable to access MOUNTPOINT"
         # Lustre's client losing its metadata/object server: operations wait for recovery
         r"|Connection to \S+ \(at [^)]+\) was lost|will wait for recovery to complete"
         r"|Request sent has timed out for (?:slow reply|sent delay)"
         # an SMB/CIFS server that stopped answering: the client reconnects while the job waits
         r"|CIFS:? VFS: .{0,120}\bhas not responded in \d+ seconds",
         "network or FUSE storage stopped answering (NFS server not responding, tasks blocked in the kernel, a dead "
         "s3fs/FUSE mount): the job waits on it; check the server or remount"),
    _sig("resource_limit", "error",
         r"Too many open files|\bEMFILE\b|os error 24\b|Errno 24\]|Os \{ code: 24,|can't start new thread"
         r"|fork: (?:retry: )?Resource temporarily unavailable|pthread_create.{0,80}Resource temporarily unavailable"
         r"|Thread creation failed: Resource temporarily unavailable|failed to create new OS thread"
         r"|RLIMIT_NPROC|RLIMIT_NOFILE|file-max limit \d+ reached|fork rejected by pids controller"
         r"|received 0 items of ancdata|JavaScript heap out of memory|Reached heap limit Allocation failed"
         # RDMA memory registration under a small locked-memory limit (ulimit -l): NCCL/UCX/MPI over InfiniBand
         r"|ibv_reg_mr\w*\b.{0,80}(?:Cannot allocate memory|failed)"
         r"|ibv_(?:create_cq|create_qp|create_srq|alloc_pd)\w*\b.{0,80}(?:Cannot allocate memory|\bENOMEM\b)"
         r"|\bRLIMIT_MEMLOCK\b|max locked memory"
         r"|(?:unable|failed|cannot) to (?:register|pin|lock) (?:the )?memory",
         "a per-process limit was hit (open files, processes/threads, locked memory): raise it (ulimit -n / -u / -l, "
         "the container's limits) or use fewer workers/threads"),
    _sig("cuda_oom", "error",
         r"CUDA out of memory|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation|CUDA error: out of memory"
         r"|out of memory on (?:device|GPU)|OutOfMemoryError: CUDA|cudaMalloc failed: out of memory"
         r"|(?:failed|unable) to allocate CUDA\d* buffer|No available memory for the cache blocks"
         r"|larger than the available KV cache memory|maximum number of tokens that can be stored in KV cache"
         r"|Insufficient memory for the KV cache|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED"
         r"|OOM when allocating tensor|RESOURCE_EXHAUSTED: Out of memory|cuda\w*.{0,160}\bout of memory"
         r"|insufficient (?:GPU|device) memory|\[TensorRT-LLM\]\[ERROR\].{0,200}\bout of memory"
         r"|kv.?cache.{0,120}insufficient memory|insufficient memory.{0,120}kv.?cache"
         r"|Requested amount of GPU memory \(\d+ bytes\) could not be allocated|GPU memory is not enough"
         r"|torch\.(?:cuda\.)?OutOfMemoryError\b|\bAllocation on device\b"
         # an OOM the program caught, skipping its item (fairseq, Boltz: "WARNING: ran out of memory, skipping batch")
         r"|\b(?:ran|run|running) out of (?:GPU |CUDA )?memory,? (?:skipping|skipped)\b"
         r"|\bOOM,? (?:skipping|skipped) (?:this |the )?(?:batch|sample|example|input|step)"
         r"|\bskipp(?:ing|ed) (?:this |the )?(?:batch|sample|example|input|step) (?:due to|because of) (?:an )?"
         r"(?:OOM|out of memory)\b"
         r"|Not enough memory\.? Please try to (?:increase|decrease) --mem-fraction-static"
         # allocators' own words: Paddle's, ONNX Runtime's arena, HIP (AMD)
         r"|Out of memory error on GPU|Cannot allocate [\d.]+\s*[KMGT]?i?B memory on GPU"
         r"|BFCArena\b.{0,200}Failed to allocate memory|Failed to allocate memory for requested buffer of size"
         r"|HIP out of memory|hipErrorOutOfMemory"
         # a device allocation call out of memory (Blender Cycles), RMM's pools (RAPIDS, dask-cuda), CuPy's pool
         r"|Out of memory in cu(?:Mem|da)\w*|System is out of GPU(?: and shared host)? memory"
         r"|out_of_memory: RMM failure|\bMaximum pool size exceeded|cupy\.cuda\.memory\.OutOfMemoryError"
         r"|Out of memory allocating [\d,]+ bytes \(allocated so far|out of memory to allocate \d+ bytes \(total"
         # other GPU APIs' allocation failures: OpenCL (a prover's GPU FFT/MSM), Vulkan (llama.cpp, ncnn, wgpu)
         # (not a warning that one "may cause" it: hashcat's)
         r"|^(?!.*\b(?:may|might|can|could) cause\b).*?\bCL_(?:MEM_OBJECT_ALLOCATION_FAILURE|OUT_OF_RESOURCES)\b"
         r"|\bVK_ERROR_OUT_OF_DEVICE_MEMORY\b"
         r"|\bErrorOutOfDeviceMemory\b"
         # a server's start-up check of free GPU memory (vLLM V1, TGI's warm-up)
         r"|Free memory on device .{0,60}\bis less than desired GPU memory utilization"
         r"|Not enough memory to handle \d+ (?:prefill|total|input) tokens",
         "GPU memory ran out (batch/model/context too large for this GPU, or another process holds memory)"),
    _sig("host_memory_exhausted", "error",
         r"memory allocation of \d+ bytes failed|std::bad_alloc|(?<![\w.])MemoryError\b(?!: CUDA)"
         r"|Unable to allocate [\d.]+ [KMGTPE]?i?B for an array|fatal error: runtime: out of memory"
         r"|java\.lang\.OutOfMemoryError|Cannot allocate memory|\bENOMEM\b|os error 12\b|Errno 12\]"
         r"|Os \{ code: 12,|out of memory: (?:cannot|could not|failed to) allocate|malloc\(\) failed",
         "the host's memory ran out: an allocation was refused (no OOM killer involved): use a bigger host, fewer "
         "workers or a smaller job, or raise the container's memory limit"),
    _sig("nccl_timeout", "error",
         r"Watchdog caught collective operation timeout|WorkNCCL\(.*\) ran for \d+ milliseconds before timing out"
         r"|Some NCCL operations have failed or timed out|Watchdog hang detected|collective operation timeout"
         r"|timed out in (?:blocking wait|store-based barrier)|Timed out initializing process group"
         r"|NCCL (?:communicator|watchdog)\b.*\btim(?:ed|e) ?out",
         "a NCCL collective did not complete in time (a rank died, hung or is far slower); NCCL's watchdog "
         "took the job down"),
    _sig("credentials_refused", "error",
         r"InvalidAccessKeyId|SignatureDoesNotMatch|InvalidSignatureException|ExpiredToken|InvalidClientTokenId"
         r"|UnrecognizedClientException|NoCredentialsError|Unable to locate credentials|DefaultCredentialsError"
         r"|\(AccessDenied\)|<Code>AccessDenied</Code>|AccessDeniedException|AWS Access Key Id you provided does not"
         r"|security token included in the request is (?:invalid|expired)|does not have storage\.\w+\.\w+ access"
         r"|Anonymous caller does not have|Invalid credentials in Authorization header|Invalid user token"
         r"|whoami-v2|AuthenticationFailed|Server failed to authenticate the request"
         r"|Your credentials are invalid|Reauthentication (?:failed|required)|invalid_grant"
         r"|credentials? (?:have|has) expired|The provided token has expired"
         r"|token expired and there's no refresh token|couldn't fetch token|oauth2: cannot fetch token"
         # an SSH login refused (pdsh/mpirun/deepspeed reaching the other nodes), a registry or git server refusing
         r"|Permission denied \((?:publickey|password|keyboard-interactive|gssapi|hostbased)[\w,-]*\)"
         r"|unauthorized: (?:authentication required|incorrect username or password)|no basic auth credentials"
         r"|denied: requested access to the resource is denied|pull access denied for"
         r"|fatal: Authentication failed for|remote: (?:Invalid username or password|HTTP Basic: Access denied)"
         # authenticated, but the identity may not do this (Azure's data-plane roles, an IAM policy, a GCS role)
         r"|AuthorizationPermissionMismatch|\bAuthorizationFailure\b|not authorized to perform this operation"
         r"|is not authorized to perform: [\w-]+:\w+|Permission '[\w.]+' denied on resource",
         "the storage or model hub refused the credentials (key unknown, expired token, wrong secret, no access "
         "granted): fix the key/token or its permissions; retrying does not help"),
    _sig("permission_denied", "error",
         r"Permission denied|PermissionError|\bEACCES\b|kind: PermissionDenied|os error 13\b|Errno 13\b",
         "a file or directory could not be opened or written (owner/mode)"),
    _sig("address_in_use", "error", r"Address already in use|EADDRINUSE|errno: 98\b|Errno 98\b|AddrInUse",
         "a port is still held (an old server or daemon is probably still running)"),
    # pip's resolver notice ("X requires Y, but you have Z which is incompatible") after an install that went on:
    # a warning about the environment; the error is what fails because of it (an import, a missing symbol)
    _sig("version_mismatch", "warning", r", but you have [\w.\[\]-]+ [\w.+-]+ which is incompatible",
         "pip installed packages whose declared requirements conflict: a warning until something fails on it"),
    _sig("version_mismatch", "error",
         r"undefined symbol\b|version [`'\u2018][\w.]+' not found"
         r"|compiled (?:using|against) (?:NumPy|API version|ABI version)|were compiled with different CUDA"
         r"|mismatches the version that was used to compile|xFormers was built for"
         r"|does not match the version (?:that was )?used to (?:compile|build)"
         r"|Unsupported gpu architecture '(?:compute|sm)_\d+'"
         r"|nvcc fatal\s*:\s*Value '(?:sm|compute)_\d+' is not defined"
         r"|\bversion of [\w.+-]{1,30} that does not match\b"
         r"|is not compatible with the current PyTorch installation|is not compatible with this version of"
         r"|no kernel image is available for execution|NoKernelImageForDevice|CUDA_ERROR_NO_BINARY_FOR_GPU"
         r"|\brequires (?![^\n]*none of the providers can be installed)[`'\"]?[\w.\[\]-]+ ?(?:>=|==|~=|<)\s*\d"
         r"|which is incompatible\b"
         r"|incompatible with (?:torch|pytorch|cuda|the (?:installed|current)|this version|your (?:installed|current))"
         r"|unknown model architecture|does not recognize this architecture|version of Transformers is out of date"
         r"|architectures? \[[^\]]*\] (?:are|is) not supported"
         r"|Loaded runtime CuDNN library: [\d.]+ but source was compiled with|but source was compiled with: [\d.]+"
         r"|CuDNN library needs to have matching major version|cuDNN version incompatibility"
         r"|Loaded cuDNN version [\d.]+ but .{0,80}compiled (?:with|against)|was compiled against cuDNN"
         r"|\bwas built against version [\d.]+, which is newer|must be at least as new as the version against which"
         # an import-time version check (OpenMMLab's, transformers' require_version)
         r"|\bis used but incompatible\b|\bis required for a normal functioning of this module, but found\b"
         # a binary built for another GPU generation (compute capability)
         r"|compute cap(?:ability)? [\d.]+ is not compatible with|is of cuda capability [\d.]+\. PyTorch no longer"
         r"|only supported on GPUs with compute capability|only supports Ampere GPUs or newer"
         r"|minimum required Cuda capability is",
         "a library or extension was built for another version than the one installed (a torch extension's "
         "undefined symbol, a wheel for another torch/CUDA/GPU, numpy 1 vs 2, an engine too old for the model): "
         "install matching versions or rebuild"),
    _sig("library_missing", "error",
         r"error while loading shared libraries|cannot open shared object file|Could not load library \S+\.so"
         r"|Unable to load any of \{|Library \S+ is not found or cannot be loaded|dlopen failed"
         r"|dlopen\([^)]*\) failed|failed to dlopen|libcuda\.so\S* cannot (?:be )?found"
         r"|NvvmSupportError|libNVVM cannot be found|\blibrary (?:nvvm|nvrtc|cudart|cudadevrt) not found"
         # Paddle's dynamic loader, a loader's "lib*.so*: not found" / "not configured correctly"
         r"|dynamic library \(\S+\) .{0,60}\bis not configured correctly"
         r"|\blib[\w+-]+\.so(?:\.[\d.]+)?\s*(?:=>\s*|:\s*|\s(?:is|was)\s)?not found\b",
         "a shared library cannot be loaded (not installed, or not on LD_LIBRARY_PATH; libcuda.so: the driver's "
         "library is not mounted into the container): install it or fix the library path"),
    _sig("install_failed", "error",
         r"Failed building wheel for|Could not build wheels for|Failed to build installable wheels"
         r"|^\s*Failed to build [\w.-]+\s*$|subprocess-exited-with-error"
         r"|Could not find a version that satisfies the requirement|No matching distribution found for"
         r"|ResolutionImpossible|package versions have conflicting dependencies"
         r"|externally-managed-environment|No solution found when resolving dependencies"
         r"|UnsatisfiableError|PackagesNotFoundError|ResolvePackageNotFound|Could not solve for environment specs"
         r"|Solving environment: (?:\.+working\.+ )?failed\s*$|none of the providers can be installed"
         r"|E: Unable to locate package|E: Package '[^']*' has no installation candidate|E: Could not get lock"
         r"|E: Unable to acquire the dpkg frontend lock|E: Failed to fetch|E: Unable to fetch some archives"
         r"|E: Unable to correct problems|E: Sub-process /usr/bin/dpkg returned an error"
         r"|dpkg: error processing package"
         # NVIDIA's runfile installer (a driver/toolkit install)
         r"|ERROR: Installation has failed|ERROR: An NVIDIA kernel module '[\w-]+' appears to be already loaded",
         "installing packages failed (pip could not build or find a wheel, conda could not solve, apt could not "
         "find a package or get the dpkg lock): fix the requirement/versions, use a prebuilt wheel, or retry later"),
    _sig("download_failed", "error",
         r"curl: \(\d+\)|Failed to download|download failed|requested URL returned error: \d+"
         r"|HTTP(?:/[\d.]+)? (?:401|403|404|5\d\d)\b|\b403 Forbidden\b|\b404 Not Found\b"
         r"|Could not resolve host|wget: unable to resolve|dial tcp: lookup \S+(?: on \S+)?: no such host"
         r"|RequestError: send request failed|\bERROR [45]\d\d: |Read error at byte \d+|Giving up\."
         r"|GatedRepoError|Cannot access gated repo|access to it at https://huggingface\.co|is restricted and you are"
         r"|RepositoryNotFoundError|Repository Not Found for url|RevisionNotFoundError|EntryNotFoundError"
         r"|\b401 Client Error|\b403 Client Error|\b404 Client Error|Max retries exceeded with url"
         r"|over its data quota|smudge filter lfs failed|Smudge error: Error downloading|LFS: Error downloading"
         r"|batch response: .{0,80}(?:bandwidth|quota|not found|Repository or object not found)"
         r"|An error occurred \((?:403|404|NoSuchKey|NoSuchBucket)\) when calling|\bNoSuchKey\b"
         # the AWS Go SDK's error under s5cmd, rclone, goofys: "AccessDenied: Access Denied status code: 403"
         r"|\b(?:AccessDenied|Forbidden|NotFound|NoSuchBucket)\b.{0,80}\bstatus code: 40[34]\b"
         r"|\bIncompleteRead\(\d+ bytes read|ContentTooShortError|ChunkedEncodingError|Connection broken: "
         r"|retrieval incomplete: got only"
         # a body that ended early or retries that ran out: reqwest/hyper's IncompleteBody (hf_transfer), Go's
         # "max retries exceeded: EOF" (ollama pull), huggingface_hub's "error occurred while downloading"
         r"|\bIncompleteBody\b|error decoding response body|Error while downloading: reqwest::Error"
         r"|\bmax retries exceeded: |An error occurred while downloading using `?hf_transfer"
         # the remote refused for a rate limit (Docker Hub's pull quota, HTTP 429), or what arrived is not the file
         r"|\btoomanyrequests\b|pull rate limit|\b429 (?:Client Error|Too Many Requests)|HTTP(?:/[\d.]+)? 429\b"
         r"|HTTP Error 429|API rate limit exceeded"
         r"|DO NOT MATCH THE HASHES|\b(?:checksum|hash|digest|sha256|md5) (?:sum )?mismatch\b|ChecksumMismatchError"
         r"|computed checksums? did NOT match|Consistency check failed: file should be of size"
         r"|layer verification failed for digest"
         # TLS that never came up (wget/curl/OpenSSL), an HTTP fetch that timed out inside requests/urllib3
         r"|Unable to establish SSL connection|SSL_connect\b.{0,40}error"
         r"|SSL routines:.{0,80}(?:alert|fail|wrong version|unexpected eof)"
         r"|CERTIFICATE_VERIFY_FAILED|certificate verify failed"
         r"|HTTPS?ConnectionPool\(host=[^)]*\): Read timed out|ReadTimeoutError: HTTPS?ConnectionPool"
         r"|\bDownload aborted\b|\berrorCode=[1-9]\d* .{0,200}\b(?:Size mismatch|Network problem|Resource not found"
         r"|Timeout|Connection)|\b(?:fetch|transfer|retrieval)\w* failed\b(?!\s*[:=]\s*0\b)"
         r"|fetch\w*\b.{0,160}(?:connection reset|reset by peer|unexpected EOF|broken pipe|timed out|i/o timeout"
         r"|connection refused|no route to host)"
         r"|download\w*\b.{0,160}(?:connection reset|reset by peer|unexpected EOF|broken pipe|timed out|i/o timeout"
         r"|connection refused|no route to host)",
         "a download failed (network, DNS, or the URL is wrong/forbidden/gated)"),
    _sig("download_stalled", "error",
         r"\bstalled; retrying\b|\b(?:download|transfer|part \d+|chunk)\w*\b.{0,60}\b(?:has |is )?stalled\b",
         "a download's bytes stopped moving (the tool says so: a part stalled and is retried)"),
    _sig("diverged", "warning",
         r"loss[\"']?\s*[:=]\s*[\"']?[-+]?(?:nan|inf|infinity)\b|\bloss is (?:nan|inf)\b"
         r"|NaN or Inf found in input tensor|returned nan values in its \d+\w* output|found NaN in (?:local )?grad norm"
         r"|detected NaN\b|NaN detected in|Loss became infinite or NaN|\bloss is (?:non-finite|not finite)\b"
         r"|\bnon-finite loss\b|\bInvalid loss, terminating training\b"
         r"|Current loss scale already at minimum|Minimum loss scale reached"
         r"|Attempted loss scale: 1(?:\.0)?, reducing to 1(?:\.0)?\b"
         r"|\| grad norm: [-+]?(?:nan|inf)\b|number of nan iterations:\s*[1-9]",  # Megatron's iteration line
         "training diverged: the loss is NaN/inf or the fp16 loss scale hit its minimum; the steps go on but learn "
         "nothing: lower the learning rate, clip gradients, use bf16, check the data"),
    _sig("waiting_input", "error",
         r"Enter your choice:\s*$|Paste an API key from your profile[^:]*:\s*$|\[y/n\]\s*:?\s*$|\(y/n\)\??\s*:?\s*$"
         r"|Proceed \(\[y\]/n\)\?\s*$|\(yes/no(?:/\[fingerprint\])?\)\??\s*$|Do you want to continue\??\s*$"
         r"|(?:^|\]\s|'s |\b(?:Enter|New|Current|Your|Retype|Repeat) )password(?: for [^:]{1,64})?:\s*$"
         r"|Enter passphrase[^:]{0,80}:\s*$|Username for '[^']*':\s*$|Geographic area:\s*$"
         r"|overwrite [^?]{0,160}\?\s*$|\[y\]es, \[n\]o[^:]*:\s*$|^\(Pdb\)\s*$|^ipdb>\s*$",
         "the job waits at an interactive prompt (a login, a yes/no question, a password, a debugger) and will wait "
         "for ever: answer it, or run non-interactively (WANDB_MODE, -y, DEBIAN_FRONTEND=noninteractive)"),
    _sig("throttled", "warning",
         r"HW Slowdown\s*:\s*Active\b|HW Thermal Slowdown\s*:\s*Active\b|HW Power Brake Slowdown\s*:\s*Active\b"
         r"|SW Thermal Slowdown\s*:\s*Active\b|temperature above threshold, cpu clock throttled"
         r"|_(?:hw_slowdown|hw_thermal_slowdown|hw_power_brake_slowdown|sw_thermal_slowdown)>Active<",
         "clocks are held down (thermal or power-brake slowdown): the job runs slower than it should; check cooling, "
         "fans and power delivery"),
    TRIAL_PENDING, UNSCHEDULABLE,
    _sig("hung", "error",  # Horovod's stall inspector: it repeats while no step advances (the log stays fresh)
         r"\bStalled ranks:|\bStalled ops:|waiting for remainder of ranks for more than \d+ seconds"
         r"|ranks? (?:have|has) not (?:yet )?submitted .{0,80}for more than \d+ seconds",
         "the collective waits on ranks that never submit their tensors (Horovod's stall warning): the job is hung"),
    _sig("transport_error", "error",
         r"broken pipe|transport error|connection reset|status: Unavailable|message length too large"
         r"|message too large|h2 protocol error|GOAWAY|error trying to connect|Connection refused"
         r"|EPIPE\b|ECONNRESET\b|IncompleteMessage|connection closed before message completed",
         "an RPC/HTTP2 connection broke (daemon died or closed the stream, or a request was too large)"),
    _sig("panic", "error", r"thread '[^']*'(?: \(\d+\))? panicked at|\bRust panic: |^panic: |^fatal error: "
         r"|goroutine \d+ \[running\]",
         "a Rust or Go program panicked", re.IGNORECASE | re.MULTILINE),
    _sig("segfault", "error",
         r"Segmentation fault|segfault at|(?<!\[signal )\bSIGSEGV\b|(?<!\[signal )\bSIGBUS\b|^Bus error"
         r"|exit (?:code|status) 139\b",  # (Go's "[signal SIGSEGV: ..." is its panic's, a panic)
         "a process crashed with a memory fault"),
    _sig("killed", "error",
         r"^\s*Killed\s*$|line \d+:\s+\d+ Killed\b|signal: 9\b|\bSIGKILL\b|killed by signal 9"
         r"|exit(?:ed with)? (?:code|status)\s*[:=]?\s*\(?137\b|exitcode\s*:\s*-9\b",
         "a process was killed with SIGKILL (often the OOM killer or a timeout)"),
    _sig("cuda_error", "error",
         r"CUDA error|CUDA_ERROR_\w+|cudaError\w+|CUBLAS_STATUS_\w+|illegal memory access was encountered"
         r"|NCCL error|ncclSystemError|ncclUnhandledCudaError|ncclInternalError|\bNCCL failure\b"
         r"|\b(?:CUDNN|CUSOLVER|CUSPARSE|CURAND)_STATUS_(?!SUCCESS)[A-Z_]+|\bCUFFT_(?:INTERNAL_ERROR|EXEC_FAILED"
         r"|SETUP_FAILED|INVALID_\w+)\b",
         "a CUDA call failed"),
    _sig("gpu_xid", "error", r"NVRM: Xid\b",
         "the NVIDIA driver reported an Xid error (often an application fault on the GPU)"),
    _sig("python_traceback", "error", r"Traceback \(most recent call last\):", "a Python exception"),
    _sig("child_failed", "error",
         r"ChildFailedError|^\s*\S+ FAILED\s*$|failed \(exitcode: -?\d+\) local_rank|Signal \d+ \(SIG\w+\) received"
         r"|exit(?:ed with)? (?:code|status) [1-9]\d*\b|terminate called after throwing|Aborted \(core dumped\)"
         r"|GGML_ASSERT|returned non-zero exit status|exited unexpectedly|failed to start\. See stack trace",
         "a launcher or wrapper reported that a child failed (what the child printed is the cause)"),
    _sig("command_not_found", "error",
         r"command not found|No module named |cannot import name|\bnvcc: not found|/bin/sh: \d+: \S+: not found"
         r"|(?:^|\s)(?:ba|da|z)?sh: (?:line )?\d+: [\w.+-]+: not found"
         r"|CUDA_HOME environment variable is not set|No such file or directory: '[^']*/nvcc'"
         r"|nvcc was not found|Could not find nvcc"
         r"|Ninja is required to load C\+\+ extensions|\bninja: (?:command )?not found"
         r"|CMake (?:must be installed|is not installed|was not found)|Could not find CMake\b"
         r"|No CMAKE_\w+_COMPILER could be found|unable to execute '[\w.+-]+': No such file or directory"
         r"|error: command '[^']+' failed: No such file or directory",
         "a command or Python module is not installed"),
    _sig("timeout", "warning", r"deadline exceeded|DeadlineExceeded|timed out|\btimeout expired\b",
         "an operation timed out"),
    _sig("missing_input", "warning", r"\bnot found\b|No such file or directory|does not exist",
         "an input file or path was missing"),
]

# fmt: on


SIGNATURE_CODES = [s.code for s in SIGNATURES]


LONG_LINE = 300  # a line longer than this (text.EVIDENCE_CHARS) is cited around its match
CUSTOM_LINE_CAP = 2000  # characters of a line a custom pattern sees
CUSTOM_BUDGET = 2.0  # seconds all custom patterns of one diagnosis may take together


class CustomSignature(Signature):
    """A fleet file's ``[[signature]]`` row: matched in a child process, under the diagnosis's budget."""

    __slots__ = ()


class _Budget:
    def __init__(self, seconds: float) -> None:
        self.left = seconds
        self.note: Optional[str] = None


_LOCAL = threading.local()  # the budget of the diagnosis this thread runs (one diagnosis per thread at a time)


def _budget() -> _Budget:
    budget = getattr(_LOCAL, "budget", None)
    if budget is None:
        budget = _LOCAL.budget = _Budget(CUSTOM_BUDGET)
    return budget


def compile_custom(rows: Optional[Sequence[Any]]) -> List[Signature]:
    """``[[signature]]`` rows (dicts: code, severity, pattern, explanation) as signatures; bad rows are skipped
    (the console validated them with file:line errors already). Starts this thread's diagnosis budget."""
    _LOCAL.budget = _Budget(CUSTOM_BUDGET)
    out: List[Signature] = []
    for row in rows or ():
        if not isinstance(row, dict):
            continue
        try:
            sig = _sig(str(row["code"]), str(row.get("severity") or "error"), str(row["pattern"]),
                       str(row.get("explanation") or row["code"]))
        except (KeyError, re.error, RecursionError, OverflowError, ValueError):
            continue
        out.append(CustomSignature(*sig))
    return out


def custom_notes() -> List[str]:
    """What this thread's diagnosis should say about its custom patterns (they ran out of time), if anything."""
    note = _budget().note
    return [note] if note else []


# The child that runs custom patterns: "<line index> <row index or -1>" a line, flushed, so that what it answered
# before it was stopped counts.
_CHILD = (
    "import json, re, sys\n"
    "job = json.loads(sys.stdin.read())\n"
    "rows = [re.compile(p, f) for p, f in job['rows']]\n"
    "for i, text in enumerate(job['lines']):\n"
    "    text = text[:job['cap']]\n"
    "    hit = next((j for j, rx in enumerate(rows) if rx.search(text)), -1)\n"
    "    sys.stdout.write('%d %d\\n' % (i, hit))\n"
    "    sys.stdout.flush()\n"
)


def _answers(out: bytes, rows: Sequence[Signature]) -> Tuple[Dict[int, Signature], int]:
    """The child's hits by line index, and how many lines it answered."""
    hits: Dict[int, Signature] = {}
    answered = 0
    for row in out.split(b"\n"):
        parts = row.split()
        if len(parts) == 2 and all(p.lstrip(b"-").isdigit() for p in parts):
            i, j = int(parts[0]), int(parts[1])
            answered = i + 1
            if 0 <= j < len(rows):
                hits[i] = rows[j]
    return hits, answered


def _custom_hits(rows: Sequence[Signature], lines: List[str], path: str, first_line: int) -> Dict[int, Signature]:
    """Which custom row matches each line (by index), found in a child stopped when the budget is spent."""
    budget = _budget()
    if budget.left <= 0 or not lines:
        return {}
    job = json.dumps({"rows": [[s.pattern.pattern, s.pattern.flags] for s in rows], "cap": CUSTOM_LINE_CAP,
                      "lines": [str(t) for t in lines]}).encode()
    start = time.monotonic()
    try:
        proc = subprocess.Popen([sys.executable or "python3", "-c", _CHILD], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    except OSError as exc:
        budget.left, budget.note = 0.0, "custom signatures not applied: cannot start %s (%s)" % (sys.executable, exc)
        return {}
    try:
        out, _ = proc.communicate(job, timeout=budget.left)
        finished = True
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        finished = False
    budget.left -= time.monotonic() - start
    hits, answered = _answers(out, rows)
    if not finished:
        budget.left = 0.0
        budget.note = ("custom signatures stopped after %g s at %s:%d (a [[signature]] pattern too slow for that "
                       "line); the lines after it were matched against the built-in table only"
                       % (CUSTOM_BUDGET, path, first_line + answered))
    return hits


def is_harmless(text: str) -> bool:
    return any(p.search(text) for p in HARMLESS)


def is_completion(text: str) -> bool:
    return any(p.search(text) for p in COMPLETED)


def match_line(text: str, table: Optional[Sequence[Signature]] = None) -> Optional[Signature]:
    """The first signature that matches one line of text, or None."""
    for sig in SIGNATURES if table is None else table:
        if sig.pattern.search(text):
            return sig
    return None


_BUILTIN_PLAN: List[Plan] = []


def builtin_plan() -> Plan:
    if not _BUILTIN_PLAN:
        _BUILTIN_PLAN.append(plan(SIGNATURES))
    return _BUILTIN_PLAN[0]


def scan_lines(
    lines: Iterable[str], path: str, first_line: int = 1, table: Optional[Sequence[Signature]] = None
) -> List[Dict[str, Any]]:
    """Every line that matches a signature: ``{code, severity, explanation, path, line, text}``.

    A table's custom rows (``compile_custom``) run in a child under the diagnosis's budget, before the others."""
    lines = list(lines)
    custom = [s for s in table if isinstance(s, CustomSignature)] if table is not None else []
    rest = [s for s in table if not isinstance(s, CustomSignature)] if custom and table is not None else table
    prepared = builtin_plan() if rest is None or rest is SIGNATURES or rest == SIGNATURES else plan(rest)
    custom_hits = _custom_hits(custom, lines, path, first_line) if custom else {}
    hits: List[Dict[str, Any]] = []
    for offset, text in enumerate(lines):
        sig = custom_hits.get(offset) or match_line_fast(text, prepared)
        if sig is not None:
            hit = {
                "code": sig.code,
                "severity": sig.severity,
                "explanation": sig.explanation,
                "path": path,
                "line": first_line + offset,
                "text": text,
            }
            if len(text) > LONG_LINE and not isinstance(sig, CustomSignature):
                found = sig.pattern.search(text)  # where in a long line: its evidence is cut around it
                if found is not None:
                    hit["focus"] = found.start()
            hits.append(hit)
    return hits
