#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Checks packaging/kubernetes/kprism-discovery-rbac.yaml, the RBAC that kprism's discovery needs.

Usage: tests/packaging/check_rbac.py [FILE]
Prints "PASS name" / "FAIL name: why" per check and exits 1 if any failed.
Needs python3-yaml (Debian: apt-get install python3-yaml).

Exactly two documents: a ClusterRole kprism:discovery whose only rule is get, list and watch on
endpointslices in discovery.k8s.io (kprism lists and watches the `kubernetes` EndpointSlices,
nothing else), and a binding of that role, and of nothing else, to the group system:nodes (the
O of kubelet's client certificate, which kprism's checks and discovery use). Both labelled
app.kubernetes.io/name=kprism; the file opens with its SPDX line.
"""
import os
import sys

import yaml

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DEFAULT = os.path.join(ROOT, "packaging/kubernetes/kprism-discovery-rbac.yaml")
ROLE = "kprism:discovery"
RBAC_API = "rbac.authorization.k8s.io/v1"
results = []


def check(name, ok, why=""):
    results.append(ok)
    print(f"PASS  {name}" if ok else f"FAIL  {name}: {why}")


def main(argv):
    path = argv[1] if len(argv) > 1 else DEFAULT
    with open(path) as f:
        text = f.read()
    check("SPDX line first", text.startswith("# SPDX-License-Identifier: Apache-2.0\n"),
          text.splitlines()[0] if text else "empty file")
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        check("valid YAML", False, e)
        return 1
    kinds = sorted(str(d.get("kind")) for d in docs if isinstance(d, dict))
    check("two documents: a ClusterRole and a ClusterRoleBinding",
          len(docs) == 2 and kinds == ["ClusterRole", "ClusterRoleBinding"], kinds)
    by_kind = {d.get("kind"): d for d in docs if isinstance(d, dict)}
    role = by_kind.get("ClusterRole") or {}
    binding = by_kind.get("ClusterRoleBinding") or {}
    for kind, d in (("ClusterRole", role), ("ClusterRoleBinding", binding)):
        md = d.get("metadata") or {}
        check(f"{kind} apiVersion {RBAC_API}, name {ROLE}",
              d.get("apiVersion") == RBAC_API and md.get("name") == ROLE,
              (d.get("apiVersion"), md.get("name")))
        check(f"{kind} labelled app.kubernetes.io/name=kprism",
              (md.get("labels") or {}).get("app.kubernetes.io/name") == "kprism", md.get("labels"))
        check(f"{kind} not namespaced", "namespace" not in md, md.get("namespace"))
    rules = role.get("rules") or []
    want = {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
            "verbs": ["get", "list", "watch"]}
    # Order within a list does not matter to RBAC; the sets must be exact (no "*", no extra verb,
    # no resourceNames or nonResourceURLs).
    ok = len(rules) == 1 and isinstance(rules[0], dict) and set(rules[0]) == set(want) and all(
        isinstance(rules[0][k], list) and sorted(rules[0][k]) == sorted(v) and len(set(rules[0][k])) == len(v)
        for k, v in want.items())
    check("one rule: get, list, watch on endpointslices in discovery.k8s.io, nothing else", ok, rules)
    check("ClusterRole has no aggregationRule", "aggregationRule" not in role, role.get("aggregationRule"))
    ref = binding.get("roleRef") or {}
    check(f"roleRef is ClusterRole {ROLE}",
          ref == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE}, ref)
    subjects = binding.get("subjects") or []
    check("one subject: Group system:nodes",
          subjects == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}],
          subjects)
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
