"""One instance's record (``InstanceState``): what its agent and link said, and the views derived from it.

Plain data (no Textual). The frame handlers (``console/core/frame_handlers.py``) fill it, the status rules
(``console/core/status_rules.py``) read it to pick its badge, the UI, metrics and alerts read it.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections import deque
from typing import Any, Deque, Dict, List, Optional, Tuple, TypedDict

from console.agent.wire.procmatch import matches_program
from console.agent.wire.protocol import (
    DiagnosisResult,
    GpuStateName,
    HeartbeatFrame,
    HelloFrame,
    ProcRecord,
    ResultFrame,
)
from console.agent.wire.timefmt import fmt_age as format_age  # one age format for the console and the diagnosis
from console.core.rings import HISTORY_SECONDS, GpuState, LogRing
from console.core.spend import SpendMeter
from console.core.status import rank as status_rank
from console.inventory import Instance

MAX_ERRORS = 20
DEFAULT_HEARTBEAT = 5.0  # agent heartbeat_interval default (seconds)
STALE_FACTOR = 2.0  # heartbeats missed before STALE (5 s heartbeat: stale at 10 s)
FLAP_WINDOW = 600.0  # seconds: reconnects counted in the pane's flap counter
SETTLE_SECONDS = 60.0  # seconds after a first connect or a reload in which status changes are settling, not flaps

BAD_SEVERITIES = frozenset(("error", "critical"))
BENCH_DOWN_CODES = frozenset(("benchmark_down", "benchmark_not_running", "not_running", "bench_down"))
NO_GPU_CODES = frozenset(("no_gpu_driver", "no_gpu"))  # verdicts a later frame with working GPUs disproves


class ProbeView(TypedDict):
    """A probe's output as the instance screen shows it."""

    title: str
    lines: List[str]
    at: float


class InstanceState:
    """Everything known about one instance."""

    def __init__(self, instance: Instance) -> None:
        self.link_status = "connecting"
        self.link_detail = ""
        self.link_since: Optional[float] = None  # console clock of the last link status change
        self.notified: Dict[str, Deque[float]] = {}  # status -> when its last "got worse" events were raised
        self.ever_connected = False
        self.quiet_connect = False  # the next "connected" is no reconnect (SSH opened on demand: on_demand.py)
        self.connected_at: Optional[float] = None
        self.hello: HelloFrame = {"type": "hello", "ts": 0.0}
        self.last_frame: Optional[float] = None  # receipt time (console clock) of the last frame
        self.last_heartbeat: Optional[HeartbeatFrame] = None
        self.gpu_state: Optional[GpuStateName] = None  # ok | no_gpu | error | None (no gpu frame yet)
        self.gpu_simulated = False
        self.gpu_driver: Optional[str] = None
        self.gpu_message: Optional[str] = None
        self.gpus: Dict[int, GpuState] = {}
        self.xid_version = 0  # bumped by each new Xid event (frame_handlers._on_xid)
        # receipt time (console clock) of each gpu frame with devices: every GPU's rings get one entry per such
        # frame (-1 while absent), so they line up with this from the newest end; a freeze is a gap in it
        self.gpu_ts: Deque[float] = deque(maxlen=HISTORY_SECONDS)
        self.procs: Dict[int, ProcRecord] = {}
        self.procs_version = 0
        self._shown: Dict[int, ProcRecord] = {}
        self._shown_key: tuple[int, Any] = (-1, None)
        self.logs: Dict[str, LogRing] = {}
        self.logs_version = 0
        self.last_log: Optional[Tuple[str, int, str]] = None  # (path, line_no, text)
        self.errors: Deque[Tuple[float, str]] = deque(maxlen=MAX_ERRORS)
        self.results: Deque[ResultFrame] = deque(maxlen=MAX_ERRORS)
        self.diagnosis: Optional[DiagnosisResult] = None
        self.diagnosis_at: Optional[float] = None
        self.probes: Dict[str, ProbeView] = {}
        self.status = "connecting"
        self.settled_status: Optional[str] = None  # the last status other than "connecting", and its detail
        self.settled_detail = ""
        self.status_detail = ""
        self.version = 0  # bumped on every change (UI caches key on it)
        self.updated_at = 0.0  # console clock of the last change
        self.derived_at: Optional[float] = None  # console clock of the last status derivation (FleetState.tick)
        self.idle_seconds = 0  # seconds every GPU has been idle, on the host's clock (frame_handlers._on_gpu)
        self.bench_patterns: List[re.Pattern[str]] = []
        self.bench_running: Optional[bool] = None  # None: unknown (no patterns or no process list yet)
        self.entry_patterns: List[re.Pattern[str]] = []
        self.entry_started: Optional[float] = None  # start (host clock) of the youngest live entrypoint
        self.bench_seen_under: Optional[float] = None  # entry_started when a benchmark process was last seen
        self.clock_offset = 0.0
        # A verdict is a snapshot: a restart, benchmark processes younger than it, or its log starting over
        # (the agent's restart marker, a rotation) make it history (kept for the Diagnosis tab, not counted).
        self.restarted_at: Optional[float] = None  # console clock of the last restart sent from here
        self.bench_started: Optional[float] = None  # start (host clock) of the oldest live benchmark process
        self.bench_log: Optional[str] = None
        self.log_moved_on = False  # the benchmark's log started over since the verdict
        self.reconnects: Deque[float] = deque(maxlen=64)  # console clock of each reconnect (flap counter)
        # Start-up (CONNECTING -> OK -> BENCH DOWN -> FAILED as the facts arrive) and a reload (its link stopped
        # and started again) settle for SETTLE_SECONDS: those changes are not flapping (issue 35).
        self.settle_until: Optional[float] = None
        # Detail on demand (console/core/detail.py, op ``detail``): an instance off screen gets GPU frames on change or
        # every 5 s and only its benchmark's and GPU's processes; the pane says how old its figures are.
        self.gpu_at: Optional[float] = None  # console clock of the last gpu frame
        self.gpu_host_ts: Optional[float] = None  # its ``ts`` (the host's clock)
        self.procs_subset = False  # the process table holds only the benchmark's and GPU's processes
        self.detail_level = "full"  # as the agent's last heartbeat said
        self.meter = SpendMeter(time.time())  # time per spend mode (FleetState starts it on its own clock)
        self.currency = "$"  # the fleet's ([defaults] currency), for the pane's money
        self.stop_due: Optional[float] = None  # console clock of an announced automatic stop (core/autostop.py)
        self.adopt(instance)

    def adopt(self, instance: Instance) -> None:
        """Take the instance's record from the fleet file (at start, and again at each reload): everything
        derived from it follows, so that a reload applies all it reports (issue 35: a ``[benchmark]`` added
        live used to keep the old, empty patterns, and a dead benchmark never showed)."""
        self.instance = instance
        self.name = instance.name
        self.host = getattr(instance, "host", "") or ""
        self.port = getattr(instance, "port", None)
        self.user = getattr(instance, "user", None)
        self.tags = list(getattr(instance, "tags", None) or [])
        self.transport = getattr(instance, "transport", None)
        self.agentless = bool(getattr(instance, "agentless", False))
        extra = getattr(instance, "agent_extra", None) or {}
        hb = extra.get("heartbeat_interval") if isinstance(extra, dict) else None
        self.heartbeat_interval = float(hb) if isinstance(hb, (int, float)) and hb > 0 else DEFAULT_HEARTBEAT
        self.bench_log = getattr(getattr(instance, "benchmark", None), "log", None) or None
        bench, entry = _bench_patterns(instance), _bench_patterns(instance, "entrypoint")
        changed = _sources(bench) != _sources(self.bench_patterns) or _sources(entry) != _sources(self.entry_patterns)
        self.bench_patterns, self.entry_patterns = bench, entry
        if changed and self.procs_version:  # judged again on the process table in hand, not at the next change
            self.match_benchmark()

    def match_benchmark(self) -> None:
        """Which of the processes are the benchmark and its entrypoint (the agent's one rule: the program's
        name, never its arguments)."""
        procs = self.procs.values()
        if self.bench_patterns:
            bench = [float(rec.get("start") or 0.0) for rec in procs if matches_program(rec, self.bench_patterns)]
            self.bench_running = bool(bench)
            self.bench_started = min(bench) if bench else None  # a verdict older than this run stops counting
        else:
            self.bench_running, self.bench_started = None, None
        if self.entry_patterns:
            starts = [float(rec.get("start") or 0.0) for rec in procs if matches_program(rec, self.entry_patterns)]
            self.entry_started = max(starts) if starts else None
            if self.bench_running:
                self.bench_seen_under = self.entry_started  # this entrypoint got as far as the benchmark
        else:
            self.entry_started = None

    # -- derived views --------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return status_rank(self.status)

    @property
    def simulated(self) -> bool:
        return self.gpu_simulated or bool(self.hello.get("features", {}).get("simulated_gpu"))

    @property
    def lost_gpus(self) -> List[int]:
        return [g.index for g in self.gpus.values() if g.lost or g.missing]

    def gpu_shortfall(self) -> str:
        """``gpu_missing: ...`` when the instance should have ``gpus = N`` (fleet.toml or the vast.ai import) and
        its last gpu frame shows fewer working, with NVML's own words; "" otherwise (or before any gpu frame)."""
        expected = getattr(self.instance, "gpus", None)
        if not expected or self.gpu_state is None:
            return ""
        working = [g for g in self.gpus.values() if not (g.lost or g.missing)] if self.gpu_state == "ok" else []
        if len(working) >= expected:
            return ""
        why = self.gpu_message or "; ".join(
            "GPU %d: %s" % (g.index, g.error or "absent") for g in sorted(self.gpus.values(), key=lambda g: g.index)
            if g.lost or g.missing
        )
        found = ", found %d" % len(working) if self.gpu_state == "ok" else ""
        return "gpu_missing: expected %d GPU%s%s, NVML: %s" % (
            expected, "" if expected == 1 else "s", found, why or self.gpu_state)

    def age(self, now: Optional[float] = None) -> Optional[float]:
        """Seconds since the last frame (None when none arrived yet)."""
        if self.last_frame is None:
            return None
        return max(0.0, (time.time() if now is None else now) - self.last_frame)

    @property
    def stale_after(self) -> float:
        return STALE_FACTOR * max(1.0, self.heartbeat_interval)

    def is_stale(self, now: float) -> bool:
        if self.link_status != "connected":
            return False
        since = self.last_frame if self.last_frame is not None else self.connected_at
        return since is not None and now - since > self.stale_after

    def flags(self) -> List[str]:
        """Short notes shown next to the badge: no GPU, agentless, lost GPU, simulated GPUs."""
        out = []
        if self.agentless:
            out.append("agentless")
        if self.gpu_state == "no_gpu":
            out.append("no GPU")
        elif self.gpu_state == "error":
            out.append("GPU error")
        lost = self.lost_gpus
        if lost:
            out.append("lost GPU %s" % ",".join(str(i) for i in lost))
        if self.simulated:
            out.append("simulated GPUs")
        return out

    def entrypoint_age(self, now: float) -> Optional[float]:
        """Seconds since the youngest live entrypoint started, while it has not yet got as far as starting a
        benchmark process (None: no entrypoint, or its benchmark already ran)."""
        if self.entry_started is None or self.entry_started <= 0 or self.bench_seen_under == self.entry_started:
            return None
        return max(0.0, now + self.clock_offset - self.entry_started)

    def shown_procs(self) -> Dict[int, ProcRecord]:
        """The host's processes less the console's own: the agent, what it runs (a probe, a worker) and the
        shell chain that started it from the SSH server (not what the operator looks for). Cached per table."""
        key = (self.procs_version, self.hello.get("pid"))
        if self._shown_key != key:
            own = own_pids(self.procs, self.hello.get("pid"))
            self._shown = {pid: rec for pid, rec in self.procs.items() if pid not in own} if own else self.procs
            self._shown_key = key
        return self._shown

    def busiest_process(self) -> Optional[ProcRecord]:
        best = None
        best_key = None
        for rec in self.shown_procs().values():  # the agent watching the host is not what the operator looks for
            key = (rec.get("gpu_mem") or 0, rec.get("cpu") or 0.0)
            if best_key is None or key > best_key:
                best, best_key = rec, key
        return best

    def diagnosis_counts(self) -> bool:
        """Whether the verdict still describes this run (see ``restarted_at``)."""
        at = self.diagnosis_at
        if not self.diagnosis or at is None or self.log_moved_on:
            return False
        if self.restarted_at is not None and self.restarted_at >= at:
            return False
        if self.gpus_seen_since(at) and (self.diagnosis.get("verdict") or {}).get("code") in NO_GPU_CODES:
            return False  # "no NVIDIA driver" from before the GPUs came (issue 35: a stale text after a fix)
        if self.bench_started is None:
            return True
        # The benchmark's start against the moment the agent read the facts (both on the host's clock): a verdict
        # arrives a while after that, and a benchmark started meanwhile (a restart by hand while an automatic
        # diagnosis ran) is a run it never saw. Its arrival time (ours) only without the agent's.
        facts_at = self.diagnosis.get("time")
        if not isinstance(facts_at, (int, float)) or isinstance(facts_at, bool):
            facts_at = at + self.clock_offset
        return self.bench_started <= facts_at

    def gpus_seen_since(self, at: float) -> bool:
        """A gpu frame after ``at`` (console clock) showed working GPUs."""
        return (self.gpu_state == "ok" and self.gpu_at is not None and self.gpu_at > at
                and any(not (g.lost or g.missing) for g in self.gpus.values()))

    def restart_note(self, now: float) -> str:
        """``restarted 40s ago`` from a restart until the next verdict ("" otherwise)."""
        at = self.restarted_at
        if at is None or (self.diagnosis_at is not None and self.diagnosis_at > at):
            return ""
        return "restarted %s ago" % format_age(max(0.0, now - at))

    def settling(self, now: float) -> bool:
        """Within SETTLE_SECONDS of a first connect or a reload: a status change is the state settling."""
        return self.settle_until is not None and now <= self.settle_until

    def flaps(self, now: float) -> int:
        """Reconnects within the last ``FLAP_WINDOW`` seconds."""
        return sum(1 for t in self.reconnects if now - t <= FLAP_WINDOW)

    def diagnosis_failed(self) -> bool:
        diag = self.diagnosis
        if not diag or not self.diagnosis_counts():
            return False
        verdict = diag.get("verdict") or {}
        if verdict.get("severity") in BAD_SEVERITIES:
            return True
        return any(f.get("severity") in BAD_SEVERITIES for f in diag.get("findings") or ())

    def diagnosis_bench_down(self) -> bool:
        diag = self.diagnosis
        if not diag or not self.diagnosis_counts():
            return False
        codes = {(diag.get("verdict") or {}).get("code")}
        codes.update(f.get("code") for f in diag.get("findings") or () if f.get("severity") not in (None, "info"))
        return bool(codes & BENCH_DOWN_CODES)

    def verdict_summary(self) -> str:
        """The verdict in one short line (its ``brief`` when the agent gives one: "download stalled at 37.2 % for
        6m"), for the pane's second line."""
        if not self.diagnosis:
            return ""
        verdict = self.diagnosis.get("verdict") or {}
        return str(verdict.get("brief") or verdict.get("summary") or verdict.get("code") or "")

    def verdict_age(self, now: float) -> Optional[float]:
        """Seconds since the verdict arrived (None without one): shown wherever the verdict is (issue 35)."""
        return None if self.diagnosis is None or self.diagnosis_at is None else max(0.0, now - self.diagnosis_at)

    def shows_verdict(self) -> bool:
        """The badge's reason is the verdict (a FAILED or BENCH DOWN that the last diagnosis decided)."""
        return bool(self.status_detail) and self.diagnosis_counts() and self.status_detail == self.verdict_summary()

    def diagnosis_finished(self) -> bool:
        """The last diagnosis found the run completed (a healthy end, not a benchmark that went down)."""
        diag = self.diagnosis
        return diag is not None and (diag.get("verdict") or {}).get("code") == "finished"


def _bench_patterns(instance: Any, field: str = "match") -> List[re.Pattern[str]]:
    """The instance's benchmark ``match`` (or ``entrypoint``) patterns, compiled; invalid ones left out."""
    bench = getattr(instance, "benchmark", None)
    out = []
    for pattern in getattr(bench, field, None) or ():
        with contextlib.suppress(re.error):
            out.append(re.compile(pattern))
    return out


def _sources(patterns: List[re.Pattern[str]]) -> List[str]:
    return [p.pattern for p in patterns]


def own_pids(procs: Dict[int, ProcRecord], agent_pid: Any) -> set[int]:
    """The agent's pid, its descendants, and its ancestors up to (not including) the SSH server or pid 1."""
    if not isinstance(agent_pid, int) or agent_pid not in procs:
        return set()
    own = {agent_pid}
    ppid = procs[agent_pid].get("ppid")
    while isinstance(ppid, int) and ppid > 1 and ppid in procs and ppid not in own:
        if str(procs[ppid].get("name") or "").startswith("sshd"):
            break
        own.add(ppid)
        ppid = procs[ppid].get("ppid")
    children: Dict[int, list[int]] = {}
    for pid, rec in procs.items():
        parent = rec.get("ppid")
        if isinstance(parent, int):
            children.setdefault(parent, []).append(pid)
    todo = [agent_pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in own:
                own.add(child)
                todo.append(child)
    return own
