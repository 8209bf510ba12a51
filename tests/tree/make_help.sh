#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Every phony target of Makefile and mk/*.mk has its line in `make help` (a `## ` comment on its rule line), and no other.
# Ends with "make_help: N passed, M failed"; exit status non-zero if any target is missing.
set -u
cd "$(dirname "$0")/../.." || exit 1
MAKE=${MAKE:-make}
passed=0 failed=0
# The phony targets, as make itself sees them once every mk/*.mk is read (FORCE is internal).
phony=$($MAKE -pq help 2>/dev/null | sed -n 's/^\.PHONY: //p' | tr ' ' '\n' | grep -vx 'FORCE' | sort -u)
help=$($MAKE --no-print-directory help) || { echo "make_help: FAIL: make help failed"; echo "make_help: 0 passed, 1 failed"; exit 1; }
# The targets `make help` lists: the first column of each section but Variables.
listed=$(printf '%s\n' "$help" | awk '/^Variables:/ { v = 1 } /^  [^ ]/ && !v { print substr($0, 3, 20) }' | tr ' ' '\n' | sed '/^$/d' | sort -u)
[ -n "$phony" ] || { echo "make_help: FAIL: no .PHONY targets found (make -p)"; exit 1; }
for t in $phony; do
    if grep -qx -- "$t" <<<"$listed"; then passed=$((passed + 1))
    else echo "make_help: FAIL: target '$t' has no line in make help (add '## what it does' to its rule line)"; failed=$((failed + 1)); fi
done
for t in $listed; do
    grep -qx -- "$t" <<<"$phony" || { echo "make_help: FAIL: make help lists '$t', which is not a .PHONY target"; failed=$((failed + 1)); }
done
echo "make_help: $passed passed, $failed failed"
[ "$failed" = 0 ]
