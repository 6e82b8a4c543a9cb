"""Fleet state: plain data fed by the links (frames, link status, diagnoses), read by the UI.

No Textual here. Everything is bounded: GPU history rings (10 minutes at 1 Hz), log rings per file,
a capped number of followed files, error and event lists. ``apply_frame`` is on the hot path
(hundreds of instances x 8 GPUs at 1 Hz) and stays a handful of dict updates and deque appends.

The UI asks ``take_dirty()`` for the names changed since it last painted, ``take_events()`` for the
"got worse" transitions it turns into notifications, and calls ``tick()`` about once a second so that
time-based states (stale, idle GPUs) are re-derived even when no frame arrives.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, Iterable, List, Optional, Set, Tuple, TypedDict, cast

from console.agent.wire.config import STARTUP_GRACE_SECONDS as STARTUP_GRACE  # the diagnosis's grace too
from console.agent.wire.frames import STATIC_GPU_FIELDS  # the fields a full gpu frame adds, as the agent writes them
from console.agent.wire.procmatch import matches_program
from console.agent.wire.protocol import (
    RESTART_MARKER,
    DiagnosisResult,
    ErrorFrame,
    Frame,
    GpuDevice,
    GpuFrame,
    GpuStateName,
    HeartbeatFrame,
    HelloFrame,
    LogFrame,
    ProbeResult,
    ProcRecord,
    ProcsFrame,
    ResultFrame,
)
from console.agent.wire.timefmt import fmt_age as format_age  # one age format for the console and the diagnosis
from console.core.status import BAD_LINK, FAILING, LINK_DERIVED, LINK_LABELS, RANK, STATUSES
from console.core.status import rank as status_rank
from console.core.text_safety import clean, clean_deep, clean_lines, clean_opt
from console.inventory import Instance

HISTORY_SECONDS = 600  # GPU util history: 10 minutes at 1 Hz
LOG_RING_LINES = 2000  # lines kept per followed file
MAX_LOG_FILES = 32  # files kept per instance (least recently active dropped)
MAX_ERRORS = 20
MAX_EVENTS = 200
MAX_PROBE_LINES = 2000
DEFAULT_HEARTBEAT = 5.0  # agent heartbeat_interval default (seconds)
STALE_FACTOR = 2.0  # heartbeats missed before STALE (5 s heartbeat: stale at 10 s)
DEFAULT_CONNECT_TIMEOUT = 15.0  # the link's (console/link/auth.py): a first attempt this old is UNREACHABLE
RENOTIFY_AFTER = 300.0  # seconds: a host that went down twice in this long, never up STABLE_FOR since, is
FLAP_NOTICES = 2  # flapping: its next drops in that window are not news (a reconnect storm, one notice a retry)
STABLE_FOR = 10.0  # seconds connected that make a later drop news again (the link's STABLE_AFTER)
GAP_MARKER = "[... lines not received while disconnected ...]"
IDLE_UTIL = 5  # % at or under which a GPU counts as idle
IDLE_WINDOW = 30  # samples (seconds) of idleness before an instance is "gpu_idle"
BUSY_UTIL = 10  # % from which a GPU counts as busy in the fleet totals
FLAP_WINDOW = 600.0  # seconds: reconnects counted in the pane's flap counter

BAD_SEVERITIES = frozenset(("error", "critical"))
BENCH_DOWN_CODES = frozenset(("benchmark_down", "benchmark_not_running", "not_running", "bench_down"))


class ProbeView(TypedDict):
    """A probe's output as the instance screen shows it."""

    title: str
    lines: List[str]
    at: float


class GpuState:
    """One device: last sample, static fields (kept from ``full`` frames), util/mem history rings."""

    __slots__ = ("error", "index", "lost", "mem_hist", "missing", "power_hist", "sample", "static", "temp_hist",
                 "util_hist")

    def __init__(self, index: int) -> None:
        self.index = index
        self.static: GpuDevice = {"index": index}  # the static fields of the last ``full`` frame
        self.sample: GpuDevice = {"index": index}  # the last record, ``procs`` filled in when left out
        self.util_hist: Deque[int] = deque(maxlen=HISTORY_SECONDS)
        self.mem_hist: Deque[int] = deque(maxlen=HISTORY_SECONDS)
        self.temp_hist: Deque[int] = deque(maxlen=HISTORY_SECONDS)  # °C, -1 unknown (the GPU tab's charts)
        self.power_hist: Deque[int] = deque(maxlen=HISTORY_SECONDS)  # whole watts, -1 unknown
        self.lost = False
        self.missing = False  # was reported before, absent from the latest frame
        self.error: Optional[str] = None

    def get(self, key: str, default: Any = None) -> Any:
        """A field of the last sample, else of the static fields, else ``default``."""
        value = cast(Dict[str, Any], self.sample).get(key)
        if value is None:
            value = cast(Dict[str, Any], self.static).get(key, default)
        return default if value is None else value

    @property
    def util(self) -> Optional[int]:
        return self.sample.get("util")

    @property
    def mem_fraction(self) -> Optional[float]:
        used, total = self.sample.get("mem_used"), self.static.get("mem_total")
        if used is None or not total:
            return None
        return used / total


class LogRing:
    """The tail of one followed file: ``(line_number, text)`` pairs, capped; ``(0, text)`` marks an event.

    A frame's lines replace those the ring holds from its ``first_line`` on (docs/architecture.md).
    """

    __slots__ = ("event", "lines", "missing", "path", "updated")

    def __init__(self, path: str, maxlen: int = LOG_RING_LINES) -> None:
        self.path = path
        self.lines: Deque[Tuple[int, str]] = deque(maxlen=maxlen)
        self.event: Optional[str] = None
        self.missing = False
        self.updated = 0.0

    def add(self, first_line: Optional[int], lines: List[str], event: Optional[str], now: float,
            backlog: bool = False) -> None:
        """``backlog``: the lines a (re)connected agent resends; a gap before them was lost while disconnected."""
        if backlog and lines and first_line is not None and not event:
            last = self.last
            if last is not None and first_line > last[0] + 1:
                self.lines.append((0, GAP_MARKER))
        if event:
            self.event = event
            self.missing = event == "missing"
            if event in ("rotated", "truncated", "created"):
                self.lines.append((0, "--- file %s ---" % event))
        if lines:
            self.missing = False
            if first_line is None:
                first_line = (self.lines[-1][0] + 1) if self.lines else 1
            ring = self.lines
            while ring and ring[-1][0] >= first_line:  # lines sent again replace theirs: a progress line that
                ring.pop()  # moved on (``partial``), or a backlog after a reconnect (a marker, 0, stops it)
            for i, text in enumerate(lines):
                self.lines.append((first_line + i, text))
        self.updated = now

    @property
    def last(self) -> Optional[Tuple[int, str]]:
        for item in reversed(self.lines):
            if item[0]:
                return item
        return None


class InstanceState:
    """Everything known about one instance."""

    def __init__(self, instance: Instance) -> None:
        self.instance = instance
        self.name: str = instance.name
        self.host: str = getattr(instance, "host", "") or ""
        self.port: Optional[int] = getattr(instance, "port", None)
        self.user: Optional[str] = getattr(instance, "user", None)
        self.tags: List[str] = list(getattr(instance, "tags", None) or [])
        self.transport: Optional[str] = getattr(instance, "transport", None)
        self.link_status = "connecting"
        self.link_detail = ""
        self.link_since: Optional[float] = None  # console clock of the last link status change
        self.notified: Dict[str, Deque[float]] = {}  # status -> when its last "got worse" events were raised
        self.ever_connected = False
        self.quiet_connect = False  # the next "connected" is no reconnect (SSH opened on demand: on_demand.py)
        self.connected_at: Optional[float] = None
        self.hello: HelloFrame = {"type": "hello", "ts": 0.0}
        self.agentless = bool(getattr(instance, "agentless", False))
        extra = getattr(instance, "agent_extra", None) or {}
        hb = extra.get("heartbeat_interval") if isinstance(extra, dict) else None
        self.heartbeat_interval = float(hb) if isinstance(hb, (int, float)) and hb > 0 else DEFAULT_HEARTBEAT
        self.last_frame: Optional[float] = None  # receipt time (console clock) of the last frame
        self.last_heartbeat: Optional[HeartbeatFrame] = None
        self.gpu_state: Optional[GpuStateName] = None  # ok | no_gpu | error | None (no gpu frame yet)
        self.gpu_simulated = False
        self.gpu_driver: Optional[str] = None
        self.gpu_message: Optional[str] = None
        self.gpus: Dict[int, GpuState] = {}
        # receipt time (console clock) of each gpu frame with devices: every GPU's rings get one entry per such
        # frame (-1 while absent), so they line up with this from the newest end; a freeze is a gap in it
        self.gpu_ts: Deque[float] = deque(maxlen=HISTORY_SECONDS)
        self.procs: Dict[int, ProcRecord] = {}
        self.procs_version = 0
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
        self._idle_count = 0
        self.bench_patterns = _bench_patterns(instance)
        self.bench_running: Optional[bool] = None  # None: unknown (no patterns or no process list yet)
        self.entry_patterns = _bench_patterns(instance, "entrypoint")
        self.entry_started: Optional[float] = None  # start (host clock) of the youngest live entrypoint
        self.bench_seen_under: Optional[float] = None  # entry_started when a benchmark process was last seen
        self.clock_offset = 0.0
        # A verdict is a snapshot: a restart, benchmark processes younger than it, or its log starting over
        # (the agent's restart marker, a rotation) make it history (kept for the Diagnosis tab, not counted).
        self.restarted_at: Optional[float] = None  # console clock of the last restart sent from here
        self.bench_started: Optional[float] = None  # start (host clock) of the oldest live benchmark process
        self.bench_log: Optional[str] = getattr(getattr(instance, "benchmark", None), "log", None) or None
        self.log_moved_on = False  # the benchmark's log started over since the verdict
        self.reconnects: Deque[float] = deque(maxlen=64)  # console clock of each reconnect (flap counter)
        # Detail on demand (console/core/detail.py, op ``detail``): an instance off screen gets GPU frames on change or
        # every 5 s and only its benchmark's and GPU's processes; the pane says how old its figures are.
        self.gpu_at: Optional[float] = None  # console clock of the last gpu frame
        self.gpu_host_ts: Optional[float] = None  # its ``ts`` (the host's clock)
        self.procs_subset = False  # the process table holds only the benchmark's and GPU's processes
        self.detail_level = "full"  # as the agent's last heartbeat said

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

    def busiest_process(self) -> Optional[ProcRecord]:
        best = None
        best_key = None
        agent_pid = self.hello.get("pid")
        for rec in self.procs.values():
            if rec.get("pid") == agent_pid:  # the agent watching the host is not what the operator looks for
                continue
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
        if self.bench_started is None:
            return True
        # The benchmark's start against the moment the agent read the facts (both on the host's clock): a verdict
        # arrives a while after that, and a benchmark started meanwhile (a restart by hand while an automatic
        # diagnosis ran) is a run it never saw. Its arrival time (ours) only without the agent's.
        facts_at = self.diagnosis.get("time")
        if not isinstance(facts_at, (int, float)) or isinstance(facts_at, bool):
            facts_at = at + self.clock_offset
        return self.bench_started <= facts_at

    def restart_note(self, now: float) -> str:
        """``restarted 40s ago`` from a restart until the next verdict ("" otherwise)."""
        at = self.restarted_at
        if at is None or (self.diagnosis_at is not None and self.diagnosis_at > at):
            return ""
        return "restarted %s ago" % format_age(max(0.0, now - at))

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

    def diagnosis_finished(self) -> bool:
        """The last diagnosis found the run completed (a healthy end, not a benchmark that went down)."""
        diag = self.diagnosis
        return diag is not None and (diag.get("verdict") or {}).get("code") == "finished"


def _derive(inst: InstanceState, now: float) -> Tuple[str, str]:
    """The badge (status, detail) for an instance at time ``now``."""
    link = inst.link_status
    if link in BAD_LINK:
        label = LINK_LABELS.get(link, link)
        detail = label + (": " + inst.link_detail if inst.link_detail else "")
        return LINK_DERIVED.get(link, "unreachable"), detail
    if link != "connected":
        timeout = getattr(inst.instance, "connect_timeout", None) or DEFAULT_CONNECT_TIMEOUT
        since = inst.link_since
        if not inst.ever_connected and since is not None and now - since > timeout:  # never answered
            return "unreachable", "no answer within %s (still trying)" % format_age(timeout)
        return "connecting", inst.link_detail or ("reconnecting" if inst.ever_connected else "")
    if inst.diagnosis_failed():
        return "failed", inst.verdict_summary()
    if inst.is_stale(now):
        since = inst.last_frame if inst.last_frame is not None else inst.connected_at or now
        return "stale", "no data for %s" % format_age(now - since)
    shortfall = inst.gpu_shortfall()  # an instance rented with N GPUs that has fewer working is trouble
    if shortfall:
        return "failed", shortfall
    if inst.diagnosis_bench_down():
        return "benchmark_down", inst.verdict_summary()
    if inst.bench_running is False and inst.diagnosis_finished():
        return "ok", inst.verdict_summary()
    if inst.bench_running is False:
        up = inst.entrypoint_age(now)
        if up is not None and up < STARTUP_GRACE:
            return "ok", "benchmark starting: entrypoint up %s" % format_age(up)
        return "benchmark_down", "no benchmark process running"
    if inst.gpus and inst._idle_count >= IDLE_WINDOW:
        return "gpu_idle", "GPUs idle for %s+" % format_age(inst._idle_count)
    return "ok", ""


def _flapping(inst: InstanceState, status: str, now: float) -> bool:
    """The same trouble raised not long ago, and the host never stayed up since: not news (a reconnect storm)."""
    times = inst.notified.get(status)
    if times is None or len(times) < FLAP_NOTICES or now - times[0] > RENOTIFY_AFTER:
        return False
    last = times[-1]
    up = inst.connected_at
    return up is None or up < last or (inst.link_since or now) - up < STABLE_FOR


def _bench_patterns(instance: Any, field: str = "match") -> List[re.Pattern[str]]:
    bench = getattr(instance, "benchmark", None)
    out = []
    for pattern in getattr(bench, field, None) or ():
        with contextlib.suppress(re.error):
            out.append(re.compile(pattern))
    return out


class FleetState:
    """All instances; fed by links and the controller, read by the UI."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.instances: Dict[str, InstanceState] = {}
        self._dirty: Set[str] = set()
        self._events: Deque[Tuple[str, str, str, str]] = deque(maxlen=MAX_EVENTS)
        self.order_version = 0  # bumped when statuses (hence the ordering) change
        self.frames = 0
        self._counted: Dict[str, Tuple[str, int, int, int, int]] = {}  # totals(): status, gpus, busy, lost, sim
        self._recount: Set[str] = set()  # totals(): instances changed since it last counted
        self._sums: Dict[str, int] = dict.fromkeys(("gpus", "busy", "lost", "simulated", *STATUSES), 0)

    # -- feeding ----------------------------------------------------------------------------------
    def add_instance(self, instance: Instance) -> InstanceState:
        inst = self.instances.get(instance.name)
        if inst is None:
            inst = InstanceState(instance)
            self.instances[inst.name] = inst
            self.order_version += 1
        else:
            inst.instance = instance
            inst.tags = list(getattr(instance, "tags", None) or [])
        self._touch(inst, self.clock())
        return inst

    def get(self, name: str) -> Optional[InstanceState]:
        return self.instances.get(name)

    def __contains__(self, name: str) -> bool:
        return name in self.instances

    def __len__(self) -> int:
        return len(self.instances)

    def _touch(self, inst: InstanceState, now: float) -> None:
        inst.version += 1
        inst.updated_at = now
        self._dirty.add(inst.name)
        self._recount.add(inst.name)

    def _rederive(self, inst: InstanceState, now: float) -> None:
        status, detail = _derive(inst, now)
        old = inst.status
        if status != old:
            inst.status = status
            self.order_version += 1
            if status != "connecting":
                # Compare with the last settled status, so a host that keeps failing to reconnect
                # (unreachable -> connecting -> unreachable ...) reports once, not on every retry.
                before = inst.settled_status
                first_bad = before is None and status in ("unreachable", "needs_action", "failed")
                if (first_bad or (before is not None and RANK[status] < RANK.get(before, 99))) \
                        and not _flapping(inst, status, now):
                    self._events.append((inst.name, before or old, status, detail))
                    inst.notified.setdefault(status, deque(maxlen=FLAP_NOTICES)).append(now)
                inst.settled_status, inst.settled_detail = status, detail
        if status != old or detail != inst.status_detail:
            inst.status_detail = detail
            self._touch(inst, now)

    def apply_frame(self, name: str, frame: Frame, now: Optional[float] = None) -> None:
        inst = self.instances.get(name)
        if inst is None:
            return
        if now is None:
            now = self.clock()
        self.frames += 1
        inst.last_frame = now
        kind = frame.get("type")
        handler = _HANDLERS.get(kind) if isinstance(kind, str) else None
        if handler is not None:
            handler(inst, frame, now)
        if kind != "heartbeat" or inst.status == "stale":
            self._touch(inst, now)
        self._rederive(inst, now)

    def set_link_status(self, name: str, status: str, detail: str = "") -> None:
        inst = self.instances.get(name)
        if inst is None:
            return
        now = self.clock()
        if status == "connected" and inst.ever_connected and inst.link_status != "connected" \
                and not inst.quiet_connect:
            inst.reconnects.append(now)
        if status == "connected":
            inst.quiet_connect = False
        if status != inst.link_status or inst.link_since is None:
            inst.link_since = now
        inst.link_status = status
        inst.link_detail = clean(detail)  # error texts from the host (or its sshd) are host text
        if status == "connected":
            inst.ever_connected = True
            inst.connected_at = now
            if "agentless" in (detail or ""):
                inst.agentless = True
        self._touch(inst, now)
        self._rederive(inst, now)

    def expect_connect(self, name: str) -> None:
        """The next "connected" of ``name`` is a session opened on demand, not a reconnect (the flap counter)."""
        inst = self.instances.get(name)
        if inst is not None:
            inst.quiet_connect = True

    def set_diagnosis(self, name: str, data: Optional[DiagnosisResult]) -> None:
        inst = self.instances.get(name)
        if inst is None:
            return
        now = self.clock()
        inst.diagnosis = clean_deep(data) if data is not None else None  # summaries and evidence: host text
        inst.diagnosis_at = now if data is not None else None
        inst.log_moved_on = False
        self._touch(inst, now)
        self._rederive(inst, now)

    def set_probe_result(self, name: str, probe: str, data: ProbeResult) -> None:
        inst = self.instances.get(name)
        if inst is None:
            return
        lines = clean_lines((data.get("lines") or [])[-MAX_PROBE_LINES:])
        title = clean(data.get("title") or probe)
        inst.probes[probe] = {"title": title, "lines": lines, "at": self.clock()}
        self._touch(inst, self.clock())

    def note_restart(self, name: str) -> None:
        """A restart was sent: the verdict before it no longer counts; the pane says "restarted Ns ago"."""
        inst = self.instances.get(name)
        if inst is None:
            return
        now = self.clock()
        inst.restarted_at = now
        self._touch(inst, now)
        self._rederive(inst, now)

    def tick(self, now: Optional[float] = None) -> None:
        """Re-derive time-based states; stale panes are marked dirty so their age keeps counting."""
        if now is None:
            now = self.clock()
        for inst in self.instances.values():
            self._rederive(inst, now)
            if inst.status == "stale":
                self._dirty.add(inst.name)

    # -- reading ----------------------------------------------------------------------------------
    def take_dirty(self) -> Set[str]:
        dirty, self._dirty = self._dirty, set()
        return dirty

    def is_dirty(self, name: Optional[str]) -> bool:
        """Whether ``name`` changed since the last ``take_dirty``."""
        return name in self._dirty

    def peek_dirty(self) -> Set[str]:
        return set(self._dirty)

    def mark_dirty(self, names: Iterable[str]) -> None:
        """Have ``names`` repainted at the next ``take_dirty`` (panes whose text ages by itself)."""
        self._dirty.update(names)

    def take_events(self) -> List[Tuple[str, str, str, str]]:
        """``(name, old_status, new_status, detail)`` for every change to a worse status."""
        events = list(self._events)
        self._events.clear()
        return events

    def ordered(self, query: str = "") -> List[InstanceState]:
        """Instances matching ``query`` (name, tag or host substring), trouble first then by name."""
        items: Iterable[InstanceState] = self.instances.values()
        if query:
            items = [i for i in items if matches(i, query)]
        return sorted(items, key=lambda i: (i.rank, i.name))

    def totals(self) -> Dict[str, int]:
        """Instances per status, GPUs busy / idle / lost, simulated instances, for the header (every paint).
        Running sums: a call counts again only the instances changed since the last one (``_touch``), so a
        paint of a 1000-host fleet costs what changed, not the fleet; instances a reload took out of the state
        (``fleet_watch.apply`` pops them) are found by the count of instances counted."""
        counted, sums = self._counted, self._sums
        changed, self._recount = self._recount, set()
        for name in changed:
            self._count(name, self.instances.get(name))
        if len(counted) != len(self.instances):
            for name in [n for n in counted if n not in self.instances]:
                self._count(name, None)
            for name, inst in self.instances.items():
                if name not in counted:
                    self._count(name, inst)
        out = {"instances": len(self.instances), **sums}
        out["idle"] = sums["gpus"] - sums["busy"] - sums["lost"]
        out["failing"] = sum(sums[status] for status in FAILING)
        return out

    def _count(self, name: str, inst: Optional[InstanceState]) -> None:
        """Take ``name``'s last counts out of the running sums and, while it is in the state, its new ones in
        (nothing to do when they did not change: the common case, a GPU's figures moving within busy/idle)."""
        counted, sums = self._counted, self._sums
        rec = None if inst is None else (inst.status, *_gpu_counts(inst), int(inst.simulated))
        old = counted.get(name)
        if old == rec:
            return
        if old is not None:
            sums[old[0]] -= 1
            sums["gpus"] -= old[1]
            sums["busy"] -= old[2]
            sums["lost"] -= old[3]
            sums["simulated"] -= old[4]
            del counted[name]
        if rec is not None:
            counted[name] = rec
            sums[rec[0]] += 1
            sums["gpus"] += rec[1]
            sums["busy"] += rec[2]
            sums["lost"] += rec[3]
            sums["simulated"] += rec[4]


def _gpu_counts(inst: InstanceState) -> Tuple[int, int, int]:
    """``(gpus, busy, lost)`` of one instance (a GPU missing from the last frame counts as lost)."""
    busy = lost = 0
    for gpu in inst.gpus.values():
        if gpu.lost or gpu.missing:
            lost += 1
        elif (gpu.util or 0) >= BUSY_UTIL:
            busy += 1
    return len(inst.gpus), busy, lost


def matches(inst: InstanceState, query: str) -> bool:
    """Every whitespace-separated word must match the name, a tag, the host or the status."""
    for word in query.lower().split():
        if word.startswith("tag:"):
            if not any(word[4:] in t.lower() for t in inst.tags):
                return False
            continue
        if word.startswith("status:"):
            if word[7:] not in inst.status:
                return False
            continue
        if word in inst.name.lower() or word in inst.host.lower() or any(word in t.lower() for t in inst.tags):
            continue
        return False
    return True


# -- frame handlers (hot path) --------------------------------------------------------------------------
def _on_hello(inst: InstanceState, raw: Frame, now: float) -> None:
    frame = cast(HelloFrame, clean_deep(raw))  # once a session: agent version, host, python are host text
    inst.hello = frame
    features = frame.get("features") or {}
    # Each session says again whether it is agentless: a host that got python3 since runs the agent.
    inst.agentless = (
        bool(features.get("agentless"))
        or bool(getattr(inst.instance, "agentless", False))
        or "agentless" in inst.link_detail
    )
    if features.get("simulated_gpu"):
        inst.gpu_simulated = True
    hb = frame.get("heartbeat_interval")
    if isinstance(hb, (int, float)) and hb > 0:
        inst.heartbeat_interval = float(hb)


def _on_heartbeat(inst: InstanceState, raw: Frame, now: float) -> None:
    inst.last_heartbeat = cast(HeartbeatFrame, raw)
    inst.detail_level = "summary" if raw.get("level") == "summary" else "full"


_INTS = tuple(range(2048))  # shared int objects: a 10-minute ring of watts costs a pointer a sample, not an int


def _small_int(value: Any) -> int:
    """A GPU reading (°C, W) as a whole number for the history rings; -1 when unknown."""
    if not isinstance(value, (int, float)) or not -1e9 < value < 1e9:  # (NaN and inf fail the range too)
        return -1
    n = int(value + 0.5)
    return _INTS[n] if 0 <= n < 2048 else n


def _on_gpu(inst: InstanceState, raw: Frame, now: float) -> None:
    frame = cast(GpuFrame, raw)
    inst.gpu_state = frame.get("state")
    inst.gpu_simulated = bool(frame.get("simulated")) or inst.gpu_simulated
    inst.gpu_driver = clean_opt(frame.get("driver")) or inst.gpu_driver
    inst.gpu_message = clean_opt(frame.get("message"))
    devices: Iterable[GpuDevice] = frame.get("devices") or ()
    full = frame.get("full")
    gpus = inst.gpus
    seen = set()
    all_idle = bool(devices)
    for dev in devices:
        index = dev.get("index")
        if index is None:
            continue
        seen.add(index)
        err = dev.get("error")
        if full or (err is not None and not (type(err) is str and err.isprintable())):
            dev = _safe_device(dev)  # static fields come in full frames only; a slim one may carry an error
        gpu = gpus.get(index)
        if gpu is None:
            gpu = gpus[index] = GpuState(index)
        if full:
            static, given = cast(Dict[str, Any], gpu.static), cast(Dict[str, Any], dev)
            for key in STATIC_GPU_FIELDS:
                if key in given:
                    static[key] = given[key]
        if "procs" not in dev:  # the agent leaves out a device's procs while they are unchanged
            dev = cast(GpuDevice, dict(dev, procs=gpu.sample.get("procs") or []))
        gpu.sample = dev
        gpu.lost = bool(dev.get("lost"))
        gpu.missing = False
        gpu.error = dev.get("error")
        util = dev.get("util")
        gpu.util_hist.append(util if util is not None else -1)
        mem_used, total = dev.get("mem_used"), gpu.static.get("mem_total")
        gpu.mem_hist.append(int(100 * mem_used / total) if mem_used is not None and total else -1)
        temp, power = dev.get("temp"), dev.get("power")
        gpu.temp_hist.append(_small_int(temp))
        gpu.power_hist.append(_small_int(power))
        if gpu.lost or (util is not None and util > IDLE_UTIL):
            all_idle = False
    if len(seen) != len(gpus):
        for index, gpu in gpus.items():
            if index not in seen:
                gpu.missing = True
                for ring in (gpu.util_hist, gpu.mem_hist, gpu.temp_hist, gpu.power_hist):
                    ring.append(-1)  # absent from this frame: the rings stay in step with ``gpu_ts``
    if devices:
        inst.gpu_ts.append(now)
    if devices:
        # seconds of idleness (IDLE_WINDOW): a frame counts for the time since the previous one on the host's
        # clock (sampled on a steady clock there, whatever the console's delays), 1 to 10 s (an instance at
        # detail "summary" sends one every 5 s while nothing moves)
        ts, last = frame.get("ts"), inst.gpu_host_ts
        step = 1 if not ts or not last else min(10, max(1, int(ts - last + 0.5)))
        inst._idle_count = inst._idle_count + step if all_idle else 0
    inst.gpu_at = now
    inst.gpu_host_ts = frame.get("ts")


def _on_procs(inst: InstanceState, raw: Frame, now: float) -> None:
    frame = cast(ProcsFrame, raw)
    procs = inst.procs
    if frame.get("full"):
        procs.clear()
        for rec in frame.get("procs") or ():
            procs[rec["pid"]] = _safe_proc(rec)
    else:
        for rec in frame.get("upsert") or ():
            procs[rec["pid"]] = _safe_proc(rec)
        for pid in frame.get("gone") or ():
            procs.pop(pid, None)
    inst.procs_version += 1
    if frame.get("full"):
        inst.procs_subset = bool(frame.get("subset"))
    if inst.bench_patterns:  # the agent's one matching rule: the program, never its arguments
        bench = [float(rec.get("start") or 0.0) for rec in procs.values() if matches_program(rec, inst.bench_patterns)]
        inst.bench_running = bool(bench)
        inst.bench_started = min(bench) if bench else None  # a verdict older than this run stops counting
        ts = frame.get("ts")
        if isinstance(ts, (int, float)) and ts:
            inst.clock_offset = float(ts) - now  # the host's clock minus ours: process start times are theirs
    if inst.entry_patterns:
        starts = [float(rec.get("start") or 0.0) for rec in procs.values() if matches_program(rec, inst.entry_patterns)]
        inst.entry_started = max(starts) if starts else None
        if inst.bench_running:
            inst.bench_seen_under = inst.entry_started  # this entrypoint got as far as the benchmark
        ts = frame.get("ts")
        if isinstance(ts, (int, float)):
            inst.clock_offset = float(ts) - now  # the host's clock minus ours: process start times are theirs


def _on_log(inst: InstanceState, raw: Frame, now: float) -> None:
    frame = cast(LogFrame, raw)
    path = clean_opt(frame.get("path")) or "?"  # a file name is host text too
    ring = inst.logs.get(path)
    if ring is None:
        if len(inst.logs) >= MAX_LOG_FILES:
            oldest = min(inst.logs.values(), key=lambda r: r.updated)
            del inst.logs[oldest.path]
        ring = inst.logs[path] = LogRing(path)
    lines = clean_lines(frame.get("lines"))
    event = frame.get("event")
    ring.add(frame.get("first_line"), lines, event, now, backlog=bool(frame.get("backlog")))
    if (inst.diagnosis is not None and path == inst.bench_log and not frame.get("backlog")
            and (event in ("created", "rotated", "truncated") or any(t.startswith(RESTART_MARKER) for t in lines))):
        inst.log_moved_on = True  # the benchmark's log started over: the verdict is history
    if lines:
        last = ring.last
        if last is not None:
            inst.last_log = (path, last[0], last[1])
    inst.logs_version += 1


def _on_result(inst: InstanceState, raw: Frame, now: float) -> None:
    inst.results.append(cast(ResultFrame, clean_deep(raw)))


def _on_error(inst: InstanceState, raw: Frame, now: float) -> None:
    frame = cast(ErrorFrame, raw)
    inst.errors.append((now, clean(frame.get("message") or "", keep_newlines=True)))


# -- host text (console/core/text_safety.py): cleaned here, where frames enter the state, so that no widget
# ever gets an escape sequence. Printable text (the common case) costs one ``isprintable`` per field.
_PROC_TEXT = ("name", "cmdline", "wchan", "state")
_GPU_TEXT = ("name", "uuid", "error")


def _safe_proc(rec: ProcRecord) -> ProcRecord:
    """``rec``, or a copy with its text fields cleaned when one holds a control character."""
    given = cast(Dict[str, Any], rec)
    for key in _PROC_TEXT:
        value = given.get(key)
        if value is not None and not (type(value) is str and value.isprintable()):
            return cast(ProcRecord, {k: (clean_opt(v) if k in _PROC_TEXT else v) for k, v in given.items()})
    return rec


def _safe_device(dev: GpuDevice) -> GpuDevice:
    """``dev``, or a copy with its name, uuid and error cleaned when one holds a control character."""
    given = cast(Dict[str, Any], dev)
    for key in _GPU_TEXT:
        value = given.get(key)
        if value is not None and not (type(value) is str and value.isprintable()):
            return cast(GpuDevice, {k: (clean_opt(v) if k in _GPU_TEXT else v) for k, v in given.items()})
    return dev


_HANDLERS: Dict[str, Callable[[InstanceState, Frame, float], None]] = {
    "hello": _on_hello,
    "heartbeat": _on_heartbeat,
    "gpu": _on_gpu,
    "procs": _on_procs,
    "log": _on_log,
    "result": _on_result,
    "error": _on_error,
}
