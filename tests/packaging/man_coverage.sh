#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Man-page coverage: every flag in `kprism --help` is documented in man/kprism.8 (as
# `.Fl \-bind\-address`, hyphens escaped as mdoc writes them), every configuration key that
# `kprism check` prints is documented in man/kprism.toml.5 under its own section (`.It Cm key` after `.Sh [section]`,
# top-level keys before the first [section]), and `mandoc -Tlint -W warning` is silent on both.
# Usage: tests/packaging/man_coverage.sh   (KPRISM_BIN defaults to build/kprism)
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${KPRISM_BIN:-build/kprism}
[ -x "$BIN" ] || { echo "man_coverage: $BIN not built (make)" >&2; exit 1; }
fail=0

# Flags: the first word of each indented help line that starts with --.
flags=$("$BIN" --help | sed -n 's/^ *\(--[a-z0-9-]*\).*/\1/p' | sort -u)
[ -n "$flags" ] || { echo "man_coverage: no flags in '$BIN --help'"; exit 1; }
nflags=0
for f in $flags; do
    nflags=$((nflags + 1))
    name=${f#--}
    pat="Fl \\\\-${name//-/\\\\-}"   # --bind-address is written .Fl \-bind\-address in mdoc
    grep -Eq "(^|[[:space:]])${pat}([[:space:]]|$)" man/kprism.8 \
        || { echo "man_coverage: flag $f not documented in man/kprism.8"; fail=1; }
done

# Keys: `kprism check` prints the effective configuration as TOML with [section] headers.
keys=$("$BIN" check --endpoints 127.0.0.1:6443 2>/dev/null | awk '
    /^\[[a-z_]+\]$/ { sec = substr($0, 2, length($0) - 2); next }
    /^[a-z_]+ = / { print (sec == "" ? "" : sec ".") $1 }')
[ -n "$keys" ] || { echo "man_coverage: no keys in 'kprism check' output"; exit 1; }
# Documented keys, qualified by the .Sh [section] they sit in.
documented=$(awk '
    /^\.Sh / { sec = ($2 ~ /^\[[a-z_]+\]$/) ? substr($2, 2, length($2) - 2) : (sec == "" ? "" : "-") }
    /^\.It Cm [a-z_]+/ && sec != "-" { print (sec == "" ? "" : sec ".") $3 }' man/kprism.toml.5 | sort -u)
nkeys=0
for k in $keys; do
    nkeys=$((nkeys + 1))
    grep -qxF "$k" <<<"$documented" \
        || { echo "man_coverage: key $k not documented in man/kprism.toml.5 (.It Cm ${k##*.} under its section)"; fail=1; }
done

for m in man/kprism.8 man/kprism.toml.5; do
    out=$(mandoc -Tlint -W warning "$m" 2>&1) || true
    if [ -n "$out" ]; then echo "man_coverage: mandoc -Tlint -W warning $m:"; echo "$out"; fail=1; fi
done

if [ $fail = 0 ]; then
    echo "man_coverage: $nflags flags in kprism.8, $nkeys keys in kprism.toml.5, mandoc lint clean: ok"
fi
exit $fail
