"""Requests the agent answers, by op name. Each handler is ``handler(agent, args) -> JSON data``."""

from __future__ import annotations

import time
from typing import Any, Callable, Dict

Handler = Callable[[Any, Dict[str, Any]], Any]
OPS: Dict[str, Handler] = {}


def op(name: str) -> Callable[[Handler], Handler]:
    """Register a request handler under ``name``."""

    def register(fn: Handler) -> Handler:
        OPS[name] = fn
        return fn

    return register


@op("ping")
def ping(agent: Any, args: Dict[str, Any]) -> Dict[str, Any]:
    return {"pong": True, "time": time.time(), "uptime": time.time() - agent.started}


@op("stop")
def stop(agent: Any, args: Dict[str, Any]) -> Dict[str, Any]:
    agent.stop_event.set()
    return {"stopping": True}


@op("backlog")
def backlog(agent: Any, args: Dict[str, Any]) -> Dict[str, Any]:
    """Resend the last N lines of every followed log (the console asks after a reconnect)."""
    lines = int(args.get("lines", agent.config["backlog_lines"]))
    frames = agent.logs.backlog(lines)
    for frame in frames:
        agent.writer.send("log", **frame)
    return {"files": len(frames)}


@op("full_procs")
def full_procs(agent: Any, args: Dict[str, Any]) -> Dict[str, Any]:
    """Send the whole process tree again on the next sample."""
    agent.procs.reset()
    return {"ok": True}


from . import diagnose, probes, restart  # noqa: E402,F401  (register ops)
