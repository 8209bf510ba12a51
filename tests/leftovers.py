#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Fails, listing pid, uid and command line of each, while a process the tests started is still running.
"""Run as the last step of `make test` and `make test-faults` (and soak, soak-asan).

Usage: tests/leftovers.py [--grace SECONDS] DIR...

A running process counts as started by the tests if any of these holds:
  marker  its environment holds KPRISM_TEST_RUN=<this run's value> (the Makefile sets one per
          make run, exported to every recipe, so every process a test starts inherits it unless
          its environment is replaced);
  exe     its executable (/proc/PID/exe, or argv[0] where that cannot be read) is under one of
          the DIRs (the build directories of this run), deleted since or not;
  copy    its executable, outside this source tree, is a byte-for-byte copy of an executable
          file under the DIRs (the static binary copied into a chroot, the packaged binary
          extracted from the .deb). Identical binaries in other build directories of the tree
          are someone else's (another BUILD=), not copies; the Debian tree cached in
          build/systemd-root holds the system's own programs, and is not searched.
Not counted: this check and its ancestors (make, the recipe shell), and zombies (dead; their
parent, if it is a leftover, is counted). A process still listed after --grace seconds (default
2, for those being stopped right now) is a leftover: one line each, exit status 1. Without
leftovers: "leftovers: none", exit status 0. Nothing is killed.
"""

import argparse
import hashlib
import os
import stat
import sys
import time

MARKER_VAR = "KPRISM_TEST_RUN"
TREE = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def stat_fields(pid):
    """(state, ppid) from /proc/PID/stat, or None if the process is gone."""
    s = read(f"/proc/{pid}/stat")
    if not s:
        return None
    rest = s[s.rindex(b")") + 2:].split()  # comm may contain spaces and parentheses
    return rest[0].decode(), int(rest[1])


def ancestors():
    seen, pid = set(), os.getpid()
    while pid > 0 and pid not in seen:
        seen.add(pid)
        f = stat_fields(pid)
        if not f:
            break
        pid = f[1]
    return seen


def under(path, dirs):
    return next((d for d in dirs if path == d or path.startswith(d + "/")), None)


def sha256(path):
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return None
    return h.hexdigest()


class Executables:
    """The executable files under the DIRs, by size, hashed when a process's executable has that size."""

    # Whole Debian trees the tests keep under the build directory (tests/systemd/reload.sh's cached
    # minimal system): their programs are the host's own sleep, bash, ..., not copies of ours.
    FOREIGN_TREES = {"systemd-root"}

    def __init__(self, dirs):
        self.by_size, self.hashes = {}, {}
        for d in dirs:
            for root, subdirs, files in os.walk(d):
                subdirs[:] = [s for s in subdirs if s not in self.FOREIGN_TREES]
                for name in files:
                    p = os.path.join(root, name)
                    try:
                        st = os.lstat(p)
                    except OSError:
                        continue
                    if stat.S_ISREG(st.st_mode) and st.st_mode & 0o111 and st.st_size > 0:
                        self.by_size.setdefault(st.st_size, []).append(p)

    def copy_of(self, pid):
        try:
            size = os.stat(f"/proc/{pid}/exe").st_size
        except OSError:
            return None
        candidates = self.by_size.get(size)
        if not candidates:
            return None
        digest = sha256(f"/proc/{pid}/exe")
        for p in candidates:
            if p not in self.hashes:
                self.hashes[p] = sha256(p)
            if digest is not None and self.hashes[p] == digest:
                return p
        return None


def executable(pid):
    """The process's executable path: /proc/PID/exe, else argv[0] made absolute where possible."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
        return exe[:-len(" (deleted)")] if exe.endswith(" (deleted)") else exe
    except OSError:
        pass
    argv = (read(f"/proc/{pid}/cmdline") or b"").split(b"\0")
    arg0 = argv[0].decode(errors="replace") if argv and argv[0] else ""
    if arg0 and not arg0.startswith("/"):
        try:
            arg0 = os.path.join(os.readlink(f"/proc/{pid}/cwd"), arg0)
        except OSError:
            return None
    return os.path.normpath(arg0) if arg0 else None


def scan(dirs, marker, exes, skip):
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in skip:
            continue
        pid = int(name)
        f = stat_fields(pid)
        if not f or f[0] == "X":
            continue
        if f[0] == "Z":
            try:  # a zombie thread group leader whose other threads still run is alive
                if len(os.listdir(f"/proc/{pid}/task")) <= 1:
                    continue
            except OSError:
                continue
        why = []
        env = read(f"/proc/{pid}/environ")
        if marker and env and marker in env.split(b"\0"):
            why.append("marker")
        exe = executable(pid)
        if exe and under(exe, dirs):
            why.append("exe")
        elif exe and not under(exe, [TREE]):
            c = exes.copy_of(pid)
            if c:
                why.append(f"copy of {c}")
        if why:
            found[pid] = (why, exe)
    return found


def describe(pid, why, exe):
    cmd = (read(f"/proc/{pid}/cmdline") or b"").replace(b"\0", b" ").decode(errors="replace").strip()
    uid = "?"
    for line in (read(f"/proc/{pid}/status") or b"").decode(errors="replace").splitlines():
        if line.startswith("Uid:"):
            uid = line.split()[1]
    return f"leftovers: FAIL: pid {pid} uid {uid} ({', '.join(why)}): {cmd or exe or '?'}"


def main():
    ap = argparse.ArgumentParser(description="Fails while a process started by the tests still runs.")
    ap.add_argument("--grace", type=float, default=2.0, help="seconds to wait for processes being stopped")
    ap.add_argument("dirs", nargs="+", help="the build directories of this run")
    a = ap.parse_args()
    dirs = sorted({os.path.realpath(d) for d in a.dirs})
    value = os.environ.get(MARKER_VAR, "")
    marker = f"{MARKER_VAR}={value}".encode() if value else None
    exes = Executables(dirs)
    skip = ancestors()
    deadline = time.monotonic() + a.grace
    found = scan(dirs, marker, exes, skip)
    while found and time.monotonic() < deadline:
        time.sleep(0.1)
        found = scan(dirs, marker, exes, skip)
    if not found:
        print("leftovers: none" + ("" if marker else f" (no {MARKER_VAR} set: executables only)"))
        return 0
    for pid, (why, exe) in sorted(found.items()):
        print(describe(pid, why, exe))
    print(f"leftovers: {len(found)} process(es) started by the tests still running (after {a.grace:g} s); "
          f"searched for {MARKER_VAR}={value or '(unset)'} and executables under {' '.join(dirs)}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
