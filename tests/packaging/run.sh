#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Packaging checks (`make test-packaging`):
#  - the assembled Talos extension tree (build/talos-extension, `make talos-extension`) passes
#    talos-extension/validate.py, with the ExtensionServiceConfig example, and broken copies of it
#    fail (world-writable, setuid, a file outside /usr/local, name mismatch, writable kubelet mount,
#    entrypoint not executable, dynamically linked entrypoint, unreplaced version);
#  - the TOML inside the ExtensionServiceConfig example passes `kprism check` with the tree's binary;
#  - packaging/kubernetes/kprism.yaml passes tests/packaging/check_manifests.py, a broken copy fails;
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
ESC=talos-extension/examples/extension-service-config.yaml
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
vflags=(--service-config "$ESC")
[ "$TALOS_ALLOW_DYNAMIC" = 1 ] && vflags+=(--allow-dynamic)
if [ ! -x "$TALOS_TREE/$ENTRY" ]; then
    if [ ! -e build/static/kprism ]; then
        echo "SKIP  Talos extension: build/static/kprism does not exist and $TALOS_TREE is not" \
             "assembled (run make talos-extension)"
    else
        echo "FAIL  Talos extension: $TALOS_TREE/$ENTRY missing (run make talos-extension)"
        failed=$((failed + 1))
    fi
else
    check "talos: $TALOS_TREE is a valid extension" /usr/bin/python3 $VALIDATE "${vflags[@]}" "$TALOS_TREE"

    # mutant NAME SHELL-SNIPPET: a copy of the tree changed by the snippet (run inside it) must fail.
    mutant() {
        local name=$1 snippet=$2 d="$tmp/mutant"
        chmod -R u+w "$d" 2>/dev/null; rm -rf "$d"; cp -a "$TALOS_TREE" "$d"
        (cd "$d" && eval "$snippet") || { echo "FAIL  talos rejects: $name (setup)"; failed=$((failed + 1)); return; }
        reject "talos rejects: $name" /usr/bin/python3 $VALIDATE "${vflags[@]}" "$d"
    }
    mutant "world-writable file" "chmod o+w $SPEC"
    mutant "world-writable directory" "chmod o+w rootfs/usr/local/lib/containers"
    mutant "setuid entrypoint" "chmod u+s $ENTRY"
    mutant "file outside /usr/local" "mkdir -p rootfs/etc && echo x > rootfs/etc/kprism.conf"
    mutant "spec file name differs from name" "mv $SPEC rootfs/usr/local/etc/containers/kprism2.yaml"
    mutant "uppercase service name" "sed -i 's/^name: kprism/name: KPrism/' $SPEC && mv $SPEC rootfs/usr/local/etc/containers/KPrism.yaml"
    mutant "/var/lib/kubelet mounted writable" "sed -i '/^        - ro\$/d' $SPEC"
    mutant "/var/lib/kubelet bind without rbind" "sed -i 's/^        - rbind\$/        - bind/' $SPEC"
    mutant "entrypoint not executable" "chmod a-x $ENTRY"
    mutant "entrypoint missing" "rm $ENTRY"
    mutant "unreplaced manifest version" "sed -i 's/^  version: .*/  version: \"@VERSION@\"/' manifest.yaml"
    mutant "manifest without compatibility" "sed -i '/compatibility:/,\$d' manifest.yaml"
    mutant "manifest version not v1alpha1" "sed -i 's/^version: v1alpha1/version: v1/' manifest.yaml"
    mutant "unknown depends kind" "sed -i 's/^  - time: true/  - clock: true/' $SPEC"
    if [ "$TALOS_ALLOW_DYNAMIC" != 1 ] && [ -x "$KPRISM_BIN" ] && readelf -l "$KPRISM_BIN" 2>/dev/null | grep -q 'program interpreter'; then
        mutant "dynamically linked entrypoint" "cp '$(realpath "$KPRISM_BIN")' $ENTRY"
    fi

    sed 's/^name: kprism/name: other/' "$ESC" > "$tmp/esc-name.yaml"
    reject "talos rejects: ExtensionServiceConfig for another service" \
        /usr/bin/python3 $VALIDATE --service-config "$tmp/esc-name.yaml" "${vflags[@]:2}" "$TALOS_TREE"
    sed 's|mountPath: /usr/local/etc/kprism/kprism.toml|mountPath: /etc/kprism.toml|' "$ESC" > "$tmp/esc-path.yaml"
    reject "talos rejects: ExtensionServiceConfig without the --config file" \
        /usr/bin/python3 $VALIDATE --service-config "$tmp/esc-path.yaml" "${vflags[@]:2}" "$TALOS_TREE"

    # The configuration delivered by the ExtensionServiceConfig, checked by the tree's own binary
    # (the static build also rejects hostname endpoints).
    /usr/bin/python3 - "$ESC" "$tmp/talos.toml" <<'EOF'
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
toml = [f["content"] for f in doc["configFiles"] if f["mountPath"].endswith("kprism.toml")][0]
open(sys.argv[2], "w").write(toml)
EOF
    check "talos: ExtensionServiceConfig kprism.toml passes kprism check" "$TALOS_TREE/$ENTRY" check --config "$tmp/talos.toml"
fi

# --- static pod ---
check "static pod: packaging/kubernetes/kprism.yaml shape" /usr/bin/python3 tests/packaging/check_manifests.py
sed 's/readOnly: true/readOnly: false/; s/runAsNonRoot: true/runAsNonRoot: false/' \
    packaging/kubernetes/kprism.yaml > "$tmp/kprism.yaml"
reject "static pod: a writable mount / root copy is rejected" /usr/bin/python3 tests/packaging/check_manifests.py "$tmp/kprism.yaml"

# --- example configurations ---
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
