# SPDX-License-Identifier: Apache-2.0
"""Fault 8: resource exhaustion.

nofile-64     kprism under RLIMIT_NOFILE 64 (prlimit) and 100 simultaneous clients, plus 30 more
              that only connect and wait in the listen backlog (the classic trigger of an accept
              loop that spins): kprism lives, does not spin (CPU time from /proc/PID/stat over
              3 s), logs, sheds what it cannot hold, keeps the connections it holds working, does
              not blame the upstreams, and serves normally once the clients leave.
slow-reader   20 clients that ask for 10 MiB (the stand-in's "huge" /readyz) and never read, with
              a 4 KiB receive buffer: kprism's VmRSS stays bounded (backpressure: one chunk per
              direction at most), and once they do read, every byte arrives.
churn         10000 short-lived connections (each: TLS handshake, one GET), 8 at a time, after a
              2000-connection warm-up: afterwards kprism's open fds and VmRSS are where they were,
              within a tolerance a leak of 1 fd or 100 bytes per connection would exceed."""

import os
import socket
import threading
import time

from faultlib import admin
from faultlib.cleanup import Scope
from faultlib.client import Conn, make_context, request_once
from faultlib.cluster import Kprism, Upstream
from faultlib.procs import cpu_seconds, fd_count, rss_kib, wait_until

CHURN = int(os.environ.get("FAULTS_CHURN", "10000"))
CHURN_WARMUP = 2000
CHURN_THREADS = 8
HUGE = 10 << 20  # the stand-in's "huge" /readyz body


def nofile(env, rep):
    name = "nofile-64"
    with Scope() as sc:
        ups = [Upstream(env, sc, n, i) for i, n in enumerate("abc")]
        k = Kprism(env, sc, [u.addr for u in ups], nofile=64).start()
        ctx = make_context(env.pki)
        with open(f"/proc/{k.pid}/limits") as f:
            lim = next((line for line in f if line.startswith("Max open files")), "").split()
        rep.check(lim[3:5] == ["64", "64"], f"{name}: kprism runs with RLIMIT_NOFILE 64", " ".join(lim))
        fds0 = fd_count(k.pid)
        held, shed = [], []
        lock = threading.Lock()
        release = threading.Event()

        def client(i):
            try:
                c = Conn(ctx, k.port, time.monotonic() + 5.0)
                served, _ = c.get(f"/many/{i}")
                with lock:
                    held.append((c, served))
                release.wait(30)
            except Exception as e:
                with lock:
                    shed.append(f"{type(e).__name__}")
        threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(100)]
        for t in threads:
            t.start()
        backlog = []
        for _ in range(30):  # TCP connects only: they wait in the backlog while kprism is at its limit
            s = socket.socket()
            s.settimeout(2)
            try:
                s.connect(("127.0.0.1", k.port))
            except OSError:
                pass
            backlog.append(s)
        sc.add("clients", lambda: (release.set(), [s.close() for s in backlog]))
        wait_until(lambda: len(held) + len(shed) >= 100, 10, 0.05)
        cpu0, t_c = cpu_seconds(k.pid), time.monotonic()
        threading.Event().wait(3.0)
        cpu = (cpu_seconds(k.pid) - cpu0) / (time.monotonic() - t_c)
        fds_peak = fd_count(k.pid)
        # At the limit kprism must still be observable and keep checking its upstreams.
        st = admin.status(k.admin_port, timeout=2.0)
        rep.check(st is not None and st.get("connections_active", 0) >= 1,
                  f"{name}: the admin endpoint answers at the fd limit "
                  f"({st.get('connections_active') if st else 'no answer'} connections active)")
        probes0 = _probes(ups)
        more = wait_until(lambda: _probes(ups) >= probes0 + len(ups), 7, 0.2)
        rep.check(more, f"{name}: readiness checks keep running at the fd limit ({_probes(ups) - probes0} answered "
                        f"in 7 s)", k.tail(3))
        alive = k.proc.running()
        rep.check(alive, f"{name}: kprism alive with 100 clients + 30 in the backlog")
        rep.check(cpu < 0.05, f"{name}: no spin: kprism CPU {cpu * 100:.1f} % over 3 s at the fd limit (bound 5 %)")
        rep.check(held and shed, f"{name}: {len(held)} clients held, {len(shed)} shed (reset), "
                                 f"kprism at {fds_peak} of 64 fds")
        works = 0
        for c, served in list(held):
            try:
                c.deadline = time.monotonic() + 5
                s2, _ = c.get("/many/again")
                works += s2 == served
            except Exception:
                pass
        rep.check(works == len(held), f"{name}: every held connection still answers ({works} of {len(held)})")
        out = k.output()
        rep.check("RLIMIT_NOFILE allows fewer client connections than max_connections" in out,
                  f"{name}: kprism warns at start that RLIMIT_NOFILE caps its connections")
        rep.check("connection rejected" in out and "RLIMIT_NOFILE" in out,
                  f"{name}: the shed clients are logged ('connection rejected ... RLIMIT_NOFILE')")
        lines = len(out.splitlines())
        rep.check(lines < 400, f"{name}: log stays small ({lines} lines)")
        release.set()
        for c, _ in held:
            c.close()
        for s in backlog:
            s.close()
        for t in threads:
            t.join(6)
        settled = wait_until(lambda: fd_count(k.pid) <= fds0 + 1, 10, 0.05)
        rep.check(settled, f"{name}: fds back to {fd_count(k.pid)} (were {fds0}) once the clients left")
        after = [request_once(ctx, k.port, f"/after/{i}") for i in range(20)]
        rep.check(all(r.ok for r in after), f"{name}: serves normally afterwards ({sum(r.ok for r in after)} of 20)")
        mets = admin.metrics(k.admin_port) or {}
        rejected = mets.get("kprism_connections_rejected_total", 0)
        rep.check(rejected >= len(shed), f"{name}: the shed clients are counted "
                                         f"(kprism_connections_rejected_total {rejected:.0f} >= {len(shed)})")
        downs = sum(v for key, v in mets.items() if key.startswith("kprism_upstream_transitions_total") and 'to="down"' in key)
        rep.check(downs == 0 and all(v == "up" for v in k.states().values()),
                  f"{name}: no upstream blamed for kprism's own fd exhaustion (transitions to down: {downs:.0f})")
        rep.row(fault=name, failed=f"{len(shed)} shed / 100", notes=f"RLIMIT_NOFILE 64: {len(held)} held and working, "
                f"kprism CPU {cpu * 100:.1f}% at the limit, {rejected:.0f} rejected (logged, counted); "
                f"admin and checks work at the limit; normal again after")


def _probes(ups):
    """Readiness checks the stand-ins answered (their log has a line per request), independent of
    kprism's admin endpoint."""
    return sum(u.proc.output().count("request path=/readyz") for u in ups)


def slow_reader(env, rep):
    name = "slow-reader"
    with Scope() as sc:
        u = Upstream(env, sc, "bulk", 0)
        u.set_readyz("huge")  # GET /readyz: 200 with a 10 MiB body (the check reads only the head)
        k = Kprism(env, sc, [u.addr]).start()
        ctx = make_context(env.pki)
        req = b"GET /readyz HTTP/1.1\r\nHost: kubernetes\r\n\r\n"

        def fetch(c):
            c.deadline = time.monotonic() + 60
            _, body = c.read_response()
            return body
        warm = Conn(ctx, k.port, time.monotonic() + 10)
        warm.s.sendall(req)
        body = fetch(warm)
        warm.close()
        rep.check(len(body) == HUGE and body.count(b"k") == HUGE, f"{name}: a 10 MiB answer passes whole")
        rss0 = rss_kib(k.pid)
        readers = []
        for _ in range(20):
            c = Conn(ctx, k.port, time.monotonic() + 10, rcvbuf=4096)
            c.s.sendall(req)
            readers.append(c)
        sc.add("readers", lambda: [c.close() for c in readers])
        peak = rss0
        end = time.monotonic() + 5
        while time.monotonic() < end:
            peak = max(peak, rss_kib(k.pid))
            time.sleep(0.1)
        mets = admin.metrics(k.admin_port) or {}
        pushed = sum(v for key, v in mets.items() if key.startswith("kprism_upstream_bytes_total") and "from_upstream" in key)
        growth = peak - rss0
        rep.check(growth < 8 * 1024, f"{name}: kprism VmRSS {rss0} -> at most {peak} KiB (+{growth} KiB) with 20 "
                                     f"readers not reading 200 MiB (bound +8 MiB)")
        rep.info(f"{name}: {pushed / 2**20:.1f} MiB passed from the upstream in 5 s, the rest held back")
        whole = 0
        for c in readers[:5]:
            try:
                body = fetch(c)
                whole += len(body) == HUGE and body.count(b"k") == HUGE
            except Exception:
                pass
        rep.check(whole == 5, f"{name}: once read, the answers arrive whole ({whole} of 5 checked)")
        rep.row(fault=name, notes=f"20 clients not reading 10 MiB each: VmRSS +{growth} KiB "
                                  f"(peak {peak} KiB); {pushed / 2**20:.1f} MiB let through in 5 s")


def churn(env, rep):
    name = "churn"
    with Scope() as sc:
        ups = [Upstream(env, sc, n, i, quiet=True) for i, n in enumerate("abc")]
        k = Kprism(env, sc, [u.addr for u in ups]).start()
        ctx = make_context(env.pki)
        failures = []

        def run_n(n, tag):
            counter = iter(range(n))
            lock = threading.Lock()

            def worker():
                while True:
                    with lock:
                        i = next(counter, None)
                    if i is None:
                        return
                    r = request_once(ctx, k.port, f"/{tag}/{i}", 5.0)
                    if not r.ok:
                        failures.append(r.error)
            ts = [threading.Thread(target=worker, daemon=True) for _ in range(CHURN_THREADS)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(600)

        def settled_sample():
            wait_until(lambda: (admin.status(k.admin_port) or {}).get("connections_active") == 0, 10, 0.05)
            time.sleep(0.5)
            return min(fd_count(k.pid) for _ in range(5)), rss_kib(k.pid)
        run_n(CHURN_WARMUP, "warm")
        fd0, rss0 = settled_sample()
        acc0 = (admin.metrics(k.admin_port) or {}).get("kprism_connections_accepted_total", 0)
        t = time.monotonic()
        run_n(CHURN, "churn")
        took = time.monotonic() - t
        fd1, rss1 = settled_sample()
        acc1 = (admin.metrics(k.admin_port) or {}).get("kprism_connections_accepted_total", 0)
        rep.check(not failures, f"{name}: {CHURN_WARMUP + CHURN} short connections, zero failed "
                                f"({CHURN / took:.0f}/s)", "; ".join(set(failures))[:200])
        rep.check(acc1 - acc0 >= CHURN, f"{name}: kprism accepted {acc1 - acc0:.0f} connections in the run")
        rep.check(fd1 - fd0 <= 2, f"{name}: open fds {fd0} -> {fd1} (a leak of 1 per connection: +{CHURN})")
        tol = CHURN * 100 // 1024 // 2  # half of what 100 bytes per connection would leak
        rep.check(rss1 - rss0 <= tol, f"{name}: VmRSS {rss0} -> {rss1} KiB ({rss1 - rss0:+d} KiB; bound +{tol} KiB, "
                                      f"a 100-byte leak per connection: +{CHURN * 100 // 1024} KiB)")
        rep.row(fault=f"churn {CHURN}", failed=f"{len(failures)} / {CHURN_WARMUP + CHURN}",
                notes=f"{CHURN / took:.0f} conn/s; fds {fd0} -> {fd1}, VmRSS {rss0} -> {rss1} KiB "
                      f"({rss1 - rss0:+d} KiB)")


def run(env, rep, only=None):
    only = only or [x for x in os.environ.get("FAULTS_RESOURCES", "").split(",") if x]
    for nm, fn in (("nofile-64", nofile), ("slow-reader", slow_reader), ("churn", churn)):
        if only and nm not in only:
            continue
        try:
            fn(env, rep)
        except Exception as e:
            rep.fail(f"{nm}: {type(e).__name__}: {e}")
