#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Checks the shape of packaging/kubernetes/kprism.yaml (the static pod) with a YAML parser.

Usage: tests/packaging/check_manifests.py [MANIFEST]
Prints "PASS name" / "FAIL name: why" per check and exits 1 if any failed.
Needs python3-yaml (Debian: apt-get install python3-yaml).
"""
import os
import sys

import yaml

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
results = []


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
    path = argv[1] if len(argv) > 1 else os.path.join(ROOT, "packaging/kubernetes/kprism.yaml")
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

    check("runAsNonRoot", eff("runAsNonRoot") is True, eff("runAsNonRoot"))
    uid = eff("runAsUser")
    check("runAsUser is a non-zero uid", isinstance(uid, int) and uid > 0, uid)
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

    for probe, path_ in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        h = get(c, probe, "httpGet") or {}
        check(f"{probe} httpGet http://127.0.0.1:7446{path_}",
              h.get("host") == "127.0.0.1" and h.get("port") == 7446 and h.get("path") == path_
              and h.get("scheme", "HTTP") == "HTTP", h)

    mounts = c.get("volumeMounts") or []
    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    check("every volumeMount readOnly", bool(mounts) and all(m.get("readOnly") is True for m in mounts),
          [m.get("name") for m in mounts if m.get("readOnly") is not True])
    check("every volumeMount has a volume", all(m.get("name") in volumes for m in mounts),
          [m.get("name") for m in mounts if m.get("name") not in volumes])
    check("volumes are hostPath only",
          all(set(v) == {"name", "hostPath"} for v in volumes.values()), list(volumes))
    hp = {m.get("mountPath"): get(volumes.get(m.get("name")), "hostPath", "path") for m in mounts}
    check("config from hostPath /etc/kprism", hp.get("/etc/kprism") == "/etc/kprism", hp)
    check("kubelet PKI hostPath mounted at its own path",
          hp.get("/var/lib/kubelet/pki") == "/var/lib/kubelet/pki"
          or hp.get("/var/lib/kubelet") == "/var/lib/kubelet", hp)

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
    # --config file: its certificate files must be inside the mounts too.
    toml_path = os.path.join(os.path.dirname(path), "kprism.toml")
    if os.path.exists(toml_path):
        try:
            import tomllib
        except ImportError:
            tomllib = None
        if tomllib:
            with open(toml_path, "rb") as f:
                health = tomllib.load(f).get("health", {})
            paths = [health.get(k) for k in ("client_cert", "client_key", "ca_file") if health.get(k)]
            check("kprism.toml's client_cert, client_key, ca_file are inside mounts",
                  bool(paths) and all(covered(p) for p in paths), [p for p in paths if not covered(p)])
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
