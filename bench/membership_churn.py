#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Memory under membership churn: kprism's RSS and its health checkers over EVENTS (100 000)
EndpointSlice watch events that alternate between two sets of 31 endpoints (each event adds 31
upstreams, with their checkers, and removes 31).

One asyncio TLS server stands in for the apiservers on 63 loopback addresses and one port, with
the scenarios' test PKI (client certificates required): on 127.0.0.1, the static endpoint,
/readyz answers 200 and the EndpointSlices are listed and watched; on 127.0.1.1-31 and
127.0.2.1-31, the two sets, /readyz answers 503 (so no discovered endpoint is ever up, and the
watch stays on 127.0.0.1). The watch sends the events back to back, pausing PAUSE_MS (1000) every
PAUSE_EVERY (1000) events so that the newest set's checkers run their probes (a full TLS
handshake, then a kept connection) before it is removed: the checkers retired are then holding
TLS state too. kprism runs with default health settings and no snapshot file (a snapshot write per
change is another subject).

Every SAMPLE (5000) events the watch also rests SETTLE_MS (7000, longer than kprism's 5 s before it
hands freed heap back to the kernel): there, once kprism's count of events read
(kprism_discovery_watch_events_total) has stood still for a second, and 4.5 s later, it samples VmRSS (what the churn left behind) and
kprism_health_checkers; between samples it keeps the highest VmRSS seen during the churn (the
working set of the bursts in flight). The first WARMUP (10 000) events are warm-up. It prints one
markdown table and a verdict line: flat when every settled RSS after warm-up is within 10 % of the
first one (exit status 1 otherwise), and the endpoints became upstreams at all.

Usage: bench/membership_churn.py --kprism BIN [--events 100000] [--warmup 10000] [--sample 5000]
         [--pause-every 1000] [--pause-ms 1000] [--settle-ms 7000] [--keep]
`make bench-membership` runs it."""

import argparse
import asyncio
import json
import os
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..", "tests", "scenarios"), os.path.join(HERE, "..", "tests", "faults")]

from faultlib.procs import rss_kib, wait_until  # noqa: E402
import cluster as clu  # noqa: E402

STATIC = "127.0.0.1"
SETS = [[f"127.0.1.{i}" for i in range(1, 32)], [f"127.0.2.{i}" for i in range(1, 32)]]
SLICES = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"


def say(msg):
    print(f"membership-churn: {msg}", file=sys.stderr, flush=True)


def slice_of(addrs, port, rv):
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "addressType": "IPv4",
            "metadata": {"name": "kubernetes", "namespace": "default", "resourceVersion": str(rv),
                         "labels": {"kubernetes.io/service-name": "kubernetes"}},
            "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in addrs],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}


class Fake:
    """The apiservers: /readyz, the list and the watch of the slices."""

    def __init__(self, port, pki, events, pause_every, pause_ms, sample, settle_ms):
        self.port, self.events, self.pause_every, self.pause_ms = port, events, pause_every, pause_ms
        self.sample, self.settle_ms = sample, settle_ms
        self.sent = 0
        self.rv = 1
        self.ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=pki.ca)
        self.ctx.load_cert_chain(os.path.join(pki.d, "srv.crt"), os.path.join(pki.d, "srv.key"))
        self.ctx.verify_mode = ssl.CERT_REQUIRED
        self.handshakes = 0

    def current(self):
        return SETS[self.sent % 2]

    async def handle(self, reader, writer):
        self.handshakes += 1
        local = writer.get_extra_info("sockname")[0]
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                target = head.split(b" ", 2)[1].decode()
                if target.startswith("/readyz"):
                    code, body = (200, b"ok") if local == STATIC else (503, b"[-]etcd failed: reason withheld\n")
                    writer.write(b"HTTP/1.1 %d X\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s"
                                 % (code, len(body), body))
                    await writer.drain()
                    continue
                if target.startswith(SLICES) and "watch=true" in target:
                    await self.watch(writer)
                    return
                if target.startswith(SLICES):
                    body = json.dumps({"kind": "EndpointSliceList", "apiVersion": "discovery.k8s.io/v1",
                                       "metadata": {"resourceVersion": str(self.rv)},
                                       "items": [slice_of(self.current(), self.port, self.rv)]}).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                                 b"Connection: close\r\n\r\n%s" % (len(body), body))
                    await writer.drain()
                    return
                writer.write(b"HTTP/1.1 404 X\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def watch(self, writer):
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
        while self.sent < self.events:
            self.sent += 1
            self.rv += 1
            line = json.dumps({"type": "MODIFIED", "object": slice_of(self.current(), self.port, self.rv)}) + "\n"
            writer.write(b"%x\r\n%s\r\n" % (len(line), line.encode()))
            await writer.drain()
            if self.sample and self.sent % self.sample == 0:
                await asyncio.sleep(self.settle_ms / 1000)
            elif self.pause_every and self.sent % self.pause_every == 0:
                await asyncio.sleep(self.pause_ms / 1000)
        await asyncio.sleep(3600)  # the watch stays open, quiet

    async def serve(self):
        for a in [STATIC, *SETS[0], *SETS[1]]:
            await asyncio.start_server(self.handle, a, self.port, ssl=self.ctx, backlog=512)
        await asyncio.Event().wait()


def metric(admin, name):
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5).read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kprism", required=True)
    ap.add_argument("--events", type=int, default=100000)
    ap.add_argument("--warmup", type=int, default=10000)
    ap.add_argument("--sample", type=int, default=5000)
    ap.add_argument("--pause-every", type=int, default=1000)
    ap.add_argument("--pause-ms", type=int, default=1000)
    ap.add_argument("--settle-ms", type=int, default=7000)
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()

    d = tempfile.mkdtemp(prefix="kprism-churn-")
    pki = clu.Pki(d, extra_ips=[*SETS[0], *SETS[1]])
    port = clu.shared_port([STATIC, *SETS[0], *SETS[1]])
    fake = Fake(port, pki, a.events, a.pause_every, a.pause_ms, a.sample, a.settle_ms)
    threading.Thread(target=lambda: asyncio.run(fake.serve()), daemon=True).start()
    admin, listen = clu.free_port(), clu.free_port()
    log = open(os.path.join(d, "kprism.log"), "w")
    k = subprocess.Popen([a.kprism, "--endpoints", f"{STATIC}:{port}", "--bind-port", str(listen),
                          "--health-port", str(admin), "--client-cert", pki.kubelet_pem, "--client-key",
                          pki.kubelet_pem, "--ca-file", pki.ca, "--enable-discovery", "--discovery-snapshot-file", "",
                          "--discovery-allowed-cidrs", "127.0.0.0/8",  # the stand-ins are on loopback
                          "--log-level", "warn"], stdout=log, stderr=log)
    rows = []
    verdict = 1
    try:
        if not wait_until(lambda: (metric(admin, "kprism_discovery_watch_events_total") or 0) > 0, 30):
            raise SystemExit(f"kprism never watched; see {d}/kprism.log")
        start = time.monotonic()
        next_at = a.sample
        last_progress, last_events = time.monotonic(), 0
        peak = 0
        while next_at <= a.events:
            ev = metric(admin, "kprism_discovery_watch_events_total") or 0
            if ev != last_events:
                last_progress, last_events = time.monotonic(), ev
            if time.monotonic() - last_progress > 60:
                raise SystemExit(f"kprism stopped reading events at {ev:.0f}; see {d}/kprism.log")
            if ev >= next_at:
                # The watch rests every SAMPLE events it sent; kprism's count may be off from the
                # sender's (a watch started again), so the rest is told by the count standing
                # still for a second, then sampled once kprism has settled.
                still = time.monotonic()
                while time.monotonic() - still < 1.0:
                    peak = max(peak, rss_kib(k.pid))
                    time.sleep(0.05)
                    now_ev = metric(admin, "kprism_discovery_watch_events_total") or 0
                    if now_ev != ev:
                        ev, still = now_ev, time.monotonic()
                time.sleep(max(0.0, (a.settle_ms - 2500) / 1000))
                rss = rss_kib(k.pid)
                rows.append((int(ev), rss, int(metric(admin, "kprism_health_checkers") or -1),
                             time.monotonic() - start, max(peak, rss)))
                say(f"{int(ev)} events: RSS {rss / 1024:.1f} MiB settled, {rows[-1][4] / 1024:.1f} MiB at most "
                    f"during the churn; checkers {rows[-1][2]}")
                next_at = (int(ev) // a.sample + 1) * a.sample
                peak = 0
            else:
                peak = max(peak, rss_kib(k.pid))
            time.sleep(0.05)
        print(f"| events read | VmRSS settled (MiB) | VmRSS at most during the churn (MiB) | kprism_health_checkers | seconds |")
        print("| ---: | ---: | ---: | ---: | ---: |")
        for ev, rss, ch, t, top in rows:
            print(f"| {ev} | {rss / 1024:.1f} | {top / 1024:.1f} | {ch} | {t:.0f} |")
        base = [r for r in rows if r[0] >= a.warmup]
        if base:
            ref = base[0][1]
            worst = max(r[1] for r in base)
            ok = all(abs(r[1] - ref) <= ref * 0.10 for r in base)
            # A run whose endpoints were never admitted (refused addresses, say) measures nothing.
            if max(r[2] for r in rows) < 32:
                say("the discovered endpoints never became upstreams: nothing was measured")
                ok = False
            verdict = 0 if ok else 1
            print(f"\nafter warm-up ({base[0][0]} events): RSS settled {ref / 1024:.1f} MiB, at most {worst / 1024:.1f} MiB "
                  f"({(worst - ref) * 100 / ref:+.1f} %); during the churn at most "
                  f"{max(r[4] for r in base) / 1024:.1f} MiB; checkers at most {max(r[2] for r in base)}; "
                  f"TLS connections to the fake apiservers {fake.handshakes}: {'flat' if ok else 'NOT flat'} within 10 %")
    finally:
        k.terminate()
        k.wait(timeout=30)
        if a.keep:
            say(f"kept {d}")
        else:
            subprocess.run(["rm", "-rf", d])
    return verdict


if __name__ == "__main__":
    sys.exit(main())
