#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds both OCI images with buildah (no daemon, no registry: FROM scratch, vfs storage) and
# checks what is inside them. Each is an OCI image index naming every platform of IMAGE_PLATFORMS
# (default linux/amd64 linux/arm64), one image per platform built with `buildah bud --platform`
# from that platform's static binary (build/static/kprism, build/arm64-static/kprism) and
# extension tree (build/talos-extension, build/talos-extension-arm64), as multi-arch images are
# published. For each platform: its config names the architecture; the Talos extension image has
# manifest.yaml at / and the rootfs/ tree, byte for byte the assembled tree; the static pod image
# holds only /kprism, an ELF for that machine, runs as 65532:65532 with the documented entrypoint,
# and that binary, unpacked from the image's layer, runs alone in an empty chroot as uid 65532
# (`check` of the static pod's configuration; an arm64 one under qemu-aarch64-static, copied into
# that root). Writes build/images/kprism-talos.oci.tar and kprism.oci.tar.
# Needs buildah (make deps), root (chroot), and for arm64 qemu-user-static (make deps-arm64).
# Ends with "images: N passed, M failed".
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
PLATFORMS=${IMAGE_PLATFORMS:-linux/amd64 linux/arm64}
bin_of() { case $1 in linux/amd64) echo build/static/kprism ;; linux/arm64) echo build/arm64-static/kprism ;; esac; }
tree_of() { case $1 in linux/amd64) echo build/talos-extension ;; linux/arm64) echo build/talos-extension-arm64 ;; esac; }
elf_of() { case $1 in linux/amd64) echo 'Advanced Micro Devices X86-64' ;; linux/arm64) echo AArch64 ;; esac; }
for p in $PLATFORMS; do
    [ -n "$(bin_of "$p")" ] || { echo "images: unknown platform $p (linux/amd64, linux/arm64)"; exit 1; }
done
# build NAME PLATFORM CONTAINERFILE CONTEXT [BUILD-ARG...]: one platform's image, added to the
# index localhost/NAME:$VERSION.
build() {
    local name=$1 p=$2 file=$3 ctx=$4; shift 4
    if "${B[@]}" bud --quiet --isolation chroot --platform "$p" --manifest "localhost/$name:$VERSION" "$@" -f "$file" "$ctx" >>"$T/$name.log" 2>&1; then
        ok "$p: buildah bud -f $file $ctx $*"
    else
        bad "building $name for $p: $(tail -5 "$T/$name.log")"; return 1
    fi
}
# push NAME: the index and every image in it -> $out/NAME.oci.tar; checks the index names the platforms.
push() {
    rm -f "$out/$1.oci.tar"
    if ! "${B[@]}" manifest push --all --format oci --quiet "localhost/$1:$VERSION" "oci-archive:$out/$1.oci.tar:$VERSION" >>"$T/$1.log" 2>&1; then
        bad "pushing $1: $(tail -5 "$T/$1.log")"; return 1
    fi
    local got
    got=$(python3 - "$out/$1.oci.tar" <<'PY'
import json, sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    blob = lambda d: json.load(t.extractfile("blobs/" + d.replace(":", "/")))
    top = json.load(t.extractfile("index.json"))["manifests"][0]
    index = blob(top["digest"]) if top["mediaType"].endswith("index.v1+json") else {"manifests": []}
    print(" ".join(sorted(m["platform"]["os"] + "/" + m["platform"]["architecture"] for m in index["manifests"])))
PY
)
    local want; want=$(tr ' ' '\n' <<<"$PLATFORMS" | sed '/^$/d' | sort | tr '\n' ' ' | sed 's/ $//')
    [ "$got" = "$want" ] && ok "$out/$1.oci.tar: an image index naming $want" || bad "$1's index names '$got', not '$want'"
}
# unpack NAME PLATFORM DIR: that platform's image config to DIR/config.json, its layers applied in
# order to DIR/fs.
unpack() {
    python3 - "$out/$1.oci.tar" "$2" "$3" <<'PY'
import io, json, os, sys, tarfile
arc, platform, dst = sys.argv[1:4]
with tarfile.open(arc) as t:
    blob = lambda d: t.extractfile("blobs/" + d.replace(":", "/")).read()
    top = json.load(t.extractfile("index.json"))["manifests"][0]
    index = json.loads(blob(top["digest"]))
    ours = [m for m in index["manifests"] if m["platform"]["os"] + "/" + m["platform"]["architecture"] == platform]
    if len(ours) != 1:
        sys.exit(f"{arc}: {len(ours)} images for {platform}")
    manifest = json.loads(blob(ours[0]["digest"]))
    os.makedirs(dst + "/fs")
    open(dst + "/config.json", "wb").write(blob(manifest["config"]["digest"]))
    for layer in manifest["layers"]:
        with tarfile.open(fileobj=io.BytesIO(blob(layer["digest"]))) as lt:
            lt.extractall(dst + "/fs", numeric_owner=True)
PY
}
cfg() { python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"; }
# arch_ok PLATFORM DIR: the image config's os and architecture are the platform's.
arch_ok() {
    local got; got=$(cfg "$2/config.json" 'c.get("os") + "/" + c.get("architecture")')
    [ "$got" = "$1" ] && ok "$1: image config os/architecture $got" || bad "$1: image config os/architecture $got"
}
# elf_ok PLATFORM FILE: FILE is an ELF executable for the platform's machine.
elf_ok() {
    local m; m=$(readelf -h "$2" 2>/dev/null | sed -n 's/^ *Machine: *//p')
    [ "$m" = "$(elf_of "$1")" ] && ok "$1: ${2##*/fs} is an ELF for $m" || bad "$1: ${2##*/fs} is an ELF for '$m', not $(elf_of "$1")"
}

# The Talos extension image, from the trees `make talos-extension` (and talos-arm64) assembled.
built=1
for p in $PLATFORMS; do build kprism-talos "$p" "$(tree_of "$p")/Containerfile" "$(tree_of "$p")" || built=0; done
if [ "$built" = 1 ] && push kprism-talos; then
    for p in $PLATFORMS; do
        d=$T/talos-${p#linux/}; tree=$(tree_of "$p")
        unpack kprism-talos "$p" "$d" || { bad "$p: unpacking the extension image"; continue; }
        arch_ok "$p" "$d"
        listing=$(cd "$d/fs" && find . -mindepth 1 | sort | tr '\n' ' ')
        want="./manifest.yaml ./rootfs ./rootfs/usr ./rootfs/usr/local ./rootfs/usr/local/etc ./rootfs/usr/local/etc/containers ./rootfs/usr/local/etc/containers/kprism.yaml ./rootfs/usr/local/lib ./rootfs/usr/local/lib/containers ./rootfs/usr/local/lib/containers/kprism ./rootfs/usr/local/lib/containers/kprism/kprism "
        [ "$listing" = "$want" ] && ok "$p: extension image holds exactly manifest.yaml and rootfs/" || bad "$p: extension image files: $listing"
        if diff -r "$d/fs/rootfs" "$tree/rootfs" >/dev/null && cmp -s "$d/fs/manifest.yaml" "$tree/manifest.yaml"; then
            ok "$p: extension image content = $tree"
        else bad "$p: extension image content differs from $tree"; fi
        elf_ok "$p" "$d/fs/rootfs/usr/local/lib/containers/kprism/kprism"
        if talos-extension/validate.py "$d/fs" >"$T/validate.log" 2>&1; then ok "$p: validate.py passes on the image's content"
        else bad "$p: validate.py on the image: $(tail -3 "$T/validate.log")"; fi
    done
fi

# The static pod image.
built=1
for p in $PLATFORMS; do build kprism "$p" packaging/kubernetes/Containerfile . --build-arg "KPRISM_BIN=$(bin_of "$p")" || built=0; done
if [ "$built" = 1 ] && push kprism; then
    for p in $PLATFORMS; do
        d=$T/pod-${p#linux/}; bin=$(bin_of "$p")
        unpack kprism "$p" "$d" || { bad "$p: unpacking the pod image"; continue; }
        arch_ok "$p" "$d"
        listing=$(cd "$d/fs" && find . -mindepth 1 | tr '\n' ' ')
        [ "$listing" = "./kprism " ] && ok "$p: pod image holds only /kprism" || bad "$p: pod image files: $listing"
        cmp -s "$d/fs/kprism" "$bin" && ok "$p: /kprism is $bin" || bad "$p: /kprism differs from $bin"
        elf_ok "$p" "$d/fs/kprism"
        [ "$(cfg "$d/config.json" 'c["config"].get("User")')" = 65532:65532 ] && ok "$p: USER 65532:65532" || bad "$p: User: $(cfg "$d/config.json" 'c["config"].get("User")')"
        [ "$(cfg "$d/config.json" 'c["config"].get("Entrypoint"), c["config"].get("Cmd")')" = "(['/kprism'], ['--config', '/etc/kprism/kprism.toml'])" ] \
            && ok "$p: entrypoint /kprism --config /etc/kprism/kprism.toml" || bad "$p: entrypoint: $(cfg "$d/config.json" 'c["config"].get("Entrypoint"), c["config"].get("Cmd")')"
        mkdir -p "$d/fs/etc/kprism"; cp packaging/kubernetes/kprism.toml "$d/fs/etc/kprism/kprism.toml"
        # A foreign binary runs under the static qemu-user put beside it (what binfmt_misc's F flag does).
        run=(/kprism)
        if [ "$p" = linux/arm64 ]; then
            q=$(command -v qemu-aarch64-static) || { bad "$p: qemu-aarch64-static not installed (make deps-arm64)"; continue; }
            cp "$q" "$d/fs/qemu-aarch64-static"; run=(/qemu-aarch64-static /kprism)
        fi
        if o=$(chroot --userspec=65532:65532 "$d/fs" "${run[@]}" check --config /etc/kprism/kprism.toml 2>&1) &&
                grep -q '^kprism: configuration is valid' <<<"$o"; then
            ok "$p: the image's /kprism runs alone in its root as 65532 (check of the static pod config${run[1]:+, under qemu-user})"
        else bad "$p: running the image's /kprism: $o"; fi
        if o=$(chroot --userspec=65532:65532 "$d/fs" "${run[@]}" --version 2>&1) && [[ $o == kprism* ]]; then
            ok "$p: /kprism --version: $o"
        else bad "$p: /kprism --version: $o"; fi
    done
fi
echo "images: $passed passed, $failed failed"
[ "$failed" = 0 ]
