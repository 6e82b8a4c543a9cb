#!/bin/bash
# Container entrypoint of a demo instance: one-time setup, then the benchmark in the background.
# Like many real images it ends in `wait` on a keep-alive child, so the container stays up (and this
# shell sits in do_wait) after the benchmark has gone.
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T="$ROOT/tmp"
mkdir -p "$T" "$ROOT/data/params" "$ROOT/data/32gbench" "$ROOT/run"
exec >>"$T/setup.log" 2>&1 </dev/null
echo "[setup] instance $(cat "$ROOT/etc/instance-id") $(cat "$ROOT/etc/gpu-summary")"
PARAMS="$ROOT/data/params/v28-stacked-proof-of-replication-merkletree-poseidon_hasher-8-8-0.params"
if [ -s "$PARAMS" ]; then
    echo "[setup] proof parameters present (32GiB), skipping fetch"
else
    echo "[setup] fetching proof parameters (32GiB)"
    printf '\n'
    DEMO_CURL_SECONDS=4 curl -# -fL -o "$PARAMS" \
        "https://proofs.filecoin.io/v28-stacked-proof-of-replication-merkletree-poseidon_hasher-8-8-0.params" \
        || { echo "[setup] parameter fetch failed"; exit 1; }
fi
echo "[setup] parameters ok"
echo "[setup] Starting benchmark"
"$ROOT/bin/benchmark.sh" >>"$T/benchmark-full.log" 2>&1 &
sleep infinity &
wait
