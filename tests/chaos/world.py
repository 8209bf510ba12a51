# SPDX-License-Identifier: Apache-2.0
"""What one chaos seed runs: the store and three Go kube-apiserver stand-ins (a1-a3 on
127.0.0.11-13, one port, so that their lease reconciler lists all three in the default/kubernetes
EndpointSlice), a C++ stand-in c4 whose /readyz answers as a file says (127.0.0.24, reached by
kprism through a delaying relay on 127.0.0.14, for added latency), and the real kprism in front
with a configuration file it reloads. Every process is registered with faultlib's cleanup."""

import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(TESTS, "scenarios"), os.path.join(TESTS, "faults")]

from faultlib import admin, cleanup  # noqa: E402
from faultlib.procs import Proc, free_port, wait_until  # noqa: E402
import cluster as clu  # noqa: E402
import load  # noqa: E402

GO_ADDRS = ["127.0.0.11", "127.0.0.12", "127.0.0.13"]
C4_FRONT = "127.0.0.14"  # the relay kprism is configured with
C4_ADDR = "127.0.0.24"  # the C++ stand-in itself (also what discovery adds)
C5_ADDR = "127.0.0.25"  # a second C++ stand-in, always ready: the endpoint the churn phase adds and removes
# The churn phase's slice: nothing listens there, so checks are refused (16: kprism keeps 32 discovered at most).
CHURN_ADDRS = [f"127.0.0.{i}" for i in range(31, 47)]
SLICES = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"

# Quick stand-in timings (as tests/discovery): the lease is rewritten every second and expires
# after 3 s, so a killed or stopped apiserver leaves the slice; a graceful shutdown fails /readyz
# ("shutdown") for 2 s, then answers 429 until it drains. No --anonymous-auth: a certificate of
# another CA gets 401 (and /readyz with it too).
GO_FLAGS = ["--endpoint-lease-ttl", "3s", "--endpoint-reconcile-interval", "1s", "--watch-bookmark-interval", "2s",
            "--etcd-request-timeout", "1s", "--shutdown-delay-duration", "2s", "--shutdown-send-retry-after",
            "--log-connections"]

# kprism's timings for the run. The invariants' bounds are computed from these (see checks.py).
TIMING = {"interval": 1.0, "timeout": 0.8, "fast_interval": 0.3, "rise": 2, "fall": 2, "close_spread": 1.0,
          "first_response_timeout": 1.0, "connect_timeout": 1.0, "drain_timeout": 3.0}

# c4's /readyz answers, as --readyz-file contents (tests/standin/standin.cc).
ETCD_BODY = "[+]ping ok\n[+]log ok\n[-]etcd failed: reason withheld\n[-]etcd-readiness failed: reason withheld\n" \
            "[+]informer-sync ok\n[+]shutdown ok\nreadyz check failed\n"
SHUTDOWN_BODY = "[+]ping ok\n[+]log ok\n[+]etcd ok\n[+]etcd-readiness ok\n[+]informer-sync ok\n" \
                "[-]shutdown failed: reason withheld\nreadyz check failed\n"
OTHER_BODY = "[+]ping ok\n[+]log ok\n[+]etcd ok\n[+]etcd-readiness ok\n[-]informer-sync failed: reason withheld\n" \
             "[+]shutdown ok\nreadyz check failed\n"


def _chunked(body, size=700):
    out = ""
    for i in range(0, len(body), size):
        part = body[i:i + size]
        out += f"{len(part.encode()):x}\r\n{part}\r\n"
    return out + "0\r\n\r\n"


# A failing body longer than 2048 bytes, as Go's net/http sends chunked (kube-apiserver with many
# post-start hooks): the etcd lines last.
LONG_ETCD_BODY = "".join(f"[+]poststarthook/chaos-hook-{i:03d} ok\n" for i in range(80)) + ETCD_BODY

def _answer(code, body):
    return (f"HTTP/1.1 {code} {'OK' if code == 200 else 'Internal Server Error'}\r\n"
            f"Content-Type: text/plain; charset=utf-8\r\nContent-Length: {len(body.encode())}\r\n\r\n{body}")


# A hostile probe peer: the answer, then six answers nobody asked for, each in a TLS record of its
# own (the stand-in's "rawrecords" splits at form feeds); or the answer with a close_notify.
EXTRA_500 = "rawrecords\n" + "\f".join([_answer(200, "ok")] + [_answer(500, ETCD_BODY)] * 6)
EXTRA_200 = "rawrecords\n" + "\f".join([_answer(500, ETCD_BODY)] + [_answer(200, "ok")] * 6)
NOTIFY_200 = "rawnotify\n" + _answer(200, "ok")

C4_MODES = {
    "200": "200\n",
    "etcd500": "body 500\n" + ETCD_BODY,
    "shutdown500": "body 500\n" + SHUTDOWN_BODY,
    "other500": "body 500\n" + OTHER_BODY,
    # no Content-Length, the body ends with the close
    "nocl500": "rawclose\nHTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain; charset=utf-8\r\n"
               "X-Content-Type-Options: nosniff\r\n\r\n" + ETCD_BODY,
    # chunked, as Go sends a body over 2048 bytes, the connection kept
    "chunked500": "raw\nHTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain; charset=utf-8\r\n"
                  "X-Content-Type-Options: nosniff\r\nTransfer-Encoding: chunked\r\n\r\n" + _chunked(LONG_ETCD_BODY),
    "401": "401\n",
    "503": "503\n",
    "hang": "hang\n",
    "garbage": "garbage\n",
    "extra500": EXTRA_500,
    "extra200": EXTRA_200,
    "notify200": NOTIFY_200,
}
# What kprism should say about each (last_result, failing check that must be named or None).
C4_EXPECT = {"etcd500": ("not_ready", "etcd"), "shutdown500": ("not_ready", "shutdown"),
             "other500": ("not_ready", "informer-sync"), "nocl500": ("not_ready", "etcd"),
             "chunked500": ("not_ready", "etcd"), "401": ("unauthorized", None), "503": ("not_ready", None),
             "extra500": ("ready", None), "extra200": ("not_ready", "etcd"), "notify200": ("ready", None)}
C4_HOSTILE = ("extra500", "extra200", "notify200")


def _kill(proc):
    if proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGCONT)
        except OSError:
            pass
        proc.kill()
        proc.wait()


def kprism_flag_like(binary, pattern):
    """The first --flag of `kprism --help` matching the regex, or None."""
    try:
        out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(pattern, out.stdout + out.stderr)
    return m.group(0) if m else None


class World:
    def __init__(self, d, kprism_bin, apiserver_bin, standin_bin, netns):
        self.d, self.kbin, self.netns = d, kprism_bin, netns
        self.apiserver_bin, self.standin_bin = apiserver_bin, standin_bin
        self.pki = clu.Pki(d, extra_ips=[C4_FRONT, C4_ADDR, C5_ADDR])
        fd = os.path.join(d, "foreign")
        os.mkdir(fd)
        self.foreign = clu.Pki(fd)  # another CA: its kubelet certificate is rejected everywhere
        self.ctx = None
        self.cert = os.path.join(d, "kubelet-client-current.pem")
        shutil.copyfile(self.pki.kubelet_pem, self.cert)
        os.chmod(self.cert, 0o600)
        self.store = self._start_store()
        self.port = clu.shared_port(GO_ADDRS + [C4_FRONT, C4_ADDR, C5_ADDR])
        self.go = [clu.Apiserver(apiserver_bin, d, self.pki, i + 1, addr=a, port=self.port)
                   for i, a in enumerate(GO_ADDRS)]
        hooks = self._poststart_flag(apiserver_bin)
        self.go_flags = GO_FLAGS + (hooks or [])
        self.has_long_bodies = bool(hooks)
        for s in self.go:
            s.start(*self.go_flags)
        # what the events have done, for the checks (I8)
        now = time.monotonic()
        self.c4_net_faulty, self.c4_net_quiet_since = False, now
        self.cert_normal, self.cert_normal_since = True, now
        self.c4_readyz = os.path.join(d, "c4.readyz")
        self.c4_delay = os.path.join(d, "c4.delay")
        self.c4_hold = os.path.join(d, "c4.hold-eof")  # ms the relay holds a FIN from kprism (the half-close event)
        self.set_c4("200")
        for path in (self.c4_delay, self.c4_hold):
            with open(path, "w") as f:
                f.write("0\n")
        self.c4 = Proc([standin_bin, "--listen", f"{C4_ADDR}:{self.port}", "--name", "c4", "--tls-cert",
                        f"{d}/srv.crt", "--tls-key", f"{d}/srv.key", "--client-ca", self.pki.ca,
                        "--readyz-file", self.c4_readyz], os.path.join(d, "c4.log"), name="c4")
        self.relay = Proc([sys.executable, os.path.join(TESTS, "faults", "delay_relay.py"), "--listen",
                           f"{C4_FRONT}:{self.port}", "--to", f"{C4_ADDR}:{self.port}", "--delay-file", self.c4_delay,
                           "--hold-eof-file", self.c4_hold],
                          os.path.join(d, "relay.log"), name="relay")
        c5_readyz = os.path.join(d, "c5.readyz")
        with open(c5_readyz, "w") as f:
            f.write("200\n")
        self.c5 = Proc([standin_bin, "--listen", f"{C5_ADDR}:{self.port}", "--name", "c5", "--tls-cert",
                        f"{d}/srv.crt", "--tls-key", f"{d}/srv.key", "--client-ca", self.pki.ca,
                        "--readyz-file", c5_readyz], os.path.join(d, "c5.log"), name="c5")
        if not self.relay.wait_output("relay listening", 10) or not self.c4.wait_output("listening", 10) \
                or not self.c5.wait_output("listening", 10):
            raise RuntimeError("c4, its relay or c5 did not start")
        self.kport, self.aport = free_port(), free_port()
        self.cfg = os.path.join(d, "kprism.toml")
        self.allowed_cidrs = self._has_allowed_cidrs(kprism_bin, d)
        self.static = [self.go[0].endpoint, self.go[1].endpoint, self.c4_endpoint]
        self.write_config(self.static)
        self.cidr_flag = kprism_flag_like(kprism_bin, r"--discovery[-a-z]*(cidr|allow)[-a-z]*")
        argv = [kprism_bin, "--config", self.cfg]
        if self.cidr_flag:
            argv += [self.cidr_flag, "127.0.0.0/8"]
        # A process that only answers GET /: when /healthz is slow, the same request to it tells a
        # loaded machine (both slow) from kprism's own loop (I5).
        self.control_port = free_port()
        os.mkdir(os.path.join(d, "control"))
        self.control = Proc([sys.executable, "-m", "http.server", str(self.control_port), "--bind", "127.0.0.1",
                             "--directory", os.path.join(d, "control")], None, name="control")
        if not wait_until(lambda: self.control_get(1.0) is not None, 10, 0.05):
            raise RuntimeError("the control server did not start")
        self.klog = os.path.join(d, "kprism.log")
        self.kp = Proc(argv, self.klog, name="kprism")
        if not wait_until(lambda: self.admin_ok() or not self.kp.running(), 10, 0.05) or not self.kp.running():
            raise RuntimeError(f"kprism did not start: {self.kp.output()[-1500:]}")

    # ---- setup helpers
    def _start_store(self):
        path = f"{self.d}/store.sock"
        log = open(os.path.join(self.d, "store.log"), "w")
        p = subprocess.Popen([self.apiserver_bin, "store", "--listen", f"unix:{path}"], stdout=log, stderr=log)
        # Undone by close() at the end of the seed (a long run has many); at exit should that not run.
        self.store_token = cleanup.register("store", lambda: _kill(p))
        if not wait_until(lambda: os.path.exists(path), 10):
            raise RuntimeError("the store did not start")
        return path

    @staticmethod
    def _has_allowed_cidrs(binary, d):
        """Whether this kprism has discovery.allowed_cidrs (kprism.toml(5); by default loopback
        discovered addresses are not admitted, and every stand-in here is on loopback): asked by
        `kprism check` of a file that sets it (a kprism without it refuses the unknown key)."""
        path = os.path.join(d, "probe-allowed-cidrs.toml")
        with open(path, "w") as f:
            f.write('endpoints = ["127.0.0.1:6443"]\n[discovery]\nenabled = true\nallowed_cidrs = ["127.0.0.0/8"]\n')
        try:
            r = subprocess.run([binary, "check", "--config", path], capture_output=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return False
        finally:
            os.unlink(path)
        return r.returncode == 0

    @staticmethod
    def _poststart_flag(binary):
        """--extra-poststart-hooks N when this stand-in has it (bodies over 2048 bytes, chunked by Go)."""
        r = subprocess.run([binary, "serve", "-h"], capture_output=True, text=True, timeout=10)
        return ["--extra-poststart-hooks", "80"] if "extra-poststart-hooks" in (r.stdout + r.stderr) else None

    @property
    def c4_endpoint(self):
        return f"{C4_FRONT}:{self.port}"

    def write_config(self, endpoints):
        t = TIMING
        ms = lambda s: f"{int(s * 1000)}ms"  # noqa: E731
        text = f"""# written by tests/chaos
endpoints = {json.dumps(list(endpoints))}
bind_address = ["127.0.0.1"]
bind_port = {self.kport}
first_response_timeout = "{ms(t['first_response_timeout'])}"
close_spread = "{ms(t['close_spread'])}"
connect_timeout = "{ms(t['connect_timeout'])}"
drain_timeout = "{ms(t['drain_timeout'])}"
[health]
port = {self.aport}
interval = "{ms(t['interval'])}"
timeout = "{ms(t['timeout'])}"
fast_interval = "{ms(t['fast_interval'])}"
rise = {t['rise']}
fall = {t['fall']}
client_cert = "{self.cert}"
client_key = "{self.cert}"
ca_file = "{self.pki.ca}"
new_connection_interval = "3s"
[rebalance]
interval = "3s"
max_per_minute = 30
window = "2s"
min_age = "3s"
[discovery]
enabled = true
snapshot_file = "{self.d}/discovery.json"
{'allowed_cidrs = ["127.0.0.0/8"]' if self.allowed_cidrs else ''}
[log]
level = "info"
"""
        tmp = self.cfg + ".tmp"
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self.cfg)
        if self.c4_endpoint in endpoints and self.c4_endpoint not in getattr(self, "configured", []):
            self.c4_configured_since = time.monotonic()  # a new checker: no result yet (I8 waits)
        self.configured = list(endpoints)

    # ---- kprism
    def control_get(self, timeout):
        """Milliseconds a GET / to the control server took, or None without an answer."""
        t = time.monotonic()
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.control_port, timeout=timeout)
            c.request("GET", "/")
            c.getresponse().read()
            c.close()
        except OSError:
            return None
        return (time.monotonic() - t) * 1000

    def admin(self, path, timeout=2.0):
        """(status, body) or (None, error)."""
        return admin.get(self.aport, path, timeout)

    def admin_ok(self):
        return self.admin("/healthz", 1.0)[0] == 200

    def status(self):
        return admin.status(self.aport)

    # ---- c4
    def set_c4(self, mode):
        tmp = self.c4_readyz + ".tmp"
        with open(tmp, "w") as f:
            f.write(C4_MODES[mode])
        os.replace(tmp, self.c4_readyz)
        self.c4_mode, self.c4_mode_since = mode, time.monotonic()

    def set_c4_delay(self, ms):
        with open(self.c4_delay, "w") as f:
            f.write(f"{ms}\n")

    def set_c4_hold(self, ms):
        with open(self.c4_hold, "w") as f:
            f.write(f"{ms}\n")

    # ---- Go stand-ins
    def go_restart(self, s, *extra):
        if s.proc is not None and s.proc.poll() is None:
            _kill(s.proc)
        s.start(*self.go_flags, *extra)

    def go_kill(self, s):
        if s.proc is not None:
            _kill(s.proc)

    def go_signal(self, s, sig):
        if s.proc is not None and s.proc.poll() is None:
            os.kill(s.proc.pid, sig)

    def go_running(self, s):
        return s.proc is not None and s.proc.poll() is None

    # ---- the API (straight to a stand-in, not through kprism)
    def api(self, s, method, path, body=None, timeout=2.0):
        if self.ctx is None:
            self.ctx = load.tls_context(self.pki)
        c = http.client.HTTPSConnection(s.addr, s.port, context=self.ctx, timeout=timeout)
        try:
            c.request(method, path, json.dumps(body) if body is not None else None,
                      {"Content-Type": "application/json"} if body is not None else {})
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def post_slice(self, s, name, addrs, port):
        return self.api(s, "POST", SLICES, self.slice_body(name, addrs, port))[0]

    @staticmethod
    def slice_body(name, addrs, port):
        return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": name, "namespace": "default", "labels": {"kubernetes.io/service-name": "kubernetes"}},
                "addressType": "IPv4", "endpoints": [{"addresses": [a], "conditions": {"ready": True}} for a in addrs],
                "ports": [{"name": "https", "protocol": "TCP", "port": port}]}

    def delete_slice(self, s, name):
        return self.api(s, "DELETE", f"{SLICES}/{name}")[0]

    # ---- netns faults
    def iptables(self, op, addr):
        subprocess.run(["iptables", op, "INPUT", "-d", addr, "-p", "tcp", "--dport", str(self.port), "-j", "DROP"],
                       capture_output=True, timeout=10)

    def close(self):
        for a in GO_ADDRS + [C4_FRONT]:
            if self.netns:
                for _ in range(3):
                    self.iptables("-D", a)
        for s in self.go:
            if s.proc is not None:
                _kill(s.proc)
        self.c4.kill()
        self.c5.kill()
        self.relay.kill()
        self.control.kill()
        cleanup.undo(self.store_token)
