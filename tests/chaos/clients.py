# SPDX-License-Identifier: Apache-2.0
"""Client traffic through kprism with the admin client certificate: watchers that hold one
long-lived connection each (a Go stand-in streams a watch; c4 answers at once, and the watcher
then sends a GET on the same connection every second) and are not judged (kprism closes them on
purpose), and requesters that each make a new TLS connection and one GET every 300 ms, every
outcome recorded with its start and end time for I6."""

import http.client
import os
import ssl
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scenarios"))
import load  # noqa: E402

REQ_PATH = "/api/v1/namespaces/default/configmaps/chaos-target"
WATCH_PATH = "/api/v1/namespaces/default/configmaps?watch=1&allowWatchBookmarks=true&timeoutSeconds=600"


context = load.tls_context  # the admin client certificate's TLS context (tests/scenarios/load.py)


class Traffic:
    def __init__(self, ctx, port, watchers=4, requesters=3, period=0.3, timeout=6.0):
        self.ctx, self.port, self.period, self.timeout = ctx, port, period, timeout
        self.lock = threading.Lock()
        self.requests = []  # (t0, t1, ok, server, detail)
        self.watch_opens = 0
        self.watch_ends = 0
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._watcher, daemon=True) for _ in range(watchers)]
        self.threads += [threading.Thread(target=self._requester, args=(i,), daemon=True) for i in range(requesters)]

    def start(self):
        for t in self.threads:
            t.start()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(self.timeout + 3)

    def _conn(self, timeout):
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=timeout)

    def _requester(self, i):
        self.stop.wait(i * self.period / 3)
        while not self.stop.is_set():
            t0 = time.monotonic()
            conn = self._conn(self.timeout)
            ok, server, detail = False, "", ""
            try:
                conn.request("GET", REQ_PATH, headers={"Connection": "close"})
                r = conn.getresponse()
                r.read()
                server = r.getheader("X-Standin-Name") or r.getheader("X-Served-By") or ""
                ok = r.status == 200
                detail = f"HTTP {r.status}"
            except (OSError, http.client.HTTPException, ssl.SSLError) as e:
                detail = f"{type(e).__name__}: {e}"[:120]
            finally:
                conn.close()
            with self.lock:
                self.requests.append((t0, time.monotonic(), ok, server, detail))
            self.stop.wait(self.period)

    def _watcher(self):
        while not self.stop.is_set():
            conn = self._conn(5.0)
            try:
                conn.request("GET", WATCH_PATH)
                r = conn.getresponse()
                with self.lock:
                    self.watch_opens += 1
                streaming = r.getheader("Transfer-Encoding", "").lower() == "chunked" and r.status == 200
                conn.sock.settimeout(1.0)
                if streaming:
                    while not self.stop.is_set():
                        try:
                            line = r.readline()
                        except TimeoutError:
                            continue
                        if not line:
                            break
                else:
                    r.read()
                    while not self.stop.wait(1.0):
                        conn.request("GET", REQ_PATH)
                        r = conn.getresponse()
                        r.read()
            except (OSError, http.client.HTTPException, ssl.SSLError, ValueError):
                pass
            finally:
                conn.close()
                with self.lock:
                    self.watch_ends += 1
            self.stop.wait(0.2)


def served_conn(ctx, port, timeout=2.0):
    """A TLS connection through kprism that has had one GET answered (so kprism will not move it,
    kprism(8) First response) and is kept: (ssl socket, the server that answered, local port), or
    None when that failed."""
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=timeout)
    try:
        conn.request("GET", REQ_PATH)
        r = conn.getresponse()
        r.read()
        server = r.getheader("X-Standin-Name") or r.getheader("X-Served-By") or "?"
        sock = conn.sock
        conn.sock = None  # ours now: http.client must not close it
        return sock, server, sock.getsockname()[1]
    except (OSError, http.client.HTTPException, ssl.SSLError, ValueError):
        conn.close()
        return None


def half_close(sock):
    """Sends the FIN (shutdown(SHUT_WR) of the TCP socket under the TLS; no close_notify)."""
    import socket
    socket.socket.shutdown(sock, socket.SHUT_WR)


def reset(sock):
    """SO_LINGER {1, 0} then close: the kernel sends RST."""
    import socket
    import struct
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    finally:
        socket.socket.close(sock)
