#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""What discovery costs: kprism itself, and the apiserver that serves the watches.

Part 1, kprism: one store and three Go stand-ins (tests/apiserver, their defaults: endpoint
reconcile 10 s, bookmarks every minute) on 127.0.16.1-3, two kprism processes in front of them with
default health settings, one with --enable-discovery (it lists, then holds one watch of the
default/kubernetes EndpointSlices), one without. Once both have the three up and the first is
watching, both are measured over the same IDLE seconds (60): CPU (the sum of
/proc/PID/task/*/schedstat, ns) and RSS (VmRSS) at the start and the end.

Part 2, the apiserver: one more stand-in W on 127.0.16.9, --watch-progress-interval 1m (so that its
per-watch store stream is not woken five times a second: a real apiserver serves watches from its
watch cache, one etcd watch per resource). WATCHES (1000) clients, each as a kprism node does with
the kubelet's client certificate: a list of the slices on a new TLS connection, then a watch from
its resourceVersion with bookmarks on another. Measured on W's process (and apart, the store's):
CPU while idle before (BASE seconds, 20), CPU to start the watches (per watch: list + watch, full
TLS handshakes from this Python client), CPU while HOLD seconds (60) pass with every watch open
(above the idle rate), the RSS added per watch, and the CPU to send one change to every watch
(an extra slice created, then deleted: 2 x WATCHES events). Then extrapolated to 5000 nodes, 3
apiservers, each node's one watch on a random one (1667 per apiserver), kprism's watch
timeoutSeconds drawn from [300, 600) (a new watch per node every 450 s on average).

Usage: bench/discovery_cost.py --kprism BIN --apiserver build/kprism-apiserver [--watches 1000]
         [--idle 60] [--base 20] [--hold 60] [--keep]
`make bench-discovery` runs it. Prints progress on stderr and markdown on stdout. File descriptors:
each watch holds 4 (client, W, W's store stream both ends); the default 1000 fits the 20000 limit."""

import argparse
import asyncio
import json
import os
import resource
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests", "scenarios"), os.path.join(HERE, "..", "tests", "faults")]

from faultlib import cleanup  # noqa: E402
from faultlib.procs import rss_kib, schedstat_cpu_s, wait_until  # noqa: E402
import cluster as clu  # noqa: E402

ADDRS = ["127.0.16.1", "127.0.16.2", "127.0.16.3"]
W_ADDR = "127.0.16.9"
SLICES = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
SELECTOR = "labelSelector=kubernetes.io%2Fservice-name%3Dkubernetes"


def say(msg):
    print(f"discovery-cost: {msg}", file=sys.stderr, flush=True)


def cpu_s(pid):
    return schedstat_cpu_s(pid) or 0.0


def machine_busy():
    """(busy, total) jiffies of the whole machine, /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


class Kprism:
    def __init__(self, binary, d, tag, endpoints, pki, extra):
        self.admin = clu.free_port()
        self.port = clu.free_port()
        self.log = os.path.join(d, f"{tag}.log")
        out = open(self.log, "w")
        self.proc = subprocess.Popen([binary, "--endpoints", ",".join(endpoints), "--bind-port", str(self.port),
                                      "--health-port", str(self.admin), "--client-cert", pki.kubelet_pem,
                                      "--client-key", pki.kubelet_pem, "--ca-file", pki.ca, *extra],
                                     stdout=out, stderr=out)
        p = self.proc
        cleanup.register(tag, lambda: clu._kill(p))

    def get(self, path):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}{path}", timeout=2) as r:
                return r.read().decode()
        except OSError:
            return ""

    def status(self):
        try:
            return json.loads(self.get("/status"))
        except ValueError:
            return {}

    def metric(self, name):
        for line in self.get("/metrics").splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None



def part1(args, d, pki, servers):
    ends = [s.endpoint for s in servers]
    on = Kprism(args.kprism, d, "kprism-on", ends, pki,
                ["--enable-discovery", "--discovery-snapshot-file", os.path.join(d, "snap", "discovery.json"),
                 "--discovery-allowed-cidrs", "127.0.0.0/8"])  # the stand-ins are on loopback
    off = Kprism(args.kprism, d, "kprism-off", ends, pki, ["--discovery-snapshot-file", os.path.join(d, "snap-off.json")])
    os.makedirs(os.path.join(d, "snap"), exist_ok=True)

    def ready(k, disc):
        st = k.status()
        ups = [u for u in st.get("upstreams", []) if u.get("state") == "up"]
        return len(ups) == 3 and (not disc or (st.get("discovery") or {}).get("state") == "watching")
    if not wait_until(lambda: ready(on, True) and ready(off, False), 30, 0.2):
        raise RuntimeError(f"kprism not ready: on {on.status()} off {off.status()}")
    time.sleep(2)
    say(f"part 1: both kprism ready, measuring {args.idle} s idle")
    r0 = {k: rss_kib(k.proc.pid) for k in (on, off)}
    c0 = {k: cpu_s(k.proc.pid) for k in (on, off)}
    ev0 = on.metric("kprism_discovery_watch_events_total") or 0
    m0 = machine_busy()
    t0 = time.monotonic()
    time.sleep(args.idle)
    t1 = time.monotonic()
    c1 = {k: cpu_s(k.proc.pid) for k in (on, off)}
    r1 = {k: rss_kib(k.proc.pid) for k in (on, off)}
    m1 = machine_busy()
    ev1 = on.metric("kprism_discovery_watch_events_total") or 0
    disc = on.status().get("discovery") or {}
    dt = t1 - t0
    rows = []
    for label, k in (("discovery on", on), ("discovery off", off)):
        rows.append(f"| {label} | {(c1[k] - c0[k]) * 1000 / dt:.3f} | {r0[k] / 1024:.1f} | {r1[k] / 1024:.1f} |")
    busy = (m1[0] - m0[0]) / max(1, m1[1] - m0[1]) * 100
    out = [f"Part 1: kprism idle for {dt:.0f} s, default health settings, 3 stand-ins (machine {busy:.0f} % busy)", "",
           "| kprism | CPU ms/s | RSS MiB at start | RSS MiB at end |", "|---|---|---|---|", *rows, "",
           f"Discovery meanwhile: {ev1 - ev0:.0f} watch events (bookmarks), lists {disc.get('lists')}, "
           f"relists {disc.get('relists')}, errors {disc.get('errors')}, state {disc.get('state')}, via {disc.get('via')}."]
    on.proc.terminate()
    off.proc.terminate()
    on.proc.wait(15)
    off.proc.wait(15)
    return out


async def one_watch(ctx, host, port, rv_box, opened, seen, sem, stop):
    """List, then watch from the list's resourceVersion; counts ADDED/DELETED of bench-extra."""
    async with sem:
        r, w = await asyncio.open_connection(host, port, ssl=ctx, server_hostname=host)
        w.write(f"GET {SLICES}?{SELECTOR} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        data = await r.read()
        w.close()
        body = data.split(b"\r\n\r\n", 1)[1]
        if b"Transfer-Encoding: chunked" in data.split(b"\r\n\r\n", 1)[0]:
            body = dechunk(body)
        rv = json.loads(body)["metadata"]["resourceVersion"]
        r, w = await asyncio.open_connection(host, port, ssl=ctx, server_hostname=host)
        w.write(f"GET {SLICES}?{SELECTOR}&watch=true&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=3600 "
                f"HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        head = await r.readuntil(b"\r\n\r\n")
        if b" 200 " not in head.split(b"\r\n", 1)[0]:
            raise RuntimeError(head[:200])
    opened.append(1)
    try:
        while not stop.is_set():
            line = await r.readline()  # chunk sizes and event lines alike; the event lines hold the name
            if not line:
                break
            if b'"bench-extra"' in line:
                if line.startswith(b'{"type":"ADDED"'):
                    seen["ADDED"] += 1
                elif line.startswith(b'{"type":"DELETED"'):
                    seen["DELETED"] += 1
    finally:
        w.close()


def dechunk(b):
    out = b""
    while b:
        size, _, rest = b.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            break
        out += rest[:n]
        b = rest[n + 2:]
    return out


class Stop:
    def __init__(self):
        self.v = False

    def is_set(self):
        return self.v


def admin_req(pki, server, method, path, body=None):
    import http.client
    ctx = ssl.create_default_context(cafile=pki.ca)
    ctx.load_cert_chain(f"{pki.d}/adm.crt", f"{pki.d}/adm.key")
    c = http.client.HTTPSConnection(server.addr, server.port, context=ctx, timeout=10)
    c.request(method, path, json.dumps(body) if body else None, {"Content-Type": "application/json"} if body else {})
    r = c.getresponse()
    r.read()
    c.close()
    return r.status


def part2(args, d, pki, w, store_pid):
    ctx = ssl.create_default_context(cafile=pki.ca)
    ctx.load_cert_chain(pki.kubelet_pem)
    pid = w.proc.pid
    say(f"part 2: W idle {args.base} s")
    time.sleep(3)
    c0, s0, rss0, t0 = cpu_s(pid), cpu_s(store_pid), rss_kib(pid), time.monotonic()
    time.sleep(args.base)
    c1, s1, t1 = cpu_s(pid), cpu_s(store_pid), time.monotonic()
    idle_rate, store_idle = (c1 - c0) / (t1 - t0), (s1 - s0) / (t1 - t0)
    stop = Stop()
    seen = {"ADDED": 0, "DELETED": 0}
    opened = []
    res = {}

    async def main():
        sem = asyncio.Semaphore(50)
        loop = asyncio.get_running_loop()
        ta = time.monotonic()
        ca, sa = cpu_s(pid), cpu_s(store_pid)
        tasks = [asyncio.create_task(one_watch(ctx, w.addr, w.port, None, opened, seen, sem, stop))
                 for _ in range(args.watches)]
        while len(opened) < args.watches:
            await asyncio.sleep(0.05)
            failed = [t for t in tasks if t.done() and t.exception()]
            if failed:
                raise RuntimeError(f"a watch failed: {failed[0].exception()}")
        tb = time.monotonic()
        cb, sb = cpu_s(pid), cpu_s(store_pid)
        res["start"] = ((cb - ca) - idle_rate * (tb - ta), (sb - sa) - store_idle * (tb - ta), tb - ta)
        say(f"part 2: {args.watches} watches open in {tb - ta:.1f} s; holding {args.hold} s")
        await asyncio.sleep(2)
        ch, sh, th, rh = cpu_s(pid), cpu_s(store_pid), time.monotonic(), rss_kib(pid)
        await asyncio.sleep(args.hold)
        ch2, sh2, th2, rh2 = cpu_s(pid), cpu_s(store_pid), time.monotonic(), rss_kib(pid)
        res["hold"] = ((ch2 - ch) / (th2 - th), (sh2 - sh) / (th2 - th), rh, rh2)
        ce, se, te = cpu_s(pid), cpu_s(store_pid), time.monotonic()
        body = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "bench-extra", "namespace": "default",
                             "labels": {"kubernetes.io/service-name": "kubernetes"}},
                "addressType": "IPv4", "endpoints": [{"addresses": ["127.0.16.50"], "conditions": {"ready": True}}],
                "ports": [{"name": "https", "protocol": "TCP", "port": 6443}]}
        st1 = await loop.run_in_executor(None, admin_req, pki, w, "POST", SLICES, body)
        while seen["ADDED"] < args.watches:
            await asyncio.sleep(0.02)
        st2 = await loop.run_in_executor(None, admin_req, pki, w, "DELETE", f"{SLICES}/bench-extra")
        while seen["DELETED"] < args.watches:
            await asyncio.sleep(0.02)
        ce2, se2, te2 = cpu_s(pid), cpu_s(store_pid), time.monotonic()
        res["event"] = ((ce2 - ce) - idle_rate * (te2 - te), (se2 - se) - store_idle * (te2 - te), te2 - te, st1, st2)
        stop.v = True
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    asyncio.run(main())
    n = args.watches
    start_cpu, start_store, start_s = res["start"]
    hold_rate, hold_store, rh, rh2 = res["hold"]
    ev_cpu, ev_store, ev_s, st1, st2 = res["event"]
    per_watch_hold = (hold_rate - idle_rate) / n  # cores per held watch
    per_start = start_cpu / n
    per_event = ev_cpu / (2 * n)
    rss_per = (rh2 - rss0) / n  # KiB
    nodes, apis = 5000, 3
    per_api = nodes / apis
    rewatch = nodes / 450 / apis  # new watches per second per apiserver
    hold_cores = per_watch_hold * per_api
    rewatch_cores = per_start * rewatch
    lines = [f"Part 2: W with {n} watches of the slices (kubelet certificate, full TLS handshakes)", "",
             "| | W | its store |", "|---|---|---|",
             f"| idle before, ms/s | {idle_rate * 1000:.2f} | {store_idle * 1000:.2f} |",
             f"| to start {n} watches (list + watch each), above idle, s | {start_cpu:.2f} ({start_s:.1f} s) | {start_store:.2f} |",
             f"| per watch started, ms | {per_start * 1000:.2f} | {start_store / n * 1000:.2f} |",
             f"| {n} watches held {args.hold} s, ms/s | {hold_rate * 1000:.2f} | {hold_store * 1000:.2f} |",
             f"| per held watch above idle, µs/s | {per_watch_hold * 1e6:.2f} | {(hold_store - store_idle) / n * 1e6:.2f} |",
             f"| RSS before / with the watches, MiB | {rss0 / 1024:.1f} / {rh2 / 1024:.1f} (at open {rh / 1024:.1f}) | |",
             f"| RSS per watch, KiB | {rss_per:.1f} | |",
             f"| one change to every watch (POST {st1}, DELETE {st2}: {2 * n} events in {ev_s:.2f} s), per event, µs | "
             f"{per_event * 1e6:.1f} | {ev_store / (2 * n) * 1e6:.1f} |", "",
             f"At 5000 nodes, 3 apiservers, {per_api:.0f} watches each: held {hold_cores:.4f} cores, "
             f"{rewatch:.1f} new watches/s (timeoutSeconds 300-600) x {per_start * 1000:.2f} ms = {rewatch_cores:.4f} cores, "
             f"together {hold_cores + rewatch_cores:.3f} cores and {rss_per * per_api / 1024:.0f} MiB per apiserver; "
             f"one membership change costs each {per_event * per_api * 1000:.0f} ms of CPU once."]
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kprism", required=True)
    ap.add_argument("--apiserver", required=True)
    ap.add_argument("--watches", type=int, default=1000)
    ap.add_argument("--idle", type=float, default=60)
    ap.add_argument("--base", type=float, default=20)
    ap.add_argument("--hold", type=float, default=60)
    ap.add_argument("--only", default="1,2")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = args.watches * 4 + 200
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, need), hard))
    d = tempfile.mkdtemp(prefix="kprism-discovery-cost-")
    failed = False
    try:
        pki = clu.Pki(d, extra_ips=ADDRS + [W_ADDR])
        log = open(os.path.join(d, "store.log"), "w")
        store = subprocess.Popen([args.apiserver, "store", "--listen", f"unix:{d}/store.sock"], stdout=log, stderr=log)
        cleanup.register("store", lambda: clu._kill(store))
        if not wait_until(lambda: os.path.exists(f"{d}/store.sock"), 10):
            raise RuntimeError("the store did not start")
        port = clu.shared_port(ADDRS + [W_ADDR])
        servers = [clu.Apiserver(args.apiserver, d, pki, i, addr=a, port=port) for i, a in enumerate(ADDRS)]
        for s in servers:
            s.start()
        out = []
        if "1" in args.only:
            out += part1(args, d, pki, servers) + [""]
        if "2" in args.only:
            w = clu.Apiserver(args.apiserver, d, pki, 9, addr=W_ADDR, port=port)
            w.start("--watch-progress-interval", "1m")
            out += part2(args, d, pki, w, store.pid)
        print("\n".join(out))
    except Exception:
        failed = True
        raise
    finally:
        cleanup.run_all()
        if failed or args.keep:
            say(f"files kept in {d}")
        else:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
