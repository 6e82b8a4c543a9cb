"""Compare the agent's gpu frames with nvidia-smi readings taken alongside (used by scripts/gpu_check.sh).

    python3 scripts/gpu_compare.py AGENT_FRAMES.jsonl NVIDIA_SMI.csv
AGENT_FRAMES.jsonl: the agent's stdout; NVIDIA_SMI.csv: lines of
index,name,uuid,utilization.gpu,utilization.memory,memory.used,memory.total,temperature.gpu,
power.draw,power.limit,clocks.sm,clocks.mem,fan.speed (csv,noheader,nounits), several samples.
"""

from __future__ import annotations

import csv
import json
import sys
from typing import Any, Dict, List

MIB = 1024 * 1024
# (agent field, nvidia-smi column, converter of the agent value to nvidia-smi units, tolerance)
FIELDS = [
    ("util", 3, lambda v: v, 25.0),
    ("mem_util", 4, lambda v: v, 25.0),
    ("mem_used", 5, lambda v: v / MIB, 512.0),
    ("mem_total", 6, lambda v: v / MIB, 1.0),
    ("temp", 7, lambda v: v, 5.0),
    ("power", 8, lambda v: v, 60.0),
    ("power_limit", 9, lambda v: v, 1.0),
    ("sm_clock", 10, lambda v: v, 400.0),
    ("mem_clock", 11, lambda v: v, 400.0),
    ("fan", 12, lambda v: v, 10.0),
]


def _num(text: str) -> Any:
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def main(argv: List[str]) -> int:
    with open(argv[1], encoding="utf-8") as fh:
        frames = [json.loads(x) for x in fh if x.strip()]
    gpu = [f for f in frames if f.get("type") == "gpu"]
    if not gpu:
        print("no gpu frames from the agent")
        return 1
    driver = next((f.get("driver") for f in reversed(gpu) if f.get("driver")), None)  # full frames carry it
    print("agent gpu state: %s (driver %s) %s" % (gpu[-1]["state"], driver, gpu[-1].get("message") or ""))
    static: Dict[int, Dict[str, Any]] = {}
    last: Dict[int, Dict[str, Any]] = {}
    for f in gpu:
        for d in f["devices"]:
            last[d["index"]] = dict(d)
            if f["full"]:
                static[d["index"]] = {k: d.get(k) for k in ("name", "uuid", "mem_total", "power_limit")}
    smi: Dict[int, List[str]] = {}
    with open(argv[2], encoding="utf-8") as fh:
        for row in csv.reader(fh):
            if row and row[0].strip().isdigit():
                smi[int(row[0])] = [c.strip() for c in row]
    bad = 0
    for index in sorted(set(last) | set(smi)):
        agent = dict(last.get(index, {}), **static.get(index, {}))
        row = smi.get(index)
        print("\nGPU %d: agent %s | nvidia-smi %s" % (index, agent.get("name"), row[1] if row else None))
        if row is None or not agent:
            print("  missing on one side")
            bad += 1
            continue
        if agent.get("uuid") != row[2]:
            print("  uuid differs: %s vs %s" % (agent.get("uuid"), row[2]))
            bad += 1
        print("  %-12s %12s %12s  %s" % ("field", "agent", "nvidia-smi", "diff"))
        for field, col, conv, tol in FIELDS:
            value, ref = agent.get(field), _num(row[col])
            if value is None or ref is None:
                note = "ok (both n/a)" if value is None and ref is None else "n/a on one side"
                bad += 0 if value is None and ref is None else 1
                print("  %-12s %12s %12s  %s" % (field, value, row[col], note))
                continue
            diff = conv(value) - ref
            flag = "" if abs(diff) <= tol else "  <-- beyond %.0f" % tol
            bad += 1 if flag else 0
            print("  %-12s %12.1f %12.1f  %+.1f%s" % (field, conv(value), ref, diff, flag))
    print("\n%d difference(s) beyond tolerance (live values are read a moment apart)" % bad)
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
