#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Bulk TCP throughput, direct vs through kprism, side by side in one run (socat source and sink).
# Usage: bench/bulk.sh [MiB per transfer] [runs] [kprism binary]
set -euo pipefail
mib=${1:-4096}; runs=${2:-3}; bin=${3:-build/kprism}
sink=17801; kp=17845
socat -b 262144 -u TCP-LISTEN:$sink,reuseaddr,fork OPEN:/dev/null &
sink_pid=$!
"$bin" --endpoints 127.0.0.1:$sink --bind-port $kp --health-port $((kp + 1)) 2>/dev/null &
kp_pid=$!
trap 'kill $sink_pid $kp_pid 2>/dev/null; wait 2>/dev/null' EXIT
for _ in $(seq 50); do socat -u /dev/null TCP:127.0.0.1:$kp 2>/dev/null && break; sleep 0.1; done
xfer() {  # port -> MiB/s
    local t0 t1
    t0=$(date +%s.%N)
    socat -b 262144 -u "/dev/zero,readbytes=$((mib * 1048576))" TCP:127.0.0.1:$1
    t1=$(date +%s.%N)
    echo "$mib / ($t1 - $t0)" | bc -l
}
for r in $(seq "$runs"); do
    d=$(xfer $sink); k=$(xfer $kp)
    printf 'run %d: direct %.0f MiB/s  kprism %.0f MiB/s  ratio %.2f\n' "$r" "$d" "$k" "$(echo "$k / $d" | bc -l)"
done
