# SPDX-License-Identifier: Apache-2.0
"""One line per check ("faults: ok: ..." / "faults: FAIL: ..."), the per-fault figures, and the
summary table."""

import json
import sys
import threading

_lock = threading.Lock()


class Report:
    def __init__(self, out=sys.stdout, prefix="faults"):
        self.out, self.prefix = out, prefix
        self.passed = 0
        self.failed = 0
        self.failures = []  # the first line of each failure, for the summary at the end
        self.rows = []  # one dict per fault, see COLUMNS

    def say(self, line):
        with _lock:
            print(line, file=self.out, flush=True)

    def ok(self, msg):
        self.passed += 1
        self.say(f"{self.prefix}: ok: {msg}")

    def fail(self, msg):
        self.failed += 1
        self.failures.append(msg[:300])
        self.say(f"{self.prefix}: FAIL: {msg}")

    def failure_summary(self):
        """Every failure again, one line each, just before the totals: CI logs are often seen only
        by their tail."""
        for i, msg in enumerate(self.failures, 1):
            self.say(f"{self.prefix}: failed {i}/{len(self.failures)}: {msg}")

    def check(self, cond, msg, detail=""):
        if cond:
            self.ok(msg)
        else:
            self.fail(f"{msg}{' - ' + detail if detail else ''}")
        return bool(cond)

    def info(self, msg):
        self.say(f"{self.prefix}: info: {msg}")

    def row(self, **kw):
        self.rows.append(kw)

    def to_json(self):
        return json.dumps({"passed": self.passed, "failed": self.failed, "failures": self.failures,
                           "rows": self.rows})

    def merge_json(self, text):
        d = json.loads(text)
        self.passed += d["passed"]
        self.failed += d["failed"]
        self.failures.extend(d.get("failures", []))
        self.rows.extend(d["rows"])


COLUMNS = [
    ("fault", "fault"),
    ("down", "marked down (s)"),
    ("moved", "new traffic off it by (s)"),
    ("failed", "failed / new conns"),
    ("closed", "its existing conns closed by (s)"),
    ("recovered", "used again after lift (s)"),
    ("notes", "notes"),
]


def fmt_s(v):
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    return f"{v:.2f}"


def table(rows):
    lines = ["| " + " | ".join(h for _, h in COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        lines.append("| " + " | ".join(fmt_s(r.get(k)) for k, _ in COLUMNS) + " |")
    return "\n".join(lines)
