#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Packaging checks (`make test-packaging`):
#  - the assembled Talos extension tree (build/talos-extension, `make talos-extension`) passes
#    talos-extension/validate.py with the four example patches, and broken copies of the tree
#    (world-writable, setuid, a file outside the allowed paths, name mismatch, writable or rbind
#    kubelet mount, no CA mount, no state mount or a wrong one, a writable mount elsewhere, no
#    restart, connectivity dependency, entrypoint not executable,
#    dynamically linked entrypoint, a version that is not the release) and of the patches (wrong
#    or misplaced endpoint, KubePrism on, unpinned installer, 1.14 conflicts, pasted CA, drain
#    over Talos's kill, the discovery snapshot outside the state mount) fail;
#  - the TOML inside the patches' one ExtensionServiceConfig passes `kprism check` with the tree's binary;
#  - the four Talos static-pod patches (talos-extension/examples/static-pod-*.patch.yaml) pass
#    validate.py --pod-patch (no tree needed), carry one and the same pod whose flags pass
#    `kprism check`, and a broken copy per rule fails for that rule (host network, image digest and
#    placeholder, probes on 127.0.0.1's admin port, capabilities, uid 0, read-only mounts but the
#    state directory, the three host directories, KubePrism off, the cluster endpoint, priority
#    class, namespace, memory, grace period, both pod forms, the extension's config alongside);
#  - packaging/kubernetes/kprism.yaml passes tests/packaging/check_manifests.py, and a broken copy
#    per rule fails for that rule (a writable mount other than the state directory
#    /var/lib/kprism, the state volume from elsewhere or not DirectoryOrCreate, root with
#    capabilities, non-root with the kubelet key, memory under max_connections, a mount of the
#    host PKI with keys);
#  - packaging/kubernetes/kprism-discovery-rbac.yaml grants exactly get/list/watch on
#    discovery.k8s.io endpointslices to the group system:nodes (tests/packaging/check_rbac.py),
#    and broken copies fail;
#  - every packaging/examples/*.toml names its deploy path and is right for it
#    (tests/packaging/example_paths.py), broken copies fail;
#  - every packaging/examples/*.toml, packaging/kubernetes/kprism.toml and
#    packaging/kprism.toml.example pass `kprism check`.
# Env: KPRISM_BIN (default build/kprism), TALOS_TREE (default build/talos-extension),
# TALOS_ALLOW_DYNAMIC=1 when the tree holds a non-static test binary.
# Needs /usr/bin/python3 with python3-yaml. Ends with "packaging: N passed, M failed".
set -u
cd "$(dirname "$0")/../.." || exit 1
KPRISM_BIN=${KPRISM_BIN:-build/kprism}
TALOS_TREE=${TALOS_TREE:-build/talos-extension}
TALOS_ALLOW_DYNAMIC=${TALOS_ALLOW_DYNAMIC:-0}
VALIDATE=talos-extension/validate.py
EX=talos-extension/examples
ENTRY=rootfs/usr/local/lib/containers/kprism/kprism
SPEC=rootfs/usr/local/etc/containers/kprism.yaml

passed=0; failed=0
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT

# check NAME CMD...: CMD must succeed; its output is shown only when it does not.
check() {
    local name=$1; shift
    if "$@" >"$tmp/out" 2>&1; then
        echo "PASS  $name"; passed=$((passed + 1))
    else
        echo "FAIL  $name"; sed 's/^/      /' "$tmp/out"; failed=$((failed + 1))
    fi
}
# reject NAME CMD...: CMD must fail (a broken input is caught).
reject() {
    local name=$1; shift
    if "$@" >"$tmp/out" 2>&1; then
        echo "FAIL  $name (accepted)"; sed 's/^/      /' "$tmp/out"; failed=$((failed + 1))
    else
        echo "PASS  $name"; grep -v '^PASS' "$tmp/out" | head -3 | sed 's/^/      /'; passed=$((passed + 1))
    fi
}

if [ ! -x /usr/bin/python3 ] || ! /usr/bin/python3 -c 'import yaml' 2>/dev/null; then
    echo "FAIL  /usr/bin/python3 with python3-yaml is missing (apt-get install python3-yaml)"
    echo "packaging: 0 passed, 1 failed"
    exit 1
fi

# --- Talos extension ---
vflags=()
for role in worker controlplane; do
    vflags+=(--patch "$role" "$EX/$role.patch.yaml" --patch "$role" "$EX/$role-1.14.patch.yaml")
done
dyn=()
[ "$TALOS_ALLOW_DYNAMIC" = 1 ] && dyn=(--allow-dynamic)
release=$(sed -n '1s/^kprism (\([^-)]*\).*/\1/p' packaging/debian/changelog)
if [ ! -x "$TALOS_TREE/$ENTRY" ]; then
    if [ ! -e build/static/kprism ]; then
        echo "SKIP  Talos extension: build/static/kprism does not exist and $TALOS_TREE is not" \
             "assembled (run make talos-extension)"
    else
        echo "FAIL  Talos extension: $TALOS_TREE/$ENTRY missing (run make talos-extension)"
        failed=$((failed + 1))
    fi
else
    check "talos: $TALOS_TREE is a valid extension, the four example patches are right" \
        /usr/bin/python3 $VALIDATE "${dyn[@]}" "${vflags[@]}" "$TALOS_TREE"
    check "talos: manifest version is the release version $release" \
        grep -qx "  version: \"$release\"" "$TALOS_TREE/manifest.yaml"

    # mutant NAME SHELL-SNIPPET: a copy of the tree changed by the snippet (run inside it) must fail.
    mutant() {
        local name=$1 snippet=$2 d="$tmp/mutant"
        chmod -R u+w "$d" 2>/dev/null; rm -rf "$d"; cp -a "$TALOS_TREE" "$d"
        (cd "$d" && eval "$snippet") || { echo "FAIL  talos rejects: $name (setup)"; failed=$((failed + 1)); return; }
        reject "talos rejects: $name" /usr/bin/python3 $VALIDATE "${dyn[@]}" "${vflags[@]}" "$d"
    }
    mutant "world-writable file" "chmod o+w $SPEC"
    mutant "world-writable directory" "chmod o+w rootfs/usr/local/lib/containers"
    mutant "setuid entrypoint" "chmod u+s $ENTRY"
    mutant "file outside /usr/local" "mkdir -p rootfs/etc && echo x > rootfs/etc/kprism.conf"
    mutant "file in /lib/firmware (moved to /usr/lib in Talos 1.10)" "mkdir -p rootfs/lib/firmware && echo x > rootfs/lib/firmware/x"
    mutant "spec file name differs from name" "mv $SPEC rootfs/usr/local/etc/containers/kprism2.yaml"
    mutant "uppercase service name" "sed -i 's/^name: kprism/name: KPrism/' $SPEC && mv $SPEC rootfs/usr/local/etc/containers/KPrism.yaml"
    mutant "kubelet PKI mounted writable" "sed -i '0,/^        - ro\$/{/^        - ro\$/d}' $SPEC"
    mutant "/var/lib/kubelet rbind (every pod's volumes)" \
        "sed -i 's|/var/lib/kubelet/pki|/var/lib/kubelet|; 0,/^        - bind\$/s//        - rbind/' $SPEC"
    mutant "no mount of the host CA" "sed -i '/- source: \/etc\/kubernetes\/pki/,/- ro\$/d' $SPEC"
    mutant "no state directory mount" "sed -i '/- source: \/var\/lib\/kprism\$/,/- rw\$/d' $SPEC"
    mutant "state directory from another host directory" "sed -i 's|source: /var/lib/kprism\$|source: /var/lib|' $SPEC"
    mutant "state directory with rbind" "sed -i '/source: \/var\/lib\/kprism\$/,/- rw\$/s/- bind\$/- rbind/' $SPEC"
    mutant "writable mount at another path" "sed -i 's|destination: /var/lib/kprism\$|destination: /var/lib/kprism-state|' $SPEC"
    mutant "service without restart" "sed -i '/^restart:/d' $SPEC"
    mutant "depends on network connectivity" "sed -i 's/^      - addresses\$/      - addresses\n      - connectivity/' $SPEC"
    mutant "entrypoint not executable" "chmod a-x $ENTRY"
    mutant "entrypoint missing" "rm $ENTRY"
    mutant "unreplaced manifest version" "sed -i 's/^  version: .*/  version: \"@VERSION@\"/' manifest.yaml"
    mutant "manifest version a commit hash" "sed -i 's/^  version: .*/  version: \"45ded62\"/' manifest.yaml"
    mutant "manifest without compatibility" "sed -i '/compatibility:/,\$d' manifest.yaml"
    mutant "manifest version not v1alpha1" "sed -i 's/^version: v1alpha1/version: v1/' manifest.yaml"
    mutant "unknown depends kind" "sed -i 's/^  - time: true/  - clock: true/' $SPEC"
    if [ "$TALOS_ALLOW_DYNAMIC" != 1 ] && [ -x "$KPRISM_BIN" ] && readelf -l "$KPRISM_BIN" 2>/dev/null | grep -q 'program interpreter'; then
        mutant "dynamically linked entrypoint" "cp '$(realpath "$KPRISM_BIN")' $ENTRY"
    fi

    # bad_patch NAME ROLE FILE: the machine config patch FILE must fail for ROLE.
    bad_patch() {
        reject "talos rejects: $1" /usr/bin/python3 $VALIDATE "${dyn[@]}" --patch "$2" "$3" "$TALOS_TREE"
    }
    W=$EX/worker.patch.yaml W14=$EX/worker-1.14.patch.yaml C=$EX/controlplane.patch.yaml
    sed 's|endpoint: https://127.0.0.1:7445|endpoint: https://localhost:7445|' "$W" > "$tmp/p1.yaml"
    bad_patch "worker endpoint localhost, not 127.0.0.1" worker "$tmp/p1.yaml"
    sed '/^    endpoint:/d' "$W" > "$tmp/p2.yaml"
    bad_patch "worker patch without the endpoint" worker "$tmp/p2.yaml"
    bad_patch "control-plane patch with the loopback endpoint" controlplane "$W"
    sed 's/enabled: false/enabled: true/' "$C" > "$tmp/p3.yaml"
    bad_patch "KubePrism left enabled" controlplane "$tmp/p3.yaml"
    sed 's/@sha256:[0-9a-f]*//' "$W" > "$tmp/p4.yaml"
    bad_patch "installer image not pinned by digest" worker "$tmp/p4.yaml"
    sed '/^    image: /d' "$C" > "$tmp/p5.yaml"
    bad_patch "no machine.install.image" controlplane "$tmp/p5.yaml"
    { cat "$W"; printf -- '---\napiVersion: v1alpha1\nkind: KubePrismConfig\n$patch: delete\n'; } > "$tmp/p6.yaml"
    bad_patch "1.14: machine.features.kubePrism and a KubePrismConfig document" worker "$tmp/p6.yaml"
    sed 's/^\$patch: delete$/port: 7445/' "$W14" > "$tmp/p7.yaml"
    bad_patch "1.14: KubePrismConfig kept, not deleted" worker "$tmp/p7.yaml"
    sed '0,/^---$/s//cluster:\n  controlPlane:\n    endpoint: https:\/\/127.0.0.1:7445\n---/' "$W14" > "$tmp/p8.yaml"
    bad_patch "1.14: both cluster endpoints" worker "$tmp/p8.yaml"
    sed 's|ca_file = "/etc/kubernetes/pki/ca.crt"|ca_file = "/usr/local/etc/kprism/ca.crt"|' "$W" > "$tmp/p9.yaml"
    printf '  - mountPath: /usr/local/etc/kprism/ca.crt\n    content: |\n      -----BEGIN CERTIFICATE-----\n' >> "$tmp/p9.yaml"
    bad_patch "cluster CA pasted into the ExtensionServiceConfig (stale after rotate-ca)" worker "$tmp/p9.yaml"
    sed 's|client_cert = "/var/lib/kubelet/pki/|client_cert = "/var/lib/kubelet/|' "$W" > "$tmp/p10.yaml"
    bad_patch "client certificate outside the service's mounts" worker "$tmp/p10.yaml"
    sed '/^      drain_timeout/d' "$W" > "$tmp/p11.yaml"
    bad_patch "drain_timeout left at 30s, over Talos's 10 s kill" worker "$tmp/p11.yaml"
    sed 's/^      # \[discovery\]$/      [discovery]/; s/^      # enabled = true$/      enabled = true\n      snapshot_file = "\/usr\/local\/etc\/kprism\/discovery.json"/' \
        "$W" > "$tmp/p14.yaml"
    bad_patch "discovery on with the snapshot outside the state mount" worker "$tmp/p14.yaml"
    sed 's/^name: kprism/name: other/' "$W" > "$tmp/p12.yaml"
    bad_patch "ExtensionServiceConfig for another service" worker "$tmp/p12.yaml"
    sed 's|mountPath: /usr/local/etc/kprism/kprism.toml|mountPath: /etc/kprism.toml|' "$W" > "$tmp/p13.yaml"
    bad_patch "ExtensionServiceConfig without the --config file" worker "$tmp/p13.yaml"

    # The four patches carry the same ExtensionServiceConfig; its kprism.toml is checked by the
    # tree's own binary.
    check "talos: the four patches carry one and the same ExtensionServiceConfig" /usr/bin/python3 - "$EX" "$tmp/talos.toml" <<'EOF'
import glob, sys, yaml
escs = {}
for p in sorted(glob.glob(sys.argv[1] + "/*.patch.yaml")):
    if p.rsplit("/", 1)[-1].startswith("static-pod-"):
        continue
    escs[p] = [d for d in yaml.safe_load_all(open(p)) if d and d.get("kind") == "ExtensionServiceConfig"]
first = next(iter(escs.values()))
bad = [p for p, e in escs.items() if e != first]
if len(escs) != 4 or len(first) != 1 or bad:
    sys.exit(f"{len(escs)} patches; differing: {bad}")
toml = [f["content"] for f in first[0]["configFiles"] if f["mountPath"].endswith("kprism.toml")][0]
open(sys.argv[2], "w").write(toml)
EOF
    check "talos: ExtensionServiceConfig kprism.toml passes kprism check" "$TALOS_TREE/$ENTRY" check --config "$tmp/talos.toml"
fi

# caught_by RULE CMD...: CMD's output; fails (so `reject` passes) only when CMD fails with
# "FAIL  RULE...", so each broken copy proves its own rule fires.
caught_by() {
    local rule=$1 out rc; shift
    out=$("$@" 2>&1); rc=$?
    printf '%s\n' "$out"
    ! { [ "$rc" != 0 ] && grep -qF "FAIL  $rule" <<<"$out"; }
}
# caught_with TEXT CMD...: the same for validate.py, whose problem lines carry TEXT.
caught_with() {
    local text=$1 out rc; shift
    out=$("$@" 2>&1); rc=$?
    printf '%s\n' "$out"
    ! { [ "$rc" != 0 ] && grep -qF -- "$text" <<<"$out"; }
}

# --- Talos static pod (needs no tree) ---
SW=$EX/static-pod-worker.patch.yaml SW14=$EX/static-pod-worker-1.14.patch.yaml
SC=$EX/static-pod-controlplane.patch.yaml SC14=$EX/static-pod-controlplane-1.14.patch.yaml
check "talos static pod: the four static-pod patches are right" /usr/bin/python3 $VALIDATE \
    --pod-patch worker "$SW" --pod-patch worker "$SW14" --pod-patch controlplane "$SC" --pod-patch controlplane "$SC14"
check "talos static pod: the four patches carry one and the same pod" /usr/bin/python3 - "$tmp/pod-args" "$SW" "$SW14" "$SC" "$SC14" <<'EOF'
import sys, yaml
pods = []
for p in sys.argv[2:]:
    for d in yaml.safe_load_all(open(p)):
        if d and d.get("kind") == "KubeStaticPodConfig":
            pods.append(d["pod"])
        elif d and "kind" not in d:
            pods += (d.get("machine") or {}).get("pods") or []
if len(pods) != 4 or any(p != pods[0] for p in pods):
    sys.exit(f"{len(pods)} pods, not all the same")
open(sys.argv[1], "w").write("\n".join(pods[0]["spec"]["containers"][0]["args"]) + "\n")
EOF
# The pod's flags, checked by the binary the image carries when the tree has the static one.
pod_bin=$KPRISM_BIN
[ -x "$TALOS_TREE/$ENTRY" ] && [ "$TALOS_ALLOW_DYNAMIC" != 1 ] && pod_bin=$TALOS_TREE/$ENTRY
if [ ! -x "$pod_bin" ] || [ ! -s "$tmp/pod-args" ]; then
    echo "FAIL  talos static pod: cannot check the pod's flags ($pod_bin missing or no flags)"; failed=$((failed + 1))
else
    mapfile -t pod_args <"$tmp/pod-args"
    check "talos static pod: the pod's flags pass $pod_bin check" "$pod_bin" check "${pod_args[@]}"
fi
# pod_bad NAME TEXT ROLE FILE [validate.py flags]: the patch FILE must fail for ROLE with TEXT.
pod_bad() {
    local name=$1 text=$2 role=$3 file=$4; shift 4
    reject "talos static pod rejects: $name" caught_with "$text" /usr/bin/python3 $VALIDATE "$@" --pod-patch "$role" "$file"
}
# pod_mutant NAME TEXT ROLE FILE SED-EXPR: FILE changed by SED-EXPR must fail for ROLE with TEXT.
pod_mutant() {
    sed "$5" "$4" >"$tmp/pod-patch.yaml"
    if cmp -s "$4" "$tmp/pod-patch.yaml"; then
        echo "FAIL  talos static pod rejects: $1 (setup: the sed changed nothing)"; failed=$((failed + 1)); return
    fi
    pod_bad "$1" "$2" "$3" "$tmp/pod-patch.yaml"
}
pod_mutant "no host network" "hostNetwork must be true" worker "$SW" 's/hostNetwork: true/hostNetwork: false/'
pod_mutant "image by tag, no digest" "is not pinned by digest" worker "$SW" 's/@sha256:[0-9a-f]*$//'
pod_bad "the placeholder digest with --no-placeholders" "still has the placeholder digest" worker "$SW" --no-placeholders
pod_mutant "liveness probe on the node's address (no host)" "livenessProbe must be httpGet http://127.0.0.1:7446/healthz" \
    worker "$SW" '0,/^ *host: 127.0.0.1$/{//d}'
pod_mutant "readiness probe on the API port" "readinessProbe must be httpGet http://127.0.0.1:7446/readyz" \
    worker "$SW" '/readinessProbe:/,/path:/s/port: 7446/port: 7445/'
pod_mutant "capabilities not dropped" "capabilities must drop ALL" worker "$SW" 's/drop: \["ALL"\]/drop: []/'
pod_mutant "a capability added" "capabilities must drop ALL" worker "$SW" \
    's/^\( *\)drop: \["ALL"\]/\1drop: ["ALL"]\n\1add: ["NET_ADMIN"]/'
pod_mutant "uid 65532 (cannot read kubelet's key or Talos's CA)" "must run as uid and gid 0" worker "$SW" 's/runAsUser: 0/runAsUser: 65532/'
pod_mutant "privilege escalation allowed" "allowPrivilegeEscalation must be false" worker "$SW" \
    's/allowPrivilegeEscalation: false/allowPrivilegeEscalation: true/'
pod_mutant "privileged" "must not be privileged" worker "$SW" 's/privileged: false/privileged: true/'
pod_mutant "writable root filesystem" "readOnlyRootFilesystem must be true" worker "$SW" \
    's/readOnlyRootFilesystem: true/readOnlyRootFilesystem: false/'
pod_mutant "no seccomp profile" "seccompProfile must be RuntimeDefault" worker "$SW" 's/type: RuntimeDefault/type: Unconfined/'
pod_mutant "service account token mounted" "automountServiceAccountToken must be false" worker "$SW" \
    's/automountServiceAccountToken: false/automountServiceAccountToken: true/'
pod_mutant "the kubelet PKI mounted writable" "every volumeMount must be readOnly but the state directory" \
    worker "$SW" '0,/readOnly: true/s//readOnly: false/'
pod_mutant "/var/lib/kubelet mounted (every pod's volumes)" "mounts the host's /var/lib/kubelet:" \
    worker "$SW" 's|path: /var/lib/kubelet/pki$|path: /var/lib/kubelet|'
pod_mutant "the CA as a single file" "the cluster CA Talos keeps current" \
    worker "$SW" 's|path: /etc/kubernetes/pki$|path: /etc/kubernetes/pki/ca.crt|; s/type: Directory$/type: File/'
pod_mutant "the state directory with a hostPath type" "the state directory: mount the host's /var/lib/kprism" \
    worker "$SW" 's|^\( *\)path: /var/lib/kprism$|\1path: /var/lib/kprism\n\1type: DirectoryOrCreate|'
pod_mutant "the state directory read-only" "the state directory: mount the host's /var/lib/kprism" \
    worker "$SW" 's/readOnly: false/readOnly: true/'
pod_mutant "the client certificate outside the mounts" "--client-cert /var/lib/kubelet/kubelet-client-current.pem is not inside a mount" \
    worker "$SW" 's|--client-cert=/var/lib/kubelet/pki/|--client-cert=/var/lib/kubelet/|'
pod_mutant "discovery's snapshot outside the state directory" "--discovery-snapshot-file is not under the writable state mount" \
    worker "$SW" 's|^\( *\)- --log-format=json$|&\n\1- --enable-discovery\n\1- --discovery-snapshot-file=/var/lib/kubelet/pki/discovery.json|'
pod_mutant "KubePrism left enabled" "machine.features.kubePrism.enabled must be false" worker "$SW" 's/enabled: false/enabled: true/'
pod_mutant "1.14: KubePrismConfig kept, not deleted" "the KubePrismConfig document must be" worker "$SW14" 's/^\$patch: delete$/port: 7445/'
pod_mutant "1.14: machine.features.kubePrism as well" "both .machine.features.kubePrism and a KubePrismConfig document" \
    worker "$SW14" '0,/^---$/s//---\nmachine:\n  features:\n    kubePrism:\n      enabled: false\n---/'
pod_mutant "worker endpoint localhost, not 127.0.0.1" "the worker's cluster endpoint must be https://127.0.0.1:7445" \
    worker "$SW" 's|endpoint: https://127.0.0.1:7445|endpoint: https://localhost:7445|'
pod_mutant "1.14: worker without the endpoint" "the worker's cluster endpoint must be https://127.0.0.1:7445" \
    worker "$SW14" 's/^endpoint: .*$/name: other/'
pod_bad "control-plane patch with the loopback endpoint" "a control-plane patch must not set the cluster endpoint" controlplane "$SW"
pod_mutant "no priority class" "priorityClassName must be system-node-critical" worker "$SW" '/priorityClassName:/d'
pod_mutant "a priority other than system-node-critical's" "priority must be 2000001000" worker "$SW" 's/priority: 2000001000/priority: 1000/'
pod_mutant "namespace default (Pod Security admission refuses the mirror pod)" "the pod's namespace must be kube-system" \
    worker "$SW" 's/namespace: kube-system/namespace: default/'
pod_mutant "cluster DNS" "dnsPolicy must be Default" worker "$SW" 's/dnsPolicy: Default/dnsPolicy: ClusterFirstWithHostNet/'
pod_mutant "a memory limit below --max-connections' need" "does not cover --max-connections 1000" worker "$SW" 's/memory: 192Mi/memory: 64Mi/'
pod_mutant "grace period not over the drain" "terminationGracePeriodSeconds 30 is not over the drain timeout" \
    worker "$SW" 's/terminationGracePeriodSeconds: 35/terminationGracePeriodSeconds: 30/'
pod_mutant "a volume that is not a hostPath" "volumes must be hostPath only" \
    worker "$SW" 's|^\( *\)- name: state$|\1- name: scratch\n\1  emptyDir: {}\n&|'
pod_mutant "no pod named kprism" "expected one static pod named kprism" worker "$SW" 's/^        name: kprism$/        name: other/'
pod_mutant "not a Pod" "the static pod must be apiVersion v1, kind Pod" worker "$SW" 's/^\( *\)kind: Pod$/\1kind: Deployment/'
pod_mutant "a second container" "the pod must have exactly one container" worker "$SW" \
    's|^        volumes:$|          - name: sidecar\n            image: registry.example.com/sidecar@sha256:'"$(printf '1%.0s' {1..64})"'\n&|'
pod_mutant "no image" "the container has no image" worker "$SW" '/^ *image: /d'
pod_mutant "1.14: KubeStaticPodConfig without its pod" "the KubeStaticPodConfig document needs apiVersion v1alpha1 and the pod under" \
    worker "$SW14" 's/^pod:$/spec:/'
# The 1.13 patch with the 1.14 file's KubeStaticPodConfig document appended.
{ cat "$SW"; echo ---; sed -n '/^kind: KubeStaticPodConfig$/,$p' "$SW14" | sed '1i apiVersion: v1alpha1'; } >"$tmp/both-forms.yaml"
pod_bad "the pod in .machine.pods and a KubeStaticPodConfig" "the pod both in .machine.pods and in a KubeStaticPodConfig" \
    worker "$tmp/both-forms.yaml"
{ cat "$SW"; printf -- '---\napiVersion: v1alpha1\nkind: ExtensionServiceConfig\nname: kprism\n'; } >"$tmp/with-esc.yaml"
pod_bad "the extension's ExtensionServiceConfig alongside" "must not carry the extension's ExtensionServiceConfig" \
    worker "$tmp/with-esc.yaml"

# --- static pod (kubeadm) ---
POD=packaging/kubernetes/kprism.yaml
POD_TOML=packaging/kubernetes/kprism.toml
CM=tests/packaging/check_manifests.py
check "static pod: packaging/kubernetes/kprism.yaml shape" /usr/bin/python3 $CM
# The documented non-root alternative: uid/gid 65532 with its own certificate under /etc/kprism/pki.
sed 's/runAsNonRoot: false/runAsNonRoot: true/; s/runAsUser: 0/runAsUser: 65532/; s/runAsGroup: 0/runAsGroup: 65532/' \
    $POD > "$tmp/nonroot.yaml"
sed 's|^client_cert = .*|client_cert = "/etc/kprism/pki/kprism-client.crt"|; s|^client_key = .*|client_key = "/etc/kprism/pki/kprism-client.key"|' \
    $POD_TOML > "$tmp/own-cert.toml"
check "static pod: non-root with its own client certificate passes" \
    /usr/bin/python3 $CM --toml "$tmp/own-cert.toml" "$tmp/nonroot.yaml"
# pod_reject NAME RULE SED-EXPR: the manifest changed by SED-EXPR must fail, for RULE.
pod_reject() {
    sed "$3" $POD > "$tmp/pod-mutant.yaml"
    reject "static pod: $1 is rejected" caught_by "$2" /usr/bin/python3 $CM --toml $POD_TOML "$tmp/pod-mutant.yaml"
}
pod_reject "a mount with readOnly: false" "every volumeMount readOnly but the state directory" \
    '0,/readOnly: true/s//readOnly: false/'
pod_reject "the writable mount at another path" "every volumeMount readOnly but the state directory" \
    's|mountPath: /var/lib/kprism$|mountPath: /var/lib/kprism-state|'
pod_reject "the state volume from another host directory" "the state directory: one writable mount" \
    's|path: /var/lib/kprism$|path: /var/lib/kprism-other|'
pod_reject "the state volume not DirectoryOrCreate" "the state directory: one writable mount" \
    '/path: \/var\/lib\/kprism$/{n;s/DirectoryOrCreate/Directory/}'
pod_reject "root with capabilities not dropped" "uid 0 only with no capabilities" 's/drop: \["ALL"\]/drop: []/'
reject "static pod: non-root (65532) with kprism.toml naming kubelet's key is rejected" \
    caught_by "a non-root pod does not name kubelet's root-only key" \
    /usr/bin/python3 $CM --toml $POD_TOML "$tmp/nonroot.yaml"
pod_reject "a memory limit below max_connections' need" "memory limit covers max_connections" 's/memory: 192Mi/memory: 64Mi/'
pod_reject "mounting /etc/kubernetes/pki (the CA's key)" "no mount exposes a host directory" \
    's|/etc/kubernetes/pki/ca.crt$|/etc/kubernetes/pki|; s/type: File$/type: Directory/'

# --- discovery RBAC ---
RBAC=packaging/kubernetes/kprism-discovery-rbac.yaml
CR=tests/packaging/check_rbac.py
check "rbac: $RBAC grants get/list/watch on endpointslices to system:nodes" /usr/bin/python3 $CR
# rbac_reject NAME RULE SED-EXPR: the RBAC file changed by SED-EXPR must fail, for RULE.
rbac_reject() {
    sed "$3" $RBAC > "$tmp/rbac-mutant.yaml"
    reject "rbac: $1 is rejected" caught_by "$2" /usr/bin/python3 $CR "$tmp/rbac-mutant.yaml"
}
rbac_reject "a wildcard verb" "one rule" 's/verbs: \["get", "list", "watch"\]/verbs: ["*"]/'
rbac_reject "an extra verb (create)" "one rule" 's/"watch"\]/"watch", "create"]/'
rbac_reject "endpoints instead of endpointslices" "one rule" 's/resources: \["endpointslices"\]/resources: ["endpoints"]/'
rbac_reject "the core API group" "one rule" 's/apiGroups: \["discovery.k8s.io"\]/apiGroups: [""]/'
rbac_reject "bound to system:authenticated" "one subject: Group system:nodes" 's/name: system:nodes/name: system:authenticated/'
rbac_reject "bound to a User" "one subject: Group system:nodes" 's/kind: Group/kind: User/'
rbac_reject "no SPDX line" "SPDX line first" '1d'

# --- example configurations ---
# Each example names the deploy path it is for, and its certificate paths must be the ones that
# path provides; a copy that disagrees must be caught.
check "examples: each is right for the deploy path it names" /usr/bin/python3 tests/packaging/example_paths.py
sed 's|"/run/kprism/kubelet-client.pem"|"/var/lib/kubelet/pki/kubelet-client-current.pem"|' \
    packaging/examples/three-control-planes.toml > "$tmp/deb-kubelet-key.toml"
reject "examples: a deb example naming the kubelet's root-only key is rejected" \
    /usr/bin/python3 tests/packaging/example_paths.py "$tmp/deb-kubelet-key.toml"
sed '/^# deploy: /d' packaging/examples/three-control-planes.toml > "$tmp/no-path.toml"
reject "examples: an example that names no deploy path is rejected" \
    /usr/bin/python3 tests/packaging/example_paths.py "$tmp/no-path.toml"
if [ ! -x "$KPRISM_BIN" ]; then
    echo "FAIL  $KPRISM_BIN missing (make)"; failed=$((failed + 1))
else
    for f in packaging/examples/*.toml packaging/kubernetes/kprism.toml packaging/kprism.toml.example; do
        check "kprism check --config $f" "$KPRISM_BIN" check --config "$f"
    done
    if [ -x "$TALOS_TREE/$ENTRY" ] && [ "$TALOS_ALLOW_DYNAMIC" != 1 ]; then
        for f in packaging/examples/*.toml packaging/kubernetes/kprism.toml; do
            check "static kprism check --config $f" "$TALOS_TREE/$ENTRY" check --config "$f"
        done
    fi
fi

echo "packaging: $passed passed, $failed failed"
[ "$failed" = 0 ]
