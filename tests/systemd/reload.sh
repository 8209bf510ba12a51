#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# kprism.service under a real systemd 252 as PID 1: a minimal Debian 12 tree (debootstrap
# --variant=minbase, cached in build/systemd-root) booted with systemd-nspawn, kprism installed
# the way a user gets it (the package build/kprism_*.deb with dpkg -i if a fresh one exists, else
# the static binary build/static/kprism if fresh, else `make install`), two TLS stand-in
# apiservers on the host's loopback requiring a client certificate (the container shares the
# host's network namespace). It checks: the start (copy of the kubelet's root-only key, the state
# directory /var/lib/kprism, READY, the upstream up through `kprism status`), `systemctl reload`
# applying an added endpoint, and
# failing, with kprism reload's reason in the journal and `systemctl status`, for a TOML syntax
# error, a value out of bounds, a listen address that cannot be bound and a certificate path whose
# file does not exist, while the service
# keeps running the old configuration and passing TLS through; all without /bin/kill (no
# procps in the tree). Then a kubelet-style certificate rotation picked up through
# kprism-cert.path. Then HELD TLS keep-alive connections through kprism kept across RESTARTS
# `systemctl restart`s (the fd store handover, held_tls.py). One "ok"/"FAIL" line per check, then
# "systemd-reload: N passed, M failed". HELD (default 100) and RESTARTS (default 3) in the environment.
#
# Root only; prints "skip: ..." and exits 0 without root, debootstrap, systemd-nspawn or
# overlayfs. The cached tree is never modified: each run boots an overlay of it, removed at exit.
# Environment: BUILD (default build: kprism-standin, make install), SYSTEMD_ROOT (the cached
# tree, default build/systemd-root), KPRISM_INSTALL=deb|static|make (force one way), KPRISM_DEB
# (the package to use, default the newest build/kprism_*.deb), KPRISM_STATIC (default
# build/static/kprism),
# DEBIAN_MIRROR (default http://deb.debian.org/debian), KEEP=1 (leave the run directory),
# HOLD=SECONDS (keep the container running at the end, to look around).
set -u
cd "$(dirname "$0")/../.." || exit 1
NAME=systemd-reload
BUILD=${BUILD:-build}
CACHE=${SYSTEMD_ROOT:-build/systemd-root}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# The tree: systemd as init and the libraries a dynamically linked kprism needs (libsystemd0
# comes with systemd). Anything else a package Depends on is installed with apt-get at test time.
INCLUDE=systemd,libuv1,libc-ares2,libfmt9,libssl3
BOOTSTRAP=(debootstrap --variant=minbase "--include=$INCLUDE" bookworm)

[ "$(id -u)" = 0 ] || { echo "skip: $NAME needs root (debootstrap, mounts, systemd-nspawn)"; exit 0; }
for t in debootstrap systemd-nspawn nsenter openssl curl python3 timeout flock; do
    command -v "$t" >/dev/null || { echo "skip: $NAME needs $t (apt-get install systemd-container debootstrap)"; exit 0; }
done
grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null
grep -qw overlay /proc/filesystems || { echo "skip: $NAME needs overlayfs"; exit 0; }

started=$SECONDS
passed=0 failed=0
ok() { echo "ok $*"; passed=$((passed + 1)); }
bad() { echo "FAIL $*"; failed=$((failed + 1)); }
note() { echo "# $*"; }
die() { echo "FAIL $*"; failed=$((failed + 1)); finish; }
finish() {
    echo "$NAME: $passed passed, $failed failed ($((SECONDS - started)) s)"
    [ "$failed" = 0 ] && exit 0 || exit 1
}
# wait_for SECONDS CMD...: poll CMD every 0.2 s until it succeeds or the deadline passes.
wait_for() {
    local end=$((SECONDS + $1)); shift
    until "$@"; do [ $SECONDS -lt $end ] || return 1; sleep 0.2; done
}
# A port below the ephemeral range (tests/faults/faultlib/procs.py: one from bind(0) can be taken
# by any connect() before the server binds it).
free_port() { python3 -c 'import sys; sys.path.insert(0, "tests/faults"); from faultlib.procs import free_port; print(free_port())'; }
indent() { sed 's/^/#   /'; }

T=$(mktemp -d "${TMPDIR:-/tmp}/kprism-systemd.XXXXXX")
ROOT=$T/root
NSPAWN_PID='' CPID='' mounted_nspawn_tmpfs=0 mounted_root=0
standins=()
cleanup() {
    trap - EXIT INT TERM
    if [ -n "$CPID" ] && kill -0 "$CPID" 2>/dev/null; then
        timeout 10 nsenter -t "$CPID" -a /usr/bin/systemctl --no-block poweroff >/dev/null 2>&1
    fi
    if [ -n "$NSPAWN_PID" ]; then
        local end=$((SECONDS + 20))
        while kill -0 "$NSPAWN_PID" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 0.2; done
        if kill -0 "$NSPAWN_PID" 2>/dev/null; then
            kill -TERM "$NSPAWN_PID" 2>/dev/null; end=$((SECONDS + 10))
            while kill -0 "$NSPAWN_PID" 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 0.2; done
        fi
        kill -0 "$NSPAWN_PID" 2>/dev/null && kill -KILL "$NSPAWN_PID" 2>/dev/null
        [ -n "$CPID" ] && kill -0 "$CPID" 2>/dev/null && kill -KILL "$CPID" 2>/dev/null
        wait "$NSPAWN_PID" 2>/dev/null
    fi
    for p in "${standins[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    if [ "$mounted_root" = 1 ]; then umount "$ROOT" 2>/dev/null || umount -l "$ROOT"; fi
    if [ "$mounted_nspawn_tmpfs" = 1 ]; then umount /run/systemd/nspawn 2>/dev/null || umount -l /run/systemd/nspawn; fi
    if [ "${KEEP:-0}" = 1 ]; then echo "# kept $T"; else rm -rf "$T"; fi
}
trap cleanup EXIT
trap 'bad "interrupted"; finish' INT TERM

# ---- The cached tree: debootstrap once, reused while its stamp matches the command. ----
stamp="${BOOTSTRAP[*]} $MIRROR"
# Runs at the same time share the tree: an exclusive lock to check or make it, then a shared
# one while it is the overlay's lower layer (fd 9, closed for the long-lived children).
mkdir -p "$(dirname "$CACHE")"
exec 9>"$CACHE.lock"
flock -x -w 900 9 || die "cannot lock $CACHE.lock"
if [ -f "$CACHE/.kprism-tree" ] && [ "$(cat "$CACHE/.kprism-tree")" = "$stamp" ]; then
    note "tree: cached $CACHE"
else
    note "tree: debootstrap into $CACHE (takes a minute or two)"
    rm -rf "$CACHE.tmp" "$CACHE"
    t0=$SECONDS
    if ! timeout 900 "${BOOTSTRAP[@]}" "$CACHE.tmp" "$MIRROR" >"$T/debootstrap.log" 2>&1; then
        tail -20 "$T/debootstrap.log" | indent
        die "debootstrap of the minimal tree failed (log above)"
    fi
    echo "$stamp" > "$CACHE.tmp/.kprism-tree"
    mv "$CACHE.tmp" "$CACHE"
    note "tree: debootstrap took $((SECONDS - t0)) s"
fi
flock -s 9

# ---- How kprism gets installed. ----
# Fresh = newer than every tracked file it is built from (working-tree mtimes, so another
# engineer's uncommitted edit makes it stale too).
newest() { git ls-files -z -- "$@" | xargs -0 stat -c %Y 2>/dev/null | sort -n | tail -1; }
src_newest=$(newest src include Makefile mk); src_newest=${src_newest:-0}
pkg_newest=$(newest src include Makefile mk packaging man); pkg_newest=${pkg_newest:-0}
deb=${KPRISM_DEB:-$(ls -t build/kprism_*.deb 2>/dev/null | head -1)}
static_bin=${KPRISM_STATIC:-build/static/kprism}
how=${KPRISM_INSTALL:-}
if [ -z "$how" ]; then
    if [ -n "$deb" ] && [ "$(stat -c %Y "$deb")" -ge "$pkg_newest" ]; then how=deb
    elif [ -x "$static_bin" ] && [ "$(stat -c %Y "$static_bin")" -ge "$src_newest" ]; then how=static
    else how="make"; fi
    [ -n "$deb" ] && [ "$how" != deb ] && note "install: $deb is older than the sources, not used"
fi
case $how in
deb)
    [ -f "$deb" ] || die "KPRISM_INSTALL=deb but no package (build/kprism_*.deb, KPRISM_DEB)"
    cp "$deb" "$T/kprism.deb"  # make deb may replace it meanwhile
    note "install: the Debian package $deb (dpkg -i in the container)" ;;
static)
    [ -x "$static_bin" ] || die "KPRISM_INSTALL=static but no $static_bin"
    cp "$static_bin" "$T/kprism.static"
    note "install: make install DESTDIR=<tree> PREFIX=/usr BUILD=$BUILD, binary replaced by the static $static_bin" ;;
make)
    note "install: make install DESTDIR=<tree> PREFIX=/usr BUILD=$BUILD, runtime libraries from Debian in the tree" ;;
*) die "KPRISM_INSTALL is deb, static or make, not '$how'" ;;
esac
if [ ! -x "$BUILD/kprism-standin" ] || { [ "$how" = make ] && [ ! -x "$BUILD/kprism" ]; }; then
    note "building $BUILD (make -j2 BUILD=$BUILD all)"
    make -j2 BUILD="$BUILD" all >"$T/make.log" 2>&1 || { tail -20 "$T/make.log" | indent; die "make BUILD=$BUILD all failed"; }
fi
STANDIN=$(realpath -m "$BUILD/kprism-standin")

# ---- The overlay: the cached tree stays as it is. ----
mkdir -p "$T/upper" "$T/work" "$ROOT"
mount -t overlay overlay -o "lowerdir=$(realpath -m "$CACHE"),upperdir=$T/upper,workdir=$T/work" "$ROOT" \
    || die "cannot mount an overlay of $CACHE"
mounted_root=1
if [ "$how" != deb ]; then
    if ! make --no-print-directory install DESTDIR="$ROOT" PREFIX=/usr BUILD="$BUILD" >"$T/install.log" 2>&1; then
        tail -20 "$T/install.log" | indent; die "make install DESTDIR=<tree> failed"
    fi
    [ "$how" = static ] && install -m 0755 "$T/kprism.static" "$ROOT/usr/bin/kprism"
fi

# ---- Test PKI: CA, serving certificate for the stand-ins, a kubelet client certificate. ----
pki=$T/pki; mkdir -m 0700 "$pki"
o() { openssl "$@" >>"$T/openssl.log" 2>&1 || die "openssl $1 failed: $(tail -3 "$T/openssl.log")"; }
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
o req -x509 "${ec[@]}" -keyout "$pki/ca.key" -out "$pki/ca.crt" -days 2 -subj /CN=kprism-systemd-test-ca
o req "${ec[@]}" -keyout "$pki/srv.key" -out "$pki/srv.csr" -subj /CN=kube-apiserver
o x509 -req -in "$pki/srv.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 2 -out "$pki/srv.crt" \
    -extfile <(printf 'subjectAltName=IP:127.0.0.1,IP:127.0.0.21,IP:127.0.0.22,IP:127.0.0.23\nextendedKeyUsage=serverAuth\n')
cat "$pki/srv.crt" "$pki/srv.key" > "$pki/srv.pem"
client() {  # client NAME DAYS: $pki/NAME.pem, a kubelet client certificate and its key in one file
    o req "${ec[@]}" -keyout "$pki/$1.key" -out "$pki/$1.csr" -subj "/O=system:nodes/CN=system:node:test"
    o x509 -req -in "$pki/$1.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days "$2" -out "$pki/$1.crt" \
        -extfile <(printf 'extendedKeyUsage=clientAuth\n')
    cat "$pki/$1.crt" "$pki/$1.key" > "$pki/$1.pem"
}
client client1 2; client client2 3  # another expiry: "client certificate rotated"
# Into the tree the way kubeadm and kubelet leave them: the CA 0644, the client certificate and
# key in one root-only file reached through kubelet-client-current.pem.
install -D -m 0644 "$pki/ca.crt" "$ROOT/etc/kubernetes/pki/ca.crt"
install -d -m 0700 "$ROOT/var/lib/kubelet/pki"
install -m 0600 "$pki/client1.pem" "$ROOT/var/lib/kubelet/pki/kubelet-client-2000-01-01-00-00-00.pem"
ln -s /var/lib/kubelet/pki/kubelet-client-2000-01-01-00-00-00.pem "$ROOT/var/lib/kubelet/pki/kubelet-client-current.pem"

# ---- Stand-in apiservers on the host: TLS, client certificate required. ----
# standin NAME IP: listens on IP:0 and reports the port on its first line.
# /readyz answers as $T/NAME.readyz says (200 while it is missing).
standin() {
    "$STANDIN" --listen "$2:0" --name "$1" --tls-cert "$pki/srv.pem" --client-ca "$pki/ca.crt" \
        --readyz-file "$T/$1.readyz" >"$T/$1.log" 2>&1 9>&- &
    standins+=($!)
    wait_for 5 grep -q '^listening ' "$T/$1.log" || die "stand-in $1 did not start: $(cat "$T/$1.log")"
    printf -v "$1" '%s' "$(sed -n '1s/^listening \([^ ]*\) .*/\1/p' "$T/$1.log")"
}
standin standin_a 127.0.0.21
standin standin_b 127.0.0.22
# shellcheck disable=SC2154
note "stand-ins: standin_a=$standin_a standin_b=$standin_b"
DPORT=$(free_port) APORT=$(free_port)
while [ "$APORT" = "$DPORT" ]; do APORT=$(free_port); done
note "kprism: data 127.0.0.1:$DPORT, admin 127.0.0.1:$APORT (the container shares the host's network)"

# write_config ENDPOINTS [SED-EXPRESSION...]: /etc/kprism/kprism.toml in the tree, made the way
# a user makes it: the shipped file ($T/kprism.toml.dist, see below) with endpoints and the ports
# set, faster checks for the test, and the given edits.
write_config() {
    local eps=$1 e args
    shift
    args=(-e "s|^endpoints = .*|endpoints = [$eps]|" -e "s|^bind_port = .*|bind_port = $DPORT|"
          -e "s|^port = .*|port = $APORT|" -e '/^\[health\]$/,/^\[/s|^interval = .*|interval = "1s"|'
          -e 's|^fast_interval = .*|fast_interval = "200ms"|' -e 's|^timeout = .*|timeout = "800ms"|')
    for e; do args+=(-e "$e"); done
    sed "${args[@]}" "$T/kprism.toml.dist" > "$ROOT/etc/kprism/kprism.toml.new" || die "sed on the configuration failed"
    chmod 0644 "$ROOT/etc/kprism/kprism.toml.new"
    mv -f "$ROOT/etc/kprism/kprism.toml.new" "$ROOT/etc/kprism/kprism.toml"
}

# ---- Boot systemd as PID 1. ----
if ! mountpoint -q /run/systemd/nspawn; then
    mkdir -p /run/systemd/nspawn
    mount -t tmpfs -o mode=0755 tmpfs /run/systemd/nspawn || die "cannot mount a tmpfs on /run/systemd/nspawn"
    mounted_nspawn_tmpfs=1
fi
t0=$SECONDS
systemd-nspawn -D "$ROOT" --register=no --keep-unit -b --console=read-only \
    --machine="kprism-test-$$" >"$T/nspawn.log" 2>&1 </dev/null 9>&- &
NSPAWN_PID=$!
find_init() {  # the container's PID 1: nspawn's child whose pid in its own namespace is 1
    local s
    for s in /proc/[0-9]*/status; do
        awk -v n="$NSPAWN_PID" '/^PPid:/ { pp = $2 } /^NSpid:/ { last = $NF; cnt = NF }
            END { exit !(pp == n && cnt > 2 && last == 1) }' "$s" 2>/dev/null || continue
        s=${s#/proc/}; CPID=${s%/status}; return 0
    done
    return 1
}
wait_for 20 find_init || { tail -20 "$T/nspawn.log" | indent; die "systemd-nspawn started no container"; }
PATH_C=/usr/sbin:/usr/bin:/sbin:/bin
# C CMD...: run CMD in the container (all its namespaces), at most 90 s.
C() { timeout 90 nsenter -t "$CPID" -a env -i PATH=$PATH_C LANG=C.UTF-8 SYSTEMD_COLORS=0 "$@"; }
booted() { s=$(C systemctl is-system-running 2>/dev/null); [ "$s" = running ] || [ "$s" = degraded ]; }
if wait_for 60 booted; then
    ok "systemd $(C systemctl --version | sed -n '1s/^systemd \([0-9]*\).*/\1/p') is PID 1 in the minimal Debian 12 tree (state $s, boot $((SECONDS - t0)) s)"
else
    tail -20 "$T/nspawn.log" | indent
    die "the container did not boot (state '$(C systemctl is-system-running 2>&1)')"
fi
[ "$s" = degraded ] && C systemctl --failed --no-pager --plain | indent

# ---- Install. ----
# apt-get install, in the container, those of the packages (after WHY) that it lacks.
install_missing() {
    local why=$1 d missing=()
    shift
    for d in "$@"; do
        C dpkg-query -W -f='${Status}' "$d" 2>/dev/null | grep -q 'install ok installed' || missing+=("$d")
    done
    [ ${#missing[@]} -gt 0 ] || return 0
    note "apt-get install ${missing[*]} in the container ($why)"
    C sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"' \
        sh "${missing[@]}" >"$T/apt.log" 2>&1 || { tail -10 "$T/apt.log" | indent; bad "apt-get install ${missing[*]}"; }
}

if [ "$how" = deb ]; then
    deps=$(dpkg-deb -f "$T/kprism.deb" Depends)
    note "package Depends: $deps"
    # First alternative of each dependency, without version: what is missing in the tree.
    install_missing "the package depends on them" $(sed 's/([^)]*)//g; s/|[^,]*//g; s/,/ /g' <<<"$deps")
    cp "$T/kprism.deb" "$ROOT/root/kprism.deb"  # (the container has its own tmpfs on /tmp)
    if out=$(C dpkg -i /root/kprism.deb 2>&1); then
        ok "dpkg -i $(basename "$deb") in the container (Depends satisfied)"
    else
        echo "$out" | indent; die "dpkg -i failed"
    fi
else
    # The packages that hold the binary's libraries on the host, where it was linked.
    if [ "$how" = make ]; then
        pkgs=$(ldd "$BUILD/kprism" | awk '/=>/ { print $3 }' | while read -r l; do
                   dpkg -S "$l" 2>/dev/null || dpkg -S "$(realpath "$l")" 2>/dev/null; done |
               sed 's/:.*//' | sort -u)
        # shellcheck disable=SC2086  # one package name per word
        install_missing "the binary links them" $pkgs
    fi
    C systemctl daemon-reload
fi
# The file to edit: the package's conffile, or with make install the example with the client
# certificate pointed at the copy (packaging/systemd/README.md: "With make install, set them
# yourself").
mkdir -p "$ROOT/etc/kprism"
if [ "$how" = deb ]; then
    cp "$ROOT/etc/kprism/kprism.toml" "$T/kprism.toml.dist" || die "the package installed no /etc/kprism/kprism.toml"
    [ "$(grep -c '^client_\(cert\|key\) = "/run/kprism/kubelet-client.pem"' "$T/kprism.toml.dist")" = 2 ] \
        && ok "the package's /etc/kprism/kprism.toml reads the key copy /run/kprism/kubelet-client.pem" \
        || bad "the package's /etc/kprism/kprism.toml does not point client_cert/client_key at the copy"
else
    sed 's#^\(client_\(cert\|key\) = \)".*"#\1"/run/kprism/kubelet-client.pem"#' \
        "$ROOT/usr/share/doc/kprism/kprism.toml.example" > "$T/kprism.toml.dist" || die "make install put no example"
fi
for k in endpoints bind_port port fast_interval timeout policy max_connections; do
    [ "$(grep -c "^$k = " "$T/kprism.toml.dist")" = 1 ] || die "the shipped file has no single '$k = ' line to edit"
done
# interval is also a [rebalance] key: the one edited is [health]'s.
[ "$(awk '/^\[/ { sec = $0 } sec == "[health]" && /^interval = /' "$T/kprism.toml.dist" | wc -l)" = 1 ] \
    || die "the shipped file has no single 'interval = ' line under [health] to edit"
if lddout=$(C ldd /usr/bin/kprism 2>&1) && grep -q 'not found' <<<"$lddout"; then
    echo "$lddout" | grep 'not found' | indent; bad "libraries missing for /usr/bin/kprism in the tree"
fi
if v=$(C /usr/bin/kprism --version 2>&1); then ok "installed ($how): $v"
else echo "$v" | indent; die "/usr/bin/kprism does not run in the tree"; fi
[ "$(C systemctl show -p LoadState --value kprism.service)" = loaded ] || die "kprism.service is not loaded"
[ "$(C systemctl show -p UnitFileState --value kprism.service)" = disabled ] && note "kprism.service is installed disabled, as documented"

# ---- No /bin/kill, no procps. ----
if C dpkg-query -W -f='${Status}' procps 2>/dev/null | grep -q 'install ok installed'; then
    note "procps is installed in the tree; removing it for the test"
    C dpkg --purge --force-depends procps >/dev/null 2>&1
fi
if [ ! -e "$ROOT/bin/kill" ] && [ ! -e "$ROOT/usr/bin/kill" ] && ! C sh -c 'command -v -p kill | grep -q /' \
        && ! C dpkg-query -W -f='${Status}' procps 2>/dev/null | grep -q 'install ok installed'; then
    ok "no /bin/kill, no procps in the tree"
else bad "a kill(1) binary is in the tree: $(ls -l "$ROOT"/bin/kill "$ROOT"/usr/bin/kill 2>&1 | tr '\n' ' ')"; fi
er=$(C systemctl show -p ExecReload --value kprism.service)
grep -q 'path=/usr/bin/kprism ; argv\[\]=/usr/bin/kprism reload --config /etc/kprism/kprism.toml --pid \$MAINPID' <<<"$er" \
    && ok "ExecReload is kprism reload --pid \$MAINPID" || bad "ExecReload: $er"

# ---- Start. ----
write_config "\"$standin_a\""
prop() { C systemctl show -p "$1" --value kprism.service; }
new_main() {  # new_main PID: another kprism than PID runs and is ready (Type=notify: active)
    local p; p=$(prop MainPID)
    [ "$p" != 0 ] && [ "$p" != "$1" ] && [ "$(prop ActiveState)" = active ]
}
crash_restart() {  # SIGKILL kprism, then wait for the one systemd starts next
    local p0; p0=$(prop MainPID)
    C systemctl kill -s KILL kprism.service && wait_for 30 new_main "$p0"
}
jcursor() { C journalctl -u kprism.service -n 0 --show-cursor --no-pager | sed -n 's/^-- cursor: //p'; }
jsince() {  # the unit's journal after cursor $1 (all of it when $1 is empty: nothing logged before)
    if [ -n "$1" ]; then C journalctl -u kprism.service --after-cursor="$1" --no-pager -o cat
    else C journalctl -u kprism.service --no-pager -o cat; fi
}
jall() { C journalctl -u kprism.service --no-pager -o short-iso; }
status_json() { curl -s -m 3 "http://127.0.0.1:$APORT/status"; }
# ups N: /status lists exactly N upstreams, all up.
ups() { status_json | python3 -c '
import json, sys
u = json.load(sys.stdin)["upstreams"]
sys.exit(not (len(u) == int(sys.argv[1]) and all(x.get("state") == "up" for x in u)))' "$1" 2>/dev/null; }
# through NAME...: a TLS request with the client certificate through kprism's data port reaches one of NAME.
through() {
    local r
    r=$(curl -s -m 5 --cacert "$pki/ca.crt" --cert "$pki/client1.crt" --key "$pki/client1.key" \
        "https://127.0.0.1:$DPORT/version") || return 1
    for n; do [[ $r == "served by $n path /version" ]] && return 0; done
    return 1
}
c0=$(jcursor)
if out=$(C systemctl start kprism.service 2>&1); then ok "systemctl start kprism"
else echo "$out" | indent; jall | tail -20 | indent; die "systemctl start kprism failed"; fi
st=$(prop ActiveState)/$(prop SubState)
[ "$st" = active/running ] && ok "kprism.service $st" || bad "kprism.service is $st"
text_is() { [ "$(prop StatusText)" = "$1" ]; }
wait_for 10 text_is "1/1 upstreams ready" && ok "READY, StatusText '$(prop StatusText)'" \
    || bad "StatusText '$(prop StatusText)', not '1/1 upstreams ready'"
MAINPID=$(prop MainPID)
uid=$(C awk '/^Uid:/ { print $2 }' "/proc/$MAINPID/status" 2>/dev/null)  # MainPID is the container's pid
[ -n "$uid" ] && [ "$uid" -ge 61184 ] && [ "$uid" -le 65519 ] && ok "runs as a dynamic user (uid $uid)" \
    || bad "MainPID $MAINPID runs as uid '$uid', not a dynamic user"
own=$(C stat -c '%u %a' /run/kprism/kubelet-client.pem 2>&1)
[ "$own" = "$uid 400" ] && ok "the key copy /run/kprism/kubelet-client.pem is owned by uid $uid, mode 0400" \
    || bad "the key copy: '$own', not '$uid 400'"
# StateDirectory=kprism with DynamicUser=yes: /var/lib/private/kprism owned by the dynamic uid,
# /var/lib/kprism a symlink to it (where the discovery snapshot is written).
state=$(C stat -L -c '%u %a' /var/lib/kprism 2>&1); link=$(C readlink /var/lib/kprism 2>&1)
[ "$state" = "$uid 700" ] && [ "$link" = private/kprism ] \
    && ok "StateDirectory: /var/lib/kprism -> $link, owned by uid $uid, mode 0700" \
    || bad "StateDirectory: /var/lib/kprism is '$state' -> '$link', not '$uid 700' -> private/kprism"
jsince "$c0" | grep -q 'kprism-copy-cert: copied /var/lib/kubelet/pki/kubelet-client-current.pem to /run/kprism/kubelet-client.pem' \
    && ok "ExecStartPre=+kprism-copy-cert copied the kubelet's key" || bad "no kprism-copy-cert line in the journal"
sout=$(C kprism status --config /etc/kprism/kprism.toml 2>&1); src=$?
if [ $src = 0 ] && grep -E "^$standin_a +.* up " <<<"$sout" >/dev/null; then ok "kprism status: $standin_a up"
else echo "$sout" | indent; bad "kprism status (exit $src) does not show $standin_a up"; fi
wait_for 5 through standin_a && ok "TLS through the data port to standin_a" || bad "no TLS request through 127.0.0.1:$DPORT"

# ---- Reload: add the second endpoint. ----
c1=$(jcursor)
write_config "\"$standin_a\", \"$standin_b\""
rout=$(C systemctl reload kprism.service 2>&1); rrc=$?
[ $rrc = 0 ] && ok "systemctl reload kprism (endpoint added) exits 0" \
    || { echo "$rout" | indent; bad "systemctl reload kprism exits $rrc"; }
if wait_for 10 ups 2; then ok "/status lists both upstreams, up"
else status_json | indent; bad "/status does not list two up upstreams"; fi
sout=$(C kprism status --config /etc/kprism/kprism.toml 2>&1)
grep -qE "^$standin_a +.* up " <<<"$sout" && grep -qE "^$standin_b +.* up " <<<"$sout" \
    && ok "kprism status: both up" || { echo "$sout" | indent; bad "kprism status does not show both up"; }
j=$(jsince "$c1")
grep -q 'msg="configuration reloaded"' <<<"$j" && grep -q "endpoint_added=$standin_b" <<<"$j" \
    && ok "journal: $(grep -m1 'configuration reloaded' <<<"$j" | cut -c1-160)" \
    || { echo "$j" | indent; bad "no 'configuration reloaded' line naming $standin_b in the journal"; }
grep -q "^kprism reload: configuration reloaded: .*endpoint_added=$standin_b" <<<"$j" \
    && ok "journal has kprism reload's own line" || bad "no 'kprism reload: configuration reloaded' line from ExecReload"
[ "$(prop MainPID)" = "$MAINPID" ] && [ "$(prop NRestarts)" = 0 ] && st=$(prop ActiveState)/$(prop SubState) \
    && [ "$st" = active/running ] && ok "same MainPID $MAINPID, no restart, $st" \
    || bad "after the reload: MainPID $(prop MainPID) (was $MAINPID), NRestarts $(prop NRestarts), $(prop ActiveState)/$(prop SubState)"
wait_for 10 text_is "2/2 upstreams ready" && ok "StatusText '$(prop StatusText)'" || bad "StatusText '$(prop StatusText)'"
if grep -qiE 'reception only permitted|Got notification message from PID' <<<"$(C journalctl -b --no-pager -o cat | grep -i notif)"; then
    bad "systemd rejected a notification: $(C journalctl -b --no-pager -o cat | grep -i 'notification message' | head -2)"
fi

# ---- Rejected reloads: the old configuration keeps serving. ----
# rejected LABEL EXPECT-IN-JOURNAL: systemctl reload fails, the reason is in the journal and
# systemctl status, and the service runs on with both upstreams, passing TLS through.
rejected() {
    local label=$1 want=$2 c rout rrc j ss
    c=$(jcursor)
    rout=$(C systemctl reload kprism.service 2>&1); rrc=$?
    if [ $rrc != 0 ]; then ok "$label: systemctl reload exits $rrc"
    else bad "$label: systemctl reload exits 0"; fi
    j=$(jsince "$c")
    if grep -qE "$want" <<<"$j"; then
        ok "$label: journal: $(grep -m1 -E "$want" <<<"$j" | cut -c1-200)"
    else echo "$j" | indent; bad "$label: no line matching '$want' in the journal"; fi
    ss=$(C systemctl status kprism.service --no-pager -l -n 15 2>&1)
    grep -qE "$want" <<<"$ss" && ok "$label: systemctl status shows the reason" \
        || { echo "$ss" | indent; bad "$label: systemctl status does not show the reason"; }
    st=$(prop ActiveState)/$(prop SubState)
    [ "$st" = active/running ] && [ "$(prop MainPID)" = "$MAINPID" ] && [ "$(prop NRestarts)" = 0 ] \
        && ok "$label: still $st, same MainPID" \
        || bad "$label: $st, MainPID $(prop MainPID) (was $MAINPID), NRestarts $(prop NRestarts)"
    ups 2 && ok "$label: old configuration serving (both upstreams up in /status)" \
        || { status_json | indent; bad "$label: /status changed"; }
    wait_for 5 through standin_a standin_b && ok "$label: TLS still passes through the data port" \
        || bad "$label: no TLS request through the data port"
    echo "$rout" > "$T/reload-$label.out"
}
failures_metric() { curl -s -m 3 "http://127.0.0.1:$APORT/metrics" | sed -n 's/^kprism_config_reloads_total{result="failure"} \([0-9]*\).*/\1/p'; }

# The loader's errors are caught by kprism reload itself, before anything is sent.
f0=$(failures_metric)
write_config "\"$standin_a\", \"$standin_b\"" 's|^policy = .*|policy = "random|'
rejected "toml-syntax-error" 'kprism reload: reload failed; .*kprism.toml:[0-9]+:[0-9]+: invalid TOML'
write_config "\"$standin_a\", \"$standin_b\"" 's|^max_connections = .*|max_connections = 0|'
rejected "value-out-of-bounds" 'kprism reload: reload failed; .*kprism.toml:[0-9]+: max_connections: 0 out of range'
f1=$(failures_metric)
note "kprism_config_reloads_total{result=\"failure\"} $f0 -> $f1 after those two: kprism reload sent nothing, so the daemon (and KprismConfigReloadFailed) never saw them"
# Valid as a file, but the daemon cannot bind it: 127.0.0.21:<standin_a's port> is taken (by
# standin_a, which this file therefore leaves out of the endpoints: an endpoint kprism would
# listen on is refused before any bind, kprism(8) Addresses kprism never connects to).
DPORT_SAVE=$DPORT; DPORT=${standin_a##*:}
write_config "\"$standin_b\"" '0,/^bind_address = .*/s//bind_address = ["127.0.0.21"]/'
DPORT=$DPORT_SAVE
rejected "address-in-use" "kprism reload: reload failed; the old configuration keeps serving: cannot listen on 127.0.0.21:${standin_a##*:}: address already in use"
jall | grep -q 'reload failed; keeping the old configuration' \
    && ok "address-in-use: the daemon logged 'reload failed; keeping the old configuration'" \
    || bad "address-in-use: no 'reload failed; keeping the old configuration' from the daemon"
f2=$(failures_metric)
[ -n "$f2" ] && [ "$f2" = $(( ${f1:-0} + 1 )) ] && ok "kprism_config_reloads_total{result=\"failure\"} $f1 -> $f2" \
    || bad "failure counter $f1 -> $f2"
# Certificate paths whose files do not load: refused whole, the certificate in use stays and the
# checks go on with it (both upstreams up).
write_config "\"$standin_a\", \"$standin_b\"" 's|^client_cert = .*|client_cert = "/run/kprism/not-written.pem"|'
rejected "tls-file-missing" 'kprism reload: reload failed; .*the new TLS files do not load: client certificate /run/kprism/not-written.pem does not exist'
# And a good file after the bad ones applies.
c2=$(jcursor)
write_config "\"$standin_b\""
if C systemctl reload kprism.service >/dev/null 2>&1 && wait_for 10 ups 1 && wait_for 5 through standin_b \
        && jsince "$c2" | grep -q "endpoint_removed=$standin_a"; then
    ok "a valid file after the rejected ones applies (endpoint $standin_a removed)"
else bad "the valid file after the rejected ones: $(jsince "$c2" | tail -3 | tr '\n' ' ')"; fi

# ---- A plain SIGHUP (systemctl kill -s HUP), what the man page offers for old versions. ----
c4=$(jcursor)
write_config "\"$standin_b\", \"$standin_a\""
C systemctl kill -s HUP --kill-who=main kprism.service
hup_done() { jsince "$c4" | grep -q 'msg="configuration reloaded" changes="endpoint_added='; }
active_again() { [ "$(prop ActiveState)/$(prop SubState)" = active/running ]; }
if wait_for 10 hup_done && wait_for 10 active_again && [ "$(prop MainPID)" = "$MAINPID" ] && wait_for 10 ups 2; then
    ok "SIGHUP through systemctl kill: reloaded, active/running, same MainPID"
else jsince "$c4" | indent; bad "SIGHUP through systemctl kill: $(prop ActiveState)/$(prop SubState)"; fi

# ---- Certificate rotation the way kubelet does it, through kprism-cert.path. ----
[ "$(C systemctl show -p ActiveState --value kprism-cert.path)" = active ] && ok "kprism-cert.path active" \
    || bad "kprism-cert.path is $(C systemctl show -p ActiveState --value kprism-cert.path)"
c3=$(jcursor)
install -m 0600 "$pki/client2.pem" "$ROOT/var/lib/kubelet/pki/kubelet-client-2000-01-02-00-00-00.pem"
ln -s /var/lib/kubelet/pki/kubelet-client-2000-01-02-00-00-00.pem "$ROOT/var/lib/kubelet/pki/.tmp-link"
mv -T "$ROOT/var/lib/kubelet/pki/.tmp-link" "$ROOT/var/lib/kubelet/pki/kubelet-client-current.pem"
rotated() { jsince "$c3" | grep -q 'client certificate rotated'; }
if wait_for 15 rotated && C cmp -s /run/kprism/kubelet-client.pem /var/lib/kubelet/pki/kubelet-client-2000-01-02-00-00-00.pem; then
    ok "rotation: kprism-cert.service copied the new certificate, kprism logged 'client certificate rotated'"
else
    C journalctl -u kprism-cert.service -u kprism-cert.path --no-pager -n 10 | indent
    bad "rotation not picked up within 15 s"
fi
[ "$(prop MainPID)" = "$MAINPID" ] && ok "rotation: no restart" || bad "rotation restarted kprism"

# ---- Restarts keep the established connections (the fd store; kprism(8) RESTARTS). ----
# HELD TLS keep-alive connections from the host through the data port; after each
# `systemctl restart` one more GET on each, on the same socket (no reconnect underneath).
HELD=${HELD:-100} RESTARTS=${RESTARTS:-3}
[ "$(prop FileDescriptorStoreMax)" -ge 3 ] 2>/dev/null \
    && ok "FileDescriptorStoreMax=$(prop FileDescriptorStoreMax), FDSTORE in the environment: $(prop Environment | grep -o 'FDSTORE=[0-9]*')" \
    || bad "FileDescriptorStoreMax is $(prop FileDescriptorStoreMax)"
coproc HELDC { exec python3 tests/systemd/held_tls.py "$DPORT" "$HELD" "$pki/ca.crt" "$pki/client1.crt" "$pki/client1.key" 2>&1; }
held_line=''
held() {  # held CMD: send CMD to the held connections, their answer in $held_line
    echo "$1" >&"${HELDC[1]}" && read -r -t 60 held_line <&"${HELDC[0]}"
}
read -r -t 60 held_line <&"${HELDC[0]}"
if [ "$held_line" = "open $HELD" ]; then
    ok "$HELD TLS keep-alive connections through kprism, one GET each"
    survived_all=1
    for i in $(seq 1 "$RESTARTS"); do
        pid0=$(prop MainPID) c7=$(jcursor) t0=$(date +%s%N)
        rout=$(C systemctl restart kprism.service 2>&1) || { echo "$rout" | indent; bad "restart $i: systemctl restart failed"; }
        tr=$(( ($(date +%s%N) - t0) / 1000000 ))
        held get
        j=$(jsince "$c7")
        if [[ $held_line == "get ok=$HELD failed=0 same_socket=$HELD served_by=standin_"* ]] \
                && [ "$(prop MainPID)" != "$pid0" ] \
                && grep -q "msg=\"handed over to the next process\" connections=$HELD reset_unflushed=0 reset_not_passed=0 .*systemd_confirmed=true" <<<"$j" \
                && grep -q "msg=\"resumed connections handed over by the previous process\" resumed=$HELD closed_unmatched=0 closed_without_entry=0" <<<"$j"; then
            ok "restart $i (systemctl restart took $tr ms, MainPID $pid0 -> $(prop MainPID)): all $HELD connections answer on their own sockets ($held_line)"
        else
            survived_all=0
            echo "$held_line" | indent; grep -E 'hand|resumed|listening' <<<"$j" | indent
            bad "restart $i: the held connections did not all survive"
        fi
    done
    # The package's upgrade: postinst runs systemctl try-restart, the same handover.
    if [ "$how" = deb ]; then
        pid0=$(prop MainPID) c7=$(jcursor)
        uout=$(C dpkg -i /root/kprism.deb 2>&1) || { echo "$uout" | indent; bad "upgrade: dpkg -i failed"; }
        held get
        if [[ $held_line == "get ok=$HELD failed=0 same_socket=$HELD "* ]] && [ "$(prop MainPID)" != "$pid0" ] \
                && jsince "$c7" | grep -q "resumed=$HELD closed_unmatched=0"; then
            ok "upgrade (dpkg -i, postinst's try-restart; MainPID $pid0 -> $(prop MainPID)): all $HELD connections answer ($held_line)"
        else
            echo "$uout" | tail -5 | indent; echo "$held_line" | indent; jsince "$c7" | tail -25 | indent
            bad "upgrade: the held connections did not all survive"
        fi
    fi
    # A crash: systemd's next kprism resumes them from the crash copy (keep_on_crash).
    c7=$(jcursor)
    if crash_restart; then
        held get
        j=$(jsince "$c7")
        if [[ $held_line == "get ok=$HELD failed=0 same_socket=$HELD "* ]] \
                && grep -q "msg=\"resumed connections kept from before a crash (keep_on_crash)\" resumed=$HELD closed_unmatched=0" <<<"$j"; then
            ok "SIGKILL (systemctl kill -s KILL, Restart=always): all $HELD connections answer on their own sockets ($held_line)"
        else
            echo "$held_line" | indent; grep -E 'resumed|crash|keep_on|listening' <<<"$j" | indent
            bad "SIGKILL: the held connections did not all survive"
        fi
    else
        bad "SIGKILL: no new kprism within 30 s ($(prop ActiveState), MainPID $(prop MainPID))"
    fi
    through standin_a standin_b && ok "after the restarts a new connection is served" || bad "no new connection after the restarts"
    nres=$(curl -s -m 3 "http://127.0.0.1:$APORT/metrics" | sed -n 's/^kprism_connections_resumed_total //p')  # this process's
    [ "$nres" = "$HELD" ] && ok "kprism_connections_resumed_total $nres (after the crash)" || bad "kprism_connections_resumed_total '$nres'"
    # While kprism runs the store holds only its crash copy (keep_on_crash): the listener, the
    # carrier of the held connections, the record and the health record; the handover's
    # descriptors were taken out.
    nfd=$(prop NFileDescriptorStore)
    [ "$nfd" = 4 ] && ok "NFileDescriptorStore=4 while kprism runs (the crash copy: listener, carrier, record, health)" \
        || bad "NFileDescriptorStore=$nfd while kprism runs"
    # stop ends them (systemd closes the store once the unit is stopped).
    C systemctl stop kprism.service
    held get
    [[ $held_line == "get ok=0 failed=$HELD "* ]] && ok "systemctl stop ends the held connections ($held_line)" \
        || bad "after systemctl stop: $held_line"
    C systemctl start kprism.service
    wait_for 10 through standin_a standin_b || bad "kprism did not serve again after the stop"
else
    bad "held connections: $held_line"
fi
held quit; wait "$HELDC_PID" 2>/dev/null

# ---- A restart carries each upstream's verdict (kprism(8), What a restart carries). ----
# standin_b answers /readyz 500: down before `systemctl restart`, and still down, with its reason,
# in the first /status of the next process, standin_a up; no request goes to standin_b.
# verdicts: "ADDRESS STATE LAST_RESULT" per upstream, sorted.
verdicts() { status_json | python3 -c '
import json, sys
for u in sorted(json.load(sys.stdin)["upstreams"], key=lambda u: u["address"]):
    print(u["address"], u["state"], u.get("last_result"))' 2>/dev/null; }
want_verdicts=$(printf '%s up ready\n%s down not_ready' "$standin_a" "$standin_b" | sort)
as_wanted() { [ "$(verdicts)" = "$want_verdicts" ]; }
echo 500 >"$T/standin_b.readyz"
if wait_for 15 as_wanted; then
    for i in 1 2; do
        C systemctl restart kprism.service
        after=$(verdicts)
        if [ "$after" = "$want_verdicts" ]; then
            ok "systemctl restart $i: the first /status of the next process has each upstream's verdict ($(tr '\n' ';' <<<"$after"))"
        else
            echo "$after" | indent; bad "systemctl restart $i: the verdicts did not carry (want $(tr '\n' ';' <<<"$want_verdicts"))"
        fi
    done
    to_b=0
    for _ in $(seq 20); do through standin_b && to_b=$((to_b + 1)); done
    [ "$to_b" = 0 ] && ok "after the restarts no request of 20 reaches standin_b, which is down" \
        || bad "$to_b of 20 requests reached standin_b, which is down"
else
    verdicts | indent; bad "standin_b answering 500 did not go down before the restart"
fi
rm -f "$T/standin_b.readyz"
wait_for 15 ups 2 || bad "standin_b did not come back up"

# ---- Watches across restarts and upgrades; HAProxy's reload and restart beside them. ----
# WATCHERS watches (default 50; `make bench-restart`: 1000) through kprism to the Go apiserver
# stand-in (tests/apiserver), an event every 200 ms that each checks for order and payload
# (watchers.py), across WATCH_RESTARTS (2) `systemctl restart`s and WATCH_UPGRADES (1) `dpkg -i`
# upgrades, with a new TLS connection every 20 ms timed across each. Then the same through HAProxy
# in master-worker mode with kubespray's settings: WATCH_RESTARTS reloads (SIGUSR2), one restart.
WATCHERS=${WATCHERS:-50} WATCH_RESTARTS=${WATCH_RESTARTS:-2} WATCH_UPGRADES=${WATCH_UPGRADES:-1}
# And WATCH_CRASHES (1) SIGKILLs (systemctl kill -s KILL; Restart=always starts the next one after
# RestartSec=), survived through the crash copy (keep_on_crash).
WATCH_CRASHES=${WATCH_CRASHES:-1}
APISERVER=$(realpath -m "$BUILD/kprism-apiserver")
watch_line=''
wcmd() {  # wcmd CMD: send CMD to the watchers, their answer in $watch_line (none once they exited)
    watch_line='(watchers.py exited)'
    [ -n "${WATCHC[1]:-}" ] && echo "$1" >&"${WATCHC[1]}" && read -r -t 60 watch_line <&"${WATCHC[0]}"
}
# timed CMD...: run CMD with a new connection every 20 ms timed across it, then check the watches;
# $took_ms, $probe_line and $watch_line afterwards.
timed() {
    local t0
    wcmd probe; t0=$(date +%s%N)
    "$@" >"$T/timed.log" 2>&1 || { indent <"$T/timed.log" | tail -5; bad "$*: failed"; }
    took_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    sleep 0.5  # the probes of the next half second: new connections once it is done
    wcmd probed; probe_line=$watch_line
    wcmd check
}
kp_summary=''
if [ "$WATCHERS" = 0 ]; then
    note "watches: WATCHERS=0, skipped"
elif [ ! -x "$APISERVER" ]; then
    bad "watches: $APISERVER is missing (make $BUILD/kprism-apiserver)"
else
    : >"$T/kas-store.log"; : >"$T/kas.log"
    "$APISERVER" store --listen "unix:$T/kas.sock" >"$T/kas-store.log" 2>&1 9>&- &
    standins+=($!)
    wait_for 5 grep -q 'event=store-listening' "$T/kas-store.log" || bad "apiserver store: $(cat "$T/kas-store.log")"
    "$APISERVER" serve --store "unix:$T/kas.sock" --tls-cert-file "$pki/srv.crt" --tls-private-key-file "$pki/srv.key" \
        --client-ca-file "$pki/ca.crt" --bind-address 127.0.0.23 --secure-port 0 --name kas --anonymous-auth \
        --control-address "127.0.0.1:$(free_port)" >"$T/kas.log" 2>&1 9>&- &
    standins+=($!)
    wait_for 5 grep -q 'event=listening' "$T/kas.log" || bad "apiserver: $(cat "$T/kas.log")"
    kas=$(sed -n 's/.*event=listening address=\([^ ]*\) .*/\1/p' "$T/kas.log" | head -1)
    write_config "\"$kas\""
    C systemctl reload kprism.service >/dev/null 2>&1 && wait_for 10 ups 1 \
        || bad "watches: kprism did not switch to the apiserver stand-in $kas"
    coproc WATCHC { exec python3 tests/systemd/watchers.py "$DPORT" "$WATCHERS" "$pki/ca.crt" "$pki/client1.crt" \
        "$pki/client1.key" "$kas" 2>>"$T/watchers.log"; }
    read -r -t 120 watch_line <&"${WATCHC[0]}"
    if [ "$watch_line" = "open $WATCHERS" ]; then
        ok "$WATCHERS watches through kprism to the apiserver stand-in $kas"
        wcmd check
        note "before: $watch_line"
        worst=0 walls='' waits='' fails=0 pn=0
        for kind in restart upgrade crash; do
            count=$WATCH_RESTARTS; [ $kind = upgrade ] && count=$WATCH_UPGRADES; [ $kind = crash ] && count=$WATCH_CRASHES
            [ $kind = upgrade ] && [ "$how" != deb ] && { note "upgrades: kprism not installed from the package"; continue; }
            for i in $(seq 1 "$count"); do
                pid0=$(prop MainPID) c8=$(jcursor)
                if [ $kind = restart ]; then timed C systemctl restart kprism.service
                elif [ $kind = upgrade ]; then timed C dpkg -i /root/kprism.deb
                else
                    timed crash_restart
                    jsince "$c8" | grep -q 'msg="resumed connections kept from before a crash (keep_on_crash)"' \
                        || { jsince "$c8" | grep -E 'resumed|crash|keep_on' | indent; bad "crash $i: no resume from the crash copy"; }
                fi
                pw=$(sed -n 's/.* max_ms=\([0-9.]*\).*/\1/p' <<<"$probe_line")
                pf=$(sed -n 's/.* failed=\([0-9]*\).*/\1/p' <<<"$probe_line")
                pn=$((pn + $(sed -n 's/^probed n=\([0-9]*\).*/\1/p' <<<"$probe_line")))
                fails=$((fails + ${pf:-1})); waits+=" ${pw:-?}"; walls+=" $took_ms"
                # A crash cannot keep a new connection that was being made at that moment (not in
                # the copy yet, kprism(8) Restarts): the prober has at most one or two in flight.
                allowed=0; [ $kind = crash ] && allowed=2
                if [[ $watch_line == "check open=$WATCHERS ended=0 lost=0 duplicated=0 corrupted=0 behind=0 "* ]] \
                        && [ "$(prop MainPID)" != "$pid0" ] && [ "${pf:-99}" -le "$allowed" ]; then
                    ok "watches: $kind $i ($took_ms ms, MainPID $pid0 -> $(prop MainPID)): $watch_line; new connections: $probe_line"
                else
                    bad "watches: $kind $i ($took_ms ms, MainPID $pid0 -> $(prop MainPID)): $watch_line; new connections: $probe_line"
                fi
            done
        done
        kp_summary="kprism: $watch_line; $pn new connections during the restarts, upgrades and crashes, $fails failed, the slowest of each (ms):$waits; restart/upgrade/crash took (ms):$walls"
        note "$kp_summary"
    else
        bad "watches through kprism: $watch_line $(tail -3 "$T/watchers.log")"
    fi
    wcmd quit; wait "$WATCHC_PID" 2>/dev/null

    # HAProxy beside it, as kubespray runs it (roles/kubernetes/node/templates/loadbalancer/
    # haproxy.cfg.j2: mode tcp, leastconn, an HTTPS /healthz check), in master-worker mode: the
    # reload is SIGUSR2 to the master (Debian's haproxy.service ExecReload), the restart a new master.
    # One change: maxconn 4000 per server, not 1000, as this test has one apiserver, not three. The
    # stand-in runs with --anonymous-auth, kube-apiserver's default, which that check needs.
    if command -v haproxy >/dev/null; then
        HPORT=$(free_port)
        cat >"$T/haproxy.cfg" <<HCFG
global
    maxconn 4000
defaults
    mode tcp
    timeout connect 30s
    timeout client 5m
    timeout server 15m
    timeout check 30s
frontend kube_api_frontend
    bind 127.0.0.1:$HPORT
    default_backend kube_api_backend
backend kube_api_backend
    balance leastconn
    default-server inter 15s downinter 15s rise 2 fall 2 slowstart 60s maxconn 4000 maxqueue 256 weight 100
    option httpchk GET /healthz
    http-check expect status 200
    server kas $kas check check-ssl verify none
HCFG
        haproxy_start() {
            haproxy -W -f "$T/haproxy.cfg" >>"$T/haproxy.log" 2>&1 9>&- &
            HAPROXY_PID=$!; standins+=($!)
            wait_for 10 curl -s -m 2 --cacert "$pki/ca.crt" --cert "$pki/client1.crt" --key "$pki/client1.key" \
                "https://127.0.0.1:$HPORT/version" -o /dev/null
        }
        workers() { pgrep -P "$HAPROXY_PID" | wc -l; }
        workers_rss() { local k=0 p; for p in $(pgrep -P "$HAPROXY_PID"); do
            k=$((k + $(awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0))); done; echo "$k"; }
        haproxy_start || bad "haproxy did not start: $(tail -3 "$T/haproxy.log")"
        coproc WATCHC { exec python3 tests/systemd/watchers.py "$HPORT" "$WATCHERS" "$pki/ca.crt" "$pki/client1.crt" \
            "$pki/client1.key" "$kas" 2>>"$T/watchers.log"; }
        read -r -t 120 watch_line <&"${WATCHC[0]}"
        if [ "$watch_line" = "open $WATCHERS" ]; then
            hwaits='' hfails=0 hn=0
            new_worker() { pgrep -P "$HAPROXY_PID" | grep -qvxF -f "$T/haproxy.workers"; }
            hreload() {  # SIGUSR2, then a worker that was not there before
                pgrep -P "$HAPROXY_PID" >"$T/haproxy.workers"
                kill -USR2 "$HAPROXY_PID" && wait_for 10 new_worker
            }
            for i in $(seq 1 "$WATCH_RESTARTS"); do
                timed hreload
                hwaits+=" $(sed -n 's/.* max_ms=\([0-9.]*\).*/\1/p' <<<"$probe_line")"
                hfails=$((hfails + $(sed -n 's/.* failed=\([0-9]*\).*/\1/p' <<<"$probe_line")))
                hn=$((hn + $(sed -n 's/^probed n=\([0-9]*\).*/\1/p' <<<"$probe_line")))
                note "haproxy reload $i: $watch_line; new connections: $probe_line; $(workers) worker processes, $(workers_rss) KiB"
            done
            note "haproxy after $WATCH_RESTARTS reloads: $watch_line; $hn new connections, $hfails failed, the slowest of each (ms):$hwaits; $(workers) worker processes (the old ones keep their watches), $(workers_rss) KiB RSS"
            hrestart() { kill -TERM "$HAPROXY_PID"; wait "$HAPROXY_PID" 2>/dev/null; haproxy_start; }
            timed hrestart
            note "haproxy restart (a new master, as a package upgrade or kubespray's static pod does): $watch_line; new connections: $probe_line"
            [[ $watch_line == "check open=0 ended=$WATCHERS "* ]] && ok "haproxy's restart ends every watch ($watch_line); kprism's kept them" \
                || bad "haproxy restart: $watch_line"
        else
            bad "watches through haproxy: $watch_line $(tail -3 "$T/watchers.log")"
        fi
        wcmd quit; wait "$WATCHC_PID" 2>/dev/null
        kill -TERM "$HAPROXY_PID" 2>/dev/null; wait "$HAPROXY_PID" 2>/dev/null
    else
        note "haproxy not installed: no anchor"
    fi
    write_config "\"$standin_b\", \"$standin_a\""
    C systemctl reload kprism.service >/dev/null 2>&1 && wait_for 10 ups 2 || bad "watches: kprism did not return to the stand-ins"
fi

# ---- What keep_on_crash costs (CRASH_COST=SECONDS; unset: skipped; make bench-restart: 10). ----
# CRASH_IDLE (1000) idle TLS keep-alive connections held through kprism, then new TLS connections
# from 4 threads, each closed after its handshake, for SECONDS (each one changes the copy, so it
# is replaced every second with all the idle ones in it): keep_on_crash off and on, alternating, two
# rounds each. Per mode: connections/s, kprism's CPU per 1000 of them, systemd's (PID 1) CPU per
# second, kprism's and systemd's RSS with the idle connections held.
cpu_ms() { C cat "/proc/$1/stat" | awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) * 1000 / hz}'; }
rss_kib() { C awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
if [ -n "${CRASH_COST:-}" ]; then
    CRASH_IDLE=${CRASH_IDLE:-1000}
    for round in 1 2; do
        for mode in false true; do
            write_config "\"$standin_b\", \"$standin_a\"" "s/^keep_on_crash = .*/keep_on_crash = $mode/"
            C systemctl restart kprism.service && wait_for 10 ups 2 || bad "crash cost: kprism did not restart"
            coproc COSTC { exec python3 tests/systemd/held_tls.py "$DPORT" "$CRASH_IDLE" "$pki/ca.crt" "$pki/client1.crt" \
                "$pki/client1.key" 2>&1; }
            cost_line=''
            read -r -t 120 cost_line <&"${COSTC[0]}"
            if [ "$cost_line" != "open $CRASH_IDLE" ]; then bad "crash cost: $cost_line"; break 2; fi
            kp=$(prop MainPID)
            k0=$(cpu_ms "$kp") s0=$(cpu_ms 1)
            echo "churn $CRASH_COST" >&"${COSTC[1]}"; read -r -t $((CRASH_COST + 60)) cost_line <&"${COSTC[0]}"
            k1=$(cpu_ms "$kp") s1=$(cpu_ms 1)
            n=$(sed -n 's/.* n=\([0-9]*\).*/\1/p' <<<"$cost_line")
            note "crash cost round $round keep_on_crash=$mode: $cost_line; kprism $(awk -v a="$k0" -v b="$k1" -v n="${n:-1}" 'BEGIN {printf "%.1f", (b - a) * 1000 / (n > 0 ? n : 1)}') ms CPU per 1000 connections, systemd $(awk -v a="$s0" -v b="$s1" -v t="$CRASH_COST" 'BEGIN {printf "%.1f", (b - a) / t}') ms CPU per second; RSS with $CRASH_IDLE idle: kprism $(rss_kib "$kp") KiB, systemd $(rss_kib 1) KiB; NFileDescriptorStore=$(prop NFileDescriptorStore)"
            echo quit >&"${COSTC[1]}"; wait "$COSTC_PID" 2>/dev/null
        done
    done
fi

# ---- What storing every connection at its start would cost (bench/fdstore_cost.cc). ----
# FDSTORE_COST="N ..." (unset: skipped; `make bench-restart`: "1000 4000"): for each N, N
# connections opened and closed by a transient service, without and with each one's two sockets
# put in the store (and removed at its close); systemd's CPU and memory read from /proc/1.
if [ -n "${FDSTORE_COST:-}" ]; then
    if [ -x "$BUILD/bench/fdstore_cost" ]; then
        install -D -m 0755 "$BUILD/bench/fdstore_cost" "$ROOT/usr/local/bin/fdstore_cost"
        for n in $FDSTORE_COST; do
            for store in "" --store; do
                cat >"$ROOT/etc/systemd/system/fdstore-cost.service" <<UNIT
[Service]
Type=oneshot
ExecStart=/usr/local/bin/fdstore_cost --count $n $store
FileDescriptorStoreMax=20480
Environment=FDSTORE=20480
NotifyAccess=main
LimitNOFILE=65536
UNIT
                C systemctl daemon-reload
                cc=$(C journalctl -u fdstore-cost.service -n 0 --show-cursor --no-pager | sed -n 's/^-- cursor: //p')
                C systemctl start fdstore-cost.service >"$T/fdcost.log" 2>&1 || bad "fdstore_cost --count $n $store: $(cat "$T/fdcost.log")"
                out=$(C journalctl -u fdstore-cost.service ${cc:+--after-cursor="$cc"} --no-pager -o cat)
                grep -q 'phase=close' <<<"$out" || bad "fdstore_cost --count $n $store: $out"
                grep '^fdstore-cost phase=' <<<"$out" | while read -r l; do note "$l"; done
            done
        done
    else
        bad "FDSTORE_COST: $BUILD/bench/fdstore_cost is missing (make $BUILD/bench/fdstore_cost)"
    fi
fi

# ---- Crashes: Restart=always after SIGKILL; the watchdog restarts a stopped event loop. ----
nr() { prop NRestarts; }
restarted_from() { local p; p=$(prop MainPID); [ "$p" != 0 ] && [ "$p" != "$1" ] && [ "$(prop ActiveState)" = active ]; }
pid0=$(prop MainPID) n0=$(nr)
C systemctl kill -s KILL kprism.service
if wait_for 10 restarted_from "$pid0" && [ "$(nr)" = $((n0 + 1)) ] && wait_for 10 through standin_a standin_b; then
    ok "SIGKILL: Restart=always started a new kprism (MainPID $pid0 -> $(prop MainPID), NRestarts $n0 -> $(nr)), serving"
else bad "SIGKILL: MainPID $(prop MainPID), $(prop ActiveState), NRestarts $(nr)"; fi
mkdir -p "$ROOT/etc/systemd/system/kprism.service.d"
printf '[Service]\nWatchdogSec=2s\n' > "$ROOT/etc/systemd/system/kprism.service.d/watchdog.conf"
C systemctl daemon-reload && C systemctl restart kprism.service
pid0=$(prop MainPID) c8=$(jcursor)
# SIGSTOP: the event loop stops, so do its pings; systemd aborts it and Restart=always restarts it.
C systemctl kill -s STOP kprism.service
if wait_for 20 restarted_from "$pid0" && jsince "$c8" | grep -qi 'watchdog timeout'; then
    ok "watchdog (WatchdogSec=2s in a drop-in): a stopped event loop is aborted and restarted ($(jsince "$c8" | grep -im1 'watchdog timeout' | cut -c1-120))"
else jsince "$c8" | tail -5 | indent; bad "watchdog: no restart of the stopped kprism (MainPID $(prop MainPID))"; fi
rm -f "$ROOT/etc/systemd/system/kprism.service.d/watchdog.conf"
C systemctl daemon-reload && C systemctl restart kprism.service

# ---- Ordering: READY before kubelet.service starts. ----
# A stand-in kubelet.service that records what kprism said when it was started.
printf '[Service]\nType=oneshot\nExecStart=/bin/sh -c "systemctl show -p ActiveState -p StatusText kprism.service > /run/kubelet-saw"\n' \
    > "$ROOT/etc/systemd/system/kubelet.service"
C systemctl daemon-reload && C systemctl stop kprism.service
# kprism's start job first (as at boot, where both are queued); kubelet's waits for it to finish.
C systemctl start --no-block kprism.service
C systemctl start kubelet.service
saw=$(C cat /run/kubelet-saw 2>/dev/null | tr '\n' ' ')
[[ $saw == *"ActiveState=active "* && $saw == *"StatusText="*"upstreams ready"* ]] \
    && ok "Before=kubelet.service: a kubelet.service started with kprism saw it READY ($saw)" \
    || bad "kubelet.service started before kprism was READY: $saw"
rm -f "$ROOT/etc/systemd/system/kubelet.service"; C systemctl daemon-reload

# ---- The sandbox as systemd sees it. ----
if sec=$(C systemd-analyze security kprism.service --no-pager 2>&1); then
    level=$(sed -n 's/.*Overall exposure level for kprism.service: \([0-9.]*\).*/\1/p' <<<"$sec")
    [ -n "$level" ] && awk -v l="$level" 'BEGIN { exit !(l <= 2.5) }' \
        && ok "systemd-analyze security kprism.service (running): exposure $level (limit 2.5)" \
        || { grep '✗' <<<"$sec" | head -20 | indent; bad "systemd-analyze security: exposure '$level'"; }
else echo "$sec" | tail -5 | indent; bad "systemd-analyze security failed"; fi

# ---- Socket activation: the socket units own the ports (drop-ins with this test's ports). ----
# sockets ADMIN-PORT: kprism.socket on the data port, kprism-admin.socket on ADMIN-PORT, and
# kprism.service restarted to take them over.
sockets() {
    mkdir -p "$ROOT/etc/systemd/system/kprism.socket.d" "$ROOT/etc/systemd/system/kprism-admin.socket.d"
    printf '[Socket]\nListenStream=\nListenStream=127.0.0.1:%s\n' "$DPORT" > "$ROOT/etc/systemd/system/kprism.socket.d/test.conf"
    printf '[Socket]\nListenStream=\nListenStream=127.0.0.1:%s\n' "$1" > "$ROOT/etc/systemd/system/kprism-admin.socket.d/test.conf"
    C systemctl daemon-reload
    C systemctl stop kprism.service kprism.socket kprism-admin.socket 2>/dev/null
    C systemctl start kprism.socket kprism-admin.socket && C systemctl start kprism.service
}
admin_on() { curl -sf -m 2 "http://127.0.0.1:$1/readyz" >/dev/null; }
c5=$(jcursor)
if sockets "$APORT" && wait_for 10 admin_on "$APORT" \
        && jsince "$c5" | grep -q 'msg="admin socket passed by systemd"'; then
    ok "socket activation: kprism.service started on the sockets of kprism.socket and kprism-admin.socket"
else jsince "$c5" | tail -10 | indent; bad "socket activation: start"; fi
MAINPID=$(prop MainPID)
c5=$(jcursor)
write_config "\"$standin_b\""
rout=$(C systemctl reload kprism.service 2>&1) && jsince "$c5" | grep -q "endpoint_removed=$standin_a" \
    && ok "socket activation, admin socket on the file's health.port: systemctl reload applies" \
    || { echo "$rout" | indent; jsince "$c5" | tail -5 | indent; bad "socket activation: systemctl reload"; }
# packaging/systemd/README.md: "The passed sockets replace ... health.bind_address/health.port:
# change the addresses in the socket units (drop-ins), not in the file." So move the admin port
# in a drop-in only, as told, and reload.
APORT2=$(free_port)
while [ "$APORT2" = "$APORT" ] || [ "$APORT2" = "$DPORT" ]; do APORT2=$(free_port); done
c6=$(jcursor)
if sockets "$APORT2" && wait_for 10 admin_on "$APORT2"; then
    MAINPID=$(prop MainPID)
    write_config "\"$standin_b\", \"$standin_a\""
    rout=$(C systemctl reload kprism.service 2>&1); rrc=$?
    if [ $rrc = 0 ] && jsince "$c6" | grep -q "msg=\"configuration reloaded\" changes=\"endpoint_added=$standin_a"; then
        ok "socket activation, admin socket moved by a drop-in (127.0.0.1:$APORT2): systemctl reload applies"
    else
        jsince "$c6" | grep -E 'kprism reload|Reload|ExecReload|Control process' | indent
        bad "socket activation, admin socket moved by a drop-in as packaging/systemd/README.md says: systemctl reload exits $rrc: $(jsince "$c6" | grep -m1 '^kprism reload:')"
    fi
else bad "socket activation: the admin socket did not move to $APORT2"; fi
# A crash with socket activation: kprism.socket keeps listening, so a client that connects while
# kprism is down waits in the backlog and is served by the restarted one.
pid0=$(prop MainPID)
C systemctl kill -s KILL kprism.service
t0=$(date +%s%N)
if through standin_a standin_b; then
    ok "socket activation, SIGKILL: a connection made while kprism was down was served $(( ($(date +%s%N) - t0) / 1000000 )) ms later by the restarted one (MainPID $pid0 -> $(prop MainPID))"
else bad "socket activation, SIGKILL: the connection made while kprism was down failed"; fi

# ---- Stop: a clean drain. ----
if C systemctl stop kprism.service kprism.socket kprism-admin.socket && [ "$(prop ActiveState)" = inactive ] \
        && [ "$(prop Result)" = success ] && [ "$(prop ExecMainStatus)" = 0 ]; then
    ok "systemctl stop: inactive, Result=success, exit status 0"
else bad "systemctl stop: $(prop ActiveState), Result=$(prop Result), status $(prop ExecMainStatus)"; fi

# ---- Purge: nothing of the package is left. ----
if [ "$how" = deb ]; then
    pout=$(C dpkg --purge kprism 2>&1) || { echo "$pout" | indent; bad "dpkg --purge kprism failed"; }
    left=$(C sh -c 'for f in /usr/bin/kprism /etc/kprism /lib/systemd/system/kprism.service /usr/lib/kprism; do [ -e "$f" ] && echo "$f"; done')
    ls=$(prop LoadState)
    [ -z "$left" ] && [ "$ls" = not-found ] && ok "dpkg --purge kprism: binary, configuration and units gone, kprism.service $ls" \
        || bad "dpkg --purge kprism left: $left (kprism.service $ls)"
fi

# HOLD=SECONDS: keep the container up for a look (nsenter -t PID -a bash) until the time is up
# or the file "$T/release" appears.
if [ "${HOLD:-0}" -gt 0 ]; then
    echo "# holding for ${HOLD} s: nsenter -t $CPID -a /bin/bash; touch $T/release to end"
    hold_done() { [ -e "$T/release" ]; }
    wait_for "$HOLD" hold_done
fi

# ---- Evidence. ----
note "journalctl -u kprism, the reload lines:"
jall | grep -E 'reload|Reload' | tail -40 | indent
finish
