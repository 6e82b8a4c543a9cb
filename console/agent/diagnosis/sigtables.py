"""The signature table's companion tables (data only): known-harmless lines, the causes a panic's message
names, conditions and the lines that clear them, the credentials rules of a 401, the built-in completion lines.
``signatures`` re-exports them."""

from __future__ import annotations

import re
from typing import Dict, List, Pattern, Tuple

# fmt: off
# Known-harmless lines: they look like failures but the program carries on (data only; one regex a row).
HARMLESS: List[Pattern[str]] = [re.compile(p) for p in (
    r"ggml_cuda_host_malloc: failed to allocate .* of pinned memory",  # llama.cpp falls back to pageable memory
    r"NCCL INFO",  # NCCL_DEBUG=INFO chatter (a missing optional plugin, topology probing)
    r"libnccl-net\.so|NET/Plugin ?: (?:No plugin found|Plugin load returned)",  # optional NCCL network plugin
    r"Failed to import from vllm\._C with ModuleNotFoundError",  # vLLM warns, then uses its Python fallbacks
    r"Could not load dynamic library '.*'; dlerror",  # TensorFlow's optional-library probing
    r"\[c10d\] The client socket has failed to connect to .*\(errno: 111",  # torch retries until the store is up
    r"huggingface/tokenizers: The current process just got forked",
    r"TypedStorage is deprecated|FutureWarning|DeprecationWarning",
    # pip's resolver notice about packages already installed: the install goes on ("Successfully installed")
    r"pip's dependency resolver does not currently take into account",
    r"from LD_PRELOAD cannot be preloaded .*: ignored",  # the loader skips a missing preload and goes on
    # a container's read-only system paths (ldconfig's cache, sysctl, /proc/sys), not a failing disk
    r"(?:\bldconfig\S*:|\bsysctl:|[\s'\"]/(?:etc|usr|proc|sys)/).{0,160}Read-only file system"
    r"|Read-only file system:? ['\"]?/(?:etc|usr|proc|sys)/",
    # a missing file or setting the program answers on the same line with its default (Paddle's launcher: "Not
    # found distinct arguments ... Default use collective mode"), and a trainer's probe for a checkpoint to resume
    # from (verl/Megatron's "Checkpoint tracker file does not exist", "no checkpoint found, training from scratch"):
    # no error was raised
    r"^(?!.*(?:Error|Exception)\b).*\b(?:[Nn]ot found|does not exist|No such file or directory)\b.{0,160}"
    r"\b(?:[Dd]efault use|[Uu]sing (?:the )?defaults?|[Uu]se (?:the )?defaults?|[Ff]all(?:s|ing)? back to"
    r"|(?:train\w*|start\w*) from scratch|will be created)\b",
    r"^(?!.*(?:Error|Exception)\b).*\b(?:[Cc]heckpoint (?:tracker|metadata) file does not exist"
    r"|[Nn]o (?:existing |previous |valid )?checkpoints? (?:found|exists?)\b.{0,80}\b(?:from scratch"
    r"|start\w* (?:fresh|new)|training from|initializ\w+ from))",
)]

# What a panic's message names (the panic line itself, or the lines after a `panicked at file:line:col:` header
# up to the `note:`/backtrace): the cause it only reports. Rust prints io errors as `Os { code: N, kind, message }`.
PANIC_CAUSES: List[Tuple[str, Pattern[str]]] = [(code, re.compile(p, re.IGNORECASE)) for code, p in (
    ("cuda_oom",
     r"CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation|(?<!runtime: )(?<!heap )\bout of (?:device |GPU )?memory\b"),
    ("disk_full", r"\bcode: 28\b|No space left|StorageFull|\bENOSPC\b"),
    ("resource_limit", r"\bcode: 24\b|Too many open files|\bEMFILE\b"),
    ("permission_denied", r"\bcode: 13\b|Permission denied|PermissionDenied|\bEACCES\b"),
    ("io_error", r"Os \{ code: (?:5|30)\b|Input/output error|Read-only file system|ReadOnlyFilesystem"),
    # the request to a daemon broke mid-way (hyper's IncompleteMessage: the server side closed or died)
    ("transport_error", r"IncompleteMessage|connection closed before message completed|reset by peer"
     r"|ConnectionReset\b|broken pipe|BrokenPipe\b"),
)]
PANIC_PAYLOAD_END = re.compile(r"^note: run with|^stack backtrace:|^\s*$|^goroutine \d+ \[")

# Conditions rather than events: they hold until the log (or the kernel log) says they ended, and progress
# after them does not end them. code -> [(the line that sets one, its group naming which; the line that clears
# that one, ``{0}`` standing for the name)]; an empty set pattern: any hit of the code, cleared by the line.
_CLEARED_ROWS: Dict[str, List[Tuple[str, str]]] = {
    "throttled": [
        (r"\b(HW Slowdown|HW Thermal Slowdown|HW Power Brake Slowdown|SW Thermal Slowdown)\s*:\s*Active\b",
         r"\b{0}\s*:\s*Not Active\b"),
        (r"<(clocks_(?:event|throttle)_reasons?_(?:hw_slowdown|hw_thermal_slowdown|hw_power_brake_slowdown"
         r"|sw_thermal_slowdown))>Active<", r"<{0}>Not Active<"),
        (r"\b(CPU\d+: (?:Core|Package)) temperature above threshold", r"\b{0} temperature/speed normal"),
    ],
    "diverged": [(r"", r"loss[\"']?\s*[:=]\s*[\"']?[-+]?\d")],  # a finite loss again
    "storage_stall": [(r"nfs: server (\S+) not responding", r"nfs: server {0} OK")],
}
CLEARED: Dict[str, List[Tuple[Pattern[str], str]]] = {
    code: [(re.compile(a, re.IGNORECASE), b) for a, b in rows] for code, rows in _CLEARED_ROWS.items()}
# a report of several devices names each in a header line (``nvidia-smi -q``: ``GPU 00000000:01:00.0``, its XML
# ``<gpu id="...">``): a device's condition is cleared only by a line under the same device's header
SECTION = re.compile(r"^\s*GPU [0-9A-F]{4,8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-9A-F]\s*$|<gpu id=\"[^\"]+\">",
                     re.IGNORECASE)

# A 401 (or "Unauthorized") on a download is the credentials refused, unless the hub says the repo is gated or
# missing (a 401 for a gated or unknown repo stays a failed download).
UNAUTHORIZED = re.compile(r"\b401 (?:Client Error|Unauthorized)|(?:error|ERROR|HTTP\S*|status|code)[: ]+401\b"
                          r"|Unauthorized for url", re.IGNORECASE)
NOT_CREDENTIALS = re.compile(r"gated repo|GatedRepoError|Repository Not Found|RepositoryNotFoundError"
                             r"|authorized list|RevisionNotFoundError|EntryNotFoundError", re.IGNORECASE)

# A run that ended well says so (the ``finished`` verdict, when nothing of the benchmark runs any more).
COMPLETED: List[Pattern[str]] = [re.compile(p, re.IGNORECASE) for p in (
    r"\bbenchmark (?:finished|completed?|done)\b",
    r"\btraining (?:completed|finished)\b",
    r"\b(?:finished|completed) successfully\b",
    r"\bexited with (?:status|code) 0\b",
    r"^build: [0-9a-f]{6,40} \(\d+\)\s*$",  # llama-bench's last line
    r"^\*+ (?:train|eval) metrics \*+$",
    r"^=+ (?:benchmark )?summary =+$",
)]
# fmt: on
