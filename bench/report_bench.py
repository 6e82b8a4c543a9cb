"""``fleet-console report`` over a week of history for 100 instances: how long the bill takes.

Writes a history file through ``History`` (the real SQLite schema): per instance a watch session a day (the
console restarted daily), a spend-mode change every 5-40 minutes (bench / idle / other), the status
transitions beside them, a verdict at each idle episode, a restart a day, and one GPU-minute row a minute
(``--gpus`` GPUs packed in it). Then times ``spend_report`` in process and ``fleet-console report --since 7d
--json`` as a command (Python's start included), best of ``--repeat``.

Goal (issue 31): the command answers in < 2 s.

    .venv/bin/python bench/report_bench.py [--instances 100] [--days 7] [--gpus 1] [--repeat 3] [--json]
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import bench_parser, print_goals, print_result

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from console.monitor.history import History, HistoryReader, _Agg, pack_gpus  # noqa: E402
from console.monitor.report import spend_report  # noqa: E402


def build(path: Path, instances: int, days: float, gpus: int, now: float) -> dict[str, int]:
    """The history file; counts of what it holds."""
    rng = random.Random(31)
    history = History(path, max_days=days + 1, max_bytes=1 << 40, clock=lambda: now)
    start = now - days * 86400
    events = 0
    for i in range(instances):
        name = f"vast-{i:03d}"
        price = round(rng.uniform(0.2, 3.0), 3)
        t = start
        day_end = start
        mode = "other"
        while t < now:
            if t >= day_end:  # a console (re)start: a new watch session
                if day_end > start:
                    history.spend(t, name, "end", price)
                history.spend(t, name, "watch", price)
                day_end = t + 86400
                history.restart(t + 60, name, "ok", {"pid": 1234})
                events += 3
            new = rng.choice(("bench", "bench", "idle", "other"))
            if new != mode:
                history.spend(t, name, new, price)
                history.transition(t, name, mode, {"bench": "ok", "idle": "benchmark_down", "other": "stale"}[new],
                                   "", counts=False)
                events += 2
                if new == "idle":
                    history.verdict(t + 5, name, {"verdict": {"code": "benchmark_not_running", "severity": "error",
                                                              "summary": "no benchmark process"}, "findings": []})
                    events += 1
                mode = new
            t += rng.uniform(300, 2400)
        history.flush(now)
    agg = _Agg()
    for field, value in (("util", 50), ("temp", 60), ("power", 200), ("mem", 20000)):
        agg.add(field, value)
    blob = pack_gpus({g: agg for g in range(gpus)}) if gpus else b""
    rows = 0
    if gpus:
        ids = [history._id(f"vast-{i:03d}") for i in range(instances)]
        first, last = int(start // 60), int(now // 60)
        history.db.execute("BEGIN")
        for minute in range(first, last):
            history.db.executemany("INSERT OR REPLACE INTO gpu_minutes(minute, name_id, gpus) VALUES (?, ?, ?)",
                                   [(minute, nid, blob) for nid in ids])
            rows += len(ids)
        history.db.execute("COMMIT")
    history.close()
    return {"events": events, "gpu_minute_rows": rows}


def main() -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--instances", type=int, default=100)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--gpus", type=int, default=1, help="GPUs packed in each GPU-minute row (0: none)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    state = Path(tempfile.mkdtemp(prefix="report-bench-"))
    path = state / "history.sqlite3"
    now = time.time()
    built = time.perf_counter()
    counts = build(path, args.instances, args.days, args.gpus, now)
    built = time.perf_counter() - built
    inproc = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        reader = HistoryReader(path)
        report = spend_report(reader.db, now - args.days * 86400, time.time())
        reader.close()
        inproc.append(time.perf_counter() - t0)
    env = dict(os.environ, FLEET_CONSOLE_STATE_DIR=str(state), PYTHONPATH=str(ROOT))
    command = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "console", "report", "--since", f"{args.days:g}d", "--json",
                              "--fleet", str(state / "none.toml")], capture_output=True, text=True, env=env,
                             cwd=state, check=True)
        command.append(time.perf_counter() - t0)
    assert f'"instances": {args.instances}' in out.stdout.replace("\n", " ").replace("  ", " ") or out.stdout
    result = {
        "instances": args.instances, "days": args.days, **counts,
        "history_mb": round(path.stat().st_size / 1e6, 1), "build_s": round(built, 1),
        "spend_report_s": round(min(inproc), 3), "command_s": round(min(command), 3),
        "fleet_spend": report["totals"]["spend"], "fleet_idle_spend": report["totals"]["idle_spend"],
    }
    print_result(result, args.json, "{key}: {value}")
    if not args.json:
        print_goals("report command < 2 s", result["command_s"] < 2.0)
    return 0 if result["command_s"] < 2.0 else 1


if __name__ == "__main__":
    sys.exit(main())
