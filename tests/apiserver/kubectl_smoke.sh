#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# kubectl against the Go stand-in directly: get, create, get -w (the watch must show an object
# created after it started), create of a duplicate refused with AlreadyExists, get endpoints.
# Usage: kubectl_smoke.sh PATH/TO/kprism-apiserver. Ends with "kubectl-smoke: N passed, M failed";
# prints "kubectl-smoke: SKIP: ..." and exits 0 without kubectl or openssl.
set -u
BIN=$(realpath "${1:?usage: kubectl_smoke.sh PATH/TO/kprism-apiserver}")
for tool in kubectl openssl; do
    command -v "$tool" >/dev/null || { echo "kubectl-smoke: SKIP: $tool not found"; exit 0; }
done
dir=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$dir"
}
trap cleanup EXIT
passed=0 failed=0
ok() { echo "kubectl-smoke: ok: $1"; passed=$((passed + 1)); }
fail() { echo "kubectl-smoke: FAIL: $1"; failed=$((failed + 1)); }

cd "$dir" || exit 1
gen() { # NAME SUBJECT EXTENSIONS
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null &&
        printf '%s\n' "$3" >"$1.ext" &&
        openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 1 -extfile "$1.ext" 2>/dev/null
}
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.crt -subj /CN=smoke-ca -days 1 2>/dev/null &&
    gen srv /CN=kube-apiserver $'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth' &&
    gen adm "/O=system:masters/CN=smoke-admin" 'extendedKeyUsage=clientAuth' || { echo "kubectl-smoke: FAIL: certificates"; exit 1; }

"$BIN" store --listen "unix:$dir/store.sock" 2>store.log &
pids+=($!)
"$BIN" serve --store "unix:$dir/store.sock" --tls-cert-file srv.crt --tls-private-key-file srv.key \
    --client-ca-file ca.crt --bind-address 127.0.0.1 --secure-port 0 2>apiserver.log &
pids+=($!)
port=
for _ in $(seq 100); do
    port=$(sed -n 's/.*event=listening address=127\.0\.0\.1:\([0-9]*\).*/\1/p' apiserver.log)
    [ -n "$port" ] && break
    sleep 0.1
done
[ -n "$port" ] || { echo "kubectl-smoke: FAIL: the stand-in did not start"; cat store.log apiserver.log; exit 1; }

cat >kubeconfig <<EOF
apiVersion: v1
kind: Config
clusters: [{name: smoke, cluster: {server: "https://127.0.0.1:$port", certificate-authority: $dir/ca.crt}}]
users: [{name: admin, user: {client-certificate: $dir/adm.crt, client-key: $dir/adm.key}}]
contexts: [{name: smoke, context: {cluster: smoke, user: admin}}]
current-context: smoke
EOF
export KUBECONFIG=$dir/kubeconfig
k() { kubectl --request-timeout=10s "$@"; }

out=$(k get configmaps 2>&1) && [[ $out == "No resources found in default namespace." ]] &&
    ok "get configmaps: none yet" || fail "get configmaps: $out"
out=$(k create configmap smoke-a --from-literal=a=b 2>&1) && [[ $out == "configmap/smoke-a created" ]] &&
    ok "create configmap" || fail "create configmap: $out"
out=$(k get configmap smoke-a -o jsonpath='{.data.a} {.metadata.resourceVersion}' 2>&1) && [[ $out =~ ^b\ [0-9]+$ ]] &&
    ok "get configmap: data and resourceVersion ($out)" || fail "get configmap: $out"
out=$(k create configmap smoke-a --from-literal=a=b 2>&1)
[[ $out == *'configmaps "smoke-a" already exists'* ]] && ok "duplicate create refused" || fail "duplicate create: $out"

timeout 6 kubectl get configmaps -w >watch.out 2>watch.err &
wpid=$!
for _ in $(seq 50); do grep -q smoke-a watch.out && break; sleep 0.1; done
k create configmap smoke-b --from-literal=c=d >/dev/null 2>&1
for _ in $(seq 50); do grep -q smoke-b watch.out && break; sleep 0.1; done
kill "$wpid" 2>/dev/null; wait "$wpid" 2>/dev/null
if grep -q '^smoke-a ' watch.out && grep -q '^smoke-b ' watch.out; then ok "get -w: listed smoke-a, then saw smoke-b created"
else fail "get -w: $(cat watch.out watch.err)"; fi

out=$(k get endpoints kubernetes -o jsonpath='{.subsets[0].addresses[0].ip}:{.subsets[0].ports[0].port}' 2>&1)
[[ $out == "127.0.0.1:$port" ]] && ok "get endpoints kubernetes ($out)" || fail "get endpoints: $out"
out=$(k get --raw /readyz 2>&1) && [[ $out == ok ]] && ok "get --raw /readyz" || fail "readyz: $out"

echo "kubectl-smoke: $passed passed, $failed failed"
[ "$failed" = 0 ]
