# SPDX-License-Identifier: Apache-2.0
"""The drill's network: a router namespace and one namespace per node, each node joined to the
router by netdelay.py's delay line (site-to-site latency), sites on 10.77.S.0/24 (A=1, B=2, W=3).
Cuts are iptables rules in the router's FORWARD chain; the router itself (10.77.0.1, the drill's
out-of-band view: etcd metrics) is never cut. Everything is torn down by Topology.close()."""

import json
import os
import signal
import subprocess
import time

SITES = {"a": 1, "b": 2, "w": 3}
NET = "10.77"


def sh(*argv, check=True, timeout=20):
    r = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def site_net(site):
    return f"{NET}.{SITES[site]}.0/24"


class Node:
    def __init__(self, topo, name, site, host):
        self.topo, self.name, self.site = topo, name, site
        self.ip = f"{NET}.{SITES[site]}.{host}"
        self.ns = f"{topo.prefix}-{name}"

    def argv(self, *cmd):
        return ["ip", "netns", "exec", self.ns, *cmd]

    def exec(self, *cmd, check=True, timeout=20):
        return sh(*self.argv(*cmd), check=check, timeout=timeout)

    def popen(self, argv, log_path, **kw):
        return self.topo.popen(self.argv(*argv), log_path, **kw)


class Topology:
    def __init__(self, workdir, nodes, rtt_ms, deadline_s, rate_mbit=0.0, jitter_ms=0.0):
        """nodes: [(name, site, host octet)]; rtt_ms: {"a-w": 23, "b-w": 43, "a-b": 10}; rate_mbit:
        the bandwidth of each link between two sites, each way (0: none); jitter_ms: netdelay.py."""
        self.rate_mbit, self.jitter_ms = rate_mbit, jitter_ms
        self.d = workdir
        self.prefix = f"kpd{os.getpid() % 100000}"
        self.router = f"{self.prefix}-router"
        self.procs = []
        self.namespaces = []
        self.nodes = {}
        try:
            self._build(nodes, rtt_ms, deadline_s)
        except BaseException:
            self.close()
            raise

    def _ns(self, name):
        sh("ip", "netns", "add", name)
        self.namespaces.append(name)
        sh("ip", "netns", "exec", name, "ip", "link", "set", "lo", "up")

    def rexec(self, *cmd, check=True):
        return sh("ip", "netns", "exec", self.router, *cmd, check=check)

    def popen(self, argv, log_path, **kw):
        log = open(log_path, "a")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, **kw)
        self.procs.append(p)
        return p

    def _build(self, nodes, rtt_ms, deadline_s):
        self._ns(self.router)
        for i, (name, site, host) in enumerate(nodes):
            n = Node(self, name, site, host)
            n.node_if, n.router_if = f"{self.prefix}n{i}"[:15], f"{self.prefix}r{i}"[:15]
            self.nodes[name] = n
            self._ns(n.ns)
        spec = {"nodes": [{"name": n.name, "ip": n.ip, "site": n.site, "node_if": n.node_if,
                           "router_if": n.router_if} for n in self.nodes.values()],
                "rtt_ms": rtt_ms, "rate_mbit": self.rate_mbit, "jitter_ms": self.jitter_ms, "site_of_prefix": {f"{NET}.{v}.": k for k, v in SITES.items()}}
        spec_path = os.path.join(self.d, "netdelay.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        here = os.path.dirname(os.path.abspath(__file__))
        log = os.path.join(self.d, "netdelay.log")
        self.delay = self.popen(["ip", "netns", "exec", self.router, "/usr/bin/python3",
                                 os.path.join(here, "netdelay.py"), spec_path, str(deadline_s)], log)
        end = time.monotonic() + 10
        while "netdelay ready" not in open(log).read():
            if self.delay.poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"netdelay did not start: {open(log).read()[-800:]}")
            time.sleep(0.05)
        for k in ("net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"):
            self.rexec("sysctl", "-qw", k)
        self.rexec("ip", "addr", "add", f"{NET}.0.1/32", "dev", "lo")
        for n in self.nodes.values():
            self.rexec("ip", "link", "set", n.node_if, "netns", n.ns)
            self.rexec("ip", "link", "set", n.router_if, "up")
            self.rexec("ip", "route", "add", f"{n.ip}/32", "dev", n.router_if)
            n.exec("ip", "addr", "add", f"{n.ip}/32", "dev", n.node_if)
            n.exec("ip", "link", "set", n.node_if, "up")
            n.exec("ip", "route", "add", "default", "dev", n.node_if)
        # conntrack on from the start, so that a stateful cut sees the connections made before it
        self.rexec("iptables", "-w", "5", "-A", "FORWARD", "-m", "conntrack", "--ctstate", "INVALID,NEW,ESTABLISHED,RELATED",
                   "-j", "ACCEPT")

    # Cuts: rules inserted before the ACCEPT above; heal() flushes them and puts it back.
    def drop(self, src, dst, new_only=False):
        rule = ["-s", site_net(src), "-d", site_net(dst)] if dst else ["-s", site_net(src), "!", "-d", site_net(src)]
        if new_only:
            rule += ["-m", "conntrack", "--ctstate", "NEW"]
        self.rexec("iptables", "-w", "5", "-I", "FORWARD", *rule, "-j", "DROP")

    def isolate(self, site):
        self.rexec("iptables", "-w", "5", "-I", "FORWARD", "-s", site_net(site), "!", "-d", site_net(site), "-j", "DROP")
        self.rexec("iptables", "-w", "5", "-I", "FORWARD", "-d", site_net(site), "!", "-s", site_net(site), "-j", "DROP")

    def heal(self):
        self.rexec("iptables", "-w", "5", "-F", "FORWARD")
        self.rexec("iptables", "-w", "5", "-A", "FORWARD", "-m", "conntrack", "--ctstate", "INVALID,NEW,ESTABLISHED,RELATED",
                   "-j", "ACCEPT")

    def close(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
        for p in self.procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                pass
        for ns in reversed(self.namespaces):
            sh("ip", "netns", "del", ns, check=False)
        self.namespaces = []
