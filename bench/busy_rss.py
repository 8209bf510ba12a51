#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""RSS of kprism with N stalled busy connections: the worst case for its memory, what a container
memory limit has to cover. The upstream sends without end and never reads; each client sends
without end and never reads. kprism then holds, per connection, whatever it has read and cannot
yet write in each direction (at most one 64 KiB chunk each way, src/proxy/connection.cc forward() and
queue_write()). Prints the RSS at 0 connections and at each N, and the increase per connection.
Kernel socket buffers are not in kprism's RSS (cgroup v2 charges them to the memory cgroup too).

Usage: bench/busy_rss.py [kprism binary] [N ...]   (default build/kprism 100 250 500;
`make bench-busy` runs $(BUILD)/kprism 100 250 500 1000). Needs 2 x max(N) + 64 descriptors.
Environment, for debugging a run:
  BUSY_LOG=FILE   kprism's stderr (its log) goes to FILE instead of /dev/null
  BUSY_DEBUG=1    after each N, print kprism's kprism_upstream_bytes_total and
                  kprism_connections_active metrics"""
import os, resource, selectors, socket, subprocess, sys, threading, time

BIN = sys.argv[1] if len(sys.argv) > 1 else "build/kprism"
COUNTS = [int(a) for a in sys.argv[2:]] or [100, 250, 500]
CHUNK = b"x" * 65536
SMALL = 16384  # receive buffers of the bench's sockets, which never read: keep the kernel from absorbing much

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
if 2 * max(COUNTS) + 64 > hard:
    sys.exit(f"busy_rss: {max(COUNTS)} connections need {2 * max(COUNTS) + 64} fds, the limit is {hard}")


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])


def fill(sock, deadline):
    """Writes until the socket would block (kprism stopped reading), or the deadline."""
    sock.setblocking(False)
    while time.monotonic() < deadline:
        try:
            sock.send(CHUNK)
        except BlockingIOError:
            return True
        except OSError:  # the start-up probe's upstream side, closed
            return False
    return False


accepted = []
lock = threading.Lock()


def stalling_upstream(ls):
    while True:
        try:
            c, _ = ls.accept()
        except OSError:
            return
        with lock:
            accepted.append(c)


ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL)  # inherited by accepted sockets
ls.bind(("127.0.0.1", 0)); ls.listen(4096)
threading.Thread(target=stalling_upstream, args=(ls,), daemon=True).start()
port, admin = free_port(), free_port()
proc = subprocess.Popen([BIN, "--endpoints", "127.0.0.1:%d" % ls.getsockname()[1], "--bind-port", str(port),
                         "--health-port", str(admin), "--max-connections", str(max(COUNTS) + 100)],
                        stderr=open(os.environ.get("BUSY_LOG", os.devnull), "w"))
clients = []
try:
    for _ in range(250):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close(); break
        except OSError:
            time.sleep(0.02)
    time.sleep(0.5)
    base = rss_kib(proc.pid)
    print(f"binary={BIN} chunk=64KiB connections=0 rss_kib={base}")
    for n in COUNTS:
        while len(clients) < n:
            c = socket.socket()
            c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL)
            c.connect(("127.0.0.1", port))
            clients.append(c)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with lock:
                if len(accepted) >= n:
                    break
            time.sleep(0.01)
        with lock:
            ups = list(accepted)
        stalled = sum(fill(s, deadline) for s in clients + ups)
        time.sleep(1.0)  # let kprism read what it can and stop
        rss = rss_kib(proc.pid)
        if os.environ.get("BUSY_DEBUG"):
            import urllib.request
            m = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics").read().decode()
            print("\n".join(l for l in m.splitlines() if l.startswith(("kprism_upstream_bytes_total", "kprism_connections_active"))))
        print(f"connections={n} stalled_sockets={stalled}/{len(clients) + len(ups)} rss_kib={rss} "
              f"per_connection_kib={(rss - base) / n:.1f}")
finally:
    proc.terminate(); proc.wait()
    for s in clients + accepted:
        s.close()
