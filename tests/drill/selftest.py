#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The drill's own parts that need no root, checked without a network: the balancer files
(DRILL_BALANCERS_EXTRA refusals), the site-to-site link (rate, backlog, jitter in order), and the
report's figures (NotReady seconds, the agent's watch outage, relists). `selftest.py`; exit 1 on
a failure. Runs in `make test-tree` and `make test`."""

import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import netdelay  # noqa: E402
import report  # noqa: E402

failures = []


def check(what, got, want):
    if got != want:
        failures.append(f"{what}: got {got!r}, want {want!r}")


def load_balancers(extra_text):
    """run.py's load_balancers in a child (it exits on a refusal): (exit status, stderr)."""
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(extra_text)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import run; "
            "b = run.load_balancers(sys.argv[2], sys.argv[3]); print(','.join(x['name'] for x in b))")
    r = subprocess.run([sys.executable, "-c", code, HERE, os.path.join(HERE, "balancers.toml"), f.name],
                       capture_output=True, text=True)
    os.unlink(f.name)
    return r.returncode, (r.stdout + r.stderr).strip()


def balancer_files():
    good = '[[balancer]]\nname = "mine"\nport = 7460\ncommand = ["x", "{listen}"]\n'
    rc, out = load_balancers(good)
    check("an extra balancer is added after the committed ones", (rc, out.split(",")[-1]), (0, "mine"))
    for text, says in [
        ('[[balancer]]\nname = "kprism"\nport = 7460\ncommand = ["x"]\n', "clashes with kprism"),
        ('[[balancer]]\nname = "mine"\nport = 7545\ncommand = ["x"]\n', "clashes with kprism"),  # kprism's admin port
        ('[[balancer]]\nname = "mine"\ncommand = ["x"]\n', "`port` missing"),
        ('[[balancer]]\nname = "Mine!"\nport = 7460\ncommand = ["x"]\n', "lower-case letters"),
        ('[[balancer]]\nname = "mine"\nport = 7460\ncommand = ["x", "{upstreams}"]\n', "no `upstream` template"),
        ('[[balancer]\n', ".toml: "),
        ('x = 1\n', "no [[balancer]] block"),
        ('[[balancer]]\nname = "mine"\nport = 7460\ncommand = ["x"]\njudged = true\n', "`judged` is for"),
    ]:
        rc, out = load_balancers(text)
        check(f"refused: {says}", (rc, says in out), (1, True))


def link():
    # 100 Mbit/s: 1500-byte packets handed over at once leave 120 us apart, after the delay
    ln = netdelay.Link(0.005, 100e6 / 8, 0.0)
    times = [ln.schedule(10.0, 1500) for _ in range(3)]
    check("rate spacing", [round((t - 10.0) * 1e6) for t in times], [5120, 5240, 5360])
    # a backlog over 1 MiB is dropped, as a full queue would
    ln = netdelay.Link(0.005, 100e6 / 8, 0.0)
    sent = [ln.schedule(0.0, 1500) for _ in range(800)]
    check("backlog drop", (sent[698] is not None, sent[-1] is None), (True, True))
    # jitter never reorders packets close together; packets far apart average out at the delay
    ln = netdelay.Link(0.010, 0, 0.002, random.Random(7))
    t = [ln.schedule(i * 0.0001, 100) for i in range(2000)]
    check("jitter keeps the order", t == sorted(t), True)
    ln = netdelay.Link(0.010, 0, 0.001, random.Random(7))
    d = [ln.schedule(i * 0.05, 100) - i * 0.05 for i in range(400)]
    check("jitter: mean delay within 0.2 ms", abs(sum(d) / len(d) - 0.010) < 0.0002, True)
    check("jitter: it varies", max(d) - min(d) > 0.002, True)


def figures():
    beats = [0.0, 10.0, 20.0, 75.0]
    # last beat at 20: NotReady from 60 to 75 (15 s)
    check("NotReady seconds", report.not_ready_seconds(beats, 0.0, 100.0), 15.0 + 0.0)
    ev = [{"t": 1.0, "k": "agent-watch-start", "ok": True, "watch": "nodes"},
          {"t": 1.0, "k": "agent-watch-start", "ok": True, "watch": "pods"},
          {"t": 30.0, "k": "agent-watch-end", "ok": True, "watch": "nodes"},
          {"t": 31.0, "k": "agent-watch-start", "ok": False, "watch": "nodes"},
          {"t": 42.0, "k": "agent-watch-start", "ok": True, "watch": "nodes"},
          {"t": 50.0, "k": "agent-watch-end", "ok": False, "watch": "pods"},
          {"t": 40.0, "k": "relist", "watch": "leases"},
          {"t": 41.0, "k": "agent-relist", "watch": "nodes"},
          {"t": 41.5, "k": "heartbeat", "ok": False, "hung": True},
          {"t": 41.6, "k": "agent-get", "ok": False, "code": 504}]
    check("outage: the longest, an unfinished one counted to the end", report.outage(ev, 0.0, 60.0), 12.0)
    check("outage: from the window's start", report.outage(ev, 35.0, 45.0), 7.0)
    f = report.model_figures(ev, 0.0, 60.0, "h2")
    check("h2 figures", (f["failed"], f["hung"], f["relists"]), (2, 1, 2))


if __name__ == "__main__":
    balancer_files()
    link()
    figures()
    for f in failures:
        print(f"drill selftest: FAIL: {f}")
    print(f"drill selftest: {'ok' if not failures else 'FAIL'}")
    sys.exit(1 if failures else 0)
