#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Checks an assembled Talos system extension tree the way Talos and its imager would.

Usage: talos-extension/validate.py [--allow-dynamic] [--service-config FILE] TREE

TREE is the image's content (build/talos-extension): manifest.yaml and rootfs/ (a Containerfile
next to them is ignored). --service-config also checks an ExtensionServiceConfig document
against the service spec. --allow-dynamic accepts a dynamically linked entrypoint (only for
testing with a non-static build: the container's root filesystem has no loader or libc).

Prints one line per problem and exits 1 if there is any, else prints "talos-extension: TREE ok".
Needs python3-yaml (Debian: apt-get install python3-yaml).
"""
import os
import re
import stat
import struct
import sys

import yaml

# Where an extension may put files (Talos pkg/machinery/extensions AllowedPaths has a few more
# special cases, none of which kprism needs; everything of ours lives under /usr/local).
ALLOWED = ("/usr/local", "/lib/firmware", "/lib/modules")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")  # Talos also allows "_"; we keep to [a-z0-9-]
VERSION_RE = re.compile(r"^v?[0-9A-Za-z][0-9A-Za-z.+_~-]*$")
CONSTRAINT_RE = re.compile(
    r"^\s*(>=|<=|>|<|=|!=|~|\^)?\s*v?\d+(\.\d+){0,2}(-[0-9A-Za-z.-]+)?\s*$")
SERVICE_KEYS = {"name", "container", "depends", "restart", "logToConsole"}
CONTAINER_KEYS = {"entrypoint", "args", "environment", "environmentFile", "mounts", "security"}
DEPEND_KINDS = {"service", "path", "network", "time", "configuration"}
NETWORK_CONDITIONS = {"addresses", "connectivity", "hostname", "etcfiles"}
RESTART = {"never", "always", "untilSuccess"}
KUBELET_DIR = "/var/lib/kubelet"

errors = []


def err(msg):
    errors.append(msg)


def load_yaml(path):
    try:
        with open(path) as f:
            docs = list(yaml.safe_load_all(f))
    except (OSError, yaml.YAMLError) as e:
        err(f"{path}: {e}")
        return None
    docs = [d for d in docs if d is not None]
    if len(docs) != 1 or not isinstance(docs[0], dict):
        err(f"{path}: expected exactly one YAML mapping")
        return None
    return docs[0]


def nonempty_str(v):
    return isinstance(v, str) and v.strip() != ""


def check_manifest(tree):
    path = os.path.join(tree, "manifest.yaml")
    if not os.path.isfile(path):
        err(f"{path}: missing")
        return None
    m = load_yaml(path)
    if m is None:
        return None
    if m.get("version") != "v1alpha1":
        err(f"manifest.yaml: version must be v1alpha1, is {m.get('version')!r}")
    md = m.get("metadata")
    if not isinstance(md, dict):
        err("manifest.yaml: metadata missing")
        return None
    for key in ("name", "version", "author", "description"):
        if not nonempty_str(md.get(key)):
            err(f"manifest.yaml: metadata.{key} missing or empty")
    name = md.get("name")
    if nonempty_str(name) and not NAME_RE.match(name):
        err(f"manifest.yaml: metadata.name {name!r} is not lowercase [a-z0-9-]")
    version = md.get("version")
    if nonempty_str(version):
        if "@" in version:
            err(f"manifest.yaml: metadata.version {version!r} still has a template placeholder")
        elif not VERSION_RE.match(version):
            err(f"manifest.yaml: metadata.version {version!r} is not a version string")
    compat = (md.get("compatibility") or {}).get("talos") or {}
    constraint = compat.get("version")
    if not nonempty_str(constraint):
        err("manifest.yaml: metadata.compatibility.talos.version missing")
    elif not all(CONSTRAINT_RE.match(c) for c in constraint.split(",")):
        err(f"manifest.yaml: metadata.compatibility.talos.version {constraint!r} "
            "is not a version constraint such as \">= v1.7.0\"")
    return m


def allowed(p):
    """p: absolute path inside the image's rootfs. Allowed, or an ancestor of an allowed one."""
    for a in ALLOWED:
        if p == a or p.startswith(a + "/") or a.startswith(p + "/"):
            return True
    return False


def check_rootfs(tree):
    rootfs = os.path.join(tree, "rootfs")
    if not os.path.isdir(rootfs) or os.path.islink(rootfs):
        err(f"{rootfs}: missing or not a directory")
        return
    for top in sorted(os.listdir(tree)):
        if top not in ("manifest.yaml", "rootfs", "Containerfile"):
            err(f"{tree}/{top}: unexpected at the top of the image (only manifest.yaml and rootfs/)")
    for dirpath, dirnames, filenames in os.walk(rootfs):
        for n in sorted(dirnames + filenames):
            full = os.path.join(dirpath, n)
            rel = "/" + os.path.relpath(full, rootfs)
            st = os.lstat(full)
            mode = st.st_mode
            is_dir = stat.S_ISDIR(mode)
            if is_dir:
                if not allowed(rel):
                    err(f"rootfs{rel}: not allowed (extensions may only add under {', '.join(ALLOWED)})")
            elif not any(rel.startswith(a + "/") for a in ALLOWED):
                err(f"rootfs{rel}: not allowed (extensions may only add under {', '.join(ALLOWED)})")
            if stat.S_ISLNK(mode):
                target = os.readlink(full)
                resolved = os.path.normpath(target if target.startswith("/")
                                            else os.path.join(os.path.dirname(rel), target))
                if not any(resolved == a or resolved.startswith(a + "/") for a in ALLOWED):
                    err(f"rootfs{rel}: symlink to {target} points outside the allowed paths")
                continue
            if not (is_dir or stat.S_ISREG(mode)):
                err(f"rootfs{rel}: not a regular file, directory or symlink")
            if mode & stat.S_IWOTH:
                err(f"rootfs{rel}: world-writable (mode {stat.S_IMODE(mode):04o})")
            if mode & (stat.S_ISUID | stat.S_ISGID):
                err(f"rootfs{rel}: setuid/setgid (mode {stat.S_IMODE(mode):04o})")


def elf_interp(path):
    """The ELF program interpreter of path, '' for a static ELF, None if not ELF."""
    with open(path, "rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF":
            return None
        is64 = head[4] == 2
        end = "<" if head[5] == 1 else ">"
        if is64:
            phoff, = struct.unpack(end + "Q", head[32:40])
            phentsize, phnum = struct.unpack(end + "HH", head[54:58])
        else:
            phoff, = struct.unpack(end + "I", head[28:32])
            phentsize, phnum = struct.unpack(end + "HH", head[42:46])
        for i in range(phnum):
            f.seek(phoff + i * phentsize)
            ph = f.read(phentsize)
            ptype, = struct.unpack(end + "I", ph[:4])
            if ptype == 3:  # PT_INTERP
                if is64:
                    off, = struct.unpack(end + "Q", ph[8:16])
                    size, = struct.unpack(end + "Q", ph[32:40])
                else:
                    off, = struct.unpack(end + "I", ph[4:8])
                    size, = struct.unpack(end + "I", ph[16:20])
                f.seek(off)
                return f.read(size).rstrip(b"\0").decode(errors="replace")
        return ""


def check_mount(where, mt):
    if not isinstance(mt, dict):
        err(f"{where}: a mount must be a mapping (OCI mount spec)")
        return None
    for key in ("source", "destination", "type"):
        if not nonempty_str(mt.get(key)):
            err(f"{where}: {key} missing")
    for key in ("source", "destination"):
        v = mt.get(key)
        if nonempty_str(v) and not v.startswith("/"):
            err(f"{where}: {key} {v!r} is not an absolute path")
    opts = mt.get("options", [])
    if not isinstance(opts, list) or not all(isinstance(o, str) for o in opts):
        err(f"{where}: options must be a list of strings")
        opts = []
    if mt.get("type") == "bind" and not ({"bind", "rbind"} & set(opts)):
        err(f"{where}: a bind mount needs option bind or rbind")
    src = mt.get("source") or ""
    if src == KUBELET_DIR or src.startswith(KUBELET_DIR + "/"):
        if "ro" not in opts:
            err(f"{where}: {src} must be mounted read-only (option ro)")
    return mt


def check_service(tree, path, allow_dynamic):
    s = load_yaml(path)
    if s is None:
        return None
    fname = os.path.basename(path)
    name = s.get("name")
    if not nonempty_str(name):
        err(f"{fname}: name missing")
        return None
    if not NAME_RE.match(name):
        err(f"{fname}: name {name!r} is not lowercase [a-z0-9-]")
    if fname != name + ".yaml":
        err(f"{fname}: file name does not match name {name!r} (expected {name}.yaml)")
    for key in set(s) - SERVICE_KEYS:
        err(f"{fname}: unknown key {key!r}")
    c = s.get("container")
    if not isinstance(c, dict):
        err(f"{fname}: container missing")
        return s
    for key in set(c) - CONTAINER_KEYS:
        err(f"{fname}: unknown key container.{key!r}")
    cdir = os.path.join(tree, "rootfs/usr/local/lib/containers", name)
    ep = c.get("entrypoint")
    if not nonempty_str(ep):
        err(f"{fname}: container.entrypoint missing")
    elif ep.startswith("/"):
        err(f"{fname}: container.entrypoint {ep!r} must be relative to the container root")
    else:
        epath = os.path.normpath(os.path.join(cdir, ep))
        if not epath.startswith(cdir + "/"):
            err(f"{fname}: container.entrypoint {ep!r} leaves the container root")
        elif not os.path.isfile(epath):
            err(f"{fname}: entrypoint {ep!r} not found at rootfs/usr/local/lib/containers/{name}/")
        else:
            if not os.access(epath, os.X_OK) or not os.stat(epath).st_mode & 0o111:
                err(f"{fname}: entrypoint {epath} is not executable")
            interp = elf_interp(epath)
            if interp is None:
                err(f"{fname}: entrypoint {epath} is not an ELF executable")
            elif interp and not allow_dynamic:
                err(f"{fname}: entrypoint {epath} is dynamically linked ({interp}); "
                    "the container root filesystem has no loader: use the static build")
    for key in ("args", "environment"):
        v = c.get(key, [])
        if not isinstance(v, list) or not all(isinstance(a, str) for a in v):
            err(f"{fname}: container.{key} must be a list of strings")
    mounts = c.get("mounts", [])
    if not isinstance(mounts, list):
        err(f"{fname}: container.mounts must be a list")
        mounts = []
    checked = [check_mount(f"{fname}: container.mounts[{i}]", mt) for i, mt in enumerate(mounts)]
    kubelet = [mt for mt in checked if mt and mt.get("destination") == KUBELET_DIR]
    if not kubelet:
        err(f"{fname}: no mount of the host's {KUBELET_DIR} (kubelet's client certificate)")
    for mt in kubelet:
        opts = mt.get("options") or []
        if mt.get("source") != KUBELET_DIR or mt.get("type") != "bind" \
                or "rbind" not in opts or "ro" not in opts:
            err(f"{fname}: {KUBELET_DIR} must be type bind, options rbind and ro, from the host's {KUBELET_DIR}")
    deps = s.get("depends", [])
    if not isinstance(deps, list):
        err(f"{fname}: depends must be a list")
        deps = []
    for i, d in enumerate(deps):
        if not isinstance(d, dict) or len(d) != 1 or next(iter(d)) not in DEPEND_KINDS:
            err(f"{fname}: depends[{i}] must be one of {sorted(DEPEND_KINDS)}, is {d!r}")
            continue
        kind, v = next(iter(d.items()))
        if kind == "network":
            if not isinstance(v, list) or not v or not set(v) <= NETWORK_CONDITIONS:
                err(f"{fname}: depends[{i}].network must list some of {sorted(NETWORK_CONDITIONS)}")
        elif kind in ("time", "configuration") and v is not True:
            err(f"{fname}: depends[{i}].{kind} must be true")
        elif kind in ("service", "path") and not nonempty_str(v):
            err(f"{fname}: depends[{i}].{kind} must be a string")
    if s.get("restart", "always") not in RESTART:
        err(f"{fname}: restart must be one of {sorted(RESTART)}")
    return s


def config_arg(service):
    args = (service.get("container") or {}).get("args") or []
    for i, a in enumerate(args):
        if a == "--config" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--config="):
            return a.split("=", 1)[1]
    return None


def check_service_config(path, service):
    d = load_yaml(path)
    if d is None:
        return
    where = os.path.basename(path)
    if d.get("apiVersion") != "v1alpha1" or d.get("kind") != "ExtensionServiceConfig":
        err(f"{where}: must be apiVersion v1alpha1, kind ExtensionServiceConfig")
    if service and d.get("name") != service.get("name"):
        err(f"{where}: name {d.get('name')!r} does not match the service {service.get('name')!r}")
    files = d.get("configFiles") or []
    paths = []
    for i, cf in enumerate(files):
        if not isinstance(cf, dict) or not isinstance(cf.get("content"), str) \
                or not nonempty_str(cf.get("mountPath")) or not cf["mountPath"].startswith("/"):
            err(f"{where}: configFiles[{i}] needs content and an absolute mountPath")
            continue
        paths.append(cf["mountPath"])
    env = d.get("environment", [])
    if not isinstance(env, list) or not all(isinstance(e, str) and "=" in e for e in env):
        err(f"{where}: environment must be a list of NAME=value strings")
    cfg = config_arg(service) if service else None
    if cfg and cfg not in paths:
        err(f"{where}: the service's --config {cfg} is not one of the configFiles mountPaths {paths}")


def main(argv):
    allow_dynamic = False
    service_config = None
    args = argv[1:]
    while args and args[0].startswith("--"):
        if args[0] == "--allow-dynamic":
            allow_dynamic = True
            args = args[1:]
        elif args[0] == "--service-config" and len(args) > 1:
            service_config = args[1]
            args = args[2:]
        else:
            break
    if len(args) != 1:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    tree = os.path.abspath(args[0])
    manifest = check_manifest(tree)
    check_rootfs(tree)
    sdir = os.path.join(tree, "rootfs/usr/local/etc/containers")
    specs = sorted(f for f in os.listdir(sdir) if f.endswith(".yaml")) if os.path.isdir(sdir) else []
    if not specs:
        err("rootfs/usr/local/etc/containers/: no extension service spec (*.yaml)")
    services = [check_service(tree, os.path.join(sdir, f), allow_dynamic) for f in specs]
    services = [s for s in services if s]
    mname = ((manifest or {}).get("metadata") or {}).get("name")
    if mname and services and mname not in [s.get("name") for s in services]:
        err(f"manifest.yaml: no service spec named after the extension {mname!r}")
    if service_config:
        check_service_config(service_config, next((s for s in services if s.get("name") == mname),
                                                  services[0] if services else None))
    for e in errors:
        print(f"talos-extension: {e}")
    if errors:
        return 1
    print(f"talos-extension: {args[0]} ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
