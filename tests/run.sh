#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs GoogleTest binaries in order, stops at none, and ends with one summary line
# "N passed, N failed" for every test of every binary. Exit status: non-zero if any failed.
set -u
passed=0; failed=0; rc=0
for bin in "$@"; do
    log=$(mktemp)
    "$bin" 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
    rm -f "$log"
    passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0}))
    if [ "$status" != 0 ]; then rc=1; [ -z "$f" ] && failed=$((failed + 1)); fi
done
echo "test: $passed passed, $failed failed"
exit $rc
