"""Money alerts (issue 31): an ``[[alert]] idle_for`` / ``price_above`` rule posts to a loopback webhook once per
idle episode, with the money in its detail, resolves when work resumes and stays silent for an instance at
``price_above``; the ``AutoStop`` announcement reaches the webhook before the automatic stop runs.

Real agents (local transport) with simulated GPUs, real benchmark processes, a real HTTP receiver on 127.0.0.1
and a stand-in ``vastai`` on PATH that records its argv (the file's time: when the stop ran).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from console.monitor.monitoring import MonitoredController, Monitoring
from tests.support.wait import until
from tests.test_alerts import Receiver, receiver  # noqa: F401 (a fixture)
from tests.test_spend import calls, local_fleet, stand_in, start_bench  # noqa: F401 (a fixture)

MONEY = re.compile(r"^idle (\S+) at €72\.00/h: €(\d+\.\d\d) so far$")


def write_fleet(tmp: Path, hook: str) -> Path:
    """pricey at 72/h, cheap at 36/h (= price_above): one idle rule, an automatic stop after 15 s."""
    (tmp / "fleet.toml").write_text(f"""[defaults]
currency = "€"
price_per_hour = 72

[actions]
stop = ["vastai", "stop", "instance", "{{vast_id}}"]
stop_idle_after = "15s"

[[instance]]
name = "pricey"
host = "localhost"

[[instance]]
name = "cheap"
host = "localhost"
price_per_hour = 36

[[alert]]
name = "IdleMoney"
idle_for = "2s"
price_above = 36
repeat = 1
webhook = "{hook}"
""")
    return tmp / "fleet.toml"


def seconds(iso: str) -> float:
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def of(r: Receiver, alertname: str, status: str) -> list[tuple[float, dict[str, Any]]]:
    """(arrival time, alert) of one rule's notifications of ``status``."""
    return [(t, a) for t, b in zip(r.times, r.bodies, strict=True) for a in b["alerts"]
            if a["labels"]["alertname"] == alertname and a["status"] == status]


@pytest.mark.slow
async def test_idle_money_alert_once_an_episode_and_the_auto_stop_announced_first(
    tmp_path: Path, receiver: Receiver, stand_in: Path  # noqa: F811 (the fixtures)
) -> None:
    fleet = local_fleet(tmp_path, write_fleet(tmp_path, receiver.url), {"pricey": 0, "cheap": 0})
    fleet.instances = [dataclasses.replace(i, vast_id="31") if i.name == "cheap" else i for i in fleet.instances]
    monitoring = Monitoring(fleet)
    controller = MonitoredController(fleet, monitoring)
    state = controller.state
    procs: list[subprocess.Popen[bytes]] = []
    await controller.start()
    try:
        pricey = state.instances["pricey"]
        await until(lambda: pricey.meter.mode == "idle", 30, "pricey idle (no benchmark)")
        episode = pricey.meter.mode_since
        await until(lambda: of(receiver, "IdleMoney", "firing"), 30, "the idle alert")
        (_, alert), = of(receiver, "IdleMoney", "firing")
        assert alert["labels"]["name"] == "pricey" and alert["labels"]["price_per_hour"] == "72"
        money = MONEY.match(alert["annotations"]["description"])
        assert money is not None, alert["annotations"]
        spent = (seconds(alert["startsAt"]) - episode) * 72 / 3600  # what the episode cost when it fired
        assert seconds(alert["startsAt"]) - episode >= 2.0
        assert abs(float(money.group(2)) - spent) <= 0.01 and money.group(2) == alert["labels"]["idle_spend"]

        procs.append(start_bench(tmp_path, "pricey"))  # work resumes: resolved
        await until(lambda: of(receiver, "IdleMoney", "resolved"), 30, "the idle alert resolved")
        assert of(receiver, "IdleMoney", "resolved")[0][1]["labels"]["name"] == "pricey"
        assert len(of(receiver, "IdleMoney", "firing")) == 1  # once an episode, although repeat = 1 s
        gone = procs.pop()  # a second episode: a second alert
        gone.kill()
        gone.wait()
        await until(lambda: len(of(receiver, "IdleMoney", "firing")) == 2, 30, "the second episode's alert")
        procs.append(start_bench(tmp_path, "pricey"))  # (and back to work: pricey is never stopped)

        # cheap (at price_above, never IdleMoney) idles on: AutoStop is announced, then it is stopped
        await until(lambda: calls(stand_in), 40, "the automatic stop of cheap")
        stopped_at = stand_in.stat().st_mtime
        (arrived, announced), = of(receiver, "AutoStop", "firing")
        assert announced["labels"]["name"] == "cheap" and "stops itself in" in announced["annotations"]["description"]
        assert arrived < stopped_at and calls(stand_in) == [["stop", "instance", "31"]]
        assert all(a["labels"]["name"] == "pricey" for _, a in of(receiver, "IdleMoney", "firing"))
    finally:
        await controller.stop()
        for proc in procs:
            proc.kill()
            proc.wait()
