#!/usr/bin/env bash
# Check the agent's GPU sampler against nvidia-smi on a machine with a real NVIDIA GPU.
# Needs only python3, this repo, and nvidia-ml-py + psutil (installed into .gpu-check-venv when missing).
#   scripts/gpu_check.sh [SECONDS]      (default 20)
set -euo pipefail
cd "$(dirname "$0")/.."
SECS="${1:-20}"
OUT="${OUT:-$(mktemp -d)}"
PY=python3
if ! $PY -c 'import pynvml, psutil' 2>/dev/null; then
  if [ ! -x .gpu-check-venv/bin/python ]; then
    python3 -m venv .gpu-check-venv
    .gpu-check-venv/bin/pip install -q nvidia-ml-py psutil
  fi
  PY=.gpu-check-venv/bin/python
fi
command -v nvidia-smi >/dev/null || { echo "nvidia-smi not found"; exit 2; }
Q=index,name,uuid,utilization.gpu,utilization.memory,memory.used,memory.total,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.mem,fan.speed
echo "running the agent for ${SECS}s (frames in $OUT/agent.jsonl)"
timeout "$((SECS + 10))" $PY -m console.agent --no-stdin --max-seconds "$SECS" --config-file /dev/stdin \
  >"$OUT/agent.jsonl" 2>"$OUT/agent.err" <<<'{"watch_dirs": [], "logs": []}' &
AGENT=$!
: >"$OUT/smi.csv"
for _ in $(seq 1 "$SECS"); do
  nvidia-smi --query-gpu="$Q" --format=csv,noheader,nounits >"$OUT/smi.last.csv" 2>>"$OUT/smi.err" || true
  cat "$OUT/smi.last.csv" >>"$OUT/smi.csv"
  sleep 1
done
wait "$AGENT" || true
echo "--- last agent gpu frame"
grep '"type":"gpu"' "$OUT/agent.jsonl" | tail -1 || cat "$OUT/agent.err"
echo "--- last nvidia-smi reading"
cat "$OUT/smi.last.csv"
echo "--- agent frames: $(grep -c '"type":"gpu"' "$OUT/agent.jsonl" || true) gpu, $(wc -c <"$OUT/agent.jsonl") bytes"
$PY scripts/gpu_compare.py "$OUT/agent.jsonl" "$OUT/smi.last.csv"
