# SPDX-License-Identifier: Apache-2.0
"""The drill's report: per cut, node and balancer, NotReady seconds, failed and hung requests, the
longest watch gap, the connections left on the leaderless apiserver; etcd's own view per member;
the check of kprism's outcome (no node NotReady while an apiserver of the quorate side is
reachable from it). Reads the logs kubelet.py and run.py wrote."""

import json
import os
import time

NOT_READY_AFTER = 40.0  # node-monitor-grace-period: a Lease not renewed for 40 s
SITES = ("a", "b", "w")


def load(path):
    out = []
    if os.path.exists(path):
        for line in open(path):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def not_ready_seconds(beats, lo, hi):
    """Seconds in [lo, hi] during which the last successful heartbeat was over 40 s old."""
    total, prev = 0.0, None
    for t in sorted(beats) + [hi]:
        if prev is not None:
            a, b = max(prev + NOT_READY_AFTER, lo), min(t, hi)
            if b > a:
                total += b - a
        prev = t if t <= hi else prev
    return total


def longest_gap(times, lo, hi):
    pts = [lo] + sorted(t for t in times if lo <= t <= hi) + [hi]
    return max(b - a for a, b in zip(pts, pts[1:]))


def reachable(how, x, y):
    """Can a node of site x hold a TCP connection to site y (new ones included) during the cut?"""
    if x == y:
        return True
    for step in how.split("; "):
        w = step.split()
        if w[0] == "isolate" and w[1] in (x, y):
            return False
        if w[0] in ("drop", "new") and {w[1], w[2]} == {x, y}:
            return False
    return True


def conns_on(samples, bal, members, lo, heal):
    """The balancer's client connections to the leaderless member(s): how many at the heal, and
    when (seconds after the cut) the last new one appeared. The balancer's own checks are left
    out: kprism's kept probe connections (a port its /status ever named probe_local_port) and
    connections made while it had the upstream down that live under 5 s (a check every 5 s with a
    3 s timeout). Samples up to 10 s after the heal tell how long a check in flight at the heal
    lived."""
    first, last, down, probe = {}, {}, {}, set()
    for s in samples:
        if not (lo - 5 <= s["t"] <= heal + 10):
            continue
        probes = set(s.get("probes", {}).get(bal, []))
        up = s.get("up", {}).get(bal)
        for m in members:
            for p in set(s["conns"].get(bal, {}).get(m, [])):
                if p in probes:
                    probe.add(p)
                if p in first or s["t"] <= heal:
                    first.setdefault(p, s["t"])
                    last[p] = s["t"]
                    down.setdefault(p, up is not None and m not in up)
    real = [p for p in first if p not in probe and not (down[p] and last[p] - first[p] < 5)]
    final = [p for p in real if last[p] >= heal - 1.5]
    new = [first[p] - lo for p in real if first[p] >= lo]
    return str(len(final)), (f"{max(new):.0f}" if new else "none")


def etcd_view(dr, lo, hi):
    """{member: (seconds without a leader, leader changes seen)} in [lo, hi] from /metrics."""
    rows = [r for r in dr.etcd_samples if lo <= r["t"] <= hi]
    out = {}
    for m in ("cp-a", "cp-b", "cp-w"):
        seen = [r[m] for r in rows if r.get(m)]
        leaderless = sum(1 for s in seen if s["has_leader"] == 0)
        ch = [s["changes"] for s in seen if s["changes"] is not None]
        out[m] = (leaderless, (ch[-1] - ch[0]) if ch else None, len(rows) - len(seen))
    return out


def outage(ev, lo, hi):
    """The longest time in [lo, hi] that one of the agent's watches was not established: from a
    watch's end (or a failed start) to its next successful start."""
    state, since, longest = {}, {}, 0.0
    for e in sorted((e for e in ev if e["k"] in ("agent-watch-start", "agent-watch-end")), key=lambda e: e["t"]):
        w, up = e.get("watch"), e["k"] == "agent-watch-start" and e.get("ok")
        if e["k"] == "agent-watch-end":
            up = False
        if state.get(w, True) and not up:
            since[w] = e["t"]
        elif not state.get(w, True) and up:
            longest = max(longest, min(e["t"], hi) - max(since[w], lo))
        state[w] = up
    for w, up in state.items():
        if not up:
            longest = max(longest, hi - max(since[w], lo))
    return max(0.0, longest)


def model_figures(ev, lo, hi, model):
    """NotReady s, failed, hung, longest lease-watch gap s, relists (lists answered after the
    first; HTTP/1.1: lists answered), agent watch outage s (h2 only)."""
    beats = [e["t"] for e in ev if e["k"] == "heartbeat" and e.get("ok")]
    win = [e for e in ev if lo <= e["t"] <= hi]
    req = [e for e in win if "ok" in e and not e["k"].endswith("watch-end")]
    failed = sum(1 for e in req if not e["ok"] and not e.get("hung"))
    hung = sum(1 for e in req if e.get("hung"))
    gap = longest_gap([e["t"] for e in ev if e["k"] == "watch-event"], lo, hi)
    if model == "h2":
        relists = sum(1 for e in win if e["k"] in ("relist", "agent-relist"))
        down = outage(ev, lo, hi)
    else:
        relists, down = sum(1 for e in win if e["k"] == "list" and e.get("ok")), None
    return {"nr": not_ready_seconds(beats, lo, hi), "failed": failed, "hung": hung, "gap": gap, "relists": relists,
            "down": down}


MODEL_NAMES = {"h2": "HTTP/2 (client-go model)", "h1": "HTTP/1.1 (a connection per concern)"}


def write(a, dr, results, t0):
    nodes = list(dr.t.nodes.values())
    bals = dr.balancers
    models = a.models
    both = len(models) > 1
    cell = lambda vals: " / ".join(vals) if both else vals[0]
    lines = [f"# Datacenter-loss drill ({'quick' if a.quick else 'full'} run)", "",
             f"Generated by `tests/drill/run.py` on {time.strftime('%Y-%m-%d %H:%M')}; wall time "
             f"{time.time() - t0:.0f} s. Latency A-W {a.aw_ms:.0f} ms, B-W {a.bw_ms:.0f} ms, A-B {a.ab_ms:.0f} ms "
             f"(round trip), {a.rate_mbit:g} Mbit/s each way between sites, jitter {a.jitter_ms:g} ms "
             f"(standard deviation, in order); cut held {a.hold:.0f} s, then {a.settle:.0f} s after the heal. etcd 3.4, "
             "`--pre-vote=true --heartbeat-interval 100 --election-timeout 1000 --experimental-watch-progress-notify-interval 5s`. "
             + ("The apiservers store through their own site's etcd member." if dr.etcd_mode else
                "**The apiserver stand-in had no etcd mode: it ran on its shared store, so the etcd quorum was "
                "not in the request path; the figures below show the network path only.**"), "",
             "Client models: " + "; ".join(f"{MODEL_NAMES[m]}" for m in models)
             + (" (in each cell: HTTP/2 / HTTP/1.1)." if both else "."), "",
             "Balancers: " + "; ".join(f"`{b['name']}` {b['label']}" for b in bals) + ".", ""]
    if getattr(a, "extra", ""):
        lines += [f"Extra balancers from `DRILL_BALANCERS_EXTRA` ({os.path.basename(a.extra)}): their rows are "
                  "measured like the others; their builds are described beside the report, not in this repository.", ""]
    failures = []
    totals = {}  # balancer -> model -> [NotReady node-seconds where quorate reachable, failed, hung, cuts x nodes NotReady]
    for r in results:
        lo, hi = r["start"], r["end"]
        view = etcd_view(dr, lo, r["heal"])
        quorate = {m[-1] for m, (ll, _, miss) in view.items() if ll == 0 and miss == 0}
        leaderless = [m for m, (ll, _, _) in view.items() if ll > 0]
        lines += [f"## Cut {r['id']}: {r['title']}", "",
                  f"Router: `{r['how']}`; etcd leader placed in {r['leader'] or '-'}; held "
                  f"{r['heal'] - r['start']:.0f} s, measured until {hi - lo:.0f} s after the cut.", "",
                  "etcd (from each member's /metrics every second, during the cut): " + "; ".join(
                      f"{m}: {ll} s without a leader, {'?' if ch is None else int(ch)} leader changes seen"
                      + (f", {miss} samples unanswered" if miss else "") for m, (ll, ch, miss) in view.items()), "",
                  "| node | balancer | NotReady s | failed | hung | longest lease-watch gap s | relists | "
                  "agent watch not established s | conns on leaderless at heal | last new conn to leaderless (s after cut) |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for n in nodes:
            samples = load(f"{dr.logdir}/{n.name}--sample.jsonl")
            sees_quorate = any(reachable(r["how"], n.site, s) for s in quorate)
            for b in bals:
                fig = {m: model_figures(load(f"{dr.logdir}/{n.name}--{b['name']}.{m}.jsonl"), lo, hi, m) for m in models}
                left, last_new = "-", "-"
                if leaderless:
                    left, last_new = conns_on(samples, b["name"], leaderless, lo, r["heal"])
                down = fig["h2"]["down"] if "h2" in fig else None
                lines.append(f"| {n.name} | {b['label']} | " + " | ".join([
                    cell([f"{fig[m]['nr']:.0f}" for m in models]), cell([str(fig[m]["failed"]) for m in models]),
                    cell([str(fig[m]["hung"]) for m in models]), cell([f"{fig[m]['gap']:.0f}" for m in models]),
                    cell([str(fig[m]["relists"]) for m in models]), "-" if down is None else f"{down:.0f}",
                    left, last_new]) + " |")
                for m in models:
                    t = totals.setdefault(b["name"], {}).setdefault(m, [0.0, 0, 0, 0])
                    t[1] += fig[m]["failed"]
                    t[2] += fig[m]["hung"]
                    if sees_quorate:
                        t[0] += fig[m]["nr"]
                        t[3] += fig[m]["nr"] > 0
                    if b.get("judged") and sees_quorate and fig[m]["nr"] > 0:
                        failures.append(f"cut {r['id']}: {n.name} NotReady {fig[m]['nr']:.0f} s through {b['name']} "
                                        f"({MODEL_NAMES[m]}) while the quorate side ({', '.join(sorted(quorate))}) "
                                        "was reachable")
        lines += ["", "Leaderless member(s): " + (", ".join(leaderless) or "none") + ".", ""]
    lines += ["## Every cut together", "",
              "Per balancer and client model, over every cut: NotReady node-seconds on nodes that could reach the "
              "quorate side (where a balancer could have kept them Ready), how many node-cuts had any, and the "
              "failed and hung requests on every node.", "",
              "| balancer | client model | NotReady node-s (quorate reachable) | node-cuts NotReady | failed | hung |",
              "|---|---|---|---|---|---|"]
    for b in bals:
        for m in models:
            t = totals.get(b["name"], {}).get(m, [0.0, 0, 0, 0])
            lines.append(f"| {b['label']} | {MODEL_NAMES[m]} | {t[0]:.0f} | {t[3]} | {t[1]} | {t[2]} |")
    lines += ["", "## Check (kprism only; the others are measured, not judged)", ""]
    lines += [f"- FAIL: {f}" for f in failures] or ["- ok: no node went NotReady through kprism (either endpoint mode, "
                                                   "every client model) while an apiserver of the quorate side was "
                                                   "reachable from it"]
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        f.write(text)
    print(text)
    for f in failures:
        print(f"drill: FAIL: {f}")
    print(f"drill: {'ok' if not failures else 'FAIL'}: report in {a.out}")
    return not failures
