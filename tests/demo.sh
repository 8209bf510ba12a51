#!/usr/bin/env bash
# Self-contained demo: three stand-in apiservers on loopback with kprism in front of them.
# Shows where connections go, kills one stand-in, and shows traffic carrying on.
# Usage: tests/demo.sh [BUILD_DIR]   (DEMO_HOLD=0 exits after the scripted part)
set -euo pipefail
build=${1:-build}
port=${DEMO_PORT:-7445}
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

for i in 1 2 3; do
    "$build/kprism-standin" --listen "127.0.0.1:$((16442 + i))" --name "apiserver-$i" >/dev/null &
    pids+=($!)
done
"$build/kprism" --endpoints 127.0.0.1:16443,127.0.0.1:16444,127.0.0.1:16445 --bind-port "$port" \
    --health-port $((port + 1)) --policy least-connections &
kprism_pid=$!
pids+=($kprism_pid)

get() { curl -s --max-time 3 "http://127.0.0.1:$port/$1" || echo "request failed"; }
for _ in $(seq 50); do curl -s --max-time 1 -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.1; done

echo
echo "== six requests through kprism on 127.0.0.1:$port"
for i in $(seq 6); do printf 'request %2d -> %s\n' "$i" "$(get "request-$i")"; done
echo
echo "== apiserver-2 is killed (SIGKILL); kprism retries its connects on the others"
kill -9 "${pids[1]}"; wait "${pids[1]}" 2>/dev/null || true
for i in $(seq 7 12); do printf 'request %2d -> %s\n' "$i" "$(get "request-$i")"; done
echo
if [ "${DEMO_HOLD:-1}" = 1 ]; then
    echo "== kprism keeps running: try 'curl http://127.0.0.1:$port/' - Ctrl-C stops the demo"
    wait "$kprism_pid"
fi
