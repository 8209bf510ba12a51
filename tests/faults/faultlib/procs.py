# SPDX-License-Identifier: Apache-2.0
"""Child processes (kprism, stand-ins, relays) with their output in a log file, killed by cleanup;
and what /proc says about a process (CPU time, RSS, open fds)."""

import os
import random
import signal
import socket
import subprocess
import time

from . import cleanup

CLK_TCK = os.sysconf("SC_CLK_TCK")


def wait_until(cond, timeout, interval=0.02):
    """Polls cond() until it returns something truthy or `timeout` seconds pass; returns its last value."""
    end = time.monotonic() + timeout
    while True:
        v = cond()
        if v or time.monotonic() >= end:
            return v
        time.sleep(interval)


def _ephemeral_low():
    """The first port of the kernel's ephemeral range (connect()'s local ports)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(addr="127.0.0.1"):
    """A port free on addr, below the ephemeral range when there is room: a port that bind(0)
    hands out can be taken, before the server that is to listen on it binds, by the local end of
    any connect() on the machine (kprism's probes, a client's next connection)."""
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    low = _ephemeral_low()
    rng = random.Random()
    for _ in range(200 if low > 12000 else 0):
        p = rng.randrange(10000, low)
        with socket.socket(fam) as s:
            try:
                s.bind((addr, p))
            except OSError:
                continue
            return p
    with socket.socket(fam) as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


class Proc:
    """A child with stdout+stderr in `log` (or discarded if log is None)."""

    def __init__(self, argv, log, env=None, pass_fds=(), scope=None, name=None):
        self.argv = argv
        self.log = log
        self.name = name or os.path.basename(argv[0])
        out = open(log, "ab") if log else subprocess.DEVNULL
        try:
            self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                      env=env, pass_fds=pass_fds, start_new_session=True)
        finally:
            if log:
                out.close()
        self.pid = self.p.pid
        what = f"process {self.name} {self.pid}"
        if scope is not None:
            scope.add(what, self.kill)
        else:
            self._token = cleanup.register(what, self.kill)

    def signal(self, sig):
        if self.p.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def running(self):
        return self.p.poll() is None

    def wait(self, timeout):
        """Exit status (negative: killed by that signal), or None if still running after timeout."""
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        if self.p.poll() is None:
            self.signal(signal.SIGCONT)  # a stopped process must be able to die
            self.signal(signal.SIGKILL)
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def stop(self, timeout=10):
        """SIGTERM, then SIGKILL after `timeout`; returns the exit status."""
        self.signal(signal.SIGTERM)
        rc = self.wait(timeout)
        if rc is None:
            self.kill()
            rc = self.p.returncode
        return rc

    def output(self):
        if not self.log:
            return ""
        with open(self.log, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def wait_output(self, needle, timeout):
        return wait_until(lambda: needle in self.output(), timeout, 0.05)


def cpu_seconds(pid):
    """utime + stime of a process, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of stat(5)


def schedstat_cpu_s(pid):
    """On-CPU seconds of every thread of a process, from /proc/PID/task/*/schedstat (nanoseconds;
    /proc/PID/stat counts in 10 ms ticks, too coarse for short windows), or None if it is gone.
    A thread that has exited is no longer counted: Go's runtime keeps its threads."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    ns = 0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ns += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return ns / 1e9


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))
