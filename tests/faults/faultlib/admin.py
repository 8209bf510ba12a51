# SPDX-License-Identifier: Apache-2.0
"""kprism's admin endpoint (/status JSON, /metrics) and its log, as the suite observes them."""

import calendar
import http.client
import json
import re
import threading
import time


def get(port, path, timeout=2.0):
    """(status, body) of GET path on the admin port, or (None, error text)."""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        c.request("GET", path)
        r = c.getresponse()
        body = r.read().decode("utf-8", "replace")
        c.close()
        return r.status, body
    except (OSError, http.client.HTTPException) as e:
        return None, str(e)


def status(port, timeout=2.0):
    code, body = get(port, "/status", timeout)
    if code != 200:
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


def states(port):
    """{address: state} from /status, or None."""
    s = status(port)
    return {u["address"]: u["state"] for u in s["upstreams"]} if s else None


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$')


def metrics(port):
    """{'name{labels}': value} of every sample, or None."""
    code, body = get(port, "/metrics")
    if code != 200:
        return None
    out = {}
    for line in body.splitlines():
        m = _SAMPLE.match(line)
        if m:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


class StatusWatcher:
    """Polls /status every 100 ms in a thread and keeps each upstream's state changes with the
    (monotonic) time they were first seen."""

    def __init__(self, port, interval=0.1):
        self.port = port
        self.interval = interval
        self.changes = []  # (t, address, old, new)
        self.last = {}
        self.fail_open_seen = False
        self.rtts = []  # (t, address, rtt_ms)
        self.errors = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.is_set():
            s = status(self.port, timeout=1.0)
            now = time.monotonic()
            if s is None:
                self.errors += 1
            else:
                self.fail_open_seen |= bool(s.get("fail_open"))
                for u in s["upstreams"]:
                    a, st = u["address"], u["state"]
                    if u.get("rtt_ms") is not None:
                        self.rtts.append((now, a, u["rtt_ms"]))
                    if self.last.get(a) != st:
                        self.changes.append((now, a, self.last.get(a), st))
                        self.last[a] = st
            self._stop.wait(self.interval)

    def first(self, address, state, after):
        """Time of the first change of `address` to `state` at or after `after`, or None."""
        for t, a, _, st in self.changes:
            if a == address and st == state and t >= after:
                return t
        return None

    def wait(self, address, state, after, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            t = self.first(address, state, after)
            if t is not None:
                return t
            if self.last.get(address) == state and not any(a == address for _, a, _, _ in self.changes):
                return after  # already so before anything changed
            time.sleep(0.05)
        return self.first(address, state, after)

    def max_rtt(self, address, after, before):
        return max((r for t, a, r in self.rtts if a == address and after <= t <= before), default=None)

    def transitions(self, address, after, before=None):
        return [(t, old, new) for t, a, old, new in self.changes
                if a == address and t >= after and (before is None or t <= before)]

    def stop(self):
        self._stop.set()
        self._t.join(timeout=3)


_TS = re.compile(r'^ts=(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)\.(\d{3})Z ')


def log_times(text, needle):
    """Wall-clock times (time.time() scale) of the log lines containing needle."""
    out = []
    for line in text.splitlines():
        if needle in line:
            m = _TS.match(line)
            if m:
                y, mo, d, h, mi, s, ms = (int(x) for x in m.groups())
                out.append(calendar.timegm((y, mo, d, h, mi, s)) + ms / 1000.0)
    return out
