# SPDX-License-Identifier: Apache-2.0
# Shared by the bench scripts (sourced): stopping every process a script started.

# stop_pids PID...: SIGTERM, up to 5 s for them to exit (polled), then SIGKILL what is left.
stop_pids() {
    local p alive
    for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
    for _ in $(seq 50); do
        alive=0
        for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ $alive = 0 ] && break
        sleep 0.1
    done
    for p in "$@"; do kill -KILL "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
}
