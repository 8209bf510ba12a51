#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the libFuzzer targets (built by `make fuzz`), JOBS at a time, each for SECONDS, and prints one
# table of what each did; ends with "fuzz: N passed, N failed" (failed: a crash, leak, UB, timeout
# or out-of-memory, the input saved under $FUZZ_DIR/artifacts/). Exit status non-zero if any failed.
#   tests/fuzz/run.sh [--smoke] FUZZ_DIR SECONDS JOBS TARGET...
# The corpus each run grows is $FUZZ_DIR/corpus/TARGET (kept between runs; --smoke: a fresh one,
# $FUZZ_DIR/smoke/TARGET), read together with the seeds tests/fuzz/corpus/TARGET, which are never
# written. Logs: $FUZZ_DIR/logs/TARGET.log.
set -u
smoke=0
if [ "${1:-}" = --smoke ]; then smoke=1; shift; fi
if [ $# -lt 4 ]; then
    echo "usage: $0 [--smoke] FUZZ_DIR SECONDS JOBS TARGET..." >&2
    exit 2
fi
dir=$1 seconds=$2 jobs=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dir/logs" "$dir/artifacts"

# Longest input per target: past each parser's bound (16 KiB response, 8 KiB request head, 16 KiB
# discovery response head).
max_len() {
    case $1 in
    readyz_fuzz) echo 20000 ;;
    admin_request_fuzz) echo 10000 ;;
    pem_fuzz) echo 12288 ;;
    discovery_fuzz) echo 20000 ;;
    *) echo 8192 ;;
    esac
}

run_one() {
    local t=$1 work
    if [ "$smoke" = 1 ]; then work=$dir/smoke/$t; rm -rf "$work"; else work=$dir/corpus/$t; fi
    mkdir -p "$work"
    local dict=()
    [ -f "$here/$t.dict" ] && dict=(-dict="$here/$t.dict")
    local start=$SECONDS
    "$dir/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len="$(max_len "$t")" \
        "${dict[@]}" -artifact_prefix="$dir/artifacts/$t-" -print_final_stats=1 \
        "$work" "$here/corpus/$t" >"$dir/logs/$t.log" 2>&1
    local rc=$?
    echo "$rc $((SECONDS - start))" >"$dir/logs/$t.result"
}

for t in "$@"; do
    [ -x "$dir/$t" ] || { echo "$dir/$t: not built (make fuzz)" >&2; exit 2; }
    rm -f "$dir/logs/$t.result"
done
running=0
for t in "$@"; do
    if [ "$running" -ge "$jobs" ]; then
        wait -n
        running=$((running - 1))
    fi
    echo "fuzz: $t for ${seconds}s ($dir/logs/$t.log)"
    run_one "$t" &
    running=$((running + 1))
done
wait

passed=0 failed=0
printf '%-20s %8s %12s %8s %7s %7s %7s %s\n' target seconds execs exec/s cov ft corpus result
for t in "$@"; do
    log=$dir/logs/$t.log
    read -r rc took <"$dir/logs/$t.result" 2>/dev/null || { rc=1; took=0; }
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    last=$(grep -E '^#[0-9]+[[:space:]]' "$log" | tail -1)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(sed -n 's/.* corp: \([0-9]*\)\/.*/\1/p' <<<"$last")
    if [ "$rc" = 0 ]; then
        result=ok
        passed=$((passed + 1))
    else
        art=$(grep -o "$dir/artifacts/$t-[a-z]*-[0-9a-f]*" "$log" | tail -1)
        why=$(grep -m1 -oE "invariant failed: .*|runtime error: .*|Assertion \`.*' failed|ERROR: [A-Za-z]+: [a-z -]+" "$log")
        result="FAILED (exit $rc${why:+: $why}${art:+; input $art})"
        failed=$((failed + 1))
    fi
    printf '%-20s %8s %12s %8s %7s %7s %7s %s\n' "$t" "$took" "${execs:--}" "${eps:--}" "${cov:--}" "${ft:--}" \
        "${corp:--}" "$result"
done
[ "$failed" = 0 ] || echo "fuzz: see the logs in $dir/logs; reproduce with: $dir/TARGET INPUT (tests/fuzz/README.md)"
echo "fuzz: $passed passed, $failed failed"
[ "$failed" = 0 ]
