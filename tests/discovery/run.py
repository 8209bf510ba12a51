#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Discovery against the real kprism and the Go kube-apiserver stand-ins, whose lease
endpoint reconciler keeps the default/kubernetes EndpointSlice. See tests/discovery/README.md.

Usage: run.py KPRISM_BIN APISERVER_BIN [--only a,b,...]
Cases: f discovery off; a an apiserver added then one removed, under load; b the snapshot written,
then used at a start with the API unreachable; c corrupt snapshots ignored; e a discovered address
that fails readiness never used, also failing open, nor kept in the snapshot; g IPv6; d the slices
briefly list nothing; o kprism's own listener and (by default) loopback, link-local and multicast
addresses refused; p snapshot members never checked get no client connection, failing open or
without a client certificate; q a hostname endpoint beside discovery; y a configured endpoint's zone
against the slices'; z zones from the slices.
Prints `discovery: ok/FAIL/info:` lines and last `discovery: N passed, M failed`; exit 1 on a failure.

The stand-ins of one discovery test share one port on 127.0.0.11-14 (the slice is built from the
first port subset only). They run --anonymous-auth, so that a kprism with a client certificate of a
foreign CA passes its /readyz checks as system:anonymous while its list of the slices is forbidden:
that is how these tests keep the API unreachable for discovery while the apiservers serve."""

import argparse
import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "scenarios"), os.path.join(HERE, "..", "faults")]

from faultlib import cleanup  # noqa: E402
from faultlib.procs import free_port, wait_until  # noqa: E402
from faultlib.report import Report  # noqa: E402
import balancers  # noqa: E402
import cluster as clu  # noqa: E402
import load as ld  # noqa: E402

report = Report(prefix="discovery")
ok, fail, info, check = report.ok, report.fail, report.info, report.check

ADDRS = ["127.0.0.11", "127.0.0.12", "127.0.0.13", "127.0.0.14"]
UNREADY = "127.0.0.15"  # a stand-in on its own store with etcd lost: /readyz fails
NOBODY = "127.0.0.19"  # nothing listens there
ADDRS2 = ["127.0.0.21", "127.0.0.22", "127.0.0.23"]  # cases j and k: a store of their own
SLICES = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
SELECTOR = "?labelSelector=kubernetes.io%2Fservice-name%3Dkubernetes"
# Stand-in timings: the brief's quick ones; a shutdown that fails /readyz 2 s before it stops
# accepting, then answers 429 Retry-After (as scenario 1a), so that a graceful removal fails nothing.
STANDIN_FLAGS = ["--endpoint-lease-ttl", "3s", "--endpoint-reconcile-interval", "1s", "--watch-bookmark-interval", "2s",
                 "--etcd-request-timeout", "1s", "--anonymous-auth", "--log-connections",
                 "--shutdown-delay-duration", "2s", "--shutdown-send-retry-after"]
KPRISM_FLAGS = ["--health-interval", "1s", "--health-timeout", "800ms", "--health-fast-interval", "300ms",
                "--drain-timeout", "5s", "--health-new-connection-interval", "0"]
# The stand-ins are on loopback, which discovery refuses unless discovery.allowed_cidrs lists it.
# Left out for a kprism from before the key, so that the suite shows what such a binary does.
ALLOW_LOOPBACK = ["--discovery-allowed-cidrs", "127.0.0.0/8,::1/128"]



def snap_addrs(doc):
    """The addresses a snapshot document lists: version 3's {"address", "zone"} objects, or the
    "ip:port" strings of versions 1 and 2."""
    return [e.get("address") if isinstance(e, dict) else e for e in doc.get("endpoints", [])]


def start_store(binary, d, name):
    path = f"{d}/{name}.sock"
    log = open(os.path.join(d, f"{name}.log"), "w")
    p = subprocess.Popen([binary, "store", "--listen", f"unix:{path}"], stdout=log, stderr=log)
    cleanup.register(name, lambda: clu._kill(p))
    if not wait_until(lambda: os.path.exists(path), 10):
        raise RuntimeError(f"{name} did not start")
    return path


class Plane:
    """The store, the stand-ins a1-a3 (a4 started by case a) on one port, the admin client; and
    what Kprism() needs of a cluster (endpoints, by_addr, pki)."""

    def __init__(self, binary, d):
        self.binary, self.d = binary, d
        self.pki = clu.Pki(d, extra_ips=[ADDRS[3], UNREADY, "::1", *ADDRS2])
        self.ctx = ld.tls_context(self.pki)
        self.store = start_store(binary, d, "store")
        self.port = clu.shared_port(ADDRS + [UNREADY])
        self.servers = [clu.Apiserver(binary, d, self.pki, i + 1, addr=a, port=self.port) for i, a in enumerate(ADDRS)]
        for s in self.servers[:3]:
            s.start(*STANDIN_FLAGS)
        self.foreign = self._foreign_pem()

    def _foreign_pem(self):
        """A client certificate of another CA: /readyz passes as anonymous, the list is forbidden."""
        d = os.path.join(self.d, "foreign")
        os.mkdir(d)
        return clu.Pki(d).kubelet_pem

    @property
    def endpoints(self):
        return [s.endpoint for s in self.servers[:3]]

    def by_addr(self):
        return {s.endpoint: s.name for s in self.servers}

    def running(self):
        return [s for s in self.servers if s.proc is not None and s.proc.poll() is None]

    def api(self, method, path, body=None, via=None):
        """(status, decoded body) of one admin request to a running stand-in (via, or the first)."""
        s = via or self.running()[0]
        host = s.addr
        c = http.client.HTTPSConnection(host, s.port, context=self.ctx, timeout=5)
        try:
            c.request(method, path, json.dumps(body) if body is not None else None,
                      {"Content-Type": "application/json"} if body is not None else {})
            r = c.getresponse()
            data = r.read()
        finally:
            c.close()
        try:
            return r.status, json.loads(data) if data else None
        except ValueError:
            return r.status, data

    def slice_endpoints(self):
        """{endpoint} of the default/kubernetes slice now."""
        st, doc = self.api("GET", f"{SLICES}/kubernetes")
        if st != 200:
            return set()
        port = doc["ports"][0]["port"] if doc.get("ports") else 0
        return {f"{e['addresses'][0]}:{port}" for e in doc.get("endpoints") or []}

    def wait_slice(self, want, seconds=15):
        return wait_until(lambda: self.slice_endpoints() == set(want), seconds, 0.1)

    def post_slice(self, name, address_type, endpoints, port, ready=True, extra=None, via=None):
        eps = [{"addresses": [a], "conditions": {"ready": ready}} for a in endpoints] + list(extra or [])
        body = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": name, "namespace": "default", "labels": {"kubernetes.io/service-name": "kubernetes"}},
                "addressType": address_type, "endpoints": eps,
                "ports": [{"name": "https", "protocol": "TCP", "port": port}]}
        st, doc = self.api("POST", SLICES, body, via)
        if st != 201:
            raise RuntimeError(f"POST slice {name}: {st} {doc}")

    def delete_slice(self, name, via=None):
        return self.api("DELETE", f"{SLICES}/{name}", via=via)[0]


class Node:
    """One kprism with discovery flags; its log, status, metrics and upstreams by address."""

    def __init__(self, run, tag, static, discovery=True, cert=None, snapshot=None, extra=(), allow_loopback=True):
        self.run, self.tag = run, tag
        self.snapshot = snapshot if snapshot is not None else os.path.join(run.d, f"{tag}-snapshot", "discovery.json")
        try:
            os.makedirs(os.path.dirname(self.snapshot), exist_ok=True)
        except OSError:
            pass  # a test of a snapshot path that cannot be written
        flags = KPRISM_FLAGS + ["--discovery-snapshot-file", self.snapshot] + (["--enable-discovery"] if discovery else [])
        if allow_loopback and run.knows_allow_list:
            flags += ALLOW_LOOPBACK
        self.k = balancers.Kprism(run.d, tag, run.args.kprism, run.pl, cert or run.pl.pki.kubelet_pem,
                                  flags + list(extra), endpoints=static)
        self.port = self.k.port
        if not wait_until(lambda: self.status() is not None or self.k.proc.poll() is not None, 10, 0.05) \
                or self.k.proc.poll() is not None:
            raise RuntimeError(f"kprism {tag} did not start: {self.log()[-1500:]}")

    def status(self):
        return self.k.status()

    def ups(self):
        """{address: upstream entry} from /status."""
        return {u["address"]: u for u in (self.status() or {}).get("upstreams", [])}

    def discovery(self):
        return (self.status() or {}).get("discovery") or {}

    def log(self):
        with open(self.k.log_path, errors="replace") as f:
            return f.read()

    def count(self, msg):
        return self.log().count(f'msg="{msg}')

    def metric(self, name, label=""):
        """Sum of the samples of `name` whose labels contain `label`."""
        total = 0.0
        for line in self.k.metrics().splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                if label in line:
                    total += float(line.rsplit(" ", 1)[1])
        return total

    def wait_ups(self, want, seconds=15):
        """Until /status lists exactly `want` ({address: (source, state)}; state None: any)."""
        def good():
            u = self.ups()
            return set(u) == set(want) and all(u[a].get("source") == s and (st is None or u[a].get("state") == st)
                                                for a, (s, st) in want.items())
        return wait_until(good, seconds, 0.1)

    def brief(self):
        return {a: (u.get("source"), u.get("state")) for a, u in self.ups().items()}

    def stop(self):
        p = self.k.proc
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        return p.returncode


def _answer(c, path, headers):
    """One GET on connection c: (status or error name, X-Standin-Name)."""
    try:
        c.request("GET", path, headers=headers)
        r = c.getresponse()
        r.read()
        return (r.status, r.getheader("X-Standin-Name", ""))
    except (OSError, http.client.HTTPException) as e:
        return (type(e).__name__, "")


def get_through(ctx, port, n=10, path="/version"):
    """n GETs on new connections through kprism: [(status or error name, X-Standin-Name)]."""
    out = []
    for _ in range(n):
        c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=5)
        try:
            out.append(_answer(c, path, {"Connection": "close"}))
        finally:
            c.close()
    return out


def held_gets(ctx, port, n=12, path="/version"):
    """n connections opened at once through kprism, one GET on each while all are open: who answered."""
    conns, out = [], []
    try:
        for _ in range(n):
            conns.append(http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=5))
            conns[-1].connect()
        for c in conns:
            out.append(_answer(c, path, {}))
    finally:
        for c in conns:
            c.close()
    return out


def load_failures(lo):
    rows = [r for r in lo.log.rows if r[1] in ("keepalive", "newconn", "holder") and r[2] != "retried"]
    bad = [r for r in rows if r[2] in ("fail", "error")]
    return len(bad), len(rows), bad[:5]


class Run:
    def __init__(self, args):
        self.args = args
        self.d = tempfile.mkdtemp(prefix="kprism-discovery-")
        self.pl = Plane(args.apiserver, self.d)
        self.a1, self.a2, self.a3, self.a4 = self.pl.servers
        if not self.pl.wait_slice(self.pl.endpoints):
            raise RuntimeError(f"the slice does not list a1-a3: {self.pl.slice_endpoints()}")
        self.rv = ld.create_target(self.pl.ctx, self.a1)
        self.store2 = None
        usage = subprocess.run([args.kprism, "--help"], capture_output=True, text=True).stdout
        self.knows_allow_list = "--discovery-allowed-cidrs" in usage

    def second_store(self):
        """A store of its own for stand-ins that must not enter the default/kubernetes slice."""
        if not self.store2:
            self.store2 = start_store(self.args.apiserver, self.d, "store2")
        return self.store2

    def all_ready(self, servers):
        return {s.endpoint: ("discovered", "up") for s in servers}

    # f: discovery off behaves as before and asks nothing of discovery.k8s.io.
    def case_f(self):
        logs = {s.name: os.path.getsize(s.log_path) for s in self.pl.running()}
        n = Node(self, "f", self.pl.endpoints, discovery=False)
        want = {e: ("static", "up") for e in self.pl.endpoints}
        check(n.wait_ups(want, 15), "f: discovery off: /status lists the static list, every source static, all up",
              str(n.brief()))
        lo = ld.Load(self.pl.ctx, n.port, requesters=2, holders=6)
        lo.start(self.rv)
        wait_until(lambda: len(lo.log.rows) > 60, 15, 0.2)
        lo.finish()
        bad, total, sample = load_failures(lo)
        check(bad == 0 and total > 0, f"f: no failed request ({bad} of {total})", str(sample))
        disc = n.discovery()
        check(disc.get("enabled") is False and disc.get("state") == "off",
              f"f: /status discovery enabled=false state=off ({disc.get('enabled')}, {disc.get('state')})")
        check(n.metric("kprism_discovery_lists_total") == 0, "f: kprism_discovery_lists_total 0")
        n.stop()
        check(not os.path.exists(n.snapshot), "f: no snapshot written with discovery off")
        hits = []
        for s in self.pl.running():
            with open(s.log_path, errors="replace") as f:
                f.seek(logs[s.name])
                hits += [line.strip() for line in f if "path=/apis/discovery.k8s.io" in line]
        check(not hits, f"f: no request to /apis/discovery.k8s.io reached any apiserver ({len(hits)})",
              "; ".join(hits[:3]))
        said = [line for line in n.log().splitlines() if re.search(r'msg="[^"]*discovery', line)]
        check(not said, "f: kprism logs no message about discovery", "; ".join(said)[:300])

    # a: a fourth apiserver added, then a discovered one removed, three nodes under load.
    def case_a(self):
        a1, a2, a3, a4 = self.a1, self.a2, self.a3, self.a4
        nodes = [Node(self, f"a-node{i}", [a1.endpoint]) for i in range(3)]
        want = {a1.endpoint: ("static", "up"), **self.all_ready([a2, a3])}
        for n in nodes:
            check(n.wait_ups(want, 15), f"a: {n.tag} has a1 static and a2, a3 discovered, all up", str(n.brief()))
        disc = nodes[0].discovery()
        check(disc.get("state") == "watching" and disc.get("lists", 0) >= 1 and disc.get("endpoints") == 3,
              f"a: /status discovery: watching, lists>=1, endpoints 3 ({disc.get('state')}, {disc.get('lists')}, "
              f"{disc.get('endpoints')})")
        loads = [ld.Load(self.pl.ctx, n.port, requesters=2, holders=8) for n in nodes]
        for lo in loads:
            lo.start(self.rv)
        wait_until(lambda: all(all(lo.holder_server) for lo in loads), 15, 0.2)
        t0 = time.monotonic()
        a4.start(*STANDIN_FLAGS)
        want4 = {**want, **self.all_ready([a4])}
        for n in nodes:
            got = n.wait_ups(want4, 15)
            check(got, f"a: {n.tag} has a4 discovered and up {time.monotonic() - t0:.1f} s after it started (<= 15 s)",
                  str(n.brief()))
        for n in nodes:
            check(n.count("discovery: endpoint discovered; checked before use") >= 1 and a4.endpoint in n.log(),
                  f"a: {n.tag} logs a4 discovered")
        m = nodes[0]
        check(m.metric("kprism_discovery_endpoints") == 4 and
              m.metric("kprism_upstream_source", f'upstream="{a4.endpoint}",source="discovered"') == 1 and
              m.metric("kprism_upstream_source", f'upstream="{a1.endpoint}",source="static"') == 1 and
              m.metric("kprism_discovery_lists_total") >= 1 and m.metric("kprism_discovery_watch_events_total") >= 1,
              "a: metrics: kprism_discovery_endpoints 4, kprism_upstream_source a4 discovered and a1 static, lists and "
              "watch events counted", "\n".join(l for l in m.k.metrics().splitlines()
                                                  if l.startswith(("kprism_discovery", "kprism_upstream_source"))))
        t1 = time.monotonic()
        a2.terminate()
        want2 = {a1.endpoint: ("static", "up"), **self.all_ready([a3, a4])}
        for n in nodes:
            got = n.wait_ups(want2, 15)
            check(got, f"a: {n.tag} no longer lists a2 {time.monotonic() - t1:.1f} s after its SIGTERM (<= 15 s)",
                  str(n.brief()))
            left = [line for line in n.log().splitlines() if "endpoint left the slices" in line]
            check(len(left) == 1 and a2.endpoint in left[0], f"a: {n.tag} logs a2 leaving once ({len(left)})",
                  "; ".join(left))
        a2.wait_exit(30)
        wait_until(lambda: all(sum(lo.holder_server.count(x) for x in ("", a2.name)) == 0 for lo in loads), 10, 0.2)
        time.sleep(1)  # a last second of load after a2 is gone: the requests polled above end in it
        for lo in loads:
            lo.finish()
        for n, lo in zip(nodes, loads):
            bad, total, sample = load_failures(lo)
            check(bad == 0 and total > 0, f"a: {n.tag}: no failed request while a4 came and a2 left ({bad} of {total})",
                  str(sample))
            info(f"a: {n.tag}: {sum(1 for r in lo.log.rows if r[2] == 'retried')} GETs retried on a new connection, "
                 f"{sum(1 for r in lo.log.rows if r[2] == '429')} answered 429")
        out = subprocess.run([self.args.kprism, "status", "--health-port", str(nodes[0].k.admin)],
                             capture_output=True, text=True, timeout=10).stdout
        lines = out.splitlines()
        check(any("SOURCE" in line for line in lines) and
              any(a4.endpoint in line and "discovered" in line for line in lines) and
              any(a1.endpoint in line and "static" in line for line in lines),
              "a: kprism status shows a SOURCE column: a1 static, a4 discovered", out[:600])
        snap = nodes[0].snapshot
        try:
            doc = json.load(open(snap))
        except (OSError, ValueError) as e:
            doc = {"error": str(e)}
        got = set(snap_addrs(doc))
        check({a3.endpoint, a4.endpoint} <= got <= {a1.endpoint, a3.endpoint, a4.endpoint},
              f"a: the snapshot lists a3 and a4 (a1 optional: static), not a2, after the changes ({doc.get('endpoints')})")
        for n in nodes:
            n.stop()
        # Back to a1-a3 for the next cases.
        a2.start(*STANDIN_FLAGS)
        a4.terminate()
        a4.wait_exit(30)
        if not self.pl.wait_slice(self.pl.endpoints):
            raise RuntimeError(f"the slice did not return to a1-a3: {self.pl.slice_endpoints()}")

    # b: the snapshot written, then a start with the static list dead and the API unreachable.
    def case_b(self):
        ends = self.pl.endpoints
        w = Node(self, "b-writer", [self.a1.endpoint])
        path = w.snapshot
        # Members are written as they pass their first check: wait until a2 and a3 are in.
        def holds_members():
            try:
                return set(ends[1:]) <= set(snap_addrs(json.load(open(path))))
            except (OSError, ValueError):
                return False
        wrote = wait_until(lambda: (w.discovery().get("snapshot") or {}).get("state") == "written" and holds_members(),
                           15, 0.1)
        check(wrote, "b: with discovery on kprism writes its snapshot (/status snapshot.state=written)",
              str(w.discovery().get("snapshot")))
        try:
            doc = json.load(open(path))
        except (OSError, ValueError) as e:
            doc = {"error": str(e)}
        ca = hashlib.sha256(open(self.pl.pki.ca, "rb").read()).hexdigest()
        listed = set(snap_addrs(doc))
        check(doc.get("kind") == "kprism-discovery-snapshot" and doc.get("version") == 3 and doc.get("ca_sha256") == ca
              and abs(doc.get("written_unix", 0) - time.time()) < 60 and set(ends[1:]) <= listed <= set(ends),
              "b: the snapshot file: kind, version 3, ca_sha256 of the CA file, written_unix now, a2 and a3 "
              "(a1 optional: static)", json.dumps(doc))
        ends = sorted(listed) or ends
        others = [f for f in os.listdir(os.path.dirname(path)) if f != os.path.basename(path)]
        check(not others, f"b: nothing else left in the snapshot's directory (no temporary file): {others}")
        w.stop()
        dead = f"{NOBODY}:{self.pl.port}"
        # The API unreachable for discovery: a foreign client certificate (checks pass as anonymous,
        # the list is forbidden), and the static list is an address where nothing listens.
        n = Node(self, "b-unreachable", [dead], cert=self.pl.foreign, snapshot=path)
        want = {dead: ("static", None), **{e: ("snapshot", "up") for e in ends}}
        check(n.wait_ups(want, 15), "b: static list dead, API unreachable: a1-a3 from the snapshot, source=snapshot, "
              "checked and up", str(n.brief()))
        snap = n.discovery().get("snapshot") or {}
        check(snap.get("state") == "loaded" and isinstance(snap.get("age_seconds"), (int, float))
              and 0 <= snap["age_seconds"] < 120,
              f"b: /status discovery.snapshot.state=loaded, age_seconds set ({snap.get('state')}, {snap.get('age_seconds')})")
        check(n.count("discovery snapshot loaded") == 1, "b: one log line \"discovery snapshot loaded\"")
        age = n.metric("kprism_discovery_snapshot_age_seconds")
        check(0 <= age < 120, f"b: kprism_discovery_snapshot_age_seconds {age}")
        got = get_through(self.pl.ctx, n.port, 9)
        served = {who for st, who in got if st == 200}
        check(all(st == 200 for st, _ in got) and served <= {"a1", "a2", "a3"} and served,
              f"b: requests served through the snapshot's upstreams ({got})")
        check(wait_until(lambda: n.discovery().get("errors", 0) >= 1, 10, 0.1),
              f"b: the list is refused meanwhile (discovery errors {n.discovery().get('errors')}, "
              f"last_error {n.discovery().get('last_error')!r})")
        forb = n.count("discovery: forbidden; apply packaging/kubernetes/kprism-discovery-rbac.yaml")
        check(forb == 1, f"b: the 403 logged once per episode as \"discovery: forbidden; ...\" ({forb})")
        check(n.brief() == {**{dead: ("static", n.brief().get(dead, (None, None))[1])},
                            **{e: ("snapshot", "up") for e in ends}},
              "b: still source=snapshot after the failed lists", str(n.brief()))
        n.stop()
        # The API reachable: the first list replaces the snapshot's entries.
        n = Node(self, "b-reachable", [dead], snapshot=path)
        want = {dead: ("static", None), **{e: ("discovered", "up") for e in self.pl.endpoints}}
        check(n.wait_ups(want, 15), "b: static list dead, API reachable: the first list through a snapshot upstream "
              "turns a1-a3 into source=discovered", str(n.brief()))
        check(n.count("discovery snapshot loaded") == 1, "b: (reachable) the snapshot was loaded first")
        n.stop()
        self.snapshot_path = path
        # A snapshot that cannot be written: one warning, state failed, discovery and service go on.
        blocker = os.path.join(self.d, "b-not-a-dir")
        open(blocker, "w").close()
        n = Node(self, "b-unwritable", [self.a1.endpoint], snapshot=os.path.join(blocker, "discovery.json"))
        want = {self.a1.endpoint: ("static", "up"), **self.all_ready([self.a2, self.a3])}
        failed = wait_until(lambda: (n.discovery().get("snapshot") or {}).get("state") == "failed", 10, 0.1)
        snap = n.discovery().get("snapshot") or {}
        check(failed and n.wait_ups(want, 10) and n.count("discovery snapshot not written") == 1 and n.k.proc.poll() is None,
              f"b: a snapshot path that cannot be written: one warning, snapshot.state=failed, discovery goes on "
              f"({snap.get('state')}: {snap.get('detail')})", str(n.brief()))
        got = get_through(self.pl.ctx, n.port, 3)
        check(all(st == 200 for st, _ in got), f"b: (unwritable) serving ({got})")
        n.stop()

    # c: corrupt, foreign, old and future snapshots: one warning each, start from the static list.
    def case_c(self):
        a1, a2 = self.a1, self.a2
        ca = hashlib.sha256(open(self.pl.pki.ca, "rb").read()).hexdigest()
        now = int(time.time())

        def doc(**kw):
            d = {"kind": "kprism-discovery-snapshot", "version": 1, "written_unix": now - 10, "ca_sha256": ca,
                 "endpoints": [a2.endpoint]}
            d.update(kw)
            return json.dumps(d).encode()

        good = doc()
        variants = {
            "truncated": good[:len(good) // 2],
            "garbage": os.urandom(300),
            "empty": b"",
            "wrong-kind": doc(kind="kubeprism-snapshot"),
            "wrong-version": doc(version=0),
            "newer-version": doc(version=4, endpoints=[{"address": a2.endpoint, "zone": "b"}]),
            "foreign-ca": doc(ca_sha256=hashlib.sha256(b"another CA").hexdigest()),
            "too-old": doc(written_unix=now - 7200),
            "future": doc(written_unix=now + 3600),
            "too-big": doc(endpoints=[a2.endpoint] + [f"10.0.{i // 250}.{i % 250 + 1}:6443" for i in range(4000)]),
            "deep": b"[" * 1000 + b"]" * 1000,
            "unreadable": None,  # a directory at the path
        }
        nodes = {}
        for name, data in variants.items():
            path = os.path.join(self.d, f"c-{name}", "discovery.json")
            os.makedirs(os.path.dirname(path))
            if data is None:
                os.mkdir(path)
            else:
                with open(path, "wb") as f:
                    f.write(data)
            nodes[name] = Node(self, f"c-{name}", [a1.endpoint], cert=self.pl.foreign, snapshot=path,
                               extra=["--discovery-snapshot-max-age", "1h"])
        want = {a1.endpoint: ("static", "up")}
        for name, n in nodes.items():
            up = n.wait_ups(want, 15)
            warned = wait_until(lambda: n.count("discovery snapshot ignored") >= 1, 5, 0.1)
            lines = [line for line in n.log().splitlines() if "discovery snapshot ignored" in line]
            snap = n.discovery().get("snapshot") or {}
            check(up and warned and len(lines) == 1 and snap.get("state") == "ignored" and n.k.proc.poll() is None,
                  f"c: {name}: one warning \"discovery snapshot ignored\", snapshot.state=ignored, serving from the static "
                  f"list alone", f"{n.brief()} lines={lines} snapshot={snap}")
            if lines:
                info(f"c: {name}: {lines[0][lines[0].find('msg='):][:200]}")
        missing = Node(self, "c-missing", [a1.endpoint], cert=self.pl.foreign,
                       snapshot=os.path.join(self.d, "c-missing", "discovery.json"))
        nodes["missing"] = missing
        state = wait_until(lambda: (missing.discovery().get("snapshot") or {}).get("state"), 10, 0.1)
        check(missing.wait_ups(want, 15) and state == "none" and missing.count("discovery snapshot ignored") == 0,
              f"c: missing: no snapshot yet is no warning (snapshot.state {state})", str(missing.brief()))
        for name, n in nodes.items():
            got = get_through(self.pl.ctx, n.port, 2)
            check(all(st == 200 and who == "a1" for st, who in got), f"c: {name}: requests served by a1 ({got})")
            n.stop()

    # e: a discovered address whose /readyz fails, and endpoints the slice marks not ready.
    def case_e(self):
        a1, a2, a3 = self.a1, self.a2, self.a3
        bad = clu.Apiserver(self.args.apiserver, self.d, self.pl.pki, 5, addr=UNREADY, port=self.pl.port,
                            store=self.second_store())
        bad.start(*STANDIN_FLAGS)
        bad.control("/etcd/lose")
        self.pl.post_slice("kprism-test-unready", "IPv4", [UNREADY], self.pl.port)
        self.pl.post_slice("kprism-test-notready", "IPv4", ["127.0.0.16"], self.pl.port, ready=False,
                           extra=[{"addresses": ["127.0.0.17"], "conditions": {"ready": True, "terminating": True}},
                                  {"addresses": ["127.0.0.18"]}])  # no conditions: ready
        self.pl.post_slice("kprism-test-fqdn", "FQDN", ["localhost"], self.pl.port)
        n = Node(self, "e", [a1.endpoint])
        try:
            bep = bad.endpoint
            absent = f"127.0.0.18:{self.pl.port}"
            want = {a1.endpoint: ("static", "up"), **self.all_ready([a2, a3]), bep: ("discovered", None),
                    absent: ("discovered", None)}
            listed = n.wait_ups(want, 15)
            check(listed, "e: the unready address is listed (discovered) beside a1-a3, and 127.0.0.18 without "
                  "conditions (ready); the not-ready, terminating and FQDN endpoints are not admitted", str(n.brief()))
            checked = wait_until(lambda: n.ups().get(bep, {}).get("last_result") not in (None, ""), 10, 0.1)
            check(checked and n.ups().get(bep, {}).get("state") != "up",
                  f"e: it is checked and not up ({n.ups().get(bep, {}).get('state')}, "
                  f"{n.ups().get(bep, {}).get('last_result')})")
            got = held_gets(self.pl.ctx, n.port, 12)
            check(all(who != bad.name for _, who in got), f"e: with others up, no request reaches it ({got})")
            for s in (a1, a2, a3):
                s.control("/etcd/lose")
            down = wait_until(lambda: (n.status() or {}).get("fail_open") is True, 15, 0.1)
            check(down, "e: every other upstream down (etcd lost on a1-a3): kprism fails open", str(n.brief()))
            got = get_through(self.pl.ctx, n.port, 12) + held_gets(self.pl.ctx, n.port, 12)
            reached = [who for _, who in got if who]
            check(reached and bad.name not in reached,
                  f"e: failing open, requests reach a1-a3 and never the unchecked discovered one ({got})")
            conns = n.metric("kprism_upstream_connections_total", f'upstream="{bep}"')
            errs = n.metric("kprism_upstream_connect_errors_total", f'upstream="{bep}"')
            check(conns == 0 and errs == 0, f"e: its connection counters stay 0 (connections {conns}, connect errors {errs})")
            with open(bad.log_path, errors="replace") as f:
                paths = {m.group(1) for m in re.finditer(r"event=request path=(\S+)", f.read())}
            check(paths <= {"/readyz"}, f"e: it received nothing but /readyz checks ({sorted(paths)})")
            for name in ("127.0.0.16", "127.0.0.17", "localhost"):
                check(not any(a.startswith(name) for a in n.ups()), f"e: {name} never admitted")
            wrote = wait_until(lambda: os.path.exists(n.snapshot) and
                               {a2.endpoint, a3.endpoint} <= set(snap_addrs(json.load(open(n.snapshot)))), 10, 0.1)
            listed = snap_addrs(json.load(open(n.snapshot))) if os.path.exists(n.snapshot) else None
            check(wrote and bep not in listed and absent not in listed,
                  f"e: the snapshot keeps a2, a3 (checked) and neither never-ready address ({listed})")
        finally:
            n.stop()
            for s in (a1, a2, a3):
                s.control("/etcd/restore")
            for name in ("kprism-test-unready", "kprism-test-notready", "kprism-test-fqdn"):
                wait_until(lambda: self.pl.delete_slice(name) in (200, 404), 10, 0.2)
            bad.terminate()
            bad.wait_exit(30)
        if not self.pl.wait_slice(self.pl.endpoints):
            raise RuntimeError(f"the slice did not return to a1-a3: {self.pl.slice_endpoints()}")

    # g: an IPv6 slice (its own port) for a stand-in on [::1].
    def case_g(self):
        a1, a2, a3 = self.a1, self.a2, self.a3
        port = free_port("::1")
        v6 = clu.Apiserver(self.args.apiserver, self.d, self.pl.pki, 6, addr="::1", port=port, store=self.second_store())
        v6.start(*STANDIN_FLAGS)
        self.pl.post_slice("kprism-test-v6", "IPv6", ["::1"], v6.port)
        # least-connections: the 16 held connections are spread four to each (at random, none on v6 one
        # run in a hundred).
        n = Node(self, "g", [a1.endpoint], extra=["--policy", "least-connections"])
        try:
            want = {a1.endpoint: ("static", "up"), **self.all_ready([a2, a3, v6])}
            check(n.wait_ups(want, 15), f"g: [::1]:{v6.port} from an IPv6 slice (its own port) discovered and up",
                  str(n.brief()))
            got = held_gets(self.pl.ctx, n.port, 16)
            used = n.metric("kprism_upstream_connections_total", f'upstream="{v6.endpoint}"')
            check(any(who == v6.name for _, who in got) and used > 0,
                  f"g: requests through kprism reach the IPv6 apiserver (connections {used}; {got})")
            wrote = wait_until(lambda: v6.endpoint in (open(n.snapshot).read() if os.path.exists(n.snapshot) else ""),
                               10, 0.1)
            check(wrote, f"g: the snapshot holds {v6.endpoint}")
            again = Node(self, "g-snapshot", [a1.endpoint], cert=self.pl.foreign, snapshot=n.snapshot)
            ok6 = again.wait_ups({a1.endpoint: ("static", "up"), **{s.endpoint: ("snapshot", "up") for s in (a2, a3, v6)}}, 15)
            check(ok6, "g: read back (the list forbidden), [::1] is a snapshot upstream and up", str(again.brief()))
            again.stop()
        finally:
            n.stop()
            wait_until(lambda: self.pl.delete_slice("kprism-test-v6") in (200, 404), 10, 0.2)
            v6.terminate()
            v6.wait_exit(30)

    # h: the apiserver that carries kprism's watch hangs (SIGSTOP): kprism moves the watch off it
    # once its checks take it down, and still follows the slices.
    def case_h(self):
        a1, a4 = self.a1, self.a4
        n = Node(self, "h", [a1.endpoint])
        stopped = None
        try:
            want = {a1.endpoint: ("static", "up"), **self.all_ready([self.a2, self.a3])}
            check(n.wait_ups(want, 15) and wait_until(lambda: n.discovery().get("state") == "watching", 10, 0.1),
                  "h: watching, a2 and a3 discovered", str(n.brief()))
            via = n.discovery().get("via")
            stopped = next(s for s in self.pl.servers if s.endpoint == via)
            stopped.proc.send_signal(signal.SIGSTOP)
            t0 = time.monotonic()
            moved = wait_until(lambda: n.discovery().get("state") == "watching" and n.discovery().get("via") not in (via, None, ""),
                               15, 0.1)
            check(moved, f"h: the watch moved off the hung {stopped.name} in {time.monotonic() - t0:.1f} s "
                  f"(via {n.discovery().get('via')})", str(n.discovery()))
            a4.start(*STANDIN_FLAGS)
            t1 = time.monotonic()
            seen = wait_until(lambda: n.ups().get(a4.endpoint, {}).get("state") == "up", 15, 0.1)
            check(seen, f"h: a4 discovered and up {time.monotonic() - t1:.1f} s after it started, with "
                  f"{stopped.name} hung", str(n.brief()))
        finally:
            if stopped:
                stopped.proc.send_signal(signal.SIGCONT)
            n.stop()
            if a4.proc is not None and a4.proc.poll() is None:
                a4.terminate()
                a4.wait_exit(30)
        if not self.pl.wait_slice(self.pl.endpoints, 20):
            raise RuntimeError(f"the slice did not return to a1-a3: {self.pl.slice_endpoints()}")

    # i: more endpoints than the limit of 32 discovered: the first kept, one warning.
    def case_i(self):
        many = [f"127.0.1.{i}" for i in range(1, 41)]
        self.pl.post_slice("kprism-test-many", "IPv4", many, self.pl.port)
        n = Node(self, "i", [self.a1.endpoint])
        try:
            full = wait_until(lambda: len(n.ups()) == 32 and n.discovery().get("endpoints", 0) >= 43 and
                              all(n.ups().get(s.endpoint, {}).get("state") == "up" for s in (self.a1, self.a2, self.a3)),
                              15, 0.1)
            ups = n.ups()
            check(full, f"i: 43 endpoints in the slices, 32 upstreams admitted ({len(ups)}; discovery endpoints "
                  f"{n.discovery().get('endpoints')})")
            check(all(ups.get(s.endpoint, {}).get("state") == "up" for s in (self.a1, self.a2, self.a3)),
                  "i: a1-a3 among them and up", str({a: ups[a].get("state") for a in list(ups)[:4]}))
            warns = n.count("discovery: more endpoints than the limit; keeping the first")
            check(warns == 1, f"i: warned once ({warns})")
            check(n.count("not added: every slot is held") == 0, "i: no endpoint lost for want of a slot")
            self.pl.delete_slice("kprism-test-many")
            want = {self.a1.endpoint: ("static", "up"), **self.all_ready([self.a2, self.a3])}
            check(n.wait_ups(want, 15), "i: the slice deleted: the 29 extra drain, a1-a3 stay", str(len(n.ups())))
        finally:
            n.stop()
            wait_until(lambda: self.pl.delete_slice("kprism-test-many") in (200, 404), 10, 0.2)

    def plane2(self):
        """A store of its own with a short history (30 events) and stand-ins on 127.0.0.21-22 whose
        slice changes only when the test changes it (reconcile and lease TTL 1 h, no bookmarks)."""
        if getattr(self, "p2", None):
            return self.p2
        log = open(os.path.join(self.d, "store3.log"), "w")
        path = f"{self.d}/store3.sock"
        p = subprocess.Popen([self.args.apiserver, "store", "--listen", f"unix:{path}", "--history", "30"],
                             stdout=log, stderr=log)
        cleanup.register("store3", lambda: clu._kill(p))
        if not wait_until(lambda: os.path.exists(path), 10):
            raise RuntimeError("store3 did not start")
        port = clu.shared_port(ADDRS2)
        flags = [f for f in STANDIN_FLAGS] + ["--endpoint-reconcile-interval", "1h", "--endpoint-lease-ttl", "1h",
                                              "--watch-bookmark-interval", "1h"]
        servers = [clu.Apiserver(self.args.apiserver, self.d, self.pl.pki, 21 + i, addr=a, port=port, store=path)
                   for i, a in enumerate(ADDRS2[:2])]
        for sv in servers:
            sv.start(*flags)
        ends = {sv.endpoint for sv in servers}
        if not wait_until(lambda: self._slice_via(servers[0]) == ends, 15, 0.1):
            raise RuntimeError(f"store3's slice does not list {ends}")
        self.p2 = (servers, port, flags)
        return self.p2

    def _slice_via(self, server):
        st, doc = self.pl.api("GET", f"{SLICES}/kubernetes", via=server)
        if st != 200:
            return set()
        port = doc["ports"][0]["port"] if doc.get("ports") else 0
        return {f"{e['addresses'][0]}:{port}" for e in doc.get("endpoints") or []}

    # j: the watch's resourceVersion expires while it is down: 410, a new list, nothing drained.
    def case_j(self):
        (c1, c2), _, _ = self.plane2()
        n = Node(self, "j", [c1.endpoint])
        try:
            want = {c1.endpoint: ("static", "up"), c2.endpoint: ("discovered", "up")}
            check(n.wait_ups(want, 15) and wait_until(lambda: n.discovery().get("state") == "watching", 10, 0.1),
                  "j: c1 static, c2 discovered, watching", str(n.brief()))
            rv0 = n.discovery().get("resource_version")
            via0 = next((sv for sv in (c1, c2) if sv.endpoint == n.discovery().get("via")), None)
            held = via0 is not None and wait_until(lambda: (via0.state() or {}).get("watches", 0) >= 1, 10, 0.05)
            check(held, f"j: the watch is held at {via0.name if via0 else None} before the writes")
            for i in range(40):  # more writes than the store keeps: the watch's resourceVersion expires
                st, _ = self.pl.api("POST", "/api/v1/namespaces/default/configmaps",
                                    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"j-{i:03d}"}}, via=c1)
                if st != 201:
                    raise RuntimeError(f"configmap j-{i}: {st}")
            # The store may expire the open watch itself (40 writes within one of its 200 ms progress
            # ticks); else end it: etcd lost on its apiserver ends its watches, and kprism watches
            # again through the other from rv0.
            time.sleep(0.5)
            d = n.discovery()
            via = next((sv for sv in (c1, c2) if sv.endpoint == d.get("via")), None)
            if d.get("lists", 0) < 2 and d.get("errors", 0) == 0 and via is not None:
                via.control("/etcd/lose")
            else:
                info(f"j: the open watch itself was expired by the store (state {d.get('state')}, "
                     f"last_error {d.get('last_error')!r})")
            wait_until(lambda: n.discovery().get("lists", 0) >= 2, 15, 0.1)
            d = n.discovery()
            relisted = d.get("relists", 0) >= 1 and d.get("lists", 0) >= 2
            check(relisted, f"j: the watch from an expired resourceVersion ({rv0}) got 410 and kprism listed again "
                  f"(relists {d.get('relists')}, lists {d.get('lists')}, last_error {d.get('last_error')!r})")
            failed = [line[line.find("msg="):] for line in n.log().splitlines() if "discovery: request failed" in line]
            check(n.count("discovery: resource version too old; listing again") >= 1, "j: logged the relist",
                  "; ".join(failed)[:400])
            for sv in (c1, c2):
                sv.control("/etcd/restore")
            check(wait_until(lambda: n.discovery().get("state") == "watching" and
                             n.discovery().get("resource_version") not in (None, "", rv0), 15, 0.1),
                  f"j: watching again from a new resourceVersion ({n.discovery().get('resource_version')})")
            check(n.wait_ups(want, 15) and n.count("discovery: endpoint left the slices") == 0,
                  "j: the upstreams are as before; nothing drained", str(n.brief()))
        finally:
            n.stop()
            for sv in (c1, c2):
                sv.control("/etcd/restore")

    # k: the slices replace every member at once with one not yet checked; the static list is dead.
    def case_k(self):
        (c1, c2), port, flags = self.plane2()
        c3 = clu.Apiserver(self.args.apiserver, self.d, self.pl.pki, 23, addr=ADDRS2[2], port=port, store=self.second_store())
        c3.start(*flags)
        ld.create_target(self.pl.ctx, c3)
        rv = ld.create_target(self.pl.ctx, c1)
        dead = f"{NOBODY}:{port}"
        # With the static list dead kprism reaches the API only through a snapshot's members.
        snap = os.path.join(self.d, "k-snapshot", "discovery.json")
        os.makedirs(os.path.dirname(snap))
        with open(snap, "w") as f:
            json.dump({"kind": "kprism-discovery-snapshot", "version": 1, "written_unix": int(time.time()),
                       "ca_sha256": hashlib.sha256(open(self.pl.pki.ca, "rb").read()).hexdigest(),
                       "endpoints": [c1.endpoint, c2.endpoint]}, f)
        n = Node(self, "k", [dead], snapshot=snap)
        try:
            want = {dead: ("static", None), c1.endpoint: ("discovered", "up"), c2.endpoint: ("discovered", "up")}
            check(n.wait_ups(want, 15), "k: static list dead; c1, c2 discovered and up", str(n.brief()))
            lo = ld.Load(self.pl.ctx, n.port, requesters=2, holders=8)
            lo.start(rv)
            wait_until(lambda: all(lo.holder_server), 15, 0.2)
            seen, stop = [], threading.Event()

            def sample():
                while not stop.is_set():
                    seen.append(sum(1 for u in n.ups().values() if u.get("state") == "up"))
                    stop.wait(0.05)
            th = threading.Thread(target=sample, daemon=True)
            th.start()
            body = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                    "metadata": {"name": "kubernetes-replacement", "namespace": "default",
                                 "labels": {"kubernetes.io/service-name": "kubernetes"}},
                    "addressType": "IPv4", "endpoints": [{"addresses": [c3.addr], "conditions": {"ready": True}}],
                    "ports": [{"name": "https", "protocol": "TCP", "port": port}]}
            check(self.pl.delete_slice("kubernetes", via=c1) == 200, "k: the slice listing c1, c2 deleted")
            st, _ = self.pl.api("POST", SLICES, body, via=c1)
            check(st == 201, f"k: a slice listing only c3 created at once ({st})")
            want3 = {dead: ("static", None), c3.endpoint: ("discovered", "up")}
            t0 = time.monotonic()
            done = n.wait_ups(want3, 20)
            check(done, f"k: c1 and c2 removed once c3 was up ({time.monotonic() - t0:.1f} s)", str(n.brief()))
            drained = wait_until(lambda: set(lo.holder_server) == {c3.name}, 15, 0.2)
            check(drained, f"k: the long-lived connections drained to c3 ({sorted(set(lo.holder_server))})")
            waits = [line for line in n.log().splitlines() if "removal waits until an upstream that stays is up" in line]
            check(len(waits) == 2, f"k: both removals waited for c3 (\"removal waits\" lines: {len(waits)})",
                  "; ".join(waits))
            time.sleep(1)
            stop.set()
            th.join(5)
            lo.finish()
            check(seen and min(seen) >= 1, f"k: some upstream up in every 50 ms sample ({len(seen)} samples, "
                  f"fewest up {min(seen) if seen else None})")
            bad, total, sample = load_failures(lo)
            check(bad == 0 and total > 0, f"k: no failed request while every member was replaced ({bad} of {total})",
                  str(sample))
        finally:
            n.stop()
            c3.terminate()
            c3.wait_exit(30)

    # l: reloads move addresses between the static list and the discovered set without draining.
    def case_l(self):
        a1, a2, a3 = self.a1, self.a2, self.a3
        dead = f"{NOBODY}:{self.pl.port}"
        cfg = os.path.join(self.d, "l.toml")

        def write(eps):
            with open(cfg + ".new", "w") as f:
                f.write("endpoints = [" + ", ".join(f'"{e}"' for e in eps) + "]\n")
            os.rename(cfg + ".new", cfg)
        write([a1.endpoint])
        n = Node(self, "l", [], extra=["--config", cfg])
        lo = None
        try:
            want = {a1.endpoint: ("static", "up"), **self.all_ready([a2, a3])}
            check(n.wait_ups(want, 15), "l: from the file a1 static; a2, a3 discovered", str(n.brief()))
            lo = ld.Load(self.pl.ctx, n.port, requesters=2, holders=8)
            lo.start(self.rv)
            wait_until(lambda: all(lo.holder_server), 15, 0.2)
            steps = [
                ([a1.endpoint, a2.endpoint], {a1.endpoint: ("static", "up"), a2.endpoint: ("static", "up"),
                                              a3.endpoint: ("discovered", "up")}, "a2 added to the file: static"),
                ([a1.endpoint], want, "a2 out of the file again: discovered, as it is in the slice"),
                ([a2.endpoint], {a1.endpoint: ("discovered", "up"), a2.endpoint: ("static", "up"),
                                 a3.endpoint: ("discovered", "up")}, "a1 out of the file, a2 in: a1 discovered"),
                ([a2.endpoint, dead], {a1.endpoint: ("discovered", "up"), a2.endpoint: ("static", "up"),
                                       a3.endpoint: ("discovered", "up"), dead: ("static", None)},
                 "an address in no slice added to the file: static"),
                ([a1.endpoint], want, "back to a1 alone: the dead one removed, a2 discovered"),
            ]
            for eps, w, what in steps:
                gen = (n.status() or {}).get("reload", {}).get("generation", 0)
                write(eps)
                n.k.proc.send_signal(signal.SIGHUP)
                done = wait_until(lambda: (n.status() or {}).get("reload", {}).get("generation", 0) > gen, 10, 0.05)
                res = (n.status() or {}).get("reload", {})
                check(done and res.get("last_result") == "ok" and n.wait_ups(w, 10),
                      f"l: reload: {what}", f"{res.get('last_result')} {res.get('last_error')} {n.brief()}")
            removed = [line[line.find("msg="):] for line in n.log().splitlines()
                       if "connections drain" in line]
            check(len(removed) == 1 and dead in removed[0],
                  f"l: only the dead address was removed by the reloads ({len(removed)})", "; ".join(removed))
            time.sleep(1)
            lo.finish()
            bad, total, sample = load_failures(lo)
            check(bad == 0 and total > 0, f"l: no failed request over five reloads ({bad} of {total})", str(sample))
        finally:
            if lo:
                lo.finish()
            n.stop()

    # m: more than 32 labelled slices: a list or watch past the bound fails and is retried, the
    # upstreams stay; once there are 32 or fewer again, every node follows the slices again.
    def case_m(self):
        a1 = self.a1
        w = Node(self, "m-watching", [a1.endpoint])
        n = None
        names = [f"kprism-test-m{i:02d}" for i in range(40)]
        try:
            want = {a1.endpoint: ("static", "up"), **self.all_ready([self.a2, self.a3])}
            check(w.wait_ups(want, 15), "m: a node watching: a1 static, a2, a3 discovered", str(w.brief()))
            for i, name in enumerate(names):
                self.pl.post_slice(name, "IPv4", [f"127.0.2.{i + 1}"], self.pl.port)
            failing = wait_until(lambda: w.discovery().get("errors", 0) >= 1, 10, 0.1)
            d = w.discovery()
            check(failing and all(w.ups().get(s.endpoint, {}).get("state") == "up" for s in (a1, self.a2, self.a3)),
                  f"m: 41 slices: the watching node's watch fails ({d.get('last_error')!r}), a1-a3 stay up",
                  str(len(w.ups())))
            n = Node(self, "m-new", [a1.endpoint])
            refused = wait_until(lambda: n.discovery().get("errors", 0) >= 1, 10, 0.1)
            d = n.discovery()
            check(refused and d.get("lists", 0) == 0 and n.wait_ups({a1.endpoint: ("static", "up")}, 10),
                  f"m: a node started now: its list fails ({d.get('last_error')!r}), it serves from a1",
                  str(n.brief()))
            for name in names:
                self.pl.delete_slice(name)
            t0 = time.monotonic()
            back_n = n.wait_ups(want, 15)
            check(back_n, f"m: the extra slices deleted: the new node lists and has a2, a3 "
                  f"({time.monotonic() - t0:.1f} s)", str(n.brief()))
            back_w = w.wait_ups(want, max(5, 15 - (time.monotonic() - t0)))
            d = w.discovery()
            check(back_w, f"m: and the watching node is back to a1-a3 ({time.monotonic() - t0:.1f} s; state "
                  f"{d.get('state')}, errors {d.get('errors')}, lists {d.get('lists')}, last_error {d.get('last_error')!r})",
                  f"{len(w.ups())} upstreams")
        finally:
            w.stop()
            if n:
                n.stop()
            for name in names:
                self.pl.delete_slice(name)

    # n: a healthy apiserver that leaves the slices: its connections are closed after drain_timeout.
    def case_n(self):
        a4 = clu.Apiserver(self.args.apiserver, self.d, self.pl.pki, 4, addr=ADDRS[3], port=self.pl.port,
                           store=self.second_store())
        a4.start(*STANDIN_FLAGS)
        ld.create_target(self.pl.ctx, a4)
        self.pl.post_slice("kprism-test-n", "IPv4", [a4.addr], self.pl.port)
        # least-connections: every one of the four gets some of the 12 long-lived connections (at random,
        # none on a4 one time in 32).
        n = Node(self, "n", [self.a1.endpoint], extra=["--policy", "least-connections"])
        lo = None
        try:
            want = {self.a1.endpoint: ("static", "up"), **self.all_ready([self.a2, self.a3, a4])}
            check(n.wait_ups(want, 15), "n: a4 (healthy, its own store) from an extra slice, discovered and up",
                  str(n.brief()))
            lo = ld.Load(self.pl.ctx, n.port, requesters=2, holders=12)
            lo.start(self.rv)
            on4 = wait_until(lambda: all(lo.holder_server) and a4.name in lo.holder_server, 15, 0.2)
            check(on4, f"n: long-lived connections on a4 ({lo.holder_server.count(a4.name)} of 12)")
            t0 = time.monotonic()
            self.pl.delete_slice("kprism-test-n")
            gone = wait_until(lambda: a4.endpoint not in n.ups(), 10, 0.05)
            t1 = time.monotonic()
            check(gone, f"n: a4 leaves /status {t1 - t0:.1f} s after its slice is deleted")
            left = [line[line.find("msg="):] for line in n.log().splitlines() if "endpoint left the slices" in line]
            check(len(left) == 1 and "drain_timeout=5s" in left[0], "n: one \"left the slices\" line, drain_timeout 5s",
                  "; ".join(left))
            pid = n.k.pid

            def held():
                return ld.upstream_connections([pid], [a4.endpoint])[pid][a4.endpoint]
            before = held()
            closed = wait_until(lambda: held() == 0, 12, 0.1)
            t2 = time.monotonic()
            check(before > 0 and closed and 4.0 <= t2 - t1 <= 7.5,
                  f"n: kprism's {before} connections to a4 closed {t2 - t1:.1f} s after its removal (drain_timeout 5 s)")
            moved = wait_until(lambda: a4.name not in lo.holder_server and "" not in lo.holder_server, 10, 0.2)
            check(moved, "n: every long-lived connection served elsewhere since", str(lo.holder_server))
            lo.finish()
            bad, total, sample = load_failures(lo)
            retried = sum(1 for r in lo.log.rows if r[2] == "retried")
            info(f"n: {bad} of {total} requests failed, {retried} retried on a new connection (the drain closes "
                 f"connections at drain_timeout, between requests or not){' ' + str(sample) if bad else ''}")
        finally:
            if lo:
                lo.finish()
            n.stop()
            wait_until(lambda: self.pl.delete_slice("kprism-test-n") in (200, 404), 10, 0.2)
            a4.terminate()
            a4.wait_exit(30)

    # d: the slices list nothing for a few seconds; the stand-ins restarted with a reconcile so
    # slow that the slice stays deleted until the test puts it back.
    def case_d(self):
        servers = [self.a1, self.a2, self.a3]
        for s in servers:
            s.terminate()
        for s in servers:
            s.wait_exit(30)
        for s in servers:
            s.start(*STANDIN_FLAGS, "--endpoint-reconcile-interval", "1h", "--endpoint-lease-ttl", "1h")
        if not self.pl.wait_slice(self.pl.endpoints):
            raise RuntimeError(f"the slice does not list a1-a3 after the restart: {self.pl.slice_endpoints()}")
        st, saved = self.pl.api("GET", f"{SLICES}/kubernetes")
        n = Node(self, "d", [self.a1.endpoint])
        want = {self.a1.endpoint: ("static", "up"), **self.all_ready(servers[1:])}
        check(n.wait_ups(want, 15), "d: a1 static, a2 and a3 discovered, up", str(n.brief()))
        lo = ld.Load(self.pl.ctx, n.port, requesters=2, holders=8)
        lo.start(self.rv)
        wait_until(lambda: all(lo.holder_server), 15, 0.2)
        seen = []
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                seen.append(n.brief())
                stop.wait(0.1)
        th = threading.Thread(target=sample, daemon=True)
        th.start()
        events0 = n.discovery().get("events", 0)
        check(self.pl.delete_slice("kubernetes") == 200, "d: the default/kubernetes slice deleted")
        warned = wait_until(lambda: n.count("discovery: the slices list no endpoint; keeping every upstream") >= 1, 10, 0.1)
        check(warned, "d: kprism warns that the slices list no endpoint")
        time.sleep(3)  # the empty episode lasts: kprism must hold on to every upstream all along
        body = {k: v for k, v in saved.items() if k != "metadata"}
        body["metadata"] = {"name": "kubernetes", "namespace": "default", "labels": saved["metadata"].get("labels")}
        st, _ = self.pl.api("POST", SLICES, body)
        check(st == 201, f"d: the slice put back ({st})")
        back = wait_until(lambda: n.discovery().get("events", 0) >= events0 + 2, 10, 0.1)
        time.sleep(1)
        stop.set()
        th.join(5)
        lo.finish()
        check(back, f"d: kprism saw the slice go and come back (events {events0} -> {n.discovery().get('events')})")
        changed = [s for s in seen if s != want]
        check(seen and not changed, f"d: every upstream kept and up throughout ({len(seen)} samples, "
              f"{len(changed)} different)", str(changed[:2]))
        warns = n.count("discovery: the slices list no endpoint; keeping every upstream")
        check(warns == 1, f"d: warned once for the episode ({warns})")
        left = n.count("discovery: endpoint left the slices")
        check(left == 0, f"d: nothing drained ({left} \"left the slices\" lines)")
        bad, total, sample = load_failures(lo)
        check(bad == 0 and total > 0, f"d: no failed request ({bad} of {total})", str(sample))
        # A second episode warns again: the warning is per episode, not per process.
        check(self.pl.delete_slice("kubernetes") == 200, "d: deleted again")
        again = wait_until(lambda: n.count("discovery: the slices list no endpoint; keeping every upstream") == 2, 10, 0.1)
        check(again, "d: a second episode warns a second time")
        n.stop()

    # o: discovery refuses kprism's own listener (even with loopback allowed), and by default every
    # loopback, link-local and multicast address; one warning per address.
    def case_o(self):
        a1, a2, a3 = self.a1, self.a2, self.a3
        n = Node(self, "o", [a1.endpoint])
        plain = None
        try:
            me = f"127.0.0.1:{n.port}"
            self.pl.post_slice("kprism-test-self", "IPv4", ["127.0.0.1"], n.port)
            want = {a1.endpoint: ("static", "up"), **self.all_ready([a2, a3])}
            warned = wait_until(lambda: n.count("discovery: address refused") >= 1, 15, 0.1)
            lines = [ln for ln in n.log().splitlines() if "discovery: address refused" in ln]
            check(warned and len(lines) == 1 and "slice=kprism-test-self" in lines[0] and f"address={me}" in lines[0]
                  and "kprism listens there" in lines[0],
                  f"o: a slice naming kprism's own listener {me}: one warning naming the slice and the address", str(lines))
            stays = not wait_until(lambda: me in n.ups(), 4, 0.1)
            check(stays and n.wait_ups(want, 10), f"o: {me} never becomes an upstream ({n.brief()})")
            got = get_through(self.pl.ctx, n.port, 6)
            check(all(st == 200 for st, _ in got), f"o: kprism serves as before ({got})")
            check(n.count("discovery: address refused") == 1, "o: still one warning after the watch went on")
            # Its slice deleted, then created again: the address is named anew, and warned about anew.
            check(wait_until(lambda: self.pl.delete_slice("kprism-test-self") == 200, 10, 0.2), "o: the slice deleted")
            self.pl.post_slice("kprism-test-self", "IPv4", ["127.0.0.1"], n.port)
            again = wait_until(lambda: n.count("discovery: address refused") == 2, 15, 0.1)
            check(again, "o: named again after its slice was deleted: one more warning",
                  str(n.count("discovery: address refused")))
            # Without discovery.allowed_cidrs: loopback, link-local and multicast addresses are refused.
            # off-host: refused by kprism's address rules and never connected (the check below)
            self.pl.post_slice("kprism-test-refused", "IPv4", ["169.254.169.254", "224.0.0.1"], 80)
            plain = Node(self, "o-default", [a1.endpoint], allow_loopback=False)
            alone = not wait_until(lambda: len(plain.ups()) > 1, 6, 0.1)
            check(alone and plain.wait_ups({a1.endpoint: ("static", "up")}, 10),
                  f"o: by default no loopback, link-local or multicast address is admitted ({plain.brief()})")
            log = plain.log()
            for addr, why in ((a2.endpoint, "loopback address"),
                              ("169.254.169.254:80", "link-local address"),  # off-host: as above
                              ("224.0.0.1:80", "multicast address"), (me, "loopback address")):
                hits = [ln for ln in log.splitlines() if "discovery: address refused" in ln and f"address={addr} " in ln]
                check(len(hits) == 1 and why in hits[0], f"o: {addr} refused once as {why!r} ({hits})")
        finally:
            n.stop()
            if plain:
                plain.stop()
            for name in ("kprism-test-self", "kprism-test-refused"):
                wait_until(lambda: self.pl.delete_slice(name) in (200, 404), 10, 0.2)

    # p: snapshot members that never passed a check in this process get no client connection,
    # failing open or during a TLS bootstrap (no client certificate yet); configured ones do.
    def case_p(self):
        a1, a2, a3 = self.a1, self.a2, self.a3
        ca = hashlib.sha256(open(self.pl.pki.ca, "rb").read()).hexdigest()
        bad = clu.Apiserver(self.args.apiserver, self.d, self.pl.pki, 7, addr=UNREADY, port=self.pl.port,
                            store=self.second_store())
        bad.start(*STANDIN_FLAGS)
        bad.control("/etcd/lose")

        def snapshot(tag, endpoints, version):
            path = os.path.join(self.d, f"{tag}-snapshot", "discovery.json")
            os.makedirs(os.path.dirname(path))
            with open(path, "w") as f:
                json.dump({"kind": "kprism-discovery-snapshot", "version": version, "written_unix": int(time.time()),
                           "ca_sha256": ca, "endpoints": endpoints}, f)
            return path

        nodes = []
        try:
            # Failing open: the static list dead, the API unreachable (a foreign certificate), the
            # snapshot's one member serving but never ready; a version 1 snapshot (members
            # unchecked) and a version 2 one (members checked by an earlier process) alike.
            dead = f"{NOBODY}:{self.pl.port}"
            for version in (1, 2):
                n = Node(self, f"p-open{version}", [dead], cert=self.pl.foreign,
                         snapshot=snapshot(f"p-open{version}", [bad.endpoint], version))
                nodes.append(n)
                listed = n.wait_ups({dead: ("static", None), bad.endpoint: ("snapshot", None)}, 10)
                checked = wait_until(lambda: n.ups().get(bad.endpoint, {}).get("last_result") not in (None, ""), 10, 0.1)
                failing = wait_until(lambda: (n.status() or {}).get("fail_open") is True, 10, 0.1)
                got = get_through(self.pl.ctx, n.port, 8)
                conns = n.metric("kprism_upstream_connections_total", f'upstream="{bad.endpoint}"')
                check(listed and checked and failing and all(who != bad.name for _, who in got) and conns == 0,
                      f"p: failing open, a member of a version {version} snapshot never ready gets no client "
                      f"connection (connections {conns}; {got}; {n.brief()})")
            # TLS bootstrap: no client certificate yet; a1 configured, a2 and a3 from the snapshot.
            missing = os.path.join(self.d, "p-boot-no-cert.pem")
            b = Node(self, "p-boot", [a1.endpoint], cert=missing, snapshot=snapshot("p-boot", [a2.endpoint, a3.endpoint], 1))
            nodes.append(b)
            listed = b.wait_ups({a1.endpoint: ("static", None), **{s.endpoint: ("snapshot", None) for s in (a2, a3)}}, 10)
            got = get_through(self.pl.ctx, b.port, 12) + held_gets(self.pl.ctx, b.port, 8)
            reached = {who for _, who in got}
            check(listed and reached == {a1.name},
                  f"p: no client certificate yet: connections go to the configured a1 only, never to the snapshot's "
                  f"a2, a3 ({sorted(reached)}; {b.brief()})")
        finally:
            for n in nodes:
                n.stop()
            bad.terminate()
            bad.wait_exit(30)


    # q: a hostname endpoint beside discovery. The name (served by tests/harness/dns_server.py,
    # "kubernetes", which the stand-ins' certificate carries) resolves to a1 and a dead address:
    # a1 is one upstream, the name's (static, named "kubernetes@ADDRESS:PORT"), not a second
    # discovered one; the dead address, in no slice, stays (the configured floor). The name gains
    # a2: it turns the name's, not drained. It loses a1, which the slices still list: a1 turns
    # discovered, not drained; the dead address leaves. Under load: no failed request.
    def case_q(self):
        a1, a2, a3 = self.a1, self.a2, self.a3
        port = self.pl.port
        dead = f"{NOBODY}:{port}"
        zone = os.path.join(self.d, "q-zone.json")

        def answer(addrs):
            with open(zone + ".new", "w") as f:
                json.dump({"kubernetes": {"A": addrs}}, f)
            os.rename(zone + ".new", zone)

        def named(ip):
            return f"kubernetes@{ip}:{port}"
        answer([a1.addr, NOBODY])
        dns_log = os.path.join(self.d, "q-dns.log")
        with open(dns_log, "w") as out:
            dns = subprocess.Popen(["/usr/bin/python3", os.path.join(HERE, "..", "harness", "dns_server.py"),
                                    "127.0.0.1", zone], stdout=out, stderr=out)
        cleanup.register("q-dns", lambda: (dns.poll() is None and (dns.kill(), dns.wait())))

        def listening():
            with open(dns_log) as f:
                m = re.search(r"dns: listening on (127\.0\.0\.1:\d+)", f.read())
            return m.group(1) if m else None
        servers = wait_until(listening, 10, 0.05)
        n = lo = None
        try:
            if not servers:
                raise RuntimeError(f"the DNS server did not start: {open(dns_log).read()[-500:]}")
            os.environ["KPRISM_TEST_DNS_SERVERS"] = servers  # kprism(8), ENVIRONMENT
            try:
                n = Node(self, "q", [f"kubernetes:{port}"], extra=["--resolve-interval", "1s"])
            finally:
                del os.environ["KPRISM_TEST_DNS_SERVERS"]
            want = {named(a1.addr): ("static", "up"), named(NOBODY): ("static", None),
                    a2.endpoint: ("discovered", "up"), a3.endpoint: ("discovered", "up")}
            check(n.wait_ups(want, 20),
                  "q: a1, resolved by the name and in the slice, is one upstream, the name's; the dead address "
                  "the name resolves to stays though no slice lists it; a2, a3 discovered", str(n.brief()))
            lo = ld.Load(self.pl.ctx, n.port, requesters=2, holders=8)
            lo.start(self.rv)
            wait_until(lambda: all(lo.holder_server), 15, 0.2)

            answer([a1.addr, a2.addr])
            want = {named(a1.addr): ("static", "up"), named(a2.addr): ("static", "up"), a3.endpoint: ("discovered", "up")}
            check(n.wait_ups(want, 15), "q: the name gains a2 (discovered): it turns the name's; the dead address leaves",
                  str(n.brief()))
            answer([a2.addr])
            want = {a1.endpoint: ("discovered", "up"), named(a2.addr): ("static", "up"), a3.endpoint: ("discovered", "up")}
            check(n.wait_ups(want, 15), "q: the name loses a1, which the slice lists: a1 discovered again", str(n.brief()))
            check(n.count("endpoint address no longer resolved; still discovered, so it stays") == 1,
                  "q: one \"still discovered, so it stays\" line (a1)")
            drained = [line[line.find("msg="):] for line in n.log().splitlines() if "connections drain" in line]
            check(len(drained) == 1 and named(NOBODY) in drained[0],
                  f"q: only the dead address was drained ({len(drained)})", "; ".join(drained))
            for s in (a1, a2, a3):
                got = n.metric("kprism_upstream_connections_total", f'upstream="{s.endpoint}"') + \
                    n.metric("kprism_upstream_connections_total", f'upstream="{named(s.addr)}"')
                check(got > 0, f"q: client connections reached {s.name} ({got:.0f})")
            check(n.metric("kprism_upstream_connections_total", f'upstream="{named(NOBODY)}"') == 0,
                  "q: no client connection went to the dead address (never up)")
            rows = len(lo.log.rows)  # some requests on the last state, then the tally
            wait_until(lambda: len(lo.log.rows) > rows + 20, 10, 0.1)
            lo.finish()
            bad, total, sample = load_failures(lo)
            check(bad == 0 and total > 0, f"q: no failed request while the answer changed ({bad} of {total})", str(sample))
        finally:
            if lo:
                lo.finish()
            if n:
                n.stop()
            dns.kill()
            dns.wait()

    # y: a configured endpoint's zone against the slices'. A --config file with zone = "b" names a1
    # with zone "a" and a4 without one. a4 shares the store (kprism's watch may go through it) on a
    # port above the shared one: the reconciled slice, made from the first port's subset, never
    # lists it. A slice giving a1 zone b: a1 keeps a, one "another zone" line. A slice giving a4
    # zone b: a4 (still configured) takes it and every new connection; that slice deleted, a4 is in
    # no slice and its zone is empty again. Hostile zones (70 characters for a3, "a b" for a2): one
    # warning each, used, without a zone.
    def case_y(self):
        a1, a2, a3 = self.a1, self.a2, self.a3

        def free_above(p):
            for q in range(p + 1, min(p + 2000, 65536)):
                with socket.socket() as sk:
                    try:
                        sk.bind((ADDRS[3], q))
                        return q
                    except OSError:
                        continue
            raise RuntimeError(f"no free port above {p} on {ADDRS[3]}")
        a4 = clu.Apiserver(self.args.apiserver, self.d, self.pl.pki, 4, addr=ADDRS[3],
                           port=free_above(self.pl.port))
        a4.start(*STANDIN_FLAGS)
        cfg = os.path.join(self.d, "y.toml")
        with open(cfg, "w") as f:
            f.write(f'zone = "b"\nendpoints = [\n  {{ address = "{a1.endpoint}", zone = "a" }},\n'
                    f'  "{a4.endpoint}",\n]\n')

        def zoned(addr, zone):
            return [{"addresses": [addr], "conditions": {"ready": True}, "zone": zone}]
        slices = ["kprism-test-y-a1", "kprism-test-y-a4", "kprism-test-y-bad"]
        n = Node(self, "y", [], extra=["--config", cfg])

        def zone(s):
            return n.ups().get(s.endpoint, {}).get("zone")

        def served(k=12):
            return {who for _, who in get_through(self.pl.ctx, n.port, k)}

        def lines(msg, s):
            return [line[line.find("msg="):] for line in n.log().splitlines()
                    if f'msg="{msg}' in line and f"upstream={s.endpoint} " in line + " "]

        def another_event():
            events = n.discovery().get("events", 0)
            return wait_until(lambda: n.discovery().get("events", 0) >= events + 1, 5, 0.1)  # a bookmark or another
        other = "discovery: the slices give another zone; the configured zone stays"
        changed = "discovery: endpoint zone changed"
        ignored = "discovery: endpoint zone ignored; the endpoint is used without a zone"
        try:
            want = {a1.endpoint: ("static", "up"), a4.endpoint: ("static", "up"), **self.all_ready([a2, a3])}
            check(n.wait_ups(want, 15) and zone(a1) == "a" and zone(a4) == "" and
                  self.pl.slice_endpoints() == set(self.pl.endpoints),
                  f"y: from the file a1 (zone a) and a4 (no zone) static; a2, a3 discovered; all up; the "
                  f"reconciled slice lists a1-a3 only ({[zone(s) for s in (a1, a2, a3, a4)]})",
                  f"{n.brief()} slice={self.pl.slice_endpoints()}")

            # (1) A slice gives the configured a1 zone b: the configured a stays, one line says so.
            self.pl.post_slice(slices[0], "IPv4", [], self.pl.port, extra=zoned(a1.addr, "b"))
            said = wait_until(lambda: lines(other, a1), 10, 0.1)
            check(said and zone(a1) == "a" and n.ups().get(a1.endpoint, {}).get("source") == "static" and
                  re.search(r"(?<![_\w])zone=a\b", said[0]) and "slices_zone=b" in said[0],
                  f"y: a slice gives the configured a1 (zone a) zone b: /status keeps a, the line names both "
                  f"({zone(a1)})", "; ".join(said or []))

            # (2) A slice gives the configured a4, which has no zone, zone b: it takes it, and with
            # zone = "b" every new connection goes to a4, the one upstream of zone b.
            self.pl.post_slice(slices[1], "IPv4", [], a4.port, extra=zoned(a4.addr, "b"))  # a4's port
            took = wait_until(lambda: zone(a4) == "b", 10, 0.1)
            check(took and n.ups().get(a4.endpoint, {}).get("source") == "static" and len(lines(changed, a4)) == 1,
                  f"y: a slice gives the configured a4 (no zone) zone b: /status shows b, still static, one "
                  f"\"endpoint zone changed\" ({zone(a4)})", str(n.brief()))
            got = served()
            check(got == {a4.name}, f"y: zone = \"b\": every new connection goes to a4 ({got})")
            ev = another_event()
            check(ev and zone(a1) == "a" and len(lines(other, a1)) == 1,
                  f"y: after more events a1 still zone a and the \"another zone\" line once ({len(lines(other, a1))})",
                  "; ".join(lines(other, a1)))

            # (3) a4 leaves the slices (still configured): it stays, static and up, its zone empty.
            self.pl.delete_slice(slices[1])
            lost = wait_until(lambda: zone(a4) == "", 10, 0.1)
            moved = lines(changed, a4)
            check(lost and n.wait_ups(want, 5) and len(moved) == 2 and "was=b" in moved[-1] and
                  a4.endpoint not in self.pl.slice_endpoints(),
                  f"y: a4 leaves the slices, still configured: it stays static and up, zone empty in /status "
                  f"({zone(a4)!r}), a second \"endpoint zone changed\" (was=b)", "; ".join(moved) + f" {n.brief()}")
            spread = wait_until(lambda: len(served(16) - {""}) >= 2, 10, 0.2)
            check(spread, f"y: no upstream of zone b left: new connections spread ({served()})")

            # (4) Hostile zones: 70 characters for a3, "a b" for a2. One warning each, no zone, used.
            self.pl.post_slice(slices[2], "IPv4", [], self.pl.port,
                               extra=zoned(a3.addr, "z" * 70) + zoned(a2.addr, "a b"))
            warned = wait_until(lambda: lines(ignored, a3) and lines(ignored, a2), 10, 0.1)
            ev = another_event()
            w3, w2 = lines(ignored, a3), lines(ignored, a2)
            check(warned and ev and len(w3) == 1 and "is 70 bytes, at most 63" in w3[0] and
                  len(w2) == 1 and "not a label value" in w2[0] and zone(a3) == "" and zone(a2) == "",
                  f"y: a 70-character zone (a3) and \"a b\" (a2): one warning each with the reason, no zone "
                  f"({zone(a3)!r}, {zone(a2)!r})", "; ".join(w3 + w2))
            seen = set()
            used = wait_until(lambda: seen.update(served(8)) or {a2.name, a3.name} <= seen, 15, 0.2)
            check(used and n.wait_ups(want, 5), f"y: a2 and a3 still up and taking new connections ({sorted(seen)})",
                  str(n.brief()))
            check(zone(a1) == "a" and len(lines(other, a1)) == 1,
                  f"y: at the end a1 still zone a, the \"another zone\" line still once ({len(lines(other, a1))})")
        finally:
            self._end_zone_case(n, slices, a4)

    def _end_zone_case(self, n, slices, a4):
        """The end of cases y and z: kprism stopped, their slices deleted, the fourth stand-in gone."""
        n.stop()
        for name in slices:
            wait_until(lambda: self.pl.delete_slice(name) in (200, 404), 10, 0.2)
        a4.terminate()
        a4.wait_exit(30)

    # z: zones from the slices. A node with --zone b sends new connections to the discovered ready
    # upstream of zone b, to the others while it is not ready; a zone that changes in a later event
    # changes the upstream's; an invalid zone is ignored with one warning, its endpoint still used.
    def case_z(self):
        a1, a2, a3 = self.a1, self.a2, self.a3
        a4 = clu.Apiserver(self.args.apiserver, self.d, self.pl.pki, 4, addr=ADDRS[3], port=self.pl.port,
                           store=self.second_store())
        a4.start(*STANDIN_FLAGS)
        ld.create_target(self.pl.ctx, a4)

        def zoned(addr, zone):
            return [{"addresses": [addr], "conditions": {"ready": True}, "zone": zone}]
        slices = ["kprism-test-zone-b", "kprism-test-zone-a", "kprism-test-zone-bad"]
        self.pl.post_slice(slices[0], "IPv4", [], self.pl.port, extra=zoned(a4.addr, "b"))
        n = Node(self, "z", [a1.endpoint], extra=["--zone", "b"])

        def zone(s):
            return n.ups().get(s.endpoint, {}).get("zone")

        def served(k=12):
            return {who for _, who in get_through(self.pl.ctx, n.port, k)}
        try:
            want = {a1.endpoint: ("static", "up"), **self.all_ready([a2, a3, a4])}
            check(n.wait_ups(want, 15) and wait_until(lambda: zone(a4) == "b", 5, 0.1),
                  f"z: a4 discovered with zone b from its slice, up; a1-a3 without a zone "
                  f"({[zone(s) for s in (a1, a2, a3, a4)]})", str(n.brief()))
            got = served()
            check(got == {a4.name}, f"z: zone b: every new connection goes to a4, the ready upstream of zone b ({got})")
            out = subprocess.run([self.args.kprism, "status", "--health-port", str(n.k.admin)],
                                 capture_output=True, text=True, timeout=10).stdout
            check(any(a4.endpoint in line and " b " in line for line in out.splitlines()),
                  "z: kprism status shows a4's zone b", out[:600])
            wrote = wait_until(lambda: os.path.exists(n.snapshot) and json.load(open(n.snapshot)).get("version") == 3 and
                               {"address": a4.endpoint, "zone": "b"} in json.load(open(n.snapshot)).get("endpoints", []),
                               10, 0.1)
            check(wrote, "z: the snapshot (version 3) holds a4 with zone b",
                  open(n.snapshot).read()[:400] if os.path.exists(n.snapshot) else "no file")

            # An invalid zone for a2 in a slice of its own: one warning, a2 kept, without a zone.
            self.pl.post_slice(slices[2], "IPv4", [], self.pl.port, extra=zoned(a2.addr, "not a zone!"))
            warned = wait_until(lambda: n.count("discovery: endpoint zone ignored") >= 1, 10, 0.1)
            events = n.discovery().get("events", 0)
            wait_until(lambda: n.discovery().get("events", 0) >= events + 1, 5, 0.1)  # a bookmark or another event
            lines = [line for line in n.log().splitlines() if "endpoint zone ignored" in line]
            check(warned and len(lines) == 1 and "not a label value" in lines[0] and a2.endpoint in lines[0] and
                  n.ups().get(a2.endpoint, {}).get("state") == "up" and zone(a2) == "",
                  "z: an invalid zone: one warning with the reason, the endpoint still up, without a zone",
                  "; ".join(lines))

            # a4's zone changes in a later event (a slice sorted first gives it zone a): no upstream of
            # zone b is left, so new connections spread; back to b when that slice goes.
            self.pl.post_slice(slices[1], "IPv4", [], self.pl.port, extra=zoned(a4.addr, "a"))
            changed = wait_until(lambda: zone(a4) == "a", 10, 0.1)
            spread = wait_until(lambda: len(served(16) - {""}) >= 2, 10, 0.2)
            check(changed and spread and n.count("discovery: endpoint zone changed") >= 1 and
                  n.ups().get(a4.endpoint, {}).get("source") == "discovered",
                  f"z: a4's zone changed to a by a later event, still the same upstream; connections spread "
                  f"({served()})")
            self.pl.delete_slice(slices[1])
            back = wait_until(lambda: zone(a4) == "b", 10, 0.1) and wait_until(lambda: served(6) == {a4.name}, 10, 0.2)
            check(back, f"z: its slice deleted, a4 is zone b again and takes every new connection ({zone(a4)})")

            # a4 not ready: new connections go to the other upstreams; back when it is ready again.
            a4.control("/etcd/lose")
            down = wait_until(lambda: n.ups().get(a4.endpoint, {}).get("state") == "down", 15, 0.1)
            got = served(16)
            check(down and a4.name not in got and got <= {a1.name, a2.name, a3.name} and len(got) >= 2,
                  f"z: a4 not ready: new connections fall back to the others ({got})", str(n.brief()))
            a4.control("/etcd/restore")
            up = wait_until(lambda: n.ups().get(a4.endpoint, {}).get("state") == "up", 15, 0.1)
            check(up and wait_until(lambda: served(6) == {a4.name}, 10, 0.2),
                  "z: a4 ready again: new connections go to it again")
        finally:
            self._end_zone_case(n, slices, a4)

CASES = "fabcieghlmnopqyzjkd"  # d last: it restarts the stand-ins


def where(e):
    """The innermost lines of this file in e's traceback: where a case stopped."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if os.path.abspath(f.filename) == os.path.abspath(__file__)]
    return " < ".join(f"line {f.lineno} {f.name}" for f in reversed(frames[-3:]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kprism")
    ap.add_argument("apiserver")
    ap.add_argument("--only", default=",".join(CASES))
    args = ap.parse_args()
    only = args.only.split(",")
    started = time.monotonic()
    r = None
    try:
        r = Run(args)
        ok("the stand-ins a1-a3 share one port and the slice lists the three")
        for c in CASES:
            if c in only:
                t = time.monotonic()
                try:
                    getattr(r, f"case_{c}")()
                except Exception as e:  # a case that cannot go on is one failure; the next runs
                    fail(f"{c}: stopped: {type(e).__name__}: {e} (at {where(e)})")
                info(f"case {c} took {time.monotonic() - t:.0f} s")
    except Exception as e:
        fail(f"setup: {type(e).__name__}: {e}")
    finally:
        cleanup.run_all()
    print(f"discovery: run took {time.monotonic() - started:.0f} s")
    if r is not None:
        if report.failed or os.environ.get("KPRISM_KEEP_LOGS"):
            print(f"discovery: logs kept in {r.d}")
        else:
            shutil.rmtree(r.d, ignore_errors=True)
    report.failure_summary()
    print(f"discovery: {report.passed} passed, {report.failed} failed")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
