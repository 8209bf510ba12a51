# SPDX-License-Identifier: Apache-2.0
"""A test cluster: stand-in apiservers, each alone in its network namespace on <ns_ip>:6443
(TLS, client certificate required from the test CA, /readyz driven by a file), and the real
kprism in the root namespace in front of them, with the kubelet-style client certificate."""

import os

from . import admin
from .netns import Namespace
from .procs import Proc, free_port, wait_until

API_PORT = 6443
RELAY_INNER = "127.0.0.1:6443"  # with a relay, the stand-in listens here inside its namespace
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Upstream:
    """One stand-in `name` in its own namespace; `relay` puts delay_relay.py in front of it."""

    def __init__(self, env, scope, name, index, relay=False, quiet=False):
        self.env, self.scope, self.name = env, scope, name
        self.ns = Namespace(env.subnet, index, scope)
        self.addr = f"{self.ns.ns_ip}:{API_PORT}"
        self.readyz = os.path.join(env.dir, f"readyz-{self.ns.name}")
        self.delay_file = os.path.join(env.dir, f"delay-{self.ns.name}")
        self.log = None if quiet else os.path.join(env.dir, f"standin-{name}-{self.ns.name}.log")
        self.relay = None
        self.use_relay = relay
        self.starts = 0
        self.set_readyz("200")
        self.proc = None
        self.start()
        if relay:
            self.set_delay(0)
            self.relay = Proc(self.ns.argv("python3", os.path.join(HERE, "delay_relay.py"), "--listen", self.addr,
                                           "--to", RELAY_INNER, "--delay-file", self.delay_file),
                              os.path.join(env.dir, f"relay-{name}.log"), scope=scope, name=f"relay-{name}")
            if not self.relay.wait_output("relay listening", 10):
                raise RuntimeError(f"relay for {name} did not start: {self.relay.output()[-500:]}")

    def start(self):
        """Starts (or restarts, on the same address) the stand-in; waits until it listens."""
        listen = RELAY_INNER if self.use_relay else self.addr
        self.starts += 1  # the log is appended to: the n-th start waits for the n-th "listening"
        pki = self.env.pki
        self.proc = Proc(self.ns.argv(self.env.standin, "--listen", listen, "--name", self.name, "--tls-cert",
                                      pki.server_pem, "--client-ca", pki.ca_cert, "--readyz-file", self.readyz),
                         self.log, scope=self.scope, name=f"standin-{self.name}")
        host, port = listen.rsplit(":", 1)
        ok = wait_until(lambda: self._listening(host, int(port)), 10, 0.02)
        if not ok:
            raise RuntimeError(f"stand-in {self.name} did not start")

    def _listening(self, host, port):
        if self.log:
            return self.proc.output().count("listening ") >= self.starts
        # Quiet stand-ins (soak: no per-request log): the socket shows up in the namespace.
        r = self.ns.exec("ss", "-Hltn", f"sport = :{port}", check=False)
        return host in r.stdout

    def set_readyz(self, mode):
        tmp = self.readyz + ".tmp"
        with open(tmp, "w") as f:
            f.write(mode + "\n")
        os.replace(tmp, self.readyz)

    def set_delay(self, ms):
        """Sets the relay's delay; with the relay running, returns once it has taken it up (it
        re-reads the file every 100 ms, later when starved of CPU): a client connection started
        after that has every byte held by the new delay."""
        line = f"delay {int(ms)} ms wall="
        seen = self.relay.output().count(line) if self.relay else 0
        tmp = self.delay_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"{int(ms)}\n")
        os.replace(tmp, self.delay_file)
        if self.relay and not wait_until(lambda: self.relay.output().count(line) > seen, 10, 0.005):
            raise RuntimeError(f"relay for {self.name} did not take up the delay of {int(ms)} ms within 10 s")


class Kprism:
    """build/kprism (KPRISM_BIN) on 127.0.0.1:port with admin on admin_port, default health
    settings unless `extra` says otherwise. `nofile` runs it under prlimit; `listen_fd` passes a
    listening socket the way systemd does (fd 3, LISTEN_FDS=1, LISTEN_FDNAMES=data)."""

    def __init__(self, env, scope, endpoints, extra=(), port=None, admin_port=None, nofile=None, listen_fd=None,
                 binary=None, log_name="kprism", extra_env=None):
        self.env, self.scope = env, scope
        self.port = port or free_port()
        self.admin_port = admin_port or free_port()
        self.endpoints = list(endpoints)
        self.binary = binary or env.kprism
        self.log = os.path.join(env.dir, f"{log_name}-{self.port}.log")
        self.extra, self.nofile, self.listen_fd, self.extra_env = list(extra), nofile, listen_fd, extra_env
        self.proc = None
        self.starts = 0

    def argv(self):
        pki = self.env.pki
        a = [self.binary, "--endpoints", ",".join(self.endpoints), "--bind-port", str(self.port),
             "--health-port", str(self.admin_port), "--client-cert", pki.client_pem, "--client-key", pki.client_pem,
             "--ca-file", pki.ca_cert,
             # Rebalancing off: its placement steers new connections off an upstream at its share,
             # and the detection bounds here count on new client connections reaching the faulty
             # one (two failed connects take it down before the probes do). Rebalancing has its
             # own tests (tests/integration/rebalance_test.cc, make scenarios).
             "--rebalance=false", *self.extra]
        if self.listen_fd is not None:
            # As systemd: the socket as fd 3, LISTEN_PID the pid of kprism itself (exec keeps it).
            move = f"exec 3<&{self.listen_fd} {self.listen_fd}<&-; " if self.listen_fd != 3 else ""
            a = ["/bin/sh", "-c", f'{move}export LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=data; exec "$@"', "sh", *a]
        if self.nofile:
            a = ["prlimit", f"--nofile={self.nofile}:{self.nofile}", "--", *a]
        return a

    def start(self, wait_up=True, timeout=15):
        env = dict(os.environ)
        for k in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "NOTIFY_SOCKET"):
            env.pop(k, None)
        env.update(self.extra_env or {})
        self.starts += 1
        self.proc = Proc(self.argv(), self.log, env=env, scope=self.scope,
                         pass_fds=(self.listen_fd,) if self.listen_fd is not None else (), name="kprism")
        if not wait_until(lambda: admin.status(self.admin_port, 0.5) is not None or not self.proc.running(), timeout):
            raise RuntimeError(f"kprism did not start: {self.tail()}")
        if not self.proc.running():
            raise RuntimeError(f"kprism exited at start: {self.tail()}")
        if wait_up and not self.wait_all("up", timeout):
            raise RuntimeError(f"upstreams not all up: {admin.states(self.admin_port)}; {self.tail()}")
        return self

    @property
    def pid(self):
        return self.proc.pid

    def states(self):
        return admin.states(self.admin_port) or {}

    def wait_all(self, state, timeout):
        return wait_until(lambda: (s := self.states()) and all(v == state for v in s.values()), timeout, 0.05)

    def output(self):
        return self.proc.output() if self.proc else ""

    def tail(self, n=8):
        return " | ".join(self.output().strip().splitlines()[-n:])


class Env:
    """What every case shares: the work dir, the PKI, the binaries and the /24 for namespaces."""

    def __init__(self, directory, pki, kprism, standin, subnet):
        self.dir, self.pki, self.kprism, self.standin, self.subnet = directory, pki, kprism, standin, subnet

