#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Idle-connection memory of a TCP proxy, for bench/compare.sh: one small HTTP exchange through the
proxy (warm-up), then the proxy's idle RSS; then N connections that each do one keep-alive
GET / (answer checked: status 200, body `expect`) and stay open; RSS again; then how the held
connections spread over the backend ports (ESTABLISHED sockets whose local port is a backend's,
from /proc/net/tcp). RSS is the sum of VmRSS over --pids (nginx: master and worker).
Prints one line of key=value; exit status 1 if an answer was wrong.
Usage: compare_idle.py --port P --pids PID[,PID] --backends P1,P2,P3 [--n 5000] [--expect 'ok\\n']"""
import argparse, resource, socket, sys, time


def rss_kib(pids):
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total


def exchange(s, expect):
    s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: compare_idle\r\n\r\n")
    buf = b""
    deadline = time.monotonic() + 10
    while b"\r\n\r\n" not in buf:
        if time.monotonic() > deadline:
            raise OSError("no response headers within 10 s")
        d = s.recv(4096)
        if not d:
            raise OSError("connection closed before the response headers")
        buf += d
    head, body = buf.split(b"\r\n\r\n", 1)
    lines = head.split(b"\r\n")
    length = None
    for h in lines[1:]:
        k, _, v = h.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v.strip())
    if length is None:
        raise OSError("no Content-Length")
    while len(body) < length:
        if time.monotonic() > deadline:
            raise OSError("body incomplete within 10 s")
        d = s.recv(4096)
        if not d:
            raise OSError("connection closed in the body")
        body += d
    return lines[0] == b"HTTP/1.1 200 OK" and body == expect


def established_by_local_port(ports):
    counts = {p: 0 for p in ports}
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(path) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[3] != "01":  # ESTABLISHED
                        continue
                    port = int(fields[1].rsplit(":", 1)[1], 16)
                    if port in counts:
                        counts[port] += 1
        except FileNotFoundError:
            pass
    return counts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pids", default="")
    ap.add_argument("--backends", default="")
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--expect", default="ok\\n")
    ap.add_argument("--settle", type=float, default=0.5)
    a = ap.parse_args()
    expect = a.expect.encode().decode("unicode_escape").encode()
    pids = [int(p) for p in a.pids.split(",") if p]
    backends = [int(p) for p in a.backends.split(",") if p]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if a.n + 50 > hard:
        sys.exit(f"compare_idle: {a.n} connections need more than the open-files limit {hard}")

    bad = 0
    with socket.create_connection(("127.0.0.1", a.port), timeout=10) as s:
        bad += not exchange(s, expect)
    time.sleep(a.settle)
    idle = rss_kib(pids) if pids else 0
    conns = []
    try:
        for _ in range(a.n):
            s = socket.create_connection(("127.0.0.1", a.port), timeout=10)
            conns.append(s)
            bad += not exchange(s, expect)
        time.sleep(a.settle)
        loaded = rss_kib(pids) if pids else 0
        spread = established_by_local_port(backends)
    finally:
        for s in conns:
            s.close()
    per_conn = (loaded - idle) * 1024 / a.n if pids else 0
    print(f"idle_rss_kib={idle} loaded_rss_kib={loaded} rss_per_conn_bytes={per_conn:.0f} "
          f"spread={'/'.join(str(spread[p]) for p in backends)} bad_answers={bad}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
