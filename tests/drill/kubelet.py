#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The HTTP/1.1 client model and the connection sampler of one drill node, run inside the node's
namespace: `kubelet.py SPEC.json` (the clients only when the spec's "http1" is true; the HTTP/2
client-go model is client/, drill-client). For every balancer on the node, one client through it
(HTTP/1.1 over mTLS with the node's kubelet certificate, Python's ssl + http.client, a connection
per concern):
- heartbeat every 10 s (4 % jitter, period counted from the end of the previous one) as the
  kubelet's node lease controller (component-helpers/apimachinery/lease/controller.go): up to 5
  immediate attempts; from the second failure on, every connection of the client is closed (the
  kubelet's onRepeatedHeartbeatFailure, closeAllConns); after 5 failures a GET with backoff
  (200 ms doubling to 7 s) until it answers, then the 5 attempts again;
  a conflict re-reads the Lease; the Lease is NODE--BALANCER--h1 in kube-node-lease (one per
  balancer and model, so that they stay independent);
- a GET of the node's Lease every 2 s;
- a watch of kube-node-lease resumed from its last resourceVersion (client-go's reflector:
  backoff 800 ms doubling to 30 s; relist on 410 Expired; 45 s without a byte: the connection is
  taken for dead, as HTTP/2's ping would).
Every request has a 10 s timeout: one unanswered by then is "hung". A GET whose reused connection
was closed before any answer is retried once at once on a new one (Go's net/http). Events go to
LOGDIR/NODE--BALANCER.h1.jsonl; every second the sampler writes each balancer's established
connections per upstream (ss -tnp, by the balancer's pids) and which upstreams it has up to
LOGDIR/NODE--sample.jsonl. Runs until SIGTERM or its deadline."""

import csv
import http.client
import io
import json
import random
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request

TIMEOUT = 10.0
NS = "kube-node-lease"
stop = threading.Event()


class Log:
    def __init__(self, path):
        self.f = open(path, "a", buffering=1)
        self.lock = threading.Lock()

    def __call__(self, kind, **kw):
        with self.lock:
            self.f.write(json.dumps({"t": round(time.time(), 3), "k": kind, **kw}) + "\n")


def microtime():
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}Z"


class Client:
    def __init__(self, spec, bal):
        self.port = bal["port"]
        self.lease = f"{spec['node']}--{bal['name']}--h1"
        self.log = Log(f"{spec['logdir']}/{spec['node']}--{bal['name']}.h1.jsonl")
        self.ctx = ssl.create_default_context(cafile=spec["ca"])
        self.ctx.load_cert_chain(spec["cert"], spec["key"])
        self.conns = set()
        self.lock = threading.Lock()
        self.seq = 0

    def new_conn(self, timeout=TIMEOUT):
        c = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=timeout)
        c.used = False
        with self.lock:
            self.conns.add(c)
        return c

    def drop(self, c):
        with self.lock:
            self.conns.discard(c)
        try:
            if c.sock:
                c.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        c.close()

    def close_all(self):
        """kubelet's closeAllConns: every connection of this client, the watch's too."""
        with self.lock:
            cs = list(self.conns)
        for c in cs:
            self.drop(c)

    def request(self, slot, kind, method, path, body=None):
        """One request on the connection slot[0] (made if none); logs it; returns (status, data)."""
        t0 = time.monotonic()
        for attempt in (0, 1):
            c = slot[0] if slot[0] is not None and slot[0] in self.conns else None
            if c is None:
                c = slot[0] = self.new_conn()
            reused = c.used
            try:
                hdrs = {"Host": "kubernetes", "Accept": "application/json", "User-Agent": "drill-kubelet"}
                if body is not None:
                    hdrs["Content-Type"] = "application/json"
                c.request(method, path, body=json.dumps(body).encode() if body is not None else None, headers=hdrs)
                c.used = True
                r = c.getresponse()
                data = r.read()
                ms = round((time.monotonic() - t0) * 1000)
                ok = 200 <= r.status < 300
                self.log(kind, ok=ok, code=r.status, ms=ms, retried=attempt)
                if r.will_close:
                    self.drop(c)
                    slot[0] = None
                return r.status, data
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                self.drop(c)
                slot[0] = None
                if reused and attempt == 0 and method == "GET":
                    continue  # net/http retries a request its reused connection lost unanswered
                return self._fail(kind, t0, e, attempt)
            except (OSError, http.client.HTTPException, ValueError, AttributeError) as e:
                # AttributeError/ValueError: http.client's reply to its connection being closed
                # under it by another thread (closeAllConns)
                self.drop(c)
                slot[0] = None
                return self._fail(kind, t0, e, attempt)
        return None, None

    def _fail(self, kind, t0, e, attempt):
        ms = round((time.monotonic() - t0) * 1000)
        hung = isinstance(e, (socket.timeout, TimeoutError)) or ms >= TIMEOUT * 1000 - 50
        self.log(kind, ok=False, hung=hung, err=f"{type(e).__name__}: {e}"[:160], ms=ms, retried=attempt)
        return None, None

    # The node's Lease: what the heartbeats update and the GETs read.
    def base_path(self):
        return f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{self.lease}"

    def ensure(self, slot):
        """backoffEnsureLease: GET (create if missing) with backoff 200 ms doubling to 7 s."""
        sleep = 0.1
        while not stop.is_set():
            code, data = self.request(slot, "heartbeat-get", "GET", self.base_path())
            if code == 404:
                code, data = self.request(slot, "heartbeat-create", "POST",
                                          f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases",
                                          {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                                           "metadata": {"name": self.lease, "namespace": NS},
                                           "spec": {"holderIdentity": self.lease, "leaseDurationSeconds": 40,
                                                    "renewTime": microtime()}})
            if code in (200, 201):
                self.latest = json.loads(data)
                return
            sleep = min(2 * sleep, 7.0)
            stop.wait(sleep)

    def retry_update(self, slot):
        """retryUpdateLease: up to 5 PUTs; a conflict re-reads the Lease; from the second failure
        on, closeAllConns."""
        for i in range(5):
            if stop.is_set():
                return False
            lease = dict(self.latest)
            lease["spec"] = {**lease.get("spec", {}), "renewTime": microtime()}
            code, data = self.request(slot, "heartbeat", "PUT", self.base_path(), lease)
            if code == 200:
                self.latest = json.loads(data)
                return True
            if code == 409:
                self.ensure(slot)
                continue
            if i > 0:
                self.log("close-all")
                self.close_all()
        return False

    def heartbeat_loop(self):
        slot = [None]
        self.latest = None
        while not stop.is_set():
            if self.latest is None or not self.retry_update(slot):
                self.ensure(slot)
                self.retry_update(slot)
            stop.wait(10.0 * (1 + random.uniform(0, 0.04)))

    def get_loop(self):
        slot = [None]
        while not stop.is_set():
            t = time.monotonic()
            self.request(slot, "get", "GET", self.base_path())
            stop.wait(max(0.0, 2.0 - (time.monotonic() - t)))

    def watch_loop(self):
        rv, backoff = None, 0.8
        while not stop.is_set():
            slot = [None]
            if rv is None:
                code, data = self.request(slot, "list", "GET", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases")
                if code != 200:
                    stop.wait(backoff)
                    backoff = min(backoff * 2, 30.0)
                    continue
                rv = json.loads(data)["metadata"]["resourceVersion"]
            c = self.new_conn(timeout=45.0)
            t0 = time.monotonic()
            try:
                c.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases?watch=1&resourceVersion={rv}"
                          f"&allowWatchBookmarks=true&timeoutSeconds=300",
                          headers={"Host": "kubernetes", "Accept": "application/json", "User-Agent": "drill-kubelet"})
                r = c.getresponse()
                if r.status != 200:
                    r.read()
                    self.log("watch-start", ok=False, code=r.status, ms=round((time.monotonic() - t0) * 1000))
                    raise OSError(f"watch answered {r.status}")
                self.log("watch-start", ok=True, rv=rv)
                while not stop.is_set():
                    line = r.readline()
                    if not line:
                        break
                    ev = json.loads(line)
                    if ev.get("type") == "ERROR":
                        self.log("watch-expired", code=ev.get("object", {}).get("code"))
                        rv = None
                        break
                    rv = ev["object"]["metadata"]["resourceVersion"]
                    backoff = 0.8
                    if ev.get("type") != "BOOKMARK":
                        self.log("watch-event", rv=rv)
                self.log("watch-end", ok=True)
            except (OSError, http.client.HTTPException, ValueError, KeyError, TypeError, AttributeError) as e:
                # AttributeError among them: the heartbeat's closeAllConns closed this connection
                # while http.client read it; the watch resumes like any other ended one
                self.log("watch-end", ok=False, err=f"{type(e).__name__}: {e}"[:160])
            finally:
                self.drop(c)
            stop.wait(backoff)
            backoff = min(backoff * 2, 30.0)


def owner(pid, roots):
    """The balancer a process belongs to: its pid or a parent's is one the harness started."""
    for _ in range(4):
        if pid in roots:
            return roots[pid]
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
    return None


def sampler(spec):
    roots = {b["pid"]: b["name"] for b in spec["balancers"]}
    log = Log(f"{spec['logdir']}/{spec['node']}--sample.jsonl")
    peers = {f"{u['host']}:{u['port']}": u["name"] for u in spec["upstreams"]}
    while not stop.is_set():
        t0 = time.monotonic()
        conns = {}
        try:
            out = subprocess.run(["ss", "-tnpH", "state", "established"], capture_output=True, text=True,
                                 timeout=5).stdout
        except (OSError, subprocess.SubprocessError):
            out = ""
        for line in out.splitlines():
            f = line.split()
            if len(f) < 5:
                continue
            local, peer = f[2], f[3]
            up = peers.get(peer)
            if not up:
                continue
            for pid in {int(p) for p in re.findall(r"pid=(\d+)", line)}:
                name = owner(pid, roots)
                if name:
                    conns.setdefault(name, {}).setdefault(up, []).append(int(local.rsplit(":", 1)[1]))
        ups, probes = {}, {}
        for b in spec["balancers"]:
            try:
                if b.get("status") == "kprism":
                    with urllib.request.urlopen(f"http://127.0.0.1:{b['admin_port']}/status", timeout=1) as r:
                        st = json.load(r)
                    names = {f"{u['host']}:{u['port']}": u["name"] for u in spec["upstreams"]}
                    ups[b["name"]] = sorted(names.get(u.get("address"), u.get("address"))
                                            for u in st.get("upstreams", []) if u.get("state") == "up")
                    probes[b["name"]] = [u["probe_local_port"] for u in st.get("upstreams", []) if u.get("probe_local_port")]
                elif b.get("status") == "haproxy":
                    with socket.socket(socket.AF_UNIX) as s:
                        s.settimeout(1)
                        s.connect(f"{b['workdir']}/stats.sock")
                        s.sendall(b"show stat\n")
                        data = b""
                        while chunk := s.recv(65536):
                            data += chunk
                    rows = csv.DictReader(io.StringIO(data.decode().lstrip("# ")))
                    ups[b["name"]] = sorted(r["svname"] for r in rows if r.get("pxname") == "be"
                                            and r.get("status", "").startswith("UP")
                                            and r.get("svname") not in ("FRONTEND", "BACKEND"))
            except (OSError, ValueError):
                ups[b["name"]] = None
        log("sample", conns=conns, up=ups, probes=probes)
        stop.wait(max(0.05, 1.0 - (time.monotonic() - t0)))


def main():
    spec = json.load(open(sys.argv[1]))
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    deadline = time.monotonic() + spec["deadline_s"]
    threads = [threading.Thread(target=sampler, args=(spec,), daemon=True)]
    for b in spec["balancers"] if spec.get("http1", True) else []:
        c = Client(spec, b)
        threads += [threading.Thread(target=f, daemon=True) for f in (c.heartbeat_loop, c.get_loop, c.watch_loop)]
    for t in threads:
        t.start()
    while not stop.is_set() and time.monotonic() < deadline:
        stop.wait(0.5)
    stop.set()


if __name__ == "__main__":
    main()
