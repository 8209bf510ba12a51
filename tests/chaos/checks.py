# SPDX-License-Identifier: Apache-2.0
"""The invariants, checked by one sampler thread every SAMPLE seconds while the events run, and
at the end of a seed (I4, I6). See tests/chaos/README.md for each invariant, its bounds and why
they are what kprism(8) promises."""

import os
import re
import threading
import time

from faultlib.procs import fd_count, rss_kib

import world as wd


_SANITIZED = {}


def sanitized(binary):
    """Whether kprism was built with AddressSanitizer: its quarantine keeps freed memory for a while
    (up to 256 MiB), so RSS says nothing about leaks there and I4 checks descriptors only."""
    if binary not in _SANITIZED:
        try:
            with open(binary, "rb") as f:
                _SANITIZED[binary] = b"__asan_init" in f.read()
        except OSError:
            _SANITIZED[binary] = False
    return _SANITIZED[binary]


def describe_fds(pid):
    """kprism's descriptors by kind, its TCP sockets by state and remote port: what a descriptor
    violation shows, so that a leak can be told from sockets still closing."""
    states = {"01": "ESTABLISHED", "02": "SYN_SENT", "04": "FIN_WAIT1", "05": "FIN_WAIT2", "06": "TIME_WAIT",
              "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING"}
    tcp = {}
    for name in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{name}") as f:
                for line in list(f)[1:]:
                    p = line.split()
                    tcp[p[9]] = (states.get(p[3], p[3]), int(p[1].rsplit(":", 1)[1], 16), int(p[2].rsplit(":", 1)[1], 16))
        except OSError:
            pass
    kinds = {}
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return "?"
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        m = re.match(r"socket:\[(\d+)\]", link)
        if m and m.group(1) in tcp:
            st, lport, rport = tcp[m.group(1)]
            key = f"tcp {st} local:{lport}" if st == "LISTEN" else f"tcp {st} remote:{rport}"
        elif m:
            key = "socket (not TCP)"
        else:
            key = re.sub(r"\d+", "N", link)
        kinds[key] = kinds.get(key, 0) + 1
    return ", ".join(f"{k} x{v}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1]))

SAMPLE = 0.15
MARGIN = 1.5  # seconds added to every documented bound: sampling (0.15 s), scheduling on 2 busy cores

# Bounds (seconds), from kprism(8) and the timings world.TIMING gives kprism.
def bounds(t):
    return {
        # Closing connections of a down upstream: each closed within close_spread; an etcd-down
        # upstream's closes wait up to two fast_interval for the others' results (each within
        # health.timeout); connections still waiting for a first response are left to
        # first_response_timeout.
        "I2": t["close_spread"] + 2 * t["fast_interval"] + t["timeout"] + t["first_response_timeout"] + MARGIN,
        # a probe connection that is not (yet) the kept one lives at most one check
        "probe": t["timeout"] + MARGIN,
        # a check of the new answer has started and finished: one interval plus one timeout
        "I8": t["interval"] + t["timeout"] + MARGIN,
    }


RSS_TOL_KIB = 2 * 1024  # after warm-up; the buffer pool may keep a few 64 KiB chunks (about 20 in flight here)
FD_TOL = 8
WARMUP = 10.0  # seconds after the start of a seed before I4 measures
WARMUP_RESTART = 4.0  # and after each restart in place (a new process image: a new baseline)
UP_LINE = re.compile(r'msg="upstream up" upstream=(\S+)')
EXEC_LINE = b"restarting in place: executing the new kprism"  # kprism's log at each exec (same PID)
CHURN_TOL_KIB = 2 * 1024  # RSS growth allowed across the churn phase (run.py churn_phase)
I9_BOUND = 3.0  # seconds after a half-closed client's reset by which kprism must have let go of it
HEALTHZ_MS = 100
TCP_STATES = {"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1", "05": "FIN_WAIT2",
              "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING"}
_SAMPLE_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$')


def _hex_ip4(h):
    ip, port = h.split(":")
    b = bytes.fromhex(ip)[::-1]
    return ".".join(str(x) for x in b), int(port, 16)


def socket_inodes(pid):
    """The inodes of the sockets pid holds (its /proc/PID/fd links socket:[INODE])."""
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    return inodes


def client_inode(pid, kport, client_port):
    """The inode of kprism's end of the client connection from 127.0.0.1:client_port to its
    listener port kport, or None when kprism holds no such socket."""
    mine = socket_inodes(pid)
    try:
        with open(f"/proc/{pid}/net/tcp") as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        p = line.split()
        if len(p) > 9 and p[9] in mine and _hex_ip4(p[1])[1] == kport and _hex_ip4(p[2]) == ("127.0.0.1", client_port):
            return p[9]
    return None


def kprism_sockets(pid):
    """[(state, (lip, lport), (rip, rport))] of the IPv4 TCP sockets pid holds."""
    inodes = socket_inodes(pid)
    try:
        with open(f"/proc/{pid}/net/tcp") as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return []
    out = []
    for line in lines:
        p = line.split()
        if len(p) > 9 and p[9] in inodes:
            out.append((TCP_STATES.get(p[3], p[3]), _hex_ip4(p[1]), _hex_ip4(p[2])))
    return out


def parse_metrics(text):
    out = {}
    for line in text.splitlines():
        m = _SAMPLE_RE.match(line)
        if m:
            try:
                out[(m.group(1), m.group(2) or "")] = float(m.group(3))
            except ValueError:
                pass
    return out


def metric_by_upstream(ms, name, extra=""):
    """{upstream: value} of name{upstream="..."...} samples whose labels contain `extra`."""
    out = {}
    for (n, labels), v in ms.items():
        if n == name and extra in labels:
            m = re.search(r'upstream="([^"]*)"', labels)
            if m:
                out[m.group(1)] = out.get(m.group(1), 0.0) + v
    return out


class Checker:
    """Samples kprism and checks I1-I3, I5, I7-I9 as it goes; I4, I6 (and the last of I9) at finish()."""

    def __init__(self, world, events, timing):
        self.w, self.ev = world, events
        self.b = bounds(timing)
        self.t0 = time.monotonic()
        self.violations = []  # (invariant, t, message)
        self.samples = {k: 0 for k in ("I1", "I2", "I3", "I4", "I5", "I6", "I7", "I8", "I9")}
        self.replay = ""  # the command that replays this seed (run.py)
        self.execs = 0  # restarts in place seen in kprism's log (scan_log)
        self.notes = {"healthz_slow_once": 0, "status_unavailable": 0}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.passed = set()  # upstream addresses that have passed a check
        self.seen = set()  # every upstream address /status has listed
        # The apiservers the run itself configures or lists in a slice: one that a reload adds and
        # removes within a sample (the churn phase, c5) may never show in /status, and is no stranger.
        from world import C4_ADDR, C4_FRONT, C5_ADDR, GO_ADDRS
        self.known = {f"{a}:{world.port}" for a in GO_ADDRS + [C4_FRONT, C4_ADDR, C5_ADDR]}
        self.prev_conn_total = {}
        self.prev_none_up = False
        self.prev_bootstrap = False
        self.none_up_times = []  # sample times at which no upstream was up
        self.up2 = {}  # I2 per upstream: {"since", "unauth", "quorum", "reported"}
        self.sock_age = {}  # (lport, remote) -> first seen
        self.res = []  # (t, rss KiB, fds, connections_active)
        self.i8_checked = set()
        self.log_pos = 0
        self.exited = False
        self.reported = {}
        self.i5_episode = None

    def violate(self, inv, msg, key=None):
        """Records a violation (once per key)."""
        if key is not None:
            if key in self.reported:
                return
            self.reported[key] = True
        t = time.monotonic() - self.t0
        self.violations.append((inv, t, msg))
        print(f"chaos: VIOLATION {inv} at {t:.1f}s: {msg}", flush=True)
        if self.replay:
            print(f"chaos:   replay: {self.replay}", flush=True)

    def start(self):
        self.thread.start()

    def finish(self, traffic):
        self.stop.set()
        self.thread.join(10)
        # I9: the resets not yet judged, until the last is past its bound
        deadline = time.monotonic() + I9_BOUND + 4.0
        while self._i9(time.monotonic()) and time.monotonic() < deadline and not self.exited:
            time.sleep(SAMPLE)
        self._check_resources()
        self._check_requests(traffic)

    # ---- the sampler
    def _run(self):
        last_res = 0.0
        while not self.stop.is_set():
            t = time.monotonic()
            try:
                self._sample(t)
                if t - last_res >= 1.0:
                    last_res = t
                    self._resources(t)
            except Exception as e:  # a bug in a check must not silently stop the checks
                self.violate("harness", f"sampler error {type(e).__name__}: {e}", key=("harness", str(e)))
            self.stop.wait(max(0.0, SAMPLE - (time.monotonic() - t)))

    def _sample(self, t):
        w = self.w
        # I7: kprism runs, and its stderr has no sanitizer report
        self._i7()
        if self.exited:
            return
        # I9 needs only /proc: judged even while the admin endpoint does not answer
        self._i9(t)
        # I5: /healthz within 100 ms
        self._i5(t)
        st = w.status()
        code, mtext = w.admin("/metrics")
        if st is None or code != 200:
            self.notes["status_unavailable"] += 1
            return
        ms = parse_metrics(mtext)
        ups = {u["address"]: u for u in st.get("upstreams", [])}
        self.seen |= set(ups)
        none_up = not any(u.get("state") == "up" for u in ups.values())
        if none_up:
            self.none_up_times.append(t)
        self.scan_log()
        ready = metric_by_upstream(ms, "kprism_health_checks_total", 'result="ready"')
        for a, u in ups.items():
            if u.get("state") == "up" or ready.get(a, 0) > 0:
                self.passed.add(a)
        socks = kprism_sockets(w.kp.pid)
        self._i1(t, st, ups, ms, none_up, socks)
        self._i2(t, st, ups)
        self._i3(socks)
        self._i8(t, st, ups)
        self.prev_none_up = none_up

    def _i7(self):
        if not self.w.kp.running():
            if not self.exited:
                self.exited = True
                self.violate("I7", f"kprism exited unexpectedly, status {self.w.kp.p.returncode}: "
                                   f"{self.w.kp.output()[-600:]}", key="I7-exit")
            return
        self.samples["I7"] += 1
        self.scan_log()

    def scan_log(self):
        try:
            with open(self.w.klog, "rb") as f:
                f.seek(self.log_pos)
                chunk = f.read()
        except OSError:
            return
        # keep a partial last line for the next read
        cut = chunk.rfind(b"\n") + 1
        self.log_pos += cut
        self.execs += chunk[:cut].count(EXEC_LINE)
        text = chunk[:cut].decode("utf-8", "replace")
        # An upstream that went up passed a check, also when it went up and was removed between two
        # samples (the churn phase's c5 lives about 60 ms): its draining connections are allowed.
        self.passed.update(UP_LINE.findall(text))
        for needle in ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer"):
            if needle in text:
                i = text.index(needle)
                self.violate("I7", f"sanitizer report: {text[max(0, i - 200):i + 600]}", key=("I7", needle))

    def _i5(self, t):
        if self.ev.in_window("sigusr2", t, 3.0):
            return  # the exec of a restart in place: the listening socket waits in the backlog
        t1 = time.monotonic()
        code, body = self.w.admin("/healthz", 1.0)
        ms = (time.monotonic() - t1) * 1000
        self.samples["I5"] += 1
        if code == 200 and ms <= HEALTHZ_MS:
            self.i5_episode = None
            return
        if code == 200:
            # Answered but slow: on 2 shared cores the harness itself can be descheduled. Ask again
            # at once; a second slow answer is kprism's.
            t2 = time.monotonic()
            code2, body2 = self.w.admin("/healthz", 1.0)
            ms2 = (time.monotonic() - t2) * 1000
            if code2 == 200 and ms2 <= HEALTHZ_MS:
                self.notes["healthz_slow_once"] += 1
                return
            # The same request to a process that does nothing else: slow too, the machine is loaded
            # (2 shared cores), not kprism's loop; counted, not a violation.
            control = self.w.control_get(1.0)
            if code2 == 200 and (control is None or control > HEALTHZ_MS / 2):
                self.notes["healthz_slow_machine"] = self.notes.get("healthz_slow_machine", 0) + 1
                return
            self._i5_bad(t, f"/healthz slow twice: {ms:.0f} ms then {ms2:.0f} ms ({code2} {body2[:80]!r}), while "
                            f"the same request to an idle control process took "
                            f"{'no answer' if control is None else f'{control:.0f} ms'}")
            return
        self._i5_bad(t, f"/healthz did not answer 200 within {HEALTHZ_MS} ms: {code} {body[:120]!r} "
                           f"after {ms:.0f} ms; {self.ev.recent(t, 5)}")

    def _i5_bad(self, t, msg):
        """One violation per episode of bad answers (until a good one); the samples in it counted."""
        self.notes["healthz_bad_samples"] = self.notes.get("healthz_bad_samples", 0) + 1
        if self.i5_episode is None:
            self.i5_episode = t
            self.violate("I5", msg + " (further bad samples until a good one are counted, not listed)")

    def _i1(self, t, st, ups, ms, none_up, socks):
        self.samples["I1"] += 1
        bootstrap = (st.get("credentials") or {}).get("subject") is None
        fail_open = none_up or self.prev_none_up
        # A connection first seen while failing open or in bootstrap (or a sample after) may have
        # been made then, as kprism(8) allows: it is not judged for the rest of its life.
        # A certificate every apiserver rejects fails open too (kprism(8), Rejected client certificate).
        rejected = (st.get("credentials") or {}).get("state") == "rejected"
        allowed_now = fail_open or bootstrap or rejected or self.prev_bootstrap
        self.prev_bootstrap = bootstrap or rejected
        total = metric_by_upstream(ms, "kprism_upstream_connections_total")
        for a, n in total.items():
            prev = self.prev_conn_total.get(a)
            self.prev_conn_total[a] = n
            if prev is None or n <= prev or a in self.passed:
                continue
            src = (ups.get(a) or {}).get("source")
            if bootstrap or (fail_open and src in ("static", "snapshot")):
                continue
            self.violate("I1", f"{int(n - prev)} new client connection(s) to {a} (source {src}, state "
                               f"{(ups.get(a) or {}).get('state')}), which has never passed a check; "
                               f"fail_open={fail_open}; {self.ev.recent(t, 5)}", key=("I1", a))
        # From outside: kprism's own sockets. An upstream socket that is not the kept probe
        # connection and lives longer than one check is a client's (or discovery's).
        probe_ports = {u.get("probe_local_port") for u in ups.values() if u.get("probe_local_port")}
        listen_ports = {self.w.kport, self.w.aport}
        now_keys = set()
        for state, (lip, lport), (rip, rport) in socks:
            if state == "LISTEN" or lport in listen_ports:
                continue
            remote = f"{rip}:{rport}"
            key = (lport, remote)
            now_keys.add(key)
            first, allowed = self.sock_age.setdefault(key, (t, allowed_now))
            if remote not in self.seen and remote not in self.known and rport not in listen_ports:
                self.violate("I1", f"kprism holds a {state} connection to {remote}, which /status never "
                                   f"listed as an upstream", key=("I1-unlisted", remote))
            if (remote in ups and remote not in self.passed and lport not in probe_ports
                    and t - first > self.b["probe"] and state == "ESTABLISHED" and not allowed):
                self.violate("I1", f"kprism holds a connection (local port {lport}, {t - first:.1f}s old) to "
                                   f"{remote}, which has never passed a check and is not failing open; "
                                   f"{self.ev.recent(t, 5)}", key=("I1-sock", remote))
        for k in list(self.sock_age):
            if k not in now_keys:
                del self.sock_age[k]

    def _i2(self, t, st, ups):
        self.samples["I2"] += 1
        creds = (st.get("credentials") or {}).get("state")
        cond = st.get("condition")
        hold = creds == "rejected" or cond == "no-etcd-quorum"
        for a, u in ups.items():
            s = self.up2.setdefault(a, {"since": None, "unauth": False, "reported": False})
            if u.get("state") != "down":
                s.update(since=None, unauth=False, reported=False)
                continue
            # documented: down for rejecting kprism's certificate keeps its connections until up, or
            # until a failed check gives another reason
            s["unauth"] = u.get("down_reason") == "unauthorized"
            others_up = any(v.get("state") == "up" for b, v in ups.items() if b != a)
            # Documented holds: none other up, no etcd quorum, credentials rejected by every
            # apiserver, and this one down for rejecting kprism's certificate; each ends with its
            # condition, and the connections then move within the bound.
            if not others_up or hold or s["unauth"]:
                s["since"] = None
                continue
            if s["since"] is None:
                s["since"] = t
            n = u.get("active_connections") or 0
            if n > 0 and t - s["since"] > self.b["I2"] and not s["reported"]:
                s["reported"] = True
                self.violate("I2", f"{a} is down ({u.get('down_reason')}, last {u.get('last_result')}) while "
                                   f"another is up for {t - s['since']:.1f}s (bound {self.b['I2']:.1f}s) and still "
                                   f"holds {n} client connection(s); {self.ev.recent(t, 12)}")

    def _i3(self, socks):
        self.samples["I3"] += 1
        for state, (lip, lport), (rip, rport) in socks:
            if rport in (self.w.kport, self.w.aport) and (rip.startswith("127.") or rip == "0.0.0.0") \
                    and lport not in (self.w.kport, self.w.aport):
                self.violate("I3", f"kprism holds a {state} connection from port {lport} to its own listener "
                                   f"{rip}:{rport}", key=("I3", rport))

    def _i8(self, t, st, ups):
        """The result class kprism reports for c4 is what c4 answers (the /readyz file)."""
        w = self.w
        from world import C4_EXPECT, C4_HOSTILE
        mode, since = w.c4_mode, w.c4_mode_since
        exp = C4_EXPECT.get(mode)
        # A hostile peer's answers are judged at every sample, not once: an answer taken for a
        # later check's shows as a result that flips between samples.
        if exp is None or (mode not in C4_HOSTILE and (mode, since) in self.i8_checked):
            return
        quiet_since = max(since, w.c4_net_quiet_since, w.cert_normal_since, w.c4_configured_since)
        if w.c4_net_faulty or not w.cert_normal or t - quiet_since < self.b["I8"]:
            return
        if mode in C4_HOSTILE and self.ev.in_window("sigusr2", t, self.b["I8"]):
            return  # a restart's first check of c4 may not have answered yet
        u = ups.get(w.c4_endpoint)
        if u is None:
            return
        self.i8_checked.add((mode, since))
        self.samples["I8"] += 1
        want, check = exp
        got = u.get("last_result")
        if got != want or (check and check not in (u.get("failing_checks") or [])):
            self.violate("I8", f"c4 answers /readyz {mode} since {t - since:.1f}s, kprism's last result is "
                               f"{got} ({u.get('last_error')!r}, failing {u.get('failing_checks')}), expected {want}"
                               + (f" naming {check}" if check else ""), key=("I8", mode))

    def _i9(self, t):
        """I9: within I9_BOUND of a half-closed client's reset (run.py halfclose), kprism no longer
        holds its end of that connection (the inode found while the connection was served).
        Returns how many resets are still to be judged."""
        with self.ev.lock:
            pending = [e for e in self.ev.resets if "judged" not in e]
        if not pending or self.exited:
            return 0
        mine = socket_inodes(self.w.kp.pid)
        left = 0
        for e in pending:
            if e["inode"] is None:
                e["judged"] = "unobserved"
                self.notes["halfclose_unobserved"] = self.notes.get("halfclose_unobserved", 0) + 1
                continue
            age = t - e["t_rst"]
            if e["inode"] not in mine:
                e["judged"] = f"released after at most {max(age, 0):.1f}s"
                self.ev.note("halfclose_judged", str(e["lport"]), f"{e['server']}: {e['judged']}")
                self.samples["I9"] += 1
                k = "halfclose_" + {"c4": "c4_held", "c4?": "c4_maybe_direct"}.get(e["server"], "other")
                self.notes[k] = self.notes.get(k, 0) + 1
                if e["server"] == "c4":
                    self.notes["halfclose_c4_max_s"] = round(max(self.notes.get("halfclose_c4_max_s", 0), age), 2)
                continue
            # a restart in place (the exec, the handover) may take the connection's turn
            bound = I9_BOUND + (3.0 if any(e["t_rst"] - 3.0 <= x <= t for x in self.ev.times("sigusr2")) else 0.0)
            if age > bound:
                e["judged"] = "violation"
                self.ev.note("halfclose_judged", str(e["lport"]), f"{e['server']}: still held {age:.1f}s after the reset")
                self.samples["I9"] += 1
                self.notes["halfclose_held_too_long"] = self.notes.get("halfclose_held_too_long", 0) + 1
                if "I9" in self.reported:
                    continue  # one listed per seed; the others counted in the notes
                self.reported["I9"] = True
                self.violate("I9", f"kprism still holds the client connection from port {e['lport']} (served by "
                                   f"{e['server']}; socket inode {e['inode']}) {age:.1f}s after the client's reset "
                                   f"(bound {bound:.0f}s), {e['t_rst'] - e['t_fin']:.1f}s after its FIN; "
                                   f"{self.ev.recent(t, age + 3)}")
                continue
            left += 1
        return left

    # ---- I4
    def _resources(self, t):
        try:
            rss, fds = rss_kib(self.w.kp.pid), fd_count(self.w.kp.pid)
        except OSError:
            return
        st = self.w.status()
        if st is None:
            return
        self.scan_log()
        # Upstreams that may hold a descriptor (a probe connection): not the churn slice's, where
        # nothing listens and every connect is refused at once. Counted as one each, they would
        # lend 16 descriptors while the slice is posted and take them back when it is deleted.
        holders = [u for u in st.get("upstreams", []) if u.get("address", "").rsplit(":", 1)[0] not in wd.CHURN_ADDRS]
        self.res.append((t, rss, fds, st.get("connections_active", 0), len(holders), self.execs))

    def _check_resources(self):
        """I4: after warm-up, RSS and descriptors stay flat within each process image. kprism keeps
        its PID across a restart in place (SIGUSR2: exec); each exec (its log line) starts a new
        image, whose baseline is taken after WARMUP_RESTART (and after the SIGUSR2 that asked for
        it, since the check before the exec may take a while). Across the churn phase (run.py),
        kept free of restarts, the RSS may grow by at most CHURN_TOL_KIB."""
        if not self.res:
            return
        restarts = self.ev.times("sigusr2")
        floods = self.ev.times("admin_flood")  # idle admin connections hold descriptors for 3 s
        first_of_image = {}
        for r in self.res:
            first_of_image.setdefault(r[5], r[0])
        image_starts = [v for k, v in first_of_image.items() if k != self.res[0][5]]
        rows = [r for r in self.res if not (self.t0 <= r[0] < self.t0 + WARMUP)
                and not any(s <= r[0] < s + WARMUP_RESTART for s in restarts + image_starts)
                and not any(f <= r[0] < f + 4.5 for f in floods)]
        segs = {}
        for r in rows:
            segs.setdefault(r[5], []).append(r)
        for image, seg in sorted(segs.items()):
            if len(seg) < 8:
                self.notes["i4_images_too_short"] = self.notes.get("i4_images_too_short", 0) + 1
                continue
            self.samples["I4"] += len(seg)
            head, tail = seg[:5], seg[-5:]
            base = max(r[1] for r in head)
            end = sorted(r[1] for r in tail)[2]
            if sanitized(self.w.kbin):
                self.notes["i4_rss_unjudged_sanitizer"] = self.notes.get("i4_rss_unjudged_sanitizer", 0) + 1
            elif end - base > RSS_TOL_KIB:
                self.violate("I4", f"RSS grew from {base} KiB to {end} KiB over {seg[-1][0] - seg[0][0]:.0f}s "
                                   f"after warm-up (process image {image + 1}: restarts in place before it "
                                   f"{image}; tolerance {RSS_TOL_KIB} KiB)", key=("I4-rss", image))
            # descriptors beyond two per client connection and one per upstream
            excess = [r[2] - 2 * r[3] - r[4] for r in seg]
            fbase = max(excess[:5])
            over = 0
            for x in excess[5:]:
                over = over + 1 if x > fbase + FD_TOL else 0
                if over >= 5:
                    self.violate("I4", f"open descriptors beyond connections and upstreams grew from {fbase} to "
                                       f"{x} for 5 s (tolerance {FD_TOL}); now {describe_fds(self.w.kp.pid)}",
                                 key=("I4-fd", image))
                    break
        # across the churn phase
        for c0, c1 in zip(self.ev.times("churn"), self.ev.times("churn_end")):
            before = [r for r in self.res if c0 - 2.5 <= r[0] <= c0 + 0.5]
            after = [r for r in self.res if c1 + 1.0 <= r[0] <= c1 + 5.0]
            if len(before) < 2 or len(after) < 2:
                self.notes["churn_unmeasured"] = self.notes.get("churn_unmeasured", 0) + 1
                continue
            if {r[5] for r in before + after} != {before[0][5]}:
                self.notes["churn_unmeasured_restart"] = self.notes.get("churn_unmeasured_restart", 0) + 1
                continue
            self.samples["I4"] += 1
            base = sorted(r[1] for r in before)[len(before) // 2]
            end = sorted(r[1] for r in after)[len(after) // 2]
            self.notes["churn_rss_growth_kib"] = max(self.notes.get("churn_rss_growth_kib", -10**9), end - base)
            if end - base > CHURN_TOL_KIB and not sanitized(self.w.kbin):
                self.violate("I4", f"RSS grew from {base} KiB to {end} KiB across the membership churn "
                                   f"({c1 - c0:.0f}s of reloads and slice changes adding and removing upstreams; "
                                   f"tolerance {CHURN_TOL_KIB} KiB): removed upstreams leave memory behind; "
                                   f"{self.ev.churn_detail}", key=("I4-churn", c0))

    # ---- I6
    def _check_requests(self, traffic):
        """I6: a failed request is a violation unless an event explains it (it falls in the event's
        window, world.py/run.py) or no upstream was up while it ran."""
        with traffic.lock:
            reqs = list(traffic.requests)
        self.failures = {"ok": 0, "explained": 0, "unservable": 0, "unexplained": 0}
        self.by_event = {}
        for t0, t1, ok, server, detail in reqs:
            self.samples["I6"] += 1
            if ok:
                self.failures["ok"] += 1
                continue
            ev = self.ev.explains(t0, t1)
            if ev:
                self.failures["explained"] += 1
                self.by_event[ev] = self.by_event.get(ev, 0) + 1
                continue
            if any(t0 - 0.5 <= x <= t1 for x in self.none_up_times):
                self.failures["unservable"] += 1
                continue
            self.failures["unexplained"] += 1
            self.violate("I6", f"request {t0 - self.t0:.1f}-{t1 - self.t0:.1f}s failed ({detail}, server "
                               f"{server or '-'}) with no event to explain it; {self.ev.recent(t1, 8)}")
