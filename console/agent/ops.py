"""Requests the agent answers: one table from op name to handler.

A handler is ``handler(agent, args) -> data``. It is the request layer: it reads its typed parameters
out of the request's ``args`` and calls a domain function (``diagnose``, ``probes``, ``restart``) with
the agent's config. The domain modules know nothing of requests, of the agent or of this table, so
they import nothing from here and the imports run one way: ``main -> ops -> domain``.

A new op is one function here and one row in ``OPS`` (and a line in docs/architecture.md).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, List, Optional, Protocol  # typing has Protocol since 3.8

from .actions import probes, restart, signals
from .actions.journal import Journal
from .diagnosis import diagnose
from .sample import logread
from .sample.gpu import GpuSampler
from .sample.logs import LogFollower
from .sample.procs import ProcSampler
from .wire.config import AgentConfig
from .wire.protocol import (
    DetailResult,
    DiagnosisResult,
    FrameWriter,
    ProbeResult,
    RestartPlan,
    RestartResult,
    SignalResult,
    StopResult,
)

FRESH_WAIT = 10.0  # seconds diagnose waits, at most, for the loop's fresh sample (one sample's time, as a rule)


class AgentHost(Protocol):
    """What the handlers use of the agent (``console.agent.main.Agent``)."""

    config: AgentConfig
    started: float
    stop_event: threading.Event
    writer: FrameWriter
    gpu: GpuSampler
    procs: ProcSampler
    logs: LogFollower
    journal: Journal

    def set_level(self, level: str) -> str: ...  # op ``detail``

    def stop(self) -> None: ...  # op ``stop``

    def fresh_sample(self, timeout: float) -> bool: ...  # a sample now, health counters read again


Handler = Callable[[AgentHost, Dict[str, Any]], Any]


# -- typed parameters out of a request's args -------------------------------------------------------
def _opt_float(args: Dict[str, Any], name: str) -> Optional[float]:
    value = args.get(name)
    return None if value is None else float(value)


def _int(args: Dict[str, Any], name: str, default: int) -> int:
    return int(args.get(name, default))


def _bool(args: Dict[str, Any], name: str, default: bool) -> bool:
    return bool(args.get(name, default))


def _str(args: Dict[str, Any], name: str) -> str:
    return str(args.get(name) or "")


# -- handlers ----------------------------------------------------------------------------------------
def ping(agent: AgentHost, args: Dict[str, Any]) -> Dict[str, Any]:
    """``{pong, time, uptime}``: is the agent there and answering."""
    now = time.time()
    return {"pong": True, "time": now, "uptime": now - agent.started}


def stop(agent: AgentHost, args: Dict[str, Any]) -> Dict[str, Any]:
    """End the agent's loop (the link sends it when it closes)."""
    agent.stop()
    return {"stopping": True}


def backlog(agent: AgentHost, args: Dict[str, Any]) -> Dict[str, Any]:
    """Resend the last ``lines`` lines of every followed log as ``log`` frames."""
    frames = agent.logs.backlog(_int(args, "lines", agent.config["backlog_lines"]))
    for frame in frames:
        agent.writer.send("log", **frame)
    return {"files": len(frames)}


def full_procs(agent: AgentHost, args: Dict[str, Any]) -> Dict[str, Any]:
    """Send the whole process tree again on the next sample."""
    agent.procs.reset()
    return {"ok": True}


def diagnose_op(agent: AgentHost, args: Dict[str, Any]) -> DiagnosisResult:
    """``{dmesg: bool = true, stall_seconds: float | null}``: the diagnosis of this host, on GPU health counters
    read and NVML events polled for it (not the last slow reading's, up to 10 s old)."""
    if agent.gpu is not None:
        agent.fresh_sample(FRESH_WAIT)
    return diagnose.diagnose(
        agent.config,
        agent.gpu,
        include_dmesg=_bool(args, "dmesg", True),
        stall_seconds=_opt_float(args, "stall_seconds"),
    )


def restart_op(agent: AgentHost, args: Dict[str, Any]) -> RestartResult:
    """``{plan: RestartPlan | null}``: stop the benchmark and start it again (see ``restart.restart``). With the
    ``plan`` the operator confirmed, a process to stop that it did not list refuses it before anything stops."""
    return restart.restart(agent.config, confirmed=args.get("plan"))


def restart_plan_op(agent: AgentHost, args: Dict[str, Any]) -> RestartPlan:
    """``{}``: what a restart would stop now (groups: pid, program, age, parent entrypoint), leave and start."""
    return restart.plan(agent.config)


def stop_benchmark_op(agent: AgentHost, args: Dict[str, Any]) -> StopResult:
    """``{plan: RestartPlan | null}``: stop the benchmark without starting it again."""
    return restart.stop_only(agent.config, confirmed=args.get("plan"))


def probe_op(agent: AgentHost, args: Dict[str, Any]) -> ProbeResult:
    """``{name}``: one built-in probe's ``{title, lines}``."""
    return probes.run_probe(agent.config, _str(args, "name"))


def journal_op(agent: AgentHost, args: Dict[str, Any]) -> Dict[str, Any]:
    """``{ids: [action id]}``: ``{entries: {id: {op, state: "running"|"done", ok, data|error} | null}}``.

    What an action sent with an ``action_id`` (a restart) did, asked by a console whose link dropped before
    the answer came (null: this host never got it).
    """
    ids = [str(i) for i in (args.get("ids") or [])][:64]
    return {"entries": agent.journal.get(ids)}


def signal_op(agent: AgentHost, args: Dict[str, Any]) -> SignalResult:
    """``{pid, signal: "TERM"|"KILL", start}``: signal one process if it is still the one that started at ``start``
    (``start_time`` is taken too); refused for pid 1, the agent and its ancestors (see ``signals.send_signal``)."""
    start = args.get("start", args.get("start_time"))
    return signals.send_signal(_int(args, "pid", 0), _str(args, "signal"), None if start is None else float(start))


def read_log_op(agent: AgentHost, args: Dict[str, Any]) -> Dict[str, Any]:
    """``{path, before_line, n}``: up to n (<= 2000) lines before before_line of a followed log (``LogReadResult``)."""
    before = args.get("before_line")
    return logread.read_lines(agent.config, _str(args, "path"), None if before is None else int(before),
                              _int(args, "n", 200))


def grep_log_op(agent: AgentHost, args: Dict[str, Any]) -> Dict[str, Any]:
    """``{path, pattern, max_hits=200, regex=false}``: the whole log's matching lines (``LogGrepResult``)."""
    hits = _int(args, "max_hits", logread.MAX_HITS)
    return logread.grep(agent.config, _str(args, "path"), _str(args, "pattern"), hits, _bool(args, "regex", False))


def detail_op(agent: AgentHost, args: Dict[str, Any]) -> DetailResult:
    """``{level: "full" | "summary"}``: how much this host sends (the console lowers it for hosts off screen)."""
    return {"level": agent.set_level(_str(args, "level") or "full")}


def probes_op(agent: AgentHost, args: Dict[str, Any]) -> Dict[str, List[Dict[str, str]]]:
    """``{probes: [{name, title}]}``: the built-in probes."""
    return {"probes": probes.catalog()}


# The console sends diagnose, restart_plan, restart and probe (console/core/controller.py, restart_plan.py) and
# stop (a link closing).
# The rest are kept on purpose, though no console code sends them today:
# journal is sent after a link drop mid-action (console/core/controller.py); ping every heartbeat (the agent's
# watchdog) by console/link/base.py.
#   ping, backlog, full_procs -- for whoever talks to `fleet-console agent` by hand, and the documented
#     protocol (docs/architecture.md); agentless mode answers ping and full_procs too;
#   probes -- the console lists the built-in probes itself (console/core/actions.py BUILTIN_PROBES);
#   stop_benchmark -- the stop half of restart alone, for an operator at the agent.
OPS: Dict[str, Handler] = {
    "diagnose": diagnose_op,
    "restart": restart_op,
    "restart_plan": restart_plan_op,
    "probe": probe_op,
    "stop": stop,
    "ping": ping,
    "backlog": backlog,
    "full_procs": full_procs,
    "probes": probes_op,
    "stop_benchmark": stop_benchmark_op,
    "journal": journal_op,
    "signal": signal_op,
    "read": read_log_op,
    "grep": grep_log_op,
    "detail": detail_op,
}
