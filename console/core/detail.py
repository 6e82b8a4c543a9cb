"""Detail on demand: the agents of instances the operator cannot see send a summary (agent op ``detail``).

An instance off screen needs no process table and log lines every second: at "summary" its agent sends GPU
frames when a figure moves (or every 5 s), its benchmark's and GPU's processes every 5 s and holds its log
lines until it is asked for "full" again (console/agent/main.py). The TUI alone lowers the level, and only
while the fleet has more instances than its view shows; ``serve``, the command line, MCP, alerts and metrics
never do (they keep every agent at "full", the agent's default).

``DetailTracker.update(on_screen, opened)`` runs a few times a second (console/ui/app.py). It asks for:

- "full" at once for an instance in view or open (at most one change per instance per MIN_CHANGE s);
- "summary" for one out of view for SUMMARY_AFTER s (scrolling past, or back, sends nothing);
- nothing for a small fleet (everything fits), an agentless session or an agent without the op;
- at most MAX_PER_TICK requests a tick, "full" ones first (a jump through a long fleet costs a few, not
  hundreds).

A new session's agent starts at "full" (the tracker notices the link's new ``connected_at`` and asks for
"summary" again if the instance is still out of view); the agent's heartbeat says its level, so a request
that got lost is sent again after RECHECK s.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from console.core.state import FleetState, InstanceState

FULL, SUMMARY = "full", "summary"
SUMMARY_AFTER = 5.0  # seconds out of view before an instance goes to summary
MIN_CHANGE = 1.0  # seconds between two changes of one instance's level
MAX_PER_TICK = 32  # requests per update at most (the rest at the next one)
RECHECK = 12.0  # seconds after a change from which the agent's heartbeat must agree, else it is asked again
MAX_MISSES = 3  # an agent that did not take the level this many times in a session is not asked again in it


class DetailTracker:
    """The level each instance's agent was asked for; ``send(name, level) -> bool`` asks (the controller's
    ``set_detail``), False when it could not (not connected)."""

    def __init__(self, state: FleetState, send: Callable[[str, str], bool],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.state = state
        self.send = send
        self.clock = clock
        self.asked: Dict[str, Tuple[str, Optional[float]]] = {}  # name -> (level, the session's connected_at)
        self.changed_at: Dict[str, float] = {}
        self.off_since: Dict[str, float] = {}
        self.misses: Dict[str, Tuple[int, Optional[float]]] = {}  # name -> (times not taken, in which session)
        # name -> the session (connected_at) in which its agent said it took "summary": nothing to decide for it
        # while it stays out of view in that session and says so (most of a large fleet, looked at twice a second)
        self.settled: Dict[str, Optional[float]] = {}
        self.requests = 0  # sent so far (tests, the scale bench)

    def level(self, name: str) -> str:
        """The level ``name``'s agent sends at, as far as the console knows."""
        inst = self.state.instances.get(name)
        return FULL if inst is None else self._current(name, inst, self.clock())

    def update(self, on_screen: Iterable[str], opened: Optional[str] = None) -> List[Tuple[str, str]]:
        """Look at what is in view now; ask for the levels that should change. Returns ``[(name, level)]`` sent."""
        now = self.clock()
        shown = set(on_screen)
        instances = self.state.instances
        crowded = len(instances) > len(shown)  # a small fleet (everything in view) stays at full
        if opened:
            shown.add(opened)
        wanted: List[Tuple[int, str, str]] = []
        settled = self.settled
        for name, inst in instances.items():
            if name in settled:
                if (crowded and name not in shown and settled[name] == inst.connected_at
                        and inst.detail_level == SUMMARY and inst.link_status == "connected"):
                    continue
                del settled[name]
            current = self._current(name, inst, now)
            if name in shown or not crowded:
                self.off_since.pop(name, None)
                want = FULL
            else:
                since = self.off_since.setdefault(name, now)
                want = SUMMARY if now - since >= SUMMARY_AFTER else current
            if want == current:
                if want == SUMMARY and inst.detail_level == SUMMARY and now - self.changed_at.get(name, now) >= RECHECK:
                    settled[name] = inst.connected_at  # asked, taken and said: the agent's word holds from here
                continue
            if not _can_ask(inst):
                continue
            if now - self.changed_at.get(name, -1e9) < MIN_CHANGE:
                continue
            wanted.append((0 if want == FULL else 1, name, want))
        sent: List[Tuple[str, str]] = []
        for _rank, name, want in sorted(wanted)[:MAX_PER_TICK]:
            session = instances[name].connected_at
            asked = self.asked.get(name)
            if asked is not None and asked[1] == session and want == asked[0]:  # asked before: not taken
                count = self.misses[name][0] + 1 if self.misses.get(name, (0, None))[1] == session else 1
                self.misses[name] = (count, session)
            missed = self.misses.get(name)
            if missed is not None and missed[1] == session and missed[0] >= MAX_MISSES:
                continue  # an agent that does not take it (a replay host, a broken op): stays as it is
            if self.send(name, want):
                self.asked[name] = (want, session)
                self.changed_at[name] = now
                self.requests += 1
                sent.append((name, want))
        for gone in [n for n in self.asked if n not in instances]:
            self.asked.pop(gone, None)
            self.changed_at.pop(gone, None)
            self.off_since.pop(gone, None)
            self.misses.pop(gone, None)
            self.settled.pop(gone, None)
        return sent

    def _current(self, name: str, inst: InstanceState, now: float) -> str:
        """What the agent sends at: "full" unless asked for summary in this session; after RECHECK s the
        agent's own word (its heartbeat) wins, so a lost request is made again."""
        asked = self.asked.get(name)
        if asked is None or inst.link_status != "connected" or asked[1] != inst.connected_at:
            return FULL  # never asked, or a new session: its agent started at full
        if now - self.changed_at.get(name, now) >= RECHECK and inst.detail_level != asked[0]:
            return inst.detail_level
        return asked[0]


def _can_ask(inst: InstanceState) -> bool:
    """A connected agent that knows the op (agentless sessions and older agents stay at full)."""
    if inst.link_status != "connected" or inst.agentless:
        return False
    features: Any = inst.hello.get("features") or {}
    return "detail" in (features.get("ops") or ())


def table_on_screen(table: Any) -> List[str]:
    """The rows of the fleet table (widgets/fleet_table.py) in view: its first line is the header."""
    names: List[str] = table.visible_names
    top = int(table.scroll_offset.y)
    return names[top : top + max(0, table.size.height - 1)]
