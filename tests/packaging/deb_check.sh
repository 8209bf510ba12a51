#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks the Debian package: file list (binary, units, man pages, conffile, the discovery RBAC),
# the conffiles entry, and the extracted binary itself (--version, `check` of the shipped conffile, the unit
# files under systemd-analyze verify). Takes the .deb as argument, else the newest
# build/kprism_*.deb, else builds one with `make deb` (about a minute).
# Usage: tests/packaging/deb_check.sh [build/kprism_0.1.0-1_amd64.deb]
set -euo pipefail
cd "$(dirname "$0")/../.."
deb=${1:-}
if [ -z "$deb" ]; then
    deb=$(ls -t build/kprism_*.deb 2>/dev/null | head -n1 || true)
    if [ -z "$deb" ]; then make deb; deb=$(ls -t build/kprism_*.deb | head -n1); fi
fi
[ -f "$deb" ] || { echo "deb_check: no such package: $deb" >&2; exit 1; }
pass=0 failed=0
ok() { echo "deb_check: ok: $*"; pass=$((pass + 1)); }
bad() { echo "deb_check: FAIL: $*"; failed=$((failed + 1)); }

contents=$(dpkg-deb -c "$deb" | awk '{ print $NF }' | sed 's|^\./|/|')
for f in /usr/bin/kprism /lib/systemd/system/kprism.service /lib/systemd/system/kprism.socket \
        /lib/systemd/system/kprism-admin.socket /lib/systemd/system/kprism-cert.path \
        /lib/systemd/system/kprism-cert.service /usr/lib/kprism/kprism-copy-cert /usr/share/man/man8/kprism.8.gz \
        /usr/share/man/man5/kprism.toml.5.gz /etc/kprism/kprism.toml \
        /usr/share/kprism/kprism-discovery-rbac.yaml; do
    grep -qxF "$f" <<<"$contents" && ok "contains $f" || bad "$deb lacks $f"
done
conffiles=$(dpkg-deb -I "$deb" conffiles 2>/dev/null || true)
grep -qxF /etc/kprism/kprism.toml <<<"$conffiles" && ok "conffile /etc/kprism/kprism.toml" \
    || bad "conffiles: '$conffiles'"
[ "$(dpkg-deb -f "$deb" Package)" = kprism ] && ok "Package: kprism" || bad "Package field"
dpkg-deb -f "$deb" Depends | grep -q 'libuv1' && ok "Depends from shlibs: $(dpkg-deb -f "$deb" Depends)" \
    || bad "Depends lacks the shared libraries: $(dpkg-deb -f "$deb" Depends)"

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
dpkg -x "$deb" "$root"
bin=$root/usr/bin/kprism
if v=$("$bin" --version 2>&1); then
    want=$(dpkg-deb -f "$deb" Version); want=${want%-*}
    [[ "$v" == "kprism $want" ]] && ok "--version: $v" || bad "--version printed '$v', expected 'kprism $want'"
else
    bad "--version failed: $v"
fi
# The shipped conffile is the example with placeholder endpoints: valid as it stands.
if out=$("$bin" check --config "$root/etc/kprism/kprism.toml" 2>&1); then
    grep -q '^kprism: configuration is valid' <<<"$out" && grep -q '^endpoints = ' <<<"$out" \
        && ok "check --config <root>/etc/kprism/kprism.toml: valid" || bad "check output: $out"
else
    bad "check --config <root>/etc/kprism/kprism.toml failed: $out"
fi
# The conffile reads the copy kprism-copy-cert makes for the dynamic user (packaging/systemd).
[ "$(grep -c '^client_\(cert\|key\) = "/run/kprism/kubelet-client.pem"$' "$root/etc/kprism/kprism.toml")" = 2 ] \
    && ok "conffile: client_cert and client_key at /run/kprism/kubelet-client.pem" \
    || bad "conffile client_cert/client_key: $(grep '^client_' "$root/etc/kprism/kprism.toml")"
# Built with dpkg-buildflags' hardening=+all on top of the Makefile's own flags.
if out=$(tests/packaging/hardening.sh --dynamic "$bin" 2>&1); then
    ok "hardening of the packaged binary: $(tail -n1 <<<"$out")"
else
    bad "hardening of the packaged binary: $(grep FAIL <<<"$out")"
fi
[ -x "$root/usr/lib/kprism/kprism-copy-cert" ] && ok "/usr/lib/kprism/kprism-copy-cert executable" \
    || bad "/usr/lib/kprism/kprism-copy-cert not executable"
# The packaged units still point at /usr/bin/kprism and verify against the packaged binary.
grep -qx 'ExecStart=/usr/bin/kprism --config /etc/kprism/kprism.toml' "$root/lib/systemd/system/kprism.service" \
    && ok "kprism.service ExecStart=/usr/bin/kprism" || bad "kprism.service ExecStart"
grep -qx 'StateDirectory=kprism' "$root/lib/systemd/system/kprism.service" \
    && ok "kprism.service StateDirectory=kprism (the discovery snapshot)" || bad "kprism.service lacks StateDirectory=kprism"
cmp -s "$root/usr/share/kprism/kprism-discovery-rbac.yaml" packaging/kubernetes/kprism-discovery-rbac.yaml \
    && ok "/usr/share/kprism/kprism-discovery-rbac.yaml is packaging/kubernetes/kprism-discovery-rbac.yaml" \
    || bad "/usr/share/kprism/kprism-discovery-rbac.yaml differs from packaging/kubernetes/"
if command -v systemd-analyze >/dev/null; then
    mkdir -p "$root/verify"
    units=(kprism.service kprism.socket kprism-admin.socket kprism-cert.path kprism-cert.service)
    for u in "${units[@]}"; do
        sed -e "s#/usr/bin/kprism#$bin#g" -e "s#/usr/lib/kprism/#$root/usr/lib/kprism/#g" \
            "$root/lib/systemd/system/$u" > "$root/verify/$u"
    done
    mkdir -p "$root/man/man8" "$root/man/man5"
    ln -s "$root/usr/share/man/man8/kprism.8.gz" "$root/man/man8/"
    ln -s "$root/usr/share/man/man5/kprism.toml.5.gz" "$root/man/man5/"
    if out=$(MANPATH="$root/man" systemd-analyze verify "${units[@]/#/$root/verify/}" 2>&1) && [ -z "$out" ]; then
        ok "systemd-analyze verify of the packaged units"
    else
        bad "systemd-analyze verify: $out"
    fi
fi
echo "deb_check: $pass passed, $failed failed"
[ "$failed" = 0 ]
