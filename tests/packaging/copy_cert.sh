#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The systemd way of running kprism unprivileged, end to end except systemd itself (which is not
# PID 1 here): packaging/systemd/kprism-copy-cert copies a root-only (0600) kubelet client
# certificate, reached through kubelet's symlink, into a runtime directory owned by an
# unprivileged user; build/kprism running as that user (uid/gid 65534, no groups, via setpriv)
# reads the copy and passes mTLS readiness checks against a stand-in apiserver that requires a
# client certificate; a rotation (symlink re-pointed) copied again is picked up without a
# restart; an unchanged source leaves the copy alone; a missing source removes it; a missing
# runtime directory is a no-op. Root only (chown, setpriv). Ends with "copy_cert: N passed, M failed".
set -u
cd "$(dirname "$0")/../.." || exit 1
BIN=$(realpath "${KPRISM_BIN:-build/kprism}")
STANDIN=$(realpath "${KPRISM_STANDIN:-build/kprism-standin}")
COPY=$PWD/packaging/systemd/kprism-copy-cert
[ "$(id -u)" = 0 ] || { echo "copy_cert: needs root (chown, setpriv); skipped"; exit 0; }
passed=0 failed=0
ok() { echo "copy_cert: ok: $*"; passed=$((passed + 1)); }
bad() { echo "copy_cert: FAIL: $*"; failed=$((failed + 1)); }
T=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done; rm -rf "$T"; }
trap cleanup EXIT
chmod 0755 "$T"
# wait_for SECONDS CMD...: poll CMD every 0.1 s until it succeeds or the deadline passes.
wait_for() {
    local end=$((SECONDS + $1)); shift
    until "$@"; do [ $SECONDS -lt $end ] || return 1; sleep 0.1; done
}
# A port below the ephemeral range (tests/faults/faultlib/procs.py: one from bind(0) can be taken
# by any connect() before the server binds it).
free_port() { python3 -c 'import sys; sys.path.insert(0, "tests/faults"); from faultlib.procs import free_port; print(free_port())'; }

# PKI: a CA, the stand-in's serving certificate for 127.0.0.1, two client certificates.
pki=$T/pki; mkdir -p "$pki"; chmod 0700 "$pki"
o() { openssl "$@" >/dev/null 2>&1 || { echo "copy_cert: openssl $1 failed" >&2; exit 1; }; }
o req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$pki/ca.key" \
    -out "$pki/ca.crt" -days 2 -subj /CN=test-ca
cp "$pki/ca.crt" "$T/ca.crt"; chmod 0644 "$T/ca.crt"
o req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$pki/srv.key" -out "$pki/srv.csr" -subj /CN=apiserver
o x509 -req -in "$pki/srv.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 2 \
    -extfile <(printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n') -out "$pki/srv.crt"
cat "$pki/srv.crt" "$pki/srv.key" > "$pki/srv.pem"
client() {  # client N DAYS: kubelet-client-N.pem, certificate and key in one 0600 file
    o req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$pki/c$1.key" -out "$pki/c$1.csr" \
        -subj "/O=system:nodes/CN=system:node:test-$1"
    o x509 -req -in "$pki/c$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days "$2" \
        -extfile <(printf 'extendedKeyUsage=clientAuth\n') -out "$pki/c$1.crt"
    (umask 077; cat "$pki/c$1.crt" "$pki/c$1.key" > "$pki/kubelet-client-$1.pem")
}
client 1 1; client 2 2
ln -s kubelet-client-1.pem "$pki/kubelet-client-current.pem"
run=$T/run/kprism; mkdir -p "$run"; chown 65534:65534 "$run"; chmod 0700 "$run"; chmod 0755 "$T/run"
dst=$run/kubelet-client.pem

# No runtime directory (kprism not running): nothing happens.
if out=$("$COPY" "$pki/kubelet-client-current.pem" "$T/absent" 2>&1) && [ -z "$out" ] && [ ! -e "$T/absent" ]; then
    ok "no runtime directory: no-op"
else bad "no runtime directory: '$out'"; fi

"$COPY" "$pki/kubelet-client-current.pem" "$run" >/dev/null
if [ "$(stat -c '%u:%g %a' "$dst" 2>/dev/null)" = "65534:65534 400" ] && cmp -s "$dst" "$pki/kubelet-client-1.pem"; then
    ok "copied, owner 65534:65534 mode 0400"
else bad "copy: $(stat -c '%u:%g %a' "$dst" 2>&1)"; fi
# setpriv execs the command in its own process: "${NOBODY[@]}" cmd & makes $! the command's pid.
# (A backgrounded shell function would be a subshell, and killing it would leave cmd running.)
NOBODY=(setpriv --reuid=65534 --regid=65534 --clear-groups)
as_nobody() { "${NOBODY[@]}" "$@"; }
if as_nobody cat "$pki/kubelet-client-current.pem" >/dev/null 2>&1; then
    bad "the unprivileged user can read the original key: the test proves nothing"
else ok "the unprivileged user cannot read the kubelet's own file"; fi

sport=$(free_port)
"$STANDIN" --listen "127.0.0.1:$sport" --tls-cert "$pki/srv.pem" --client-ca "$pki/ca.crt" >"$T/standin.log" 2>&1 &
pids+=($!)
dport=$(free_port); aport=$(free_port)
"${NOBODY[@]}" "$BIN" --endpoints "127.0.0.1:$sport" --bind-port "$dport" --health-port "$aport" \
    --client-cert "$dst" --client-key "$dst" --ca-file "$T/ca.crt" --health-interval 500ms \
    --health-timeout 400ms --health-fast-interval 200ms >"$T/kprism.log" 2>&1 &
pids+=($!)
readyz_ok() { curl -sf "http://127.0.0.1:$aport/readyz" >/dev/null; }
if wait_for 15 readyz_ok && grep -q 'client certificate loaded' "$T/kprism.log"; then
    ok "kprism as uid 65534 reads the copy and its mTLS readiness check passes"
else bad "kprism not ready: $(tail -5 "$T/kprism.log")"; fi

# Unchanged source: the copy (its inode) stays.
ino=$(stat -c %i "$dst")
out=$("$COPY" "$pki/kubelet-client-current.pem" "$run" 2>&1)
[ -z "$out" ] && [ "$(stat -c %i "$dst")" = "$ino" ] && ok "unchanged source: copy untouched" \
    || bad "unchanged source rewrote the copy: '$out'"

# Rotation the way kubelet does it: a new file, the symlink replaced by a rename.
ln -s kubelet-client-2.pem "$pki/.tmp-link" && mv -T "$pki/.tmp-link" "$pki/kubelet-client-current.pem"
"$COPY" "$pki/kubelet-client-current.pem" "$run" >/dev/null
rotated() { grep -q 'client certificate rotated' "$T/kprism.log"; }
if cmp -s "$dst" "$pki/kubelet-client-2.pem" && [ "$(stat -c %i "$dst")" != "$ino" ] \
        && [ -z "$(find "$run" -name '.kubelet-client.*')" ] && wait_for 10 rotated && readyz_ok; then
    ok "rotation copied by rename and picked up by the running kprism"
else bad "rotation: $(grep -c rotated "$T/kprism.log") rotation lines; $(ls -a "$run")"; fi

# The source disappears: the copy goes too.
rm "$pki/kubelet-client-current.pem"
"$COPY" "$pki/kubelet-client-current.pem" "$run" >/dev/null
[ ! -e "$dst" ] && ok "missing source: copy removed" || bad "missing source: copy still there"

echo "copy_cert: $passed passed, $failed failed"
[ "$failed" = 0 ]
