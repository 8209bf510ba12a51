# SPDX-License-Identifier: Apache-2.0
# Shared by the bench scripts (sourced): stopping every process a script started, HAProxy's config.

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

# haproxy_tcp_cfg PORT MAXCONN PIDFILE BACKEND_PORT...: the config both comparisons run HAProxy
# with (one thread, TCP mode, random balance over the loopback backends), on stdout.
haproxy_tcp_cfg() {
    local port=$1 maxconn=$2 pidfile=$3 i=0 p
    shift 3
    printf 'global\n    nbthread 1\n    maxconn %s\n    pidfile %s\n' "$maxconn" "$pidfile"
    printf 'defaults\n    mode tcp\n    timeout connect 2s\n    timeout client 1h\n    timeout server 1h\n'
    printf 'frontend fe\n    bind 127.0.0.1:%s\n    default_backend be\nbackend be\n    balance random\n' "$port"
    for p in "$@"; do i=$((i + 1)); printf '    server b%s 127.0.0.1:%s\n' "$i" "$p"; done
}
