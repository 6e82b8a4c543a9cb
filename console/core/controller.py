"""The fleet controller: owns the links, feeds the fleet state, carries out operator actions.

UI-free: the Textual app and the command line both drive the fleet through this object.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NotRequired, TypedDict

from console.agent.wire.protocol import RestartPlan, RestartResult
from console.core import fleet_watch
from console.core.actions import ActionError, ReadOnlyError
from console.core.audit import AuditLog
from console.core.autodiag import AutoDiagnosis
from console.core.control import GpuSeries, HistoryReader, KeyOffer
from console.core.journal_recovery import recover_action, recovery_time, restart_budget
from console.core.on_demand import OnDemand
from console.core.restart_plan import PlanOutcome, fetch_plans
from console.core.state import FleetState
from console.core.text_safety import clean as clean_text
from console.core.text_safety import clean_deep
from console.inventory import BenchmarkSpec, Fleet, Instance
from console.inventory.probes import BUILTIN_PROBES, ProbeEntry
from console.link import Link, LinkError, make_link
from console.link.base import FAILURES, PERMANENT, LinkLost
from console.link.shards import ShardPool, worker_count

# Link statuses that waiting longer will not fix.
HOPELESS = PERMANENT
TOAST_TAIL_LINES = 3  # of a dead start's log, in the app's notification
SIGNAL_TIMEOUT = 30.0  # seconds a signal (TERM/KILL and its watch) may take, the journal's answer included
ON_DEMAND_CONNECT = 30.0  # seconds an action waits for an SSH session opened on demand


class RestartOutcome(TypedDict):
    """One instance's restart as the controller saw it.

    ``ok`` is false when the request failed (``error`` only) and when the agent restarted the benchmark
    but it died at once (``error`` and the agent's ``data``, whose ``started`` has ``alive: false``,
    ``returncode`` and ``log_tail``).
    """

    ok: bool
    error: NotRequired[str]
    data: NotRequired[RestartResult]


class FleetController:
    """One per console run: ``start()``, actions, ``stop()``."""

    def __init__(
        self,
        fleet: Fleet,
        read_only: bool = False,
        demo: bool = False,
        audit: AuditLog | None = None,
        state: FleetState | None = None,
        watch: bool = False,
    ) -> None:
        self.fleet = fleet
        self.watching = watch  # reload on file change and SIGHUP (the app); imports refresh either way
        self.watch = fleet_watch.FleetWatch(self)
        self.file_instances = list(fleet.instances)  # the fleet file's own; the rest come from imports
        self.imported: dict[str, list[Instance]] = {}
        self.fleet_errors: dict[str, str] = {}  # source -> one line (a failed import, a bad reload)
        self.started = False
        self._reconciled = False
        self.read_only = read_only
        self.demo = demo
        self.audit = audit or AuditLog()
        self.state = state if state is not None else FleetState()  # an empty FleetState is falsy (len 0)
        self.state.currency = fleet.currency
        for inst in fleet.instances:
            self.state.add_instance(inst)
        self.links: dict[str, Link] = {}
        self.auto_diagnose = True  # the grid shows the cause without a key press (serve: --no-auto-diagnose)
        self.autodiag = AutoDiagnosis(self)  # the one rule (console/core/autodiag.py), started with the links
        self._host_locks: dict[str, asyncio.Lock] = {}  # one diagnosis in flight per host
        self.sources: list[Any] = []  # console.sources.prometheus.PrometheusSource, started with the fleet
        self._detail_tasks: set[asyncio.Task[None]] = set()  # detail requests in flight (set_detail)
        self._in_flight: dict[str, int] = {}  # name -> actions using its link now (``busy``)
        self.shards: ShardPool | None = None  # link worker processes (console/link/shards.py), big fleets only
        self.on_demand: OnDemand | None = None  # SSH on demand for instances a Prometheus covers (on_demand.py)

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self, names: list[str] | None = None) -> None:
        """Start the links (all instances, or just ``names``); returns at once."""
        if not self._reconciled:  # actions sent by a console that died before their outcome: audited now
            self._reconciled = True
            try:
                self.audit.reconcile()
            except OSError as exc:
                self.fleet_errors["audit"] = f"cannot write the audit log {self.audit.path}: {exc.strerror or exc}"
        if self.shards is None and not self.links:
            count = worker_count(sum(1 for inst in self.fleet.instances if inst.transport != "local"))
            self.shards = ShardPool(count, tap=self.frame_tap) if count else None
        if names is None and not self.started and any(
                getattr(spec, "ssh", "") == "on_demand" for spec in getattr(self.fleet, "sources", None) or []):
            self.on_demand = OnDemand(self)  # it opens the links, once the sources said what they cover
        for inst in self.fleet.instances:
            if self.on_demand is not None and names is None:
                break
            if (names is None or inst.name in names) and inst.name not in self.links:
                link = self.new_link(inst)
                self.links[inst.name] = link
                link.start()
        if names is None and not self.started:
            self.started = True
            await self.watch.start(self.watching)
            self._start_sources()
            if self.on_demand is not None:
                self.on_demand.watch(self.sources)
        if self.auto_diagnose:
            self.autodiag.start()

    async def stop(self) -> None:
        await self.autodiag.stop()
        await self.watch.stop()
        if self.on_demand is not None:
            await self.on_demand.stop()
        await self._stop_sources()
        links, self.links = list(self.links.values()), {}
        await asyncio.gather(*(link.stop() for link in links), return_exceptions=True)
        shards, self.shards = self.shards, None
        if shards is not None:
            await shards.close()

    def new_link(self, inst: Instance) -> Link:
        """A link for ``inst`` feeding the fleet state: in a link worker when the fleet has them (SSH only)."""
        if self.shards is not None and inst.transport != "local":
            return self.shards.link(inst, self.state.apply_frame, self.state.set_link_status)
        return make_link(inst, self.state.apply_frame, self.state.set_link_status)

    # -- [[source]] rows (console/sources/): GPU figures from Prometheus; a failing one is a fleet_errors line ----
    def _start_sources(self) -> None:
        specs = getattr(self.fleet, "sources", None) or []
        if not specs:
            return
        from console.sources.prometheus import PrometheusSource  # httpx2 only for fleets that have a source

        def report(key: str, line: str | None) -> None:
            if line is None:
                self.fleet_errors.pop(key, None)
            else:
                self.fleet_errors[key] = line

        self.sources = [PrometheusSource(spec, self.state, report) for spec in specs]
        for source in self.sources:
            source.start()

    async def _stop_sources(self) -> None:
        sources, self.sources = getattr(self, "sources", []), []
        await asyncio.gather(*(s.stop() for s in sources), return_exceptions=True)

    async def wait_ready(self, name: str, timeout: float = 30.0) -> Link:
        """The instance's link once connected; ActionError with the link's reason otherwise."""
        link = self._link(name)
        deadline = time.monotonic() + timeout
        while link.status != "connected":
            if link.status in HOPELESS:
                raise ActionError(f"{name}: {link.detail}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ActionError(f"{name}: not reachable within {timeout:g} s ({link.status}: {link.detail})")
            try:
                await asyncio.wait_for(link.connected_event.wait(), min(remaining, 0.5))
            except TimeoutError:
                pass
        return link

    async def wait_settled(self, names: Iterable[str], timeout: float) -> None:
        """Until each instance is connected and has sent a sample, or its first attempt failed, or ``timeout``
        passed (one-shot output). An instance a Prometheus source covers (SSH on demand) is settled by the
        source's answer: no SSH. One loop looks at them all every 50 ms: a waiter per instance re-armed every
        0.1 s was ~10,000 timed waits a second at 1000 hosts, in the process that also runs their handshakes."""
        deadline = time.monotonic() + timeout
        covered: dict[str, str] = {}
        if self.on_demand is not None:
            while not self.on_demand.settled and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            covered = self.on_demand.covered()
        waiting = [(name, self._link(name)) for name in names if name not in covered]
        while waiting and time.monotonic() < deadline:
            waiting = [(name, link) for name, link in waiting if not self._settled(name, link)]
            if waiting:
                await asyncio.sleep(0.05)

    def _settled(self, name: str, link: Link) -> bool:
        """Connected with a sample in, or failed: what ``status`` waits for."""
        if link.status in FAILURES:
            return True
        inst = self.state.get(name)
        return link.status == "connected" and (inst is None or bool(inst.gpu_state or inst.procs))

    async def reload(self) -> str:
        """Re-read the fleet file and re-run its imports: added instances connect, removed ones disconnect,
        unchanged ones keep their links and history. Returns one line; a bad file changes nothing."""
        return await fleet_watch.reload(self)

    async def refresh_imports(self, specs: list[Any] | None = None) -> None:
        """Run the ``vastai``/``command`` imports now (all, or ``specs``) and apply what they list."""
        await fleet_watch.refresh_imports(self, specs)

    async def accept_host_key(self, name: str) -> str:
        """Trust the unknown host key ``name`` offered (the operator confirmed): write it to the known_hosts
        the instance uses (created 0600 in a 0700 directory if missing), audit it, reconnect. Returns one line.

        ActionError when there is no unknown key, when the key changed (never accepted here), or when the
        audit log or known_hosts cannot be written.
        """
        link = self._link(name)
        offer = link.host_key_offer
        if offer is None or offer.changed:
            raise ActionError(f"{name}: no unknown host key to accept ({link.status}: {link.detail})")
        record = {"fingerprint": offer.fingerprint, "known_hosts": str(offer.known_hosts), "host": offer.host,
                  "port": offer.port}
        try:
            self.audit.record(name, self._host(name), "accept_host_key", "requested", record)
        except OSError as exc:
            raise ActionError(f"{name}: not accepted: cannot write the audit log {self.audit.path}: {exc}") from None
        try:
            link.accept_host_key()
        except (LinkError, OSError) as exc:
            self.audit.record(name, self._host(name), "accept_host_key", "failed", {**record, "error": str(exc)})
            raise ActionError(f"{name}: host key not accepted: {exc}") from None
        self.audit.record(name, self._host(name), "accept_host_key", "ok", record)
        return f"{name}: accepted {offer.fingerprint} into {offer.known_hosts}; reconnecting"

    def _link(self, name: str) -> Link:
        """``name``'s link; with SSH on demand, opened now if it had none (``_connected_link`` waits for it)."""
        if self.on_demand is not None and self.on_demand.demand(name) is not None:
            return self.links[name]
        if name not in self.links:
            raise ActionError(f"{name}: no such instance in {self.fleet.source or 'the fleet'}")
        return self.links[name]

    async def _connected_link(self, name: str) -> Link:
        """``_link``, and with SSH on demand, connected: a session opened for this action is waited for."""
        link = self._link(name)
        if self.on_demand is not None and link.status in ("idle", "connecting"):
            return await self.wait_ready(name, ON_DEMAND_CONNECT)
        return link

    def busy(self, name: str) -> bool:
        """An action is using ``name``'s link: SSH on demand does not close it now."""
        lock = self._host_locks.get(self._host_key(name))
        return self._in_flight.get(name, 0) > 0 or (lock is not None and lock.locked())

    @contextlib.contextmanager
    def _using(self, name: str) -> Iterator[None]:
        """Around an action's use of a link: counted for ``busy``; its end starts the idle time."""
        self._in_flight[name] = self._in_flight.get(name, 0) + 1
        try:
            yield
        finally:
            self._in_flight[name] -= 1
            if self.on_demand is not None:
                self.on_demand.used(name)

    def keep_open(self, name: str | None) -> None:
        """The app's instance screen shows ``name`` (None: none): with SSH on demand, its session opens and stays."""
        if self.on_demand is not None:
            self.on_demand.pin(name)
            if name is not None:
                self.on_demand.demand(name)

    def instance(self, name: str) -> Instance:
        try:
            return self.fleet.get(name)
        except KeyError:
            raise ActionError(f"{name}: no such instance in {self.fleet.source or 'the fleet'}") from None

    # -- actions --------------------------------------------------------------------------------
    async def _request(self, name: str, op: str, args: dict[str, Any], timeout: float) -> Any:
        with self._using(name):
            link = await self._connected_link(name)
            try:
                answer = await link.request(op, args, timeout=timeout)
            except LinkError as exc:
                raise ActionError(str(exc)) from None
        if not answer.get("ok"):
            raise ActionError(clean_text(f"{name}: {op} failed: {answer.get('error')}"))  # host text
        return answer.get("data")

    async def diagnose(self, name: str, timeout: float = 90.0) -> dict[str, Any]:
        """Run the agent's diagnosis; the result is also kept in the fleet state (one at a time per host)."""
        async with self._host_lock(name):
            data = clean_deep(await self._request(name, "diagnose", {}, timeout))  # host text: printed as is
        self.state.set_diagnosis(name, data)
        return data

    # -- automatic diagnosis ----------------------------------------------------------------------------
    def _host_key(self, name: str) -> str:
        try:
            return self.fleet.get(name).address
        except KeyError:
            return name

    def _host_lock(self, name: str) -> asyncio.Lock:
        return self._host_locks.setdefault(self._host_key(name), asyncio.Lock())

    def can_diagnose(self, name: str) -> bool:
        """``name`` has an agent link and no diagnosis is in flight on its host (the automatic rule's check)."""
        inst = self.state.instances.get(name)
        return (inst is not None and not inst.agentless and name in self.links
                and not self._host_lock(name).locked())

    async def restart_plans(self, names: list[str]) -> dict[str, PlanOutcome]:
        """What a restart would stop on each instance, asked before it is confirmed (console/core/restart_plan.py)."""
        return await fetch_plans(self._request, names)

    async def restart(
        self, names: list[str], origin: str | None = None, reason: str | None = None, *,
        plans: dict[str, RestartPlan] | None = None,
    ) -> dict[str, RestartOutcome]:
        """Restart the benchmark on each instance (concurrently); every attempt is audited.

        The caller has confirmed; under ``--read-only`` nothing is sent and the refusal is audited. The intent
        is written (fsync) before anything is sent, and nothing is sent when it cannot be; when the link drops
        before the answer, the agent's journal says on reconnect what the action did. ``origin`` ("tui", "cli",
        "mcp") and ``reason`` go into every record. ``plans``: the plan each instance's operator confirmed (the host
        refuses to stop a process it does not list). Returns per instance a ``RestartOutcome``: a benchmark that
        died right after its start is a failure.
        """
        if self.read_only:
            for name in names:
                self._audit(name, "restart", "refused", "read-only", **_who(origin, reason))
            raise ReadOnlyError("restart")

        async def one(name: str) -> RestartOutcome:
            host = self._host(name)
            budget = restart_budget(self._stop_timeout(name))
            deadline = time.monotonic() + budget
            try:
                action_id = self.audit.intent(name, host, "restart", origin=origin, reason=reason)
            except OSError as exc:
                return {"ok": False, "error": f"not sent: cannot write the audit log {self.audit.path}: "
                                              f"{exc.strerror or exc}"}
            who = {**_who(origin, reason), "action_id": action_id}
            note = None
            try:
                args = {"plan": plans[name]} if plans and name in plans else {}
                data = await self._send_action(name, "restart", action_id, budget, args)
            except LinkLost as exc:  # sent, then the link dropped (or the answer was late): ask the journal
                try:
                    data = await recover_action(self, name, "restart", action_id, recovery_time(deadline))
                    note = f"link dropped ({exc}); outcome from the agent's journal"
                except ActionError as why:
                    self._audit(name, "restart", "unknown", str(why), **who, note=str(exc))
                    return {"ok": False, "error": f"{exc}; outcome unknown: {why}"}
            except ActionError as exc:
                self._audit(name, "restart", "failed", str(exc), **who)
                return {"ok": False, "error": str(exc)}
            started = data.get("started")
            if started is not None and not started["alive"]:
                error = f"the benchmark died at once (pid {started['pid']}, exit code {started.get('returncode')})"
                self._audit(name, "restart", "failed", data, **who, note=note)
                return {"ok": False, "error": error, "data": data}
            self._audit(name, "restart", "ok", data, **who, note=note)
            return {"ok": True, "data": data}

        results = await asyncio.gather(*(one(n) for n in names))
        return dict(zip(names, results, strict=True))

    async def _send_action(self, name: str, op: str, action_id: str, timeout: float,
                           args: dict[str, Any] | None = None) -> Any:
        """Send a journaled action; LinkLost when it may have run without its answer reaching us."""
        with self._using(name):
            link = await self._connected_link(name)
            try:
                answer = await link.request(op, {**(args or {}), "action_id": action_id}, timeout=timeout)
            except LinkLost:
                raise
            except LinkError as exc:
                raise ActionError(str(exc)) from None
        if not answer.get("ok"):
            raise ActionError(clean_text(f"{name}: {op} failed: {answer.get('error')}"))  # host text
        return answer.get("data")

    def probe_specs(self, name: str | None = None) -> list[ProbeEntry]:
        """Built-in probes, then the fleet file's custom ones."""
        custom = [
            ProbeEntry(p.name, p.key, p.title or p.name, builtin=False, command=p.command, timeout=p.timeout)
            for p in self.fleet.probes
        ]
        return [*BUILTIN_PROBES, *custom]

    async def probe(self, name: str, probe_name: str) -> dict[str, Any]:
        """Run a probe; built-ins inside the agent, custom ones on their own SSH exec channel."""
        spec = next((p for p in self.probe_specs(name) if p.name == probe_name), None)
        if spec is None:
            raise ActionError(f"no probe named {probe_name!r}")
        if spec.builtin:
            data = await self._request(name, "probe", {"name": spec.name}, timeout=60.0)
        else:
            with self._using(name):
                link = await self._connected_link(name)
                try:
                    result = await link.run_command(spec.command, timeout=spec.timeout)
                except LinkError as exc:
                    raise ActionError(str(exc)) from None
            lines = (result.stdout + result.stderr).splitlines()
            if result.timed_out:
                lines.append(f"[timed out after {spec.timeout:g} s]")
            else:
                lines.append(f"[exit status {result.exit_status}]")
            data = {"title": spec.title, "lines": lines}
            self.audit.record(name, self._host(name), f"probe:{spec.name}", "ok" if result.exit_status == 0 else
                              "failed", {"exit_status": result.exit_status, "timed_out": result.timed_out})
        self.state.set_probe_result(name, spec.name, data)
        return data

    # -- what the UI reads (console/core/control.py, FleetControl): links' retry times, host keys, the history ------
    live = True  # hosts can be asked (a log's older lines, a grep); a replay has none
    frame_tap: Callable[[str, bytes], None] | None = None  # a recording's: every worker frame as JSON
    detail_on_demand = True  # off where every stream is wanted in full (the monitoring's exporter or recording)
    history_reader: HistoryReader | None = None  # the history file's queries, where history is kept

    @property
    def fleet_source(self) -> str:
        return str(self.fleet.source or "")

    def retry_at(self, name: str) -> float | None:
        """When ``name``'s failing link tries again (``time.time()``), None when it is not waiting to."""
        when = getattr(self.links.get(name), "next_retry_at", None)
        return float(when) if isinstance(when, (int, float)) else None

    def host_key_offer(self, name: str) -> KeyOffer | None:
        """The unknown (or changed) host key ``name``'s link was offered, None when there is none."""
        return getattr(self.links.get(name), "host_key_offer", None)

    keeps_history = property(lambda self: self.history_reader is not None)  # FleetControl: a history file is kept

    def gpu_history(self, name: str, since: float) -> GpuSeries | None:
        """``name``'s GPU minute points since ``since`` from the history file; None when none is kept."""
        return None if self.history_reader is None else self.history_reader.gpu_series(name, since)

    def history_events(self, since: float) -> list[dict[str, Any]]:
        """The history file's events since ``since``, oldest first; empty when none is kept."""
        return [] if self.history_reader is None else self.history_reader.timeline(since)

    # -- detail on demand (op detail, console/core/detail.py): what the operator cannot see sends a summary ----
    def set_detail(self, name: str, level: str) -> bool:
        """Ask ``name``'s agent for detail ``level`` ("full" | "summary") without waiting for the answer; False
        when its link is not connected (an agent starts every session at "full"). A request that fails costs
        only the saving: the agent stays at the level it had."""
        link = self.links.get(name)
        if link is None or link.status != "connected":
            return False
        task = asyncio.get_running_loop().create_task(self._send_detail(link, level), name=f"detail:{name}")
        self._detail_tasks.add(task)
        task.add_done_callback(self._detail_tasks.discard)
        return True

    async def _send_detail(self, link: Link, level: str) -> None:
        with contextlib.suppress(LinkError, OSError):
            await link.request("detail", {"level": level}, timeout=15.0)

    def set_view(self, names: Iterable[str]) -> None:
        """The instances the operator sees: their frames as they come, the others' merged (link/coalesce.py)."""
        if self.shards is not None:
            self.shards.set_view(names)

    # -- log tools (agent ops read / grep, console/agent/sample/logread.py): host text cleaned here ---------------
    async def read_log(self, name: str, path: str, before_line: int | None, n: int = 200) -> dict[str, Any]:
        """Up to ``n`` lines of ``path`` before line ``before_line`` (None: the last n): ``LogReadResult``."""
        data = await self._request(name, "read", {"path": path, "before_line": before_line, "n": n}, timeout=30.0)
        return _clean_numbered(data, "lines")

    async def grep_log(self, name: str, path: str, pattern: str, regex: bool = False) -> dict[str, Any]:
        """The whole file's lines with ``pattern`` on the host (at most 200): ``LogGrepResult``."""
        data = await self._request(name, "grep", {"path": path, "pattern": pattern, "regex": regex}, timeout=30.0)
        return _clean_numbered(data, "hits")

    async def signal_process(
        self, name: str, pid: int, sig: str, origin: str | None = None, start: float | None = None,
        reason: str | None = None,
    ) -> dict[str, Any]:
        """TERM or KILL one process through the agent (op ``signal``); the caller has confirmed.

        Read-only: refused and audited (``ReadOnlyError``). Otherwise the intent is audited before sending and the
        outcome after; ``start`` (default: the start time in the fleet state's record) lets the agent refuse a
        reused pid. Returns ``{ok, data: SignalResult}`` or ``{ok: false, error}``.
        """
        action = f"signal:{sig}"
        inst = self.state.instances.get(name)
        rec = inst.procs.get(pid) if inst is not None else None
        if start is None and rec is not None:
            start = rec.get("start")
        cmdline = str(rec.get("cmdline") or "")[:200] if rec is not None else ""
        target: dict[str, Any] = {"pid": pid, "signal": sig, "start": start, "cmdline": cmdline}
        if self.read_only:
            self._audit(name, action, "refused", {**target, "why": "read-only"}, **_who(origin, reason))
            raise ReadOnlyError(f"{sig} to pid {pid}")
        if inst is not None and inst.agentless:
            self._audit(name, action, "refused", {**target, "why": "agentless"}, **_who(origin, reason))
            return {"ok": False, "error": f"{name}: signals need the agent (python3 on the host); agentless mode"}
        try:
            action_id = self.audit.intent(name, self._host(name), action, origin=origin, reason=reason)
        except OSError as exc:
            return {"ok": False, "error": f"not sent: cannot write the audit log {self.audit.path}: "
                                          f"{exc.strerror or exc}"}
        who = {**_who(origin, reason), "action_id": action_id}
        args = {"pid": pid, "signal": sig, "start": start, "action_id": action_id}
        note = None
        try:
            with self._using(name):
                link = await self._connected_link(name)
            try:
                answer = await link.request("signal", args, timeout=SIGNAL_TIMEOUT)
            except LinkLost as exc:  # sent, then the link dropped: the agent's journal says what it did
                try:
                    data = await recover_action(self, name, "signal", action_id, SIGNAL_TIMEOUT)
                    answer = {"ok": True, "data": data}
                    note = f"link dropped ({exc}); outcome from the agent's journal"
                except ActionError as why:
                    self._audit(name, action, "unknown", {**target, "error": str(why)}, **who, note=str(exc))
                    return {"ok": False, "error": f"{exc}; outcome unknown: {why}"}
            if not answer.get("ok"):
                raise ActionError(f"{name}: {sig} to pid {pid} refused: {answer.get('error')}")
        except (ActionError, LinkError) as exc:
            self._audit(name, action, "failed", {**target, "error": str(exc)}, **who)
            return {"ok": False, "error": str(exc)}
        data = answer.get("data") or {}
        self._audit(name, action, "ok", {**target, **data}, **who, note=note)
        return {"ok": True, "data": data}

    def _audit(self, name: str, action: str, outcome: str, result: Any, **meta: Any) -> None:
        """One audit record; ``meta`` (origin, reason, action_id, note) where the log's ``record`` takes it
        (a subclass written before those fields gets the record without them rather than a TypeError)."""
        params = inspect.signature(self.audit.record).parameters
        if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
            kept = {k: v for k, v in meta.items() if k in params}
            self.audit.record(name, self._host(name), action, outcome, result, **kept)
            if "action_id" in meta and "action_id" not in kept:
                self.audit.done(meta["action_id"])
            return
        self.audit.record(name, self._host(name), action, outcome, result, **meta)

    def _host(self, name: str) -> str:
        try:
            return self.fleet.get(name).address
        except KeyError:
            return "?"

    def _stop_timeout(self, name: str) -> float:
        try:
            return self.fleet.get(name).benchmark.stop_timeout
        except KeyError:
            return BenchmarkSpec().stop_timeout


def _clean_numbered(data: Any, key: str) -> dict[str, Any]:
    """A read/grep answer with its ``[[lineno, text], ...]`` rows checked and their host text cleaned."""
    if not isinstance(data, dict):
        raise ActionError("bad answer from the agent")
    rows = []
    for row in data.get(key) or []:
        if isinstance(row, (list, tuple)) and len(row) == 2 and isinstance(row[0], int):
            rows.append((row[0], clean_text(row[1])))
    return {**data, key: rows}


def _who(origin: str | None, reason: str | None) -> dict[str, Any]:
    """The origin/reason keywords for ``AuditLog.record``, only when set (subclasses may predate them)."""
    out: dict[str, Any] = {}
    if origin is not None:
        out["origin"] = origin
    if reason is not None:
        out["reason"] = reason
    return out


def describe_restart(name: str, outcome: RestartOutcome, tail: int | None = None) -> list[str]:
    """What to tell the operator: one headline, then (for a start that died) the last lines of its log.

    ``tail`` caps the log lines (None: all the agent sent).
    """
    data = outcome.get("data")
    started = data.get("started") if data is not None else None
    if outcome["ok"]:
        stopped = len(data.get("stopped") or []) if data is not None else 0
        return [f"{name}: restarted: stopped {stopped} processes, started pid {started['pid'] if started else '?'}"]
    lines = [f"{name}: restart failed: {clean_text(outcome.get('error'))}"]  # host text, like the log below
    if data is None or started is None:
        return lines
    log_tail = started.get("log_tail") or []
    if tail is not None:
        log_tail = log_tail[-tail:]
    if log_tail:
        lines.append(f"  last lines of {clean_text(data.get('log')) or 'its output'}:")
        lines.extend("    " + clean_text(line) for line in log_tail)
    elif not data.get("log"):
        lines.append("  (no benchmark log configured: its output was not kept)")
    return lines
