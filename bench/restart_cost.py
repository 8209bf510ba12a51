#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""What a restart of one apiserver costs it in the first seconds with many nodes probing it
(make bench-probe-restart): NODES probers (default 1000) watch ONE apiserver, made of ENDPOINTS (10) Go stand-in
`kprism-apiserver serve` processes on one store, on 127.0.15.1..10; NODES / ENDPOINTS kprism
processes (100) each list those 10 as their endpoints, with default health settings (interval 5s,
fast_interval 1s, rise 2, fall 2), so that each of their checkers is one node's scheduler. The
kprism processes are started evenly over one health interval, so the nodes' check phases are
spread as on a real cluster. After STEADY seconds (20) every serve process is SIGKILLed at once,
and DOWN seconds (3) later restarted on the same address and port: new processes, hence new TLS
session-ticket keys, as when a real apiserver restarts. Measured over the WINDOW seconds (10)
from the restart, and for comparison over the WINDOW seconds before the kill:

  - the serve processes' CPU (utime + stime from /proc, summed; after the restart from the
    moment each logs `listening`, so without Go's start-up), the store's and all kprism's;
  - TCP connections accepted, TLS handshakes full and resumed, requests: from the stand-ins'
    `--log-connections` lines (one per event, with its time in microseconds; tests/apiserver);
  - the most handshakes within any 100 ms and any 1 s (sliding windows);
  - how many probers marked it down, and when the last prober had its first ready check after the
    restart and the last one that had marked it down had it up again (kprism's log:
    `--log-level debug` gives a `health check` line per check; `upstream up|down` lines).

With --kprism-before OLD, the whole round is run once per binary, alternating (old, new, old, new,
...) for --rounds rounds each, so that drift on the machine hits both alike; the table has both
columns and new/old. Each figure is the mean of the rounds, the rounds' values in brackets.

Usage: bench/restart_cost.py --kprism BIN --apiserver build/kprism-apiserver [--kprism-before OLD]
         [--nodes 1000] [--endpoints 10] [--rounds 2] [--steady 20] [--down 3] [--window 10]
         [--settle 30] [--kprism-args "FLAGS"] [--keep]
`make bench-probe-restart [KPRISM_BEFORE=/tmp/kprism-before] [NODES=] [ROUNDS=]` runs it.
Prints progress on stderr and a markdown table on stdout. Writes only under a /tmp directory
(removed at the end unless --keep or a failure: its path is printed). Every process it starts is
killed at the end, on a failure and on Ctrl-C (tests/faults/faultlib/cleanup.py).
File descriptors: each kprism process needs about 30, each probe connection 2 (one each side)."""

import argparse
import calendar
import os
import re
import resource
import shlex
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "faults"))

from faultlib import cleanup  # noqa: E402
from faultlib.pki import Pki  # noqa: E402
from faultlib.procs import Proc, free_port, schedstat_cpu_s, wait_until  # noqa: E402
from faultlib import admin  # noqa: E402

ADDR_PREFIX = "127.0.15."  # loopback only; clear of the scenarios' 127.0.0.11-13
HEALTH_INTERVAL = 5.0  # kprism's default health.interval: the kprism starts are spread over it


def log(msg):
    print(f"restart_cost: {msg}", file=sys.stderr, flush=True)


def machine_busy_seconds():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = v
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


class BusySampler:
    """The machine's busy CPU seconds (/proc/stat) every 100 ms in a thread, to tell when the
    machine itself was saturated: then a burst is flattened by the CPUs, not by the probers."""

    def __init__(self):
        self.samples = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), machine_busy_seconds()))
            self._stop.wait(0.1)

    def stop(self):
        self._stop.set()
        self._t.join(timeout=2)
        return self

    def busiest(self, width=1.0):
        """Most cores busy on average over any `width` seconds between samples."""
        s, best, j = self.samples, 0.0, 0
        for i in range(len(s)):
            while j < len(s) and s[j][0] - s[i][0] < width:
                j += 1
            if j == len(s):
                break
            best = max(best, (s[j][1] - s[i][1]) / (s[j][0] - s[i][0]))
        return best


cpu_or_none = schedstat_cpu_s


# ---- the stand-ins' --log-connections lines and kprism's log ----

_EV = re.compile(r"event=(conn|handshake|request)(?: resumed=(true|false)| path=\S+)? t=(\d+)$")
_TS = re.compile(r"^ts=(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{3})Z ")
_UPSTREAM = re.compile(r'\bupstream="?([^" ]+)"?')
_RESULT = re.compile(r'\bresult="?([^" ]+)"?')


def server_events(path):
    """{kind: [unix seconds]} with kinds conn, full, resumed, request."""
    out = {"conn": [], "full": [], "resumed": [], "request": []}
    try:
        text = open(path, "rb").read().decode("utf-8", "replace")
    except OSError:
        return out
    for line in text.splitlines():
        m = _EV.search(line)
        if not m:
            continue
        kind = m.group(1)
        if kind == "handshake":
            kind = "resumed" if m.group(2) == "true" else "full"
        out[kind].append(int(m.group(3)) / 1e6)
    return out


def kprism_lines(path):
    """(unix seconds, line) of every timestamped line of a kprism log."""
    out = []
    try:
        text = open(path, "rb").read().decode("utf-8", "replace")
    except OSError:
        return out
    for line in text.splitlines():
        m = _TS.match(line)
        if m:
            y, mo, d, h, mi, s, ms = (int(x) for x in m.groups())
            out.append((calendar.timegm((y, mo, d, h, mi, s)) + ms / 1000.0, line))
    return out


def upstream_of(line):
    m = _UPSTREAM.search(line)
    return m.group(1) if m else None


def max_within(times, width):
    """The most events within any `width` seconds (a sliding window over sorted times)."""
    times = sorted(times)
    best, j = 0, 0
    for i, t in enumerate(times):
        while times[j] <= t - width:
            j += 1
        best = max(best, i - j + 1)
    return best


def between(times, a, b):
    return [t for t in times if a <= t < b]


# ---- one round ----

class Bench:
    def __init__(self, args):
        self.a = args
        self.d = tempfile.mkdtemp(prefix="kprism-restart-", dir="/tmp")
        self.addrs = [f"{ADDR_PREFIX}{i + 1}" for i in range(args.endpoints)]
        self.ports = [free_port(a) for a in self.addrs]
        self.endpoints = [f"{a}:{p}" for a, p in zip(self.addrs, self.ports)]
        log(f"PKI and store in {self.d}")
        self.pki = Pki(os.path.join(self.d, "pki"), self.addrs)
        self.sock = os.path.join(self.d, "store.sock")
        self.store = Proc([args.apiserver, "store", "--listen", f"unix:{self.sock}"],
                          os.path.join(self.d, "store.log"), name="store")
        if not wait_until(lambda: os.path.exists(self.sock) or not self.store.running(), 10):
            raise RuntimeError("the store did not start: " + self.store.output()[-500:])
        self.env = {k: v for k, v in os.environ.items() if k not in ("RUNTIME_DIRECTORY", "LISTEN_FDS", "LISTEN_PID",
                                                                      "NOTIFY_SOCKET")}
        self.used_ports = set(self.ports)

    def port(self):
        while True:
            p = free_port()
            if p not in self.used_ports:
                self.used_ports.add(p)
                return p

    def start_servers(self, tag, scope):
        """The ENDPOINTS serve processes; returns (procs, log paths, cpu at `listening`, time all listened)."""
        procs, logs = [], []
        for i, (addr, port) in enumerate(zip(self.addrs, self.ports)):
            lp = os.path.join(self.d, f"{tag}-s{i}.log")
            logs.append(lp)
            procs.append(Proc([self.a.apiserver, "serve", "--store", f"unix:{self.sock}", "--name", f"s{i}",
                               "--tls-cert-file", os.path.join(self.pki.dir, "apiserver.crt"),
                               "--tls-private-key-file", os.path.join(self.pki.dir, "apiserver.key"),
                               "--client-ca-file", self.pki.ca_cert, "--bind-address", addr,
                               "--secure-port", str(port), "--log-connections"], lp, scope=scope, name=f"s{i}"))
        cpu0 = [None] * len(procs)
        end = time.time() + 10
        while None in cpu0 and time.time() < end:
            for i, p in enumerate(procs):
                if cpu0[i] is None and "event=listening" in p.output():
                    cpu0[i] = cpu_or_none(p.pid)
                if not p.running():
                    raise RuntimeError(f"serve s{i} exited: {p.output()[-500:]}")
            time.sleep(0.005)
        if None in cpu0:
            raise RuntimeError("a serve process did not start listening within 10 s")
        return procs, logs, cpu0, time.time()

    def round(self, binary, label, rnd):
        a, n_k = self.a, self.a.nodes // self.a.endpoints
        tag = f"{label}-r{rnd}"
        r, t_round = {}, time.time()
        with cleanup.Scope() as scope:
            servers, logs1, _, _ = self.start_servers(f"{tag}-gen1", scope)
            kprisms, klogs = [], []
            t_start = time.time()
            for i in range(n_k):
                # Evenly over one health interval: the nodes' check phases spread as on a cluster.
                delay = t_start + i * HEALTH_INTERVAL / n_k - time.time()
                if delay > 0:
                    time.sleep(delay)
                kl = os.path.join(self.d, f"{tag}-k{i}.log")
                klogs.append(kl)
                kprisms.append(Proc([binary, "--endpoints", ",".join(self.endpoints), "--bind-port", str(self.port()),
                                     "--health-port", str(self.port()), "--client-cert", self.pki.client_pem,
                                     "--client-key", self.pki.client_pem, "--ca-file", self.pki.ca_cert,
                                     "--rebalance=false", "--log-level", "debug", *shlex.split(a.kprism_args)],
                                    kl, env=self.env, scope=scope, name=f"kprism{i}"))
            t_last = time.time()

            def all_up():
                for k, p in zip(klogs, kprisms):
                    if not p.running():
                        raise RuntimeError(f"kprism {k} exited: {p.output()[-800:]}")
                    if p.output().count('msg="upstream up"') < a.endpoints:
                        return False
                return True
            if not wait_until(all_up, 30, 0.25):
                raise RuntimeError(f"not every kprism had every upstream up within 30 s (logs in {self.d})")
            log(f"{tag}: {n_k} kprism x {a.endpoints} upstreams up {time.time() - t_last:.1f} s after the last start")

            def cpu_all():
                return (sum(cpu_or_none(p.pid) or 0 for p in servers), cpu_or_none(self.store.pid),
                        sum(cpu_or_none(p.pid) or 0 for p in kprisms), machine_busy_seconds(), cpu_or_none(os.getpid()))

            # Steady state: the window just before the kill.
            t_kill_plan = t_last + a.steady
            time.sleep(max(0.0, t_kill_plan - a.window - time.time()))
            t_s0, c_s0, busy_s = time.time(), cpu_all(), BusySampler()
            time.sleep(max(0.0, t_kill_plan - time.time()))
            t_kill, c_s1 = time.time(), cpu_all()
            busy_s.stop()
            for p in servers:
                p.signal(signal.SIGKILL)
            for p in servers:
                p.wait(10)
            log(f"{tag}: killed the {a.endpoints} serve processes; restarting in {a.down:g} s")
            time.sleep(max(0.0, t_kill + a.down - time.time()))
            c_r0_rest = cpu_all()
            t_restart, busy_r = time.time(), BusySampler()
            servers, logs2, cpu_listen, t_listening = self.start_servers(f"{tag}-gen2", scope)
            time.sleep(max(0.0, t_restart + a.window - time.time()))
            c_r1 = cpu_all()
            busy_r.stop()
            c_r1_servers = sum(cpu_or_none(p.pid) or 0 for p in servers)
            t_end = time.time()

            # Then until every prober has had a ready check and every one that marked it down has it up.
            def settled():
                st = self.probers(klogs, t_kill, t_restart)
                return st if st["pending"] == 0 else None
            settled_st = wait_until(settled, max(0.5, t_restart + a.settle - time.time()), 0.5)
            st = settled_st or self.probers(klogs, t_kill, t_restart)
            metrics_hs = self.kprism_handshakes(kprisms)

        # Every process of the round is gone now (the scope); the logs stay.
        ev1 = self.merge([server_events(p) for p in logs1])
        ev2 = self.merge([server_events(p) for p in logs2])
        w0, w1 = t_restart, t_restart + a.window
        r["restart"] = {
            "server_cpu": c_r1_servers - sum(cpu_listen),
            "startup_cpu": sum(cpu_listen),
            "store_cpu": c_r1[1] - c_r0_rest[1],
            "kprism_cpu": c_r1[2] - c_r0_rest[2],
            "others_cpu": max(0.0, (c_r1[3] - c_r0_rest[3]) - (c_r1_servers) - (c_r1[1] - c_r0_rest[1])
                              - (c_r1[2] - c_r0_rest[2]) - (c_r1[4] - c_r0_rest[4])),
            "wall": t_end - t_restart,
            "listening_after": t_listening - t_restart,
            "busiest1s": busy_r.busiest(),
        }
        r["steady"] = {
            "server_cpu": c_s1[0] - c_s0[0],
            "store_cpu": c_s1[1] - c_s0[1],
            "kprism_cpu": c_s1[2] - c_s0[2],
            "others_cpu": max(0.0, (c_s1[3] - c_s0[3]) - sum(c_s1[i] - c_s0[i] for i in (0, 1, 2, 4))),
            "wall": t_kill - t_s0,
            "busiest1s": busy_s.busiest(),
        }
        for key, ev, lo, hi in (("restart", ev2, w0, w1), ("steady", ev1, t_s0, t_kill)):
            hs = between(ev["full"] + ev["resumed"], lo, hi)
            r[key].update({
                "conns": len(between(ev["conn"], lo, hi)),
                "full": len(between(ev["full"], lo, hi)),
                "resumed": len(between(ev["resumed"], lo, hi)),
                "requests": len(between(ev["request"], lo, hi)),
                "max100ms": max_within(hs, 0.1),
                "max1s": max_within(hs, 1.0),
                "maxfull1s": max_within(between(ev["full"], lo, hi), 1.0),
            })
        r["probers"] = st
        r["probers"]["settled"] = settled_st is not None
        # Cross-check of the stand-ins' lines against kprism's own count over the whole round.
        served = sum(len(ev[k]) for ev in (ev1, ev2) for k in ("full", "resumed"))
        log(f"{tag}: handshakes over the round: stand-ins logged {served}, kprism counted "
            f"{metrics_hs if metrics_hs is not None else 'n/a'} (kprism_tls_handshakes_total, read one kprism after another before the end: a few probes fewer)")
        rs = r["restart"]
        log(f"{tag}: after the restart: server CPU {rs['server_cpu'] * 1000:.0f} ms, {rs['conns']} connections, "
            f"{rs['full']} full + {rs['resumed']} resumed handshakes, max {rs['max100ms']}/100 ms "
            f"{rs['max1s']}/1 s; down on {st['down']} probers, all up again at {fmt_s(st['all_up'])}; "
            f"round took {time.time() - t_round:.0f} s")
        return r

    @staticmethod
    def merge(evs):
        out = {}
        for ev in evs:
            for k, v in ev.items():
                out.setdefault(k, []).extend(v)
        return out

    def probers(self, klogs, t_kill, t_restart):
        """Per prober (kprism, upstream): marked down after the kill?, first ready check after the
        restart (from the debug `health check` lines, if this kprism logs them) and, if it was
        marked down, `upstream up` after the restart. Times in seconds after the restart."""
        first_ready, up_again, went_down, pending, all_have_checks = [], [], 0, 0, True
        for kl in klogs:
            down, ready, up, has_checks = {}, {}, {}, False
            for t, line in kprism_lines(kl):
                if 'msg="health check"' in line:
                    has_checks = True
                if t < t_kill:
                    continue
                u = upstream_of(line)
                if u is None:
                    continue
                if 'msg="upstream down"' in line:
                    down.setdefault(u, t)
                elif 'msg="upstream up"' in line and t >= t_restart:
                    up.setdefault(u, t)
                elif 'msg="health check"' in line and t >= t_restart:
                    m = _RESULT.search(line)
                    if m and m.group(1) == "ready":
                        ready.setdefault(u, t)
            all_have_checks &= has_checks
            for ep in self.endpoints:
                if ep in ready:
                    first_ready.append(ready[ep] - t_restart)
                elif has_checks:
                    pending += 1
                if ep in down:
                    went_down += 1
                    if ep in up:
                        up_again.append(up[ep] - t_restart)
                    else:
                        pending += 1
        n = len(klogs) * len(self.endpoints)
        return {"down": went_down, "probers": n,
                "first_ready": max(first_ready) if all_have_checks and len(first_ready) == n else None,
                "first_ready_median": statistics.median(first_ready) if all_have_checks and first_ready else None,
                "all_up": (max(up_again) if len(up_again) == went_down else None) if went_down else 0.0,
                "pending": pending}

    def kprism_handshakes(self, kprisms):
        total = 0.0
        for p in kprisms:
            port = int(p.argv[p.argv.index("--health-port") + 1])
            m = admin.metrics(port)
            if m is None:
                return None
            total += sum(v for k, v in m.items() if k.startswith("kprism_tls_handshakes_total"))
        return int(total)


# ---- the table ----

def fmt_s(v):
    return "n/a" if v is None else f"{v:.2f} s"


ROWS = [
    # (label, getter, format)
    ("server CPU, 10 serve processes (ms)", lambda r: r["restart"]["server_cpu"] * 1000, "{:.0f}"),
    ("TCP connections accepted", lambda r: r["restart"]["conns"], "{:.0f}"),
    ("TLS handshakes, full", lambda r: r["restart"]["full"], "{:.0f}"),
    ("TLS handshakes, resumed", lambda r: r["restart"]["resumed"], "{:.0f}"),
    ("probe requests", lambda r: r["restart"]["requests"], "{:.0f}"),
    ("most handshakes within 100 ms", lambda r: r["restart"]["max100ms"], "{:.0f}"),
    ("most handshakes within 1 s", lambda r: r["restart"]["max1s"], "{:.0f}"),
    ("most full handshakes within 1 s", lambda r: r["restart"]["maxfull1s"], "{:.0f}"),
    ("probers that marked it down", lambda r: r["probers"]["down"], "{:.0f}"),
    ("last prober's first ready check (s after restart)", lambda r: r["probers"]["first_ready"], "{:.2f}"),
    ("median prober's first ready check (s)", lambda r: r["probers"]["first_ready_median"], "{:.2f}"),
    ("last of those that marked it down has it up (s; 0: none did)", lambda r: r["probers"]["all_up"], "{:.2f}"),
    ("store CPU (ms)", lambda r: r["restart"]["store_cpu"] * 1000, "{:.0f}"),
    ("kprism CPU, all processes (ms)", lambda r: r["restart"]["kprism_cpu"] * 1000, "{:.0f}"),
    ("other processes' CPU meanwhile (ms)", lambda r: r["restart"]["others_cpu"] * 1000, "{:.0f}"),
    (f"machine's busiest 1 s, cores busy (of {os.cpu_count()})", lambda r: r["restart"]["busiest1s"], "{:.2f}"),
    ("all serve processes listening, after (ms)", lambda r: r["restart"]["listening_after"] * 1000, "{:.0f}"),
    ("serve start-up CPU until listening, not above (ms)", lambda r: r["restart"]["startup_cpu"] * 1000, "{:.0f}"),
    ("STEADY, same length before the kill: server CPU (ms)", lambda r: r["steady"]["server_cpu"] * 1000, "{:.0f}"),
    ("steady: TCP connections / full / resumed handshakes",
     lambda r: (r["steady"]["conns"], r["steady"]["full"], r["steady"]["resumed"]), None),
    ("steady: probe requests", lambda r: r["steady"]["requests"], "{:.0f}"),
    ("steady: most handshakes within 100 ms / 1 s",
     lambda r: (r["steady"]["max100ms"], r["steady"]["max1s"]), None),
    ("steady: kprism CPU, all processes (ms)", lambda r: r["steady"]["kprism_cpu"] * 1000, "{:.0f}"),
    ("steady: other processes' CPU (ms)", lambda r: r["steady"]["others_cpu"] * 1000, "{:.0f}"),
    ("steady: machine's busiest 1 s, cores busy", lambda r: r["steady"]["busiest1s"], "{:.2f}"),
]


def cell(rounds, get, f):
    vals = [get(r) for r in rounds]
    if f is None:  # tuples: the mean of each part
        if any(v is None for v in vals):
            return "n/a", None
        parts = list(zip(*vals))
        return " / ".join(f"{statistics.mean(p):.0f}" for p in parts), None
    if any(v is None for v in vals):
        return "n/a (" + ", ".join("n/a" if v is None else f.format(v) for v in vals) + ")", None
    m = statistics.mean(vals)
    text = f.format(m)
    if len(vals) > 1:
        text += " (" + ", ".join(f.format(v) for v in vals) + ")"
    return text, m


def table(results, labels, heads, args):
    out = [f"Restart of one apiserver ({args.endpoints} Go stand-in serve processes on one store) probed by "
           f"{args.nodes} nodes ({args.nodes // args.endpoints} kprism x {args.endpoints} endpoints, default "
           f"health settings); figures over the {args.window:g} s from the restart ({args.down:g} s after a SIGKILL "
           f"of all {args.endpoints}), mean of {args.rounds} round(s), each round in brackets.", ""]
    head = "| | " + " | ".join(heads) + (" | after/before |" if len(labels) == 2 else " |")
    out += [head, "|---" * (len(labels) + 1 + (len(labels) == 2)) + "|"]
    for name, get, f in ROWS:
        cells = [cell(results[lab], get, f) for lab in labels]
        row = f"| {name} | " + " | ".join(c[0] for c in cells)
        if len(labels) == 2:
            b, n = cells[0][1], cells[1][1]
            row += " | " + (f"{n / b:.2f}" if b and n is not None else "–")
        out.append(row + " |")
    not_settled = [(lab, i + 1) for lab in labels for i, r in enumerate(results[lab]) if not r["probers"]["settled"]]
    if not_settled:
        out += ["", "Not every prober saw the upstream up again within "
                f"{args.settle:g} s in: " + ", ".join(f"{lab} round {i}" for lab, i in not_settled)]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kprism", required=True, help="the kprism binary measured (\"after\")")
    ap.add_argument("--kprism-before", help="an earlier kprism binary, measured alternately")
    ap.add_argument("--apiserver", required=True, help="build/kprism-apiserver")
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--endpoints", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steady", type=float, default=20.0, help="seconds from the last kprism start to the kill")
    ap.add_argument("--down", type=float, default=3.0, help="seconds between the kill and the restart")
    ap.add_argument("--window", type=float, default=10.0, help="seconds measured from the restart")
    ap.add_argument("--settle", type=float, default=30.0,
                    help="seconds after the restart to wait at most for every prober to see the upstream up")
    ap.add_argument("--kprism-args", default="", help="more flags for every kprism")
    ap.add_argument("--keep", action="store_true", help="keep the logs directory")
    args = ap.parse_args()
    if args.nodes % args.endpoints or args.nodes < args.endpoints:
        ap.error("--nodes must be a multiple of --endpoints")
    if not 1 <= args.endpoints <= 250:
        ap.error("--endpoints: 1 to 250")
    if args.steady < args.window + 2:
        ap.error("--steady must be at least --window + 2")
    n_k = args.nodes // args.endpoints
    # Descriptors: the bench itself holds few (logs are opened and closed per read); a serve process
    # holds one per prober connected to it at once, a kprism one per endpoint being checked.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = n_k + 64
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(need, 4096)), hard))
    cleanup.install()
    binaries = [("after" if args.kprism_before else "kprism", os.path.abspath(args.kprism))]
    if args.kprism_before:
        binaries.insert(0, ("before", os.path.abspath(args.kprism_before)))
    for _, b in binaries:
        if not os.access(b, os.X_OK):
            sys.exit(f"restart_cost: {b}: not executable")
    labels = [lab for lab, _ in binaries]
    t0 = time.time()
    bench = Bench(args)
    ok = False
    try:
        results = {lab: [] for lab in labels}
        for rnd in range(1, args.rounds + 1):
            for lab, b in binaries:
                log(f"round {rnd} of {args.rounds}: {lab} = {b}")
                results[lab].append(bench.round(b, lab, rnd))
        heads = [f"{lab} (`{b}`)" for lab, b in binaries]
        print(table(results, labels, heads, args), flush=True)
        log(f"done in {time.time() - t0:.0f} s")
        ok = True
    finally:
        cleanup.run_all()
        if ok and not args.keep:
            shutil.rmtree(bench.d, ignore_errors=True)
        else:
            log(f"logs kept in {bench.d}")


if __name__ == "__main__":
    main()
