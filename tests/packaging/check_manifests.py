#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Checks the shape of packaging/kubernetes/kprism.yaml (the static pod) with a YAML parser,
together with the kprism.toml it runs (packaging/kubernetes/kprism.toml, next to the manifest).

Usage: tests/packaging/check_manifests.py [--toml FILE] [MANIFEST]
  --toml FILE   the pod's kprism.toml (default: kprism.toml next to MANIFEST)
Prints "PASS name" / "FAIL name: why" per check and exits 1 if any failed.
Needs python3-yaml (Debian: apt-get install python3-yaml) and Python 3.11+ (tomllib).

The pod may run as root (to read kubelet's 0600 client key) only with every capability dropped,
none added, no privilege escalation, a read-only root filesystem and read-only mounts but one: the
state directory, hostPath /var/lib/kprism (DirectoryOrCreate) at /var/lib/kprism, where the
discovery snapshot is written. A non-root
pod must not name kubelet's key in kprism.toml (it could not read it). The memory limit must
cover what kprism.toml's max_connections allows: BASE_KIB + max_connections x PER_CONNECTION_KIB
(bench/history/memory.md, "Memory under stalled connections").
"""
import argparse
import os
import sys

import yaml

# The memory quantity parser the Talos patches' checks use too (talos-extension/validate.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "talos-extension"))
from validate import kib  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
results = []

# bench/busy_rss.py: 3340 KiB idle, plus up to 64 spare 64 KiB chunks (4 MiB) the buffer pool
# keeps after a burst; a stalled connection holds up to one 64 KiB chunk each way, ~130 KiB with
# its other state (129.3 KiB per connection measured at 100 connections).
BASE_KIB = 8 * 1024
PER_CONNECTION_KIB = 130
DEFAULT_MAX_CONNECTIONS = 10000  # man/kprism.toml.5
KUBELET_PKI = "/var/lib/kubelet/pki"
# The one writable mount: discovery.snapshot_file's default directory (man/kprism.toml.5).
STATE_DIR = "/var/lib/kprism"
# Host directories that hold cluster private keys (ca.key, sa.key, etcd/ on control-plane nodes).
KEY_DIRS = ("/", "/etc", "/etc/kubernetes", "/etc/kubernetes/pki", "/var/lib", "/var/lib/kubelet")


def check(name, ok, why=""):
    results.append(ok)
    print(f"PASS  {name}" if ok else f"FAIL  {name}: {why}")


def get(d, *keys):
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--toml", help="the pod's kprism.toml (default: kprism.toml next to MANIFEST)")
    ap.add_argument("manifest", nargs="?", default=os.path.join(ROOT, "packaging/kubernetes/kprism.yaml"))
    opts = ap.parse_args(argv[1:])
    path = opts.manifest
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    check("one YAML document", len(docs) == 1, f"{len(docs)} documents")
    pod = docs[0] if docs else {}
    spec = pod.get("spec") or {}
    check("kind Pod, apiVersion v1", pod.get("kind") == "Pod" and pod.get("apiVersion") == "v1",
          f"{pod.get('apiVersion')}/{pod.get('kind')}")
    check("namespace kube-system", get(pod, "metadata", "namespace") == "kube-system",
          get(pod, "metadata", "namespace"))
    check("hostNetwork true", spec.get("hostNetwork") is True, spec.get("hostNetwork"))
    check("priorityClassName system-node-critical",
          spec.get("priorityClassName") == "system-node-critical", spec.get("priorityClassName"))
    check("priority matches system-node-critical (2000001000) if set",
          spec.get("priority") in (None, 2000001000), spec.get("priority"))
    check("dnsPolicy does not depend on cluster DNS",
          spec.get("dnsPolicy") in ("Default", "None") or not spec.get("hostNetwork"),
          spec.get("dnsPolicy"))
    check("no service account token", spec.get("automountServiceAccountToken") is False,
          spec.get("automountServiceAccountToken"))
    containers = spec.get("containers") or []
    check("one container", len(containers) == 1, f"{len(containers)} containers")
    c = containers[0] if containers else {}
    psc = spec.get("securityContext") or {}
    csc = c.get("securityContext") or {}

    def eff(key):  # container value, else pod value
        return csc.get(key, psc.get(key))

    uid, gid = eff("runAsUser"), eff("runAsGroup")
    check("runAsUser and runAsGroup set (not left to the image's USER)",
          isinstance(uid, int) and uid >= 0 and isinstance(gid, int) and gid >= 0, (uid, gid))
    root = uid == 0
    check("runAsNonRoot agrees with runAsUser (false for uid 0, true otherwise)",
          eff("runAsNonRoot") is (not root), (uid, eff("runAsNonRoot")))
    check("readOnlyRootFilesystem", csc.get("readOnlyRootFilesystem") is True,
          csc.get("readOnlyRootFilesystem"))
    check("allowPrivilegeEscalation false", csc.get("allowPrivilegeEscalation") is False,
          csc.get("allowPrivilegeEscalation"))
    check("not privileged", not csc.get("privileged"), csc.get("privileged"))
    caps = csc.get("capabilities") or {}
    check("capabilities drop ALL, add none",
          caps.get("drop") == ["ALL"] and not caps.get("add"), caps)
    check("seccompProfile RuntimeDefault",
          get(eff("seccompProfile") or {}, "type") == "RuntimeDefault", eff("seccompProfile"))

    res = c.get("resources") or {}
    req, lim = res.get("requests") or {}, res.get("limits") or {}
    check("requests cpu and memory, memory limit",
          bool(req.get("cpu")) and bool(req.get("memory")) and bool(lim.get("memory")), res)
    limit_kib = kib(lim.get("memory")) if lim.get("memory") is not None else None

    for probe, path_ in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        h = get(c, probe, "httpGet") or {}
        check(f"{probe} httpGet http://127.0.0.1:7446{path_}",
              h.get("host") == "127.0.0.1" and h.get("port") == 7446 and h.get("path") == path_
              and h.get("scheme", "HTTP") == "HTTP", h)

    mounts = c.get("volumeMounts") or []
    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    writable = [m for m in mounts if m.get("readOnly") is not True]
    state = [m for m in mounts if m.get("mountPath") == STATE_DIR]
    check(f"every volumeMount readOnly but the state directory {STATE_DIR}",
          bool(mounts) and all(m.get("mountPath") == STATE_DIR for m in writable),
          [m.get("name") for m in writable if m.get("mountPath") != STATE_DIR])
    state_hp = get(volumes.get(state[0].get("name")), "hostPath") if len(state) == 1 else None
    check(f"the state directory: one writable mount of hostPath {STATE_DIR} (DirectoryOrCreate) at {STATE_DIR}",
          len(state) == 1 and state[0].get("readOnly") is not True and not state[0].get("subPath")
          and (state_hp or {}).get("path") == STATE_DIR and (state_hp or {}).get("type") == "DirectoryOrCreate",
          [(m.get("name"), m.get("readOnly"), get(volumes.get(m.get("name")), "hostPath")) for m in state]
          or "no mount at " + STATE_DIR)
    if root:
        why = {"capabilities not drop [ALL]": caps.get("drop") != ["ALL"],
               "capabilities added": bool(caps.get("add")),
               "allowPrivilegeEscalation not false": csc.get("allowPrivilegeEscalation") is not False,
               "privileged": bool(csc.get("privileged")),
               "root filesystem writable": csc.get("readOnlyRootFilesystem") is not True,
               "a mount not readOnly (but the state directory)":
                   not mounts or any(m.get("mountPath") != STATE_DIR for m in writable)}
        check("uid 0 only with no capabilities, no escalation, read-only root and mounts (but the state directory)",
              not any(why.values()), [k for k, v in why.items() if v])
    check("every volumeMount has a volume", all(m.get("name") in volumes for m in mounts),
          [m.get("name") for m in mounts if m.get("name") not in volumes])
    check("volumes are hostPath only",
          all(set(v) == {"name", "hostPath"} for v in volumes.values()), list(volumes))
    hp = {m.get("mountPath"): get(volumes.get(m.get("name")), "hostPath", "path") for m in mounts}
    check("config from hostPath /etc/kprism", hp.get("/etc/kprism") == "/etc/kprism", hp)
    check("kubelet PKI hostPath mounted at its own path",
          hp.get(KUBELET_PKI) == KUBELET_PKI, hp)
    check("no mount exposes a host directory holding cluster private keys",
          not any(h in KEY_DIRS for h in hp.values()), [h for h in hp.values() if h in KEY_DIRS])

    def covered(p):
        return any(p == mp or p.startswith(mp.rstrip("/") + "/") for mp in hp)

    args = (c.get("command") or []) + (c.get("args") or [])
    files = []
    for i, a in enumerate(args):
        if a in ("--config", "--client-cert", "--client-key", "--ca-file") and i + 1 < len(args):
            files.append(args[i + 1])
        elif a.split("=", 1)[0] in ("--config", "--client-cert", "--client-key", "--ca-file") and "=" in a:
            files.append(a.split("=", 1)[1])
    check("args name a --config file", any(a in ("--config",) or a.startswith("--config=") for a in args), args)
    check("every file in args is inside a mount", bool(files) and all(covered(p) for p in files),
          [p for p in files if not covered(p)])

    # The static pod's own configuration (packaging/kubernetes/kprism.toml) installed as the
    # --config file: its certificate files must be inside the mounts, readable by the pod's user,
    # and its max_connections must fit the memory limit.
    toml_path = opts.toml or os.path.join(os.path.dirname(path), "kprism.toml")
    try:
        import tomllib
    except ImportError:
        check("tomllib (Python 3.11+) to read kprism.toml", False, sys.version.split()[0])
        return 1
    with open(toml_path, "rb") as f:
        conf = tomllib.load(f)
    health = conf.get("health", {})
    defaults = {"client_cert": f"{KUBELET_PKI}/kubelet-client-current.pem",
                "client_key": f"{KUBELET_PKI}/kubelet-client-current.pem",
                "ca_file": "/etc/kubernetes/pki/ca.crt"}  # man/kprism.toml.5
    tls = {k: health.get(k, d) for k, d in defaults.items()}
    check("kprism.toml's client_cert, client_key, ca_file are inside mounts",
          all(covered(p) for p in tls.values()), [p for p in tls.values() if not covered(p)])
    kubelet_files = [tls[k] for k in ("client_cert", "client_key")
                     if tls[k] == KUBELET_PKI or tls[k].startswith(KUBELET_PKI + "/")]
    check("a non-root pod does not name kubelet's root-only key (it could not read it)",
          root or not kubelet_files, f"runAsUser {uid} with {kubelet_files}")
    n = conf.get("max_connections", DEFAULT_MAX_CONNECTIONS)
    need = BASE_KIB + n * PER_CONNECTION_KIB
    check(f"memory limit covers max_connections {n}: {BASE_KIB} KiB + {n} x {PER_CONNECTION_KIB} KiB"
          f" = {need / 1024:.0f} MiB",
          limit_kib is not None and limit_kib >= need,
          f"limits.memory {lim.get('memory')} = {(limit_kib or 0) / 1024:.0f} MiB")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
