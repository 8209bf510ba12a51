# SPDX-License-Identifier: Apache-2.0
"""The balancers compared, each a real process on 127.0.0.1 in front of the same three stand-ins:
kprism with its defaults (mTLS GET /readyz with the kubelet certificate every 5 s), HAProxy at its
best for this job (the same mTLS check, inter 5s fastinter 1s rise 2 fall 3, on-marked-down
shutdown-sessions, retries 3 with redispatch, leastconn as kubespray balances) and HAProxy with a
plain TCP check (what KubePrism-like balancers do). Each reports which upstreams it has up."""

import csv
import io
import json
import os
import socket
import subprocess
import urllib.request

from faultlib import cleanup
from faultlib.procs import free_port, wait_until


class Balancer:
    label = "?"

    def __init__(self, d, tag):
        self.d, self.tag = d, tag
        self.port = free_port()
        self.proc = None
        self.log_path = os.path.join(d, f"{tag}.log")

    def _spawn(self, argv):
        log = open(self.log_path, "w")
        self.proc = subprocess.Popen(argv, stdout=log, stderr=log)
        proc = self.proc
        cleanup.register(self.tag, lambda: (proc.poll() is None and (proc.kill(), proc.wait())))

    @property
    def pid(self):
        return self.proc.pid

    def up(self):
        """Names of the upstreams this balancer has up now ({} if it cannot say)."""
        raise NotImplementedError

    def wait_up(self, names, seconds):
        return wait_until(lambda: set(names) <= self.up(), seconds, 0.1)


class Kprism(Balancer):
    def __init__(self, d, tag, binary, cluster, cert_pem, extra=(), label="kprism", endpoints=None):
        """endpoints: the static list (default: every stand-in of the cluster; empty: none on the
        command line, as when a --config file in extra names them)."""
        super().__init__(d, tag)
        self.label = label
        self.admin = free_port()
        self.names = cluster.by_addr()
        eps = cluster.endpoints if endpoints is None else endpoints
        self._spawn([binary, *(["--endpoints", ",".join(eps)] if eps else []), "--bind-port", str(self.port),
                     "--health-port", str(self.admin), "--client-cert", cert_pem, "--client-key", cert_pem,
                     "--ca-file", cluster.pki.ca, *extra])

    def status(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/status", timeout=2) as r:
                return json.load(r)
        except (OSError, ValueError):
            return None

    def up(self):
        st = self.status() or {}
        return {self.names.get(u.get("address"), u.get("address")) for u in st.get("upstreams", [])
                if u.get("state") == "up"}

    def probe_ports(self):
        """Local ports of kprism's kept probe connections (/status probe_local_port): sockets to
        the upstreams that are no client's."""
        st = self.status() or {}
        return {u["probe_local_port"] for u in st.get("upstreams", []) if u.get("probe_local_port")}

    def metrics(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/metrics", timeout=2) as r:
                return r.read().decode()
        except OSError:
            return ""


class Haproxy(Balancer):
    """mtls=True: `option httpchk` GET /readyz over TLS with the kubelet certificate; False: TCP."""

    def __init__(self, d, tag, cluster, cert_pem, mtls):
        super().__init__(d, tag)
        self.mtls = mtls
        self.label = "HAProxy mTLS /readyz" if mtls else "HAProxy TCP check"
        self.sock = os.path.join(d, f"{tag}.sock")
        check = "check inter 5s fastinter 1s downinter 5s rise 2 fall 3 on-marked-down shutdown-sessions"
        if mtls:
            check += f" check-ssl verify required ca-file {cluster.pki.ca} crt {cert_pem} check-sni kubernetes"
        servers = "\n".join(f"    server {s.name} {s.endpoint} {check}" for s in cluster.servers)
        httpchk = ("    option httpchk\n    http-check send meth GET uri /readyz ver HTTP/1.1 hdr Host kubernetes\n"
                   "    http-check expect status 200\n") if mtls else ""
        cfg = os.path.join(d, f"{tag}.cfg")
        with open(cfg, "w") as f:
            f.write(f"""global
    maxconn 4000
    stats socket {self.sock} mode 600 level admin
defaults
    mode tcp
    timeout connect 2s
    timeout client 1h
    timeout server 1h
    timeout check 3s
    retries 3
    option redispatch
frontend fe
    bind 127.0.0.1:{self.port}
    default_backend be
backend be
    balance leastconn
{httpchk}{servers}
""")
        self._spawn(["haproxy", "-db", "-f", cfg])

    def stat(self):
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(2)
                s.connect(self.sock)
                s.sendall(b"show stat\n")
                data = b""
                while chunk := s.recv(65536):
                    data += chunk
        except OSError:
            return []
        text = data.decode().lstrip("# ")
        return list(csv.DictReader(io.StringIO(text)))

    def up(self):
        return {r["svname"] for r in self.stat() if r.get("pxname") == "be" and r.get("status", "").startswith("UP")
                and r.get("svname") not in ("FRONTEND", "BACKEND")}


BEFORE = "kprism before"  # the label of an earlier kprism binary run beside (run.py --kprism-before)


def start_all(d, kprism_bin, cluster, cert_pem, prefix="", tcp=True, kprism_args=(), before_bin=None):
    """kprism, (before_bin) an earlier kprism with its defaults, HAProxy mTLS and (tcp) HAProxy TCP,
    all up on every stand-in."""
    bs = [Kprism(d, f"{prefix}kprism", kprism_bin, cluster, cert_pem, kprism_args)]
    if before_bin:
        bs.append(Kprism(d, f"{prefix}kprism-before", before_bin, cluster, cert_pem, label=BEFORE))
    bs.append(Haproxy(d, f"{prefix}haproxy-mtls", cluster, cert_pem, True))
    if tcp:
        bs.append(Haproxy(d, f"{prefix}haproxy-tcp", cluster, cert_pem, False))
    names = [s.name for s in cluster.servers]
    for b in bs:
        if not b.wait_up(names, 20):
            raise RuntimeError(f"{b.label} did not see {names} up (has {sorted(b.up())}); log {b.log_path}:\n"
                               + open(b.log_path).read()[-1500:])
    return bs
