#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks the static build (`make static`, build/static/kprism): it is statically linked, runs in an
# empty chroot (nothing but the binary in /), resolves hostname endpoints there with c-ares (no NSS)
# from the chroot's /etc/hosts and from a real DNS server, does not go near the resolver for IP
# endpoints, and passes a subset of the integration suite.
# Run as root (chroot) via `make test-static`, which builds build/static/kprism and the normal
# build/ tree (stand-in apiserver, integration tests) first.
# Ends with one line "static: N passed, M failed"; exit status non-zero if any check failed.
set -u
cd "$(dirname "$0")/../.." || exit 1

BIN=${KPRISM_STATIC_BIN:-$PWD/build/static/kprism}
STANDIN=${KPRISM_STANDIN:-$PWD/build/kprism-standin}
IT=${KPRISM_IT:-$PWD/build/tests/integration}
# The static build is the one without libsystemd: every notify, socket activation, lifecycle and
# restart handover and crash copy test runs against it (its hand-built sd_notify protocol), and
# every hostname test (its c-ares resolver, statically linked).
FILTER='Splice.*:Upstream.RefusedIsRetriedOnAnother:Upstream.UnresolvableHostnameIsAWarningNotFatal:Health.EveryResultClass:Health.SessionsAreResumed:Notify.*:Lifecycle.*:Handover.*:CrashCopy.*:Hostname.*'

passed=0; failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { echo "ok: $1"; passed=$((passed + 1)); }
bad() { echo "FAIL: $1"; [ $# -gt 1 ] && printf '%s\n' "$2" | sed 's/^/    /'; failed=$((failed + 1)); }

if [ ! -x "$BIN" ]; then
    echo "FAIL: $BIN missing (make static)"
    echo "static: 0 passed, 1 failed"
    exit 1
fi
echo "static: $BIN, $(stat -c %s "$BIN") bytes"

# 1. Statically linked, no interpreter, nothing for ldd. The default (hardened) build is a static
# PIE, which file(1) calls "static-pie linked" and ldd "statically linked"; HARDEN=0 gives a
# fixed-address "statically linked" one, "not a dynamic executable" to ldd.
out=$(file "$BIN")
case $out in *"statically linked"* | *"static-pie linked"*) ok "file: statically linked" ;; *) bad "file: not statically linked" "$out" ;; esac
out=$(ldd "$BIN" 2>&1)
case $out in *"not a dynamic executable"* | *"statically linked"*) ok "ldd: no shared libraries" ;; *) bad "ldd lists libraries" "$out" ;; esac
out=$(readelf -lW -dW "$BIN" 2>&1 | grep -E 'INTERP|\(NEEDED\)')
if [ -z "$out" ]; then ok "readelf: no interpreter, no NEEDED library"; else bad "readelf: dynamically linked" "$out"; fi
# kprism's own objects do not reference the NSS-backed resolver or user database at all: names
# are resolved by c-ares, which reads /etc/hosts and /etc/resolv.conf itself (the libcrypto/libuv
# objects that reference glibc's resolver are linked in but never called; see
# talos-extension/README.md, "The static binary").
# (Only when the static build tree is here: KPRISM_STATIC_BIN may name a binary built elsewhere.)
objs=(build/static/obj/*/*.o)
if [ -d build/static/obj ] && [ ! -f "${objs[0]}" ]; then
    bad "no kprism objects under build/static/obj/*/ to check for resolver/NSS references"
elif [ -d build/static/obj ]; then
    out=$(nm -u "${objs[@]}" | grep -Ew 'getaddrinfo|uv_getaddrinfo|gethostbyname|getpwnam|getpwuid|getpwnam_r|getpwuid_r|getgrnam|BIO_lookup|BIO_lookup_ex|BIO_new_connect' | sort -u)
    if [ -z "$out" ]; then ok "kprism objects reference no resolver/NSS function"; else bad "kprism objects reference NSS functions" "$out"; fi
    out=$(nm -u build/static/obj/base/resolver.o | grep -Ew 'ares_getaddrinfo|ares_init_options|ares_process_fd' | wc -l)
    if [ "$out" = 3 ]; then ok "the resolver is c-ares (ares_getaddrinfo, ares_init_options, ares_process_fd)"; else bad "resolver.o does not call c-ares" "$(nm -u build/static/obj/base/resolver.o)"; fi
fi

# 2. An empty root with nothing but the binary.
root=$tmp/root
mkdir "$root" && cp "$BIN" "$root/kprism"
if out=$(chroot "$root" /kprism --version 2>&1) && [[ $out == kprism* ]]; then
    ok "chroot: --version ($out)"
else
    bad "chroot: --version" "$out"
fi
if out=$(chroot "$root" /kprism check --endpoints 127.0.0.1:6443 2>&1) && [[ $out == *'endpoints = ["127.0.0.1:6443"]'* ]]; then
    ok "chroot: check --endpoints 127.0.0.1:6443"
else
    bad "chroot: check --endpoints 127.0.0.1:6443" "$out"
fi
if out=$(chroot "$root" /kprism check --endpoints '127.0.0.9:6443,[::1]:6443' 2>&1); then
    ok "chroot: IPv4 and IPv6 literal endpoints accepted"
else
    bad "chroot: IPv4 and IPv6 literal endpoints" "$out"
fi
# The daemon itself in the empty root: starts, is ready, exits 0 on SIGTERM.
chroot "$root" /kprism --endpoints 127.0.0.1:1 --bind-port 17945 --health-port 17946 >"$tmp/run.log" 2>&1 &
pid=$!
for _ in $(seq 50); do grep -q 'msg=ready' "$tmp/run.log" && break; sleep 0.1; done
kill -TERM "$pid" 2>/dev/null; wait "$pid"; rc=$?
if [ "$rc" = 0 ] && grep -q 'msg=ready' "$tmp/run.log"; then
    ok "chroot: daemon starts, becomes ready, exits 0 on SIGTERM"
else
    bad "chroot: daemon run (exit $rc)" "$(cat "$tmp/run.log")"
fi

# 3. Hostname endpoints resolve in the empty root: from its /etc/hosts, and through a real DNS
# server (tests/harness/dns_server.py on 127.0.0.1 in the network namespace the chroot shares,
# named by KPRISM_TEST_DNS_SERVERS since resolv.conf cannot give its port), every address an
# upstream of its own.
for cmd in "check" "run"; do
    if [ "$cmd" = check ]; then
        out=$(chroot "$root" /kprism check --endpoints 127.0.0.1:1,api.example:6443 2>&1); rc=$?
    else
        out=$(timeout 2 chroot "$root" /kprism --endpoints 127.0.0.1:1,api.example:6443 --bind-port 17945 \
            --health-port 17946 2>&1); rc=$?
        [ "$rc" = 124 ] && rc=0  # ran until stopped
    fi
    if [ "$rc" = 0 ] && [[ $out != *"cannot resolve names"* ]]; then
        ok "$cmd: a hostname endpoint is accepted"
    else
        bad "$cmd: hostname endpoint (exit $rc)" "$out"
    fi
done
mkdir -p "$root/etc"
printf '127.0.0.1 localhost\n127.0.0.1 api.hosts.test\n' >"$root/etc/hosts"
dns_log=$tmp/dns.log
dns_pid=
if /usr/bin/python3 tests/harness/dns_server.py 127.0.0.1 "$tmp/zone.json" >"$dns_log" 2>&1 &
then
    dns_pid=$!
fi
printf '{"api.dns.test": {"A": ["127.0.0.2", "127.0.0.3"]}}' >"$tmp/zone.json"
for _ in $(seq 50); do grep -q 'dns: listening' "$dns_log" && break; sleep 0.1; done
dns_port=$(sed -n 's/^dns: listening on 127.0.0.1:\([0-9]*\)$/\1/p' "$dns_log")
# resolv.conf names no port: the test server is reached with KPRISM_TEST_DNS_SERVERS when it is
# not on 53; the file is there all the same, as c-ares reads it for its options.
printf 'nameserver 127.0.0.1\n' >"$root/etc/resolv.conf"
env KPRISM_TEST_DNS_SERVERS="127.0.0.1:$dns_port" chroot "$root" /kprism \
    --endpoints api.hosts.test:17001,api.dns.test:17002 --bind-port 17945 --health-port 17946 >"$tmp/run3.log" 2>&1 &
pid=$!
for _ in $(seq 50); do
    grep -q 'upstream=api.hosts.test@127.0.0.1:17001' "$tmp/run3.log" && grep -q 'upstream=api.dns.test@127.0.0.3:17002' "$tmp/run3.log" && break
    sleep 0.1
done
kill -TERM "$pid" 2>/dev/null; wait "$pid"
[ -n "$dns_pid" ] && { kill "$dns_pid" 2>/dev/null; wait "$dns_pid" 2>/dev/null; }
if grep -q 'msg="endpoint address added; checked before use" upstream=api.hosts.test@127.0.0.1:17001' "$tmp/run3.log"; then
    ok "chroot: a hostname from /etc/hosts resolves"
else
    bad "chroot: hostname from /etc/hosts" "$(cat "$tmp/run3.log")"
fi
if grep -q 'msg="endpoint resolved" upstream=api.dns.test:17002 addresses=127.0.0.2:17002,127.0.0.3:17002' "$tmp/run3.log" &&
    grep -q 'upstream=api.dns.test@127.0.0.3:17002' "$tmp/run3.log"; then
    ok "chroot: a hostname from DNS resolves to every address"
else
    bad "chroot: hostname from DNS" "$(cat "$tmp/run3.log") $(cat "$dns_log")"
fi
rm -f "$root/etc/hosts" "$root/etc/resolv.conf"

# IP endpoints never reach the resolver: no NSS configuration read, no DNS traffic.
if command -v strace >/dev/null; then
    strace -f -qq -e trace=%file,connect,sendto -o "$tmp/strace.log" \
        "$BIN" --endpoints 127.0.0.1:1,[::1]:2 --bind-port 17945 --health-port 17946 >"$tmp/run2.log" 2>&1 &
    pid=$!
    for _ in $(seq 50); do grep -q 'msg=ready' "$tmp/run2.log" && break; sleep 0.1; done
    # strace does not pass signals on: stop the traced kprism itself.
    kill -TERM $(cat "/proc/$pid/task/$pid/children" 2>/dev/null) 2>/dev/null; wait "$pid"
    out=$(grep -E 'nsswitch\.conf|resolv\.conf|/etc/hosts|/etc/passwd|libnss|htons\(53\)' "$tmp/strace.log")
    if [ -z "$out" ] && grep -q 'msg=ready' "$tmp/run2.log"; then
        ok "strace: IP endpoints, no resolver/NSS file or DNS traffic"
    else
        bad "strace: resolver activity with IP endpoints" "$out$(tail -3 "$tmp/run2.log")"
    fi
else
    echo "skip: strace not installed (resolver check)"
fi

# 4. A subset of the integration suite, against the static binary.
if [ -x "$IT" ] && [ -x "$STANDIN" ]; then
    GTEST_FILTER=$FILTER KPRISM_BIN=$BIN KPRISM_STANDIN=$STANDIN tests/run.sh "$IT" 2>&1 | tee "$tmp/it.log"
    status=${PIPESTATUS[0]}
    p=$(sed -n 's/^test: \([0-9]*\) passed, .*/\1/p' "$tmp/it.log" | tail -1)
    f=$(sed -n 's/^test: [0-9]* passed, \([0-9]*\) failed/\1/p' "$tmp/it.log" | tail -1)
    passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0}))
    if [ "$status" != 0 ] && [ "${f:-0}" = 0 ]; then failed=$((failed + 1)); fi
else
    bad "integration tests: $IT or $STANDIN missing (make test-static builds them)"
fi

echo "static: $passed passed, $failed failed"
[ "$failed" = 0 ]
