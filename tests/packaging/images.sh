#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds both OCI images with buildah (no daemon, no registry: FROM scratch, vfs storage) and
# checks what is inside them: the Talos extension image has manifest.yaml at / and the rootfs/
# tree, byte for byte the assembled build/talos-extension; the static pod image holds only /kprism
# (the static binary), runs as 65532:65532 with the documented entrypoint, and that binary,
# unpacked from the image's layer, runs alone in an empty chroot as uid 65532 (`check` of the
# static pod's configuration). Writes build/images/kprism-talos.oci.tar and kprism.oci.tar.
# Needs buildah (make deps) and root (chroot). Ends with "images: N passed, M failed".
set -u
cd "$(dirname "$0")/../.." || exit 1
command -v buildah >/dev/null || { echo "images: buildah not installed (make deps)"; exit 1; }
[ "$(id -u)" = 0 ] || { echo "images: needs root (buildah storage, chroot)"; exit 1; }
VERSION=${VERSION:-test}
out=build/images; mkdir -p "$out"
T=$(mktemp -d)
export STORAGE_DRIVER=vfs BUILDAH_ISOLATION=chroot
B=(buildah --root "$T/storage" --runroot "$T/run" --storage-driver vfs)
cleanup() { "${B[@]}" rmi -a -f >/dev/null 2>&1; rm -rf "$T"; }
trap cleanup EXIT
passed=0 failed=0
ok() { echo "images: ok: $*"; passed=$((passed + 1)); }
bad() { echo "images: FAIL: $*"; failed=$((failed + 1)); }
build() {  # build NAME CONTAINERFILE CONTEXT -> $out/NAME.oci.tar
    if "${B[@]}" bud --quiet --isolation chroot -f "$2" -t "localhost/$1:$VERSION" "$3" >"$T/$1.log" 2>&1 &&
        rm -f "$out/$1.oci.tar" && "${B[@]}" push --quiet "localhost/$1:$VERSION" "oci-archive:$out/$1.oci.tar:$VERSION" >>"$T/$1.log" 2>&1; then
        ok "buildah bud -f $2 $3 -> $out/$1.oci.tar"
    else
        bad "building $1: $(tail -5 "$T/$1.log")"; return 1
    fi
}
# unpack NAME DIR: the image's config to DIR/config.json, its layers applied in order to DIR/fs.
unpack() {
    python3 - "$out/$1.oci.tar" "$2" <<'PY'
import io, json, os, sys, tarfile
arc, dst = sys.argv[1], sys.argv[2]
with tarfile.open(arc) as t:
    blob = lambda d: t.extractfile("blobs/" + d.replace(":", "/")).read()
    index = json.load(t.extractfile("index.json"))
    manifest = json.loads(blob(index["manifests"][0]["digest"]))
    os.makedirs(dst + "/fs")
    open(dst + "/config.json", "wb").write(blob(manifest["config"]["digest"]))
    for layer in manifest["layers"]:
        with tarfile.open(fileobj=io.BytesIO(blob(layer["digest"]))) as lt:
            lt.extractall(dst + "/fs", numeric_owner=True)
PY
}
cfg() { python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["config"]; print(eval(sys.argv[2]))' "$1" "$2"; }

# The Talos extension image, from the tree `make talos-extension` assembled.
if build kprism-talos build/talos-extension/Containerfile build/talos-extension && unpack kprism-talos "$T/talos"; then
    listing=$(cd "$T/talos/fs" && find . -mindepth 1 | sort | tr '\n' ' ')
    want="./manifest.yaml ./rootfs ./rootfs/usr ./rootfs/usr/local ./rootfs/usr/local/etc ./rootfs/usr/local/etc/containers ./rootfs/usr/local/etc/containers/kprism.yaml ./rootfs/usr/local/lib ./rootfs/usr/local/lib/containers ./rootfs/usr/local/lib/containers/kprism ./rootfs/usr/local/lib/containers/kprism/kprism "
    [ "$listing" = "$want" ] && ok "extension image holds exactly manifest.yaml and rootfs/" || bad "extension image files: $listing"
    if diff -r "$T/talos/fs/rootfs" build/talos-extension/rootfs >/dev/null && cmp -s "$T/talos/fs/manifest.yaml" build/talos-extension/manifest.yaml; then
        ok "extension image content = build/talos-extension"
    else bad "extension image content differs from build/talos-extension"; fi
    if talos-extension/validate.py "$T/talos/fs" >"$T/validate.log" 2>&1; then ok "validate.py passes on the image's content"
    else bad "validate.py on the image: $(tail -3 "$T/validate.log")"; fi
fi

# The static pod image.
if build kprism packaging/kubernetes/Containerfile . && unpack kprism "$T/pod"; then
    listing=$(cd "$T/pod/fs" && find . -mindepth 1 | tr '\n' ' ')
    [ "$listing" = "./kprism " ] && ok "pod image holds only /kprism" || bad "pod image files: $listing"
    cmp -s "$T/pod/fs/kprism" build/static/kprism && ok "/kprism is build/static/kprism" || bad "/kprism differs from build/static/kprism"
    [ "$(cfg "$T/pod/config.json" 'c.get("User")')" = 65532:65532 ] && ok "USER 65532:65532" || bad "User: $(cfg "$T/pod/config.json" 'c.get("User")')"
    [ "$(cfg "$T/pod/config.json" 'c.get("Entrypoint"), c.get("Cmd")')" = "(['/kprism'], ['--config', '/etc/kprism/kprism.toml'])" ] \
        && ok "entrypoint /kprism --config /etc/kprism/kprism.toml" || bad "entrypoint: $(cfg "$T/pod/config.json" 'c.get("Entrypoint"), c.get("Cmd")')"
    mkdir -p "$T/pod/fs/etc/kprism"; cp packaging/kubernetes/kprism.toml "$T/pod/fs/etc/kprism/kprism.toml"
    if o=$(chroot --userspec=65532:65532 "$T/pod/fs" /kprism check --config /etc/kprism/kprism.toml 2>&1) &&
            grep -q '^kprism: configuration is valid' <<<"$o"; then
        ok "the image's /kprism runs alone in its root as 65532 (check of the static pod config)"
    else bad "running the image's /kprism: $o"; fi
fi
echo "images: $passed passed, $failed failed"
[ "$failed" = 0 ]
