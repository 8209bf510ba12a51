#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Checks that each example configuration is right for the deploy path it names.

Usage: tests/packaging/example_paths.py [FILE.toml ...]   (default: packaging/examples/*.toml)

Every example carries a line `# deploy: deb` or `# deploy: static-pod`:
  deb         the Debian package's kprism.service, a dynamic user with no capabilities: it reads
              the copy of the kubelet's root-only key that kprism-copy-cert writes (the file is
              taken from that script and the unit's RuntimeDirectory=), and a CA outside
              /var/lib/kubelet;
  static-pod  packaging/kubernetes/kprism.yaml: tests/packaging/check_manifests.py --toml FILE
              decides (files inside the pod's mounts, readable by the pod's user).
Talos configurations live in talos-extension/examples/: the ExtensionServiceConfig of the extension's
patches and the flags of the static pod's (checked by talos-extension/validate.py), so
`deploy: talos` is refused here.
Prints PASS/FAIL lines and exits 1 if any failed. Needs Python >= 3.11 (tomllib).
"""
import glob
import os
import re
import subprocess
import sys
import tomllib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DEFAULT_CERT = "/var/lib/kubelet/pki/kubelet-client-current.pem"  # kprism.toml(5)
DEFAULT_CA = "/etc/kubernetes/pki/ca.crt"
failed = 0


def report(name, why):
    global failed
    if why:
        failed += 1
        print(f"FAIL  {name}: {why}")
    else:
        print(f"PASS  {name}")


def deb_copy_path():
    """The file kprism-copy-cert writes by default, and whether kprism.service creates its dir."""
    script = open(os.path.join(ROOT, "packaging/systemd/kprism-copy-cert")).read()
    unit = open(os.path.join(ROOT, "packaging/systemd/kprism.service")).read()
    d = re.search(r'^dir=\$\{2:-([^}]+)\}', script, re.M).group(1)
    name = re.search(r'^dst=\$dir/(\S+)', script, re.M).group(1)
    rd = re.search(r"^RuntimeDirectory=(\S+)", unit, re.M)
    if not rd or "/run/" + rd.group(1) != d:
        sys.exit(f"kprism.service RuntimeDirectory= does not create {d}, where kprism-copy-cert writes")
    return f"{d}/{name}"


def check(path):
    text = open(path).read()
    name = os.path.relpath(path, ROOT)
    m = re.search(r"^# deploy: (\S+)\s*$", text, re.M)
    if not m:
        return report(name, "no `# deploy: deb|static-pod` line naming the path it is for")
    kind = m.group(1)
    health = tomllib.loads(text).get("health", {})
    cert = health.get("client_cert", DEFAULT_CERT)
    key = health.get("client_key", DEFAULT_CERT)
    ca = health.get("ca_file", DEFAULT_CA)
    if kind == "deb":
        want = deb_copy_path()
        bad = [f"{k} {v} (kprism.service runs as a dynamic user and reads {want})"
               for k, v in (("client_cert", cert), ("client_key", key)) if v != want]
        if ca.startswith("/var/lib/kubelet/"):
            bad.append(f"ca_file {ca} is in the kubelet's directory the dynamic user cannot read")
        return report(f"{name} is right for the Debian package", "; ".join(bad))
    if kind == "static-pod":
        r = subprocess.run([sys.executable, os.path.join(ROOT, "tests/packaging/check_manifests.py"),
                            "--toml", path], capture_output=True, text=True)
        fails = [l for l in r.stdout.splitlines() if l.startswith("FAIL")]
        return report(f"{name} is right for the static pod", "; ".join(fails) or
                      ("" if r.returncode == 0 else r.stdout + r.stderr))
    return report(name, f"deploy: {kind} is not deb or static-pod (Talos: the patches in "
                        "talos-extension/examples/)")


files = sys.argv[1:] or sorted(glob.glob(os.path.join(ROOT, "packaging/examples/*.toml")))
for f in files:
    check(f)
sys.exit(1 if failed else 0)
