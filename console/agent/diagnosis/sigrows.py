"""Signature rows split out of ``signatures.SIGNATURES`` (data only), spliced into it where the first match must win:
the fabric between hosts, the host's clock, NVLink, a device that is not visible, kernels the GPU cannot launch, a
missing host compiler (blind round 10's classes, docs/diagnosis.md)."""

from __future__ import annotations

import re

from .prefilter import Signature


def _sig(code: str, severity: str, pattern: str, explanation: str) -> Signature:
    return Signature(code, severity, re.compile(pattern, re.IGNORECASE), explanation)


# fmt: off
# The GPUs' NVLink fabric failed (NVLink Xids 74 and 144-150, the runtime's NVLink error): the job's GPUs cannot
# talk; the node needs the GPUs/NVSwitch reset and, if it repeats, the baseboard serviced. Tried before gpu_lost.
NVLINK = _sig(
    "gpu_faulty", "critical",
    r"NVRM: Xid \([^)]*\):\s*(?:74|14[4-9]|150)\b|uncorrectable NVLink error|NVLink: fatal error"
    r"|\bNVLINK(?:_| )(?:ERROR|FATAL)\b|\bnvlink\w*: .{0,60}\b(?:fatal|uncorrectable) error",
    "the GPUs' NVLink fabric failed (an NVLink Xid or an uncorrectable NVLink error): take the node out of service, "
    "reset the GPUs and NVSwitch fabric (fabric manager), check the links (nvidia-smi nvlink -s); service it if it "
    "repeats")

# The host's clock is wrong: TLS says a certificate is not valid yet, apt says a Release file is not valid yet, an
# object store or Kerberos refuses the request's time. Tried before download_failed and credentials_refused.
CLOCK_SKEW = _sig(
    "clock_skew", "error",
    r"certificate is not (?:yet valid|valid yet)|\bCERT_NOT_YET_VALID\b|\bcurrent time \S+ is before \S+"
    r"|\bis not valid yet \(invalid for another\b|\bClock skew too great\b|\bKRB5KRB_AP_ERR_SKEW\b"
    r"|\bRequestTimeTooSkewed\b|difference between the request time and the (?:current|server's) time is too large"
    r"|\bSignature not yet current\b",
    "the host's clock is wrong (a certificate or a request looks not valid yet, or too far off the server's time): "
    "set the time (NTP/chrony, timedatectl), then retry")

# The fabric between hosts failed: RDMA completions with an error status, the NIC's transport retries exhausted,
# NCCL's socket transport or Gloo's TCP pairs cut, MPI's InfiniBand retry count. Tried before transport_error and
# cuda_error (the NCCL error that reports it).
NETWORK = _sig(
    "network_error", "error",
    r"\bIBV_WC_(?!SUCCESS\b)[A-Z_]+_ERR\b|NET/IB\w* ?: Got completion from peer|Transport retry count exceeded"
    r"|\bRNR retry count exceeded|InfiniBand retry count between two MPI processes has been exceeded"
    r"|NCCL WARN (?:NET/\w+ ?: |Net ?: |socketProgress\w*: |Call to recv ).{0,160}(?:Connection (?:reset|closed"
    r"|refused)|reset by peer|closed by remote peer|No route to host|unexpected EOF)"
    r"|gloo/transport/\w+/\w+\.cc:\d+\]\s*(?:Read error|Write error|Connection (?:reset|closed) by peer"
    r"|Timed out waiting).{0,120}"
    r"|UCX\s+ERROR\b.{0,160}(?:Endpoint timeout|Connection reset by remote peer|Destination is unreachable)",
    "the network between the hosts failed (an RDMA transport error, NCCL's or Gloo's connections cut): check the "
    "NICs, links, switch ports and routes between the nodes (ibstat, ibv_devinfo, RoCE/PFC settings)")

# A kernel the GPU cannot launch as configured (Triton's shared memory per block on an older card)
LAUNCH = _sig(
    "cuda_error", "error",
    r"\bOutOfResources\b.{0,40}out of resource|\bout of resource: (?:shared memory|registers)\b",
    "a GPU kernel asks for more than this GPU gives one block (shared memory): smaller blocks or stages, or a "
    "newer GPU")

# A device ordinal the process cannot see (more GPUs asked for than visible; on MIG, one slice per process)
ORDINAL = _sig(
    "cuda_error", "error",
    r"device >= 0 && device < num_gpus|\binvalid device ordinal\b|\bCUDA_ERROR_INVALID_DEVICE\b"
    r"|\bcudaErrorInvalidDevice\b|on CUDA device \d+ but torch\.cuda\.device_count\(\) is \d+",
    "a process asked for a GPU it cannot see (more devices than CUDA_VISIBLE_DEVICES or MIG give it)")

# No host C/C++ compiler for a JIT (Triton, Inductor): install one (gcc) or turn compilation off
COMPILER = _sig(
    "command_not_found", "error",
    r"Failed to find C compiler|No working C\+\+ compiler found|\bInvalidCxxCompiler\b"
    r"|\b(?:gcc|g\+\+|cc|c\+\+|clang): (?:command )?not found",
    "no C/C++ compiler on the host or in the image (a JIT such as Triton or torch.compile needs one): install "
    "gcc, or turn compilation off")
# fmt: on

# A scheduler that cannot place the work, waiting for resources it will not get (Ray's insufficient-resources
# warning, an unschedulable resource request, Kubernetes' FailedScheduling): the run is stuck, not starting
# The scheduler's own refusal to place it (Kubernetes' FailedScheduling "0/N nodes are available: N Insufficient
# nvidia.com/gpu", a PodUnschedulable event, Ray's autoscaler "No available node types can fulfill resource request",
# Nomad's exhausted device dimension, Slurm's "Requested node configuration is not available") is unschedulable (blind
# round 15); Ray Tune's hedged "No trial is running ... could be due to" names no refusal and stays hung.
UNSCHEDULABLE = _sig(
    "unschedulable", "error",
    r"resource request cannot be scheduled right now|No available node types can fulfill resource request"
    r"|\b\d+/\d+ nodes are available:.{0,160}\bInsufficient (?:nvidia\.com/gpu|amd\.com/gpu|[\w.-]+/gpu|cpu|memory)"
    r"|\bPodUnschedulable\b.{0,80}\bInsufficient\b|\bCannot schedule pods: Insufficient\b"
    r"|\bDimension \"devices?: ?[\w/.-]*gpu[\w/.-]*\" exhausted\b"
    r"|\bRequested node configuration is not available\b",
    "the scheduler cannot place the job or pod: it asks for more GPUs/CPUs/memory than any node has free (another "
    "job or an old replica may hold them): free them, ask for what the nodes have, or add nodes")
TRIAL_PENDING = _sig(
    "hung", "error",
    r"No trial is running and no new trial has been started within the last \d+ seconds",
    "no trial runs and none started (Ray Tune): the trials wait for resources the cluster may never have: ask for "
    "what the host has, or add nodes")

# fmt: off
# An NVSwitch machine (HGX/DGX, p4d/p5) whose Fabric Manager is not running: CUDA answers 802 "system not yet
# initialized" (cudaErrorSystemNotReady) until nvidia-fabricmanager has registered the GPUs with the NVLink fabric;
# the unit's own failure (systemd's, nv-fabricmanager's version check against the driver) says why. Tried before
# driver_mismatch (the unit's version check names the driver) and cuda_error (bandwidthTest's "code=802(...)").
FABRIC_MANAGER = _sig(
    "fabric_manager_down", "critical",
    r"\bcudaErrorSystemNotReady\b|\bCUDA_ERROR_SYSTEM_NOT_READY\b|\bsystem not yet initiali[sz]ed\b"
    r"|fabric ?manager\b.{0,80}\bdo(?:n't| not|es not) match with (?:the )?driver version"
    r"|Failed to start (?:the )?NVIDIA fabric ?manager|nvidia-fabricmanager(?:\.service)?: (?:Failed with result"
    r"|(?:Main|Control) process exited, code=exited, status=[1-9])"
    r"|nv-fabricmanager\b.{0,120}\bfailed! Exit code: [1-9]",
    "the NVSwitch fabric is not up: nvidia-fabricmanager is stopped, failed to start, or is another version than "
    "the driver (CUDA says 802, system not yet initialized): install the Fabric Manager of the driver's exact "
    "version and start it (systemctl enable --now nvidia-fabricmanager)")

# The NVIDIA driver wedged: GPU-management calls (NVML, nvidia-smi) time out or hang, processes sit in the driver in
# uninterruptible sleep (the kernel's hung-task reports through [nvidia] frames: events.py). A reboot clears it.
DRIVER_HUNG = _sig(
    "driver_hung", "critical",
    r"\bNVML_ERROR_TIMEOUT\b|\bnvml\w*(?: \w+)? (?:query |call |request )?timed out\b"
    r"|\bnvmlDevice\w+\b.{0,60}\btimed out\b|\bnvidia-smi\b.{0,40}\b(?:timed out|is hung|hangs|is stuck|got stuck)\b",
    "the NVIDIA driver is hung (GPU management calls time out, processes stuck in the driver in D state): the "
    "host needs a reboot (a GPU reset is rarely possible while processes are stuck); drain it first")
# fmt: on

# fmt: off
# CUDA cannot initialize although the driver answers NVML: cuInit's 999 (CUDA_ERROR_UNKNOWN), torch's "CUDA unknown
# error - this may be due to an incorrectly set up environment", old torch's "cuda runtime error (30) : unknown
# error", TensorFlow's "failed call to cuInit: CUDA_ERROR_UNKNOWN": after a suspend/resume or with a stale
# nvidia_uvm module. Reloading nvidia_uvm (or a reboot) brings CUDA back. Tried before driver_mismatch, cuda_error.
CUDA_INIT = _sig(
    "cuda_init_failed", "critical",
    r"\bCUDA unknown error - this may be due to an incorrectly set up environment"
    r"|\bCUDA initialization: (?:CUDA )?unknown error\b"
    r"|\bcuInit\b.{0,60}\b(?:999|CUDA_ERROR_UNKNOWN|unknown error)\b"
    r"|\bcudaGetDeviceCount\b.{0,80}\b(?:999|cudaErrorUnknown|unknown error)\b|\bError 999: unknown error\b"
    r"|\bcuda runtime error \(30\) : unknown error\b|\bCUDA driver initialization failed\b",
    "CUDA cannot initialize while the driver still answers (cuInit returns 999, unknown error), typically after a "
    "suspend/resume or with a stale nvidia_uvm module: reload it (rmmod nvidia_uvm && modprobe nvidia_uvm, with "
    "no GPU process running) or reboot")

# The GPU refuses one more user of a capped resource: a consumer card's NVENC session cap (ffmpeg's
# "OpenEncodeSessionEx failed: out of memory (10)" or "incompatible client key (21)", NV_ENC_ERR_OUT_OF_MEMORY,
# OBS's "Too many concurrent sessions"), a GPU in exclusive-process mode held by another process (CUDA error 46
# "all CUDA-capable devices are busy or unavailable"). Tried before cuda_oom ("out of memory") and cuda_error.
GPU_BUSY = _sig(
    "resource_limit", "error",
    r"\bOpenEncodeSessionEx failed: (?:out of memory|incompatible client key)|\bNV_ENC_ERR_OUT_OF_MEMORY\b"
    r"|\bToo many concurrent (?:NVENC )?sessions\b|\bexceeded (?:the )?(?:maximum )?(?:number of )?(?:NVENC|encod\w+)"
    r" sessions\b"
    r"|\ball CUDA-capable devices are busy or unavailable\b|\bcudaErrorDevicesUnavailable\b"
    r"|\bCUDA_ERROR_(?:DEVICES_UNAVAILABLE|EXCLUSIVE_PROCESS_MODE\w*)\b",
    "the GPU refused one more user of a capped resource: a consumer card's NVENC session cap (3-8 concurrent "
    "encodes), or a GPU in Exclusive_Process compute mode held by another process: stop the other user, run fewer "
    "encodes at once, or set the compute mode to Default (nvidia-smi -c 0)")

# Not enough GPU memory for a miner's DAG / dataset (T-Rex, lolMiner, gminer, TeamRedMiner wordings)
DAG_OOM = _sig(
    "cuda_oom", "error",
    r"\b(?:device|GPU|card)\b[^.]{0,40}\b(?:does not|doesn't) have enough (?:free )?(?:GPU |device )?memory\b"
    r"|\bnot enough (?:free )?(?:GPU |device |video )?(?:memory|VRAM)\b.{0,40}\b(?:DAG|dataset)\b"
    r"|\b(?:DAG|dataset)\b.{0,40}\b(?:does not|doesn't|won't|will not|cannot|can't) fit\b",
    "GPU memory ran out: the DAG (or dataset) does not fit in this GPU's free memory")

# A host allocation refused in a C/C++ program's words (zkProver's "failed calling malloc() of size N", "malloc of N
# bytes failed", "calloc() returned NULL")
HOST_ALLOC = _sig(
    "host_memory_exhausted", "error",
    r"\bfailed (?:calling|to call) (?:malloc|calloc|realloc|posix_memalign|mmap)\(\)"
    r"|\b(?:malloc|calloc|realloc|posix_memalign)(?:\(\))? (?:of (?:size )?\d+(?: bytes)? )?(?:failed|returned NULL)\b",
    "the host's memory ran out: an allocation was refused (no OOM killer involved): use a bigger host, fewer "
    "workers or a smaller job, or raise the container's memory limit")

# wget's status line ("HTTP request sent, awaiting response... 401 Unauthorized"), a download's refusal
WGET_STATUS = _sig(
    "download_failed", "error",
    r"\bawaiting response\.\.\. (?:4\d\d|5\d\d)\b|\bUsername/Password Authentication Failed\b",
    "a download failed (the server refused it: a 4xx/5xx answer)")

# An installer's prompt (an interactive licence or yes/no question), also inside a text UI's box (the CUDA runfile's
# "Do you accept the above EULA? (accept/decline/quit):", Anaconda's "[no] >>>"); the box's frame is no answer
PROMPT = _sig(
    "waiting_input", "error",
    r"\((?:accept/decline(?:/quit)?|yes/no/quit|y/n/q)\)\s*:?[\s\u2502\u2503\u2551|]*$|^\s*accept/decline/quit:\s*$"
    r"|\[yes\|no\]\s*$|^\s*\[(?:no|yes)\] >>>\s*$",
    "the job waits at an interactive prompt (an installer's licence or yes/no question) and will wait for ever: "
    "run the installer non-interactively (--silent, -b, --accept-license)")
# fmt: on

# fmt: off
# Causes in wordings the main rows lack (blind round 14): a GPU library's own out-of-memory status (cuStateVec,
# cuTensorNet: "[custatevec] %out of memory", CUSTATEVEC_STATUS_INSUFFICIENT_WORKSPACE)
LIB_OOM = _sig(
    "cuda_oom", "error",
    r"\[cu(?:statevec|tensornet|quantum|densitymat)\] %?(?:out of memory|insufficient workspace)"
    r"|\bCU(?:STATEVEC|TENSORNET|DENSITYMAT)_STATUS_(?:INSUFFICIENT_WORKSPACE|ALLOC_FAILED)\b",
    "GPU memory ran out (a GPU library could not allocate its state or workspace: too many qubits, too large a "
    "problem for this GPU or these GPUs)")

# git's transfer cut mid-clone (git's "RPC failed; curl NN", "fetch-pack: unexpected disconnect", "early EOF",
# "index-pack failed"), conda's fetch that never reached the channel ("CondaHTTPError: HTTP 000 CONNECTION FAILED")
FETCH_CUT = _sig(
    "download_failed", "error",
    r"\berror: RPC failed; (?:curl|HTTP) \d+|\bfetch-pack: unexpected disconnect\b|^fatal: early EOF\s*$"
    r"|\bfatal: (?:fetch-pack: invalid )?index-pack (?:failed|output)\b"
    r"|\bCondaHTTPError: HTTP \d{3}|\bHTTP 000 CONNECTION FAILED\b|\bCondaSSLError\b",
    "a download failed (the connection was cut or never reached the server: a git clone's or conda's fetch): "
    "retry, check the network or proxy, or fetch from a mirror")

# git-lfs's batch API refusing the identity ("batch response: Access forbidden", "Authentication required",
# "Bad credentials"): tried before download_failed's "Smudge error: Error downloading"
LFS_REFUSED = _sig(
    "credentials_refused", "error",
    r"\bbatch response: (?:Access forbidden|Authentication required|Bad credentials|Unauthorized|Forbidden)\b",
    "the git-lfs server refused the credentials (token without access to the repository's objects): fix the "
    "token or its access level; retrying does not help")

# No CUDA driver library to load (Numba's "CUDA driver library cannot be found", "Error at driver init")
DRIVER_LIB = _sig(
    "no_gpu_driver", "critical",
    r"\bCUDA driver library cannot be found\b|\bCudaSupportError: Error at driver init: ?$",
    "no usable NVIDIA driver: the driver's library (libcuda) is not installed or not mounted into the container")

# A binary built for another GPU architecture (Kokkos' "likely mismatch of architecture", "compiled for compute
# capability X on device with compute capability Y")
ARCH_MISMATCH = _sig(
    "version_mismatch", "error",
    r"\binitialize ERROR: likely mismatch of architecture\b"
    r"|\bcompiled for compute capability [\d.]+ on (?:a )?device with compute capability [\d.]+",
    "a binary was built for another GPU architecture than this GPU's: rebuild it for this GPU's compute "
    "capability (or for several)")
# fmt: on

# A run that completed with a result the tool itself declares invalid (MLPerf loadgen's "Result is : INVALID",
# HPCG's "HPCG result is INVALID", a benchmark's "INVALID RUN" / "result is NOT VALID"); "VALID" is no match
RESULT_INVALID = _sig(
    "result_invalid", "error",
    r"\bResult (?:is|was)\s*:?\s*(?:INVALID|NOT VALID)\b|\bresults? (?:is|are) (?:INVALID|NOT VALID)\b"
    r"|\bINVALID RUN\b|\bRun (?:is|was) INVALID\b",
    "the run completed but the tool declares its result invalid by its own rules (a minimum duration or query "
    "count not satisfied): fix what it names and run again")

# blind round 14's rows, spliced into SIGNATURES in this order (before cuda_oom, credentials_refused, download_failed)
ROUND14 = (LIB_OOM, FETCH_CUT, LFS_REFUSED, DRIVER_LIB, ARCH_MISMATCH, RESULT_INVALID)

# fmt: off
# Blind round 15's codes. A cloud reclaiming a spot/preemptible VM: AWS's interruption notice (instance metadata
# "spot/instance-action" {"action": "terminate"|"stop"|"hibernate"}, the EventBridge "EC2 Spot Instance Interruption
# Warning"), GCP's preemption (metadata "instance/preempted" TRUE, "compute.instances.preempted", "Instance was
# preempted"), Azure's scheduled event "EventType": "Preempt"; the job's SIGTERM / exit 143 after it is its effect
PREEMPTED = _sig(
    "preempted", "error",
    r"\binstance-action\b.{0,40}\"action\"\s*:\s*\"(?:terminate|stop|hibernate)\""
    r"|\"action\"\s*:\s*\"(?:terminate|stop|hibernate)\".{0,40}\"time\".{0,80}\b(?:spot|interrupt)"
    r"|\bSpot (?:Instance )?interruption (?:notice|warning|payload)\b|\bspot (?:instance )?termination notice\b"
    r"|\bEC2 Spot Instance Interruption Warning\b|\bcompute\.instances\.preempted\b"
    r"|\binstance (?:was|has been|is being) preempted\b|\binstance/preempted\b.{0,20}\bTRUE\b"
    r"|\bpreemption notice\b|\"EventType\"\s*:\s*\"Preempt\"|\bEventType=Preempt\b",
    "the cloud reclaimed the spot/preemptible VM (an interruption or preemption notice, then SIGTERM): the job did not "
    "fail; resume it from its last checkpoint on another VM, or run on-demand capacity")

# A batch scheduler killing the job at its wall-time limit: Slurm's "*** JOB N ON host CANCELLED AT ... DUE TO TIME
# LIMIT ***", PBS/Torque's "job killed: walltime N exceeded limit N", Moab's "job exceeded wallclock limit", LSF's
# TERM_RUNLIMIT, SGE's h_rt ("exceeded hard wallclock time")
TIME_LIMIT = _sig(
    "time_limit", "error",
    r"\bCANCELLED AT \S+ DUE TO TIME LIMIT\b|\bJOB \d+ CANCELLED AT .{0,40}DUE TO TIME LIMIT"
    r"|\bjob killed: walltime \d+ exceeded limit \d+|\bjob exceeded (?:its )?wall ?clock (?:time )?limit\b"
    r"|\bTERM_RUNLIMIT\b|\bexceeded (?:the )?(?:hard|soft) wallclock time\b|\bh_rt limit (?:exceeded|reached)\b"
    r"|\bexceeded (?:its |the )?h_rt\b",
    "the batch scheduler killed the job at its wall-time limit (Slurm --time, PBS walltime, LSF -W, SGE h_rt): ask "
    "for more time, or checkpoint and resubmit to continue from where it stopped")

# A mount's EIO that names its backend's refusal in the same line (gcsfuse's "input/output error ... googleapi:
# Error 401: Invalid Credentials", an rclone/s3fs read failing on "ExpiredToken"/"AccessDenied"): the refusal is the
# cause, the EIO its report to the reader. Tried before io_error.
_REFUSAL = (r"(?:\bError 40[13]\b|Invalid Credentials|\bExpiredToken\b|token has expired|\bAccessDenied\b|\bForbidden\b"
            r"|\bUnauthorized\b|\bInvalidAccessKeyId\b)")
MOUNT_REFUSED = _sig(
    "credentials_refused", "error",
    r"input/output error.{0,240}" + _REFUSAL + r"|\berrno 5\b.{0,240}" + _REFUSAL + r"|\bEIO\b.{0,240}" + _REFUSAL,
    "the mounted object store's backend refused the credentials (an expired or invalid token): the readers see "
    "EIO; refresh the mount's credentials (IRSA/workload identity token, key) and remount")

# blind round 15's rows, spliced into SIGNATURES after round 14's
ROUND15 = (PREEMPTED, TIME_LIMIT, MOUNT_REFUSED)
# fmt: on
