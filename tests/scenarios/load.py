# SPDX-License-Identifier: Apache-2.0
"""Client traffic through one balancer, recorded so each scenario can be measured afterwards:
keep-alive requesters, a stream of new TLS connections (kubelets and agents reconnecting), a watch
that resumes from its last resourceVersion (client-go's reflector), and long-lived connections
that send a GET now and then. Every request is logged as (time, kind, outcome, apiserver) from the
stand-in's X-Standin-Name header. Plus the writer that creates an object every 100 ms straight on
a serving stand-in, and a sampler of each balancer's established upstream connections (ss)."""

import http.client
import json
import ssl
import subprocess
import threading
import time

GET_PATH = "/api/v1/namespaces/default/configmaps/scenario-target"
WATCH_PATH = "/api/v1/namespaces/default/configmaps?watch=1&allowWatchBookmarks=true&resourceVersion="


def tls_context(pki):
    ctx = ssl.create_default_context(cafile=pki.ca)
    ctx.load_cert_chain(f"{pki.d}/adm.crt", f"{pki.d}/adm.key")
    return ctx


class Log:
    """Request outcomes: ok (2xx), 429, fail (another status), error (connection broken, refused,
    reset, timed out), retried (a reused connection was found closed; retried, not a request).
    Thread-safe appends; read once the threads have stopped or under the lock."""

    def __init__(self):
        self.lock = threading.Lock()
        self.rows = []  # (t, kind, outcome, server, detail, started): t when it ended

    def add(self, kind, outcome, server="", detail="", started=None):
        now = time.monotonic()
        with self.lock:
            self.rows.append((now, kind, outcome, server, detail, now if started is None else started))

    def between(self, t0, t1, kinds=None):
        with self.lock:
            return [r for r in self.rows if t0 <= r[0] < t1 and (kinds is None or r[1] in kinds)]


def _get(conn, path, close=False):
    conn.request("GET", path, headers={"Connection": "close"} if close else {})
    r = conn.getresponse()
    r.read()
    return r.status, r.getheader("X-Standin-Name", ""), (r.getheader("Connection", "") or "").lower() == "close"


def _outcome(status):
    return "ok" if 200 <= status < 300 else "429" if status == 429 else "fail"


class Load:
    """The traffic of one node's clients through one balancer on 127.0.0.1:port."""

    def __init__(self, ctx, port, requesters=4, holders=30, period=0.2, holder_period=5.0, timeout=10.0):
        self.ctx, self.port, self.timeout = ctx, port, timeout
        self.log = Log()
        self.events = []  # watch: (t, name, resourceVersion) of every ADDED s-* object
        self.holder_server = [""] * holders
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._requester, args=(period,), daemon=True) for _ in range(requesters)]
        self.threads.append(threading.Thread(target=self._newconns, args=(period,), daemon=True))
        self.threads.append(threading.Thread(target=self._watcher, daemon=True))
        self.threads += [threading.Thread(target=self._holder, args=(i, holder_period), daemon=True) for i in range(holders)]

    def start(self, start_rv):
        self.start_rv = start_rv
        for t in self.threads:
            t.start()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(self.timeout + 5)

    def _conn(self):
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=self.timeout)

    def _keepalive(self, kind, period, on_served=None):
        """GET every `period` on one connection; a new one after an error or a Connection: close.
        As Go's net/http (client-go) does, a GET whose reused connection turns out closed before any
        answer is retried once at once on a new connection; only that retry's outcome counts."""
        conn = None
        while not self.stop.is_set():
            reused = conn is not None
            started = time.monotonic()
            try:
                if conn is None:
                    conn = self._conn()
                status, server, close = _get(conn, GET_PATH)
                self.log.add(kind, _outcome(status), server, status, started)
                if on_served:
                    on_served(server)
                if close:
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as e:
                if conn is not None:
                    conn.close()
                conn = None
                if reused and isinstance(e, (ConnectionResetError, BrokenPipeError)):
                    self.log.add(kind, "retried", "", type(e).__name__)
                    continue
                self.log.add(kind, "error", "", type(e).__name__, started)
                if on_served:
                    on_served("")
            self.stop.wait(period)
        if conn is not None:
            conn.close()

    def _requester(self, period):
        self._keepalive("keepalive", period)

    def _holder(self, i, period):
        # Long-lived: first request at a random-ish phase so 30 holders do not move in lockstep.
        self.stop.wait((i * 0.37) % period)
        self._keepalive("holder", period, on_served=lambda s: self.holder_server.__setitem__(i, s))

    def _newconns(self, period):
        while not self.stop.is_set():
            conn = self._conn()
            started = time.monotonic()
            try:
                status, server, _ = _get(conn, GET_PATH, close=True)
                self.log.add("newconn", _outcome(status), server, status, started)
            except (OSError, http.client.HTTPException) as e:
                self.log.add("newconn", "error", "", type(e).__name__, started)
            finally:
                conn.close()
            self.stop.wait(period)

    def _watcher(self):
        rv = self.start_rv
        while not self.stop.is_set():
            conn = self._conn()
            conn.timeout = None
            try:
                conn.request("GET", WATCH_PATH + rv)
                r = conn.getresponse()
                if r.status != 200:
                    r.read()
                    self.log.add("watch", _outcome(r.status), r.getheader("X-Standin-Name", ""), r.status)
                    if r.status == 410:  # expired: a reflector relists; the scenarios never get here
                        rv = ""
                    raise http.client.HTTPException(f"watch {r.status}")
                self.log.add("watch", "ok", r.getheader("X-Standin-Name", ""), 200)
                conn.sock.settimeout(1.0)  # so stop is noticed; bookmarks keep a healthy watch talking
                while not self.stop.is_set():
                    try:
                        line = r.readline()
                    except TimeoutError:
                        continue
                    if not line:
                        break
                    ev = json.loads(line)
                    md = ev.get("object", {}).get("metadata", {})
                    if md.get("resourceVersion"):
                        rv = md["resourceVersion"]
                    if ev.get("type") == "ADDED" and md.get("name", "").startswith("s-"):
                        self.events.append((time.monotonic(), md["name"], int(rv)))
            except (OSError, http.client.HTTPException, ValueError):
                pass
            finally:
                conn.close()
            if not self.stop.is_set():
                self.stop.wait(0.1)


class Writer:
    """Creates ConfigMap s-NNNNNN every 100 ms straight on the first stand-in that takes it (not
    through a balancer, so a balancer's outage cannot hide as a missing write)."""

    def __init__(self, ctx, cluster, period=0.1):
        self.ctx, self.cluster, self.period = ctx, cluster, period
        self.created = []  # (t, name)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.n = 0

    def start(self):
        self.thread.start()

    def finish(self):
        self.stop.set()
        self.thread.join(10)

    def _run(self):
        while not self.stop.is_set():
            name = f"s-{self.n:06d}"
            body = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})
            for s in self.cluster.servers:
                try:
                    c = http.client.HTTPSConnection(s.addr, s.port, context=self.ctx, timeout=1)
                    c.request("POST", "/api/v1/namespaces/default/configmaps", body,
                              {"Content-Type": "application/json"})
                    st = c.getresponse().status
                    c.close()
                except (OSError, http.client.HTTPException):
                    continue
                if st in (201, 409):
                    self.created.append((time.monotonic(), name))
                    self.n += 1
                    break
            self.stop.wait(self.period)


def create_target(ctx, server):
    c = http.client.HTTPSConnection(server.addr, server.port, context=ctx, timeout=5)
    c.request("POST", "/api/v1/namespaces/default/configmaps",
              json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "scenario-target"}}),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    c.request("GET", "/api/v1/namespaces/default/configmaps")
    rv = json.loads(c.getresponse().read())["metadata"]["resourceVersion"]
    c.close()
    return rv


def upstream_connections(pids, endpoints, skip_ports=lambda: set()):
    """{pid: {endpoint: established TCP connections from that process to it}} from one ss run,
    without those in skip_ports(), a set of (pid, local port) asked before and after the ss run, so
    that a probe connection renewed meanwhile is left out either way."""
    skip = set(skip_ports())
    out = subprocess.run(["ss", "-Htnp", "state", "established"], capture_output=True, text=True).stdout
    skip |= set(skip_ports())
    counts = {p: {e: 0 for e in endpoints} for p in pids}
    for line in out.splitlines():
        f = line.split()
        if len(f) < 5:
            continue
        peer = f[3]
        if peer not in endpoints:
            continue
        port = f[2].rsplit(":", 1)[-1]
        for p in pids:
            if f"pid={p}," in line and not (port.isdigit() and (p, int(port)) in skip):
                counts[p][peer] += 1
    return counts
