#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The drill's wide-area links: a user-space delay line between every node and the router namespace
(this kernel has no sch_netem). Run inside the router namespace with a JSON spec on argv[1]:
{"nodes": [{"name", "ip", "site", "node_if", "router_if"}], "rtt_ms": {"a-w": 23, ...},
"site_of_prefix": {"10.77.1.": "a", ...}}. For each node it opens two TUN devices in its own
namespace: node_if (the harness moves it into the node's namespace; the node's only link) and
router_if (stays in the router, where the kernel routes, conntrack and iptables cuts apply).
A packet the node sends is handed to the router at once; a packet the router sends towards a node
is held for half the round trip between the sites of its source and of that node (0 inside a
site), then delivered. Between two sites each direction is a link of "rate_mbit" (0: no cap): a
packet waits for the ones before it to be sent at that rate (a backlog over 1 MiB is dropped, as
a full queue would), and gets a delay jitter of "jitter_ms" (normal, standard deviation) without
being reordered. Prints "netdelay ready" once every device exists; runs until
SIGTERM or until its deadline (argv[2] seconds)."""

import fcntl
import heapq
import json
import os
import random
import select
import signal
import struct
import sys
import time

TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000
MAX_QUEUED = 20000  # packets held at once; beyond, new ones are dropped as a full link would
MAX_BACKLOG = 1 << 20  # bytes waiting for a site-to-site link's rate; beyond, dropped


class Link:
    """One direction between two sites: a delay, a rate (bytes a second, 0: none) and a jitter
    (standard deviation, seconds), in order. schedule() says when a packet of `size` bytes handed
    over at `now` is delivered, or None when the backlog waiting for the rate is over MAX_BACKLOG."""

    def __init__(self, delay, rate, jitter, rng=random):
        self.delay, self.rate, self.jitter, self.rng = delay, rate, jitter, rng
        self.busy = self.last = 0.0

    def schedule(self, now, size):
        start = max(now, self.busy)
        if self.rate > 0:
            if (start - now) * self.rate > MAX_BACKLOG:
                return None
            self.busy = start + size / self.rate
            start = self.busy
        j = max(-self.delay / 2, self.rng.gauss(0.0, self.jitter)) if self.jitter else 0.0
        self.last = max(start + self.delay + j, self.last)
        return self.last


def tun(name):
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def main():
    spec = json.load(open(sys.argv[1]))
    rate = float(spec.get("rate_mbit", 0)) * 1e6 / 8  # bytes a second
    jit = float(spec.get("jitter_ms", 0)) / 1000.0
    deadline = time.monotonic() + float(sys.argv[2])
    prefixes = sorted(spec["site_of_prefix"].items(), key=lambda kv: -len(kv[0]))
    rtt = {}
    for k, v in spec["rtt_ms"].items():
        x, y = k.split("-")
        rtt[(x, y)] = rtt[(y, x)] = v / 1000.0
    links = {pair: Link(v / 2, rate, jit) for pair, v in rtt.items()}

    def site_of(src):
        s = ".".join(str(b) for b in src) + "."
        for p, site in prefixes:
            if s.startswith(p):
                return site
        return None

    # fd -> (peer fd, delay function or None)
    route = {}
    for n in spec["nodes"]:
        nfd, rfd = tun(n["node_if"]), tun(n["router_if"])
        route[nfd] = (rfd, None)
        route[rfd] = (nfd, n["site"])
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    print("netdelay ready", flush=True)
    poll = select.poll()
    for fd in route:
        poll.register(fd, select.POLLIN)
    heap, seq, dropped = [], 0, 0
    while not stop and time.monotonic() < deadline:
        now = time.monotonic()
        while heap and heap[0][0] <= now:
            _, _, fd, pkt = heapq.heappop(heap)
            try:
                os.write(fd, pkt)
            except OSError:
                dropped += 1
        wait = 200 if not heap else max(0, int((heap[0][0] - now) * 1000) + (0 if heap[0][0] - now < 0.001 else 0))
        for fd, _ in poll.poll(wait):
            out, dst_site = route[fd]
            for _ in range(256):
                try:
                    pkt = os.read(fd, 65536)
                except BlockingIOError:
                    break
                except OSError:
                    break
                if len(pkt) < 20 or pkt[0] >> 4 != 4:
                    continue  # IPv4 only
                if dst_site is None:
                    try:
                        os.write(out, pkt)
                    except OSError:
                        dropped += 1
                    continue
                src_site = site_of(pkt[12:16])
                d = rtt.get((src_site, dst_site), 0.0) / 2 if src_site and src_site != dst_site else 0.0
                when = None
                if d > 0.0:
                    when = None if len(heap) >= MAX_QUEUED else links[(src_site, dst_site)].schedule(time.monotonic(), len(pkt))
                    if when is None:
                        dropped += 1
                        continue
                if d == 0.0 and not heap:
                    try:
                        os.write(out, pkt)
                    except OSError:
                        dropped += 1
                elif len(heap) < MAX_QUEUED:
                    seq += 1
                    heapq.heappush(heap, (when if when is not None else time.monotonic() + d, seq, out, pkt))
                else:
                    dropped += 1
    print(f"netdelay exit dropped={dropped}", flush=True)


if __name__ == "__main__":
    main()
