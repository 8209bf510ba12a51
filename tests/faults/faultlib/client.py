# SPDX-License-Identifier: Apache-2.0
"""TLS clients of the Kubernetes API as kubelet is one, through kprism on 127.0.0.1: TLS end to
end with the stand-in apiserver (its certificate verified against the test CA for 127.0.0.1,
the kubelet client certificate presented), HTTP/1.1 GETs answered "served by NAME path PATH".

Stream: a steady stream of new connections, each doing one request, each allowed `timeout`
(5 s, a patient kubelet) from its TCP connect to the end of its answer. Holder: a long-lived
keep-alive connection (a kubelet watch) whose close is noticed and timed."""

import re
import select
import socket
import ssl
import threading
import time

_SERVED = re.compile(rb"\r\nX-Served-By: ([^\r]*)\r\n")
_LENGTH = re.compile(rb"\r\nContent-Length: (\d+)\r\n", re.I)


def make_context(pki):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_verify_locations(pki.ca_cert)
    ctx.load_cert_chain(pki.client_pem)
    ctx.check_hostname = True  # the stand-in's certificate carries IP:127.0.0.1
    return ctx


class Result:
    """One client connection. `handshake` is when its TLS handshake completed (monotonic), None if
    it never did: through kprism that means the upstream had sent its first bytes, so from then on
    the connection is bound to that upstream (kprism(8), First response). `port`: the client's
    local port, to find the connection in the stand-ins' and kprism's logs."""
    __slots__ = ("start", "end", "ok", "served_by", "error", "wall", "handshake", "port", "path")

    def __init__(self, start, wall):
        self.start, self.wall = start, wall
        self.end = None
        self.ok = False
        self.served_by = None
        self.error = None
        self.handshake = None
        self.port = None
        self.path = None

    @property
    def latency(self):
        return (self.end or self.start) - self.start


class Conn:
    """One TLS connection through kprism; every operation bounded by the connection's deadline."""

    def __init__(self, ctx, port, deadline, rcvbuf=None, result=None):
        self.deadline = deadline
        raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        try:
            raw.settimeout(self._left())
            raw.connect(("127.0.0.1", port))
            if result is not None:
                result.port = raw.getsockname()[1]
            self.s = ctx.wrap_socket(raw, server_hostname="127.0.0.1", do_handshake_on_connect=False)
            self.s.settimeout(self._left())
            self.s.do_handshake()
            if result is not None:
                result.handshake = time.monotonic()
        except BaseException:
            raw.close()
            raise
        self.buf = bytearray()

    def _left(self):
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("client deadline")
        return left

    def get(self, path, close=False):
        """Sends GET path; returns (served_by, body) of the answer, checked for this path."""
        self.s.settimeout(self._left())
        hdr = "Connection: close\r\n" if close else ""
        self.s.sendall(f"GET {path} HTTP/1.1\r\nHost: kubernetes\r\nUser-Agent: kprism-faults\r\n{hdr}\r\n".encode())
        head, body = self.read_response()
        m = _SERVED.search(head)
        served = m.group(1).decode() if m else None
        want = f"served by {served} path {path}\n".encode()
        if body != want:
            raise ValueError(f"corrupted answer: {body[:120]!r} for {path[:60]!r}")
        return served, body

    def read_response(self):
        while b"\r\n\r\n" not in self.buf:
            self._recv()
        end = self.buf.index(b"\r\n\r\n")
        head = bytes(self.buf[:end + 2])
        del self.buf[:end + 4]
        m = _LENGTH.search(head)
        n = int(m.group(1)) if m else 0
        while len(self.buf) < n:
            self._recv()
        body = bytes(self.buf[:n])
        del self.buf[:n]
        return head, body

    def _recv(self):
        self.s.settimeout(self._left())
        d = self.s.recv(65536)
        if not d:
            raise ConnectionError("EOF before a complete answer")
        self.buf += d

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass


def request_once(ctx, port, path, timeout=5.0):
    """One new connection, one GET with Connection: close. Never raises."""
    r = Result(time.monotonic(), time.time())
    r.path = path
    c = None
    try:
        c = Conn(ctx, port, r.start + timeout, result=r)
        r.served_by, _ = c.get(path, close=True)
        r.ok = True
    except Exception as e:
        r.error = f"{type(e).__name__}: {e}"
    finally:
        if c:
            c.close()
        r.end = time.monotonic()
    return r


class Stream:
    """A new client connection every `interval` seconds (each on its own thread, so one that waits
    does not hold up the next), until stop() or `max_seconds`."""

    def __init__(self, ctx, port, interval=0.075, timeout=5.0, max_seconds=120, tag="s"):
        self.ctx, self.port, self.interval, self.timeout = ctx, port, interval, timeout
        self.results = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._max = max_seconds
        self._tag = tag
        self._workers = []
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        end = time.monotonic() + self._max
        n = 0
        nxt = time.monotonic()
        while not self._stop.is_set() and time.monotonic() < end:
            n += 1
            w = threading.Thread(target=self._one, args=(f"/{self._tag}/{n}",), daemon=True)
            w.start()
            self._workers.append(w)
            nxt += self.interval
            self._stop.wait(max(0.0, nxt - time.monotonic()))

    def _one(self, path):
        r = request_once(self.ctx, self.port, path, self.timeout)
        with self._lock:
            self.results.append(r)

    def stop(self):
        self._stop.set()
        self._t.join(timeout=5)
        for w in self._workers:
            w.join(timeout=self.timeout + 2)
        with self._lock:
            self.results.sort(key=lambda r: r.start)
            return list(self.results)

    def snapshot(self):
        with self._lock:
            return sorted(self.results, key=lambda r: r.start)


class Holder:
    """A long-lived keep-alive connection (like a kubelet watch); closed_at is when it ended."""

    def __init__(self, ctx, port, path, timeout=5.0):
        self.c = Conn(ctx, port, time.monotonic() + timeout)
        self.served_by, _ = self.c.get(path)
        self.c.s.settimeout(0)
        self.closed_at = None
        self.n = 0

    def poll_closed(self):
        """Notices (and times) the end of the connection; True once it is closed."""
        if self.closed_at is not None:
            return True
        try:
            r, _, _ = select.select([self.c.s], [], [], 0)
        except (OSError, ValueError):
            r = [True]
        if r:
            try:
                d = self.c.s.recv(1)
                if d:
                    self.c.buf += d  # not expected: an unasked-for byte
                    return False
                self.closed_at = time.monotonic()
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return False  # a TLS record without data (a session ticket)
            except OSError:
                self.closed_at = time.monotonic()
        return self.closed_at is not None

    def works(self, timeout=5.0):
        """One more request on this connection; True when answered correctly by the same upstream."""
        if self.poll_closed():
            return False
        self.n += 1
        self.c.deadline = time.monotonic() + timeout
        try:
            served, _ = self.c.get(f"/hold/again/{self.n}")
            self.c.s.settimeout(0)
            return served == self.served_by
        except Exception:
            return False

    def close(self):
        self.c.close()


def open_holders(ctx, port, total, want=None, max_attempts=80):
    """Opens `total` holders and, beyond that, until `want` ({name: count}) is met; bounded."""
    want = dict(want or {})
    hs = []
    for i in range(max_attempts):
        counts = {}
        for h in hs:
            counts[h.served_by] = counts.get(h.served_by, 0) + 1
        if len(hs) >= total and all(counts.get(k, 0) >= v for k, v in want.items()):
            break
        try:
            h = Holder(ctx, port, f"/hold/{i}")
        except Exception:
            continue
        if len(hs) >= total and want and want.get(h.served_by, 0) <= counts.get(h.served_by, 0):
            h.close()  # enough of those already
            continue
        hs.append(h)
    return hs


def request_with_retry(ctx, port, path, timeout=5.0, pause=0.05, errors=None):
    """Like a client library that retries a refused or reset connect until its deadline.
    Returns (Result, attempts); `errors`, a list, gets each failed attempt's error."""
    start = time.monotonic()
    attempts = 0
    while True:
        attempts += 1
        left = start + timeout - time.monotonic()
        r = request_once(ctx, port, path, max(0.05, left))
        if not r.ok and errors is not None:
            errors.append(r.error or "")
        if r.ok or time.monotonic() + pause >= start + timeout:
            r.start = start
            return r, attempts
        time.sleep(pause)
