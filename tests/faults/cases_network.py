# SPDX-License-Identifier: Apache-2.0
"""Faults 1-5: network faults (iptables in a's namespace; latency from delay_relay.py) and
process faults of one stand-in apiserver, each through faultlib.scenario.run_fault."""

import signal
import statistics
import time

from faultlib.scenario import Fault, run_fault


def _stop_and_reap(u):
    u.proc.signal(signal.SIGKILL)
    u.proc.wait(5)


def _established_still_work(ctx, on_a, rep):
    """SYN drop: right after the rule is in, an established connection to a still answers."""
    rep.check(on_a and on_a[0].works(), "syn-drop: an established connection to a still answers under the SYN drop")


def _latency_probe(ms):
    def after_inject(ctx, on_a, rep):
        t = time.monotonic()  # the relay has taken up the delay (Upstream.set_delay waits for it)
        ok = on_a and on_a[0].works(timeout=5)
        took = time.monotonic() - t
        rep.check(ok and took >= ms / 1000.0 * 0.9,
                  f"latency-{ms}ms: a request on an established connection to a takes {took:.2f} s (delay {ms} ms)")
    return after_inject


def _latency_figures(ms):
    def extra(m, rep):
        t0, end = m["t0"], m["during_end"]
        via_a = [r.latency for r in m["results"] if t0 + 0.5 <= r.start < end and r.served_by == "a"]
        via_bc = [r.latency for r in m["results"] if t0 + 0.5 <= r.start < end and r.ok and r.served_by != "a"]
        rtt = m["watcher"].max_rtt(m["ups"][0].addr, t0, end)
        rep.check(via_a, f"latency-{ms}ms: new connections still land on a ({len(via_a)})")
        if via_a and via_bc:
            ma, mb = statistics.median(via_a), statistics.median(via_bc)
            rep.check(ma >= ms / 1000.0, f"latency-{ms}ms: a new connection via a takes {ma:.2f} s (median), via b/c {mb:.2f} s")
            m["note"] = f"stays up; new conn via a {ma:.2f}s vs {mb:.2f}s (median)" + (
                f", probe RTT {rtt:.0f} ms" if rtt is not None else "")
    return extra


def faults():
    return [
        Fault("blackhole", lambda a: a.ns.blackhole(), lambda a: a.ns.heal(),
              notes="all packets dropped both ways"),
        Fault("drop-replies", lambda a: a.ns.drop_replies(), lambda a: a.ns.heal(),
              notes="only a -> kprism dropped"),
        Fault("drop-requests", lambda a: a.ns.drop_requests(), lambda a: a.ns.heal(),
              notes="only kprism -> a dropped"),
        Fault("syn-drop", lambda a: a.ns.drop_syn(), lambda a: a.ns.heal(), after_inject=_established_still_work,
              notes="new conns dropped, established live until closed on down"),
        Fault("latency-400ms", lambda a: a.set_delay(400), lambda a: a.set_delay(0), expect_down=False,
              closed_bound=None, relay=True, observe=2 * 5.0, after_inject=_latency_probe(400),
              extra_checks=_latency_figures(400)),
        Fault("latency-2500ms", lambda a: a.set_delay(2500), lambda a: a.set_delay(0), relay=True,
              notes="over first_response_timeout and health.timeout"),
        Fault("standin-sigkill", _stop_and_reap, lambda a: a.start(), closed_bound=1.0,
              notes="restarted on the same address"),
        Fault("standin-sigstop", lambda a: a.proc.signal(signal.SIGSTOP), lambda a: a.proc.signal(signal.SIGCONT),
              notes="hung: accepts, never answers; SIGCONT to lift"),
    ]


def run(env, rep, only=None):
    for f in faults():
        if only and f.name not in only:
            continue
        try:
            run_fault(env, rep, f)
        except Exception as e:
            rep.fail(f"{f.name}: {type(e).__name__}: {e}")
