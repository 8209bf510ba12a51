# SPDX-License-Identifier: Apache-2.0
"""The common shape of a one-upstream fault: three stand-ins a, b, c in their namespaces, a fresh
kprism with default health settings in front, long-lived connections (at least 4 on "a"), a
steady stream of new client connections (one every 75 ms, each one request, 5 s allowed); the
fault hits "a" at a random phase of the check cycle, is lifted once its effects are measured,
and "a" must come back.

Figures, in seconds after the fault (recovery: after the lift):
  down      kprism logs "upstream down" for a
  moved     the start of the last new connection that landed on a or was held up (by more than
            1 s over the slowest before the fault) on its way elsewhere: after it, new traffic
            goes straight to healthy upstreams
  failed    client connections that failed (connect, TLS, answer) although b and c were fine
  closed    the last of a's established connections ended
  recovered kprism logs "upstream up" for a after the lift (and a serves new connections)"""

import random
import re
import threading
import time
from dataclasses import dataclass, field

from . import admin
from .cleanup import Scope
from .client import Stream, make_context, open_holders
from .cluster import Kprism, Upstream
from .procs import wait_until

# kprism's defaults (README, kprism(8)); the bounds below are derived from them.
INTERVAL, TIMEOUT, FAST, SPREAD, CONNECT_TIMEOUT, FIRST_RESPONSE = 5.0, 3.0, 1.0, 1.0, 2.0, 2.0
# Out of new traffic: the bound bench/RESULTS.md gives for a hung upstream (interval + timeout +
# close_spread, 9 s). With a steady stream of clients, as here, two failed client connects or
# silent first responses (2 s each) take an upstream down much sooner.
DOWN_BOUND = INTERVAL + TIMEOUT + SPREAD
# Back in: the next check of a down upstream (interval), a second at the fast interval, slack.
RECOVER_BOUND = INTERVAL + FAST + 1.5
STREAM_INTERVAL = 0.075
SLOW_MARGIN = 1.0


@dataclass
class Fault:
    name: str
    inject: object              # fn(upstream a)
    lift: object                # fn(upstream a)
    expect_down: bool = True
    closed_bound: float = 10.0  # a's established connections end within this after the fault
    relay: bool = False         # delay_relay.py in front of a
    after_inject: object = None  # fn(ssl context, holders on a, report), right after the fault
    notes: str = ""
    observe: float = 0.0        # extra seconds to watch after everything settled (no-down faults)
    extra_checks: object = None  # fn(measured: dict, report), at the end
    metrics: dict = field(default_factory=dict)


def _log_first(k, needle, after_wall):
    ts = [t for t in admin.log_times(k.output(), needle) if t >= after_wall - 0.002]
    return ts[0] if ts else None


_RELAY_DELAY = re.compile(r'^delay (\d+) ms wall=([0-9.]+)$', re.M)


_DURATION = re.compile(r' duration_ms=(\d+)')


def _kprism_lines(k, addr, wall_from, wall_to, latency, limit=10):
    """kprism's log lines about upstream `addr` from wall_from to wall_to (time.time() scale), but
    not its connections that ended normally; a "connection closed" line whose end and duration
    match the client's (within 0.25 s) is marked."""
    out = []
    for line in k.output().splitlines():
        ts = admin.log_times(line, "ts=")
        if not ts or not wall_from <= ts[0] <= wall_to or f"={addr}" not in line:
            continue
        if 'msg="connection established"' in line or 'reason=done' in line or 'reason="client read error"' in line:
            continue
        d = _DURATION.search(line)
        if 'msg="connection closed"' in line and d and abs(int(d.group(1)) / 1000.0 - latency) < 0.25 \
                and abs(ts[0] - wall_to) < 0.55:
            line += "   <- this client?"
        out.append(line)
    return out[:limit] + ([f"... {len(out) - limit} more"] if len(out) > limit else [])


def explain_failed(r, ctx):
    """(cause in a line, details) of why client connection `r` failed, as far as the logs tell:
    which stand-in got its request, when its TLS handshake completed (then its upstream had
    answered, and kprism(8) binds it there: "Once an upstream has answered, a connection is never
    moved"), where it falls against the relay taking up the delay and a's down, and kprism's log
    lines about a meanwhile. `ctx`: t0, wall0, t_in, ups, k, down (s after the fault or None)."""
    t0, wall0 = ctx["t0"], ctx["wall0"]
    path = r.path
    got = [u.name for u in ctx["ups"] if u.proc and f"request path={path} " in u.proc.output()]
    hs = f"+{r.handshake - r.start:.2f} s" if r.handshake is not None else "never"
    parts = [f"{path} started {r.start - t0:+.2f} s after the fault ({r.start - ctx['t_in']:+.2f} s after the "
             f"injection returned), client port {r.port}, TLS handshake done {hs}, ended +{r.latency:.2f} s "
             f"({r.end - t0:.2f} s after the fault): {r.error}",
             f"request reached: {', '.join(got) or 'no stand-in'}"]
    a = ctx["ups"][0]
    if a.relay:
        applied = [float(w) for _, w in _RELAY_DELAY.findall(a.relay.output()) if float(w) >= wall0 - 0.5]
        if applied:
            parts.append(f"relay took up the delay {applied[0] - wall0:+.3f} s after the fault")
    down = ctx["down"]
    if r.handshake is not None and got == [a.name] and down is not None and r.end - t0 >= down:
        cause = (f"bound to a (a answered its TLS handshake {hs}), closed when a went down: kprism(8) "
                 f"\"Once an upstream has answered, a connection is never moved\"")
    elif r.handshake is None:
        cause = "cut before any upstream answered: kprism(8) First response promises a replay"
    else:
        cause = f"answered (TLS handshake {hs}), request reached {'/'.join(got) or 'no stand-in'}, then cut"
    wall_start = ctx["wall0"] + (r.start - t0)
    lines = _kprism_lines(ctx["k"], a.addr, wall_start - 0.05, wall_start + r.latency + 0.3, r.latency)
    return cause, "\n    ".join(parts + ["cause: " + cause, f"kprism's log on a ({a.addr}) meanwhile:"] +
                                 ["  " + ln for ln in lines])


def run_fault(env, rep, f, rng=random):
    name = f.name
    with Scope() as sc:
        ups = [Upstream(env, sc, n, i, relay=(f.relay and n == "a")) for i, n in enumerate("abc")]
        a = ups[0]
        # Debug log: its per-connection lines (moved, closed and why) explain a failed client.
        k = Kprism(env, sc, [u.addr for u in ups], extra=["--log-level", "debug"]).start()
        ctx = make_context(env.pki)
        w = admin.StatusWatcher(k.admin_port)
        sc.add("status watcher", w.stop)
        holders = open_holders(ctx, k.port, 9, want={"a": 4})
        sc.add("holders", lambda: [h.close() for h in holders])
        on_a = [h for h in holders if h.served_by == "a"]
        others = [h for h in holders if h.served_by != "a"]
        rep.check(len(on_a) >= 4 and others, f"{name}: long-lived connections open ({len(on_a)} on a, "
                                             f"{len(others)} on b/c)")
        stream = Stream(ctx, k.port, STREAM_INTERVAL, timeout=5.0, max_seconds=90, tag=name)
        sc.add("stream", stream.stop)
        threading.Event().wait(rng.uniform(1.5, 1.5 + INTERVAL))  # a random phase of the check cycle
        before = stream.snapshot()
        base = max((r.latency for r in before if r.ok), default=0.1)
        rep.check(before and all(r.ok for r in before), f"{name}: {len(before)} connections before the fault all served")

        m = f.metrics
        t0, wall0 = time.monotonic(), time.time()
        f.inject(a)
        # The fault is in place once inject() returns (an iptables command, a signal, the relay
        # having taken up its delay: Upstream.set_delay waits for that): a client connection
        # started in between may have been answered by a before it, is then bound to a and may
        # be closed when a goes down (kprism(8): "Once an upstream has answered, a connection is
        # never moved"); it is in flight at the injection, counted apart. One started after it
        # gets no answer from a within first_response_timeout and must be replayed, unharmed.
        t_in = time.monotonic()
        if f.after_inject:
            f.after_inject(ctx, on_a, rep)
        t_down_seen = w.wait(a.addr, "down", t0, DOWN_BOUND + 3) if f.expect_down else None

        # a's established connections: poll until all ended or the bound (plus slack) is past.
        def all_closed():
            return all(h.poll_closed() for h in on_a)
        if f.closed_bound is not None:
            wait_until(all_closed, f.closed_bound + 3 - (time.monotonic() - t0), 0.01)
        # New traffic is watched a little longer after the down (and for no-down faults, for a
        # while, so a flapping upstream would show).
        settle = (t_down_seen or t0) + 3.0 + f.observe
        threading.Event().wait(max(0.0, settle - time.monotonic()))
        during_end = time.monotonic()
        others_ok = [h.works() for h in others]
        t_lift, wall_lift = time.monotonic(), time.time()
        f.lift(a)
        t_up_seen = w.wait(a.addr, "up", t_lift, RECOVER_BOUND + 5) if f.expect_down else t_lift
        served_again = None
        if t_up_seen:
            def a_again():
                return next((r for r in stream.snapshot() if r.start >= t_up_seen and r.served_by == "a"), None)
            r_again = wait_until(a_again, 5, 0.05)
            served_again = r_again.end - t_lift if r_again else None
        results = stream.stop()

        # Figures.
        after = [r for r in results if r.start >= t0]
        during = [r for r in after if r.start < during_end]
        failed = [r for r in after if not r.ok and r.start >= t_in]
        in_flight = [r for r in after if not r.ok and r.start < t_in]
        affected = [r for r in during if r.served_by == "a" or (r.ok and r.latency > base + SLOW_MARGIN)]
        # No connection affected at all (a refused connect is retried elsewhere at once): 0.
        moved = max((r.start - t0 for r in affected), default=0.0) if f.expect_down else None
        held_up = [r for r in during if r.ok and r.served_by != "a" and r.latency > base + SLOW_MARGIN]
        down_wall = _log_first(k, f'msg="upstream down" upstream={a.addr}', wall0) if f.expect_down else None
        up_wall = _log_first(k, f'msg="upstream up" upstream={a.addr}', wall_lift) if f.expect_down else None
        down = down_wall - wall0 if down_wall else None
        recovered = up_wall - wall_lift if up_wall else None
        closed_times = [h.closed_at - t0 for h in on_a if h.closed_at is not None]
        closed = max(closed_times) if len(closed_times) == len(on_a) else None
        mets = admin.metrics(k.admin_port) or {}
        replayed = int(mets.get("kprism_connections_replayed_total", 0))

        # Checks. A failed client is explained (its cause in the FAIL line, the details and kprism's
        # log around it after it), for the first few.
        why = {"t0": t0, "wall0": wall0, "t_in": t_in, "ups": ups, "k": k, "down": down}
        explained = [explain_failed(r, why) for r in (failed + in_flight)[:3]]
        causes = [c for c, _ in explained[:len(failed)]]
        rep.check(not failed, f"{name}: zero failed client connections ({len(failed)} of {len(after)} after the fault)",
                  ("; ".join(sorted({r.error for r in failed})) + " - " + "; ".join(sorted(set(causes))))[:300])
        if in_flight:
            rep.info(f"{name}: {len(in_flight)} client connection(s) started during the {(t_in - t0) * 1000:.0f} ms "
                     f"the injection took failed: {'; '.join(sorted({r.error for r in in_flight}))[:200]}")
        for _, detail in explained:
            rep.info(f"{name}: failed client {detail}")
        if f.expect_down:
            rep.check(down is not None and down <= DOWN_BOUND,
                      f"{name}: a marked down {fmt(down)} s after the fault (bound {DOWN_BOUND:.1f} s)")
            rep.check(moved is not None and moved <= DOWN_BOUND,
                      f"{name}: new connections off a {fmt(moved)} s after the fault (bound {DOWN_BOUND:.1f} s)")
            after_down = [r for r in during if down is not None and r.start - t0 > down + 0.05]
            late = [r for r in after_down if r.served_by == "a" or not r.ok or r.latency > base + SLOW_MARGIN]
            rep.check(after_down and not late, f"{name}: once a is down, every new connection goes straight to b or c "
                                               f"({len(after_down) - len(late)} of {len(after_down)})")
        else:
            flaps = w.transitions(a.addr, t0)
            rep.check(not flaps, f"{name}: a stays up through the fault (no health change)", str(flaps))
        if f.closed_bound is not None:
            rep.check(closed is not None and closed <= f.closed_bound,
                      f"{name}: a's {len(on_a)} established connections closed by {fmt(closed)} s "
                      f"(bound {f.closed_bound:.0f} s)", f"{len(closed_times)} of {len(on_a)} closed")
        else:
            still = [h for h in on_a if not h.poll_closed()]
            rep.check(len(still) == len(on_a), f"{name}: a's established connections stay open through the fault")
        rep.check(all(others_ok), f"{name}: established connections to b and c unaffected ({sum(others_ok)} of "
                                  f"{len(others_ok)} still answer)")
        if f.expect_down:
            rep.check(recovered is not None and recovered <= RECOVER_BOUND,
                      f"{name}: a up again {fmt(recovered)} s after the lift (bound {RECOVER_BOUND:.1f} s)")
            rep.check(served_again is not None, f"{name}: a serves new connections again ({fmt(served_again)} s after the lift)")
        m.update(down=down, moved=moved, failed=len(failed), total=len(after), closed=closed, recovered=recovered,
                 served_again=served_again, replayed=replayed, held_up=len(held_up), results=results, t0=t0,
                 during_end=during_end, kprism=k, watcher=w, ctx=ctx, on_a=on_a, ups=ups)
        if f.extra_checks:
            f.extra_checks(m, rep)
        notes = [f.notes] if f.notes else []
        if in_flight:
            notes.append(f"{len(in_flight)} in flight at the injection failed")
        if held_up:
            notes.append(f"{len(held_up)} conns delayed ≤{max(r.latency for r in held_up):.1f}s")
        if replayed:
            notes.append(f"{replayed} replayed")
        if m.get("note"):
            notes.append(m["note"])
        rep.row(fault=name, down=down, moved=moved, failed=f"{len(failed)} / {len(after)}", closed=closed,
                recovered=recovered, notes="; ".join(notes))
        if not k.proc.running():
            rep.fail(f"{name}: kprism exited: {k.tail()}")
        return m


def fmt(v):
    return "-" if v is None else f"{v:.2f}"
