#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# kprism vs HAProxy vs nginx stream, side by side in one run (`make bench-compare`).
#
# The same workloads go direct (no proxy) and through kprism, HAProxy (mode tcp, nbthread 1) and
# nginx stream (worker_processes 1), each in turn listening on 127.0.0.1:$LISTEN_PORT and balancing
# at random over the same three local HTTP backends: one nginx http instance (worker_processes 1,
# access_log off, `return 200 "ok\n"`, a bulk file on tmpfs served with sendfile) listening on
# three loopback ports, like three apiservers. Every proxy: one thread/worker, 2 s connect timeout,
# no per-connection logging, at most 9000 client connections, no active health checks (kprism
# runs without a client certificate, so its readiness checks are paused and it sends connections
# to every endpoint, as during kubelet TLS bootstrap; HAProxy servers have no `check`; nginx
# stream has only its passive max_fails).
#
# Workloads (each run, each target; the order of targets rotates from run to run):
#   idle   IDLE_CONNS connections that each did one GET and stay open: proxy VmRSS before and
#          with them (nginx: master + worker), and how they spread over the three backends
#   ka     wrk -t1 -c32 -d$DURATION --latency, keep-alive: requests/s, p50, p99, proxy CPU/request
#   close  the same with `Connection: close`: a new connection per request, connections/s
#   bulk   BULK_REPS curl downloads of a BULK_MIB MiB file (random bytes) to /dev/null, one after
#          the other: MiB/s over the lot; every byte count checked
# then, kprism only, the CPU cost of mTLS /readyz probes (build/bench/probe_cost, `make
# bench-probes`) with and without TLS session resumption. Medians over RUNS runs; ONE table.
#
# Usage: bench/compare.sh [--smoke]
#   --smoke: RUNS=1, 1 s wrk runs, 16 MiB bulk, 200 idle connections, 1 s probes; no timing claims:
#            asserts that every proxy returns the backend's exact response (headers but Date, and
#            body), wrk sees no errors and only 2xx, bulk bytes arrive complete (sha256), every
#            idle connection got the right answer, the probe benchmark ran; exit 1 on a mismatch.
# Environment (defaults): KPRISM_BIN (build/kprism), KPRISM_STANDIN (build/kprism-standin),
#   PROBE_COST (build/bench/probe_cost; "none" skips the probes), RUNS (3), DURATION (10),
#   BULK_MIB (512), BULK_REPS (3), IDLE_CONNS (5000), PROBE_SECONDS (10), LISTEN_PORT (7445),
#   BACKEND_PORTS ("17451 17452 17453"), ADMIN_PORT (17446, kprism's admin endpoint),
#   TARGETS ("direct kprism haproxy nginx"), QUIET_BUSY (20) and QUIET_WAIT (120): before each
#   target's turn wait up to QUIET_WAIT s for a second in which the CPUs are < QUIET_BUSY % busy;
#   OTHERS_MAX (10) and RETRIES (2): a wrk or bulk measurement during which other processes took
#   more than OTHERS_MAX % of the CPUs is repeated after such a wait, at most RETRIES times, and
#   flagged below the table if it stays disturbed. NICE (-10 as root, else 0): the niceness of this
#   script, of everything it starts and (autogroup scheduling) of its session's autogroup.
# Needs: haproxy, nginx, libnginx-mod-stream, wrk, curl, python3 (`make bench-deps`); run as root
# or as a user who may start nginx with its prefix in a temporary directory.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
root=$(cd "$here/.." && pwd)
smoke=0
case "${1:-}" in
--smoke) smoke=1 ;;
"") ;;
*) echo "usage: $0 [--smoke]" >&2; exit 2 ;;
esac

KPRISM_BIN=${KPRISM_BIN:-$root/build/kprism}
KPRISM_STANDIN=${KPRISM_STANDIN:-$root/build/kprism-standin}
PROBE_COST=${PROBE_COST:-$root/build/bench/probe_cost}
LISTEN_PORT=${LISTEN_PORT:-7445}
read -r -a BACKEND_PORTS <<<"${BACKEND_PORTS:-17451 17452 17453}"
ADMIN_PORT=${ADMIN_PORT:-17446}
read -r -a TARGETS <<<"${TARGETS:-direct kprism haproxy nginx}"
if [ "$smoke" = 1 ]; then
    RUNS=${RUNS:-1}; DURATION=${DURATION:-1}; BULK_MIB=${BULK_MIB:-16}; IDLE_CONNS=${IDLE_CONNS:-200}
    PROBE_SECONDS=${PROBE_SECONDS:-1}
else
    RUNS=${RUNS:-3}; DURATION=${DURATION:-10}; BULK_MIB=${BULK_MIB:-512}; IDLE_CONNS=${IDLE_CONNS:-5000}
    PROBE_SECONDS=${PROBE_SECONDS:-10}
fi
BULK_REPS=${BULK_REPS:-3}
QUIET_BUSY=${QUIET_BUSY:-20}; QUIET_WAIT=${QUIET_WAIT:-120}; OTHERS_MAX=${OTHERS_MAX:-10}; RETRIES=${RETRIES:-2}
# The machine may be shared: as root, everything runs at nice -10 by default (the same for every
# target), so niced builds of other users barely take CPU from the measurements.
if [ "$(id -u)" = 0 ]; then NICE=${NICE:--10}; else NICE=${NICE:-0}; fi
MAX_CONNS=9000 # client connections per proxy (kprism --max-connections, haproxy maxconn, nginx: 2 per)
STREAM_MODULE=/usr/lib/nginx/modules/ngx_stream_module.so

die() { echo "compare.sh: $*" >&2; exit 1; }
for tool in haproxy nginx wrk curl python3 ss sha256sum; do
    command -v "$tool" >/dev/null || die "$tool not found (make bench-deps)"
done
[ -f "$STREAM_MODULE" ] || die "$STREAM_MODULE not found (apt-get install libnginx-mod-stream; make bench-deps)"
[ -x "$KPRISM_BIN" ] || die "kprism binary $KPRISM_BIN not found (make, or set KPRISM_BIN)"
[ "$RUNS" -ge 1 ] && [ "$RUNS" -le 50 ] || die "RUNS must be 1..50"

# Every process gets the hard open-files limit (20000 here): 5000 idle connections are 10000 fds
# in a proxy.
ulimit -n "$(ulimit -Hn)"
[ "$(ulimit -n)" -ge $((2 * IDLE_CONNS + 100)) ] || die "open-files limit $(ulimit -n) too low for IDLE_CONNS=$IDLE_CONNS"

tmp=$(mktemp -d /dev/shm/kprism-compare.XXXXXX 2>/dev/null || mktemp -d)
chmod 755 "$tmp" # nginx workers (user nobody) read the bulk file
PIDS=() # every process started, killed at exit
AUTOGROUP_OLD=""
cleanup() {
    [ -z "$AUTOGROUP_OLD" ] || echo "$AUTOGROUP_OLD" >/proc/$$/autogroup 2>/dev/null || true
    stop_pids "${PIDS[@]}"
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say() { printf '# %s\n' "$*"; }
FAILS=0; CHECKS=0
check() { # check <ok 0/1> <what>
    CHECKS=$((CHECKS + 1))
    if [ "$1" != 1 ]; then FAILS=$((FAILS + 1)); echo "FAIL: $2" >&2; fi
}

# Polls with deadlines.
listening() { [ -n "$(ss -Htln "sport = :$1" 2>/dev/null)" ]; }
wait_listen() { # port seconds
    local end=$((SECONDS + $2))
    until (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; do
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
wait_free() { # port seconds
    local end=$((SECONDS + $2))
    while listening "$1"; do
        [ $SECONDS -lt $end ] || return 1
        sleep 0.05
    done
}
stop_pids() { # pids...: TERM, up to 5 s, then KILL
    local p alive end=$((SECONDS + 5))
    for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
    while :; do
        alive=0
        for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ $alive = 0 ] && break
        [ $SECONDS -lt $end ] || { for p in "$@"; do kill -KILL "$p" 2>/dev/null || true; done; break; }
        sleep 0.05
    done
    for p in "$@"; do wait "$p" 2>/dev/null || true; done
}
cpu_ticks() { # sum of utime+stime over pids
    local t=0 p f
    for p in "$@"; do
        f=$(cat "/proc/$p/stat" 2>/dev/null) || continue
        f=${f##*) }
        read -r -a a <<<"$f"
        t=$((t + a[11] + a[12]))
    done
    echo $t
}
CLK_TCK=$(getconf CLK_TCK)

for p in "$LISTEN_PORT" "${BACKEND_PORTS[@]}" "$ADMIN_PORT"; do
    listening "$p" && die "127.0.0.1:$p is already in use: $(ss -Htlnp "sport = :$p" | head -1)"
done

if [ "$NICE" != 0 ]; then
    renice -n "$NICE" -p $$ >/dev/null || die "cannot renice to $NICE (NICE=0 to run as is)"
    # With autogroup scheduling, niceness only counts within a session: give this session's
    # autogroup the same niceness while the script runs (restored at exit).
    if [ "$(cat /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null)" = 1 ] && [ -w /proc/$$/autogroup ]; then
        AUTOGROUP_OLD=$(sed -n 's/.* nice //p' /proc/$$/autogroup)
        echo "$NICE" >/proc/$$/autogroup 2>/dev/null || AUTOGROUP_OLD=""
    fi
fi

# --- the machine and the software -------------------------------------------------------------
cp "$KPRISM_BIN" "$tmp/kprism" # a snapshot: the binary may be rebuilt while this runs
echo "# kprism vs HAProxy vs nginx stream$([ $smoke = 1 ] && echo ' (smoke: correctness only, no timing claims)')"
say "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
say "machine: nproc=$(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), kernel $(uname -r)"
say "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
say "kprism: $("$tmp/kprism" --version) ($KPRISM_BIN, sha256 $(sha256sum "$tmp/kprism" | cut -c1-12))"
say "haproxy: $(haproxy -v | head -1)"
say "nginx: $(nginx -v 2>&1 | sed 's/^nginx version: //') + libnginx-mod-stream $(dpkg-query -W -f='${Version}' libnginx-mod-stream 2>/dev/null || echo '?')"
say "wrk: $(wrk -v 2>&1 | head -1 | awk '{print $1, $2}'), curl $(curl -V | head -1 | awk '{print $2}'), python3 $(python3 -c 'import platform; print(platform.python_version())')"
say "priority: nice $(ps -o ni= -p $$ | tr -d ' ') for this script and everything it starts$([ -n "$AUTOGROUP_OLD" ] && echo ", and for its session's autogroup ($(cat /proc/$$/autogroup))")"
say "runs=$RUNS duration=${DURATION}s bulk=${BULK_REPS}x${BULK_MIB}MiB idle_conns=$IDLE_CONNS probe_seconds=$PROBE_SECONDS listen=127.0.0.1:$LISTEN_PORT backends=${BACKEND_PORTS[*]}"

# --- the backends: one nginx http instance on three ports ---------------------------------------
bulk_file=$tmp/www/bulk.bin
mkdir -p "$tmp/www"
head -c $((BULK_MIB * 1048576)) /dev/urandom >"$bulk_file"
chmod 644 "$bulk_file"
bulk_bytes=$(stat -c %s "$bulk_file")
bulk_sha=""
[ $smoke = 1 ] && bulk_sha=$(sha256sum "$bulk_file" | cut -d' ' -f1)
{
    echo "worker_processes 1; worker_rlimit_nofile $(ulimit -n); daemon off; master_process on;"
    echo "pid $tmp/backend.pid; error_log $tmp/backend.err warn;"
    echo "events { worker_connections 16384; }"
    echo "http {"
    echo "  access_log off; server_tokens off; default_type text/plain;"
    echo "  sendfile on; tcp_nopush on; keepalive_requests 100000000; keepalive_timeout 300s;"
    for d in client_body proxy fastcgi uwsgi scgi; do echo "  ${d}_temp_path $tmp/${d}_temp;"; done
    echo "  server {"
    for p in "${BACKEND_PORTS[@]}"; do echo "    listen 127.0.0.1:$p;"; done
    echo "    location = / { return 200 \"ok\\n\"; }"
    echo "    location = /bulk.bin { root $tmp/www; }"
    echo "  }"
    echo "}"
} >"$tmp/backend.conf"
nginx -e "$tmp/backend.err" -p "$tmp" -c "$tmp/backend.conf" &
backend_pid=$!
PIDS+=("$backend_pid")
for p in "${BACKEND_PORTS[@]}"; do wait_listen "$p" 10 || die "backend nginx not listening on $p: $(cat "$tmp/backend.err")"; done
read -r -a BACKEND_PIDS <<<"$backend_pid $(pgrep -P "$backend_pid" | tr '\n' ' ')"
PIDS+=("${BACKEND_PIDS[@]:1}") # its worker, in case the master dies first
backend_csv=$(IFS=,; echo "${BACKEND_PORTS[*]}")
direct_port=${BACKEND_PORTS[0]}

# --- the proxies ------------------------------------------------------------------------------
haproxy_tcp_cfg "$LISTEN_PORT" "$MAX_CONNS" "$tmp/haproxy.pid" "${BACKEND_PORTS[@]}" >"$tmp/haproxy.cfg"
{
    echo "load_module $STREAM_MODULE;"
    echo "worker_processes 1; worker_rlimit_nofile $(ulimit -n); daemon off; master_process on;"
    echo "pid $tmp/stream.pid; error_log $tmp/stream.err warn;"
    echo "events { worker_connections $((2 * MAX_CONNS + 100)); }"
    echo "stream {"
    echo "  upstream be {"
    echo "    random;"
    for p in "${BACKEND_PORTS[@]}"; do echo "    server 127.0.0.1:$p;"; done
    echo "  }"
    echo "  server { listen 127.0.0.1:$LISTEN_PORT; proxy_pass be; proxy_connect_timeout 2s; proxy_timeout 1h; }"
    echo "}"
} >"$tmp/stream.conf"
kprism_endpoints=$(printf '127.0.0.1:%s,' "${BACKEND_PORTS[@]}"); kprism_endpoints=${kprism_endpoints%,}

TPIDS=() # the current target's processes whose RSS and CPU count
start_target() { # name; sets TPIDS and PORT
    TPIDS=()
    case $1 in
    direct) PORT=$direct_port; return 0 ;;
    kprism)
        # No client certificate: checks paused, connections to every endpoint (random policy).
        "$tmp/kprism" --endpoints "$kprism_endpoints" --bind-port "$LISTEN_PORT" --health-port "$ADMIN_PORT" \
            --client-cert "$tmp/no-client.pem" --client-key "$tmp/no-client.pem" --ca-file "$tmp/no-ca.crt" \
            --connect-timeout 2s --max-connections $MAX_CONNS 2>"$tmp/kprism.log" &
        TPIDS=($!) ;;
    haproxy)
        haproxy -db -f "$tmp/haproxy.cfg" 2>"$tmp/haproxy.log" &
        TPIDS=($!) ;;
    nginx)
        nginx -e "$tmp/stream.err" -p "$tmp" -c "$tmp/stream.conf" &
        TPIDS=($!) ;;
    esac
    PIDS+=("${TPIDS[@]}")
    PORT=$LISTEN_PORT
    wait_http "$PORT" 10 || die "$1 does not answer on $PORT: $(cat "$tmp"/*.log "$tmp/stream.err" 2>/dev/null | tail -5)"
    if [ "$1" = nginx ]; then
        local w end=$((SECONDS + 5))
        until w=$(pgrep -P "${TPIDS[0]}") && [ -n "$w" ]; do
            [ $SECONDS -lt $end ] || die "no nginx stream worker"
            sleep 0.05
        done
        read -r -a w <<<"$(tr '\n' ' ' <<<"$w")"
        TPIDS+=("${w[@]}")
        PIDS+=("${w[@]}")
    fi
    if [ "$1" = kprism ]; then
        grep -q 'health checks paused' "$tmp/kprism.log" || die "kprism did not report paused health checks: $(tail -3 "$tmp/kprism.log")"
    fi
}
stop_target() {
    [ ${#TPIDS[@]} = 0 ] && return 0
    stop_pids "${TPIDS[@]}"
    wait_free "$LISTEN_PORT" 10 || die "port $LISTEN_PORT still bound after stopping the proxy"
    TPIDS=()
}

# Results: R[target.metric] = space-separated values, one per run.
declare -A R
add() { R[$1.$2]="${R[$1.$2]:-}${R[$1.$2]:+ }$3"; }
to_us() { # wrk latency (123.45us, 1.20ms, 2.00s) -> microseconds
    awk -v v="$1" 'BEGIN { n = v + 0; if (v ~ /us$/) print n; else if (v ~ /ms$/) print n * 1000; else if (v ~ /m$/) print n * 60e6; else print n * 1e6 }'
}
# CPU used by other processes while a measurement ran: the machine's user+nice+system+irq+softirq
# ticks (/proc/stat; tick accounting charges softirq time to the interrupted task too) minus those
# of the proxy, the backend and this script's children (wrk, curl; bash `times`), as a percentage
# of all CPU time in the interval. A measurement during which others took more than OTHERS_MAX %
# is repeated after a quiet gate (below), at most RETRIES times, then kept and flagged.
child_ticks() { # sets CHILD_TICKS: user+sys of this shell's waited-for children, in clock ticks
    # `times` must run in this shell, not in $(...): a subshell has no children's times.
    times >"$tmp/times"
    CHILD_TICKS=$(awk -v hz="$CLK_TCK" 'NR == 2 { n = 0; for (i = 1; i <= 2; i++) { split($i, m, "m"); n += m[1] * 60 + m[2] } printf "%.0f", n * hz }' "$tmp/times")
}
measure_begin() {
    M0=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat)
    child_ticks
    M0_OURS=$(($(cpu_ticks "${TPIDS[@]}" "${BACKEND_PIDS[@]}") + CHILD_TICKS))
    M0_PROXY=$(cpu_ticks "${TPIDS[@]}")
}
measure_end() { # sets OTHERS (percent) and PROXY_TICKS
    local m1 ours
    m1=$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat)
    PROXY_TICKS=$(($(cpu_ticks "${TPIDS[@]}") - M0_PROXY))
    child_ticks
    ours=$(($(cpu_ticks "${TPIDS[@]}" "${BACKEND_PIDS[@]}") + CHILD_TICKS - M0_OURS))
    OTHERS=$(awk -v a="$M0" -v b="$m1" -v o="$ours" 'BEGIN { split(a, x, " "); split(b, y, " "); t = y[2] - x[2]; v = (y[1] - x[1] - o) / (t > 0 ? t : 1) * 100; printf "%.0f", (v < 0 ? 0 : v) }')
    OTHERS_LOG="$OTHERS_LOG${OTHERS_LOG:+ }$OTHERS"
}
OTHERS_LOG=""; REPEATS=0; DISTURBED=(); FLAGGED=0
addm() { # like add, but a measurement flagged as disturbed goes to metric~ (used only if no clean one)
    if [ "$FLAGGED" = 1 ]; then add "$1" "$2~" "$3"; else add "$1" "$2" "$3"; fi
}
disturbed() { # what attempt -> true if the last measurement should be repeated (after a quiet gate)
    [ $smoke = 0 ] && [ "$OTHERS" -gt "$OTHERS_MAX" ] || return 1
    if [ "$2" -gt "$RETRIES" ]; then
        DISTURBED+=("$1 (others ${OTHERS}%)")
        FLAGGED=1
        say "  (other processes took ${OTHERS}% of the CPUs meanwhile; no retries left: kept, flagged)"
        return 1
    fi
    say "  (other processes took ${OTHERS}% of the CPUs meanwhile: measuring again when the CPUs are quiet)"
    REPEATS=$((REPEATS + 1))
    quiet_gate
}
run_wrk() { # target mode(ka|close) port
    local out extra=() rps p50 p99 errs non2xx reqs attempt=0
    [ "$2" = close ] && extra=(-H 'Connection: close')
    FLAGGED=0
    while :; do
        attempt=$((attempt + 1))
        measure_begin
        out=$(wrk -t1 -c32 -d"${DURATION}s" --latency "${extra[@]}" "http://127.0.0.1:$3/")
        measure_end
        disturbed "run $run $1 $2" $attempt || break
    done
    rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
    reqs=$(awk '/requests in/ {print $1}' <<<"$out")
    p50=$(to_us "$(awk '$1 == "50%" {print $2}' <<<"$out")")
    p99=$(to_us "$(awk '$1 == "99%" {print $2}' <<<"$out")")
    errs=$(awk '/Socket errors:/ {gsub(",", ""); print $4 + $6 + $8 + $10}' <<<"$out"); errs=${errs:-0}
    non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $5}' <<<"$out"); non2xx=${non2xx:-0}
    [ -n "$rps" ] && [ -n "$p99" ] || { echo "$out" >&2; die "cannot parse wrk output ($1 $2)"; }
    addm "$1" "$2_rps" "$rps"; addm "$1" "$2_p50" "$p50"; addm "$1" "$2_p99" "$p99"
    add "$1" "$2_err" $((errs + non2xx))
    if [ ${#TPIDS[@]} -gt 0 ] && [ "${reqs:-0}" -gt 0 ]; then
        addm "$1" "$2_cpu" "$(awk -v d="$PROXY_TICKS" -v hz="$CLK_TCK" -v n="$reqs" 'BEGIN { printf "%.1f", d / hz * 1e6 / n }')"
    fi
    check "$([ $((errs + non2xx)) = 0 ] && echo 1)" "$1 $2: wrk socket errors $errs, non-2xx $non2xx"
    say "  $2: $rps req/s, p50 ${p50} us, p99 ${p99} us, errors $errs, non-2xx $non2xx (others ${OTHERS}% of the CPUs)"
}
run_bulk() { # target port
    local out code size t mibs
    if [ $smoke = 1 ]; then
        local sum
        sum=$(curl -sS --max-time 60 "http://127.0.0.1:$2/bulk.bin" | sha256sum | cut -d' ' -f1)
        check "$([ "$sum" = "$bulk_sha" ] && echo 1)" "$1 bulk: sha256 $sum, expected $bulk_sha"
        say "  bulk: sha256 $([ "$sum" = "$bulk_sha" ] && echo matches || echo MISMATCH)"
        return 0
    fi
    # BULK_REPS downloads one after the other, each on a new connection: total bytes / total time.
    local attempt=0 total tsum ok
    FLAGGED=0
    while :; do
        attempt=$((attempt + 1))
        total=0; tsum=0; ok=1
        measure_begin
        for _ in $(seq "$BULK_REPS"); do
            out=$(curl -sS --max-time 120 -o /dev/null -w '%{http_code} %{size_download} %{time_total}' "http://127.0.0.1:$2/bulk.bin")
            read -r code size t <<<"$out"
            [ "$code" = 200 ] && [ "$size" = "$bulk_bytes" ] || { ok=0; echo "FAIL: $1 bulk: HTTP $code, $size of $bulk_bytes bytes" >&2; }
            total=$((total + size)); tsum=$(awk -v a="$tsum" -v b="$t" 'BEGIN { print a + b }')
        done
        measure_end
        disturbed "run $run $1 bulk" $attempt || break
    done
    check $ok "$1 bulk: incomplete transfer"
    mibs=$(awk -v s="$total" -v t="$tsum" 'BEGIN { printf "%.0f", s / 1048576 / t }')
    addm "$1" bulk "$mibs"
    say "  bulk: $mibs MiB/s ($BULK_REPS x $bulk_bytes bytes in ${tsum}s; others ${OTHERS}% of the CPUs)"
}
run_idle() { # target port
    local out pids
    pids=$(IFS=,; echo "${TPIDS[*]}")
    if ! out=$(python3 "$here/compare_idle.py" --port "$2" --pids "$pids" --backends "$backend_csv" --n "$IDLE_CONNS"); then
        check 0 "$1 idle: $out"
    else
        check 1 ""
    fi
    say "  idle: $out"
    local kv
    for kv in $out; do
        case $kv in
        idle_rss_kib=*) add "$1" rss_idle "${kv#*=}" ;;
        loaded_rss_kib=*) add "$1" rss_loaded "${kv#*=}" ;;
        rss_per_conn_bytes=*) add "$1" rss_conn "${kv#*=}" ;;
        spread=*) R[$1.spread]=${kv#*=} ;;
        esac
    done
}
exact_check() { # target port: headers (without Date) and body equal to the backend's own answer
    local want got
    want=$(curl -sS -i "http://127.0.0.1:$direct_port/" | grep -avi '^date:')
    got=$(curl -sS -i "http://127.0.0.1:$2/" | grep -avi '^date:')
    check "$([ "$want" = "$got" ] && [ -n "$got" ] && echo 1)" "$1: response differs from the backend's: $(printf '%q' "$got")"
    say "  response: $([ "$want" = "$got" ] && echo "identical to the backend's" || echo DIFFERENT)"
}

# The machine is shared: before each target's turn, wait (at most QUIET_WAIT s) until the CPUs
# were less than QUIET_BUSY % busy over one second, and log how busy they were.
cpu_busy() { # percent of all CPUs busy (not idle or iowait) over 1 s
    local a b
    a=$(awk '/^cpu / { print $2+$3+$4+$5+$6+$7+$8+$9, $5+$6 }' /proc/stat)
    sleep 1
    b=$(awk '/^cpu / { print $2+$3+$4+$5+$6+$7+$8+$9, $5+$6 }' /proc/stat)
    awk -v a="$a" -v b="$b" 'BEGIN { split(a, x, " "); split(b, y, " "); t = y[1] - x[1]; i = y[2] - x[2]; printf "%.0f", (t > 0 ? 100 * (t - i) / t : 0) }'
}
BUSY=""
quiet_gate() {
    local b end=$((SECONDS + QUIET_WAIT))
    while :; do
        b=$(cpu_busy)
        [ "$b" -lt "$QUIET_BUSY" ] && break
        if [ $SECONDS -ge $end ]; then say "  warning: CPUs still ${b}% busy (other processes) after ${QUIET_WAIT}s, measuring anyway"; break; fi
    done
    BUSY="$BUSY${BUSY:+ }$b"
    LAST_BUSY=$b
}

# --- the runs ---------------------------------------------------------------------------------
t_start=$SECONDS
n=${#TARGETS[@]}
for run in $(seq "$RUNS"); do
    for i in $(seq 0 $((n - 1))); do
        target=${TARGETS[$(((i + run - 1) % n))]}
        if [ $smoke = 1 ]; then
            say "run $run/$RUNS $target"
        else
            quiet_gate
            say "run $run/$RUNS $target (CPUs $LAST_BUSY% busy just before)"
        fi
        start_target "$target"
        exact_check "$target" "$PORT"
        [ "$target" != direct ] && run_idle "$target" "$PORT"
        run_wrk "$target" ka "$PORT"
        run_wrk "$target" close "$PORT"
        run_bulk "$target" "$PORT"
        stop_target
    done
done
if [ -n "${R[kprism.spread]:-}" ]; then
    # With the checks paused every endpoint must get connections.
    ok=1
    IFS=/ read -r -a sp <<<"${R[kprism.spread]}"
    for c in "${sp[@]}"; do [ "$c" -gt 0 ] || ok=0; done
    check $ok "kprism did not spread over all backends: ${R[kprism.spread]}"
fi

# --- probe cost (kprism only) -------------------------------------------------------------------
probes_ran=0
if [ "$PROBE_COST" != none ] && [[ " ${TARGETS[*]} " == *" kprism "* ]]; then
    [ -x "$PROBE_COST" ] || die "$PROBE_COST not found (make build/bench/probe_cost, or PROBE_COST=none)"
    [ -x "$KPRISM_STANDIN" ] || die "$KPRISM_STANDIN not found (set KPRISM_STANDIN)"
    for run in $(seq "$RUNS"); do
        [ $smoke = 1 ] || quiet_gate
        say "run $run/$RUNS probes ($PROBE_SECONDS s per mode)"
        out=$(KPRISM_BIN="$tmp/kprism" KPRISM_STANDIN="$KPRISM_STANDIN" "$PROBE_COST" "$PROBE_SECONDS")
        for mode in on off; do
            line=$(grep "^resumption=$mode " <<<"$out" || true)
            probes=$(sed -n 's/.* probes=\([0-9]*\).*/\1/p' <<<"$line")
            k=$(sed -n 's/.*kprism_cpu_ms_per_1000=\([0-9.]*\).*/\1/p' <<<"$line")
            s=$(sed -n 's/.*apiserver_cpu_ms_per_1000=\([0-9.]*\).*/\1/p' <<<"$line")
            res=$(sed -n 's/.* resumed=\([0-9]*\).*/\1/p' <<<"$line")
            check "$([ -n "$k" ] && [ "${probes:-0}" -gt 0 ] && echo 1)" "probe_cost resumption=$mode: no result: $line"
            [ -n "$k" ] || continue
            add kprism "probe_$mode" "$k"; add kprism "standin_$mode" "$s"
            add kprism "resumed_$mode" "$(awk -v r="$res" -v p="$probes" 'BEGIN { printf "%.0f", 100 * r / p }')"
            say "  resumption $mode: $probes probes, kprism $k ms, stand-ins $s ms per 1000, $res resumed"
        done
    done
    probes_ran=1
fi
elapsed=$((SECONDS - t_start))
say "load average at end: $(cut -d' ' -f1-3 /proc/loadavg); measurements took ${elapsed}s"
[ -n "$OTHERS_LOG" ] && say "other processes' share of the CPUs during each wrk and bulk measurement: $(tr ' ' '\n' <<<"$OTHERS_LOG" | sort -n | tr '\n' ' ')% ($REPEATS measurements repeated)"
[ -n "$BUSY" ] && say "CPUs busy (other processes) in the second before each target's turn: $(tr ' ' '\n' <<<"$BUSY" | sort -n | tr '\n' ' ')%"

# --- the table ----------------------------------------------------------------------------------
if [ $smoke = 1 ]; then
    echo "smoke: $((CHECKS - FAILS)) of $CHECKS checks passed$([ $FAILS -gt 0 ] && echo ", $FAILS FAILED")"
    [ $FAILS = 0 ] || exit 1
    exit 0
fi

median() { tr ' ' '\n' <<<"$1" | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) exit; if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
med() { # target metric -> median of the undisturbed values, else of the disturbed ones and "*"
    if [ -n "${R[$1.$2]:-}" ]; then
        median "${R[$1.$2]}"
    elif [ -n "${R[$1.$2~]:-}" ]; then
        echo "$(median "${R[$1.$2~]}")*"
    fi
}
fmt() { # value decimals -> formatted or "–"
    [ -n "$1" ] && awk -v v="$1" -v d="$2" 'BEGIN { printf "%.*f", d, v }' || printf '–'
}
ratio() { # a b -> a/b, "–" if either missing
    [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "–"; else printf "%.2f", a / b }' || printf '–'
}
target_note() { # metric kprism haproxy -> kprism's performance target and whether this run meets it
    local k=$2 h=$3 r
    case $1 in
    ka_rps | close_rps) r=$(ratio "$k" "$h"); [ "$r" = – ] && return; awk -v r="$r" 'BEGIN { printf "≥ 1.15× HAProxy: %s", (r >= 1.15) ? "met" : "missed" }' ;;
    ka_p99) r=$(ratio "$k" "$h"); [ "$r" = – ] && return; awk -v r="$r" 'BEGIN { printf "≤ 0.9× HAProxy: %s", (r <= 0.9) ? "met" : "missed" }' ;;
    bulk) r=$(ratio "$k" "$h"); [ "$r" = – ] && return; awk -v r="$r" 'BEGIN { printf "≥ 1.0× HAProxy: %s", (r >= 1.0) ? "met" : "missed" }' ;;
    rss_conn) [ -n "$k" ] && awk -v v="$k" 'BEGIN { printf "≤ 1024 B: %s", (v <= 1024) ? "met" : "missed" }' ;;
    rss_idle) [ -n "$k" ] && awk -v v="$k" 'BEGIN { printf "≤ 5120 KiB: %s", (v <= 5120) ? "met" : "missed" }' ;;
    esac
}
star() { case $1 in *\*) printf '*' ;; esac; }
mark() { [ "$1" = – ] || [ -z "$1" ] && printf '%s' "$1" || printf '%s%s' "$1" "$2"; } # value star
row() { # metric label decimals; a "*" marks a figure (and its ratios) from disturbed measurements only
    local d k h x ds ks hs xs
    d=$(med direct "$1"); k=$(med kprism "$1"); h=$(med haproxy "$1"); x=$(med nginx "$1")
    ds=$(star "$d"); ks=$(star "$k"); hs=$(star "$h"); xs=$(star "$x")
    d=${d%\*}; k=${k%\*}; h=${h%\*}; x=${x%\*}
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$2" \
        "$(mark "$(fmt "$d" "$3")" "$ds")" "$(mark "$(fmt "$k" "$3")" "$ks")" "$(mark "$(fmt "$h" "$3")" "$hs")" \
        "$(mark "$(fmt "$x" "$3")" "$xs")" "$(mark "$(ratio "$k" "$h")" "$(star "$ks$hs")")" \
        "$(mark "$(ratio "$x" "$h")" "$(star "$xs$hs")")" "$(mark "$(ratio "$k" "$d")" "$(star "$ks$ds")")" \
        "$(mark "$(ratio "$h" "$d")" "$(star "$hs$ds")")" "$(mark "$(ratio "$x" "$d")" "$(star "$xs$ds")")" \
        "$(mark "$(target_note "$1" "$k" "$h")" "$(star "$ks$hs")")"
}
echo
echo "Medians of $RUNS runs (of the undisturbed measurements where a cell has any; * = every measurement of that cell was disturbed, see below); ratios are value ÷ HAProxy's (H) or ÷ direct's (D); for latency, CPU and RSS lower is better."
echo
echo "| metric | direct | kprism | HAProxy | nginx stream | kprism ÷ H | nginx ÷ H | kprism ÷ D | HAProxy ÷ D | nginx ÷ D | target (kprism) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
row ka_rps "keep-alive, requests/s (wrk -t1 -c32)" 0
row ka_p50 "keep-alive, p50 latency (µs)" 0
row ka_p99 "keep-alive, p99 latency (µs)" 0
row ka_cpu "keep-alive, proxy CPU per request (µs)" 1
row close_rps "new connection per request, connections/s" 0
row close_p99 "new connection per request, p99 latency (µs)" 0
row close_cpu "new connection per request, proxy CPU per connection (µs)" 1
row bulk "bulk download, $BULK_REPS × $BULK_MIB MiB, MiB/s" 0
row rss_conn "RSS per idle connection, bytes ($IDLE_CONNS connections)" 0
row rss_idle "idle RSS, KiB (3 upstreams)" 0
row rss_loaded "RSS with $IDLE_CONNS idle connections, KiB" 0
printf '| %s | – | %s | %s | %s | | | | | | |\n' "idle connections per backend (last run)" \
    "${R[kprism.spread]:-–}" "${R[haproxy.spread]:-–}" "${R[nginx.spread]:-–}"
errs=""
for t in direct kprism haproxy nginx; do
    e=0
    for v in ${R[$t.ka_err]:-} ${R[$t.close_err]:-}; do e=$((e + v)); done
    errs="$errs | $e"
done
echo "| wrk errors + non-2xx, all runs$errs | | | | | | |"
if [ $probes_ran = 1 ]; then
    for mode in on off; do
        printf '| %s | – | %s | – | – | | | | | | kprism only |\n' "mTLS /readyz probes, resumption $mode: kprism CPU ms per 1000 probes" \
            "$(fmt "$(med kprism "probe_$mode")" 0)"
    done
    for mode in on off; do
        printf '| %s | – | %s | – | – | | | | | | kprism only |\n' \
            "the same, stand-in apiservers' CPU ms per 1000 probes (resumed: $(fmt "$(med kprism "resumed_$mode")" 0) %)" \
            "$(fmt "$(med kprism "standin_$mode")" 0)"
    done
fi
if [ ${#DISTURBED[@]} -gt 0 ]; then
    echo
    echo "Disturbed: taken while other processes used more than ${OTHERS_MAX}% of the CPUs even after $RETRIES retries, left out of a cell's median unless all of its measurements were: $(printf '%s; ' "${DISTURBED[@]}" | sed 's/; $//')."
fi
echo
if [ $FAILS -gt 0 ]; then
    echo "correctness: $FAILS of $CHECKS checks FAILED (see FAIL lines above)"
    exit 1
fi
echo "correctness: all $CHECKS checks passed"
