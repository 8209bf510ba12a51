#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The datacenter-loss drill (tests/drill/README.md): three sites in network namespaces, one real
3-member etcd, the Go apiserver stand-in on each control-plane node, every balancer of
balancers.toml on every node with kubelet-like clients behind each, then network cuts in the
router. Writes a markdown report; asserts kprism's outcome only (exit 1 if it fails).
usage: run.py KPRISM APISERVER --out FILE [--quick] [--only 1,2a,...]"""

import argparse
import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report  # noqa: E402
import topo  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
NODES = [("cp-a", "a", 10), ("a1", "a", 21), ("cp-b", "b", 10), ("b1", "b", 21), ("cp-w", "w", 10)]
CP = {"a": "cp-a", "b": "cp-b", "w": "cp-w"}
# id: (title, what the router does, etcd leader placed in, apiserver restarted in the cut)
CUTS = {
    "1": ("A isolated", "isolate a", None, None),
    "2a": ("A-B cut, both see W, leader in A", "drop a b; drop b a", "a", None),
    "2b": ("A-B cut, both see W, leader in B", "drop a b; drop b a", "b", None),
    "3": ("asymmetric: A->B dropped", "drop a b", "a", None),
    "4": ("stateful firewall A-B: NEW dropped, ESTABLISHED pass", "new a b; new b a", "a", None),
    "5": ("W lost", "isolate w", "a", None),
    "6": ("A-B cut, leader in B, A's apiserver restarted in the cut", "drop a b; drop b a", "b", "cp-a"),
}
CLONE_NEWNET = 0x40000000


def skip(why):
    print(f"drill: skipped: {why}")
    sys.exit(0)


def enter_netns(name):
    """This thread (the harness's main one) into the router's namespace: its HTTP polls go there."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns")
    os.close(fd)


def wait_until(fn, seconds, step=0.2):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if fn():
            return True
        time.sleep(step)
    return fn()


def openssl(d, *a):
    subprocess.run(["openssl", *a], cwd=d, check=True, capture_output=True)


def make_pki(d, cp_ips, nodes):
    openssl(d, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "ca.key",
            "-out", "ca.crt", "-subj", "/CN=drill-ca", "-days", "2")
    sans = ",".join(["DNS:kubernetes", "IP:127.0.0.1"] + [f"IP:{ip}" for ip in cp_ips])
    certs = [("srv", "/CN=kube-apiserver", f"subjectAltName={sans}\nextendedKeyUsage=serverAuth")]
    certs += [(f"kubelet-{n}", f"/O=system:nodes/CN=system:node:{n}", "extendedKeyUsage=clientAuth") for n in nodes]
    for name, subj, ext in certs:
        openssl(d, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", f"{name}.key",
                "-out", f"{name}.csr", "-subj", subj)
        with open(os.path.join(d, f"{name}.ext"), "w") as f:
            f.write(ext + "\n")
        openssl(d, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{name}.crt", "-days", "1", "-extfile", f"{name}.ext")
        with open(os.path.join(d, f"{name}.pem"), "w") as f:
            f.write(open(os.path.join(d, f"{name}.crt")).read() + open(os.path.join(d, f"{name}.key")).read())


def load_balancers(path, extra):
    """balancers.toml, then the [[balancer]] blocks of the file DRILL_BALANCERS_EXTRA names, if any
    (a balancer built elsewhere, tests/drill/README.md). Exits with the reason when a block lacks a
    name, port or command, or reuses a name or a port (its own or port + 100)."""
    out = []
    for p in [path] + ([extra] if extra else []):
        try:
            with open(p, "rb") as f:
                blocks = tomllib.load(f).get("balancer", [])
        except (OSError, tomllib.TOMLDecodeError) as e:
            sys.exit(f"drill: {p}: {e}")
        if not isinstance(blocks, list) or not blocks:
            sys.exit(f"drill: {p}: no [[balancer]] block")
        for i, b in enumerate(blocks, 1):
            where = f"{p}: balancer {i}"
            for k, t in (("name", str), ("port", int), ("command", list)):
                if not isinstance(b.get(k), t):
                    sys.exit(f"drill: {where}: `{k}` missing or not a {t.__name__}")
            if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,30}", b["name"]):
                sys.exit(f"drill: {where}: name {b['name']!r}: lower-case letters, digits and '-', at most 31")
            if not 1024 <= b["port"] <= 65435:
                sys.exit(f"drill: {where}: port {b['port']}: 1024-65435 (port + 100 is its admin port)")
            for o in out:
                if o["name"] == b["name"] or {o["port"], o["port"] + 100} & {b["port"], b["port"] + 100}:
                    sys.exit(f"drill: {where}: {b['name']} ({b['port']}) clashes with {o['name']} ({o['port']}; "
                             f"each takes its port and port + 100)")
            if p != path and "judged" in b:
                sys.exit(f"drill: {where}: `judged` is for the balancers of {os.path.basename(path)} (kprism): "
                         "the drill asserts only kprism's outcome")
            if "upstream" not in b and "{upstreams}" in " ".join(b["command"]) + b.get("config", ""):
                sys.exit(f"drill: {where}: {{upstreams}} used but no `upstream` template")
            b.setdefault("upstream", "")
            out.append(b)
    return out


def http_get(url, timeout=2.0):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read().decode()
    except OSError:
        return None


class Drill:
    def __init__(self, a):
        self.a = a
        self.t = None
        self.d = tempfile.mkdtemp(prefix="kprism-drill-")
        self.logdir = os.path.join(self.d, "logs")
        os.makedirs(self.logdir)
        self.events = []  # (wall time, text)
        self.etcd_samples = []
        self.stop_monitor = threading.Event()
        self.apiservers = {}
        self.node_balancers = {}

    def note(self, text):
        self.events.append((time.time(), text))
        print(f"drill: {time.strftime('%H:%M:%S')} {text}", flush=True)

    # --- control plane -------------------------------------------------------------------
    def start_etcd(self):
        cluster = ",".join(f"{CP[s]}=http://{self.t.nodes[CP[s]].ip}:2380" for s in ("a", "b", "w"))
        for s in ("a", "b", "w"):
            n = self.t.nodes[CP[s]]
            n.popen(["etcd", "--name", n.name, "--data-dir", f"{self.d}/etcd-{n.name}",
                     "--listen-client-urls", f"http://{n.ip}:2379,http://127.0.0.1:2379",
                     "--advertise-client-urls", f"http://{n.ip}:2379",
                     "--listen-peer-urls", f"http://{n.ip}:2380", "--initial-advertise-peer-urls", f"http://{n.ip}:2380",
                     "--initial-cluster", cluster, "--initial-cluster-state", "new", "--initial-cluster-token", "drill",
                     "--heartbeat-interval", "100", "--election-timeout", "1000", "--pre-vote=true",
                     # progress notifications keep the stand-in's watch bookmarks fresh (10 m by default)
                     "--experimental-watch-progress-notify-interval", "5s",
                     "--snapshot-count", "10000", "--quota-backend-bytes", str(512 << 20)],
                    f"{self.logdir}/etcd-{n.name}.log")
        ok = wait_until(lambda: self.etcd_leader() is not None, 30, 0.5)
        if not ok:
            raise RuntimeError("etcd did not elect a leader in 30 s")
        self.note(f"etcd up, leader {self.etcd_leader()}")

    def etcd_status(self):
        """{member name: (member id hex, leader id hex)} from `etcdctl endpoint status` per member."""
        out = {}
        for s in ("a", "b", "w"):
            n = self.t.nodes[CP[s]]
            try:
                r = subprocess.run(["etcdctl", "--endpoints", f"http://{n.ip}:2379", "--command-timeout", "2s",
                                    "endpoint", "status", "-w", "json"], capture_output=True, text=True, timeout=5,
                                   env={**os.environ, "ETCDCTL_API": "3"})
                st = json.loads(r.stdout)[0]["Status"]
                out[n.name] = (format(st["header"]["member_id"], "x"), format(st["leader"], "x"))
            except (ValueError, KeyError, IndexError, subprocess.SubprocessError):
                pass
        return out

    def etcd_leader(self):
        st = self.etcd_status()
        ids = {mid: name for name, (mid, _) in st.items()}
        leaders = {ids.get(lid) for _, (_, lid) in st.items() if lid in ids}
        return leaders.pop() if len(leaders) == 1 and len(st) == 3 else None

    def move_leader(self, site):
        want = CP[site]
        for _ in range(5):
            cur = self.etcd_leader()
            if cur == want:
                self.note(f"etcd leader in {want}")
                return
            st = self.etcd_status()
            if cur is None or want not in st:
                time.sleep(1)
                continue
            subprocess.run(["etcdctl", "--endpoints", f"http://{self.t.nodes[cur].ip}:2379", "move-leader", st[want][0]],
                           capture_output=True, text=True, timeout=15, env={**os.environ, "ETCDCTL_API": "3"})
            wait_until(lambda: self.etcd_leader() == want, 10, 0.5)
        if self.etcd_leader() != want:
            raise RuntimeError(f"could not move the etcd leader to {want}")

    def etcd_monitor(self):
        """Every second each member's etcd_server_has_leader and leader_changes_seen_total."""
        while not self.stop_monitor.is_set():
            t0 = time.monotonic()
            row = {"t": time.time()}
            for s in ("a", "b", "w"):
                n = self.t.nodes[CP[s]]
                m = http_get(f"http://{n.ip}:2379/metrics", 0.8)
                if m is None:
                    row[n.name] = None
                    continue
                hl = re.search(r"^etcd_server_has_leader (\S+)", m, re.M)
                lc = re.search(r"^etcd_server_leader_changes_seen_total (\S+)", m, re.M)
                row[n.name] = {"has_leader": float(hl.group(1)) if hl else None,
                               "changes": float(lc.group(1)) if lc else None}
            self.etcd_samples.append(row)
            self.stop_monitor.wait(max(0.05, 1.0 - (time.monotonic() - t0)))

    def apiserver_argv(self, n):
        common = ["--tls-cert-file", f"{self.d}/srv.crt", "--tls-private-key-file", f"{self.d}/srv.key",
                  "--client-ca-file", f"{self.d}/ca.crt", "--bind-address", n.ip, "--secure-port", "6443",
                  "--name", n.name, "--extra-poststart-hooks", "50"]
        if self.etcd_mode:
            return [self.a.apiserver, "serve", "--etcd-servers", f"http://{n.ip}:2379", "--node-name", n.name,
                    "--zone", n.site, *(["--shared-endpointslice"] if self.shared_slice else []), *common]
        return [self.a.apiserver, "serve", "--store", f"unix:{self.d}/store.sock", *common]

    def start_apiserver(self, name):
        n = self.t.nodes[name]
        self.apiservers[name] = n.popen(self.apiserver_argv(n), f"{self.logdir}/apiserver-{name}.log")

    def apiserver_ready(self, name):
        n = self.t.nodes[name]
        r = n.exec("curl", "-sk", "--max-time", "3", "--cert", f"{self.d}/kubelet-{name}.pem", "-o", "/dev/null",
                   "-w", "%{http_code}", f"https://{n.ip}:6443/readyz", check=False)
        return r.stdout.strip() == "200"

    # --- nodes ---------------------------------------------------------------------------
    def start_balancers(self, node):
        conf = self.a.balancer_conf
        ups = [{"name": CP[s], "host": self.t.nodes[CP[s]].ip, "port": 6443, "zone": s} for s in ("a", "b", "w")]
        local = next(u for u in ups if u["zone"] == node.site)
        out = []
        for b in conf:
            wd = os.path.join(self.d, "nodes", node.name, b["name"])
            os.makedirs(wd, exist_ok=True)
            v = {"listen": f"127.0.0.1:{b['port']}", "port": b["port"], "admin_port": b["port"] + 100, "workdir": wd,
                 "config": f"{wd}/{b['name']}.conf", "cert": f"{self.d}/kubelet-{node.name}.crt",
                 "key": f"{self.d}/kubelet-{node.name}.key", "certkey": f"{self.d}/kubelet-{node.name}.pem",
                 "ca": f"{self.d}/ca.crt", "zone": node.site, "node": node.name, "kprism": self.a.kprism,
                 "local_upstream": f"{local['host']}:{local['port']}"}
            try:
                v["upstreams"] = b.get("upstream_join", "\n").join(
                    b["upstream"].format(**v, uname=u["name"], uhost=u["host"], uport=u["port"],
                                         uendpoint=f"{u['host']}:{u['port']}", uzone=u["zone"]) for u in ups)
                conf_text = b["config"].format(**v) if "config" in b else None
                argv = [x.format(**v) for x in b["command"]]
            except (KeyError, IndexError, ValueError) as e:
                raise RuntimeError(f"balancer {b['name']}: a template names {e}, which is no placeholder "
                                   f"(tests/drill/balancers.toml lists them; literal braces are {{{{ and }}}})")
            if conf_text is not None:
                with open(v["config"], "w") as f:
                    f.write(conf_text)
            p = node.popen(argv, f"{self.logdir}/{node.name}--{b['name']}.log")
            out.append({"name": b["name"], "label": b.get("label", b["name"]), "port": b["port"],
                        "judged": bool(b.get("judged")),
                        "admin_port": b["port"] + 100, "status": b.get("status"), "workdir": wd, "pid": p.pid})
        spec = {"node": node.name, "logdir": self.logdir, "cert": f"{self.d}/kubelet-{node.name}.crt",
                "key": f"{self.d}/kubelet-{node.name}.key", "ca": f"{self.d}/ca.crt", "balancers": out,
                "upstreams": ups, "deadline_s": self.deadline_s, "http1": "h1" in self.a.models}
        path = f"{self.d}/kubelet-{node.name}.json"
        with open(path, "w") as f:
            json.dump(spec, f)
        node.popen(["/usr/bin/python3", os.path.join(HERE, "kubelet.py"), path], f"{self.logdir}/kubelet-{node.name}.log")
        if "h2" in self.a.models:
            node.popen([self.a.client, path], f"{self.logdir}/drill-client-{node.name}.log")
        return out

    def check_kprism_started(self):
        """Every node's kprism logs `msg=listening` within 5 s of its start; one that does not is
        looked at from outside while it hangs (wchan, kernel stack, descriptors, 2 s of strace),
        into the work directory's logs (kept with --keep), and named here."""
        procs = {(n, b["name"]): b["pid"] for n in self.t.nodes for b in self.node_balancers[n] if b["judged"]}
        logs = {k: f"{self.logdir}/{k[0]}--{k[1]}.log" for k in procs}
        started = lambda n: os.path.exists(logs[n]) and "msg=listening" in open(logs[n]).read()
        wait_until(lambda: all(started(n) for n in procs), 5, 0.1)
        for n, pid in procs.items():
            if started(n):
                continue
            out = [f"# {n[0]}: {n[1]} pid {pid}, no msg=listening after 5 s", open(logs[n]).read()]
            for f in ("wchan", "stack", "status", "cmdline"):
                try:
                    out.append(f"## /proc/{pid}/{f}\n" + open(f"/proc/{pid}/{f}", "rb").read().decode(errors="replace"))
                except OSError as e:
                    out.append(f"## /proc/{pid}/{f}: {e}")
            for argv in (["ls", "-l", f"/proc/{pid}/fd"], ["timeout", "2", "strace", "-f", "-tt", "-p", str(pid)]):
                if not shutil.which(argv[0]) or (argv[0] == "timeout" and not shutil.which("strace")):
                    out.append(f"## {' '.join(argv)}: not installed")
                    continue
                r = subprocess.run(argv, capture_output=True, text=True, timeout=10)
                out.append(f"## {' '.join(argv)}\n{r.stdout}{r.stderr}")
            with open(f"{self.logdir}/{n[0]}--{n[1]}-hang.txt", "w") as f:
                f.write("\n".join(out))
            self.note(f"{n[0]}: {n[1]} (pid {pid}) has not logged msg=listening 5 s after its start: "
                      f"{self.logdir}/{n[0]}--{n[1]}-hang.txt")

    def heartbeats_missing(self):
        out = []
        for n in self.t.nodes:
            for b in self.balancers:
                for m in self.a.models:
                    p = f"{self.logdir}/{n}--{b['name']}.{m}.jsonl"
                    if not os.path.exists(p) or not any(e["k"] == "heartbeat" and e.get("ok") for e in report.load(p)):
                        out.append(f"{n}--{b['name']}.{m}")
        return out

    # --- cuts ----------------------------------------------------------------------------
    def apply(self, how):
        for step in how.split("; "):
            w = step.split()
            if w[0] == "isolate":
                self.t.isolate(w[1])
            elif w[0] == "drop":
                self.t.drop(w[1], w[2])
            elif w[0] == "new":
                self.t.drop(w[1], w[2], new_only=True)

    def run_cut(self, cid):
        title, how, leader, restart = CUTS[cid]
        if leader:
            self.move_leader(leader)
        wait_until(lambda: False, self.a.baseline)
        start = time.time()
        self.note(f"cut {cid} ({title}): {how}")
        self.apply(how)
        if restart:
            wait_until(lambda: False, 20)
            self.note(f"cut {cid}: {restart}'s apiserver killed and started again")
            p = self.apiservers[restart]
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)
            self.start_apiserver(restart)
        wait_until(lambda: False, self.a.hold - (time.time() - start))
        heal = time.time()
        self.t.heal()
        self.note(f"cut {cid} healed")
        wait_until(lambda: False, self.a.settle)
        return {"id": cid, "title": title, "how": how, "leader": leader, "start": start, "heal": heal,
                "end": time.time()}

    def run(self):
        a = self.a
        cuts = a.only.split(",") if a.only else (["2a"] if a.quick else list(CUTS))
        per_cut = a.baseline + a.hold + a.settle + 30
        self.deadline_s = 300 + per_cut * len(cuts)
        help_text = subprocess.run([a.apiserver, "serve", "--help"], capture_output=True, text=True).stderr
        self.etcd_mode = "etcd-servers" in help_text
        self.shared_slice = "shared-endpointslice" in help_text
        if not self.etcd_mode:
            self.note("the apiserver stand-in has no --etcd-servers: it runs on its shared store, not through etcd "
                      "(the network path is exercised, the etcd quorum is not)")
        self.t = topo.Topology(self.d, NODES, {"a-w": a.aw_ms, "b-w": a.bw_ms, "a-b": a.ab_ms}, self.deadline_s + 60,
                                 rate_mbit=a.rate_mbit, jitter_ms=a.jitter_ms)
        enter_netns(self.t.router)
        make_pki(self.d, [self.t.nodes[CP[s]].ip for s in ("a", "b", "w")], list(self.t.nodes))
        self.start_etcd()
        threading.Thread(target=self.etcd_monitor, daemon=True).start()
        if not self.etcd_mode:
            self.t.popen([a.apiserver, "store", "--listen", f"unix:{self.d}/store.sock"], f"{self.logdir}/store.log")
            wait_until(lambda: os.path.exists(f"{self.d}/store.sock"), 10)
        for s in ("a", "b", "w"):
            self.start_apiserver(CP[s])
        if not wait_until(lambda: all(self.apiserver_ready(CP[s]) for s in ("a", "b", "w")), 30, 0.5):
            raise RuntimeError("the apiservers did not become ready in 30 s")
        self.note("apiservers ready")
        for n in self.t.nodes.values():
            self.balancers = self.node_balancers[n.name] = self.start_balancers(n)
        self.check_kprism_started()
        if not wait_until(lambda: not self.heartbeats_missing(), 60, 0.5):
            miss = self.heartbeats_missing()
            for m in miss[:3]:
                p = f"{self.logdir}/{m}.jsonl"
                print(f"drill: {m}: " + (open(p).read()[-600:] if os.path.exists(p) else "no log"))
            raise RuntimeError(f"no heartbeat went through in 60 s for {', '.join(miss)}")
        self.note("every client has a heartbeat through every balancer")
        results = []
        for cid in cuts:
            results.append(self.run_cut(cid))
        self.stop_monitor.set()
        return results

    def close(self):
        self.stop_monitor.set()
        if self.t:
            self.t.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kprism")
    ap.add_argument("apiserver")
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="")
    ap.add_argument("--balancers", default=os.path.join(HERE, "balancers.toml"))
    ap.add_argument("--client", default="", help="drill-client, the HTTP/2 client-go model (tests/drill/client)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs, configs)")
    a = ap.parse_args()
    env = os.environ
    a.ab_ms = float(env.get("DRILL_AB_MS", "10"))
    a.aw_ms, a.bw_ms = 23.0, 43.0
    a.hold = float(env.get("DRILL_CUT_SECONDS", "60" if a.quick else "90"))
    a.baseline = 15.0 if a.quick else 20.0
    a.settle = 30.0 if a.quick else 60.0
    a.extra = env.get("DRILL_BALANCERS_EXTRA", "")
    a.rate_mbit = float(env.get("DRILL_LINK_MBIT", "100"))
    a.jitter_ms = float(env.get("DRILL_JITTER_MS", "1"))
    a.models = {"both": ["h2", "h1"], "h2": ["h2"], "http1": ["h1"]}.get(env.get("DRILL_CLIENTS", "both"))
    if a.models is None:
        sys.exit(f"drill: DRILL_CLIENTS={env['DRILL_CLIENTS']}: both, h2 or http1")
    a.balancer_conf = load_balancers(a.balancers, env.get("DRILL_BALANCERS_EXTRA", ""))
    if os.geteuid() != 0:
        skip("needs root (network namespaces, iptables)")
    missing = [t for t in ("etcd", "etcdctl", "haproxy", "nginx", "iptables", "ss", "ip", "openssl", "curl")
               if not shutil.which(t)]
    if not os.path.exists("/usr/lib/nginx/modules/ngx_stream_module.so"):
        missing.append("libnginx-mod-stream")
    if not os.path.exists("/dev/net/tun"):
        missing.append("/dev/net/tun")
    if missing:
        skip(f"missing {', '.join(missing)} (make deps)")
    for b in (a.kprism, a.apiserver):
        if not os.access(b, os.X_OK):
            skip(f"{b} not built")
    if "h2" in a.models and not os.access(a.client, os.X_OK):
        sys.exit("drill: the HTTP/2 client model needs --client (drill-client, `make build/drill-client`); "
                 "DRILL_CLIENTS=http1 runs without it")
    dr = Drill(a)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, lambda *_: (_ for _ in ()).throw(SystemExit(130)))
    t0 = time.time()
    ok = False
    try:
        results = dr.run()
        ok = report.write(a, dr, results, t0)
    finally:
        dr.close()
        if a.keep:
            print(f"drill: work directory kept: {dr.d}")
        else:
            shutil.rmtree(dr.d, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
