#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Fault-injection suite of kprism (`make test-faults`, `make soak`): the real kprism binary in
the root namespace, real TLS stand-in apiservers each in its own network namespace, faults from
iptables, a delaying relay, signals and resource limits. See tests/faults/README.md.

Prints one line per check ("faults: ok: ..." / "faults: FAIL: ..."), then a table of the
figures per fault and "faults: N passed, M failed"; exits 1 on any failure. Skips (exit 0)
when not root or without `ip netns`.

Environment: KPRISM_BIN, KPRISM_STANDIN (default build/kprism, build/kprism-standin),
SOAK_SECONDS (soak length, default 180 for --only soak, 40 inside the whole suite),
FAULTS_JOBS (fault cases run at once, default 3), KPRISM_KEEP_LOGS=1 keeps the work dir."""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

from faultlib import cleanup, netns  # noqa: E402
from faultlib.cluster import Env  # noqa: E402
from faultlib.pki import Pki  # noqa: E402
from faultlib.report import Report, table  # noqa: E402

import cases_failopen  # noqa: E402
import cases_network  # noqa: E402
import cases_process  # noqa: E402
import cases_quiet  # noqa: E402
import cases_resources  # noqa: E402
import soak  # noqa: E402

NETWORK = [f.name for f in cases_network.faults()]
QUIET = [f.name for f in cases_quiet.faults()]
# Every case, in the order they run; the first group may run in parallel (FAULTS_JOBS). The
# longest (quiet-syn-drop, up to about 75 s) first, so that it overlaps the rest.
PARALLEL = ["quiet-syn-drop"] + NETWORK + ["kprism-restart", "fail-open-unready", "fail-open-blackhole"] + \
    [q for q in QUIET if q != "quiet-syn-drop"]
SEQUENTIAL = ["resources", "soak"]
ALL = PARALLEL + SEQUENTIAL
MAX_NS = 16  # namespaces per case; the PKI's serving certificate names all their addresses


def run_case(name, env, rep, soak_seconds):
    if name in NETWORK:
        cases_network.run(env, rep, only=[name])
    elif name in QUIET:
        cases_quiet.run(env, rep, only=[name])
    elif name == "kprism-restart":
        cases_process.run(env, rep)
    elif name.startswith("fail-open-"):
        cases_failopen.run(env, rep, only=[name])
    elif name == "resources":
        cases_resources.run(env, rep)
    elif name == "soak":
        soak.run(env, rep, soak_seconds, name=os.environ.get("SOAK_LABEL", "soak"))
    else:
        raise ValueError(name)


def make_env(directory, subnet):
    """A case's work dir with its own PKI, whose serving certificate names its /24's addresses."""
    os.makedirs(directory, exist_ok=True)
    pki = Pki(os.path.join(directory, "pki"), [f"10.200.{subnet}.{4 * i + 2}" for i in range(MAX_NS)])
    kprism = os.path.realpath(os.environ.get("KPRISM_BIN", os.path.join(ROOT, "build/kprism")))
    standin = os.path.realpath(os.environ.get("KPRISM_STANDIN", os.path.join(ROOT, "build/kprism-standin")))
    return Env(directory, pki, kprism, standin, subnet)


def child_main(args):
    """One case in its own process (--child), its report as JSON in --json."""
    cleanup.install()
    rep = Report()
    env = make_env(args.dir, args.subnet)
    try:
        run_case(args.child, env, rep, args.soak_seconds)
    except Exception as e:
        rep.fail(f"{args.child}: {type(e).__name__}: {e}")
    finally:
        cleanup.run_all()
    with open(args.json, "w") as f:
        f.write(rep.to_json())
    return 0


def main():
    ap = argparse.ArgumentParser(description="kprism fault-injection suite")
    ap.add_argument("--only", help="comma-separated cases: " + ",".join(ALL))
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("FAULTS_JOBS", "3")))
    ap.add_argument("--soak-seconds", type=int, default=None)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--subnet", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    ap.add_argument("--json", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.list:
        print("\n".join(ALL))
        return 0
    if args.child:
        return child_main(args)

    why = netns.available()
    if why:
        print(f"faults: skipped: {why}")
        return 0
    if not shutil.which("iptables"):
        print("faults: FAIL: iptables not installed (make deps)\nfaults: 0 passed, 1 failed")
        return 1
    cases = args.only.split(",") if args.only else ALL
    unknown = [c for c in cases if c not in ALL]
    if unknown:
        ap.error(f"unknown case(s) {unknown}; known: {ALL}")
    if args.soak_seconds is None:
        default = "180" if cases == ["soak"] else "40"
        args.soak_seconds = int(os.environ.get("SOAK_SECONDS", default))

    cleanup.install()
    work = tempfile.mkdtemp(prefix="kprism-faults-")
    keep = os.environ.get("KPRISM_KEEP_LOGS")
    cleanup.register("work dir", lambda: None if keep else shutil.rmtree(work, ignore_errors=True))
    started = time.monotonic()
    rep = Report()
    kprism = os.path.realpath(os.environ.get("KPRISM_BIN", os.path.join(ROOT, "build/kprism")))
    rep.info(f"kprism {kprism}, work dir {work}{' (kept)' if keep else ''}")
    try:
        used = []

        def subnet():
            used.append(netns.pick_subnet(exclude=used))
            return used[-1]
        par = [c for c in cases if c in PARALLEL]
        seq = [c for c in cases if c in SEQUENTIAL]
        run_children(work, par, max(1, args.jobs), subnet, args, rep)
        run_children(work, seq, 1, subnet, args, rep)
    finally:
        cleanup.run_all()
    took = time.monotonic() - started
    if rep.rows:
        print("\nfaults: figures (seconds after the fault; recovery after the lift):")
        print(table(rep.rows))
    print(f"\nfaults: run time {took:.0f} s")
    rep.failure_summary()
    print(f"faults: {rep.passed} passed, {rep.failed} failed")
    return 0 if rep.failed == 0 else 1


def run_children(work, cases, jobs, subnet, args, rep):
    """Runs each case as `run.py --child CASE` in its own /24, `jobs` at once; prints each one's
    output when it has finished, in order."""
    pending = list(cases)
    running = []  # (case, Popen, out path, json path)
    done = {}
    while pending or running:
        while pending and len(running) < jobs:
            c = pending.pop(0)
            out, js = os.path.join(work, f"{c}.out"), os.path.join(work, f"{c}.json")
            argv = [sys.executable, os.path.abspath(__file__), "--child", c, "--subnet", str(subnet()),
                    "--dir", os.path.join(work, c), "--json", js, "--soak-seconds", str(args.soak_seconds)]
            with open(out, "w") as o:
                p = subprocess.Popen(argv, stdout=o, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            tok = cleanup.register(f"case {c}", lambda p=p: _terminate(p))
            running.append((c, p, out, js, tok))
        for item in list(running):
            c, p, out, js, tok = item
            if p.poll() is None:
                continue
            running.remove(item)
            cleanup.undo(tok)
            done[c] = (p.returncode, out, js)
        # Print finished cases in their order, as soon as all before them are printed.
        while cases and cases[0] in done:
            c = cases.pop(0)
            rc, out, js = done.pop(c)
            with open(out) as f:
                sys.stdout.write(f.read())
            sys.stdout.flush()
            if os.path.exists(js):
                with open(js) as f:
                    rep.merge_json(f.read())
            else:
                rep.fail(f"{c}: the case process died (exit {rc}) without a report")
        time.sleep(0.1)


def _terminate(p):
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()


if __name__ == "__main__":
    sys.exit(main())
