# SPDX-License-Identifier: Apache-2.0
"""Fault 7: every upstream faulty at once; kprism fails open (README "fail_mode", kprism(8)
"Fail-open and fail-closed"): with no upstream up, connections go to every endpoint anyway
(unknown first, then down, then those in backoff), which is no worse than a plain TCP balancer.

fail-open-unready    every /readyz answers 500 (the checks say no, the apiservers still serve):
                     all marked down, "failing open" logged once, /status fail_open, and not one
                     client fails until the checks pass again; the connections of the last upstream
                     to go down stay (none is closed while no other upstream is up).
fail-open-blackhole  every upstream blackholed: nothing can serve, so clients fail (expected and
                     counted, not a failure of kprism); kprism stays alive, idle and reachable;
                     once one upstream ("b") is healed, every client that starts from then on is
                     served (fail-open tries it), and "b" comes up."""

import threading
import time

from faultlib import admin
from faultlib.cleanup import Scope
from faultlib.client import Stream, make_context, open_holders
from faultlib.cluster import Kprism, Upstream
from faultlib.procs import cpu_seconds, wait_until
from faultlib.scenario import DOWN_BOUND, INTERVAL, RECOVER_BOUND, STREAM_INTERVAL, fmt

ALL_DOWN_500 = INTERVAL + 1.0  # a 5xx takes an upstream down at its next check


def _setup(env, sc, name):
    ups = [Upstream(env, sc, n, i) for i, n in enumerate("abc")]
    k = Kprism(env, sc, [u.addr for u in ups]).start()
    ctx = make_context(env.pki)
    w = admin.StatusWatcher(k.admin_port)
    sc.add("watcher", w.stop)
    holders = open_holders(ctx, k.port, 9, want={"a": 2, "b": 2, "c": 2})
    sc.add("holders", lambda: [h.close() for h in holders])
    stream = Stream(ctx, k.port, STREAM_INTERVAL, timeout=5.0, max_seconds=90, tag=name)
    sc.add("stream", stream.stop)
    threading.Event().wait(1.0)
    return ups, k, ctx, w, holders, stream


def _log_after(k, needle, wall):
    return [t for t in admin.log_times(k.output(), needle) if t >= wall - 0.002]


def unready(env, rep):
    name = "fail-open-unready"
    with Scope() as sc:
        ups, k, ctx, w, holders, stream = _setup(env, sc, name)
        t0, wall0 = time.monotonic(), time.time()
        for u in ups:
            u.set_readyz("500")
        all_down = wait_until(lambda: all(v == "down" for v in k.states().values()), ALL_DOWN_500 + 2, 0.05)
        downs = {u.name: (_log_after(k, f'msg="upstream down" upstream={u.addr}', wall0) or [None])[0] for u in ups}
        last_down = max((t for t in downs.values() if t), default=None)
        rep.check(all_down and last_down and last_down - wall0 <= ALL_DOWN_500,
                  f"{name}: every upstream down {fmt(last_down - wall0 if last_down else None)} s after /readyz "
                  f"turned 500 (bound {ALL_DOWN_500:.0f} s)")
        threading.Event().wait(3.0)
        st = admin.status(k.admin_port) or {}
        mets = admin.metrics(k.admin_port) or {}
        rep.check(st.get("fail_open") is True and mets.get("kprism_fail_open_active") == 1.0,
                  f"{name}: /status fail_open and kprism_fail_open_active 1")
        rep.check(k.output().count("no upstream ready: failing open") == 1, f"{name}: 'failing open' logged once")
        # Holders: the last one down keeps its connections; a closed one's upstream went down
        # while another was still up.
        order = sorted((t, n) for n, t in downs.items() if t)
        last = order[-1][1] if order else None
        for h in holders:
            h.poll_closed()
        kept = [h for h in holders if h.served_by == last]
        rep.check(kept and all(h.closed_at is None for h in kept),
                  f"{name}: connections of the last upstream down ({last}) stay open ({len(kept)})")
        closed = [h for h in holders if h.closed_at is not None]
        rep.check(all(h.served_by != last for h in closed),
                  f"{name}: only connections of upstreams that went down while another was up were closed "
                  f"({len(closed)} of {len(holders)})")
        # The stand-ins' 500 names [-]etcd: every one down for its etcd checks is quorum lost, one
        # event that closes nothing (kprism(8), Closing connections of a down upstream).
        rep.check(k.output().count("control plane has no etcd quorum") == 1,
                  f"{name}: 'control plane has no etcd quorum' logged once")
        during_end = time.monotonic()
        t_lift, wall_lift = time.monotonic(), time.time()
        for u in ups:
            u.set_readyz("200")
        up_again = wait_until(lambda: any(v == "up" for v in k.states().values()), RECOVER_BOUND + 3, 0.05)
        first_up = min((t for u in ups for t in _log_after(k, f'msg="upstream up" upstream={u.addr}', wall_lift)),
                       default=None)
        rec = first_up - wall_lift if first_up else None
        rep.check(up_again and rec is not None and rec <= RECOVER_BOUND,
                  f"{name}: an upstream up again {fmt(rec)} s after /readyz turned 200 (bound {RECOVER_BOUND:.1f} s)")
        rep.check(wait_until(lambda: "no-ready episode over" in k.output(), 3),
                  f"{name}: 'no-ready episode over' logged")
        threading.Event().wait(1.0)
        results = stream.stop()
        after = [r for r in results if r.start >= t0]
        # Until the checks pass again nothing fails. Once the first upstream is up, the connections
        # still on those not up yet move within close_spread (kprism(8), Closing connections of a
        # down upstream): a request in flight on one of them may be cut, as by any close on down.
        failed = [r for r in after if not r.ok and r.start < t_lift]
        moved = [r for r in after if not r.ok and r.start >= t_lift]
        rep.check(not failed, f"{name}: zero failed client connections until the checks pass again "
                              f"({len(failed)} of {len(after)}; {len(moved)} cut after, by the moves off the "
                              f"upstreams not up yet): the unready apiservers still serve",
                  "; ".join({r.error for r in failed})[:200])
        served = [r for r in after if r.start < during_end and r.start > (last_down or 0) - wall0 + t0]
        rep.check(served and all(r.ok for r in served),
                  f"{name}: while none is up, new connections are served anyway ({len(served)})")
        rep.row(fault=name, down=last_down - wall0 if last_down else None, moved=None,
                failed=f"{len(failed)} / {len(after)}", closed=None, recovered=rec,
                notes=f"all /readyz 500; down = the last one; {len(closed)} of {len(holders)} conns closed "
                      f"(none of the last one down)")


def blackhole(env, rep):
    name = "fail-open-blackhole"
    with Scope() as sc:
        ups, k, ctx, w, holders, stream = _setup(env, sc, name)
        t0, wall0 = time.monotonic(), time.time()
        for u in ups:
            u.ns.blackhole()
        all_down = wait_until(lambda: all(v == "down" for v in k.states().values()), DOWN_BOUND + 2, 0.05)
        downs = [(_log_after(k, f'msg="upstream down" upstream={u.addr}', wall0) or [None])[0] for u in ups]
        last_down = max(downs) - wall0 if all(downs) else None
        rep.check(all_down and last_down is not None and last_down <= DOWN_BOUND,
                  f"{name}: every upstream down {fmt(last_down)} s after the blackhole (bound {DOWN_BOUND:.1f} s)")
        cpu0, tc0 = cpu_seconds(k.pid), time.monotonic()
        threading.Event().wait(4.0)
        cpu = (cpu_seconds(k.pid) - cpu0) / (time.monotonic() - tc0)
        st = admin.status(k.admin_port) or {}
        rep.check(k.proc.running() and st.get("fail_open") is True,
                  f"{name}: kprism alive, admin endpoint answers, fail_open reported")
        rep.check(cpu < 0.2, f"{name}: kprism CPU {cpu * 100:.1f} % while nothing can serve (bound 20 %)")
        b = ups[1]
        t_lift, wall_lift = time.monotonic(), time.time()
        b.ns.heal()

        def served_after():
            return next((r for r in stream.snapshot() if r.start >= t_lift and r.ok), None)
        first = wait_until(served_after, 8, 0.02)
        served_in = first.end - t_lift if first else None
        b_up = wait_until(lambda: k.states().get(b.addr) == "up", RECOVER_BOUND + 3, 0.05)
        b_up_t = (_log_after(k, f'msg="upstream up" upstream={b.addr}', wall_lift) or [None])[0]
        # Watch clients that start over the 5.5 s after the heal, each given its 5 s to finish.
        threading.Event().wait(max(0.0, t_lift + 11.0 - time.monotonic()))
        t_end = time.monotonic()
        t_b_up = w.first(b.addr, "up", t_lift)
        flaps = w.transitions(b.addr, t_b_up + 0.01) if t_b_up else []
        rep.check(t_b_up and not flaps, f"{name}: b stays up once up (connects started before it was healed "
                                        f"are not held against it)", str(flaps))
        for u in ups:
            u.ns.heal()
        results = stream.stop()
        outage = [r for r in results if t0 + 1.0 <= r.start < t_lift - 5.0]  # started and ended with none reachable
        outage_failed = [r for r in outage if not r.ok]
        after_lift = [r for r in results if t_lift <= r.start < t_end - 5.0]
        failed_after = [r for r in after_lift if not r.ok]
        rep.info(f"{name}: {len(outage_failed)} of {len(outage)} clients failed while nothing was reachable (expected)")
        rep.check(served_in is not None and served_in <= 5.0,
                  f"{name}: a client is served {fmt(served_in)} s after b was healed (fail-open tries it)")
        rep.check(not failed_after, f"{name}: zero failed clients among those started after b was healed "
                                    f"({len(failed_after)} of {len(after_lift)})",
                  "; ".join({r.error for r in failed_after})[:200])
        rep.check(b_up and b_up_t is not None, f"{name}: b up {fmt(b_up_t - wall_lift if b_up_t else None)} s "
                                               f"after it was healed")
        rep.row(fault=name, down=last_down, moved=None,
                failed=f"{len(failed_after)} / {len(after_lift)} after b healed",
                closed=None, recovered=served_in,
                notes=f"all blackholed: {len(outage_failed)} of {len(outage)} failed with none reachable (expected); "
                      f"recovered = first client served after healing b; b up after "
                      f"{fmt(b_up_t - wall_lift if b_up_t else None)}s; kprism CPU {cpu * 100:.1f}%")


def run(env, rep, only=None):
    for name, fn in (("fail-open-unready", unready), ("fail-open-blackhole", blackhole)):
        if only and name not in only:
            continue
        try:
            fn(env, rep)
        except Exception as e:
            rep.fail(f"{name}: {type(e).__name__}: {e}")
