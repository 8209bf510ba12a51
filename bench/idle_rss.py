#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""RSS per idle established connection: kprism in front of a local echo server; N connections each
do one small exchange and then sit idle. Prints idle RSS and (RSS delta / N).
Usage: bench/idle_rss.py [N] [kprism binary] [extra kprism args...]"""
import os, resource, selectors, socket, subprocess, sys, threading, time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
BIN = sys.argv[2] if len(sys.argv) > 2 else "build/kprism"
EXTRA = sys.argv[3:]

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def echo_server(ls):
    sel = selectors.DefaultSelector()
    sel.register(ls, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            if key.fileobj is ls:
                c, _ = ls.accept(); c.setblocking(False); sel.register(c, selectors.EVENT_READ)
            else:
                try:
                    d = key.fileobj.recv(65536)
                except OSError:
                    d = b""
                if d:
                    key.fileobj.send(d)
                else:
                    sel.unregister(key.fileobj); key.fileobj.close()

def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])

ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", 0)); ls.listen(4096)
threading.Thread(target=echo_server, args=(ls,), daemon=True).start()
up = "127.0.0.1:%d" % ls.getsockname()[1]
port, admin = free_port(), free_port()
ups = [up] + ["127.0.0.1:%d" % free_port() for _ in range(2)]  # three upstreams, two refusing
proc = subprocess.Popen([BIN, "--endpoints", ",".join(ups), "--bind-port", str(port), "--health-port", str(admin),
                         "--max-connections", str(N + 100)] + EXTRA, stderr=subprocess.DEVNULL)
try:
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close(); break
        except OSError:
            time.sleep(0.02)
    time.sleep(0.5)
    idle = rss_kib(proc.pid)
    conns = []
    for i in range(N):
        c = socket.create_connection(("127.0.0.1", port))
        c.sendall(b"hello")
        got = b""
        while len(got) < 5:
            got += c.recv(5 - len(got))
        conns.append(c)
    time.sleep(0.5)
    loaded = rss_kib(proc.pid)
    print(f"connections={N} idle_rss_kib={idle} rss_with_conns_kib={loaded} "
          f"rss_per_conn_bytes={(loaded - idle) * 1024 / N:.0f}")
    for c in conns:
        c.close()
finally:
    proc.terminate(); proc.wait()
