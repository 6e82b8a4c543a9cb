"""Monitoring around the fleet controller, and ``fleet-console serve``: the same with no UI.

- :class:`ObservedState` is the fleet state that also tells observers what it was fed (frames, link
  statuses, diagnoses, probes, ticks) and which status transitions followed (every change of settled
  status; "connecting" in between is not one). The recorder, the history and the logs observe it.
- :class:`Monitoring` owns the optional parts (exporter, history, alerts, recorder, auto-diagnosis) and
  their 1 Hz tick; :class:`MonitoredController` is a ``FleetController`` that starts and stops them with
  its links, so the TUI (``run --metrics-port/--record``) and ``serve`` share one wiring.
- :func:`run_fleet_headless` is the headless run (signals, demo or fleet file, controller, clean-up) that
  ``serve`` uses and ``fleet-console mcp`` could share; :func:`run_serve` is the command.

Logs go to stderr, one line each: ``2024-05-01T12:00:00Z INFO  transition box1: ok -> benchmark_down (...)``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from console.core.audit import AuditLog
from console.core.controller import FleetController
from console.core.state import FleetState
from console.inventory import Fleet

log = logging.getLogger("fleet_console")

TICK = 1.0  # seconds between monitoring ticks
AUTO_DIAGNOSE = frozenset(("benchmark_down", "gpu_idle"))  # statuses that get a diagnosis by themselves
AUTO_DIAGNOSE_EVERY = 300.0  # at most once per instance in this many seconds
HOOKS = ("on_frame", "on_link", "on_diagnosis", "on_probe", "on_tick", "on_transition", "on_audit", "on_instance",
         "on_removed")


class ObservedState(FleetState):
    """A ``FleetState`` that calls observers' ``on_*`` methods (each optional) after it changed.

    The frame path adds one call per frame observer and a status comparison; with no observers it is the
    plain state plus a few attribute reads.
    """

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        super().__init__(clock)
        self.hooks: dict[str, list[Callable[..., Any]]] = {h: [] for h in HOOKS}
        self.seen: dict[str, str] = {}  # the last settled status per instance
        self.known: set[str] = set()  # the instances observers were told about (a reload drops some)

    def observe(self, observer: Any) -> None:
        for hook in HOOKS:
            method = getattr(observer, hook, None)
            if method is not None:
                self.hooks[hook].append(method)

    def _check(self, name: str, now: float) -> None:
        inst = self.instances.get(name)
        if inst is None:
            return
        status = inst.status
        old = self.seen.get(name, "connecting")
        if status != old and status != "connecting":
            self.seen[name] = status
            for hook in self.hooks["on_transition"]:
                hook(name, old, status, inst.status_detail, now)

    def add_instance(self, instance: Any) -> Any:
        """An instance added (or changed) while observed, e.g. by a reload: ``on_instance(instance, now)``."""
        inst = super().add_instance(instance)
        self.known.add(instance.name)
        for hook in self.hooks["on_instance"]:
            hook(instance, self.clock())
        return inst

    def forget_removed(self, now: float) -> None:
        """Instances a reload took out of the state (``fleet_watch.apply`` pops them): ``on_removed(name, now)``."""
        for name in [n for n in self.known if n not in self.instances]:
            self.known.discard(name)
            self.seen.pop(name, None)
            for hook in self.hooks["on_removed"]:
                hook(name, now)

    def apply_frame(self, name: str, frame: Any, now: float | None = None) -> None:
        if now is None:
            now = self.clock()
        super().apply_frame(name, frame, now)
        for hook in self.hooks["on_frame"]:
            hook(name, frame, now)
        self._check(name, now)

    def set_link_status(self, name: str, status: str, detail: str = "") -> None:
        super().set_link_status(name, status, detail)
        now = self.clock()
        for hook in self.hooks["on_link"]:
            hook(name, status, detail, now)
        self._check(name, now)

    def set_diagnosis(self, name: str, data: Any) -> None:
        super().set_diagnosis(name, data)
        now = self.clock()
        for hook in self.hooks["on_diagnosis"]:
            hook(name, data, now)
        self._check(name, now)

    def set_probe_result(self, name: str, probe: str, data: Any) -> None:
        super().set_probe_result(name, probe, data)
        now = self.clock()
        for hook in self.hooks["on_probe"]:
            hook(name, probe, data, now)

    def tick(self, now: float | None = None) -> None:
        if now is None:
            now = self.clock()
        super().tick(now)
        self.forget_removed(now)
        for hook in self.hooks["on_tick"]:
            hook(now)
        for name in self.instances:
            self._check(name, now)


class ObservedAudit(AuditLog):
    """The audit log that also tells the monitoring (restart counters, history) what it recorded."""

    def __init__(self, path: Path | None = None) -> None:
        super().__init__(path)
        self.listeners: list[Callable[[dict[str, Any]], None]] = []

    def record(self, instance: str, host: str, action: str, outcome: str, result: Any = None,
               origin: str | None = None, reason: str | None = None, action_id: str | None = None,
               note: str | None = None) -> dict[str, Any]:
        entry = super().record(instance, host, action, outcome, result, origin=origin, reason=reason,
                               action_id=action_id, note=note)
        for listener in self.listeners:
            with contextlib.suppress(Exception):
                listener(entry)
        return entry


class _HistoryObserver:
    """Feeds the history store from the state's hooks (GPU minutes from the frames themselves)."""

    def __init__(self, history: Any) -> None:
        self.h = history

    def on_frame(self, name: str, frame: Any, now: float) -> None:
        if frame.get("type") == "gpu" and frame.get("devices"):
            self.h.gpu_sample(now, name, frame["devices"])

    def on_link(self, name: str, status: str, detail: str, now: float) -> None:
        if status == "connected":
            self.h.reconnect(now, name)

    def on_transition(self, name: str, old: str, new: str, detail: str, now: float) -> None:
        self.h.transition(now, name, old, new, detail)

    def on_diagnosis(self, name: str, data: Any, now: float) -> None:
        self.h.verdict(now, name, data)

    def on_probe(self, name: str, probe: str, data: Any, now: float) -> None:
        self.h.probe(now, name, probe, data)

    def on_tick(self, now: float) -> None:
        self.h.flush(now)

    def on_audit(self, entry: dict[str, Any]) -> None:
        if entry.get("action") == "restart":
            self.h.restart(time.time(), entry["instance"], entry.get("outcome") or "", entry.get("result"))


class Monitoring:
    """The optional parts around one controller: exporter, history, alerts, recorder, auto-diagnosis.

    Build it, pass ``state``/``audit`` to the controller (``MonitoredController`` does), then ``start()``
    inside the event loop and ``stop()`` at the end. Each part is off unless asked for.
    """

    def __init__(
        self,
        fleet: Fleet,
        *,
        metrics: tuple[str, int] | None = None,
        history: bool | Path = False,
        history_days: float | None = None,
        record: Path | None = None,
        alerts: bool = True,
        auto_diagnose: bool = False,
        bell: Callable[[], None] | None = None,
        log_transitions: bool = False,
        state: ObservedState | None = None,
    ) -> None:
        self.fleet = fleet
        self.state = state or ObservedState()
        self.audit = ObservedAudit()
        self.audit.listeners.append(self._on_audit)
        self.metrics_at = metrics
        self.history_path: Path | None = None
        if history:
            from console.monitor.history import default_history_path

            self.history_path = history if isinstance(history, Path) else default_history_path()
        self.history_days = history_days
        self.record_path = record
        self.want_alerts = alerts
        self.auto_diagnose = auto_diagnose
        self.bell = bell
        self.log_transitions = log_transitions
        self.counters: dict[str, dict[tuple[str, ...], float]] = {}
        self.controller: FleetController | None = None
        self.history: Any = None
        self.recorder: Any = None
        self.alerts: Any = None
        self.server: Any = None
        self._task: asyncio.Task[None] | None = None
        self._diagnosing: dict[str, float] = {}
        self._bg: set[asyncio.Task[Any]] = set()
        self.state.observe(self)

    def count(self, metric: str, labels: tuple[str, ...], by: float = 1.0) -> None:
        per = self.counters.setdefault(metric, {})
        per[labels] = per.get(labels, 0.0) + by

    # -- observer hooks (the monitoring's own) --------------------------------------------------------
    def on_transition(self, name: str, old: str, new: str, detail: str, now: float) -> None:
        inst = self.state.instances.get(name)
        self.count("fleet_status_changes", (name, inst.host if inst else "", new))
        if self.log_transitions:
            log.info("transition %s: %s -> %s%s", name, old, new, f" ({detail})" if detail else "")
        if self.auto_diagnose and self.controller is not None and inst is not None and inst.link_status == "connected":
            again = new in AUTO_DIAGNOSE or (old == "failed" and new != "failed")
            if again and now - self._diagnosing.get(name, -1e18) >= AUTO_DIAGNOSE_EVERY:
                self._diagnosing[name] = now
                self._spawn(self._diagnose(name))

    def on_tick(self, now: float) -> None:
        if self.auto_diagnose and self.controller is not None:
            # a failed verdict sticks until diagnosed again: once its benchmark runs again, look again
            for inst in self.state.instances.values():
                if (inst.status == "failed" and inst.bench_running and inst.link_status == "connected"
                        and now - self._diagnosing.get(inst.name, -1e18) >= AUTO_DIAGNOSE_EVERY):
                    self._diagnosing[inst.name] = now
                    self._spawn(self._diagnose(inst.name))

    def _on_audit(self, entry: dict[str, Any]) -> None:
        if entry.get("action") == "restart":
            self.count("fleet_restarts", (entry["instance"], entry.get("host") or "", entry.get("outcome") or ""))
        for hook in self.state.hooks["on_audit"]:
            hook(entry)

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    async def _diagnose(self, name: str) -> None:
        assert self.controller is not None
        try:
            data = await self.controller.diagnose(name, timeout=60.0)
        except Exception as exc:
            log.warning("diagnose %s: %s", name, exc)
            return
        verdict = (data or {}).get("verdict") or {}
        log.info("verdict %s: %s (%s): %s", name, verdict.get("code"), verdict.get("severity"), verdict.get("summary"))

    # -- lifecycle ------------------------------------------------------------------------------------
    async def start(self, controller: FleetController) -> None:
        self.controller = controller
        if self.history_path is not None:
            try:
                from console.monitor.history import DEFAULT_MAX_DAYS, History

                self.history = History(self.history_path, max_days=self.history_days or DEFAULT_MAX_DAYS)
                self.state.observe(_HistoryObserver(self.history))
                log.info("history in %s", self.history_path)
            except Exception as exc:  # no history is no reason to stop watching the fleet
                log.warning("history off: cannot open %s: %s", self.history_path, exc)
        if self.record_path is not None:
            from console.monitor.record import Recorder

            self.recorder = Recorder(self.record_path, self.fleet, clock=self.state.clock)
            self.state.observe(self.recorder)
            for name, inst in self.state.instances.items():  # what the state already holds
                self.recorder.on_link(name, inst.link_status, inst.link_detail, self.state.clock())
            log.info("recording every frame to %s", self.record_path)
        from console.monitor.alerts import AlertEngine, fleet_alerts

        rules = fleet_alerts(self.fleet) if self.want_alerts else []
        if rules:
            self.alerts = AlertEngine(rules, self.state, bell=self.bell, count=self.count)
            self.alerts.start()
            log.info("%d alert rules, %d webhooks", len(rules), len(self.alerts.senders))
        if self.metrics_at is not None:
            from console.monitor.metrics import FleetCollector, MetricsServer

            collector = FleetCollector(self.state, lambda: self.counters, clock=self.state.clock)
            self.server = MetricsServer(collector, *self.metrics_at)
            await self.server.start()
            log.info("metrics on %s", self.server.url)
        self._task = asyncio.get_running_loop().create_task(self._ticker(), name="monitoring")

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            try:
                self.state.tick()
                if self.alerts is not None:
                    self.alerts.evaluate()
            except Exception:
                log.exception("monitoring tick failed")

    async def stop(self) -> None:
        self.state.forget_removed(self.state.clock())  # a reload just before: the recording says so too
        for hooks in self.state.hooks.values():  # nothing is observed from here on
            hooks.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for task in list(self._bg):
            task.cancel()
        if self._bg:
            await asyncio.gather(*self._bg, return_exceptions=True)
        if self.server is not None:
            await self.server.stop()
        if self.alerts is not None:
            await self.alerts.stop()
        if self.recorder is not None:
            self.recorder.close()
            log.info("recording closed: %s (%d lines)", self.record_path, self.recorder.lines)
        if self.history is not None:
            self.history.close()


class MonitoredController(FleetController):
    """A ``FleetController`` whose state and audit log are the monitoring's, started and stopped with it."""

    def __init__(self, fleet: Fleet, monitoring: Monitoring, **kwargs: Any) -> None:
        super().__init__(fleet, audit=monitoring.audit, state=monitoring.state, **kwargs)
        if self.state is not monitoring.state:  # ``state or FleetState()`` there: an empty state is falsy (len 0)
            self.state = monitoring.state
            for inst in fleet.instances:
                self.state.add_instance(inst)
        self.monitoring = monitoring
        self._monitoring_started = False

    async def start(self, names: list[str] | None = None) -> None:
        """Monitoring first (the recorder sees the first frames); the links start even when a part of it
        could not (the port taken): the error is raised after, for the TUI to show and ``serve`` to exit on."""
        error: OSError | None = None
        if not self._monitoring_started:
            self._monitoring_started = True
            try:
                await self.monitoring.start(self)
            except OSError as exc:
                error = exc
        await super().start(names)
        if error is not None:
            raise error

    async def stop(self) -> None:
        """Monitoring first: the links closing is the console leaving, not the fleet going down (no
        "ok -> unreachable" for every instance in the history, the recording or the alerts)."""
        if self._monitoring_started:
            self._monitoring_started = False
            await self.monitoring.stop()
        await super().stop()

    async def reload(self) -> str:
        """The fleet file again (an edit, SIGHUP, R in the TUI): its one line goes to the log too, so that
        ``serve``'s journal says what a reload added and removed, or why the file was not taken."""
        line = await super().reload()
        (log.warning if "not reloaded" in line else log.info)("%s", line)
        return line


# -- the headless run ----------------------------------------------------------------------------------------


def setup_logging(level: int = logging.INFO) -> None:
    """One line per record on stderr, UTC timestamps."""
    handler = logging.StreamHandler(sys.stderr)
    fmt = logging.Formatter("%(asctime)s %(levelname)-5s %(message)s", "%Y-%m-%dT%H:%M:%SZ")
    fmt.converter = time.gmtime
    handler.setFormatter(fmt)
    root = logging.getLogger("fleet_console")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


@contextlib.asynccontextmanager
async def run_fleet_headless(
    fleet: Fleet | None,
    make_controller: Callable[[Fleet, bool], FleetController],
    demo_instances: int | None = None,
    stop_signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP),
) -> AsyncIterator[tuple[FleetController, asyncio.Event]]:
    """Start the fleet (the demo fleet when ``demo_instances``), yield ``(controller, stop_event)``.

    The signals set ``stop_event``; on the way out, further signals are ignored while every link and demo
    process is stopped (shielded: a second TERM does not cut the clean-up short).
    """
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in stop_signals:
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stopping.set)
    demo = None
    controller: FleetController | None = None
    try:
        if demo_instances is not None:
            from console.demo.fleet import start_demo

            log.info("starting %d demo instances on 127.0.0.1", demo_instances)
            demo = await start_demo(demo_instances)
            fleet = demo.fleet
        assert fleet is not None
        controller = make_controller(fleet, demo is not None)
        await controller.start()
        yield controller, stopping
    finally:
        if controller is not None:  # the fleet file's watch first: its SIGHUP handler goes, and is ignored below
            with contextlib.suppress(BaseException):
                await asyncio.shield(controller.watch.stop())
        for sig in dict.fromkeys((*stop_signals, signal.SIGHUP)):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(sig)
                signal.signal(sig, signal.SIG_IGN)
        if controller is not None:
            with contextlib.suppress(BaseException):
                await asyncio.shield(controller.stop())
        if demo is not None:
            with contextlib.suppress(BaseException):
                await asyncio.shield(demo.stop())


def parse_bind(value: str | None, port: int | None, default_port: int | None) -> tuple[str, int] | None:
    """``--metrics-bind HOST`` and ``--metrics-port N`` as (host, port); None when no port is asked for."""
    from console.monitor.metrics import DEFAULT_BIND

    if port is None:
        port = default_port
    if port is None or port < 0:
        return None
    if port > 65535:
        raise ValueError(f"--metrics-port must be from 0 to 65535, not {port}")
    return (value or DEFAULT_BIND).strip("[]"), port


def monitoring_from_args(args: argparse.Namespace, fleet: Fleet, default_port: int | None,
                         history: bool, **kwargs: Any) -> Monitoring:
    record = getattr(args, "record", None)
    return Monitoring(
        fleet,
        metrics=parse_bind(getattr(args, "metrics_bind", None), getattr(args, "metrics_port", None), default_port),
        history=history and not getattr(args, "no_history", False),
        history_days=getattr(args, "history_days", None),
        record=Path(record).expanduser() if record else None,
        **kwargs,
    )


def tui_controller(args: argparse.Namespace, fleet: Fleet, **kwargs: Any) -> MonitoredController:
    """The TUI's controller: history and the fleet file's alerts always, the exporter with ``--metrics-port``,
    the recorder with ``--record``. ValueError for a bad option."""
    monitoring = monitoring_from_args(args, fleet, None, history=True)
    return MonitoredController(fleet, monitoring, **kwargs)


def run_serve(args: argparse.Namespace) -> int:
    """``fleet-console serve``: links, state, history, alerts, exporter; until SIGTERM/SIGINT."""
    from console.commands import _load, fail
    from console.inventory import ConfigError
    from console.monitor.metrics import DEFAULT_PORT

    setup_logging()
    fleet: Fleet | None = None
    if not args.demo:
        try:
            fleet = _load(args)
        except ConfigError as exc:
            return fail(str(exc))
    elif not 1 <= args.instances <= 64:
        return fail(f"--instances must be from 1 to 64, not {args.instances}")
    try:
        parse_bind(args.metrics_bind, args.metrics_port, DEFAULT_PORT)
    except ValueError as exc:
        return fail(str(exc))
    monitorings: list[Monitoring] = []
    mcp_at: tuple[str, int] | None = None
    if args.mcp:
        from console.mcp import parse_http

        try:
            mcp_at = parse_http(args.mcp)
        except ValueError as exc:
            return fail(str(exc).replace("--http", "--mcp"))

    def make(fleet: Fleet, demo: bool) -> FleetController:
        monitoring = monitoring_from_args(args, fleet, DEFAULT_PORT, history=True,
                                          auto_diagnose=not args.no_auto_diagnose, log_transitions=True)
        monitorings.append(monitoring)
        # as the TUI: the fleet file is followed (edits, SIGHUP: systemd's ExecReload=kill -HUP $MAINPID)
        controller = MonitoredController(fleet, monitoring, read_only=args.read_only, demo=demo, watch=not demo)
        controller.auto_diagnose = False  # serve's automatic diagnosis is the monitoring's (--no-auto-diagnose)
        return controller

    # a fleet file: SIGHUP reloads it (console/core/fleet_watch.py takes the signal once the links start; until
    # then it is ignored, not fatal); the demo has no file, so there SIGHUP stops serve as TERM does
    stop_signals = (signal.SIGTERM, signal.SIGINT) + ((signal.SIGHUP,) if args.demo else ())

    async def main() -> int:
        if not args.demo:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                asyncio.get_running_loop().add_signal_handler(
                    signal.SIGHUP, lambda: log.info("SIGHUP while starting: the fleet file is read already"))
        try:
            async with run_fleet_headless(fleet, make, args.instances if args.demo else None,
                                          stop_signals=stop_signals) as (controller, stop):
                log.info("serving %d instances from %s%s", len(controller.fleet.instances),
                         controller.fleet.source, " (read-only)" if args.read_only else "")
                if mcp_at is None:
                    await stop.wait()
                else:  # the MCP server on these links and this state (no second set of connections)
                    from console.mcp import serve_http_until
                    from console.mcp.server import Options

                    options = Options(allow_restart=bool(args.allow_restart), read_only=bool(args.read_only),
                                      timeout=30.0)
                    log.info("MCP on http://%s:%d/mcp%s", mcp_at[0], mcp_at[1],
                             "" if options.allow_restart and not options.read_only else " (restart refused)")
                    await serve_http_until(controller, options, mcp_at[0], mcp_at[1], stop)
                log.info("stopping")
        except OSError as exc:  # the metrics port taken, the record file not writable
            log.error("%s", exc)
            return 2
        log.info("stopped")
        return 0

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        return 130
