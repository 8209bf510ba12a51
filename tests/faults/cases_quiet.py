# SPDX-License-Identifier: Apache-2.0
"""Faults without client traffic: how long the readiness checks alone take to mark the faulty
upstream down (kprism(8), Detection times). No client connection fails or signals anything here,
so the figures are the checks' own: on the kept probe connection, and the new connection that
health.new_connection_interval (30 s) opens. The fault hits "a" at a random moment of the check
cycle and of the kept connection's age; "a" must come back after the lift.

quiet-readyz-500  /readyz answers 500                 bound interval (5 s)
quiet-sigstop     the process stopped (hung)          bound interval + timeout (8 s)
quiet-sigkill     the process killed, then restarted  bound 2 x fast_interval (2 s)
quiet-blackhole   every packet dropped                bound interval + 2 x timeout (11 s)
quiet-syn-drop    new connections dropped             bound new_connection_interval + interval
                                                      + 2 x timeout (41 s)
Each bound gets 0.5 s of slack for the log's clock and the scheduler."""

import random
import signal
import threading
import time
from dataclasses import dataclass

from faultlib import admin
from faultlib.cleanup import Scope
from faultlib.cluster import Kprism, Upstream
from faultlib.scenario import FAST, INTERVAL, RECOVER_BOUND, TIMEOUT, _log_first, fmt

NEW_CONNECTION_INTERVAL = 30.0  # kprism's default health.new_connection_interval
SLACK = 0.5


@dataclass
class QuietFault:
    name: str
    inject: object
    lift: object
    bound: float
    spread: float  # the fault lands at a random moment in [1.5, 1.5 + spread] s after all are up


def _kill(a):
    a.proc.signal(signal.SIGKILL)
    a.proc.wait(5)


def faults():
    return [
        QuietFault("quiet-readyz-500", lambda a: a.set_readyz("500"), lambda a: a.set_readyz("200"), INTERVAL,
                   INTERVAL),
        QuietFault("quiet-sigstop", lambda a: a.proc.signal(signal.SIGSTOP), lambda a: a.proc.signal(signal.SIGCONT),
                   INTERVAL + TIMEOUT, INTERVAL),
        QuietFault("quiet-sigkill", _kill, lambda a: a.start(), 2 * FAST, INTERVAL),
        QuietFault("quiet-blackhole", lambda a: a.ns.blackhole(), lambda a: a.ns.heal(), INTERVAL + 2 * TIMEOUT,
                   INTERVAL),
        QuietFault("quiet-syn-drop", lambda a: a.ns.drop_syn(), lambda a: a.ns.heal(),
                   NEW_CONNECTION_INTERVAL + INTERVAL + 2 * TIMEOUT, NEW_CONNECTION_INTERVAL),
    ]


def run_one(env, rep, f, rng=random):
    name = f.name
    with Scope() as sc:
        ups = [Upstream(env, sc, n, i) for i, n in enumerate("abc")]
        a = ups[0]
        k = Kprism(env, sc, [u.addr for u in ups]).start()
        w = admin.StatusWatcher(k.admin_port)
        sc.add("status watcher", w.stop)
        threading.Event().wait(rng.uniform(1.5, 1.5 + f.spread))
        t0, wall0 = time.monotonic(), time.time()
        f.inject(a)
        seen = w.wait(a.addr, "down", t0, f.bound + SLACK + 3)
        down_wall = _log_first(k, f'msg="upstream down" upstream={a.addr}', wall0)
        down = down_wall - wall0 if down_wall else None
        rep.check(seen is not None and down is not None and down <= f.bound + SLACK,
                  f"{name}: a marked down {fmt(down)} s after the fault with no client traffic "
                  f"(bound {f.bound:.0f} s + {SLACK} s)")
        others = [u for u in ups[1:] if w.transitions(u.addr, t0)]
        rep.check(not others, f"{name}: b and c stay up", str([u.name for u in others]))
        t_lift, wall_lift = time.monotonic(), time.time()
        f.lift(a)
        w.wait(a.addr, "up", t_lift, RECOVER_BOUND + 5)
        up_wall = _log_first(k, f'msg="upstream up" upstream={a.addr}', wall_lift)
        recovered = up_wall - wall_lift if up_wall else None
        rep.check(recovered is not None and recovered <= RECOVER_BOUND,
                  f"{name}: a up again {fmt(recovered)} s after the lift (bound {RECOVER_BOUND:.1f} s)")
        line = next((ln for ln in k.output().splitlines() if f'msg="upstream down" upstream={a.addr}' in ln), "")
        reason = line.split("reason=", 1)[1][:90] if "reason=" in line else "-"
        rep.row(fault=name, down=down, moved=None, failed="no clients", closed=None, recovered=recovered,
                notes=f"bound {f.bound:.0f} s; {reason}")
        if not k.proc.running():
            rep.fail(f"{name}: kprism exited: {k.tail()}")


def run(env, rep, only=None):
    for f in faults():
        if only and f.name not in only:
            continue
        try:
            run_one(env, rep, f)
        except Exception as e:
            rep.fail(f"{f.name}: {type(e).__name__}: {e}")
