"""The status rules: which badge an instance shows at a moment, and whether a change to worse is news.

The statuses themselves (names, ranks, labels) are the table in ``console/core/status.py``; ``FleetState``
(``console/core/state.py``) applies these rules after every change and on each tick.
"""

from __future__ import annotations

from typing import Tuple

from console.agent.wire.config import STARTUP_GRACE_SECONDS as STARTUP_GRACE  # the diagnosis's grace too
from console.agent.wire.timefmt import fmt_age as format_age  # one age format for the console and the diagnosis
from console.core.gpu_health import instance_failure
from console.core.instance import InstanceState
from console.core.status import BAD_LINK, LINK_DERIVED, LINK_LABELS

DEFAULT_CONNECT_TIMEOUT = 15.0  # the link's (console/link/auth.py): a first attempt this old is UNREACHABLE
RENOTIFY_AFTER = 300.0  # seconds: a host that went down twice in this long, never up STABLE_FOR since, is
FLAP_NOTICES = 2  # flapping: its next drops in that window are not news (a reconnect storm, one notice a retry)
STABLE_FOR = 10.0  # seconds connected that make a later drop news again (the link's STABLE_AFTER)
IDLE_WINDOW = 30  # samples (seconds) of idleness before an instance is "gpu_idle"
# An OK instance without [benchmark] says so (issue 35): BENCH DOWN can never show for it.
NOT_WATCHED = "benchmark not watched: no [benchmark] match in fleet.toml"


def derive_status(inst: InstanceState, now: float) -> Tuple[str, str]:
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
    health = instance_failure(inst.gpus.values(), now) if inst.gpus else ""  # ECC, row remap, fatal Xid (NVML)
    if health:
        return "failed", health
    if inst.diagnosis_bench_down():
        return "benchmark_down", inst.verdict_summary()
    if inst.bench_running is False and inst.diagnosis_finished():
        return "ok", inst.verdict_summary()
    if inst.bench_running is False:
        up = inst.entrypoint_age(now)
        if up is not None and up < STARTUP_GRACE:
            return "ok", "benchmark starting: entrypoint up %s" % format_age(up)
        return "benchmark_down", "no benchmark process running"
    if inst.gpus and inst.idle_seconds >= IDLE_WINDOW:
        return "gpu_idle", "GPUs idle for %s+" % format_age(inst.idle_seconds)
    return "ok", "" if inst.bench_patterns or inst.entry_patterns else NOT_WATCHED


def is_flapping(inst: InstanceState, status: str, now: float) -> bool:
    """The same trouble raised not long ago, and the host never stayed up since: not news (a reconnect storm)."""
    times = inst.notified.get(status)
    if times is None or len(times) < FLAP_NOTICES or now - times[0] > RENOTIFY_AFTER:
        return False
    last = times[-1]
    up = inst.connected_at
    return up is None or up < last or (inst.link_since or now) - up < STABLE_FOR

