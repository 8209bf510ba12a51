#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs GoogleTest binaries in order, stops at none, and ends with one summary line
# "N passed, N failed" for every test of every binary. Exit status: non-zero if any failed.
# TEST_SHARDS=N (default 1) runs each binary as N GoogleTest shards at once, each shard's output
# printed whole when it ends: the integration tests mostly wait on timers and child processes.
set -u
passed=0; failed=0; rc=0
shards=${TEST_SHARDS:-1}
tally() {  # tally LOG STATUS: add one run's counts to the totals
    local p f
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$1" | tail -1)
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$1" | tail -1)
    passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0}))
    if [ "$2" != 0 ]; then rc=1; [ -z "$f" ] && failed=$((failed + 1)); fi
}
for bin in "$@"; do
    if [ "$shards" -le 1 ]; then
        log=$(mktemp)
        "$bin" 2>&1 | tee "$log"
        tally "$log" "${PIPESTATUS[0]}"
        rm -f "$log"
        continue
    fi
    pids=(); logs=()
    for ((i = 0; i < shards; i++)); do
        logs[i]=$(mktemp)
        GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i "$bin" >"${logs[i]}" 2>&1 &
        pids[i]=$!
    done
    for ((i = 0; i < shards; i++)); do
        wait "${pids[i]}"; status=$?
        echo "--- $bin shard $((i + 1)) of $shards (exit $status)"
        cat "${logs[i]}"
        tally "${logs[i]}" "$status"
        rm -f "${logs[i]}"
    done
done
echo "test: $passed passed, $failed failed"
exit $rc
