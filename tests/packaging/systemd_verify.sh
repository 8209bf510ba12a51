#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# systemd-analyze verify of packaging/systemd/kprism.service, kprism.socket,
# kprism-admin.socket, kprism-cert.path and kprism-cert.service, plus the offline `systemd-analyze security` exposure of the service
# (fails above MAX_EXPOSURE, default 2.5). verify needs ExecStart= binaries and the man pages of
# Documentation= to exist, so the units are checked as copies whose /usr/bin/kprism points at
# the built binary (KPRISM_BIN, default build/kprism), /usr/lib/kprism/ at packaging/systemd/, and with MANPATH at the source man pages.
# Usage: tests/packaging/systemd_verify.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${KPRISM_BIN:-build/kprism}
MAX_EXPOSURE=${MAX_EXPOSURE:-2.5}
[ -x "$BIN" ] || { echo "systemd_verify: $BIN not built (make)" >&2; exit 1; }
command -v systemd-analyze >/dev/null || { echo "systemd_verify: systemd-analyze not found" >&2; exit 1; }
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
mkdir -p "$T/units" "$T/man/man8" "$T/man/man5"
cp "$BIN" "$T/kprism"
cp man/kprism.8 "$T/man/man8/"
cp man/kprism.toml.5 "$T/man/man5/"
units=(kprism.service kprism.socket kprism-admin.socket kprism-cert.path kprism-cert.service)
for u in "${units[@]}"; do
    sed -e "s#/usr/bin/kprism#$T/kprism#g" -e "s#/usr/lib/kprism/#$PWD/packaging/systemd/#g" \
        "packaging/systemd/$u" > "$T/units/$u"
done
fail=0
# verify prints nothing and exits 0 for good units; any output is a warning worth fixing.
out=$(cd "$T/units" && MANPATH="$T/man" systemd-analyze verify "${units[@]/#/$T/units/}" 2>&1) || fail=1
if [ -n "$out" ]; then echo "$out"; fail=1; fi
[ $fail = 0 ] && echo "systemd_verify: verify ${units[*]}: ok" || echo "systemd_verify: verify FAILED"
# The service must keep the settings its documentation promises.
for want in Type=notify NotifyAccess=main WatchdogSec=10s TimeoutStopSec=35s Restart=always \
        'ExecReload=/usr/bin/kprism reload --config /etc/kprism/kprism.toml --pid $MAINPID' \
        'ExecStartPre=/usr/bin/kprism check --config /etc/kprism/kprism.toml' \
        'ExecStartPre=+/usr/lib/kprism/kprism-copy-cert' DynamicUser=yes RuntimeDirectory=kprism StateDirectory=kprism \
        Wants=kprism-cert.path CapabilityBoundingSet= ProtectSystem=strict NoNewPrivileges=yes; do
    grep -qxF "$want" packaging/systemd/kprism.service || { echo "systemd_verify: kprism.service lacks '$want'"; fail=1; }
done
# Reload needs nothing outside the package: no unit runs /bin/kill (procps is not on a minimal Debian).
if grep -n 'kill' packaging/systemd/*.service packaging/systemd/*.socket packaging/systemd/*.path | grep -v ':[0-9]*:#'; then
    echo "systemd_verify: a unit runs kill"; fail=1
fi
if sec=$(systemd-analyze security --offline=yes "$T/units/kprism.service" 2>&1); then
    level=$(sed -n 's/.*Overall exposure level for kprism.service: \([0-9.]*\).*/\1/p' <<<"$sec")
    if [ -z "$level" ]; then
        echo "systemd_verify: no exposure level in systemd-analyze security output"; fail=1
    elif awk -v l="$level" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(l > m) }'; then
        echo "systemd_verify: exposure $level above $MAX_EXPOSURE"; grep '✗' <<<"$sec"; fail=1
    else
        echo "systemd_verify: security exposure $level (limit $MAX_EXPOSURE): ok"
    fi
else
    echo "systemd_verify: systemd-analyze security --offline failed:"; echo "$sec"; fail=1
fi
exit $fail
