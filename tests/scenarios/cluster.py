# SPDX-License-Identifier: Apache-2.0
"""The control plane the scenarios run against: a PKI made at test time (openssl CLI), one shared
store (the stand-in's etcd) and three Go kube-apiserver stand-ins (build/kprism-apiserver) on
127.0.0.11-13, each with a control endpoint (etcd lost/restored, state) and restartable on its
port with new flags. Every process is registered with faultlib's cleanup, so none outlives a run."""

import datetime
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request

from faultlib import cleanup
from faultlib.procs import free_port, wait_until

ADDRS = ["127.0.0.11", "127.0.0.12", "127.0.0.13"]


def shared_port(addrs):
    """One port free on every address (the stand-ins of a discovery test share one: the
    EndpointSlice is made from the first port's addresses)."""
    for _ in range(50):
        p = free_port(addrs[0])
        try:
            for a in addrs[1:]:
                with socket.socket() as s:
                    s.bind((a, p))
            return p
        except OSError:
            continue
    raise RuntimeError("no port free on every address")


class Pki:
    """ca.crt, srv.crt/key (names every stand-in and 127.0.0.1), adm.crt/key (system:masters, the
    test clients), kubelet.pem (the node's client certificate, cert + key, one day) and short-lived
    kubelet certificates on demand (`openssl ca`, which takes exact start and end dates)."""

    def __init__(self, d, extra_ips=()):
        self.d = d
        self.ca = os.path.join(d, "ca.crt")
        self._serial = 100
        self._run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                  "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=scenarios-ca", "-days", "2")
        sans = ",".join(["DNS:kubernetes", "IP:127.0.0.1"] + [f"IP:{a}" for a in [*ADDRS, *extra_ips]])
        for name, subj, ext in (("srv", "/CN=kube-apiserver", f"subjectAltName={sans}\nextendedKeyUsage=serverAuth"),
                                ("adm", "/O=system:masters/CN=scenarios-admin", "extendedKeyUsage=clientAuth"),
                                ("kubelet", "/O=system:nodes/CN=system:node:scenarios", "extendedKeyUsage=clientAuth")):
            self._key_csr(name, subj)
            with open(os.path.join(d, f"{name}.ext"), "w") as f:
                f.write(ext + "\n")
            self._run("openssl", "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                      "-CAcreateserial", "-out", f"{name}.crt", "-days", "1", "-extfile", f"{name}.ext")
        self.kubelet_pem = self._pem("kubelet", "kubelet.pem")
        with open(os.path.join(d, "index.txt"), "w"):
            pass
        with open(os.path.join(d, "ca.cnf"), "w") as f:
            f.write(f"""[ca]
default_ca = scenarios
[scenarios]
dir = {d}
database = {d}/index.txt
serial = {d}/serial
new_certs_dir = {d}
certificate = {d}/ca.crt
private_key = {d}/ca.key
default_md = sha256
policy = any
unique_subject = no
copy_extensions = none
[any]
organizationName = optional
commonName = supplied
[kubelet]
extendedKeyUsage = clientAuth
""")

    def _run(self, *a):
        subprocess.run(a, cwd=self.d, check=True, capture_output=True)

    def _key_csr(self, name, subj):
        self._run("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                  "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subj)

    def _pem(self, name, out):
        path = os.path.join(self.d, out)
        with open(path, "w") as f:
            f.write(open(os.path.join(self.d, f"{name}.crt")).read() + open(os.path.join(self.d, f"{name}.key")).read())
        return path

    def short_kubelet(self, tag, seconds):
        """A fresh key and a kubelet client certificate valid from a minute ago until `seconds`
        from now; returns the path of its cert + key PEM (kubelet's kubelet-client-DATE.pem)."""
        name = f"kubelet-{tag}"
        self._key_csr(name, "/O=system:nodes/CN=system:node:scenarios")
        now = datetime.datetime.now(datetime.timezone.utc)
        fmt = "%Y%m%d%H%M%SZ"
        self._serial += 1
        with open(os.path.join(self.d, "serial"), "w") as f:
            f.write(f"{self._serial:04X}\n")
        self._run("openssl", "ca", "-batch", "-config", "ca.cnf", "-in", f"{name}.csr", "-out", f"{name}.crt",
                  "-notext", "-extensions", "kubelet",
                  "-startdate", (now - datetime.timedelta(seconds=60)).strftime(fmt),
                  "-enddate", (now + datetime.timedelta(seconds=seconds)).strftime(fmt))
        return self._pem(name, f"{name}.pem")


class Apiserver:
    """One stand-in. start() (re)starts it on its address and port with the given extra flags.
    addr, port and store (a store socket path) default to ADDRS[index], a free port and d/store.sock."""

    def __init__(self, binary, d, pki, index, addr=None, port=None, store=None):
        self.binary, self.d, self.pki, self.i = binary, d, pki, index
        self.name = f"a{index}"
        self.addr = addr or ADDRS[index]
        self.port = port or free_port(self.addr)
        self.store = store or f"{d}/store.sock"
        self.control_port = free_port()
        self.proc = None
        self.log_path = os.path.join(d, f"{self.name}.log")
        self._token = None

    @property
    def endpoint(self):
        return f"[{self.addr}]:{self.port}" if ":" in self.addr else f"{self.addr}:{self.port}"

    # A kube-apiserver registers some 50 post-start hooks, so its failing /readyz passes 2048 bytes
    # and net/http sends it chunked; 50 more than the stand-in's own 13 do the same here (etcd lost:
    # about 2.3 KB).
    HOOKS = ("--extra-poststart-hooks", "50")

    def start(self, *extra):
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [self.binary, "serve", "--store", f"unix:{self.store}", "--name", self.name,
             "--tls-cert-file", f"{self.d}/srv.crt", "--tls-private-key-file", f"{self.d}/srv.key",
             "--client-ca-file", self.pki.ca, "--bind-address", self.addr, "--secure-port", str(self.port),
             "--control-address", f"127.0.0.1:{self.control_port}", *self.HOOKS, *extra],
            stdout=log, stderr=log)
        proc = self.proc
        self._token = cleanup.register(f"stand-in {self.name}", lambda: _kill(proc))
        if not wait_until(lambda: self.state() is not None or proc.poll() is not None, 10):
            raise RuntimeError(f"{self.name} did not start: see {self.log_path}")
        if proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited {proc.returncode}: {open(self.log_path).read()[-500:]}")

    def terminate(self):
        """SIGTERM (graceful shutdown begins); returns the monotonic time it was sent."""
        t = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        return t

    def wait_exit(self, timeout=90):
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        cleanup.undo(self._token)
        return rc

    def control(self, path):
        req = urllib.request.Request(f"http://127.0.0.1:{self.control_port}{path}", method="POST", data=b"")
        with urllib.request.urlopen(req, timeout=5) as r:
            r.read()

    def state(self):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.control_port}/state", timeout=1) as r:
                return json.load(r)
        except (OSError, ValueError):
            return None


def _kill(proc):
    if proc.poll() is None:
        proc.kill()
        proc.wait()


class Cluster:
    def __init__(self, apiserver_bin, d):
        self.d = d
        self.pki = Pki(d)
        log = open(os.path.join(d, "store.log"), "w")
        store = subprocess.Popen([apiserver_bin, "store", "--listen", f"unix:{d}/store.sock"], stdout=log, stderr=log)
        cleanup.register("store", lambda: _kill(store))
        if not wait_until(lambda: os.path.exists(f"{d}/store.sock"), 10):
            raise RuntimeError("the store did not start")
        self.servers = [Apiserver(apiserver_bin, d, self.pki, i) for i in range(3)]
        for s in self.servers:
            s.start()

    @property
    def endpoints(self):
        return [s.endpoint for s in self.servers]

    def by_addr(self):
        return {s.endpoint: s.name for s in self.servers}
