#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""make chaos: the real kprism in front of real TLS stand-in apiservers, a random seeded sequence
of events (apiserver faults, discovery changes, hostile discovered addresses, reloads, certificate
rotation, kprism's own SIGHUP and SIGUSR2) under client traffic, and the invariants I1-I9 checked
every 150 ms (tests/chaos/README.md).

Environment: KPRISM_BIN (default build/kprism), KPRISM_APISERVER (build/kprism-apiserver),
KPRISM_STANDIN (build/kprism-standin), CHAOS_SEED (run that one seed only), CHAOS_SECONDS (total
time budget, default 180), CHAOS_SEED_SECONDS (events per seed, default 35), CHAOS_BASE_SEED (the
seed list is derived from it, default 1). Exit status 1 on any violation."""

import heapq
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import world as wd  # noqa: E402  (also puts tests/faults and tests/scenarios on the path)
from faultlib import cleanup  # noqa: E402
import checks  # noqa: E402
import clients  # noqa: E402

AFTER = 3.0  # seconds a fault keeps explaining client failures after it ends


class Events:
    """The trace of one seed, and the windows in which each fault explains a failed request."""

    def __init__(self, t0):
        self.t0 = t0
        self.lock = threading.Lock()
        self.trace = []  # (t, kind, target, detail)
        self.windows = {}  # id -> [start, end or None, label]
        self.counts = {}
        self._n = 0
        self.churn_detail = ""
        self.resets = []  # I9: dicts of client connections half-closed then reset (checks.py)

    def add(self, kind, target="", detail=""):
        t = time.monotonic()
        with self.lock:
            self.trace.append((t, kind, target, detail))
            self.counts[kind] = self.counts.get(kind, 0) + 1
        print(f"chaos:   +{t - self.t0:6.1f}s {kind} {target} {detail}".rstrip(), flush=True)
        return t

    def open(self, label, t=None):
        with self.lock:
            self._n += 1
            self.windows[self._n] = [t or time.monotonic(), None, label]
            return self._n

    def close(self, wid, after=AFTER):
        with self.lock:
            if wid in self.windows and self.windows[wid][1] is None:
                self.windows[wid][1] = time.monotonic() + after

    def explains(self, t0, t1):
        with self.lock:
            for start, end, label in self.windows.values():
                if start <= t1 and (end is None or end >= t0):
                    return label
        return None

    def times(self, kind):
        with self.lock:
            return [t for t, k, _, _ in self.trace if k == kind]

    def in_window(self, kind, t, dur):
        return any(te <= t <= te + dur for te in self.times(kind))

    def recent(self, t, seconds):
        with self.lock:
            ev = [f"+{te - self.t0:.1f}s {k} {tg}".rstrip() for te, k, tg, _ in self.trace
                  if t - seconds <= te <= t and k != "halfclose_judged"]
        return "events in the last %gs: %s" % (seconds, "; ".join(ev) if ev else "none")

    def note(self, kind, target="", detail=""):
        """In the trace only (not printed as it happens)."""
        with self.lock:
            self.trace.append((time.monotonic(), kind, target, detail))

    def add_reset(self, entry):
        with self.lock:
            self.resets.append(entry)

    def dump(self):
        with self.lock:
            return [f"+{t - self.t0:7.2f}s {k} {tg} {d}".rstrip() for t, k, tg, d in self.trace]


class Chaos:
    """Applies one seed's events to a World."""

    def __init__(self, w, rng, ev, netns):
        self.w, self.rng, self.ev, self.netns = w, rng, ev, netns
        self.faults = {}  # server name -> (fault, window id)
        self.pending = []  # heap of (due, seq, fn, args)
        self.seq = 0
        self.extra_on = False
        self.hostile = False
        self.hostile_now = []
        self.static_a3 = False
        self.static_c4 = True
        self.cert = "normal"
        self.etcd_wid = None
        self.skipped = {}
        self.ctx = None  # the clients' TLS context (half-close event)
        self.hc_thread = None
        self.hc_stop = threading.Event()
        self.hc_quiet_until = 0.0
        self.flushing = False
        self.quiet_i4 = []  # (start, end): no SIGUSR2 nor admin flood (the churn phase's I4 measurement)

    def later(self, delay, fn, *args):
        self.seq += 1
        heapq.heappush(self.pending, (time.monotonic() + delay, self.seq, fn, args))

    def run_due(self):
        while self.pending and self.pending[0][0] <= time.monotonic():
            _, _, fn, args = heapq.heappop(self.pending)
            fn(*args)

    def flush(self):
        """Ends every fault still on (the end of a seed), so that its teardown is orderly."""
        if self.hc_thread is not None:
            self.hc_thread.join(15)  # its resets are due within 8 + 2.5 s
        self.flushing = True
        while self.pending:
            _, _, fn, args = heapq.heappop(self.pending)
            fn(*args)

    def skip(self, kind, why):
        self.skipped[kind] = why

    # ---- choosing
    def servers(self):
        return [s.name for s in self.w.go] + ["c4"]

    def step(self):
        r = self.rng
        now = time.monotonic()
        quiet = any(a <= now <= b for a, b in self.quiet_i4)
        # While a half-close event runs (until 3.5 s after its last reset) c4 is left alone: a fault
        # of c4, a reload removing it or the discovery of c4 itself would close or divert the
        # connections c4 holds quiet before I9 can judge them.
        hc = self.hc_busy()
        healthy = [n for n in self.servers() if n not in self.faults and not (hc and n == "c4")]
        cap = 3 if r.random() < 0.2 else 2
        menu = [("sighup", 3), ("reload", 4), ("cert_rotate", 2), ("disc_hostile", 3), ("halfclose", 2)]
        if not hc:
            menu.append(("disc_extra", 4))
        if not quiet:
            menu += [("sigusr2", 2), ("admin_flood", 2)]
        if self.cert == "normal":
            menu.append(("cert_foreign", 1.5))
        if len(self.faults) < cap and healthy:
            menu.append(("server_fault", 14))
        if not self.faults and self.etcd_wid is None and not hc:
            menu += [("etcd_all", 1.5), ("outage", 2)]
        kind = r.choices([m[0] for m in menu], [m[1] for m in menu])[0]
        if kind == "server_fault":
            self.server_fault("c4" if "c4" in healthy and r.random() < 0.4 else r.choice(healthy))
        else:
            getattr(self, kind)()

    # ---- per server
    def server_fault(self, name):
        r = self.rng
        dur = r.uniform(1.5, 6.0)
        if name == "c4":
            dur = r.uniform(3.5, 7.0)  # I8 judges an answer held for interval + timeout + margin
            kinds = ["etcd500", "shutdown500", "other500", "nocl500", "chunked500", "401", "503", "hang", "garbage",
                     "latency", "extra500", "extra200", "notify200"] + (["blackhole"] if self.netns else [])
            f = r.choice(kinds)
            wid = self.ev.open(f"c4 {f}")
            self.faults[name] = (f, wid)
            if f == "latency":
                ms = r.choice([100, 200, 400, 700])
                self.w.set_c4_delay(ms)
                self.w.c4_net_faulty = True
                self.ev.add("latency", "c4", f"{ms} ms for {dur:.1f}s")
            elif f == "blackhole":
                self.w.iptables("-I", wd.C4_FRONT)
                self.w.c4_net_faulty = True
                self.ev.add("blackhole", "c4", f"for {dur:.1f}s")
            else:
                self.w.set_c4(f)
                self.ev.add("readyz", "c4", f"{f} for {dur:.1f}s")
            self.later(dur, self.c4_heal)
            return
        s = next(x for x in self.w.go if x.name == name)
        kinds = ["etcd", "shutdown", "kill", "hang", "reject"] + (["blackhole"] if self.netns else [])
        f = r.choice(kinds)
        wid = self.ev.open(f"{name} {f}")
        self.faults[name] = (f, wid)
        if f == "etcd":
            s.control("/etcd/lose")
            self.ev.add("etcd_lose", name, f"for {dur:.1f}s")
        elif f == "shutdown":
            s.control("/shutdown")
            self.ev.add("shutdown", name, "graceful: /readyz fails 'shutdown', then it drains and exits")
            self.later(2.0, self.go_restart_after_exit, s, 0)
            return
        elif f == "kill":
            self.w.go_kill(s)
            self.ev.add("kill", name, f"restart in {dur:.1f}s")
        elif f == "hang":
            self.w.go_signal(s, signal.SIGSTOP)
            self.ev.add("hang", name, f"SIGSTOP for {dur:.1f}s")
        elif f == "reject":
            self.w.go_restart(s, "--client-ca-file", self.w.foreign.ca)
            self.ev.add("reject", name, f"restarted trusting another CA: 401 to every client for {dur:.1f}s")
        elif f == "blackhole":
            self.w.iptables("-I", s.addr)
            self.ev.add("blackhole", name, f"for {dur:.1f}s")
        self.later(dur, self.go_heal, s)

    def go_heal(self, s):
        f, wid = self.faults.pop(s.name, (None, None))
        if f == "etcd":
            s.control("/etcd/restore")
            self.ev.add("etcd_restore", s.name)
        elif f in ("kill", "reject"):
            self.w.go_restart(s)
            self.ev.add("restart", s.name)
        elif f == "hang":
            self.w.go_signal(s, signal.SIGCONT)
            self.ev.add("resume", s.name, "SIGCONT")
        elif f == "blackhole":
            self.w.iptables("-D", s.addr)
            self.ev.add("unblock", s.name)
        if wid:
            self.ev.close(wid)

    def go_restart_after_exit(self, s, tries):
        if self.w.go_running(s) and tries < 20:
            self.later(0.5, self.go_restart_after_exit, s, tries + 1)
            return
        self.faults[s.name] = ("kill", self.faults.get(s.name, (None, None))[1])
        self.go_heal(s)

    def c4_heal(self):
        f, wid = self.faults.pop("c4", (None, None))
        if f == "latency":
            self.w.set_c4_delay(0)
            self.w.c4_net_faulty, self.w.c4_net_quiet_since = False, time.monotonic()
            self.ev.add("latency", "c4", "0 ms")
        elif f == "blackhole":
            self.w.iptables("-D", wd.C4_FRONT)
            self.w.c4_net_faulty, self.w.c4_net_quiet_since = False, time.monotonic()
            self.ev.add("unblock", "c4")
        else:
            self.w.set_c4("200")
            self.ev.add("readyz", "c4", "200")
        if wid:
            self.ev.close(wid)

    def etcd_all(self):
        """etcd lost behind every apiserver at once (c4 answers like one): the documented hold."""
        dur = self.rng.uniform(3.0, 7.0)
        wid = self.ev.open("etcd lost everywhere")
        for s in self.w.go:
            s.control("/etcd/lose")
        self.w.set_c4("etcd500")
        for n in self.servers():
            self.faults[n] = ("etcd_all", None)
        self.etcd_wid = wid
        self.ev.add("etcd_all", "", f"every apiserver loses etcd for {dur:.1f}s")
        self.later(dur, self.etcd_all_heal)

    def etcd_all_heal(self):
        for s in self.w.go:
            s.control("/etcd/restore")
        self.w.set_c4("200")
        for n in self.servers():
            self.faults.pop(n, None)
        self.ev.close(self.etcd_wid)
        self.etcd_wid = None
        self.ev.add("etcd_all_restore")

    def outage(self):
        """Every apiserver down at once for causes other than etcd (kprism fails open, connections go
        to down upstreams), then back one at a time, c4 (still serving requests, /readyz 503) last:
        its connections must be closed once another is up (I2)."""
        r = self.rng
        wid = self.ev.open("outage")
        how = {}
        for s in self.w.go:
            f = r.choice(["kill", "hang", "blackhole"] if self.netns else ["kill", "hang"])
            how[s.name] = f
            self.faults[s.name] = (f, None)
            if f == "kill":
                self.w.go_kill(s)
            elif f == "hang":
                self.w.go_signal(s, signal.SIGSTOP)
            else:
                self.w.iptables("-I", s.addr)
        self.w.set_c4("503")
        self.faults["c4"] = ("503", None)
        dur = r.uniform(3.0, 6.0)
        self.ev.add("outage", "", f"every apiserver down ({', '.join(f'{k} {v}' for k, v in how.items())}, c4 503) "
                                  f"for {dur:.1f}s, then back one by one")
        order = list(self.w.go)
        r.shuffle(order)
        t = dur
        for s in order:
            self.later(t, self.go_heal, s)
            t += r.uniform(0.5, 2.0)
        self.later(t + r.uniform(4.0, 7.0), self.outage_end, wid)

    def outage_end(self, wid):
        self.c4_heal()
        self.ev.close(wid)

    CHURN_STEP = 0.06

    def churn_phase(self, dur):
        """Membership churn for I4 (kprism(8) Reload, Discovery): for dur seconds, every 60 ms a
        reload adding or removing c5 (127.0.0.25, always ready, checked over TLS) as a static
        endpoint, and the slice chaos-churn listing 16 unused addresses posted or deleted (16
        discovered upstreams added or removed). Every removal retires a checker; I4 compares the
        RSS across the phase (checks.py). Scheduled with later(): other events go on meanwhile, but
        no SIGUSR2 (a new process image would hide what leaked) and no admin flood."""
        self.churn_until = time.monotonic() + dur
        self.churn_conn = None
        self.churn_pause = 0
        self.churn_after = 0
        self.churn_stats = {"reloads": 0, "slice_ops": 0, "slice_errors": 0}
        self.ev.add("churn", "kprism", f"{dur:.0f}s: every {self.CHURN_STEP * 1000:.0f} ms a reload adding or removing "
                                      f"{wd.C5_ADDR}:{self.w.port}, and slice chaos-churn ({len(wd.CHURN_ADDRS)} "
                                      f"unused addresses) posted or deleted")
        self.churn_tick(0, False)

    def _churn_api(self, method, path, body=None):
        if self.churn_conn is None:
            s = self._api_server()
            if s is None:
                raise OSError("no healthy API server")
            if self.ctx is None:
                self.ctx = clients.context(self.w.pki)
            self.churn_conn = http.client.HTTPSConnection(s.addr, s.port, context=self.ctx, timeout=0.5)
        c = self.churn_conn
        try:
            c.request(method, path, json.dumps(body) if body is not None else None,
                      {"Content-Type": "application/json"} if body is not None else {})
            r = c.getresponse()
            r.read()
            return r.status
        except (OSError, http.client.HTTPException):
            c.close()
            self.churn_conn = None
            raise

    def churn_tick(self, i, listed):
        extra = f"{wd.C5_ADDR}:{self.w.port}"
        last = time.monotonic() >= self.churn_until or self.flushing
        eps = [e for e in self.w.configured if e != extra]
        if not last and extra not in self.w.configured:
            eps.append(extra)
        self.w.write_config(eps)
        self.w.kp.signal(signal.SIGHUP)
        self.churn_stats["reloads"] += 1
        try:
            if self.churn_pause > 0:  # after an error (a hung API server): a few ticks without the slice
                self.churn_pause -= 1
            elif listed:
                st = self._churn_api("DELETE", f"{wd.SLICES}/chaos-churn")
                listed = st not in (200, 404)  # 404: an earlier DELETE took effect, its answer was lost
                self._churn_count(st, 200)
            elif not last:
                st = self._churn_api("POST", wd.SLICES, self.w.slice_body("chaos-churn", wd.CHURN_ADDRS, self.w.port))
                listed = st in (201, 409)  # 409: an earlier POST took effect, its answer was lost
                self._churn_count(st, 201)
        except OSError:
            self.churn_stats["slice_errors"] += 1
            self.churn_pause = 5
        self.churn_after = self.churn_after + 1 if last else 0
        if last and (not listed or self.churn_after > 30):  # bounded: about 3 s of tries to delete the slice
            if self.churn_conn is not None:
                self.churn_conn.close()
            self.ev.churn_detail = ", ".join(f"{k} {v}" for k, v in self.churn_stats.items()) + \
                ("; slice chaos-churn left listed" if listed else "")
            self.ev.add("churn_end", "kprism", self.ev.churn_detail)
            return
        self.later(self.CHURN_STEP, self.churn_tick, i + 1, listed)

    def _churn_count(self, st, want):
        if st == want:
            self.churn_stats["slice_ops"] += 1
        else:  # an apiserver without etcd, rejecting, shutting down
            self.churn_stats["slice_refused"] = self.churn_stats.get("slice_refused", 0) + 1
            self.churn_pause = 5

    def hc_busy(self):
        return (self.hc_thread is not None and self.hc_thread.is_alive()) or time.monotonic() < self.hc_quiet_until

    def halfclose_when_c4(self, tries=0):
        """The guaranteed half-close events: when c4 is configured, without a fault and not also
        discovered directly (retried every second, 10 times at most)."""
        if ("c4" in self.faults or not self.static_c4 or self.extra_on or self.hc_busy()) and tries < 10:
            self.later(1.0, self.halfclose_when_c4, tries + 1)
            return
        self.halfclose()

    def hostile_peer_when_c4(self, kind, dur, tries=0):
        """The guaranteed hostile probe peer: c4 answers /readyz with answers nobody asked for (in TLS
        records of their own) or with a close_notify, once c4 is configured, without a fault and
        left alone by no half-close event (retried every second, 10 times at most); I8 judges it."""
        if "c4" in self.faults or not self.static_c4 or self.extra_on or self.hc_busy():
            if tries < 10:
                self.later(1.0, self.hostile_peer_when_c4, kind, dur, tries + 1)
            return
        self.faults["c4"] = (kind, self.ev.open(f"c4 {kind}"))
        self.w.set_c4(kind)
        self.ev.add("readyz", "c4", f"{kind} for {dur:.1f}s (hostile probe peer)")
        self.later(dur, self.c4_heal)

    def halfclose(self):
        """Client connections (until two reach c4, at most 8), each with one GET answered, half-closed (FIN) then reset (SO_LINGER
        0, close) 0.2-2.5 s later, while the relay in front of c4 holds a FIN from kprism for 8 s
        (the stand-ins answer a FIN at once: c4 and Go close; held, c4 stays quiet as a server that
        does not react to it). I9: kprism lets go of each within 3 s of the reset."""
        if self.hc_thread is not None and self.hc_thread.is_alive():
            self.skip("halfclose overlapping", "one half-close event at a time (the relay's hold is global)")
            return
        n_other = self.rng.randint(1, 3)
        delays = [self.rng.uniform(0.2, 2.5) for _ in range(8)]
        self.ev.add("halfclose", "clients", f"until two are served by c4 (at most 8 tries) and {n_other} more: "
                                            "GET, FIN, then RST 0.2-2.5s later; c4's relay holds FINs 8s")
        if self.ctx is None:
            self.ctx = clients.context(self.w.pki)
        self.hc_thread = threading.Thread(target=self._halfclose_run, args=(n_other, delays), daemon=True)
        self.hc_thread.start()

    def _halfclose_run(self, n_other, delays):
        w = self.w
        w.set_c4_hold(8000)
        self.hc_stop.wait(0.3)  # the relay re-reads the file every 100 ms (nothing to poll)
        conns, on_c4 = [], 0
        deadline = time.monotonic() + 8.0
        for _ in range(8):
            if (on_c4 >= 2 and len(conns) >= 2 + n_other) or time.monotonic() > deadline or self.hc_stop.is_set():
                break
            c = clients.served_conn(self.ctx, w.kport)
            if c is None:
                continue
            sock, server, lport = c
            if server == "c4" and (self.extra_on or f"{wd.C4_ADDR}:{w.port}" in w.configured):
                server = "c4?"  # c4 is also an upstream directly (127.0.0.24): maybe not through the relay
            on_c4 += server == "c4"
            conns.append({"sock": sock, "server": server, "lport": lport,
                          "inode": checks.client_inode(w.kp.pid, w.kport, lport)})
        for c, d in zip(conns, delays):
            try:
                clients.half_close(c["sock"])
            except OSError:
                pass
            c["t_fin"] = time.monotonic()
            c["due"] = c["t_fin"] + d
        for c in sorted(conns, key=lambda x: x["due"]):
            self.hc_stop.wait(max(0.0, c["due"] - time.monotonic()))
            try:
                clients.reset(c.pop("sock"))
            except OSError:
                pass
            c["t_rst"] = time.monotonic()
            self.ev.add_reset(c)
        w.set_c4_hold(0)
        self.hc_quiet_until = time.monotonic() + checks.I9_BOUND + 0.5
        self.ev.add("halfclose_reset", "clients", f"{len(conns)} reset: " + " ".join(
            f"{c['lport']}->{c['server']}" for c in conns))

    # ---- kprism
    def sighup(self):
        self.w.kp.signal(signal.SIGHUP)
        self.ev.add("sighup", "kprism", "configuration unchanged")

    def sigusr2(self):
        wid = self.ev.open("kprism restart in place")
        self.w.kp.signal(signal.SIGUSR2)
        self.ev.add("sigusr2", "kprism", "restart in place")
        self.ev.close(wid)

    def reload(self):
        r = self.rng
        if r.random() < 0.5 or self.hc_busy():
            self.static_a3 = not self.static_a3
        else:
            self.static_c4 = not self.static_c4
        eps = [self.w.go[0].endpoint, self.w.go[1].endpoint]
        if self.static_a3:
            eps.append(self.w.go[2].endpoint)
        if self.static_c4:
            eps.append(self.w.c4_endpoint)
        self.w.write_config(eps)
        self.w.kp.signal(signal.SIGHUP)
        self.ev.add("reload", "kprism", "endpoints " + ",".join(eps))

    def _write_cert(self, pem, kind):
        tmp = self.w.cert + ".tmp"
        shutil.copyfile(pem, tmp)
        os.chmod(tmp, 0o600)
        os.replace(tmp, self.w.cert)
        self.cert = kind
        now = time.monotonic()
        self.w.cert_normal = kind == "normal"
        if self.w.cert_normal:
            self.w.cert_normal_since = now

    def cert_rotate(self):
        tag = f"r{self.seq}-{self.rng.randrange(10**6)}"
        pem = self.w.pki.short_kubelet(tag, 86400)
        self._write_cert(pem, "normal")
        self.ev.add("cert_rotate", "kubelet", "a new certificate of the same CA")

    def cert_foreign(self):
        dur = self.rng.uniform(3.0, 7.0)
        self._write_cert(self.w.foreign.kubelet_pem, "foreign")
        self.ev.add("cert_foreign", "kubelet", f"a certificate of another CA for {dur:.1f}s: rejected by every apiserver")
        self.later(dur, self.cert_back)

    def cert_back(self):
        self._write_cert(self.w.pki.kubelet_pem, "normal")
        self.ev.add("cert_rotate", "kubelet", "back to the cluster CA's")

    # ---- discovery
    def _api_server(self):
        ok = [s for s in self.w.go if s.name not in self.faults and self.w.go_running(s)]
        return self.rng.choice(ok) if ok else None

    def disc_extra(self):
        s = self._api_server()
        if s is None:
            self.skip("disc_extra", "no healthy API server at that moment")
            return
        try:
            if not self.extra_on:
                st = self.w.post_slice(s, "chaos-extra", [wd.C4_ADDR], self.w.port)
                self.extra_on = st == 201
                self.ev.add("discovery_add", wd.C4_ADDR, f"slice chaos-extra via {s.name}: HTTP {st}")
            else:
                st = self.w.delete_slice(s, "chaos-extra")
                self.extra_on = False
                self.ev.add("discovery_remove", wd.C4_ADDR, f"slice chaos-extra via {s.name}: HTTP {st}")
        except OSError as e:
            self.ev.add("discovery_error", s.name, str(e))

    def hostile_slices(self):
        w = self.w
        out = [("chaos-hostile-listener", ["127.0.0.1", "0.0.0.0"], w.kport),
               ("chaos-hostile-admin", ["127.0.0.1"], w.aport),
               ("chaos-hostile-garbage", ["not-an-address", "127.0.0.1.1", "::zz", "0.0.0.0",
                                            "255.255.255.255"], w.port)]  # off-host: broadcast, refused
        if self.netns:  # off-host: sent only into the test's own network namespace, where they are unreachable
            out.append(("chaos-hostile-offhost", ["169.254.169.254", "224.0.0.1", "239.255.255.250"], w.port))
        return out

    def disc_hostile(self):
        s = self._api_server()
        if s is None:
            self.skip("disc_hostile", "no healthy API server at that moment")
            return
        try:
            res = []
            if not self.hostile:
                every = self.hostile_slices()
                self.hostile_now = self.rng.sample(every, self.rng.randint(1, len(every)))
            for name, addrs, port in self.hostile_now:
                st = self.w.post_slice(s, name, addrs, port) if not self.hostile else self.w.delete_slice(s, name)
                res.append(f"{name}:{st}")
            self.hostile = not self.hostile
            self.ev.add("discovery_hostile" if self.hostile else "discovery_hostile_removed", s.name, " ".join(res))
        except OSError as e:
            self.ev.add("discovery_error", s.name, str(e))

    def admin_flood(self):
        """Idle connections to the admin port (fewer than its limit of 64, or more), held 3 s."""
        n = self.rng.choice([16, 32, 48, 70])
        socks = []
        for _ in range(n):
            try:
                socks.append(socket.create_connection(("127.0.0.1", self.w.aport), timeout=1))
            except OSError:
                break
        self.ev.add("admin_flood", "kprism", f"{len(socks)} idle admin connections for 3s")
        self.later(3.0, self.admin_flood_end, socks)

    def admin_flood_end(self, socks):
        for s in socks:
            s.close()
        self.ev.add("admin_flood_end", "kprism")


def derive_seeds(base, n):
    r = random.Random(base)
    return [r.randrange(1, 10**6) for _ in range(n)]


def run_seed(seed, seconds, args, netns, totals):
    print(f"chaos: seed {seed}: {seconds:.0f}s of events", flush=True)
    d = tempfile.mkdtemp(prefix=f"kprism-chaos-{seed}-")
    rng = random.Random(seed)
    w = ck = None
    with cleanup.Scope() as scope:
        try:
            w = wd.World(d, args["kprism"], args["apiserver"], args["standin"], netns)
            scope.add("world", w.close)
            scope.add("kprism", w.kp.kill)
            # the object the requesters GET
            st, _ = w.api(w.go[0], "POST", "/api/v1/namespaces/default/configmaps",
                          {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "chaos-target"}})
            if st not in (201, 409):
                raise RuntimeError(f"cannot create the target ConfigMap: HTTP {st}")
            t0 = time.monotonic()
            ev = Events(t0)
            chaos = Chaos(w, rng, ev, netns)
            # every upstream checked once before the events start
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                s = w.status()
                if s and sum(u["state"] == "up" for u in s["upstreams"]) >= 3:
                    break
                time.sleep(0.1)
            ck = checks.Checker(w, ev, wd.TIMING)
            ck.t0 = t0
            ck.replay = f"CHAOS_SEED={seed} CHAOS_SEED_SECONDS={seconds:.0f} KPRISM_BIN={args['kprism']} make chaos"
            # Guaranteed per seed: one half-close event (I9), and a churn phase after I4's warm-up
            # with I4's baseline before it and its tail after it (no SIGUSR2 or admin flood then).
            chaos.later(rng.uniform(3.0, 8.0), chaos.halfclose_when_c4)
            # And one hostile probe peer, drawn from its own generator: the seed's other events stay
            # what they were.
            hrng = random.Random(seed * 7919 + 1)
            chaos.later(hrng.uniform(4.0, 20.0), chaos.hostile_peer_when_c4,
                        hrng.choice(["extra500", "extra200", "notify200"]), hrng.uniform(4.0, 7.0))
            c_at = rng.uniform(checks.WARMUP + 2.0, checks.WARMUP + 4.0)
            c_dur = min(14.0, seconds - c_at - 7.0)
            if c_dur >= 5.0:
                now = time.monotonic()
                chaos.quiet_i4.append((now + c_at - 4.0, now + c_at + c_dur + 6.0))
                chaos.later(c_at, chaos.churn_phase, c_dur)
                chaos.later(c_at + c_dur + rng.uniform(1.0, 3.0), chaos.halfclose_when_c4)  # in the quiet: no SIGUSR2
            else:
                chaos.skip("churn phase", f"a seed of {seconds:.0f}s is too short for it")
            tr = clients.Traffic(clients.context(w.pki), w.kport)
            tr.start()
            ck.start()
            end = time.monotonic() + seconds
            nxt = time.monotonic() + 1.0
            n_steps = 0
            while time.monotonic() < end and n_steps < 10000:
                chaos.run_due()
                if time.monotonic() >= nxt:
                    chaos.step()
                    n_steps += 1
                    nxt = time.monotonic() + rng.uniform(0.6, 2.0)
                due = min([nxt] + [p[0] for p in chaos.pending[:1]])
                time.sleep(min(0.05, max(0.005, due - time.monotonic())))
            chaos.flush()
            ev.add("end", "", "every fault ended; settling 3s")
            time.sleep(3.0)
            tr.finish()
            ck.finish(tr)
            # a clean stop: SIGTERM drains (drain_timeout) and exits 0
            was_running = not ck.exited
            ck.exited = True  # from here on an exit is expected
            w.kp.signal(signal.SIGTERM)
            rc = w.kp.wait(wd.TIMING["drain_timeout"] + 10)
            if rc != 0 and was_running:
                ck.violate("I7", f"kprism exited {rc} on SIGTERM (expected 0 after the drain): {w.kp.output()[-600:]}")
            ck.scan_log()
        except Exception:
            if ck is not None:
                ck.stop.set()
                ck.thread.join(5)
            traceback.print_exc()
            totals["errors"].append(f"seed {seed}: harness error (see above); files in {d}")
            return
        finally:
            pass
    for k, v in ev.counts.items():
        totals["events"][k] = totals["events"].get(k, 0) + v
    for k, v in ck.samples.items():
        totals["samples"][k] = totals["samples"].get(k, 0) + v
    for k, v in ck.failures.items():
        totals["requests"][k] = totals["requests"].get(k, 0) + v
    for k, v in chaos.skipped.items():
        totals["skipped"][k] = v
    for k, v in ck.notes.items():
        if k in ("halfclose_c4_max_s", "churn_rss_growth_kib"):
            totals["notes"][k] = totals["notes"].get(k, []) + [v]
        else:
            totals["notes"][k] = totals["notes"].get(k, 0) + v
    totals["seeds"].append(seed)
    print(f"chaos: seed {seed}: requests {ck.failures}, failures explained by {ck.by_event}, "
          f"watch connections opened {tr.watch_opens}", flush=True)
    if ck.violations:
        trace_file = os.path.join(d, "trace.txt")
        with open(trace_file, "w") as f:
            f.write("\n".join(ev.dump()) + "\n")
        for inv, t, msg in ck.violations:
            totals["violations"].append((seed, inv, t, msg))
        print(f"chaos: seed {seed}: {len(ck.violations)} violation(s); replay with: {ck.replay}", flush=True)
        print(f"chaos: seed {seed}: event trace ({trace_file}; kprism's log {w.klog}):", flush=True)
        for line in ev.dump():
            print(f"chaos:   {line}")
    else:
        shutil.rmtree(d, ignore_errors=True)


def in_netns():
    """Re-executes this script in a new network namespace (root and unshare(1) needed) where only
    loopback exists: the hostile off-host addresses are unreachable and iptables rules are ours."""
    if os.environ.get("CHAOS_NETNS") is not None:
        return os.environ["CHAOS_NETNS"] == "1"
    if os.geteuid() == 0 and shutil.which("unshare") and shutil.which("iptables") and \
            subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode == 0:
        env = dict(os.environ, CHAOS_NETNS="1")
        r = subprocess.run(["unshare", "--net", "--fork", "--kill-child", sys.executable, os.path.abspath(__file__),
                            *sys.argv[1:]], env=env)
        sys.exit(r.returncode)
    # off-host: a message, and the reason these addresses are left out here
    print("chaos: note: not root or no unshare/iptables: running on the host's loopback; blackholes and "
          "off-host hostile addresses (169.254.169.254, multicast) are skipped", flush=True)
    os.environ["CHAOS_NETNS"] = "0"
    return False


def main():
    netns = in_netns()
    if netns:
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    cleanup.install()
    env = os.environ
    args = {"kprism": os.path.abspath(env.get("KPRISM_BIN", os.path.join(ROOT, "build/kprism"))),
            "apiserver": os.path.abspath(env.get("KPRISM_APISERVER", os.path.join(ROOT, "build/kprism-apiserver"))),
            "standin": os.path.abspath(env.get("KPRISM_STANDIN", os.path.join(ROOT, "build/kprism-standin")))}
    budget = float(env.get("CHAOS_SECONDS", "180"))
    per = float(env.get("CHAOS_SEED_SECONDS", "35"))
    if env.get("CHAOS_SEED"):
        seeds = [int(x) for x in env["CHAOS_SEED"].split(",")]
    else:
        seeds = derive_seeds(int(env.get("CHAOS_BASE_SEED", "1")), 100000)
    print(f"chaos: kprism {args['kprism']}; {'own network namespace' if netns else 'host loopback'}; "
          f"budget {budget:.0f}s, {per:.0f}s of events per seed", flush=True)
    for name, flag in (("discovery CIDR key", wd.kprism_flag_like(args["kprism"], r"--discovery[-a-z]*(cidr|allow)[-a-z]*")),):
        print(f"chaos: {name}: {flag or 'not in this kprism (nothing passed)'}", flush=True)
    d = tempfile.mkdtemp(prefix="kprism-chaos-probe-")
    has = wd.World._has_allowed_cidrs(args["kprism"], d)
    os.rmdir(d)
    print(f"chaos: discovery.allowed_cidrs: {'127.0.0.0/8 (loopback stand-ins admitted)' if has else 'not in this kprism'}",
          flush=True)
    totals = {"seeds": [], "events": {}, "samples": {}, "requests": {}, "violations": [], "errors": [],
              "skipped": {}, "notes": {}}
    start = time.monotonic()
    for seed in seeds:
        left = budget - (time.monotonic() - start)
        if totals["seeds"] and not env.get("CHAOS_SEED") and left < per * 0.6 + 10:
            break
        run_seed(seed, per if env.get("CHAOS_SEED") else min(per, max(10.0, left - 10)), args, netns, totals)
        if env.get("CHAOS_SEED") is None and time.monotonic() - start >= budget:
            break
    took = time.monotonic() - start
    print("chaos: ---- summary ----")
    print(f"chaos: seeds run: {' '.join(map(str, totals['seeds']))} ({took:.0f}s)")
    print("chaos: events applied: " + ", ".join(f"{k} {v}" for k, v in sorted(totals["events"].items())))
    print("chaos: samples per invariant: " + ", ".join(f"{k} {v}" for k, v in sorted(totals["samples"].items())))
    print(f"chaos: requests: {totals['requests']}")
    print(f"chaos: notes: {totals['notes']}")
    skipped = dict(totals["skipped"])
    if not netns:
        skipped["blackhole, off-host hostile addresses"] = "no network namespace"
    skipped.setdefault("latency", "by the delaying relay in front of c4 (this kernel has no netem)")
    if not wd.World._poststart_flag(args["apiserver"]):
        skipped["Go-chunked /readyz"] = ("the Go stand-in has no --extra-poststart-hooks: chunked bodies come from "
                                         "c4's raw answer only")
    for k, v in skipped.items():
        print(f"chaos: note: {k}: {v}")
    by_inv = {}
    for seed, inv, t, msg in totals["violations"]:
        by_inv.setdefault(inv, []).append(seed)
    print("chaos: violations: " + (", ".join(f"{k} {len(v)} (seeds {' '.join(map(str, sorted(set(v))))})"
                                             for k, v in sorted(by_inv.items())) or "none"))
    for seed, inv, t, msg in totals["violations"]:
        print(f"chaos: violation: seed {seed} {inv} at {t:.1f}s: {msg[:400]}")
    for e in totals["errors"]:
        print(f"chaos: ERROR: {e}")
    bad = totals["violations"] or totals["errors"]
    print(f"chaos: {len(totals['seeds'])} seeds, {len(totals['violations'])} violations, {len(totals['errors'])} errors")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
