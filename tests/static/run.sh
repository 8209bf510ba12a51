#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks the static build (`make static`, build/static/kprism): it is statically linked, runs in an
# empty chroot (nothing but the binary in /), rejects hostname endpoints with a clear error, does
# not go near the name resolver for IP endpoints, and passes a subset of the integration suite.
# Run as root (chroot) via `make test-static`, which builds build/static/kprism and the normal
# build/ tree (stand-in apiserver, integration tests) first.
# Ends with one line "static: N passed, M failed"; exit status non-zero if any check failed.
set -u
cd "$(dirname "$0")/../.." || exit 1

BIN=${KPRISM_STATIC_BIN:-$PWD/build/static/kprism}
STANDIN=${KPRISM_STANDIN:-$PWD/build/kprism-standin}
IT=${KPRISM_IT:-$PWD/build/tests/integration}
# Left out, because the static build refuses hostnames: Upstream.UnresolvableHostnameIsAWarningNotFatal,
# Lifecycle.BadConfigurationsExitOneWithMessage, Notify.ReadyAtTheLatestAfterHealthTimeoutPlusOneSecond and
# Notify.SocketActivationPassedAddressIsNeverUsedByName.
# The static build is the one without libsystemd: every notify, socket activation, lifecycle and
# restart handover and crash copy test runs against it (its hand-built sd_notify protocol).
FILTER='Splice.*:Upstream.RefusedIsRetriedOnAnother:Health.EveryResultClass:Health.SessionsAreResumed:Notify.*:Lifecycle.*:Handover.*:CrashCopy.*-Lifecycle.BadConfigurationsExitOneWithMessage:Notify.ReadyAtTheLatestAfterHealthTimeoutPlusOneSecond:Notify.SocketActivationPassedAddressIsNeverUsedByName'
HOSTNAME_ERR="endpoints: 'api.example:6443' is a hostname; this static build cannot resolve names - use IP addresses (or the dynamic build)"

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
# kprism's own objects do not reference the NSS-backed resolver or user database at all (the
# libcrypto/libuv objects that do are linked in but never called; see talos-extension/README.md,
# "The static binary").
# (Only when the static build tree is here: KPRISM_STATIC_BIN may name a binary built elsewhere.)
objs=(build/static/obj/*/*.o)
if [ -d build/static/obj ] && [ ! -f "${objs[0]}" ]; then
    bad "no kprism objects under build/static/obj/*/ to check for resolver/NSS references"
elif [ -d build/static/obj ]; then
    out=$(nm -u "${objs[@]}" | grep -Ew 'getaddrinfo|uv_getaddrinfo|gethostbyname|getpwnam|getpwuid|getpwnam_r|getpwuid_r|getgrnam|BIO_lookup|BIO_lookup_ex|BIO_new_connect' | sort -u)
    if [ -z "$out" ]; then ok "kprism objects reference no resolver/NSS function"; else bad "kprism objects reference NSS functions" "$out"; fi
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
if out=$(chroot "$root" /kprism check --endpoints '10.0.0.1:6443,[fd00::1]:6443' 2>&1); then
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

# 3. Hostname endpoints are refused at validation with one clear line naming the key.
for cmd in "check" "run"; do
    out=$(chroot "$root" /kprism $cmd --endpoints 10.0.0.1:6443,api.example:6443 2>&1); rc=$?
    if [ "$rc" = 1 ] && [[ $out == *"--endpoints: $HOSTNAME_ERR"* ]]; then
        ok "$cmd: hostname endpoint exits 1 with the static-build error"
    else
        bad "$cmd: hostname endpoint (exit $rc)" "$out"
    fi
done
printf 'endpoints = ["10.0.0.1:6443", { address = "api.example:6443", zone = "a" }]\n' >"$root/kprism.toml"
out=$(chroot "$root" /kprism check --config /kprism.toml 2>&1); rc=$?
if [ "$rc" = 1 ] && [[ $out == *"kprism.toml"*"$HOSTNAME_ERR"* ]]; then
    ok "config file: hostname endpoint exits 1 with the static-build error"
else
    bad "config file: hostname endpoint (exit $rc)" "$out"
fi

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
