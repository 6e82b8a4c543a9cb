"""From a benchmark dying on a host to the message at each sink (issue 32): a real sshd fleet, the console's
monitoring as ``serve`` runs it (auto-diagnosis on), every sink type pointed at a local stand-in (HTTP on
127.0.0.1 for ntfy, Slack, Discord, Telegram and the webhook; aiosmtpd for email); the benchmark process is
killed and the clock runs until each stand-in holds the message. With the default ``[[notify]]`` settings
(``min_duration`` 30 s, ``group_wait`` 10 s) unless told otherwise.

Figures: seconds from the kill to the first message, per sink and the slowest; whether each message names the
verdict and its evidence line (file:line). Goal: the slowest < 60 s, every message with verdict and evidence.

    .venv/bin/python bench/notify_latency.py [--instances 1] [--min-duration 30s] [--group-wait 10s] [--json]
"""

from __future__ import annotations

import asyncio
import re
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, bench_parser, print_goals, print_result, private_dir, sshd_server

sys.path.insert(0, str(ROOT))
private_dir("FLEET_CONSOLE_STATE_DIR", "fleet-notify-bench-")

from console.inventory import BenchmarkSpec, load_fleet  # noqa: E402
from console.monitor.monitoring import MonitoredController, Monitoring  # noqa: E402
from tests.support.sshd import ssh_instance  # noqa: E402
from tests.support.standins import HttpStandIn, SmtpStandIn, sink_rows  # noqa: E402

SETUP_LOG = "fetching c1.json\n" * 5 + "curl: (22) The requested URL returned error: 404\n" \
            "download of c1.json failed\n"
PATHS = {"ntfy": "/ntfy/", "slack": "/slack", "discord": "/discord", "telegram": "/tg/bot123:abc/sendMessage",
         "webhook": "/hook"}


async def measure(args, work: Path, server) -> dict:
    http, smtp = HttpStandIn(), SmtpStandIn()
    http.start()
    smtp.start()
    procs, fleet_file = [], work / "fleet.toml"
    extra = "".join(f'{k} = "{v}"\n' for k, v in (("min_duration", args.min_duration),
                                                    ("group_wait", args.group_wait)) if v)
    fleet_file.write_text('[[instance]]\nname = "x"\nhost = "127.0.0.1"\n\n' + sink_rows(http, smtp, extra))
    fleet = load_fleet(fleet_file)
    instances = []
    for i in range(args.instances):
        token = f"fleet-notify-bench-{secrets.token_hex(4)}"
        script = work / f"{token}.py"
        script.write_text("import time\ntime.sleep(3600)\n")
        procs.append(subprocess.Popen([sys.executable, str(script)]))
        log = work / f"setup-{i}.log"
        log.write_text(SETUP_LOG)
        instances.append(ssh_instance(server, f"C.3271047{i}", benchmark=BenchmarkSpec(match=(token,)),
                                      logs=(str(log),)))
    fleet.instances = instances
    monitoring = Monitoring(fleet, history=False)
    controller = MonitoredController(fleet, monitoring, read_only=True)
    await controller.start()
    try:
        state = controller.state
        deadline = time.monotonic() + 60
        while not all(i.status == "ok" and i.bench_running for i in state.instances.values()):
            if time.monotonic() > deadline:
                raise RuntimeError("the fleet did not come up")
            await asyncio.sleep(0.1)
        killed = time.monotonic()
        for p in procs:
            p.kill()
            p.wait()
        arrived: dict[str, float] = {}
        mail_at = None
        while time.monotonic() - killed < 180 and (len(arrived) < len(PATHS) or mail_at is None):
            for sink, path in PATHS.items():
                if sink not in arrived and http.at(path):
                    arrived[sink] = http.at(path)[0].at - killed
            if mail_at is None and smtp.messages:
                mail_at = time.monotonic() - killed
            await asyncio.sleep(0.05)
        if mail_at is not None:
            arrived["email"] = mail_at
    finally:
        await controller.stop()
        for p in procs:
            p.kill()
            p.wait()
        http.close()
        smtp.close()
    texts = [str(p.body) for p in http.posts] + [m.get_payload() for m in smtp.messages]
    cause = all("download failed" in t and re.search(r"setup-\d+\.log:\d+", t) for t in texts)
    result = {f"{k}_s": round(v, 1) for k, v in sorted(arrived.items())}
    result.update(slowest_s=round(max(arrived.values()), 1) if len(arrived) == 6 else None,
                  messages=len(texts), cause_and_evidence=bool(texts) and cause, instances=args.instances,
                  min_duration=args.min_duration or "30s (default)", group_wait=args.group_wait or "10s (default)")
    return result


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--instances", type=int, default=1, help="instances whose benchmark dies together")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--min-duration", default="", help="the sinks' min_duration (default: theirs, 30s)")
    parser.add_argument("--group-wait", default="", help="the sinks' group_wait (default: theirs, 10s)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fleet-notify-bench-") as tmp, sshd_server(Path(tmp) / "sshd") as srv:
        result = asyncio.run(measure(args, Path(tmp), srv))
    print_result(result, args.json, "{key:>20}: {value}", indent=1)
    ok = result["slowest_s"] is not None and result["slowest_s"] < 60 and result["cause_and_evidence"] \
        and result["messages"] == 6
    if not args.json:
        print_goals("the slowest sink < 60 s after the kill, one message each naming the cause and evidence", ok)
    return 0 if ok else 3


if __name__ == "__main__":
    sys.exit(main())
