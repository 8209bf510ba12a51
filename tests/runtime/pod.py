#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Prepares a static pod manifest for `podman kube play` with only the allowed edits, and reads its probes.
"""Usage: pod.py play SOURCE HOSTROOT IMAGE [ENDPOINTS] > pod.yaml
       pod.py probe POD.yaml liveness|readiness   -> "host port path"

SOURCE is a Pod manifest (packaging/kubernetes/kprism.yaml) or a Talos machine config patch whose
machine.pods holds the pod (talos-extension/examples/static-pod-*.patch.yaml). The only edits:
the container image becomes IMAGE (the image loaded from build/images/kprism.oci.tar), every
hostPath path is re-rooted under HOSTROOT (a directory laid out like the node's /), and, with
ENDPOINTS, an `--endpoints=` argument is pointed at the stand-in apiservers (the Talos pod carries
its configuration as flags; the kubeadm pod reads kprism.toml from its hostPath, which the caller
writes). Everything else, securityContext, mounts, probes, resources, priority, goes to podman as
the manifest has it; what podman kube play does not implement is listed in tests/runtime/run.sh.
"""
import sys

import yaml


def pod_of(source):
    docs = [d for d in yaml.safe_load_all(open(source)) if isinstance(d, dict)]
    for d in docs:
        if d.get("kind") == "Pod":
            return d
        pods = (d.get("machine") or {}).get("pods")
        if pods:
            if len(pods) != 1:
                sys.exit(f"pod.py: {source}: machine.pods holds {len(pods)} pods, expected one")
            return pods[0]
    sys.exit(f"pod.py: {source}: no Pod and no machine.pods")


def play(source, hostroot, image, endpoints=None):
    pod = pod_of(source)
    for v in pod["spec"].get("volumes") or []:
        if "hostPath" in v:
            v["hostPath"]["path"] = hostroot.rstrip("/") + v["hostPath"]["path"]
    for c in pod["spec"]["containers"]:
        c["image"] = image
        if endpoints:
            c["args"] = [f"--endpoints={endpoints}" if a.startswith("--endpoints=") else a for a in c.get("args") or []]
    yaml.safe_dump(pod, sys.stdout, sort_keys=False)


def probe(path, kind):
    pod = yaml.safe_load(open(path))
    p = pod["spec"]["containers"][0].get(kind + "Probe")
    if not p or "httpGet" not in p:
        sys.exit(f"pod.py: no httpGet {kind}Probe")
    g = p["httpGet"]
    print(g.get("host", "127.0.0.1"), g["port"], g.get("path", "/"))


if __name__ == "__main__":
    if len(sys.argv) >= 5 and sys.argv[1] == "play":
        play(*sys.argv[2:6])
    elif len(sys.argv) == 4 and sys.argv[1] == "probe":
        probe(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
