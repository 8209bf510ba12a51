# SPDX-License-Identifier: Apache-2.0
"""Everything the suite creates (processes, network namespaces, iptables rules live inside those)
is registered here and undone in reverse order: at the end of the Scope that made it, and at exit
or on SIGINT/SIGTERM/SIGHUP whatever happened, so a failed or interrupted run leaves nothing."""

import atexit
import signal
import sys
import threading

_lock = threading.Lock()
_stack = []  # (token, description, callable)
_next = 0


def register(what, fn):
    """Registers fn (no arguments) to undo `what`; returns a token for undo()."""
    global _next
    with _lock:
        _next += 1
        _stack.append((_next, what, fn))
        return _next


def undo(token):
    """Runs and forgets the cleanup registered under token (no-op if already done)."""
    with _lock:
        for i, (t, _, fn) in enumerate(_stack):
            if t == token:
                del _stack[i]
                break
        else:
            return
    _call(fn)


def _call(fn):
    try:
        fn()
    except Exception as e:  # a cleanup must never stop the next one
        print(f"faults: cleanup error: {e}", file=sys.stderr)


def run_all():
    while True:
        with _lock:
            if not _stack:
                return
            _, _, fn = _stack.pop()
        _call(fn)


class Scope:
    """with Scope() as s: s.add(what, fn) ... - undone when the block ends, in reverse order."""

    def __init__(self):
        self.tokens = []

    def add(self, what, fn):
        self.tokens.append(register(what, fn))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for t in reversed(self.tokens):
            undo(t)
        self.tokens = []
        return False


def _on_signal(signum, _frame):
    # Unwinds the main thread through its finally blocks; atexit then runs whatever is left.
    raise SystemExit(128 + signum)


def install():
    atexit.register(run_all)
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, _on_signal)
