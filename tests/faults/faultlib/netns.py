# SPDX-License-Identifier: Apache-2.0
"""Network namespaces, one per stand-in apiserver, each reached from the root namespace over a
veth pair with a /30 from 10.200.B.0/24 (B picked unused on this machine). Faults are iptables
rules in the stand-in's namespace, on its veth end only, so they never touch anything else;
deleting the namespace removes the pair and every rule with it."""

import ipaddress
import os
import shutil
import subprocess



def sh(*argv, check=True, timeout=20):
    r = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def available():
    """None when `ip netns` (and a veth pair in it) works here, else why not."""
    if os.geteuid() != 0:
        return "needs root"
    if not shutil.which("ip"):
        return "ip netns unavailable: ip (iproute2) not installed"
    name = f"kpf-probe-{os.getpid()}"
    try:
        r = sh("ip", "netns", "add", name, check=False)
        if r.returncode != 0:
            return f"ip netns unavailable: {r.stderr.strip() or 'exit %d' % r.returncode}"
        r = sh("ip", "link", "add", f"kpp{os.getpid() % 100000}", "type", "veth", "peer", "name", "kppeer",
               "netns", name, check=False)
        if r.returncode != 0:
            return f"veth pairs unavailable: {r.stderr.strip()}"
        return None
    except (OSError, subprocess.SubprocessError) as e:
        return f"ip netns unavailable: {e}"
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)  # the veth pair goes with it


def pick_subnet(exclude=()):
    """A 10.200.B.0/24 no address or route on this machine overlaps (other tests may use some)."""
    used = sh("ip", "-4", "-o", "addr").stdout + sh("ip", "-4", "route", "show", "table", "all").stdout
    nets = []
    for tok in used.split():
        try:
            nets.append(ipaddress.ip_network(tok, strict=False))
        except ValueError:
            pass
    start = os.getpid() % 200
    for i in range(250):
        b = (start + i) % 250 + 1
        cand = ipaddress.ip_network(f"10.200.{b}.0/24")
        if b not in exclude and not any(cand.overlaps(n) for n in nets if n.prefixlen > 0):
            return b
    raise RuntimeError("no free 10.200.x.0/24 for the test namespaces")


class Namespace:
    """`ns_ip` lives in the namespace on `peer`; `host_ip` in the root namespace on `host_if`."""

    _count = 0

    def __init__(self, subnet_b, index, scope):
        Namespace._count += 1
        tag = f"{os.getpid() % 10000}{Namespace._count}"
        self.name = f"kpf-{os.getpid()}-{Namespace._count}"
        self.host_if = f"kf{tag}h"[:15]
        self.peer = f"kf{tag}n"[:15]
        self.host_ip = f"10.200.{subnet_b}.{4 * index + 1}"
        self.ns_ip = f"10.200.{subnet_b}.{4 * index + 2}"
        sh("ip", "netns", "add", self.name)
        scope.add(f"netns {self.name}", self.delete)
        sh("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.peer, "netns", self.name)
        sh("ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
        sh("ip", "link", "set", self.host_if, "up")
        self.exec("ip", "addr", "add", f"{self.ns_ip}/30", "dev", self.peer)
        self.exec("ip", "link", "set", self.peer, "up")
        self.exec("ip", "link", "set", "lo", "up")
        self.faults = []

    def argv(self, *cmd):
        return ["ip", "netns", "exec", self.name, *cmd]

    def exec(self, *cmd, check=True):
        return sh(*self.argv(*cmd), check=check)

    def delete(self):
        sh("ip", "link", "del", self.host_if, check=False)
        sh("ip", "netns", "del", self.name, check=False)

    def iptables(self, *args):
        self.exec("iptables", "-w", "5", *args)

    # Faults. Each adds rules on the namespace's veth end; heal() removes them all.
    def blackhole(self):
        """Every packet dropped, both directions."""
        self.iptables("-I", "INPUT", "-i", self.peer, "-j", "DROP")
        self.iptables("-I", "OUTPUT", "-o", self.peer, "-j", "DROP")
        self.faults.append("blackhole")

    def drop_replies(self):
        """Only packets from the namespace back to kprism are dropped (SYN-ACKs, data, ACKs)."""
        self.iptables("-I", "OUTPUT", "-o", self.peer, "-j", "DROP")
        self.faults.append("drop-out")

    def drop_requests(self):
        """Only packets from kprism into the namespace are dropped."""
        self.iptables("-I", "INPUT", "-i", self.peer, "-j", "DROP")
        self.faults.append("drop-in")

    def drop_syn(self):
        """New TCP connections dropped (their SYN); established ones carry on."""
        self.iptables("-I", "INPUT", "-i", self.peer, "-p", "tcp", "--syn", "-j", "DROP")
        self.faults.append("syn-drop")

    def heal(self):
        self.iptables("-F")
        self.faults = []
