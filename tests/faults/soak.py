# SPDX-License-Identifier: Apache-2.0
"""Fault 9: a soak. For SOAK_SECONDS, mixed load through kprism while the upstreams flap:

  watches  12 long-lived keep-alive connections, a GET every 0.5 s each, reconnecting when
           kprism or the upstream ends them (as kubelet's watches do);
  short    a new connection every 100 ms, one GET each;
  bulk     2 connections that pipeline batches of 16 GETs with 4 KiB random paths (66 KiB up,
           about as much down, per batch), every answer byte-checked and the whole stream's
           SHA-256 compared with what was sent, 50 batches per connection, then a new one;
  chaos    every 2-4 s one of: /readyz 500 for 4-10 s (--readyz-file), SIGKILL and a restart
           1-3 s later, SIGSTOP for 2-6 s, a blackhole for 3-8 s; on a random stand-in (seeded:
           SOAK_SEED, printed).

Asserted: kprism never exits (polled every 100 ms) and exits 0 on SIGTERM at the end; zero
corrupted bytes anywhere; the load kept flowing; every upstream is up and serving again after
the chaos; no AddressSanitizer/LeakSanitizer/UBSan report in kprism's output (an ASan build:
`make soak-asan`). Connection errors caused by the chaos are counted, not failures."""

import hashlib
import os
import random
import secrets
import signal
import threading
import time

from faultlib import admin
from faultlib.cleanup import Scope
from faultlib.client import Conn, Stream, make_context
from faultlib.cluster import Kprism, Upstream
from faultlib.procs import fd_count, rss_kib, wait_until
from faultlib.scenario import RECOVER_BOUND

WATCHES = 12
BULK_CONNS = 2
BATCH = 16
PATH_BYTES = 4096
BATCHES_PER_CONN = 50
SAN_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "LeakSanitizer has encountered", "runtime error:",
               "SUMMARY: AddressSanitizer",
               "SUMMARY: UndefinedBehaviorSanitizer")


class Counters:
    def __init__(self):
        self.lock = threading.Lock()
        self.c = {}

    def add(self, key, n=1):
        with self.lock:
            self.c[key] = self.c.get(key, 0) + n

    def get(self, key):
        return self.c.get(key, 0)


def watcher(ctx, port, stop, cnt, i):
    n = 0
    while not stop.is_set():
        try:
            c = Conn(ctx, port, time.monotonic() + 5)
        except Exception:
            cnt.add("watch_connect_errors")
            stop.wait(0.2)
            continue
        cnt.add("watch_connections")
        try:
            while not stop.is_set():
                n += 1
                c.deadline = time.monotonic() + 5
                c.get(f"/watch/{i}/{n}")
                cnt.add("watch_requests")
                stop.wait(0.5)
        except ValueError as e:
            cnt.add("corrupted")
            cnt.add("corrupted_detail:" + str(e)[:80])
        except Exception:
            cnt.add("watch_ended")  # closed for a down upstream, a killed stand-in, ...
        finally:
            c.close()


def bulk(ctx, port, stop, cnt, i):
    while not stop.is_set():
        try:
            c = Conn(ctx, port, time.monotonic() + 5)
        except Exception:
            cnt.add("bulk_connect_errors")
            stop.wait(0.2)
            continue
        sent, got = hashlib.sha256(), hashlib.sha256()
        try:
            for b in range(BATCHES_PER_CONN):
                if stop.is_set():
                    break
                paths = [f"/bulk/{i}/{b}/{k}/{secrets.token_hex(PATH_BYTES // 2)}" for k in range(BATCH)]
                c.deadline = time.monotonic() + 10
                c.s.settimeout(10)
                c.s.sendall(b"".join(f"GET {p} HTTP/1.1\r\nHost: kubernetes\r\n\r\n".encode() for p in paths))
                cnt.add("bulk_bytes_up", sum(len(p) + 40 for p in paths))
                served = None
                for p in paths:
                    head, body = c.read_response()
                    name = head.split(b"X-Served-By: ", 1)[1].split(b"\r\n", 1)[0].decode() if b"X-Served-By: " in head else "?"
                    served = served or name
                    want = f"served by {served} path {p}\n".encode()
                    sent.update(want)
                    got.update(body)
                    if body != want:
                        raise ValueError(f"bulk answer differs: {body[:60]!r}")
                    cnt.add("bulk_bytes_down", len(body))
                cnt.add("bulk_batches")
            if sent.digest() != got.digest():
                raise ValueError("bulk checksum mismatch")
            cnt.add("bulk_streams_checked")
        except ValueError as e:
            cnt.add("corrupted")
            cnt.add("corrupted_detail:" + str(e)[:80])
        except Exception:
            cnt.add("bulk_ended")
        finally:
            c.close()


def chaos(ups, stop, cnt, rng, log):
    """One fault at a time per upstream, each undone by a timer; every undo runs before the end.
    `log` gets [start, end, upstream, kind] per fault (monotonic times)."""
    busy = set()
    timers = []

    def later(delay, fn, u):
        span = log[-1]

        def run():
            try:
                fn()
            finally:
                span[1] = time.monotonic()
                busy.discard(u.name)
        t = threading.Timer(delay, run)
        t.daemon = True
        timers.append((t, run))
        t.start()
    while not stop.wait(rng.uniform(2.0, 4.0)):
        free = [u for u in ups if u.name not in busy]
        if not free:
            continue
        u = rng.choice(free)
        kind = rng.choice(["readyz500", "kill", "stop", "blackhole"])
        busy.add(u.name)
        cnt.add(f"chaos_{kind}")
        log.append([time.monotonic(), None, u.name, kind])
        if kind == "readyz500":
            u.set_readyz("500")
            later(rng.uniform(4, 10), lambda u=u: u.set_readyz("200"), u)
        elif kind == "kill":
            u.proc.signal(signal.SIGKILL)
            u.proc.wait(5)
            later(rng.uniform(1, 3), u.start, u)
        elif kind == "stop":
            u.proc.signal(signal.SIGSTOP)
            later(rng.uniform(2, 6), lambda u=u: u.proc.signal(signal.SIGCONT), u)
        else:
            u.ns.blackhole()
            later(rng.uniform(3, 8), u.ns.heal, u)
    for t, fn in timers:  # undo whatever is still pending, now
        if t.is_alive():
            t.cancel()
            fn()


def run(env, rep, seconds, binary=None, name="soak"):
    seed = int(os.environ.get("SOAK_SEED", str(int(time.time()))))
    rng = random.Random(seed)
    rep.info(f"{name}: {seconds} s, seed {seed} (SOAK_SEED), kprism {binary or env.kprism}")
    with Scope() as sc:
        ups = [Upstream(env, sc, n, i, quiet=True) for i, n in enumerate("abc")]
        extra_env = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:halt_on_error=1",
                     "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}
        k = Kprism(env, sc, [u.addr for u in ups], binary=binary, log_name=name, extra_env=extra_env).start()
        ctx = make_context(env.pki)
        fd0, rss0 = fd_count(k.pid), rss_kib(k.pid)
        cnt = Counters()
        stop = threading.Event()
        threads = [threading.Thread(target=watcher, args=(ctx, k.port, stop, cnt, i), daemon=True) for i in range(WATCHES)]
        threads += [threading.Thread(target=bulk, args=(ctx, k.port, stop, cnt, i), daemon=True) for i in range(BULK_CONNS)]
        chaos_log = []
        chaos_stop = threading.Event()
        ch = threading.Thread(target=chaos, args=(ups, chaos_stop, cnt, rng, chaos_log), daemon=True)
        sc.add("soak load", lambda: (stop.set(), chaos_stop.set()))
        for t in threads:
            t.start()
        short = Stream(ctx, k.port, 0.1, timeout=5.0, max_seconds=seconds + 60, tag="short")
        sc.add("short stream", short.stop)
        ch.start()
        crashed = None
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if not k.proc.running():
                crashed = k.proc.p.returncode
                break
            time.sleep(0.1)
        chaos_stop.set()
        ch.join(30)
        # After the chaos: everything healed; every upstream up again and serving.
        all_up = k.wait_all("up", RECOVER_BOUND + 8)
        threading.Event().wait(2.0)
        stop.set()
        results = short.stop()
        for t in threads:
            t.join(15)
        short_fail = [r for r in results if not r.ok]
        corrupted_short = [r for r in short_fail if r.error and r.error.startswith("ValueError")]
        tail = [r for r in results if r.start >= end + 1.0 and all_up]
        mets = admin.metrics(k.admin_port) or {}
        served_by = {r.served_by for r in results[-30:] if r.ok}
        wait_until(lambda: (admin.status(k.admin_port) or {}).get("connections_active") == 0, 10, 0.1)
        time.sleep(0.5)  # a readiness check may hold a socket for a moment: the smallest of 5 counts
        fd1 = min(fd_count(k.pid) for _ in range(5)) if k.proc.running() else -1
        rss1 = rss_kib(k.pid) if k.proc.running() else -1
        rc = k.proc.stop(timeout=20) if crashed is None else crashed
        out = k.output()
        san = [line for line in out.splitlines() if any(m in line for m in SAN_MARKERS)]
        corrupted = cnt.get("corrupted") + len(corrupted_short)
        rep.check(crashed is None, f"{name}: kprism ran {seconds} s of chaos without exiting", f"exit {crashed}: {k.tail()}")
        rep.check(rc == 0, f"{name}: kprism exits 0 on SIGTERM at the end (exit {rc})", k.tail())
        rep.check(corrupted == 0, f"{name}: zero corrupted bytes ({cnt.get('bulk_bytes_down') / 2**20:.0f} MiB bulk "
                                  f"checked, {cnt.get('bulk_streams_checked')} streams by SHA-256, "
                                  f"{cnt.get('watch_requests')} watch and {len(results)} short answers)",
                  "; ".join(k2 for k2 in cnt.c if k2.startswith("corrupted_detail")))
        rep.check(cnt.get("watch_requests") > WATCHES * seconds * 0.5 and cnt.get("bulk_batches") > 10 and
                  len(results) > seconds * 5, f"{name}: the load kept flowing ({cnt.get('watch_requests')} watch "
                                              f"requests, {cnt.get('bulk_batches')} bulk batches, {len(results)} short)")
        rep.check(all_up and served_by == {"a", "b", "c"},
                  f"{name}: after the chaos every upstream is up and serving ({sorted(served_by)})")
        rep.check(not [r for r in tail if not r.ok], f"{name}: no failed connection once all were up again "
                                                      f"({len(tail)})")
        rep.check(not san, f"{name}: no sanitizer report in kprism's output", " | ".join(san[:5]))
        rep.check(0 <= fd1 <= fd0 + 2, f"{name}: kprism's open fds back to {fd1} (were {fd0}) once the clients left")
        chaos_n = {k2[6:]: v for k2, v in cnt.c.items() if k2.startswith("chaos_")}
        # Each failed short connection, by its error and by how many upstreams were faulty while
        # it ran (the chaos runs one fault per upstream at a time, on any of them at once).
        kinds = {}
        for r in short_fail:
            faulty = {n for t0, t1, n, _ in chaos_log if t0 <= r.end and (t1 is None or t1 >= r.start)}
            key = f"{(r.error or '?').split(':')[0]} with {len(faulty)} faulty"
            kinds[key] = kinds.get(key, 0) + 1
        rep.info(f"{name}: chaos {chaos_n}; short {len(short_fail)} of {len(results)} failed (chaos: {kinds}); watches "
                 f"reconnected {cnt.get('watch_ended')} times; bulk streams ended by chaos {cnt.get('bulk_ended')}; "
                 f"fds {fd0} -> {fd1}, VmRSS {rss0} -> {rss1} KiB; replayed "
                 f"{mets.get('kprism_connections_replayed_total', 0):.0f}, closed for down "
                 f"{mets.get('kprism_connections_closed_upstream_down_total', 0):.0f}")
        rep.row(fault=f"{name} {seconds}s", failed=f"{len(short_fail)} / {len(results)} short (chaos)",
                notes=f"chaos {sum(chaos_n.values())} faults; 0 crashes; {corrupted} corrupted of "
                      f"{cnt.get('bulk_bytes_down') / 2**20:.0f} MiB bulk + {cnt.get('watch_requests')} watch answers; "
                      f"fds {fd0}->{fd1}, RSS {rss0}->{rss1} KiB" + ("; sanitizers clean" if not san else ""))
        return rep
