# SPDX-License-Identifier: Apache-2.0
"""Fault 6: kprism itself SIGKILLed and restarted while clients keep connecting and retrying.

Two ways to come back on 127.0.0.1:PORT:
  rebind       the new kprism binds the port itself (connects in the gap are refused, and a
               client retries them);
  held-socket  the listening socket belongs to the test, as it would to systemd with
               kprism.socket (systemd-socket-activate cannot hold it across a restart: it execs
               the service in its own place), and each kprism gets it as fd 3 (LISTEN_FDS=1,
               LISTEN_FDNAMES=data): connects in the gap wait in the backlog.
The restart follows the death after 100 ms, systemd's default RestartSec.

Figures: time from the SIGKILL until a new connection is served again; client failures (each
client retries refused or reset connects for up to 5 s, like client-go); refused attempts; how
fast the connections established through the dead kprism learn of it."""

import signal
import socket
import threading
import time

from faultlib.cleanup import Scope
from faultlib.client import make_context, open_holders, request_once, request_with_retry
from faultlib.cluster import Kprism, Upstream
from faultlib.procs import free_port, wait_until

RESTART_SEC = 0.1
SERVE_BOUND = 2.0  # from the SIGKILL until it serves again
CLIENT_EVERY = 0.05


class RetryStream:
    """A new retrying client every 50 ms on its own thread: (Result, attempts, failed attempts' errors)."""

    def __init__(self, ctx, port, max_seconds=60):
        self.out = []
        self.lock = threading.Lock()
        self.stop_ev = threading.Event()
        self.threads = []
        self.ctx, self.port, self.max = ctx, port, max_seconds
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        end = time.monotonic() + self.max
        n = 0
        while not self.stop_ev.is_set() and time.monotonic() < end:
            n += 1
            th = threading.Thread(target=self._one, args=(n,), daemon=True)
            th.start()
            self.threads.append(th)
            self.stop_ev.wait(CLIENT_EVERY)

    def _one(self, n):
        errors = []
        r, attempts = request_with_retry(self.ctx, self.port, f"/retry/{n}", timeout=5.0, errors=errors)
        with self.lock:
            self.out.append((r, attempts, errors))

    def stop(self):
        self.stop_ev.set()
        self.t.join(5)
        for th in self.threads:
            th.join(7)
        return sorted(self.out, key=lambda x: x[0].start)


def one_restart(env, rep, variant):
    name = f"kprism-sigkill-{variant}"
    with Scope() as sc:
        ups = [Upstream(env, sc, n, i) for i, n in enumerate("abc")]
        port = free_port()
        lsock = None
        if variant == "held-socket":
            lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            lsock.bind(("127.0.0.1", port))
            lsock.listen(4096)
            lsock.set_inheritable(True)
            sc.add("listening socket", lsock.close)
        k = Kprism(env, sc, [u.addr for u in ups], port=port, listen_fd=lsock.fileno() if lsock else None,
                   log_name=name).start()
        if lsock:
            rep.check("listening on sockets passed by systemd" in k.output(),
                      f"{name}: kprism listens on the passed socket (LISTEN_FDS)", k.tail())
        ctx = make_context(env.pki)
        holders = open_holders(ctx, k.port, 6)
        sc.add("holders", lambda: [h.close() for h in holders])
        stream = RetryStream(ctx, k.port)
        sc.add("retry stream", stream.stop)
        threading.Event().wait(1.5)

        t0 = time.monotonic()
        k.proc.signal(signal.SIGKILL)
        k.proc.wait(5)
        t_dead = time.monotonic()
        # The connections through the dead kprism: the kernel closed them at once.
        wait_until(lambda: all(h.poll_closed() for h in holders), 3, 0.01)
        closed = [h.closed_at - t0 for h in holders if h.closed_at]
        threading.Event().wait(max(0.0, t_dead + RESTART_SEC - time.monotonic()))
        k.start(wait_up=False)
        t_started = time.monotonic()

        def served():
            r = request_once(ctx, k.port, "/after-restart", 1.0)
            return r if r.ok else None
        first = wait_until(served, 5, 0.01)
        t_serve = first.end - t0 if first else None
        threading.Event().wait(2.0)
        results = stream.stop()
        up = k.wait_all("up", 10)

        after = [(r, n, e) for r, n, e in results if r.start >= t0 - 5.0]  # every client alive across the kill
        failed = [r for r, _, _ in after if not r.ok]
        retried = [n for r, n, _ in after if n > 1]
        refused_attempts = sum(n - 1 for n in retried)
        # A connect refused in the gap is what the held socket prevents; a client whose connection
        # the dead kprism had already accepted is reset (as the holders are) and retries anyway.
        refused = [e for _, _, e in after if any("refused" in x.lower() for x in e)]
        worst = max((r.latency for r, _, _ in after if r.ok and r.start >= t0 - 1), default=None)
        rep.check(not failed, f"{name}: zero failed clients ({len(failed)} of {len(after)} around the restart, "
                              f"each retrying up to 5 s)", "; ".join(sorted({r.error for r in failed}))[:300])
        rep.check(t_serve is not None and t_serve <= SERVE_BOUND,
                  f"{name}: serving again {fmt(t_serve)} s after the SIGKILL (restart after {RESTART_SEC:.1f} s, "
                  f"start took {t_started - t_dead - RESTART_SEC:.2f} s; bound {SERVE_BOUND:.0f} s)")
        if variant == "held-socket":
            rep.check(not refused, f"{name}: no connect refused in the gap ({len(refused)} clients refused; "
                                   f"{len(retried) - len(refused)} retried after a reset of a connection the "
                                   f"dead kprism had accepted)",
                      "; ".join(sorted({x for e in refused for x in e}))[:300])
        else:
            rep.info(f"{name}: {len(retried)} clients had {refused_attempts} refused or reset attempts and retried")
        rep.check(len(closed) == len(holders) and max(closed) <= 1.0,
                  f"{name}: the {len(holders)} connections through the dead kprism ended at once "
                  f"({fmt(max(closed) if closed else None)} s)")
        rep.check(bool(up), f"{name}: the new kprism has every upstream up", str(k.states()))
        note = (f"{len(retried)} clients retried {refused_attempts} refused attempts" if retried else "no refused connect")
        note += f"; worst client {worst:.2f}s" if worst else ""
        rep.row(fault=name, down=None, moved=None, failed=f"{len(failed)} / {len(after)}",
                closed=max(closed) if closed else None, recovered=t_serve,
                notes=f"recovered = serving again after SIGKILL; {note}")


def fmt(v):
    return "-" if v is None else f"{v:.2f}"


def run(env, rep):
    for variant in ("rebind", "held-socket"):
        try:
            one_restart(env, rep, variant)
        except Exception as e:
            rep.fail(f"kprism-sigkill-{variant}: {type(e).__name__}: {e}")
