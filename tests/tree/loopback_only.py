#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""No test or benchmark hands kprism an address off this machine.

kprism probes every endpoint it is given (a flag, a file, a DNS answer, an EndpointSlice, a
snapshot), so an address outside loopback in a test would send packets from the host's network.
The rule (tests/README.md): tests and benchmarks reach only loopback (127.0.0.0/8, ::1) or hosts
in network namespaces the test created itself.

Every tracked file under tests/ and bench/ is read for IP address literals outside loopback
(IPv4 dotted quads and IPv6, 0.0.0.0 and :: aside). Such a literal is allowed only
  - in a folder of KINDS below, whose reason holds and is checked (code that starts no kprism,
    or suites that run kprism inside network namespaces they create), or
  - on a line marked "off-host:" followed by the reason, or on one of the two lines below it (a
    table entry of two lines under a comment): an address
    kprism refuses by its rules and never connects to, one that only `kprism check` reads, one a
    test sends into its own namespace.
Documentation (*.md) is not run and not read.

Ends with "loopback-only: N passed, M failed"; exit status 1 on any failure.
`--self-test` checks the scanner on known lines first.
"""
import ipaddress
import os
import re
import subprocess
import sys

# Folders whose off-host literals need no mark, the reason, and what must hold for the reason to
# be true: "no-kprism" (no file there names the kprism binary: the code parses and renders in
# process), or "netns" (the suite creates its own network namespaces: `ip netns add`).
KINDS = [
    ("tests/unit/", "no-kprism", "unit tests parse and render addresses in process; they start no kprism"),
    ("tests/fuzz/", "no-kprism", "fuzz targets and their corpora feed parsers in process"),
    ("tests/monitoring/", "no-kprism", "alerting rule tests: series labels for promtool"),
    ("bench/micro.cc", "no-kprism", "microbenchmarks of parsing and rendering in process"),
    ("tests/drill/", "netns", "the drill's sites are network namespaces it creates"),
    ("tests/faults/", "netns", "the fault suite's upstreams live in network namespaces it creates"),
    ("tests/runtime/", "netns", "the runtime suite runs its pods in a network namespace it creates"),
]

MARK = "off-host:"
# Names that start kprism from a test: the harness's binary variable and its path.
KPRISM_NAMES = re.compile(r"KPRISM_BIN|kprism_bin\(|build/kprism\b|Kprism\s+\w+\s*[({]")
NETNS = re.compile(r"""\bnetns["',\s]+add\b|\bunshare\b.*(\s-n\b|--net\b|"-n"|"--net")""")
CANDIDATE = re.compile(r"(?<![\w:.])[0-9A-Fa-f:.]{3,}(?![\w:])")


def off_host(token):
    """The address a token spells if it is an IP literal outside loopback, else None."""
    token = token.rstrip(".")
    if token.count(".") == 3 and token.count(":") == 1:
        token = token.split(":")[0]  # host:port
    if token.count(".") != 3 and (token.count(":") < 2 or not any(c.isdigit() for c in token)):
        return None  # a dotted quad, or IPv6 with a digit (not C++'s d::c)
    try:
        a = ipaddress.ip_address(token)
    except ValueError:
        return None
    if a.version == 6 and a.ipv4_mapped is not None:
        a = a.ipv4_mapped
    if a.is_loopback or a.is_unspecified:
        return None
    return str(a)


def scan(lines):
    """(line number, address) of every unmarked off-host literal."""
    found = []
    for i, line in enumerate(lines):
        if any(MARK in lines[j] for j in range(max(0, i - 2), i + 1)):
            continue
        for m in CANDIDATE.finditer(line):
            addr = off_host(m.group(0))
            if addr:
                found.append((i + 1, addr))
    return found


def self_test():
    # off-host: the scanner's own cases below; nothing here is connected to
    cases = [
        ('"10.0.0.1:6443"', ["10.0.0.1"]),
        ("--endpoints '[fd00::1]:6443'", ["fd00::1"]),  # off-host: a case
        ("127.0.0.1:1 127.77.0.16 [::1]:443 0.0.0.0 ::", []),
        ("std::string a; ns::f(); d::c", []),
        ("version 3.4.21 or 1.2.3", []),
        ("::ffff:127.0.0.1 ::ffff:10.1.2.3", ["10.1.2.3"]),  # off-host: a case
        ("x = '169.254.169.254'  # off-host: refused", []),
    ]
    ok = True
    for text, want in cases:
        got = [a for _, a in scan([text])]
        if got != want:
            print(f"loopback-only: self-test FAIL: {text!r}: {got} (want {want})")
            ok = False
    got = [a for _, a in scan(["# off-host: refused by kprism, never connected", 'post("224.0.0.1",', '"224.0.0.2")',
                               '"8.8.8.8"'])]
    if got != ["8.8.8.8"]:
        print(f"loopback-only: self-test FAIL: a mark covers its own line and the two below only: {got}")
        ok = False
    return ok


def tracked(root):
    try:
        out = subprocess.run(["git", "ls-files", "-z", "tests", "bench"], cwd=root, check=True,
                             capture_output=True).stdout.decode()
        return [f for f in out.split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for top in ("tests", "bench"):
            for d, _, names in os.walk(os.path.join(root, top)):
                files += [os.path.relpath(os.path.join(d, n), root) for n in names]
        return files


def read(root, f):
    try:
        with open(os.path.join(root, f), "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    if b"\0" in data:
        return data.decode("latin-1")  # binary corpus inputs: still scanned, as text
    return data.decode("utf-8", "replace")


def main():
    if "--self-test" in sys.argv and not self_test():
        print("loopback-only: 0 passed, 1 failed")
        return 1
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    files = [f for f in tracked(root) if not f.endswith(".md")]
    texts = {f: read(root, f) for f in files}
    passed = failed = 0

    for prefix, kind, reason in KINDS:
        members = [f for f in files if f == prefix or f.startswith(prefix)]
        if kind == "no-kprism":
            bad = [f for f in members if f.endswith((".cc", ".h", ".py", ".sh", ".go"))
                   and texts[f] and KPRISM_NAMES.search(texts[f])]
            for f in bad:
                print(f"loopback-only: FAIL: {f} starts kprism, but {prefix} is allowed off-host literals "
                      f"because {reason}")
        else:
            bad = [] if any(texts[f] and NETNS.search(texts[f]) for f in members) else [prefix]
            for p in bad:
                print(f"loopback-only: FAIL: {p}: no file creates a network namespace, but it is allowed "
                      f"off-host literals because {reason}")
        failed += len(bad)
        passed += len(bad) == 0

    exempt = tuple(p for p, _, _ in KINDS)
    for f in files:
        if f.startswith(exempt) or texts[f] is None:
            continue
        found = scan(texts[f].splitlines())
        for line, addr in found:
            print(f"loopback-only: FAIL: {f}:{line}: {addr} is off this machine; use a loopback address "
                  f"(127.x.y.z), or mark the line '{MARK} <why kprism never connects to it>'")
        failed += len(found)
        passed += not found
    print(f"loopback-only: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
