"""The causal verdict: which finding explains the others.

1. A hardware fault present now (a lost GPU, ECC errors, a GPU computing wrong results, no or mismatched
   driver) explains everything.
2. Else the earliest root cause: among current ``cause`` findings of error severity (warnings such as a
   diverged loss when there are none), the earliest in time; events within ``SIMULTANEOUS`` seconds of it
   count as happening together and the more specific one wins (the permission error over the panic that
   unwrapped it, the host OOM kill over the ``Killed`` that reports it, a kernel I/O error over the read-only
   file system it caused, a failed wheel build over the 404 inside it). A wrapper (``ChildFailedError``, a
   shell's exit status, a traceback's header) is a symptom and never outranks what it wraps.
3. Else a finished run is ``finished``; a young entrypoint still setting up is ``starting``.
4. Else the most telling symptom (``hung``, a broken pipe, a wrapper, the benchmark not running, throttled
   clocks, idle GPUs).
Every other current finding is then listed as followed by / caused by the verdict, except a state no
failure causes (``throttled``: the clocks of a hot or power-braked GPU).

The configured logs (``[benchmark] log``, ``logs``) outrank files found in the watch dirs: a stray file's "done"
never makes a failure the benchmark's own log reports after its own last words (or with none) history
(``named_failure_stands``).
"""

from __future__ import annotations

import re
from typing import Any, Collection, List, Optional, Tuple

from . import codes
from .events import SEVERITY_LEVEL
from .records import Item

SIMULTANEOUS = 30.0  # seconds
# what a young entrypoint that is still fetching inputs looks like; not trouble until the grace is over
STARTUP_SYMPTOMS = frozenset(("benchmark_not_running", "waiting_on_child", "gpu_idle", "missing_input"))
FINE = frozenset(("healthy", "starting", "finished"))
# states of the host that no failure causes: never listed as caused by the verdict
UNCAUSED = frozenset(("throttled", "pcie_degraded"))


# what a mounted object store or network filesystem reports as EIO to its readers: its backend's own failure, named
# in the mount's log (mountpoint-s3's "Forbidden: The provided token has expired", gcsfuse's "googleapi: Error 401",
# rclone's vfs "ExpiredToken", s3fs's curl errors)
BACKEND_CAUSES = frozenset(("credentials_refused", "clock_skew", "network_error", "download_failed"))
MOUNT_WORDS_RE = re.compile(r"\bfuse\b|\bmount|errno 5\b|\bEIO\b|input/output error|\bvfs\b|\b(?:s3fs|gcsfuse|goofys"
                            r"|blobfuse2?|rclone|juicefs|alluxio)\b", re.IGNORECASE)


def _level(item: Item) -> int:
    return SEVERITY_LEVEL.get(item.severity, 0)


def _earliest_cause(causes: List[Item]) -> Item:
    timed = [i.time for i in causes if i.time is not None]
    start = min(timed) if timed else None
    window = [i for i in causes if start is None or i.time is None or i.time <= start + SIMULTANEOUS]
    return max(window, key=lambda i: (codes.rank(i.code), -(i.time or 0.0), -i.order))


def head_of(items: List[Item], named: Collection[str] = ()) -> Optional[Item]:
    """The finding that explains the others (None: nothing of warning severity or above). ``named``: the logs the
    operator configured; when a cause is reported there (or by the kernel), causes found only in other files
    (strays in a watch dir, another program's output) do not outrank it."""
    current = [i for i in items if i.role == "current" and _level(i) >= 1]
    hardware = [i for i in current if codes.tier(i.code) == "hardware"]
    if hardware:
        return max(hardware, key=lambda i: (codes.rank(i.code), _level(i), -(i.time or 0.0)))
    causes = [i for i in current if codes.tier(i.code) == "cause"]
    backend = _backend_under_eio(causes)
    if backend:  # the mount logged its backend's failure at WARN: it took the reader down, as severe as the EIO
        worst = max((i for i in causes if _program_eio(i)), key=_level).severity
        for i in backend:
            if _level(i) < SEVERITY_LEVEL.get(worst, 0):
                i.severity = worst
        causes = [i for i in causes if not _program_eio(i)]
    own = [i for i in causes if any(e.get("path") in named or e.get("path") == "dmesg" for e in i.evidence)]
    if named and any(any(e.get("path") in named for e in i.evidence) for i in own):
        causes = own + [i for i in backend if i not in own]
    errors = [i for i in causes if _level(i) >= 2]
    prompt = _last_prompt(errors)
    if prompt is not None:
        return prompt
    if errors or causes:
        return _earliest_cause(errors or causes)
    return None


def _program_eio(item: Item) -> bool:
    """An I/O error a program reports (``OSError: [Errno 5] Input/output error``), not the kernel's."""
    return item.code == "io_error" and not any(e.get("path") == "dmesg" for e in item.evidence)


def _backend_under_eio(causes: List[Item]) -> List[Item]:
    """A program's EIO on a mount whose own log names its backend's failure (a refused or expired credential, the
    network, a failed fetch) no later than the EIO: those backend causes (the EIO is their report)."""
    eio = [i for i in causes if _program_eio(i)]
    if not eio:
        return []
    latest = max((i.time for i in eio if i.time is not None), default=None)
    return [i for i in causes if i.code in BACKEND_CAUSES and _level(i) >= 1
            and any(MOUNT_WORDS_RE.search(str(e.get("text") or "")) for e in i.evidence)
            and (latest is None or i.time is None or i.time <= latest + SIMULTANEOUS)]


def _last_prompt(errors: List[Item]) -> Optional[Item]:
    """A prompt left as its log's last words (the job waits at it: ``events`` keeps only those) outranks the causes
    that led to it (a refused login asking for the password again): none came after it."""
    prompts = [i for i in errors if i.code == "waiting_input"]
    if not prompts:
        return None
    last = max(prompts, key=lambda i: i.time or 0.0)
    if last.time is None or any(i.time is not None and i.time > last.time + SIMULTANEOUS for i in errors):
        return None
    return last


def is_starting(items: List[Item], young_entry: Optional[str]) -> bool:
    """A young entrypoint with no benchmark yet is starting, unless something already failed."""
    return young_entry is not None and not any(
        _level(i) >= 2 for i in items if i.role == "current" and i.code not in STARTUP_SYMPTOMS)


def choose(items: List[Item], young_entry: Optional[str], finished: Optional[Item],
           starting_evidence: Optional[List[Any]] = None, named: Collection[str] = ()) -> Tuple[str, Item]:
    """``(verdict code, the finding behind it)``; mutates the symptoms' severity/role as the verdict decides.
    ``starting_evidence``: the line that shows what a starting run is doing (a moving meter, a build)."""
    starting = is_starting(items, young_entry)
    if starting:
        for i in items:
            if i.code in STARTUP_SYMPTOMS and i.severity != "info":
                i.severity = "info"
                if i.code == "benchmark_not_running" and young_entry:
                    i.summary = young_entry
                else:
                    i.summary += " (still setting up)"
    head = head_of(items, named)
    if head is not None:
        return head.code, head
    if finished is not None:
        for i in items:
            if i.role == "current" and i.code in STARTUP_SYMPTOMS:
                i.severity = "info"
        return "finished", finished
    if starting:
        return "starting", Item("starting", "info", young_entry or "starting", list(starting_evidence or []))
    symptoms = [i for i in items if i.role == "current" and _level(i) >= 1]
    if symptoms:
        head = max(symptoms, key=lambda i: (codes.rank(i.code), _level(i), -i.order))
        return head.code, head
    return "healthy", Item("healthy", "info", "", [])


def link_symptoms(items: List[Item], head: Item) -> List[str]:
    """Mark the current findings the verdict explains (``caused_by``); their codes, in order."""
    out: List[str] = []
    for i in items:
        if i is head or i.role != "current" or _level(i) < 1 or i.code == head.code or i.code in UNCAUSED:
            continue
        later = head.time is None or i.time is None or i.time >= head.time - SIMULTANEOUS
        if codes.tier(i.code) == "symptom" or later:
            i.caused_by = head.code
            if i.code not in out:
                out.append(i.code)
    return out


def named_failure_stands(item: Item, named: Collection[str], named_done: Optional[float]) -> bool:
    """``item`` (a current failure) is reported in a configured log and comes after the last words those logs
    wrote (``named_done``; None: they wrote none): the run did not finish, whatever a stray file says."""
    if not any(e.get("path") in named for e in item.evidence):
        return False
    return named_done is None or item.time is None or item.time > named_done + 1.0
