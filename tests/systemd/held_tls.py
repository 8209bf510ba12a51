#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""N TLS keep-alive connections through kprism, held open across kprism's restarts.

Usage: held_tls.py PORT N CA CERT KEY. Opens N HTTPS connections to 127.0.0.1:PORT with the
client certificate, each with one GET /version, then reads commands on stdin, one per line:
  get    one GET /version on every held connection; prints
         "get ok=K failed=F same_socket=S served_by=NAME,..." (same_socket: the connection's local
         port is the one it had at the start, so no reconnect happened underneath)
  churn S  new TLS connections for S seconds from 4 threads, each closed after its handshake,
         the held ones left alone; prints "churn n=N failed=F per_s=R"
  quit   closes them and exits.
Prints "open N" once the connections are up (or "open-failed ..." and exits 1)."""

import http.client
import socket
import ssl
import sys
import threading
import time


def churn(port, ctx, seconds, threads=4):
    """New TLS connections (handshake with the client certificate, then closed) from `threads`
    threads for `seconds`."""
    counts = [[0, 0] for _ in range(threads)]  # done, failed
    start = time.monotonic()

    def run(mine):
        while time.monotonic() - start < seconds:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
                    with ctx.wrap_socket(raw, server_hostname="127.0.0.1"):
                        mine[0] += 1
            except OSError:
                mine[1] += 1

    ts = [threading.Thread(target=run, args=(c,)) for c in counts]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    took = time.monotonic() - start
    n, failed = sum(c[0] for c in counts), sum(c[1] for c in counts)
    return f"churn n={n} failed={failed} per_s={n / took:.1f}"


def main():
    port, n, ca, cert, key = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    ctx = ssl.create_default_context(cafile=ca)
    ctx.load_cert_chain(cert, key)
    conns, ports = [], []
    try:
        for _ in range(n):
            c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
            c.request("GET", "/version")
            r = c.getresponse()
            r.read()
            if r.status != 200:
                raise RuntimeError(f"status {r.status}")
            conns.append(c)
            ports.append(c.sock.getsockname()[1])
    except (OSError, http.client.HTTPException, RuntimeError) as e:
        print(f"open-failed after {len(conns)}: {type(e).__name__}: {e}", flush=True)
        return 1
    print(f"open {len(conns)}", flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "quit":
            break
        if cmd.startswith("churn "):
            print(churn(port, ctx, float(cmd.split()[1])), flush=True)
            continue
        if cmd != "get":
            print(f"unknown command {cmd!r}", flush=True)
            continue
        ok = failed = same = 0
        served = set()
        for c, p in zip(conns, ports):
            try:
                if c.sock is not None and c.sock.getsockname()[1] == p:
                    same += 1
                c.request("GET", "/version")
                r = c.getresponse()
                body = r.read().decode(errors="replace")
                if r.status == 200:
                    ok += 1
                    served.add(body.split()[2] if body.startswith("served by ") else "?")
                else:
                    failed += 1
            except (OSError, http.client.HTTPException):
                failed += 1
                c.close()
        print(f"get ok={ok} failed={failed} same_socket={same} served_by={','.join(sorted(served))}", flush=True)
    for c in conns:
        c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
