#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# kprism's and HAProxy's own CPU, system calls and TCP segments per request and per connection, both up at once (`make bench-cpu`).
#
# kprism and HAProxy (mode tcp, nbthread 1) run side by side in front of the same three local nginx
# backends (one nginx http instance, worker_processes 1, `return 200 "ok\n"`, on three loopback
# ports), kprism on 127.0.0.1:$KPRISM_PORT, HAProxy on 127.0.0.1:$HAPROXY_PORT. Two workloads:
#   ka     wrk -t1 -c$CONNS keep-alive requests
#   close  the same with `Connection: close`: a new client and upstream connection per request
# CPU: wrk runs SLICE-second slices against one proxy then the other in ABBA order (kprism,
# HAProxy, HAProxy, kprism), ROUNDS times per workload, so drift in the machine's load falls on
# both alike; each proxy's utime + stime (/proc/PID/stat) over each of its slices is summed and
# divided by the requests wrk completed through it in those slices.
# System calls: counted, not timed (the count does not depend on the machine's load): `strace -c
# -f -p PID` on one proxy at a time while wrk runs SYSCALL_SECONDS through it, divided by the
# requests wrk completed; the top calls of each are listed. TCP segments: the machine's OutSegs
# (/proc/net/snmp) over another SYSCALL_SECONDS of wrk through one proxy, divided by the requests:
# every segment of wrk, the proxy and nginx, so on a quiet machine what one proxy makes them send.
# The floor (FLOOR_BIN, bench/splice_floor, built by `make bench-cpu`): the least CPU a user-space
# splice can spend per keep-alive request on this machine, with epoll and with io_uring, up beside
# the two proxies and measured in the same rounds (its slices sit between HAProxy's: kprism,
# HAProxy, epoll, io_uring, io_uring, epoll, HAProxy, kprism), so the ratio has a reference point.
#
# Usage: bench/cpu_compare.sh [--syscalls-only | --cpu-only]
# Environment (defaults): KPRISM_BIN (build/kprism), SLICE (3), ROUNDS (10), CONNS (32),
#   SYSCALL_SECONDS (2), KPRISM_PORT (7445), HAPROXY_PORT (7447), ADMIN_PORT (17446),
#   FLOOR_BIN (unset: no floor), FLOOR_PORTS ("7448 7449": its epoll and io_uring instances),
#   BACKEND_PORTS ("17451 17452 17453"), NICE (-10 as root, else 0), PERF_DIR (unset: when set,
#   `perf record -e cpu-clock -g` of each proxy during one extra slice per workload goes there),
#   PLACEMENT (unset: the scheduler places every process; "W N P": wrk on CPU W, nginx on CPU N,
#   both proxies on CPU P, with taskset; e.g. "0 0 1" gives the proxy a CPU of its own).
# The ratio's spread within the run: each ABBA round's own ratio is printed, and a 90% interval
# of the run's ratio over its rounds (2000 resamples of the rounds, fixed seed; "-" under 5
# rounds). It tells how far this run's rounds scatter, not how far another run may land.
# Needs: haproxy, nginx, wrk, curl, strace (`make bench-deps`).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
root=$(cd "$here/.." && pwd)
do_cpu=1; do_sys=1
case "${1:-}" in
--syscalls-only) do_cpu=0 ;;
--cpu-only) do_sys=0 ;;
"") ;;
*) echo "usage: $0 [--syscalls-only | --cpu-only]" >&2; exit 2 ;;
esac

KPRISM_BIN=${KPRISM_BIN:-$root/build/kprism}
SLICE=${SLICE:-3}; ROUNDS=${ROUNDS:-10}; CONNS=${CONNS:-32}; SYSCALL_SECONDS=${SYSCALL_SECONDS:-2}
KPRISM_PORT=${KPRISM_PORT:-7445}; HAPROXY_PORT=${HAPROXY_PORT:-7447}; ADMIN_PORT=${ADMIN_PORT:-17446}
read -r -a BACKEND_PORTS <<<"${BACKEND_PORTS:-17451 17452 17453}"
FLOOR_BIN=${FLOOR_BIN:-}
read -r -a FLOOR_PORTS <<<"${FLOOR_PORTS:-7448 7449}"
FLOORS=(); [ -z "$FLOOR_BIN" ] || FLOORS=(floor-epoll floor-uring)
if [ "$(id -u)" = 0 ]; then NICE=${NICE:--10}; else NICE=${NICE:-0}; fi
MAX_CONNS=9000

die() { echo "cpu_compare.sh: $*" >&2; exit 1; }
for tool in haproxy nginx wrk curl ss strace ${PLACEMENT:+taskset}; do
    command -v "$tool" >/dev/null || die "$tool not found (make bench-deps)"
done
PIN_WRK=(); PIN_NGINX=(); PIN_PROXY=()
if [ -n "${PLACEMENT:-}" ]; then
    read -r cpu_w cpu_n cpu_p cpu_extra <<<"$PLACEMENT"
    for c in "${cpu_w:-}" "${cpu_n:-}" "${cpu_p:-}"; do
        [[ "$c" =~ ^[0-9]+$ ]] && [ -z "${cpu_extra:-}" ] ||
            { echo "cpu_compare.sh: PLACEMENT must be three CPU numbers: wrk nginx proxies" >&2; exit 2; }
        taskset -c "$c" true 2>/dev/null ||
            { echo "cpu_compare.sh: PLACEMENT: CPU $c is not one this process may run on ($(taskset -cp $$ | sed 's/.*: //'))" >&2; exit 2; }
    done
    PIN_WRK=(taskset -c "$cpu_w"); PIN_NGINX=(taskset -c "$cpu_n"); PIN_PROXY=(taskset -c "$cpu_p")
    placement="wrk on CPU $cpu_w, nginx on CPU $cpu_n, both proxies on CPU $cpu_p"
else
    placement="left to the scheduler"
fi

[ -x "$KPRISM_BIN" ] || die "kprism binary $KPRISM_BIN not found (make, or set KPRISM_BIN)"
[ -z "$FLOOR_BIN" ] || [ -x "$FLOOR_BIN" ] || die "FLOOR_BIN $FLOOR_BIN not found (make build/bench/splice_floor)"
[ "$ROUNDS" -ge 1 ] && [ "$ROUNDS" -le 100 ] || die "ROUNDS must be 1..100"
ulimit -n "$(ulimit -Hn)"

tmp=$(mktemp -d /dev/shm/kprism-cpu.XXXXXX 2>/dev/null || mktemp -d)
chmod 755 "$tmp"
PIDS=()
cleanup() {
    stop_pids "${PIDS[@]}"
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
say() { printf '# %s\n' "$*"; }

listening() { [ -n "$(ss -Htln "sport = :$1" 2>/dev/null)" ]; }
wait_listen() { # port seconds
    local end=$((SECONDS + $2))
    until listening "$1"; do
        [ $SECONDS -lt $end ] || return 1
        sleep 0.05
    done
}
wait_http() { # port seconds: a 200 answer through whatever listens there
    local end=$((SECONDS + $2))
    until [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "http://127.0.0.1:$1/" 2>/dev/null)" = 200 ]; do
        [ $SECONDS -lt $end ] || return 1
        sleep 0.05
    done
}
cpu_ticks() { # utime + stime of one pid, clock ticks
    local f
    f=$(cat "/proc/$1/stat") || die "process $1 is gone"
    f=${f##*) }
    read -r -a a <<<"$f"
    echo $((a[11] + a[12]))
}
CLK_TCK=$(getconf CLK_TCK)

for p in "$KPRISM_PORT" "$HAPROXY_PORT" "${BACKEND_PORTS[@]}" "$ADMIN_PORT" ${FLOORS[@]:+"${FLOOR_PORTS[@]}"}; do
    listening "$p" && die "127.0.0.1:$p is already in use"
done
[ "$NICE" = 0 ] || renice -n "$NICE" -p $$ >/dev/null || die "cannot renice to $NICE (NICE=0 to run as is)"

cp "$KPRISM_BIN" "$tmp/kprism" # a snapshot: the binary may be rebuilt while this runs
echo "# kprism vs HAProxy: CPU, system calls and TCP segments per request and per connection, both up at once"
say "date: $(date -u '+%Y-%m-%d %H:%M UTC'), load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
say "machine: nproc=$(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), kernel $(uname -r)"
say "kprism: $("$tmp/kprism" --version) (sha256 $(sha256sum "$tmp/kprism" | cut -c1-12)); $(haproxy -v | head -1 | cut -d' ' -f1-3)"
say "slices: ${SLICE}s, ABBA x $ROUNDS per workload; wrk -t1 -c$CONNS; strace: ${SYSCALL_SECONDS}s per proxy and workload"
say "placement: $placement"
[ -z "$FLOOR_BIN" ] || say "floor: $FLOOR_BIN (epoll on ${FLOOR_PORTS[0]}, io_uring on ${FLOOR_PORTS[1]}), keep-alive slices between HAProxy's"

# --- backends and proxies ----------------------------------------------------------------------
{
    echo "worker_processes 1; worker_rlimit_nofile $(ulimit -n); daemon off; master_process on;"
    echo "pid $tmp/backend.pid; error_log $tmp/backend.err warn;"
    echo "events { worker_connections 16384; }"
    echo "http {"
    echo "  access_log off; server_tokens off; default_type text/plain;"
    echo "  keepalive_requests 100000000; keepalive_timeout 300s;"
    for d in client_body proxy fastcgi uwsgi scgi; do echo "  ${d}_temp_path $tmp/${d}_temp;"; done
    echo "  server {"
    for p in "${BACKEND_PORTS[@]}"; do echo "    listen 127.0.0.1:$p;"; done
    echo "    location = / { return 200 \"ok\\n\"; }"
    echo "  }"
    echo "}"
} >"$tmp/backend.conf"
"${PIN_NGINX[@]}" nginx -e "$tmp/backend.err" -p "$tmp" -c "$tmp/backend.conf" &
PIDS+=($!)
for p in "${BACKEND_PORTS[@]}"; do wait_listen "$p" 10 || die "backend nginx not listening on $p"; done
# The master listens before it forks its worker: wait for the worker too, so that it is stopped.
end=$((SECONDS + 10))
until workers=$(pgrep -P "${PIDS[0]}"); do
    [ $SECONDS -lt $end ] || die "backend nginx started no worker"
    sleep 0.05
done
PIDS+=($workers)

haproxy_tcp_cfg "$HAPROXY_PORT" "$MAX_CONNS" "$tmp/haproxy.pid" "${BACKEND_PORTS[@]}" >"$tmp/haproxy.cfg"
"${PIN_PROXY[@]}" haproxy -db -f "$tmp/haproxy.cfg" 2>"$tmp/haproxy.log" &
haproxy_pid=$!
PIDS+=($haproxy_pid)
endpoints=$(printf '127.0.0.1:%s,' "${BACKEND_PORTS[@]}"); endpoints=${endpoints%,}
# No client certificate: checks paused, connections to every endpoint (as in bench/compare.sh).
"${PIN_PROXY[@]}" "$tmp/kprism" --endpoints "$endpoints" --bind-port "$KPRISM_PORT" --health-port "$ADMIN_PORT" \
    --client-cert "$tmp/no-client.pem" --client-key "$tmp/no-client.pem" --ca-file "$tmp/no-ca.crt" \
    --connect-timeout 2s --max-connections $MAX_CONNS 2>"$tmp/kprism.log" &
kprism_pid=$!
PIDS+=($kprism_pid)
wait_http "$HAPROXY_PORT" 10 || die "HAProxy does not answer: $(tail -3 "$tmp/haproxy.log")"
wait_http "$KPRISM_PORT" 10 || die "kprism does not answer: $(tail -3 "$tmp/kprism.log")"

declare -A PID=([kprism]=$kprism_pid [haproxy]=$haproxy_pid) PORT=([kprism]=$KPRISM_PORT [haproxy]=$HAPROXY_PORT)
for i in "${!FLOORS[@]}"; do
    "${PIN_PROXY[@]}" "$FLOOR_BIN" "${FLOORS[$i]#floor-}" "${FLOOR_PORTS[$i]}" "${BACKEND_PORTS[@]}" 2>"$tmp/${FLOORS[$i]}.log" &
    PID[${FLOORS[$i]}]=$!; PORT[${FLOORS[$i]}]=${FLOOR_PORTS[$i]}
    PIDS+=($!)
    wait_http "${FLOOR_PORTS[$i]}" 10 || die "${FLOORS[$i]} does not answer: $(tail -3 "$tmp/${FLOORS[$i]}.log")"
done
declare -A TICKS REQS ERRS t_before n_before

wrk_run() { # proxy mode seconds -> sets WRK_REQS, WRK_ERRS
    local extra=() out
    [ "$2" = close ] && extra=(-H 'Connection: close')
    out=$("${PIN_WRK[@]}" wrk -t1 -c"$CONNS" -d"$3s" "${extra[@]}" "http://127.0.0.1:${PORT[$1]}/")
    WRK_REQS=$(awk '/requests in/ {print $1}' <<<"$out")
    WRK_ERRS=$(awk '/Socket errors:/ {gsub(",", ""); e += $4 + $6 + $8 + $10} /Non-2xx/ {e += $5} END {print e + 0}' <<<"$out")
    [ -n "$WRK_REQS" ] || { echo "$out" >&2; die "cannot parse wrk output ($1 $2)"; }
}
slice() { # proxy mode
    local t0 t1
    t0=$(cpu_ticks "${PID[$1]}")
    wrk_run "$1" "$2" "$SLICE"
    t1=$(cpu_ticks "${PID[$1]}")
    TICKS[$1.$2]=$((${TICKS[$1.$2]:-0} + t1 - t0))
    REQS[$1.$2]=$((${REQS[$1.$2]:-0} + WRK_REQS))
    ERRS[$1.$2]=$((${ERRS[$1.$2]:-0} + WRK_ERRS))
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
us_per_request() { # proxy mode: its CPU µs per request over its slices
    awk -v t="${TICKS[$1.$2]}" -v n="${REQS[$1.$2]}" -v hz="$CLK_TCK" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }'
}

declare -A SYS SYSTOP INTERVAL
# stdin: one line per ABBA round, "kprism_ticks kprism_requests haproxy_ticks haproxy_requests".
# Prints the 5th and 95th percentile of the pooled ratio over rounds drawn with replacement, or
# "-" for fewer than 5 rounds (too few distinct resamples to mean anything).
bootstrap_interval() {
    awk 'BEGIN { srand(1) }
        { kt[NR] = $1; kn[NR] = $2; ht[NR] = $3; hn[NR] = $4 }
        END {
            for (b = 0; b < 2000; b++) {
                a = c = d = e = 0
                for (i = 0; i < NR; i++) { j = int(rand() * NR) + 1; a += kt[j]; c += kn[j]; d += ht[j]; e += hn[j] }
                if (NR >= 5 && c > 0 && d > 0 && e > 0) printf "%.4f\n", (a / c) / (d / e)
            }
        }' | sort -n | awk '{ v[NR] = $1 } END { if (NR) printf "%.2f to %.2f", v[int(NR * 0.05) + 1], v[int(NR * 0.95)]; else print "-" }'
}
syscalls() { # proxy mode: strace -c while wrk runs; per request
    local out=$tmp/strace.$1.$2 spid end
    strace -c -f -p "${PID[$1]}" -o "$out" 2>"$out.err" &
    spid=$!
    end=$((SECONDS + 10))
    until grep -q attached "$out.err" 2>/dev/null; do
        [ $SECONDS -lt $end ] || die "strace did not attach to $1"
        sleep 0.05
    done
    wrk_run "$1" "$2" "$SYSCALL_SECONDS"
    kill -INT "$spid"
    wait "$spid" 2>/dev/null || true
    [ "$WRK_REQS" -gt 0 ] || die "no requests through $1 under strace"
    ERRS[$1.$2.strace]=$WRK_ERRS
    # strace -c: "% time seconds usecs/call calls errors syscall"; the errors column may be empty.
    # Per keep-alive request: over wrk's completed requests. Per connection: over the connections
    # accepted while strace ran (accept4 calls less its errors, EAGAIN), so that the connections
    # still in flight when wrk stops count on both sides of the division.
    local n=$WRK_REQS
    if [ "$2" = close ]; then
        n=$(awk '$NF == "accept4" { print $4 - (NF == 6 ? $5 : 0) }' "$out")
        [ "${n:-0}" -gt 0 ] || die "no accept4 in $1's strace"
    fi
    SYS[$1.$2]=$(awk -v n="$n" '$NF == "total" { printf "%.2f", $4 / n }' "$out")
    SYSTOP[$1.$2]=$(awk -v n="$n" '/^[ ]*[0-9.]+ +[0-9.]+ +[0-9]+ +[0-9]+/ && $NF != "total" { printf "%s %.2f\n", $NF, $4 / n }' "$out" |
        sort -k2,2nr | awk '$2 >= 0.01 { printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2 }')
}

out_segs() { awk '$1 == "Tcp:" { if (!h) { for (i = 2; i <= NF; i++) if ($i == "OutSegs") c = i; h = 1 } else print $c }' /proc/net/snmp; }
segments() { # proxy mode: TCP segments sent on the machine while wrk runs through it, per request
    local s0 s1
    s0=$(out_segs)
    wrk_run "$1" "$2" "$SYSCALL_SECONDS"
    s1=$(out_segs)
    [ "$WRK_REQS" -gt 0 ] || die "no requests through $1 while counting segments"
    ERRS[$1.$2.segments]=$WRK_ERRS
    SEGS[$1.$2]=$(awk -v d=$((s1 - s0)) -v n="$WRK_REQS" 'BEGIN { printf "%.2f", d / n }')
}

declare -A SEGS
if [ $do_sys = 1 ]; then
    for mode in ka close; do
        for p in kprism haproxy; do syscalls "$p" "$mode"; segments "$p" "$mode"; done
    done
fi
if [ $do_cpu = 1 ]; then
    for mode in ka close; do
        floors=(); [ "$mode" = ka ] && floors=("${FLOORS[@]}")
        for p in kprism haproxy "${floors[@]}"; do wrk_run "$p" "$mode" 1; done # warm-up, not counted
        round_ratios=(); rounds=()
        for r in $(seq "$ROUNDS"); do
            for p in kprism haproxy; do t_before[$p]=${TICKS[$p.$mode]:-0}; n_before[$p]=${REQS[$p.$mode]:-0}; done
            for p in kprism haproxy "${floors[@]}" $(printf '%s\n' "${floors[@]}" | tac) haproxy kprism; do slice "$p" "$mode"; done
            # This round's own ratio (its two slices each), to show how far one round strays.
            rounds+=("$((TICKS[kprism.$mode] - t_before[kprism])) $((REQS[kprism.$mode] - n_before[kprism])) $((TICKS[haproxy.$mode] - t_before[haproxy])) $((REQS[haproxy.$mode] - n_before[haproxy]))")
            round_ratios+=("$(awk '{ if ($2 > 0 && $3 > 0 && $4 > 0) printf "%.3f", ($1 / $2) / ($3 / $4); else print "nan" }' <<<"${rounds[-1]}")")
        done
        INTERVAL[$mode]=$(printf '%s\n' "${rounds[@]}" | bootstrap_interval)
        say "$mode: kprism ${REQS[kprism.$mode]} requests in $((2 * ROUNDS)) slices, HAProxy ${REQS[haproxy.$mode]}; load average now $(cut -d' ' -f1-3 /proc/loadavg)"
        say "$mode: CPU ratio of each ABBA round, sorted: $(printf '%s\n' "${round_ratios[@]}" | sort -n | tr '\n' ' ')"
        say "$mode: 90% interval of the CPU ratio over this run's rounds (2000 resamples): ${INTERVAL[$mode]}"
        if [ -n "${PERF_DIR:-}" ]; then
            mkdir -p "$PERF_DIR"
            for p in kprism haproxy; do
                perf record -q -e cpu-clock -g -p "${PID[$p]}" -o "$PERF_DIR/$p.$mode.data" 2>/dev/null &
                ppid=$!
                sleep 0.5
                wrk_run "$p" "$mode" "$SLICE"
                kill -INT "$ppid"; wait "$ppid" 2>/dev/null || true
            done
        fi
    done
fi

# --- the table ---------------------------------------------------------------------------------
echo
echo "| per request | kprism | HAProxy | kprism / HAProxy |"
echo "|---|---|---|---|"
for mode in ka close; do
    what=$([ $mode = ka ] && echo "keep-alive request" || echo "new connection (one request each)")
    if [ $do_cpu = 1 ]; then
        k=$(us_per_request kprism "$mode"); h=$(us_per_request haproxy "$mode")
        echo "| CPU µs per $what | $k | $h | $(ratio "$k" "$h") (over its rounds, 90%: ${INTERVAL[$mode]}) |"
    fi
    if [ $do_sys = 1 ]; then
        echo "| system calls per $what | ${SYS[kprism.$mode]} | ${SYS[haproxy.$mode]} | $(ratio "${SYS[kprism.$mode]}" "${SYS[haproxy.$mode]}") |"
        echo "| TCP segments per $what, all three parties | ${SEGS[kprism.$mode]} | ${SEGS[haproxy.$mode]} | $(ratio "${SEGS[kprism.$mode]}" "${SEGS[haproxy.$mode]}") |"
    fi
done
if [ $do_cpu = 1 ] && [ ${#FLOORS[@]} -gt 0 ]; then
    echo
    echo "| the floor: bench/splice_floor, keep-alive | CPU µs per request | / HAProxy's | kprism / the floor |"
    echo "|---|---|---|---|"
    k=$(us_per_request kprism ka); h=$(us_per_request haproxy ka)
    for f in "${FLOORS[@]}"; do
        u=$(us_per_request "$f" ka)
        echo "| ${f#floor-} | $u | $(ratio "$u" "$h") | $(ratio "$k" "$u") |"
    done
fi
if [ $do_sys = 1 ]; then
    echo
    for mode in ka close; do
        for p in kprism haproxy; do echo "- $p, $mode, per $([ $mode = ka ] && echo request || echo connection): ${SYSTOP[$p.$mode]}"; done
    done
fi
bad=0
for k in "${!ERRS[@]}"; do
    [ "${ERRS[$k]}" = 0 ] || { echo "FAIL: $k: ${ERRS[$k]} wrk errors or non-2xx answers" >&2; bad=1; }
done
exit $bad
