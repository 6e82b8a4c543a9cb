"""Known failure signatures: one data table, matched line by line.

A new signature is one more row in ``SIGNATURES``. Rows are tried in order and the first match wins,
so specific rows (``cuda_oom``) come before general ones (``cuda_error``). ``download_stalled`` is not
here: it is found by logic (a progress bar that stopped moving), see ``console.agent.diagnose``.

Also here: reading the tail of a log efficiently, with ``\\r`` progress collapsed to its last state and
line numbers that match the file's newline-numbered lines, and recognising progress lines.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Pattern, Tuple


class Signature(NamedTuple):
    code: str
    severity: str  # "info" | "warning" | "error" | "critical"
    pattern: Pattern[str]
    explanation: str


def _sig(code: str, severity: str, pattern: str, explanation: str, flags: int = re.IGNORECASE) -> Signature:
    return Signature(code, severity, re.compile(pattern, flags), explanation)


# fmt: off
SIGNATURES: List[Signature] = [
    _sig("gpu_lost", "critical",
         r"fallen off the bus|GPU is lost|NVRM: Xid \([^)]*\):\s*(?:48|74|79|92|94|95|119|120)\b"
         r"|Unable to determine the device handle for GPU",
         "a GPU dropped off the PCIe bus or hit a fatal Xid; the host needs a reset/reboot"),
    _sig("gpu_xid", "error", r"NVRM: Xid\b",
         "the NVIDIA driver reported an Xid error (often an application fault on the GPU)"),
    _sig("host_oom_kill", "critical",
         r"Out of memory: Kill(?:ed)? process|invoked oom-killer|\boom-kill\b|oom_reaper: reaped"
         r"|Memory cgroup out of memory",
         "the kernel OOM killer killed a process: the host ran out of RAM"),
    _sig("cuda_oom", "error",
         r"CUDA out of memory|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation|CUDA error: out of memory"
         r"|out of memory on (?:device|GPU)|OutOfMemoryError: CUDA",
         "GPU memory ran out (batch/partition too large for this GPU, or another process holds memory)"),
    _sig("cuda_error", "error",
         r"CUDA error|CUDA_ERROR_\w+|cudaError\w+|CUBLAS_STATUS_\w+|illegal memory access was encountered"
         r"|NCCL (?:error|WARN)|CUDA driver version is insufficient",
         "a CUDA call failed"),
    _sig("disk_full", "critical", r"No space left on device|\bENOSPC\b|Disk quota exceeded",
         "a filesystem is full"),
    _sig("download_failed", "error",
         r"curl: \(\d+\)|Failed to download|download failed|requested URL returned error: \d+"
         r"|HTTP(?:/[\d.]+)? (?:401|403|404|5\d\d)\b|\b(?:403 Forbidden|404 Not Found)\b"
         r"|Could not resolve host|wget: unable to resolve",
         "a download failed (network, DNS, or the URL is wrong/forbidden)"),
    _sig("transport_error", "error",
         r"broken pipe|transport error|connection reset|status: Unavailable|message length too large"
         r"|message too large|h2 protocol error|GOAWAY|error trying to connect|Connection refused"
         r"|EPIPE\b|ECONNRESET\b",
         "an RPC/HTTP2 connection broke (daemon died or closed the stream, or a request was too large)"),
    _sig("panic", "error", r"thread '[^']*' panicked at|^panic: |^fatal error: |goroutine \d+ \[running\]",
         "a Rust or Go program panicked", re.IGNORECASE | re.MULTILINE),
    _sig("segfault", "error", r"Segmentation fault|segfault at|\bSIGSEGV\b|core dumped|Bus error",
         "a process crashed with a memory fault"),
    _sig("python_traceback", "error", r"Traceback \(most recent call last\):", "a Python exception"),
    _sig("killed", "error",
         r"^\s*Killed\s*$|line \d+:\s+\d+ Killed\b|signal: 9\b|\bSIGKILL\b|killed by signal 9"
         r"|exit code 137\b",
         "a process was killed with SIGKILL (often the OOM killer or a timeout)"),
    _sig("command_not_found", "error", r"command not found|No module named ",
         "a command or module is not installed"),
    _sig("address_in_use", "error", r"Address already in use|EADDRINUSE",
         "a port is still held (an old daemon is probably still running)"),
    _sig("timeout", "warning", r"deadline exceeded|DeadlineExceeded|timed out|\btimeout expired\b",
         "an operation timed out"),
    _sig("missing_input", "warning", r"\bnot found\b|No such file or directory|does not exist",
         "an input file or path was missing"),
]
# fmt: on

SIGNATURE_CODES = [s.code for s in SIGNATURES]


def match_line(text: str) -> Optional[Signature]:
    """The first signature that matches one line of text, or None."""
    for sig in SIGNATURES:
        if sig.pattern.search(text):
            return sig
    return None


def scan_lines(lines: Iterable[str], path: str, first_line: int = 1) -> List[Dict[str, Any]]:
    """Every line that matches a signature: ``{code, severity, explanation, path, line, text}``."""
    hits: List[Dict[str, Any]] = []
    for offset, text in enumerate(lines):
        sig = match_line(text)
        if sig is not None:
            hits.append(
                {
                    "code": sig.code,
                    "severity": sig.severity,
                    "explanation": sig.explanation,
                    "path": path,
                    "line": first_line + offset,
                    "text": text,
                }
            )
    return hits


# -- progress bars ---------------------------------------------------------------------------------
_PCT = r"(\d{1,3}(?:\.\d+)?)\s?%"
# curl -# ("####   48.3%"), tqdm ("45%|####  | 463/1024"), wget ("45%[=====>   ] 463M"), curl's meter
# (" 45 1024M   45  463M    0     0  10.2M      0  0:01:40  0:00:45  0:00:55 10.3M").
_PROGRESS_RES = [
    re.compile(r"^[\s#=>.\-*]*?[#=>*]*\s*" + _PCT + r"\s*$"),
    re.compile(r"^\s*(?:[^|]{0,80}:\s*)?" + _PCT + r"\s*\|"),
    re.compile(r"^.{0,80}?\s" + _PCT + r"\s*\[[=> ]*\]"),
    re.compile(r"^\s*(\d{1,3})\s+\d+(?:\.\d+)?[kKMGT]?\s+\d{1,3}\s+\d+(?:\.\d+)?[kKMGT]?\s+\d{1,3}\s+"),
]


def progress_percent(text: str) -> Optional[float]:
    """The percent shown by a progress-bar line (curl -#, curl meter, tqdm, wget), else None."""
    if len(text) > 400:
        return None
    for rx in _PROGRESS_RES:
        m = rx.search(text)
        if m:
            try:
                value = float(m.group(1))
            except ValueError:
                continue
            if 0.0 <= value <= 100.0:
                return value
    return None


# -- reading a log's tail --------------------------------------------------------------------------
def collapse_cr(line: str) -> str:
    """A line as a terminal shows it: ``\\r`` progress collapsed to its last non-empty state."""
    if "\r" not in line:
        return line
    parts = [p for p in line.split("\r") if p.strip()]
    return parts[-1] if parts else ""


# path -> ((st_dev, st_ino), byte offset, newlines before it, the 64 bytes before it): repeated
# diagnoses of a growing log only count the new part. A file truncated or replaced (other inode,
# offset past the tail, other bytes before the offset) is counted again.
_NEWLINE_CACHE: Dict[str, Tuple[Tuple[int, int], int, int, bytes]] = {}


def read_tail(
    path: str, max_lines: int = 2000, max_bytes: int = 8 * 1024 * 1024, max_line_chars: int = 4096
) -> Tuple[List[str], int]:
    """The last ``max_lines`` lines of a file and the 1-based number of the first one.

    Lines are numbered as the file's ``\\n``-separated lines (a final line without ``\\n`` counts);
    ``\\r`` progress within a line is collapsed to its last state. Only the end of the file is
    decoded; the line number comes from counting newlines before it in 1 MiB chunks.
    """
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        block = 64 * 1024
        pos = size
        data = b""
        while pos > 0 and data.count(b"\n") <= max_lines and len(data) < max_bytes:
            step = min(block, pos)
            pos -= step
            fh.seek(pos)
            data = fh.read(step) + data
        start = pos
        if pos > 0:
            # drop the partial first line so numbering starts at a real line
            cut = data.find(b"\n")
            if cut < 0:
                return [], 1
            start = pos + cut + 1
            data = data[cut + 1 :]
        raw = data.split(b"\n")
        if raw and raw[-1] == b"":
            raw.pop()
        if len(raw) > max_lines:
            skipped = raw[: len(raw) - max_lines]
            start += sum(len(r) + 1 for r in skipped)
            raw = raw[len(raw) - max_lines :]
        # count lines before ``start`` (from where the last count of this same file stopped)
        st = os.fstat(fh.fileno())
        key = (st.st_dev, st.st_ino)
        cached = _NEWLINE_CACHE.get(path)
        newlines, counted = 0, 0
        if cached is not None and cached[0] == key and cached[1] <= start:
            fh.seek(max(0, cached[1] - 64))
            if fh.read(min(64, cached[1])) == cached[3]:  # same bytes there: not truncated and rewritten
                counted, newlines = cached[1], cached[2]
        fh.seek(counted)
        remaining = start - counted
        while remaining > 0:
            chunk = fh.read(min(1024 * 1024, remaining))
            if not chunk:
                break
            newlines += chunk.count(b"\n")
            remaining -= len(chunk)
        if len(_NEWLINE_CACHE) > 256:
            _NEWLINE_CACHE.clear()
        end = start - remaining
        fh.seek(max(0, end - 64))
        _NEWLINE_CACHE[path] = (key, end, newlines, fh.read(min(64, end)))
    lines = [collapse_cr(r.decode("utf-8", "replace"))[:max_line_chars] for r in raw]
    return lines, newlines + 1
