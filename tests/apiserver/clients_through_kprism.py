#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Real Kubernetes clients through the real kprism, in front of three Go apiserver stand-ins on
one shared store, while those apiservers are restarted one after another the graceful way.

- kubectl (if installed): get, create, get -w through kprism.
- python3-kubernetes: a watch that resumes from its last resourceVersion after each disconnect
  (what client-go's reflector does), while a writer creates a ConfigMap every 100 ms through
  kprism; every object must arrive exactly once, in resourceVersion order.
- A steady stream of new TLS client connections (GET /version, one connection each), as
  kubelets and agents reconnecting; none may fail.
The rolling restart: each apiserver gets SIGTERM with --shutdown-delay-duration 2s (its /readyz
fails at once, so kprism stops choosing it and closes its connections), exits, and is started
again; the next one only after kprism sees it up again.

Usage: clients_through_kprism.py KPRISM_BIN APISERVER_BIN
Prints "clients: ok: ..." / "clients: FAIL: ..." lines, ends with "clients: N passed, M failed".
Needs /usr/bin/python3 with python3-kubernetes and openssl; SKIPs (exit 0) without them.
"""
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

try:
    import kubernetes
    from kubernetes import client as kclient, watch as kwatch
except ImportError:
    print("clients: SKIP: python3-kubernetes is not installed (apt-get install python3-kubernetes)")
    sys.exit(0)
if not shutil.which("openssl"):
    print("clients: SKIP: openssl not found")
    sys.exit(0)

KPRISM, APISERVER = (os.path.abspath(a) for a in sys.argv[1:3])
ADDRS = ["127.0.0.11", "127.0.0.12", "127.0.0.13"]
passed = failed = 0


def ok(msg):
    global passed
    passed += 1
    print(f"clients: ok: {msg}", flush=True)


def fail(msg):
    global failed
    failed += 1
    print(f"clients: FAIL: {msg}", flush=True)


def free_port(addr="127.0.0.1"):
    s = socket.socket()
    s.bind((addr, 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_for(pred, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    fail(f"timed out after {seconds} s waiting for {what}")
    return False


def pki(d):
    def run(*a):
        subprocess.run(a, cwd=d, check=True, capture_output=True)
    run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=clients-ca", "-days", "1")
    sans = ",".join(["DNS:kubernetes", "IP:127.0.0.1"] + [f"IP:{a}" for a in ADDRS])
    for name, subj, ext in (("srv", "/CN=kube-apiserver", f"subjectAltName={sans}\nextendedKeyUsage=serverAuth"),
                            ("kubelet", "/O=system:nodes/CN=system:node:clients", "extendedKeyUsage=clientAuth"),
                            ("adm", "/O=system:masters/CN=clients-admin", "extendedKeyUsage=clientAuth")):
        run("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subj)
        open(os.path.join(d, f"{name}.ext"), "w").write(ext + "\n")
        run("openssl", "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.crt", "-days", "1", "-extfile", f"{name}.ext")
    with open(os.path.join(d, "kubelet.pem"), "w") as f:
        f.write(open(os.path.join(d, "kubelet.crt")).read() + open(os.path.join(d, "kubelet.key")).read())


class Apiserver:
    def __init__(self, d, i, port):
        self.d, self.i, self.addr, self.port = d, i, ADDRS[i], port
        self.proc = None

    def start(self):
        self.log = open(os.path.join(self.d, f"a{self.i}.log"), "a")
        self.proc = subprocess.Popen(
            [APISERVER, "serve", "--store", f"unix:{self.d}/store.sock", "--name", f"a{self.i}",
             "--tls-cert-file", f"{self.d}/srv.crt", "--tls-private-key-file", f"{self.d}/srv.key",
             "--client-ca-file", f"{self.d}/ca.crt", "--bind-address", self.addr,
             "--secure-port", str(self.port), "--shutdown-delay-duration", "2s",
             "--endpoint-lease-ttl", "3s", "--endpoint-reconcile-interval", "1s"],
            stdout=self.log, stderr=self.log)

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode if self.proc else None


def kprism_status(admin):
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/status", timeout=2) as r:
        return json.load(r)


def up_count(admin):
    try:
        return sum(1 for u in kprism_status(admin)["upstreams"] if u.get("state") == "up")
    except OSError:
        return -1


def main():
    d = tempfile.mkdtemp(prefix="kprism-clients-")
    procs, stoppers = [], []
    try:
        pki(d)
        store = subprocess.Popen([APISERVER, "store", "--listen", f"unix:{d}/store.sock"],
                                 stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "store.log"), "w"))
        procs.append(store)
        ports = [free_port(a) for a in ADDRS]
        servers = [Apiserver(d, i, p) for i, p in enumerate(ports)]
        for s in servers:
            s.start()
        stoppers.extend(servers)
        port, admin = free_port(), free_port()
        kp = subprocess.Popen(
            [KPRISM, "--endpoints", ",".join(f"{s.addr}:{s.port}" for s in servers),
             "--bind-port", str(port), "--health-port", str(admin),
             "--client-cert", f"{d}/kubelet.pem", "--client-key", f"{d}/kubelet.pem", "--ca-file", f"{d}/ca.crt",
             "--health-interval", "1s", "--health-timeout", "800ms", "--health-fast-interval", "200ms"],
            stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "kprism.log"), "w"))
        procs.append(kp)
        if not wait_for(lambda: up_count(admin) == 3, 20, "kprism to see three apiservers up"):
            return
        ok("kprism sees the three stand-ins up (mTLS GET /readyz with the kubelet certificate)")

        kubeconfig = os.path.join(d, "kubeconfig")
        with open(kubeconfig, "w") as f:
            f.write(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "https://127.0.0.1:{port}", tls-server-name: kubernetes, certificate-authority: {d}/ca.crt}}}}]
users: [{{name: u, user: {{client-certificate: {d}/adm.crt, client-key: {d}/adm.key}}}}]
contexts: [{{name: c, context: {{cluster: c, user: u}}}}]
current-context: c
""")
        kubectl_checks(kubeconfig)

        kubernetes.config.load_kube_config(config_file=kubeconfig)
        api = kclient.CoreV1Api()
        v = kclient.VersionApi().get_code()
        ok(f"python3-kubernetes through kprism: version {v.git_version}") if v.git_version else fail("version")

        stop = threading.Event()
        created, seen, watch_errors = [], [], []
        conn_fail, conn_ok = [], [0]

        def writer():
            n = 0
            while not stop.is_set():
                name = f"w-{n:05d}"
                for attempt in range(50):  # a failed create is retried, as controllers do
                    try:
                        api.create_namespaced_config_map("default", {"metadata": {"name": name}, "data": {"n": str(n)}},
                                                         _request_timeout=5)
                        break
                    except kclient.exceptions.ApiException as e:
                        if e.status == 409:
                            break  # the first attempt had landed
                        time.sleep(0.1)
                    except Exception:
                        time.sleep(0.1)
                created.append(name)
                n += 1
                time.sleep(0.1)

        start_rv = api.list_namespaced_config_map("default").metadata.resource_version  # before any write

        def watcher():
            rv = start_rv
            while not stop.is_set():
                try:
                    for ev in kwatch.Watch().stream(api.list_namespaced_config_map, "default", resource_version=rv,
                                                    timeout_seconds=30, _request_timeout=60):
                        o = ev["object"]
                        rv = o.metadata.resource_version
                        if ev["type"] == "ADDED" and o.metadata.name.startswith("w-"):
                            seen.append((o.metadata.name, int(rv), time.monotonic()))
                        if stop.is_set():
                            return
                except Exception as e:  # disconnected: resume from rv, like a reflector
                    watch_errors.append(type(e).__name__)
                    time.sleep(0.05)

        ctx = ssl.create_default_context(cafile=f"{d}/ca.crt")
        ctx.load_cert_chain(f"{d}/adm.crt", f"{d}/adm.key")

        def reconnector():
            while not stop.is_set():
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=10) as s, \
                            ctx.wrap_socket(s, server_hostname="kubernetes") as t:
                        t.sendall(b"GET /version HTTP/1.1\r\nHost: kubernetes\r\nConnection: close\r\n\r\n")
                        data = b""
                        while chunk := t.recv(4096):
                            data += chunk
                    if data.startswith(b"HTTP/1.1 200"):
                        conn_ok[0] += 1
                    else:
                        conn_fail.append(data[:40])
                except Exception as e:
                    conn_fail.append(repr(e))
                time.sleep(0.05)

        threads = [threading.Thread(target=t, daemon=True) for t in (writer, watcher, reconnector)]
        for t in threads:
            t.start()
        time.sleep(2)
        for s in servers:  # rolling graceful restart
            rc = s.stop()
            if rc != 0:
                fail(f"a{s.i} exited {rc} on SIGTERM")
            s.start()
            wait_for(lambda: up_count(admin) == 3, 30, f"kprism to see a{s.i} up again")
            time.sleep(1)
        time.sleep(2)
        stop.set()
        for t in threads:
            t.join(70)

        names = [n for n, _, _ in seen]
        rvs = [r for _, r, _ in seen]
        missing = sorted(set(created) - set(names))
        dups = len(names) - len(set(names))
        if created and not missing and not dups and rvs == sorted(rvs):
            gaps = [b[2] - a[2] for a, b in zip(seen, seen[1:])]
            ok(f"watch resumed across the rolling restart: {len(created)} objects created, each seen once, in "
               f"resourceVersion order ({len(watch_errors)} disconnects, longest gap {max(gaps):.2f} s)")
        else:
            fail(f"watch: {len(created)} created, {len(missing)} missing (first {missing[:3]}), {dups} duplicates, "
                 f"ordered {rvs == sorted(rvs)}")
        if conn_ok[0] > 50 and not conn_fail:
            ok(f"{conn_ok[0]} new TLS connections through kprism during the restarts, none failed")
        else:
            fail(f"new connections: {conn_ok[0]} ok, {len(conn_fail)} failed: {conn_fail[:3]}")
        for s in servers:
            s.stop()
    finally:
        for s in stoppers:  # also after an early return: no stand-in outlives the test
            if s.proc and s.proc.poll() is None:
                s.proc.kill()
                s.proc.wait()
        for p in procs[::-1]:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
        if failed:
            for name in sorted(os.listdir(d)):
                if name.endswith(".log"):
                    print(f"--- {name}\n" + open(os.path.join(d, name)).read()[-3000:])
        shutil.rmtree(d, ignore_errors=True)


def kubectl_checks(kubeconfig):
    if not shutil.which("kubectl"):
        print("clients: SKIP: kubectl not found (the kubectl checks)")
        return
    k = ["kubectl", "--kubeconfig", kubeconfig, "--request-timeout=10s"]
    r = subprocess.run(k + ["create", "configmap", "via-kprism", "--from-literal=a=b"], capture_output=True, text=True)
    ok("kubectl create through kprism") if r.stdout.strip() == "configmap/via-kprism created" else fail(f"create: {r}")
    r = subprocess.run(k + ["get", "configmap", "via-kprism", "-o", "jsonpath={.data.a}"], capture_output=True, text=True)
    ok("kubectl get through kprism") if r.stdout == "b" else fail(f"get: {r}")
    w = subprocess.Popen(k + ["get", "configmaps", "-w"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines = []
    threading.Thread(target=lambda: lines.extend(w.stdout), daemon=True).start()
    wait_for(lambda: any(l.startswith("via-kprism ") for l in lines), 10, "kubectl get -w to list")
    subprocess.run(k + ["create", "configmap", "via-kprism-2"], capture_output=True)
    seen = wait_for(lambda: any(l.startswith("via-kprism-2 ") for l in lines), 10, "kubectl get -w to see a new one")
    w.terminate()
    w.wait()
    if seen:
        ok("kubectl get -w through kprism saw an object created after it started")


main()
print(f"clients: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
