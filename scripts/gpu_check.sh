#!/usr/bin/env bash
# One-command check of the agent on a real NVIDIA GPU host (a rented box, a container, bare metal):
#   1. the agent's hello (gpu "ok", not simulated; pid_ns / gpu_mapping when the agent reports them),
#   2. one full gpu frame with every field of every device (null fields listed: some GPUs have no fan),
#   3. per-process GPU memory on a real CUDA process, when `python3 -c "import torch"` works and CUDA is up:
#      a small torch process allocates 256 MiB on GPU 0; its pid (as this /proc numbers it, also in a
#      container) must carry GPU memory in the procs frames and in the device's processes, and no process
#      the agent itself started may,
#   4. the agent's figures against nvidia-smi's, read alongside (scripts/gpu_compare.py),
#   5. every NVML health call the agent makes (ECC, retired pages, remapped rows, clock event reasons, PCIe,
#      pstate, persistence, NVLink, the Xid event set), straight through pynvml, against the agent's record.
# Needs only python3 and this repo; nvidia-ml-py + psutil are installed into .gpu-check-venv when missing.
#   scripts/gpu_check.sh [SECONDS]      (default 20; frames kept in $OUT, a temporary directory by default)
# Exit status: 0 every check passed, 1 a check failed, 2 the check could not run (no nvidia-smi, no python3).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS="${1:-20}"
OUT="${OUT:-$(mktemp -d)}"
command -v python3 >/dev/null || { echo "python3 not found"; exit 2; }
command -v nvidia-smi >/dev/null || { echo "nvidia-smi not found"; exit 2; }
PY=python3
if ! $PY -c 'import pynvml, psutil' 2>/dev/null; then
  if [ ! -x .gpu-check-venv/bin/python ]; then
    python3 -m venv .gpu-check-venv
    .gpu-check-venv/bin/pip install -q nvidia-ml-py psutil
  fi
  PY=.gpu-check-venv/bin/python
fi

# -- a real CUDA process (optional) ------------------------------------------------------------------------------
CUDA_PID=""
cleanup() { [ -n "$CUDA_PID" ] && kill "$CUDA_PID" 2>/dev/null || true; }
trap cleanup EXIT
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  python3 - >"$OUT/cuda.log" 2>&1 <<'EOF' &
import time, torch
x = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device="cuda:0")  # 256 MiB on GPU 0
torch.cuda.synchronize()
print("allocated", flush=True)
time.sleep(600)
EOF
  CUDA_PID=$!
  for _ in $(seq 1 60); do grep -q allocated "$OUT/cuda.log" 2>/dev/null && break; sleep 0.5; done
  grep -q allocated "$OUT/cuda.log" || { echo "the CUDA workload did not start:"; cat "$OUT/cuda.log"; CUDA_PID=""; }
  [ -n "$CUDA_PID" ] && echo "CUDA workload: pid $CUDA_PID holds 256 MiB on GPU 0"
else
  echo "no torch with CUDA here: the per-process check is skipped"
fi

# -- the agent, with nvidia-smi read alongside -----------------------------------------------------------------
Q=index,name,uuid,utilization.gpu,utilization.memory,memory.used,memory.total,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.mem,fan.speed
echo "running the agent for ${SECS}s (frames in $OUT/agent.jsonl)"
timeout "$((SECS + 10))" $PY -m console.agent --no-stdin --max-seconds "$SECS" --config-file /dev/stdin \
  >"$OUT/agent.jsonl" 2>"$OUT/agent.err" <<<'{"watch_dirs": [], "logs": []}' &
AGENT=$!
: >"$OUT/smi.csv"
for _ in $(seq 1 "$SECS"); do
  nvidia-smi --query-gpu="$Q" --format=csv,noheader,nounits >"$OUT/smi.last.csv" 2>>"$OUT/smi.err" || true
  cat "$OUT/smi.last.csv" >>"$OUT/smi.csv"
  nvidia-smi --query-compute-apps=gpu_uuid,pid,used_memory --format=csv,noheader,nounits >"$OUT/apps.csv" 2>&1 || true
  sleep 1
done
wait "$AGENT" || true
echo "--- last agent gpu frame"
grep '"type":"gpu"' "$OUT/agent.jsonl" | tail -1 || cat "$OUT/agent.err"
echo "--- last nvidia-smi reading"
cat "$OUT/smi.last.csv"
echo "--- nvidia-smi compute apps (host pids)"
cat "$OUT/apps.csv"
echo "--- agent frames: $(grep -c '"type":"gpu"' "$OUT/agent.jsonl" || true) gpu, $(wc -c <"$OUT/agent.jsonl") bytes"

# -- the checks ------------------------------------------------------------------------------------------------
STATUS=0
$PY - "$OUT/agent.jsonl" "$CUDA_PID" <<'EOF' || STATUS=1
import json, sys

DEVICE_FIELDS = ("index", "lost", "error", "util", "mem_util", "mem_used", "temp", "power", "sm_clock", "mem_clock",
                 "fan", "procs", "name", "uuid", "mem_total", "power_limit")
frames = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
cuda_pid = int(sys.argv[2]) if sys.argv[2] else None
failed = []

def check(ok, what):
    print(("PASS " if ok else "FAIL ") + what)
    if not ok:
        failed.append(what)

hello = next((f for f in frames if f["type"] == "hello"), None)
check(hello is not None, "the agent said hello")
features = (hello or {}).get("features", {})
check(features.get("gpu") == "ok", "hello: gpu ok (%s)" % features.get("gpu"))
check(features.get("simulated_gpu") is False, "hello: real NVML, not simulated")
print("     pid_ns=%s gpu_mapping=%s" % (features.get("pid_ns"), features.get("gpu_mapping")))
gpu = [f for f in frames if f["type"] == "gpu"]
full = next((f for f in gpu if f.get("full") and f.get("state") == "ok"), None)
check(full is not None, "a full gpu frame of state ok")
if full:
    check(bool(full.get("driver")), "driver version %s" % full.get("driver"))
    print("     pid_ns=%s mapping=%s" % (full.get("pid_ns"), full.get("mapping")))
    for dev in full["devices"]:
        missing = [k for k in DEVICE_FIELDS if k not in dev]
        nulls = [k for k in DEVICE_FIELDS if k in dev and dev[k] is None and k != "error"]
        check(not missing and not dev.get("lost"), "GPU %s %s: every field present%s" % (
            dev.get("index"), dev.get("name"), (" (missing: %s)" % ", ".join(missing)) if missing else ""))
        if nulls:
            print("     GPU %s: null (not supported here): %s" % (dev.get("index"), ", ".join(nulls)))
        for m in dev.get("mig") or ():
            print("     MIG %s: %s / %s bytes, %d processes" % (m.get("profile"), m.get("mem_used"), m.get("mem_total"),
                                                          len(m.get("procs") or [])))
if cuda_pid is not None:
    gpu_mem = {}
    for f in frames:
        if f["type"] == "procs":
            for rec in f.get("procs", []) + f.get("upsert", []):
                gpu_mem[rec["pid"]] = rec.get("gpu_mem")
    mem = gpu_mem.get(cuda_pid)
    check(bool(mem) and mem >= 200 * 1024 * 1024, "the CUDA process %d carries its GPU memory (%s bytes)" % (cuda_pid, mem))
    listed = [p for f in gpu for d in f["devices"] for p in d.get("procs") or [] if p.get("pid") == cuda_pid]
    check(bool(listed), "the CUDA process is in its device's processes (%s)" % (listed[-1] if listed else None))
    agent_pid = (hello or {}).get("pid")
    check(not gpu_mem.get(agent_pid), "the agent itself carries no GPU memory")
sys.exit(1 if failed else 0)
EOF
# -- 5. GPU health through NVML (issue 30): every call the agent makes, straight through pynvml -----------------
# Each answers a value or an NVML error (NOT_SUPPORTED / NO_PERMISSION are fine: consumer cards, containers);
# anything else (a crash, a missing symbol in this driver) fails. The agent's health record must agree.
$PY - "$OUT/agent.jsonl" <<'EOF' || STATUS=1
import json, sys
import pynvml as n

n.nvmlInit()
failed = []
frames = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
health = {}
for f in frames:
    if f["type"] == "gpu":
        for d in f.get("devices", []):
            if "health" in d:
                health[d["index"]] = d["health"]
print("     xid frames from the agent: %d" % sum(1 for f in frames if f["type"] == "xid"))

def call(what, fn, *args):
    try:
        value = fn(*args)
    except n.NVMLError as exc:
        print("     %-52s %s" % (what, exc))
        return None
    except Exception as exc:
        print("FAIL %-52s %s: %s" % (what, type(exc).__name__, exc))
        failed.append(what)
        return None
    print("     %-52s %s" % (what, value if not isinstance(value, list) else "%d entries" % len(value)))
    return value

for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    print("GPU %d %s" % (i, n.nvmlDeviceGetName(h)))
    call("nvmlDeviceGetEccMode", n.nvmlDeviceGetEccMode, h)
    unc = call("nvmlDeviceGetTotalEccErrors(uncorrected, volatile)", n.nvmlDeviceGetTotalEccErrors, h, 1, 0)
    call("nvmlDeviceGetTotalEccErrors(corrected, volatile)", n.nvmlDeviceGetTotalEccErrors, h, 0, 0)
    call("nvmlDeviceGetTotalEccErrors(uncorrected, aggregate)", n.nvmlDeviceGetTotalEccErrors, h, 1, 1)
    call("nvmlDeviceGetTotalEccErrors(corrected, aggregate)", n.nvmlDeviceGetTotalEccErrors, h, 0, 1)
    call("nvmlDeviceGetRetiredPages(sbe)", n.nvmlDeviceGetRetiredPages, h, 0)
    call("nvmlDeviceGetRetiredPages(dbe)", n.nvmlDeviceGetRetiredPages, h, 1)
    call("nvmlDeviceGetRetiredPagesPendingStatus", n.nvmlDeviceGetRetiredPagesPendingStatus, h)
    call("nvmlDeviceGetRemappedRows", n.nvmlDeviceGetRemappedRows, h)
    reasons = getattr(n, "nvmlDeviceGetCurrentClocksEventReasons", None) or n.nvmlDeviceGetCurrentClocksThrottleReasons
    call("nvmlDeviceGetCurrentClocksEventReasons", reasons, h)
    width = call("nvmlDeviceGetCurrPcieLinkWidth", n.nvmlDeviceGetCurrPcieLinkWidth, h)
    call("nvmlDeviceGetMaxPcieLinkWidth", n.nvmlDeviceGetMaxPcieLinkWidth, h)
    call("nvmlDeviceGetCurrPcieLinkGeneration", n.nvmlDeviceGetCurrPcieLinkGeneration, h)
    call("nvmlDeviceGetMaxPcieLinkGeneration", n.nvmlDeviceGetMaxPcieLinkGeneration, h)
    call("nvmlDeviceGetPcieReplayCounter", n.nvmlDeviceGetPcieReplayCounter, h)
    call("nvmlDeviceGetPerformanceState", n.nvmlDeviceGetPerformanceState, h)
    call("nvmlDeviceGetPersistenceMode", n.nvmlDeviceGetPersistenceMode, h)
    call("nvmlDeviceGetNvLinkState(0)", n.nvmlDeviceGetNvLinkState, h, 0)
    supported = call("nvmlDeviceGetSupportedEventTypes", n.nvmlDeviceGetSupportedEventTypes, h)
    if supported is not None and supported & n.nvmlEventTypeXidCriticalError:
        es = n.nvmlEventSetCreate()
        call("nvmlDeviceRegisterEvents(Xid)", n.nvmlDeviceRegisterEvents, h, n.nvmlEventTypeXidCriticalError, es)
        call("nvmlEventSetWait_v2(0 ms) (TIMEOUT: none queued)", n.nvmlEventSetWait_v2, es, 0)
        n.nvmlEventSetFree(es)
    mine = health.get(i, {})
    if unc is not None:
        ok = mine.get("ecc_uncorrected") == unc
        print(("PASS " if ok else "FAIL ") + "GPU %d: the agent's ecc_uncorrected %s = NVML's %s"
              % (i, mine.get("ecc_uncorrected"), unc))
        if not ok:
            failed.append("ecc %d" % i)
    print("     agent health: %s (PCIe width now %s)" % (json.dumps(mine, sort_keys=True), width))
n.nvmlShutdown()
sys.exit(1 if failed else 0)
EOF
$PY scripts/gpu_compare.py "$OUT/agent.jsonl" "$OUT/smi.last.csv" || STATUS=1
[ "$STATUS" = 0 ] && echo "gpu_check: every check passed" || echo "gpu_check: FAILED (frames in $OUT)"
exit "$STATUS"
