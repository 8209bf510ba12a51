#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The deploy artefacts run under real container runtimes (`make test-runtime`): the static pods under podman, the Talos extension under runc.
#
# A. `podman kube play` of the kubeadm static pod (packaging/kubernetes/kprism.yaml) and of the
#    pod in the Talos patch's machine.pods (talos-extension/examples/static-pod-worker.patch.yaml),
#    from the image build/images/kprism.oci.tar, each with its own securityContext, mounts and
#    probes. The only edits (tests/runtime/pod.py): the image reference, the hostPath roots moved
#    into a directory laid out like the node's / ($R/host), and the endpoints kprism reads (the
#    kubeadm pod's kprism.toml in that host directory, the Talos pod's --endpoints flag) pointed at
#    Go stand-in apiservers (build/kprism-apiserver) on 127.0.0.2:6443 and 127.0.0.3:6443.
# B. The Talos extension under `runc run`, from the rootfs and the service spec inside
#    build/images/kprism-talos.oci.tar, with the OCI spec Talos would give it
#    (tests/runtime/talos_spec.py, which cites the Talos sources it follows) and the
#    ExtensionServiceConfig of talos-extension/examples/worker.patch.yaml.
# Each run is checked, with polls and deadlines: kprism runs and loads kubelet's certificate from
# the mount; the container has what the manifest asks (no capabilities or Talos's set, no new
# privileges, seccomp, read-only root, read-only mounts but the state directory); /status shows
# both upstreams up and the credentials accepted; kubectl (the kubelet's certificate) gets /api
# through kprism on 127.0.0.1:7445; the liveness and readiness probes answer as the manifest
# states them; a rotated kubelet certificate (a new file, the symlink re-pointed, as kubelet does)
# shows in /status and the log.
# C. Broken copies of the manifests and of the service spec, each of which must make the run fail
#    at the check named for it, with the reason expected.
#
# The whole test runs in a network namespace of its own (unshare --net): the pods and the
# extension use the host network, as the manifests say, and that is this namespace's loopback,
# so the manifests' ports 7445/7446 are used unchanged and nothing on the machine is touched.
# podman uses a private --root/--runroot and CONTAINERS_CONF under the temporary directory.
#
# What podman kube play (4.3) does not do of the manifests, left in them and not checked here:
# priorityClassName/priority (no scheduler or eviction), dnsPolicy (a host-network pod takes the
# host's resolv.conf anyway), terminationGracePeriodSeconds (podman's stop timeout is its own),
# resources.requests, and the probes' timing: podman turns livenessProbe into a healthcheck whose
# command (curl in the container) a FROM-scratch image cannot run, and ignores readinessProbe. So
# each probe's httpGet is run from the host, as kubelet's prober runs it, on the host/port/path
# the manifest states, and the healthcheck podman derived is checked to name that same URL.
#
# Needs root, podman, runc, openssl, curl, kubectl or python3-kubernetes (make deps), build/images/*.oci.tar (make
# images) and build/kprism-apiserver. Ends with "runtime: N passed, M failed".
set -u
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
if [ "${KPRISM_RUNTIME_NETNS:-}" != 1 ]; then
    [ "$(id -u)" = 0 ] || { echo "runtime: needs root (podman storage, runc, a network namespace)"; exit 1; }
    for t in podman runc openssl curl unshare ip; do
        command -v "$t" >/dev/null || { echo "runtime: $t not installed (make deps)"; exit 1; }
    done
    for f in build/images/kprism.oci.tar build/images/kprism-talos.oci.tar build/kprism-apiserver; do
        [ -e "$f" ] || { echo "runtime: $f missing (make images, make build/kprism-apiserver)"; exit 1; }
    done
    exec env KPRISM_RUNTIME_NETNS=1 unshare --net -- "$0" "$@"
fi
ip link set lo up || { echo "runtime: cannot bring up loopback"; exit 1; }

T=$(mktemp -d /tmp/kprism-runtime.XXXXXX)
chmod 0755 "$T"
APISERVER=$ROOT/build/kprism-apiserver
IMAGE=localhost/kprism:runtime-test
UP_DEADLINE=${UP_DEADLINE:-20}
export CONTAINERS_CONF=$T/containers.conf
cat >"$CONTAINERS_CONF" <<'EOF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=1024:1024"]
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
P=(podman --root "$T/podman/root" --runroot "$T/podman/run" --storage-driver vfs)
RUNC=(runc --root "$T/runc")
pids=() runc_ids=()
# The cgroups runc makes for the extension (under kprism-runtime-test) and podman's cgroupfs
# parent, libpod_parent, if it was not there before: removed at exit when empty.
had_libpod_parent=0; [ -d /sys/fs/cgroup/memory/libpod_parent ] || [ -d /sys/fs/cgroup/libpod_parent ] && had_libpod_parent=1
cleanup() {
    "${P[@]}" pod rm -a -f -t 0 >/dev/null 2>&1
    for id in "${runc_ids[@]}"; do "${RUNC[@]}" delete -f "$id" >/dev/null 2>&1; done
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    "${P[@]}" system reset -f >/dev/null 2>&1
    rm -rf "$T"
    rmdir /sys/fs/cgroup/kprism-runtime-test /sys/fs/cgroup/*/kprism-runtime-test 2>/dev/null
    [ "$had_libpod_parent" = 1 ] || rmdir /sys/fs/cgroup/libpod_parent /sys/fs/cgroup/*/libpod_parent 2>/dev/null
    true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

passed=0 failed=0
ok() { echo "runtime: ok: $*"; passed=$((passed + 1)); }
bad() { echo "runtime: FAIL: $*"; failed=$((failed + 1)); }

# poll SECONDS CMD...: CMD until it succeeds, every 0.25 s, at most SECONDS; its last output.
# CMD exits 7 for a failure that waiting cannot mend: the poll ends there.
poll() {
    local limit=$1 end out rc; shift
    end=$((SECONDS + limit))
    while :; do
        out=$("$@" 2>&1); rc=$?
        [ "$rc" = 0 ] && { printf '%s' "$out"; return 0; }
        [ "$rc" = 7 ] || [ "$SECONDS" -ge "$end" ] && { printf '%s' "$out"; return 1; }
        sleep 0.25
    done
}

# --- certificates and the stand-in apiservers ---------------------------------------------
cd "$T" || exit 1
gen() { # NAME SUBJECT EXTENSIONS DAYS
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null &&
        printf '%b\n' "$3" >"$1.ext" &&
        openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days "$4" -extfile "$1.ext" 2>/dev/null
}
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.crt -subj /CN=runtime-ca -days 2 2>/dev/null &&
    gen srv /CN=kube-apiserver 'subjectAltName=IP:127.0.0.1,IP:127.0.0.2,IP:127.0.0.3\nextendedKeyUsage=serverAuth' 1 &&
    gen kubelet1 "/O=system:nodes/CN=system:node:node-a" 'extendedKeyUsage=clientAuth' 1 &&
    gen kubelet2 "/O=system:nodes/CN=system:node:node-a" 'extendedKeyUsage=clientAuth' 2 ||
    { echo "runtime: FAIL: certificates"; exit 1; }
cat kubelet1.crt kubelet1.key >kubelet1.pem && cat kubelet2.crt kubelet2.key >kubelet2.pem
expiry2=$(date -d "$(openssl x509 -in kubelet2.crt -noout -enddate | cut -d= -f2)" +%s)
cat >kubeconfig <<EOF
apiVersion: v1
kind: Config
clusters: [{name: kprism, cluster: {server: "https://127.0.0.1:7445", certificate-authority: $T/ca.crt}}]
users: [{name: kubelet, user: {client-certificate: $T/kubelet1.crt, client-key: $T/kubelet1.key}}]
contexts: [{name: kprism, context: {cluster: kprism, user: kubelet}}]
current-context: kprism
EOF
ip addr add 127.0.0.2/8 dev lo 2>/dev/null; ip addr add 127.0.0.3/8 dev lo 2>/dev/null
"$APISERVER" store --listen "unix:$T/store.sock" 2>store.log &
pids+=($!)
for n in 2 3; do
    "$APISERVER" serve --store "unix:$T/store.sock" --tls-cert-file srv.crt --tls-private-key-file srv.key \
        --client-ca-file ca.crt --bind-address "127.0.0.$n" --secure-port 6443 --name "apiserver-$n" 2>"apiserver-$n.log" &
    pids+=($!)
done
ENDPOINTS=127.0.0.2:6443,127.0.0.3:6443
KUBECTL_NAME="kubectl get --raw /api"; command -v kubectl >/dev/null || KUBECTL_NAME="GET /api (python3-kubernetes; no kubectl)"
if poll 20 grep -q 'event=listening' apiserver-2.log >/dev/null && poll 20 grep -q 'event=listening' apiserver-3.log >/dev/null; then
    ok "two Go stand-in apiservers on $ENDPOINTS"
else
    bad "stand-ins did not start: $(tail -3 store.log apiserver-*.log)"; echo "runtime: $passed passed, $failed failed"; exit 1
fi
cd "$ROOT" || exit 1

# --- images ------------------------------------------------------------------------------------
if out=$("${P[@]}" load -q -i build/images/kprism.oci.tar 2>&1) && id=$(sed -n 's/^Loaded image[^:]*: *//p' <<<"$out" | tail -1) &&
        "${P[@]}" tag "$id" "$IMAGE" >/dev/null 2>&1; then
    ok "podman load build/images/kprism.oci.tar as $IMAGE"
else
    bad "podman load: $out"
fi
mkdir -p "$T/ext"
# The archive holds an image index naming each platform (tests/packaging/images.sh): this
# machine's image is the one runc runs.
if python3 - build/images/kprism-talos.oci.tar "$T/ext" <<'PY'
import io, json, platform, sys, tarfile
arc, dst = sys.argv[1], sys.argv[2]
arch = {"x86_64": "amd64", "aarch64": "arm64"}[platform.machine()]
with tarfile.open(arc) as t:
    blob = lambda d: t.extractfile("blobs/" + d.replace(":", "/")).read()
    top = json.load(t.extractfile("index.json"))["manifests"][0]
    doc = json.loads(blob(top["digest"]))
    if "manifests" in doc:  # an index: this platform's image
        ours = [m for m in doc["manifests"] if m["platform"]["architecture"] == arch]
        if len(ours) != 1:
            sys.exit(f"{arc}: {len(ours)} images for linux/{arch}")
        doc = json.loads(blob(ours[0]["digest"]))
    manifest = doc
    for layer in manifest["layers"]:
        with tarfile.open(fileobj=io.BytesIO(blob(layer["digest"]))) as lt:
            lt.extractall(dst, numeric_owner=True)
PY
then ok "unpacked build/images/kprism-talos.oci.tar"; else bad "unpacking the extension image"; fi
EXT_SPEC=$T/ext/rootfs/usr/local/etc/containers/kprism.yaml
EXT_ROOTFS=$T/ext/rootfs/usr/local/lib/containers/kprism

# --- the simulated node ----------------------------------------------------------------------------
# mkhost DIR kubeadm|talos: the node's / as the manifests expect it. kubelet's certificate as
# kubelet keeps it: kubelet-client-DATE.pem (certificate and key, 0600) and the
# kubelet-client-current.pem symlink to its absolute path. The CA: kubeadm's ca.crt 0644;
# Talos's 0400 in a 0700 directory (KubeletServiceController writePKI).
mkhost() {
    local h=$1
    mkdir -p "$h/var/lib/kubelet/pki" "$h/etc/kubernetes/pki" "$h/etc/kprism" &&
        install -m 0600 "$T/kubelet1.pem" "$h/var/lib/kubelet/pki/kubelet-client-2026-12-05-06-00-00.pem" &&
        ln -s /var/lib/kubelet/pki/kubelet-client-2026-12-05-06-00-00.pem "$h/var/lib/kubelet/pki/kubelet-client-current.pem" || return 1
    if [ "$2" = talos ]; then
        # The Talos pod's state volume has no hostPath type: containerd creates a missing
        # directory on the node, podman refuses it, so it is made here as containerd would.
        install -d -m 0755 "$h/var/lib/kprism" &&
        install -m 0400 "$T/ca.crt" "$h/etc/kubernetes/pki/ca.crt" && chmod 0700 "$h/etc/kubernetes/pki"
    else
        install -m 0644 "$T/ca.crt" "$h/etc/kubernetes/pki/ca.crt" &&
            sed "s|^endpoints = .*|endpoints = [\"${ENDPOINTS//,/\", \"}\"]|" packaging/kubernetes/kprism.toml >"$h/etc/kprism/kprism.toml"
    fi
}
# rotate DIR: kubelet's rotation: a new timestamped file, the symlink re-pointed by a rename.
rotate() {
    install -m 0600 "$T/kubelet2.pem" "$1/var/lib/kubelet/pki/kubelet-client-2026-12-06-06-00-00.pem" &&
        ln -s /var/lib/kubelet/pki/kubelet-client-2026-12-06-06-00-00.pem "$1/var/lib/kubelet/pki/.current.tmp" &&
        mv -T "$1/var/lib/kubelet/pki/.current.tmp" "$1/var/lib/kubelet/pki/kubelet-client-current.pem"
}

# --- the checks --------------------------------------------------------------------------------------
# Each check prints what it saw on failure. LOGCMD prints kprism's log for the run.
status() { curl -fsS --max-time 2 http://127.0.0.1:7446/status; }
c_upstreams_up() {
    local s
    s=$(status) || return 1
    python3 -c '
import json, sys
s = json.loads(sys.argv[1]); ups = s["upstreams"]; want = set(sys.argv[2].split(","))
bad = [f"{u['"'address'"']} {u['"'state'"']} {u.get('"'last_error'"')}" for u in ups if u["state"] != "up"]
if {u["address"] for u in ups} != want or bad or s["credentials"]["state"] != "ok":
    sys.exit("upstreams: %s; credentials %s" % (bad or [u["address"] for u in ups], s["credentials"]))' "$s" "$ENDPOINTS"
}
# kubectl where it is installed (it is not in Debian 12's archive), else the same GET /api with
# the Kubernetes Python client (python3-kubernetes, make deps) and the same kubeconfig.
c_kubectl() {
    local out
    if command -v kubectl >/dev/null; then
        out=$(kubectl --kubeconfig "$T/kubeconfig" --request-timeout=5s get --raw /api 2>&1) || { echo "$out"; return 1; }
    else
        out=$(/usr/bin/python3 -c 'import sys
from kubernetes import client, config
config.load_kube_config(sys.argv[1])
r = client.ApiClient().call_api("/api", "GET", auth_settings=["BearerToken"], _preload_content=False, _request_timeout=5)[0]
print(r.data.decode())' "$T/kubeconfig" 2>&1) ||
            { echo "$out"; return 1; }
    fi
    grep -q '"kind": *"APIVersions"' <<<"$out" || { echo "not APIVersions: $out"; return 1; }
}
c_rotated() {
    local s
    s=$(status) || return 1
    python3 -c 'import json,sys; c=json.loads(sys.argv[1])["credentials"]; sys.exit(0 if c["not_after_unix"]==int(sys.argv[2]) and c["state"]=="ok" else "credentials: %s" % c)' "$s" "$expiry2" &&
        $LOGCMD 2>&1 | grep -q 'client certificate rotated'
}
# c_http HOST PORT PATH: the probe as kubelet's prober runs it: HTTP GET, success on 200-399.
c_http() {
    local code
    code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 2 "http://$1:$2$3" 2>&1)
    [[ $code =~ ^[23][0-9][0-9]$ ]] || { echo "GET http://$1:$2$3: $code"; return 1; }
}
# c_secctx PID CAPEFF ROOTRW: the process's capabilities, no_new_privs, seccomp, uid, the root's
# and the mounts' read-only flags (only /var/lib/kprism writable).
c_secctx() {
    local st=/proc/$1/status mi=/proc/$1/mountinfo e=() m
    [ "$(awk '/^CapEff:/{print $2}' "$st")" = "$2" ] || e+=("CapEff $(awk '/^CapEff:/{print $2}' "$st"), want $2")
    [ "$(awk '/^NoNewPrivs:/{print $2}' "$st")" = 1 ] || e+=("no_new_privs not set")
    [ "$(awk '/^Seccomp:/{print $2}' "$st")" = 2 ] || e+=("no seccomp filter")
    [ "$(awk '/^Uid:/{print $2}' "$st")" = 0 ] || e+=("uid $(awk '/^Uid:/{print $2}' "$st"), want 0")
    for m in / /var/lib/kubelet/pki /etc/kubernetes/pki /var/lib/kprism; do
        local opts want=ro
        opts=$(awk -v m="$m" '$5==m || ($5 ~ "^"m"/" && m=="/etc/kubernetes/pki") {print $6}' "$mi" | tail -1)
        [ "$m" = /var/lib/kprism ] && want=rw
        [ -n "$opts" ] || { e+=("nothing mounted at $m"); continue; }
        [[ ,$opts, == *,$want,* ]] || e+=("$m mounted $opts, want $want")
    done
    [ "${#e[@]}" = 0 ] || { printf '%s\n' "${e[@]}"; return 1; }
}

# step NAME CMD...: in a good run an ok/FAIL line; in a broken run (EXPECT set) the first failure
# ends the run and is kept in REASON with kprism's last log lines.
step() {
    local name=$1 out; shift
    if out=$("$@" 2>&1); then
        [ -z "$EXPECT" ] && ok "$LABEL: $name"
        return 0
    fi
    REASON="$name: $(tail -c 400 <<<"$out" | tr '\n' ' ') | log: $($LOGCMD 2>&1 | grep -E 'error|warn|paused|cannot|denied|rejected' | tail -2 | tr '\n' ' ')"
    [ -z "$EXPECT" ] && bad "$LABEL: $REASON"
    return 1
}

# c_loaded: kprism logged that it loaded the certificate. The files are in place before kprism
# starts, so "health checks paused" (a file missing) or "cannot load TLS files" at start is final.
c_loaded() {
    local log
    log=$($LOGCMD 2>&1)
    grep -q 'client certificate loaded' <<<"$log" && return 0
    grep -E 'health checks paused|cannot load TLS files' <<<"$log" | head -1
    grep -qE 'health checks paused|cannot load TLS files' <<<"$log" && return 7
    return 1
}
c_pod_running() {
    local st
    st=$("${P[@]}" inspect -f '{{.State.Status}}' kprism-kprism 2>&1)
    [ "$st" = running ] || { echo "container $st"; [ "$st" = exited ] && return 7; return 1; }
    c_loaded
}
# rm_pod: the pod removed, and the empty cgroups podman (cgroupfs) leaves of it in the
# name=systemd and unified hierarchies.
rm_pod() {
    local id
    id=$("${P[@]}" pod inspect -f '{{.ID}}' kprism 2>/dev/null)
    "${P[@]}" pod rm -f -t 0 kprism >/dev/null 2>&1
    [ -n "$id" ] && find /sys/fs/cgroup/libpod_parent/"$id" /sys/fs/cgroup/*/libpod_parent/"$id" -depth -type d -exec rmdir {} + 2>/dev/null
    true
}
# run_pod SOURCE FLAVOUR: the static pod under podman kube play, the checks in order.
podlog() { "${P[@]}" logs kprism-kprism; }
run_pod() {
    local src=$1 flavour=$2 R pid eps='' hc host port path
    R=$(mktemp -d "$T/pod.XXXX"); mkhost "$R/host" "$flavour" || { REASON="host layout"; return 1; }
    [ "$flavour" = talos ] && eps=$ENDPOINTS
    LOGCMD=podlog
    step "the manifest prepared (image, hostPath roots, endpoints)" \
        sh -c 'python3 tests/runtime/pod.py play "$1" "$2" "$3" "$4" >"$5"' sh "$src" "$R/host" "$IMAGE" "$eps" "$R/pod.yaml" || return 1
    step "podman kube play" "${P[@]}" kube play --start "$R/pod.yaml" || { rm_pod; return 1; }
    step "kprism runs and loads kubelet's certificate from the mount" poll "$UP_DEADLINE" c_pod_running &&
    step "/status: both upstreams up, the kubelet's certificate accepted" poll "$UP_DEADLINE" c_upstreams_up &&
    step "$KUBECTL_NAME through kprism on 127.0.0.1:7445 with the kubelet's certificate" poll 10 c_kubectl &&
    pid=$("${P[@]}" inspect -f '{{.State.Pid}}' kprism-kprism) &&
    step "the manifest's securityContext: no capabilities, no_new_privs, seccomp, uid 0, read-only root and mounts but the state directory" \
        c_secctx "$pid" 0000000000000000 &&
    read -r host port path < <(python3 tests/runtime/pod.py probe "$R/pod.yaml" liveness) &&
    hc=$("${P[@]}" inspect -f '{{json .Config.Healthcheck.Test}}' kprism-kprism) &&
    step "livenessProbe: podman's healthcheck names http://$host:$port$path" grep -qF "://$host:$port$path" <<<"$hc" &&
    { [ -n "$EXPECT" ] || echo "runtime: note: podman healthcheck run: $("${P[@]}" healthcheck run kprism-kprism 2>&1 | head -1);" \
        "$("${P[@]}" inspect -f '{{range .State.Health.Log}}{{.Output}}{{end}}' kprism-kprism 2>&1 | tail -c 160 | tr '\n' ' ')" \
        "(its command runs inside the container; a FROM scratch image has no shell or curl)"; } &&
    step "livenessProbe GET http://$host:$port$path answers" poll 10 c_http "$host" "$port" "$path" &&
    read -r host port path < <(python3 tests/runtime/pod.py probe "$R/pod.yaml" readiness) &&
    step "readinessProbe GET http://$host:$port$path answers" poll 10 c_http "$host" "$port" "$path" &&
    rotate "$R/host" &&
    step "a rotated kubelet certificate is picked up (/status expiry, log)" poll "$UP_DEADLINE" c_rotated
    local rc=$?
    rm_pod
    return $rc
}

c_ext_running() {
    "${RUNC[@]}" state "$1" | grep -q '"status": "running"' || { "${RUNC[@]}" state "$1"; return 1; }
    c_loaded
}
# run_ext SPEC: the Talos extension under runc, with talos_spec.py's config.json.
extlog() { cat "$EXTLOGFILE"; }
run_ext() {
    local spec=$1 R id pid caps
    R=$(mktemp -d "$T/ext.XXXX"); mkhost "$R/host" talos || { REASON="host layout"; return 1; }
    cp -a "$EXT_ROOTFS" "$R/rootfs"
    EXTLOGFILE=$R/kprism.log; : >"$EXTLOGFILE"; LOGCMD=extlog
    id=ext-kprism-${R##*.}
    step "config.json from the service spec as Talos builds it; depends met" \
        python3 tests/runtime/talos_spec.py --service "$spec" --patch talos-extension/examples/worker.patch.yaml \
        --host "$R/host" --rootfs "$R/rootfs" --bundle "$R/bundle" --endpoints "$ENDPOINTS" --cgroup "/kprism-runtime-test/$id" || return 1
    runc_ids+=("$id")
    step "runc run -d ($id)" sh -c '"$@" </dev/null >"$0" 2>&1' "$EXTLOGFILE" "${RUNC[@]}" run -d -b "$R/bundle" "$id" || return 1
    step "kprism runs and loads kubelet's certificate from the mount" poll "$UP_DEADLINE" c_ext_running "$id" &&
    pid=$("${RUNC[@]}" state "$id" | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])') &&
    caps=$(python3 -c 'import json,sys,re
caps = json.load(open(sys.argv[1]))["process"]["capabilities"]["effective"]
names = {m.group(1): int(m.group(2)) for m in re.finditer(r"#define (CAP_[A-Z_]+)\s+(\d+)\n", open("/usr/include/linux/capability.h").read())}
print("%016x" % sum(1 << names[c] for c in caps))' "$R/bundle/config.json") &&
    step "/status: both upstreams up, the kubelet's certificate accepted" poll "$UP_DEADLINE" c_upstreams_up &&
    step "$KUBECTL_NAME through kprism on 127.0.0.1:7445 with the kubelet's certificate" poll 10 c_kubectl &&
    step "Talos's security: its capability set, no_new_privs, seccomp, uid 0, read-only root and mounts but the state directory" \
        c_secctx "$pid" "$caps" &&
    step "admin endpoint: GET /healthz and /readyz on 127.0.0.1:7446" \
        poll 10 sh -c 'curl -fsS --max-time 2 http://127.0.0.1:7446/healthz && curl -fsS --max-time 2 http://127.0.0.1:7446/readyz' &&
    rotate "$R/host" &&
    step "a rotated kubelet certificate is picked up (/status expiry, log)" poll "$UP_DEADLINE" c_rotated
    local rc=$?
    "${RUNC[@]}" delete -f "$id" >/dev/null 2>&1
    return $rc
}

# good LABEL FUNC ARGS...: a run whose every check must pass.
good() { LABEL=$1 EXPECT='' REASON=''; shift; "$@" || true; }
# broken LABEL 'STEP REGEX' 'REASON REGEX' FUNC ARGS...: the run must fail, at the step whose
# name matches the first regex, with a reason matching the second.
broken() {
    local label=$1 want_step=$2 want_reason=$3; shift 3
    LABEL=$label EXPECT=1 REASON=''
    if "$@"; then bad "broken copy: $label: the run passed"
    elif [[ $REASON =~ $want_step ]] && [[ $REASON =~ $want_reason ]]; then ok "broken copy: $label: fails: $(cut -c1-200 <<<"$REASON")"
    else bad "broken copy: $label: failed for another reason: $REASON"; fi
}

# --- A. the static pods ------------------------------------------------------------------------------
t0=$SECONDS
good "kubeadm pod" run_pod packaging/kubernetes/kprism.yaml kubeadm
good "Talos static pod" run_pod talos-extension/examples/static-pod-worker.patch.yaml talos
# --- B. the Talos extension ---------------------------------------------------------------------------
good "Talos extension" run_ext "$EXT_SPEC"
echo "runtime: the good runs took $((SECONDS - t0)) s"

# --- C. broken copies ----------------------------------------------------------------------------------
B=$T/broken; mkdir -p "$B"
K=packaging/kubernetes/kprism.yaml TP=talos-extension/examples/static-pod-worker.patch.yaml
sed 's|mountPath: /var/lib/kubelet/pki$|mountPath: /var/lib/kubelet|' "$K" >"$B/wrong-mount.yaml"
broken "kubeadm pod: kubelet PKI mounted at the wrong path" "loads kubelet's certificate" 'health checks paused.*missing=/var/lib/kubelet/pki/kubelet-client-current.pem' run_pod "$B/wrong-mount.yaml" kubeadm
sed 's/runAsUser: 0$/runAsUser: 65532/; s/runAsGroup: 0$/runAsGroup: 65532/' "$K" >"$B/nonroot.yaml"
broken "kubeadm pod: runs as 65532, cannot read kubelet's 0600 key" "loads kubelet's certificate" 'cannot load TLS files.*kubelet-client-current.pem' run_pod "$B/nonroot.yaml" kubeadm
sed 's/privileged: false/privileged: true/' "$K" >"$B/privileged.yaml"
broken "kubeadm pod: privileged" 'securityContext' 'CapEff [0-9a-f]+, want 0{16}' run_pod "$B/privileged.yaml" kubeadm
awk '/readinessProbe:/{r=1} r && /port: 7446/{sub(/7446/, "7447"); r=0} {print}' "$K" >"$B/readiness-port.yaml"
broken "kubeadm pod: readinessProbe on the wrong port" '^readinessProbe' '7447' run_pod "$B/readiness-port.yaml" kubeadm
sed 's|path: /healthz|path: /health|' "$TP" >"$B/liveness-path.yaml"
broken "Talos static pod: livenessProbe on the wrong path" '^livenessProbe GET' '/health: 404' run_pod "$B/liveness-path.yaml" talos
sed '/- source: \/etc\/kubernetes\/pki/,/- ro$/d' "$EXT_SPEC" >"$B/ext-no-ca.yaml"
broken "Talos extension: no CA mount" "loads kubelet's certificate" 'health checks paused.*"missing":"/etc/kubernetes/pki/ca.crt"' run_ext "$B/ext-no-ca.yaml"
sed '0,/^        - ro$/{/^        - ro$/d}' "$EXT_SPEC" >"$B/ext-pki-rw.yaml"
broken "Talos extension: kubelet PKI mounted writable" 'security' '/var/lib/kubelet/pki mounted rw' run_ext "$B/ext-pki-rw.yaml"
sed 's|^  - time: true|  - path: /var/lib/kubelet/pki/bootstrapped\n  - time: true|' "$EXT_SPEC" >"$B/ext-dep.yaml"
broken "Talos extension: a path dependency not met" '^config.json' 'dependencies not met: path /var/lib/kubelet/pki/bootstrapped' run_ext "$B/ext-dep.yaml"

echo "runtime: $passed passed, $failed failed"
[ "$failed" = 0 ]
