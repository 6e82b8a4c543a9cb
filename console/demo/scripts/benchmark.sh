#!/bin/bash
# The 32 GiB proving benchmark of a demo instance: a cuzk-daemon plus the cuzk-bench client.
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T="$ROOT/tmp"
SCENARIO=$(cat "$ROOT/etc/scenario")
C1="$ROOT/data/32gbench/c1.json"
cd "$ROOT" || exit 1

cuzk-daemon --config "$T/cuzk-bench-config.toml" >>"$T/cuzk-bench-daemon.log" 2>&1 &
DAEMON=$!
stop_daemon() { kill "$DAEMON" 2>/dev/null; wait "$DAEMON" 2>/dev/null; }
trap 'stop_daemon; exit 143' TERM INT

if [ "$SCENARIO" = "gpu-idle" ]; then
    # the daemon is up, but the scheduler never hands this box any work
    while :; do
        echo "$(date -u +%Y-%m-%dT%H:%M:%SZ) bench: daemon ready, 0 sectors assigned (scheduler queue empty), next poll in 60s"
        sleep 60 &
        wait $!
    done
fi

if [ ! -s "$C1" ]; then
    echo "C1 output not found at $C1"
    echo "Downloading from https://example-bucket.r2.dev/c1.json ..."
    if [ "$SCENARIO" = "download-stalled" ]; then
        export DEMO_CURL_STALL_AT=37.2
    fi
    DEMO_CURL_SECONDS=3 DEMO_CURL_OPENER=1 curl -# -fL -o "$C1" https://example-bucket.r2.dev/c1.json
    rc=$?
    if [ $rc -ne 0 ]; then
        echo "download of c1.json failed (curl exit $rc), aborting benchmark"
        stop_daemon
        exit 1
    fi
fi

echo "Running warmup proof..."
if ! cuzk-bench warmup --c1 "$C1"; then
    echo "warmup proof failed, aborting benchmark"
    stop_daemon
    exit 1
fi
echo "warmup proof ok, starting proving loop"
cuzk-bench prove --c1 "$C1" --loop
rc=$?
echo "proving loop ended (exit $rc), stopping daemon"
stop_daemon
exit $rc
