"""The monitoring around one controller: exporter, history, alerts and recorder, observing the fleet state.

- :class:`Monitoring` owns the optional parts and their 1 Hz tick; each observes the state through
  ``ObservedState``'s hooks (console/core/observed.py).
- :class:`MonitoredController` is a ``FleetController`` that starts and stops them with its links, so the TUI
  (``run --metrics-port/--record``), the demo and ``serve`` share one wiring.
- :func:`monitoring_from_args` builds it from the command line's options.

The automatic diagnosis is the controller's own (console/core/autodiag.py), the same rule everywhere.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from console.core.controller import FleetController
from console.core.observed import ObservedAudit, ObservedState
from console.inventory import Fleet
from console.web.auth import HttpSecurity, security_from_args

log = logging.getLogger("fleet_console")

TICK = 1.0  # seconds between monitoring ticks


def _troubled(health: dict[str, Any]) -> bool:
    """A health record with an uncorrectable error, a remap failure, throttling or a narrow link."""
    pcie = health.get("pcie") or {}
    return bool(health.get("ecc_uncorrected") or (health.get("remapped_rows") or {}).get("failure")
                or health.get("clock_events") or (pcie.get("width") or 0) < (pcie.get("max_width") or 0))


def _brief(value: Any) -> str:
    return "-" if value is None else json.dumps(value, separators=(",", ":"), sort_keys=True)


class HistoryObserver:
    """Feeds the history store from the state's hooks (GPU minutes from the frames themselves)."""

    def __init__(self, history: Any, state: ObservedState | None = None) -> None:
        self.h = history
        self.state = state  # whether a change is start-up or a reload settling (InstanceState.settling)
        self._healths: dict[tuple[str, int], dict[str, Any]] = {}  # the last health record per (instance, GPU)
        self.watched: set[str] = set()  # instances whose watch session the history has (spend: report.py)
        for name in list(state.instances) if state is not None else ():
            self._watch(name)

    def _watch(self, name: str) -> None:
        """The session's start (and the mode it is in already), for ``fleet-console report``."""
        inst = self.state.instances.get(name) if self.state is not None else None
        if inst is None or name in self.watched:
            return
        self.watched.add(name)
        price = inst.instance.price_per_hour
        self.h.spend(inst.meter.since, name, "watch", price)
        if inst.meter.mode != "other":
            self.h.spend(inst.meter.mode_since, name, inst.meter.mode, price)

    def on_instance(self, instance: Any, now: float) -> None:
        self._watch(instance.name)

    def on_spend(self, name: str, mode: str, at: float, price: float | None) -> None:
        if name in self.watched:
            self.h.spend(at, name, mode, price)
        if mode == "end":
            self.watched.discard(name)

    def on_removed(self, name: str, now: float) -> None:
        if name in self.watched:
            self.watched.discard(name)
            self.h.spend(now, name, "end", None)

    def _settling(self, name: str, now: float) -> bool:
        inst = self.state.instances.get(name) if self.state is not None else None
        return inst is not None and inst.settling(now)

    def on_frame(self, name: str, frame: Any, now: float) -> None:
        kind = frame.get("type")
        if kind == "gpu" and frame.get("devices"):
            self.h.gpu_sample(now, name, frame["devices"])
            for dev in frame["devices"]:
                if "health" in dev:
                    self._health(name, dev["index"], dev["health"], now)
        elif kind == "xid" and not frame.get("seen_before"):  # one an earlier agent saw is in the history already
            self.h.gpu_health(now, name, frame["gpu"], "xid", "Xid %s" % frame["xid"],
                              {"xid": frame["xid"], "time": frame["time"]})

    def _health(self, name: str, index: int, health: dict[str, Any], now: float) -> None:
        """A change of a GPU's health is an event (full frames repeat it every minute: only changes count; the
        first reading counts when it holds trouble)."""
        key = (name, index)
        plain = {k: v for k, v in health.items() if k != "clock_since"}
        old = self._healths.get(key)
        self._healths[key] = plain
        if old == plain:
            return
        changed = sorted(k for k in set(plain) | set(old or {}) if plain.get(k) != (old or {}).get(k))
        if old is None and not _troubled(plain):
            return
        self.h.gpu_health(now, name, index, "health", ", ".join("%s %s" % (k, _brief(plain.get(k))) for k in changed),
                          {"health": plain, "before": old})

    def on_link(self, name: str, status: str, detail: str, now: float) -> None:
        if status == "connected" and not self._settling(name, now):
            self.h.reconnect(now, name)

    def on_transition(self, name: str, old: str, new: str, detail: str, now: float) -> None:
        self.h.transition(now, name, old, new, detail, counts=not self._settling(name, now))

    def on_diagnosis(self, name: str, data: Any, now: float) -> None:
        self.h.verdict(now, name, data)

    def on_probe(self, name: str, probe: str, data: Any, now: float) -> None:
        self.h.probe(now, name, probe, data)

    def on_tick(self, now: float) -> None:
        self.h.flush(now)

    def on_audit(self, entry: dict[str, Any]) -> None:
        if entry.get("action") in ("restart", "stop"):
            self.h.event(time.time(), entry["instance"], entry["action"], entry.get("outcome") or "", None,
                         entry.get("result"))


class Monitoring:
    """The optional parts around one controller: exporter, history, alerts, recorder.

    Build it, pass ``state``/``audit`` to the controller (``MonitoredController`` does), then ``start()``
    inside the event loop and ``stop()`` at the end. Each part is off unless asked for.
    """

    def __init__(
        self,
        fleet: Fleet,
        *,
        metrics: tuple[str, int] | None = None,
        metrics_security: HttpSecurity | None = None,
        history: bool | Path = False,
        history_days: float | None = None,
        record: Path | None = None,
        alerts: bool = True,
        bell: Callable[[], None] | None = None,
        log_transitions: bool = False,
        state: ObservedState | None = None,
    ) -> None:
        self.fleet = fleet
        self.state = state or ObservedState()
        self.audit = ObservedAudit()
        self.audit.listeners.append(self._on_audit)
        self.metrics_at = metrics
        self.metrics_security = metrics_security  # the token, TLS, Host allowlist (console/web/auth.py)
        self.history_path: Path | None = None
        if history:
            from console.monitor.history import default_history_path

            self.history_path = history if isinstance(history, Path) else default_history_path()
        self.history_days = history_days
        self.record_path = record
        self.want_alerts = alerts
        self.bell = bell
        self.log_transitions = log_transitions
        self.counters: dict[str, dict[tuple[str, ...], float]] = {}
        self.controller: FleetController | None = None
        self.history: Any = None
        self.recorder: Any = None
        self.alerts: Any = None
        self.notifier: Any = None  # the [[notify]] sinks (console/notify/dispatch.py)
        self.server: Any = None
        self.autostop: Any = None
        self._task: asyncio.Task[None] | None = None
        self.state.observe(self)

    def count(self, metric: str, labels: tuple[str, ...], by: float = 1.0) -> None:
        per = self.counters.setdefault(metric, {})
        per[labels] = per.get(labels, 0.0) + by

    # -- observer hooks (the monitoring's own) --------------------------------------------------------
    def on_transition(self, name: str, old: str, new: str, detail: str, now: float) -> None:
        self.count("fleet_status_changes", (name, new))
        if self.log_transitions:
            log.info("transition %s: %s -> %s%s", name, old, new, f" ({detail})" if detail else "")

    def on_diagnosis(self, name: str, data: Any, now: float) -> None:
        if self.log_transitions:
            verdict = (data or {}).get("verdict") or {}
            log.info("verdict %s: %s (%s): %s", name, verdict.get("code"), verdict.get("severity"),
                     verdict.get("summary"))

    def _on_audit(self, entry: dict[str, Any]) -> None:
        if entry.get("action") == "restart":
            self.count("fleet_restarts", (entry["instance"], entry.get("outcome") or ""))
        for hook in self.state.hooks["on_audit"]:
            hook(entry)

    def _counter_seeds(self) -> dict[str, list[tuple[str, ...]]]:
        """Counter label sets at 0 before their first event: each alert rule's states, each webhook."""
        seeds: dict[str, list[tuple[str, ...]]] = {}
        if self.alerts is not None:
            seeds["fleet_alert_notifications"] = [(r.name, s) for r in self.alerts.rules
                                                  for s in ("firing", "resolved")]
            seeds["fleet_webhook_failures"] = [(s.name,) for s in self.alerts.senders.values()]
        if self.notifier is not None:
            for metric in ("fleet_notify_messages", "fleet_notify_sent", "fleet_notify_failures", "fleet_notify_flaps"):
                seeds[metric] = [(s.spec.name,) for s in self.notifier.sinks]
        return seeds

    # -- lifecycle ------------------------------------------------------------------------------------
    async def start(self, controller: FleetController) -> None:
        self.controller = controller
        if self.history_path is not None:
            try:
                from console.monitor.history import DEFAULT_MAX_DAYS, History

                self.history = History(self.history_path, max_days=self.history_days or DEFAULT_MAX_DAYS)
                self.state.observe(HistoryObserver(self.history, self.state))
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
        sinks = list(getattr(self.fleet, "notify", None) or ()) if self.want_alerts else []
        if sinks:
            from console.notify.dispatch import Notifier

            self.notifier = Notifier(sinks, self.state, count=self.count)
            self.notifier.start()
            log.info("notify: %s", ", ".join(f"{s.spec.name} ({s.spec.type})" for s in self.notifier.sinks) or "none")
        if self.metrics_at is not None:
            from console.monitor.metrics import FleetCollector, MetricsServer

            collector = FleetCollector(self.state, lambda: self.counters, clock=self.state.clock,
                                       seeds=self._counter_seeds)
            self.server = MetricsServer(collector, *self.metrics_at, security=self.metrics_security)
            await self.server.start()
            log.info("metrics on %s (%s)", self.server.url, self.server.security.describe())
        from console.core.autostop import AutoStop

        self.autostop = AutoStop(controller)
        self._task = asyncio.get_running_loop().create_task(self._ticker(), name="monitoring")

    async def _ticker(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            try:
                self.state.tick()
                if self.autostop is not None:
                    self.autostop.evaluate(self.state.clock())
                if self.alerts is not None:
                    self.alerts.evaluate()
                if self.notifier is not None:
                    self.notifier.evaluate()
            except Exception:
                log.exception("monitoring tick failed")

    def record_frame(self, name: str, data: bytes) -> None:
        """A frame a link worker sent whole for the recording (JSON bytes): written as it is."""
        if self.recorder is not None:
            self.recorder.on_frame_json(name, data, self.state.clock())

    async def stop(self) -> None:
        self.state.forget_removed(self.state.clock())  # a reload just before: the recording says so too
        self.state.end_watch(self.state.clock())  # the watch sessions end here (the report's spend)
        for hooks in self.state.hooks.values():  # nothing is observed from here on
            hooks.clear()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.server is not None:
            await self.server.stop()
        if self.autostop is not None:
            await self.autostop.close()
        if self.alerts is not None:
            await self.alerts.stop()
        if self.notifier is not None:
            await self.notifier.stop()
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
        self.detail_on_demand = not (monitoring.metrics_at or monitoring.record_path)  # they want every stream
        if monitoring.record_path is not None:  # link workers send the recording every frame (console/link/shards.py)
            self.frame_tap = monitoring.record_frame
        if monitoring.history_path is not None:  # the UI's charts and timeline read it (console/core/control.py)
            from console.monitor.history import HistoryQueries

            self.history_reader = HistoryQueries(monitoring.history_path,
                                                 flush=lambda: monitoring.history and monitoring.history.flush())

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


def metrics_from_args(args: argparse.Namespace, default_port: int | None
                      ) -> tuple[tuple[str, int] | None, HttpSecurity | None]:
    """Where /metrics listens and its rules (the token, TLS, the Host allowlist; a non-loopback bind needs a token
    or ``--insecure-no-auth``); ValueError with one line for a bad option."""
    at = parse_bind(getattr(args, "metrics_bind", None), getattr(args, "metrics_port", None), default_port)
    return at, (security_from_args(args, at[0], "/metrics") if at is not None else None)


def monitoring_from_args(args: argparse.Namespace, fleet: Fleet, default_port: int | None,
                         history: bool, **kwargs: Any) -> Monitoring:
    record = getattr(args, "record", None)
    metrics, security = metrics_from_args(args, default_port)
    return Monitoring(
        fleet,
        metrics=metrics,
        metrics_security=security,
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
