#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# The layering of src/ and include/kprism/ (ARCHITECTURE.md): no file includes a header of a higher layer.
"""Checks every `#include "kprism/FOLDER/NAME.h"` in src/ and include/kprism/ against the layers.

A unit is a name in a folder (src/F/N.cc and include/kprism/F/N.h). Its layer is PARTS' for the
units listed there, else its folder's. A unit may include its own layer or a lower one. A file
outside a known folder, or an include of a header that does not exist, fails too.
Ends with "layers: N passed, M failed"; exit status 1 if any failed.
`--self-test` first checks that a tree with an upward include, an unknown folder and a missing
header fails, and that a clean one passes.
"""
import os
import re
import sys
import tempfile

# Lowest first. The core is where the daemon's objects meet: the Server owns the control plane,
# the connections, discovery and the handoff, and they call back into it; the parts below it
# never do.
LAYERS = ["base", "config", "parts", "core", "admin", "cli"]
FOLDERS = {
    "base": "base",
    "config": "config",
    "upstreams": "core",
    "discovery": "core",
    "proxy": "core",
    "handoff": "core",
    "daemon": "core",
    "admin": "admin",
    "cli": "cli",
}
# Units of the core's folders that are parts: state machines, formats and parsers of untrusted
# input, selection. They include only base, config and other parts, so that each can be tested
# and fuzzed alone.
PARTS = {
    "upstreams/upstream", "upstreams/credentials", "upstreams/readyz_body", "upstreams/http_response",
    "upstreams/tls_context", "upstreams/tls_client",
    "discovery/parse", "discovery/snapshot",
    "proxy/selection", "proxy/buffer_pool", "proxy/sockopt", "proxy/splice_poll",
    "handoff/record",
    "daemon/heartbeat", "daemon/runtime_dir", "daemon/admin_endpoint",
    "admin/http_request", "admin/metric_families", "daemon/stats",
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"kprism/([^"]+)\.h"', re.M)


def layer_of(unit):
    if unit in PARTS:
        return "parts"
    return FOLDERS.get(unit.split("/")[0])


def units(root):
    """(path, unit) of every source file and header."""
    for top, strip in (("src", ".cc"), (os.path.join("include", "kprism"), ".h")):
        base = os.path.join(root, top)
        for d, _, files in os.walk(base):
            for f in sorted(files):
                if f.endswith(strip):
                    rel = os.path.relpath(os.path.join(d, f), base)
                    yield os.path.join(top, rel), rel[: -len(strip)]


def check(root):
    passed, failures = 0, []
    headers = {u for _, u in units(root) if _.startswith("include")}
    for path, unit in units(root):
        mine = layer_of(unit)
        if "/" not in unit or mine is None:
            failures.append(f"{path}: not in a known folder ({', '.join(FOLDERS)})")
            continue
        with open(os.path.join(root, path)) as f:
            text = f.read()
        for inc in INCLUDE.findall(text):
            theirs = layer_of(inc)
            if inc not in headers or theirs is None:
                failures.append(f"{path}: includes kprism/{inc}.h, which is not a header of a known folder")
            elif LAYERS.index(theirs) > LAYERS.index(mine):
                failures.append(f"{path} ({mine}) includes kprism/{inc}.h ({theirs}): a higher layer")
            else:
                passed += 1
    return passed, failures


def self_test():
    def tree(files):
        d = tempfile.mkdtemp(prefix="kprism-layers-")
        for p, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(d, p)), exist_ok=True)
            with open(os.path.join(d, p), "w") as f:
                f.write(text)
        return d

    clean = {"include/kprism/base/log.h": "", "include/kprism/daemon/server.h": '#include "kprism/base/log.h"\n',
             "src/cli/main.cc": '#include "kprism/daemon/server.h"\n'}
    ok = True
    p, f = check(tree(clean))
    ok &= (p, f) == (2, [])
    for bad, want in (
        ({"src/base/log.cc": '#include "kprism/daemon/server.h"\n'}, "a higher layer"),
        ({"src/discovery/parse.cc": '  #  include "kprism/discovery/membership.h"\n',
          "include/kprism/discovery/membership.h": ""}, "a higher layer"),
        ({"src/misc/x.cc": ""}, "not in a known folder"),
        ({"src/daemon/x.cc": '#include "kprism/daemon/nothere.h"\n'}, "not a header"),
    ):
        _, f = check(tree({**clean, **bad}))
        ok &= len(f) == 1 and want in f[0]
    print(f"layers: self-test {'passed' if ok else 'FAILED'}")
    return ok


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    if "--self-test" in sys.argv[1:] and not self_test():
        return 1
    passed, failures = check(root)
    for f in failures:
        print(f"layers: FAIL: {f}")
    print(f"layers: {passed} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
