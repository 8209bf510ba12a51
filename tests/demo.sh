#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The demo behind `make run`: kprism in front of three TLS stand-in apiservers on loopback,
# checking each with GET /readyz over mTLS (a test PKI made on the spot with the openssl CLI).
# One stand-in's /readyz turns 500 while it still accepts TCP at once (an apiserver that lost
# etcd quorum in a partition): kprism takes it out, a "fastest TCP connect" balancer would not.
# Then a stand-in is killed, and curl, kubectl and `kprism status` go through kprism.
# Every step checks what it shows: the exit status is 1 if an expectation failed, 2 if the
# demo could not start (a tool missing, a DEMO_PORT taken), so `DEMO_HOLD=0 tests/demo.sh build`
# doubles as a test (about 12 s; no root, no fixed ports, nothing left behind).
#
# Usage: tests/demo.sh [BUILD_DIR]
#   DEMO_HOLD=1   keep kprism running afterwards until Ctrl-C (default when stdin and stdout
#                 are a terminal), DEMO_HOLD=0 exits after the scripted part
#   DEMO_PORT=N   kprism listens on 127.0.0.1:N, its admin endpoint on N+1 (default: a free
#                 pair between 20000 and 32767); a taken port is an error
#   NO_COLOR=1    no colours (there are none unless stdout is a terminal)
# check() evals its condition when it runs, so the variables it names are single-quoted.
# shellcheck disable=SC2016,SC2034
set -uo pipefail

build=${1:-build}
for bin in kprism kprism-standin; do
    if [ ! -x "$build/$bin" ]; then
        echo "demo: $build/$bin is not built (make all BUILD=$build)" >&2
        exit 2
    fi
done
for tool in openssl curl; do
    command -v "$tool" >/dev/null || { echo "demo: needs $tool (make deps)" >&2; exit 2; }
done
build=$(cd "$build" && pwd)
kprism=$build/kprism
t_start=${EPOCHREALTIME/./}

if [ -t 1 ] && [ -z "${NO_COLOR:-}" ] && [ "${TERM:-dumb}" != dumb ]; then
    B=$'\e[1m' G=$'\e[32m' R=$'\e[31m' Y=$'\e[33m' C=$'\e[36m' D=$'\e[2m' N=$'\e[0m'
else
    B='' G='' R='' Y='' C='' D='' N=''
fi
hold=${DEMO_HOLD:-}
if [ -z "$hold" ]; then
    if [ -t 0 ] && [ -t 1 ]; then hold=1; else hold=0; fi
fi

# --- processes and temp files: all cleaned up on exit, Ctrl-C and failure -----------------
pids=()
tmp=
cleanup() {
    local rc=$? p i
    trap - EXIT INT TERM
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do
        for ((i = 0; i < 60; i++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
        kill -KILL "$p" 2>/dev/null
    done
    wait 2>/dev/null
    [ -n "$tmp" ] && rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT
trap 'echo; exit 130' INT
trap 'exit 143' TERM
tmp=$(mktemp -d /tmp/kprism-demo.XXXXXX) || exit 2

die() {
    echo "${R}demo: $*${N}" >&2
    if [ -s "$tmp/kprism.log" ]; then
        echo "${D}--- last lines of kprism's log:" >&2
        tail -n 15 "$tmp/kprism.log" | sed 's/^/  /' >&2
        echo "---${N}" >&2
    fi
    exit "${DIE_RC:-2}"
}

# --- output helpers --------------------------------------------------------------------------
step=0
title() { step=$((step + 1)); echo; echo "${B}$step. $1${N}"; }
say() { echo "   $*"; }
cmd() { echo "   ${C}\$ $*${N}"; }
logline() { echo "   ${D}kprism log: $*${N}"; }
nok=0 nfail=0
check() {  # check "what should hold" 'shell condition'
    if eval "$2"; then
        nok=$((nok + 1))
        echo "   ${G}ok${N}   $1"
    else
        nfail=$((nfail + 1))
        echo "   ${R}FAIL${N} $1"
    fi
}
now_us() { echo "${EPOCHREALTIME/./}"; }
secs() { local us=$1; printf '%d.%d' $((us / 1000000)) $((us % 1000000 / 100000)); }  # 1.2

# --- 1. PKI --------------------------------------------------------------------------------
pki=$tmp/pki
mkdir -p "$pki"
cat >"$pki/openssl.cnf" <<'EOF'
[req]
distinguished_name = dn
prompt = no
[dn]
[ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = $ENV::SAN
[client]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
EOF
names=(apiserver-1 apiserver-2 apiserver-3)
ips=(127.0.0.11 127.0.0.12 127.0.0.13)
issue() {  # issue NAME SUBJECT EXTENSIONS [SAN]   (openssl.cnf needs $SAN set even where unused)
    SAN=${4:-DNS:unused} openssl req -new -config "$pki/openssl.cnf" -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout "$pki/$1.key" -subj "$2" -out "$pki/$1.csr" &&
        SAN=${4:-DNS:unused} openssl x509 -req -in "$pki/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
            -days 1 -extfile "$pki/openssl.cnf" -extensions "$3" -out "$pki/$1.crt"
}
make_pki() {
    umask 077
    SAN=DNS:unused openssl req -x509 -config "$pki/openssl.cnf" -extensions ca -newkey ec -pkeyopt ec_paramgen_curve:P-256 \
        -nodes -keyout "$pki/ca.key" -subj /CN=kprism-demo-ca -days 1 -out "$pki/ca.crt" || return 1
    local i
    for i in 0 1 2; do
        # 127.0.0.1 too: clients reach every stand-in through kprism at 127.0.0.1 (TLS is end to end).
        issue "${names[i]}" /CN=kube-apiserver server "IP:${ips[i]},IP:127.0.0.1,DNS:localhost,DNS:kubernetes" || return 1
    done
    issue client "/O=system:nodes/CN=system:node:demo" client
}

echo "${B}kprism demo: readiness checks, not the fastest TCP connect${N}  ${D}($("$kprism" --version 2>/dev/null | head -n 1))${N}"
title "A test PKI, made now with openssl in $tmp/pki"
make_pki >"$tmp/openssl.log" 2>&1 || { cat "$tmp/openssl.log" >&2; die "openssl could not make the test PKI"; }
say "CA kprism-demo-ca; serving certificates for ${ips[0]}, ${ips[1]}, ${ips[2]} (and 127.0.0.1);"
say "a kubelet-style client certificate: $(openssl x509 -in "$pki/client.crt" -noout -subject -nameopt compat | sed 's/^subject=//')"
tls=(--cacert "$pki/ca.crt" --cert "$pki/client.crt" --key "$pki/client.key")
tls_shown="--cacert pki/ca.crt --cert pki/client.crt --key pki/client.key"  # as typed in $tmp

# --- 2. stand-ins and kprism -----------------------------------------------------------------
title "Three TLS stand-in apiservers (client certificate required), kprism in front"
spid=() addr=()
for i in 0 1 2; do
    echo 200 >"$tmp/readyz-$((i + 1))"
    "$build/kprism-standin" --listen "${ips[i]}:0" --name "${names[i]}" --tls-cert "$pki/${names[i]}.crt" \
        --tls-key "$pki/${names[i]}.key" --client-ca "$pki/ca.crt" --readyz-file "$tmp/readyz-$((i + 1))" \
        >"$tmp/standin-$((i + 1)).log" 2>&1 &
    spid[i]=$!
    pids+=($!)
done
for i in 0 1 2; do
    for ((k = 0; k < 100; k++)); do
        addr[i]=$(sed -n '1s/^listening \([^ ]*\) .*/\1/p' "$tmp/standin-$((i + 1)).log")
        [ -n "${addr[i]}" ] && break
        kill -0 "${spid[i]}" 2>/dev/null || break
        sleep 0.05
    done
    [ -n "${addr[i]}" ] || { cat "$tmp/standin-$((i + 1)).log" >&2; die "stand-in ${names[i]} did not start on ${ips[i]}"; }
done
eps="${addr[0]},${addr[1]},${addr[2]}"

# /status JSON of the admin endpoint -> "state" of the upstream at $1 (empty if unknown).
state_of() {
    curl -s --max-time 2 "http://127.0.0.1:$admin/status" 2>/dev/null | tr '{' '\n' |
        grep -F "\"address\":\"$1\"" | grep -o '"state":"[a-z_-]*"' | cut -d'"' -f4
}
port_free() { ! command -v ss >/dev/null || [ -z "$(ss -Hltn "( sport = :$1 or sport = :$(($1 + 1)) )" 2>/dev/null)" ]; }
# Starts kprism on $port/$admin; 0 once its admin endpoint reports our three upstreams.
start_kprism() {
    "$kprism" --endpoints "$eps" --bind-address 127.0.0.1 --bind-port "$port" --health-port "$admin" \
        --client-cert "$pki/client.crt" --client-key "$pki/client.key" --ca-file "$pki/ca.crt" \
        --log-format logfmt >"$tmp/kprism.log" 2>&1 &
    kpid=$!
    local k
    for ((k = 0; k < 100; k++)); do
        kill -0 "$kpid" 2>/dev/null || { wait "$kpid" 2>/dev/null; return 1; }
        [ -n "$(state_of "${addr[2]}")" ] && { pids+=("$kpid"); return 0; }
        sleep 0.05
    done
    kill -KILL "$kpid" 2>/dev/null
    wait "$kpid" 2>/dev/null
    return 1
}
if [ -n "${DEMO_PORT:-}" ]; then
    port=$DEMO_PORT admin=$((DEMO_PORT + 1))
    port_free "$port" || die "127.0.0.1:$port or :$admin is taken; choose another DEMO_PORT"
    start_kprism || die "kprism did not start on 127.0.0.1:$port (admin :$admin); choose another DEMO_PORT"
else
    started=0
    for _ in 1 2 3 4 5 6 7 8; do
        port=$((20000 + RANDOM % 12766)) admin=$((port + 1))
        port_free "$port" || continue
        if start_kprism; then started=1; break; fi
        grep -q "address already in use" "$tmp/kprism.log" || die "kprism did not start"
    done
    [ "$started" = 1 ] || die "found no free port pair for kprism; set DEMO_PORT"
fi
for i in 0 1 2; do say "${names[i]}  ${addr[i]}   /readyz answers as $tmp/readyz-$((i + 1)) says"; done
say "kprism on 127.0.0.1:$port (admin 127.0.0.1:$admin), checking each: GET /readyz over mTLS"
say "with the client certificate, every 5 s (the defaults: rise 2, fall 2, a 5xx is down at once)"

# wait_state IDX STATE DEADLINE_S [SINCE_US]: polls /status until upstream IDX is in STATE.
# Sets reached (1 or 0) and waited, "after 1.2 s" or "still up after 10.0 s" (from SINCE_US).
wait_state() {
    local since=${4:-$(now_us)} deadline=$(($(now_us) + $3 * 1000000)) st
    reached=1
    while st=$(state_of "${addr[$1]}") && [ "$st" != "$2" ]; do
        [ "$(now_us)" -lt "$deadline" ] || { reached=0; break; }
        sleep 0.1
    done
    waited="after $(secs $(($(now_us) - since))) s"
    [ "$reached" = 1 ] || waited="still ${st:-unknown} $waited"
    [ "$reached" = 1 ]
}
t0=$(now_us)
for i in 0 1 2; do wait_state "$i" up 10 "$t0" || break; done
if grep -q 'msg="health checks paused' "$tmp/kprism.log"; then
    DIE_RC=1 die "kprism's health checks are paused: it did not load the client certificate"
fi
[ "$reached" = 1 ] || DIE_RC=1 die "kprism did not report all three stand-ins up within 10 s (${names[i]}: $waited)"
check "kprism has all three up $waited: their first checks passed" true

# --- requests through kprism ------------------------------------------------------------------
# through N: N requests through kprism, each a new TLS connection with the client certificate;
# counts which stand-in answered (cnt[name]) and how many failed (failed), and prints the counts.
declare -A cnt
through() {
    local k body name line=""
    cnt=() failed=0
    for ((k = 0; k < $1; k++)); do
        body=$(curl -s --max-time 5 "${tls[@]}" "https://127.0.0.1:$port/version" 2>/dev/null)
        case $body in
        "served by "*) name=${body#served by }; name=${name%% *}; cnt[$name]=$((${cnt[$name]:-0} + 1)) ;;
        *) failed=$((failed + 1)) ;;
        esac
    done
    for name in "${names[@]}"; do line+=$(printf '   %s: %2d' "$name" "${cnt[$name]:-0}"); done
    [ "$failed" = 0 ] || line+="   ${R}failed: $failed${N}"
    say "served by$line"
}
# requests_seen IDX: client (non-/readyz) requests stand-in IDX has logged so far.
requests_seen() { grep -c '^request path=/version ' "$tmp/standin-$(($1 + 1)).log"; }

title "15 requests through kprism (a new connection each, like kubelet's reconnects)"
cmd "curl $tls_shown https://127.0.0.1:$port/version   # x15"
through 15
check "all 15 answered" '[ "$failed" = 0 ]'

# --- 4. the partition case ---------------------------------------------------------------------
title "${names[0]} loses etcd quorum: /readyz answers 500, yet it accepts TCP at once"
echo 500 >"$tmp/readyz-1.tmp" && mv "$tmp/readyz-1.tmp" "$tmp/readyz-1"
t_break=$(now_us)
say "straight to each stand-in:   TCP connect   GET /readyz"
connect_ok=1
for i in 0 1 2; do
    read -r tc code < <(curl -s -o "$tmp/body" -w '%{time_connect} %{http_code}\n' --max-time 3 "${tls[@]}" \
        "https://${addr[i]}/readyz" 2>/dev/null || echo "0 000")
    why=$(grep -m1 '^\[-\]' "$tmp/body" 2>/dev/null || head -c 40 "$tmp/body" 2>/dev/null)
    say "$(printf '  %-12s %-22s %8s ms    %s %s' "${names[i]}" "${addr[i]}" \
        "$(awk -v t="$tc" 'BEGIN { printf "%.2f", t * 1000 }')" "$code" "$why")"
    if [ "$i" = 0 ]; then
        code0=$code
        [ "$code" != 000 ] || connect_ok=0
    fi
done
check "${names[0]} still accepts TCP at once and answers /readyz with 500" \
    '[ "$connect_ok" = 1 ] && [ "$code0" = 500 ]'
say "${Y}A TCP connect check finds all three alive: \"fastest connect\" (Talos KubePrism) has no reason${N}"
say "${Y}to avoid ${names[0]}, and on a real node, where it is the local apiserver, it connects fastest.${N}"
wait_state 0 down 10 "$t_break"
check "kprism takes ${names[0]} down at its next check (within 10 s): $waited" '[ "$reached" = 1 ]'
l=$(grep -F "msg=\"upstream down\" upstream=${addr[0]}" "$tmp/kprism.log" | tail -n 1 | sed 's/^ts=[^ ]* //')
[ -z "$l" ] || logline "$l"
seen0=$(requests_seen 0)
say "15 more requests through kprism:"
through 15
check "no new connection went to ${names[0]}; all 15 answered by the others" \
    '[ "${cnt[${names[0]}]:-0}" = 0 ] && [ "$failed" = 0 ]'
check "and ${names[0]}'s own log shows no client request since it went down" \
    '[ "$(requests_seen 0)" = "$seen0" ]'

# --- 5. a killed stand-in ----------------------------------------------------------------------
title "${names[1]} is killed (SIGKILL): connections to it are refused"
exec 3>&2 2>/dev/null  # without bash's "Killed" job report
kill -KILL "${spid[1]}"
wait "${spid[1]}"
exec 2>&3 3>&-
t_kill=$(now_us)
say "15 requests through kprism right after the kill:"
through 15
check "all 15 answered by ${names[2]}: a refused connect is retried on another at once" \
    '[ "${cnt[${names[2]}]:-0}" = 15 ] && [ "$failed" = 0 ]'
wait_state 1 down 10 "$t_kill"
check "kprism takes ${names[1]} down (within 10 s of the kill): $waited" '[ "$reached" = 1 ]'
l=$(grep -F "msg=\"upstream down\" upstream=${addr[1]}" "$tmp/kprism.log" | tail -n 1 | sed 's/^ts=[^ ]* //')
[ -z "$l" ] || logline "$l"

# --- 6. real clients ----------------------------------------------------------------------------
title "Real clients through kprism on 127.0.0.1:$port: curl, kubectl, kprism status"
cmd "curl $tls_shown https://127.0.0.1:$port/readyz"
out=$(curl -sS --max-time 5 -D "$tmp/headers" "${tls[@]}" "https://127.0.0.1:$port/readyz" 2>&1)
by=$(tr -d '\r' <"$tmp/headers" 2>/dev/null | sed -n 's/^[Xx]-[Ss]erved-[Bb]y: //p')
say "$out   ${D}(response header X-Served-By: $by)${N}"
check "curl with the client certificate gets ok, from ${names[2]}, the one ready stand-in left" \
    '[ "$out" = ok ] && [ "$by" = "${names[2]}" ]'
cat >"$tmp/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: demo
  cluster:
    server: https://127.0.0.1:$port
    certificate-authority: $pki/ca.crt
users:
- name: system:node:demo
  user:
    client-certificate: $pki/client.crt
    client-key: $pki/client.key
contexts:
- name: demo
  context:
    cluster: demo
    user: system:node:demo
current-context: demo
EOF
if command -v kubectl >/dev/null; then
    kc=(timeout 20 kubectl --kubeconfig "$tmp/kubeconfig" --cache-dir "$tmp/kube-cache")
    for path in /readyz /version; do
        cmd "kubectl --kubeconfig kubeconfig get --raw $path"
        out=$("${kc[@]}" get --raw "$path" 2>&1)
        say "$out"
        if [ "$path" = /readyz ]; then
            check "kubectl, with a kubeconfig pointing at kprism, gets ok" '[ "$out" = ok ]'
        else
            check "and is served by ${names[2]}" \
                '[ "$out" = "served by ${names[2]} path /version" ]'
        fi
    done
else
    say "${Y}kubectl is not installed: skipped${N}"
fi
cmd "kprism status --health-port $admin"
"$kprism" status --health-port "$admin" >"$tmp/status.out" 2>&1
st=$?
sed 's/^/   /' "$tmp/status.out"
check "kprism status answers; ${names[0]} and ${names[1]} are down, ${names[2]} up" \
    '[ "$st" = 0 ] && [ "$(state_of "${addr[0]}") $(state_of "${addr[1]}") $(state_of "${addr[2]}")" = "down down up" ]'

# --- 7. recovery ----------------------------------------------------------------------------------
title "${names[0]} regains quorum (/readyz 200 again): kprism takes it back after 2 ready checks"
echo 200 >"$tmp/readyz-1.tmp" && mv "$tmp/readyz-1.tmp" "$tmp/readyz-1"
wait_state 0 up 15
check "kprism has ${names[0]} up again (next check, a re-check 1 s later; within 15 s): $waited" \
    '[ "$reached" = 1 ]'
l=$(grep -F "msg=\"upstream up\" upstream=${addr[0]}" "$tmp/kprism.log" | tail -n 1 | sed 's/^ts=[^ ]* //')
[ -z "$l" ] || logline "$l"
say "15 more requests through kprism:"
through 15
check "all 15 answered, by ${names[0]} and ${names[2]} again" \
    '[ "$failed" = 0 ] && [ "${cnt[${names[0]}]:-0}" -gt 0 ] && [ $((${cnt[${names[0]}]:-0} + ${cnt[${names[2]}]:-0})) = 15 ]'

# --- summary -------------------------------------------------------------------------------------
echo
took=$(secs $(($(now_us) - t_start)))
if [ "$nfail" -gt 0 ]; then
    echo "${R}${B}$nfail of $((nok + nfail)) expectations failed${N} ($took s)"
    echo "${D}--- last lines of kprism's log:"
    tail -n 20 "$tmp/kprism.log" | sed 's/^/  /'
    echo "---${N}"
    exit 1
fi
echo "${G}${B}all $nok expectations held${N} ($took s)"
if [ "$hold" = 1 ]; then
    echo
    echo "${B}kprism keeps running on 127.0.0.1:$port until Ctrl-C.${N} In another terminal, cd $tmp and try:"
    say "curl $tls_shown https://127.0.0.1:$port/version"
    command -v kubectl >/dev/null && say "kubectl --kubeconfig kubeconfig get --raw /version"
    say "echo 500 > readyz-1    # ${names[0]} unready again; echo 200 > readyz-1 brings it back"
    say "$kprism status --health-port $admin"
    say "tail -f kprism.log    # kprism's log; standin-N.log: each stand-in's handshakes and requests"
    wait "$kpid"
fi
