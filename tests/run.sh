#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs GoogleTest binaries in order, stops at none, and ends with one summary line
# "N passed, N failed" for every test of every binary, after a "skipped:" line when some skipped
# themselves (each says why in its output). Exit status: non-zero if any failed.
# TEST_SHARDS=N (default 1) runs each binary as N GoogleTest shards at once, each shard's output
# printed whole when it ends: the integration tests mostly wait on timers and child processes.
# TEST_RERUN_FAILED=N (default 0; `make test-arm64` sets it, for emulation's timing) runs each test
# that failed once more, alone, when a binary had at most N failures: one that passes then is counted
# as passed and named on a "rerun:" line; one that fails again stays failed. A crash is never rerun.
set -u
passed=0; failed=0; skipped=0; rc=0
shards=${TEST_SHARDS:-1}
rerun_max=${TEST_RERUN_FAILED:-0}
rerun_passed=()
tally() {  # tally LOG STATUS: add one run's counts to the totals; failed test names to bin_failed
    local p f s
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$1" | tail -1)
    s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$1" | tail -1)
    skipped=$((skipped + ${s:-0}))
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$1" | tail -1)
    passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0}))
    if [ "$2" != 0 ]; then
        bin_bad=1; bin_count=$((bin_count + ${f:-0}))
        if [ -z "$f" ]; then bin_crashed=1; failed=$((failed + 1)); fi
        bin_failed+=($(sed -n 's/^\[  FAILED  \] \([A-Za-z0-9_]*\.[A-Za-z0-9_/]*\)\( (.*)\)\{0,1\}$/\1/p' "$1" | sort -u))
    fi
}
rerun() {  # rerun BIN: each of bin_failed alone once more, when allowed; sets rc for the binary
    local t log again=()
    [ "$bin_bad" = 0 ] && return
    # Rerun only failures named one by one (as many names as the count), none crashed, at most N.
    if [ "$bin_crashed" = 1 ] || [ ${#bin_failed[@]} -ne "$bin_count" ] || [ "$bin_count" -eq 0 ] ||
        [ "$bin_count" -gt "$rerun_max" ]; then
        rc=1
        return
    fi
    for t in "${bin_failed[@]}"; do
        log=$(mktemp)
        echo "--- $1: rerunning $t alone"
        GTEST_FILTER=$t "$1" >"$log" 2>&1; local status=$?
        cat "$log"; rm -f "$log"
        if [ "$status" = 0 ]; then
            passed=$((passed + 1)); failed=$((failed - 1)); rerun_passed+=("$t")
        else
            again+=("$t")
        fi
    done
    [ ${#again[@]} -gt 0 ] && rc=1
}
for bin in "$@"; do
    bin_failed=(); bin_crashed=0; bin_bad=0; bin_count=0
    if [ "$shards" -le 1 ]; then
        log=$(mktemp)
        "$bin" 2>&1 | tee "$log"
        tally "$log" "${PIPESTATUS[0]}"
        rm -f "$log"
        rerun "$bin"
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
    rerun "$bin"
done
[ ${#rerun_passed[@]} -gt 0 ] && echo "rerun: ${#rerun_passed[@]} failed once and passed alone: ${rerun_passed[*]}"
[ "$skipped" -gt 0 ] && echo "skipped: $skipped (not counted as passed; each says why above)"
echo "test: $passed passed, $failed failed"
exit $rc
