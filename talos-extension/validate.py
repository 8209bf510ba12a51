#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Checks an assembled Talos system extension tree the way Talos and its imager would, plus the
rules kprism's own deployment needs, and the machine config patches in examples/: the extension's
and the static pod's.

Usage: talos-extension/validate.py [--allow-dynamic] [--no-placeholders] [--service-config FILE]
                                   [--patch worker|controlplane FILE]...
                                   [--pod-patch worker|controlplane FILE]... [TREE]

TREE is the image's content (build/talos-extension): manifest.yaml and rootfs/ (a Containerfile
next to them is ignored); it is needed unless only --pod-patch is given. --service-config checks an
ExtensionServiceConfig document (or the one inside a multi-document patch) against the service
spec. --patch ROLE FILE checks an extension patch for a worker or a control-plane node (see
check_patch), --pod-patch ROLE FILE a static-pod patch (see check_pod_patch).
--no-placeholders also rejects the examples' all-zero image digests (for a patch you are about to
apply). --allow-dynamic accepts a dynamically linked entrypoint (only for testing with a
non-static build: the container's root filesystem has no loader or libc).

Prints one line per problem and exits 1 if there is any, else prints "talos-extension: ... ok".
Needs python3-yaml (Debian: apt-get install python3-yaml) and Python >= 3.11 (tomllib).
Talos sources cited are siderolabs/talos v1.13.0 to v1.13.9 and v1.14.0-rc.1.
"""
import os
import re
import stat
import struct
import sys

import tomllib

import yaml

# Where an extension may put files: pkg/machinery/extensions/extensions.go AllowedPaths. Talos
# 1.10 moved /lib/firmware and /lib/modules to /usr/lib/... (unified /usr), so for a manifest that
# claims ">= v1.7.0" only the paths valid on both sides of that move are accepted; the rest of
# the list (loader, ldconfig, nvidia tools, ...) is for special extensions kprism is not.
ALLOWED = ("/usr/local", "/etc/cri/conf.d", "/usr/lib/udev/rules.d")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")  # Talos also allows "_"; we keep to [a-z0-9-]
# A release version (1.2.3, v1.2.3, 1.2.3-rc.1), as siderolabs/extensions services carry their
# upstream version; not a commit hash or `git describe` output between releases.
VERSION_RE = re.compile(r"^v?\d+\.\d+\.\d+(-[0-9A-Za-z.]+)?$")
CONSTRAINT_RE = re.compile(
    r"^\s*(>=|<=|>|<|=|!=|~|\^)?\s*v?\d+(\.\d+){0,2}(-[0-9A-Za-z.-]+)?\s*$")
SERVICE_KEYS = {"name", "container", "depends", "restart", "logToConsole"}
CONTAINER_KEYS = {"entrypoint", "args", "environment", "environmentFile", "mounts", "security"}
DEPEND_KINDS = {"service", "path", "network", "time", "configuration"}
NETWORK_CONDITIONS = {"addresses", "connectivity", "hostname", "etcfiles"}
RESTART = {"never", "always", "untilSuccess"}  # services/restart_kind.go
KUBELET_DIR = "/var/lib/kubelet"
KUBELET_PKI = "/var/lib/kubelet/pki"
HOST_CA_DIR = "/etc/kubernetes/pki"
HOST_CA = "/etc/kubernetes/pki/ca.crt"  # constants.KubernetesCACert, written by Talos
# The one writable mount: kprism's state directory, discovery.snapshot_file's default directory.
STATE_DIR = "/var/lib/kprism"
SNAPSHOT = STATE_DIR + "/discovery.json"
# runner/runner.go DefaultOptions: GracefulShutdownTimeout 10 s between SIGTERM and SIGKILL.
TALOS_KILL_SECONDS = 10
DIGEST_RE = re.compile(r"@sha256:[0-9a-f]{64}$")
# The examples' stand-in for a real digest; --no-placeholders rejects it.
PLACEHOLDER_DIGEST = "@sha256:" + "0" * 64
# The static pod (--pod-patch): its name, the namespace Talos exempts from Pod Security admission
# (pkg/machinery/config/generate/init.go), system-node-critical's value.
POD_NAME = "kprism"
POD_NAMESPACE = "kube-system"
NODE_CRITICAL = 2000001000
# Host directories a pod must never mount: they hold every pod's volumes (/var/lib/kubelet), the
# cluster's private keys (/system/secrets) or everything.
WIDE_DIRS = ("/", "/etc", "/etc/kubernetes", "/var", "/var/lib", "/var/lib/kubelet", "/system",
             "/system/secrets")
# Memory, as tests/packaging/check_manifests.py: 8 MiB, plus ~130 KiB per busy connection
# (bench/busy_rss.py); kprism(8)'s default max_connections.
BASE_KIB = 8 * 1024
PER_CONNECTION_KIB = 130
DEFAULT_MAX_CONNECTIONS = 10000
DEFAULT_DRAIN_SECONDS = 30
# kprism(8) OPTIONS: the flags that take no separate value (a boolean alone means true).
BOOL_FLAGS = {"allow-non-loopback", "close-on-down", "keep-on-crash", "rebalance", "enable-discovery",
              "health-tls-resumption", "tcp-nodelay"}

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
            err(f"manifest.yaml: metadata.version {version!r} is not a release version such as 0.1.0")
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
    check_kprism_mounts(fname, [mt for mt in checked if mt])
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
        elif kind == "path" and not v.startswith("/"):
            err(f"{fname}: depends[{i}].path {v!r} must be absolute")
        # kprism's rule: depend on no more than kubelet does (system/services/kubelet.go waits
        # for time sync, addresses, hostname and etc files). `connectivity` needs a default route
        # or passing probes (controllers/network/status.go): without one ext-kprism never starts
        # and the node's kubelet never reaches the API.
        if kind == "network" and isinstance(v, list) and "connectivity" in v:
            err(f"{fname}: depends[{i}].network: 'connectivity' waits for a default route or passing "
                "probes, which kubelet does not; a node without one would never start kprism")
    # services.go Validate: restart is required (RestartKind starts at 1; a missing one is
    # "restart kind is invalid"), and Talos skips an invalid spec at boot.
    if "restart" not in s:
        err(f"{fname}: restart missing: Talos rejects a service without it (one of {sorted(RESTART)})")
    elif s.get("restart") not in RESTART:
        err(f"{fname}: restart must be one of {sorted(RESTART)}")
    return s


def check_kprism_mounts(fname, mounts):
    """kprism's rules for its mounts: the kubelet PKI and the host CA, each a plain read-only
    bind of its directory, and nothing writable but the state directory /var/lib/kprism, a plain
    read-write bind of the host's /var/lib/kprism."""
    for mt in mounts:
        opts = mt.get("options") or []
        src = mt.get("source") or ""
        if mt.get("destination") == STATE_DIR:
            if src != STATE_DIR or mt.get("type") != "bind" or "bind" not in opts or "rbind" in opts \
                    or "ro" in opts or "rw" not in opts:
                err(f"{fname}: the state directory {STATE_DIR} must be type bind, options bind and rw, "
                    f"from the host's {STATE_DIR}")
        elif "ro" not in opts:
            err(f"{fname}: mount of {src} must be read-only (option ro); only {STATE_DIR} may be writable")
        if src == KUBELET_DIR or "rbind" in opts and src.startswith(KUBELET_DIR):
            err(f"{fname}: mount of {src} with {'rbind' if 'rbind' in opts else 'bind'} brings in every "
                f"pod's volumes, secrets included; mount only {KUBELET_PKI} (bind, ro)")
    by_dest = {mt.get("destination"): mt for mt in mounts}
    for want, why in ((KUBELET_PKI, "kubelet's rotating client certificate"),
                      (HOST_CA_DIR, "the cluster CA Talos keeps current"),
                      (STATE_DIR, "the state directory, for the discovery snapshot")):
        mt = by_dest.get(want)
        if not mt:
            err(f"{fname}: no mount of the host's {want} ({why})")
        elif want != STATE_DIR and (mt.get("source") != want or mt.get("type") != "bind"
                                    or "bind" not in (mt.get("options") or [])):
            err(f"{fname}: {want} must be type bind, options bind and ro, from the host's {want}")


def config_arg(service):
    args = (service.get("container") or {}).get("args") or []
    for i, a in enumerate(args):
        if a == "--config" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--config="):
            return a.split("=", 1)[1]
    return None


def load_docs(path):
    try:
        with open(path) as f:
            return [d for d in yaml.safe_load_all(f) if d is not None]
    except (OSError, yaml.YAMLError) as e:
        err(f"{path}: {e}")
        return []


def esc_of(docs, where):
    """The one ExtensionServiceConfig in a list of machine config documents."""
    escs = [d for d in docs if isinstance(d, dict) and d.get("kind") == "ExtensionServiceConfig"]
    if len(escs) != 1:
        err(f"{where}: expected one ExtensionServiceConfig document, found {len(escs)}")
        return None
    return escs[0]


def seconds(v):
    """A kprism duration ("8s", "500ms", "1m") in seconds, None if it is not one."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)", v) if isinstance(v, str) else None
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m.group(2)] if m else None


def check_service_config(where, d, service):
    """Talos's rules for an ExtensionServiceConfig (types/runtime/extensions/service_config.go),
    then kprism's for the kprism.toml it delivers. Returns the parsed TOML, or None."""
    if d.get("apiVersion") != "v1alpha1" or d.get("kind") != "ExtensionServiceConfig":
        err(f"{where}: must be apiVersion v1alpha1, kind ExtensionServiceConfig")
    if service and d.get("name") != service.get("name"):
        err(f"{where}: name {d.get('name')!r} does not match the service {service.get('name')!r}")
    files = d.get("configFiles") or []
    by_path = {}
    for i, cf in enumerate(files):
        if not isinstance(cf, dict) or not isinstance(cf.get("content"), str) \
                or not nonempty_str(cf.get("mountPath")) or not cf["mountPath"].startswith("/"):
            err(f"{where}: configFiles[{i}] needs content and an absolute mountPath")
            continue
        by_path[cf["mountPath"]] = cf["content"]
    env = d.get("environment", [])
    if not isinstance(env, list) or not all(isinstance(e, str) and "=" in e for e in env):
        err(f"{where}: environment must be a list of NAME=value strings")
    cfg = config_arg(service) if service else None
    if not cfg:
        return None
    if cfg not in by_path:
        err(f"{where}: the service's --config {cfg} is not one of the configFiles mountPaths {list(by_path)}")
        return None
    try:
        toml = tomllib.loads(by_path[cfg])
    except tomllib.TOMLDecodeError as e:
        err(f"{where}: {cfg}: not TOML: {e}")
        return None
    health = toml.get("health") or {}
    mounts = [mt.get("destination", "") for mt in (service.get("container") or {}).get("mounts") or []]

    def inside(p, roots):
        return any(p == r or p.startswith(r.rstrip("/") + "/") for r in roots)

    # kprism.toml(5) defaults: the kubelet's certificate and /etc/kubernetes/pki/ca.crt.
    for key, default in (("client_cert", KUBELET_PKI + "/kubelet-client-current.pem"),
                         ("client_key", KUBELET_PKI + "/kubelet-client-current.pem"),
                         ("ca_file", HOST_CA)):
        p = health.get(key, default)
        if not inside(p, mounts + list(by_path)):
            err(f"{where}: health.{key} {p} is neither inside a mount of the service nor a configFiles entry")
    # With discovery on, the snapshot must land in the writable state mount (the root filesystem
    # and every other mount are read-only): kprism would warn on every write and find none at start.
    disc = toml.get("discovery") or {}
    snap = disc.get("snapshot_file", SNAPSHOT)
    if disc.get("enabled") is True and snap and not inside(snap, [STATE_DIR]):
        err(f"{where}: discovery.snapshot_file {snap} is not under the writable state mount {STATE_DIR}")
    ca = health.get("ca_file", HOST_CA)
    if ca in by_path:
        err(f"{where}: health.ca_file {ca} is a copy in the ExtensionServiceConfig: it goes stale after "
            f"`talosctl rotate-ca` and every check fails; use the host's {HOST_CA} (mounted read-only)")
    drain = seconds(toml.get("drain_timeout", "30s"))
    if drain is None or drain >= TALOS_KILL_SECONDS:
        err(f"{where}: drain_timeout {toml.get('drain_timeout', '30s (the default)')} is not under the "
            f"{TALOS_KILL_SECONDS} s after which Talos kills an extension service; set it to e.g. \"8s\"")
    return toml


# --- machine config patches (examples/*.patch.yaml) -------------------------------------------

def loopback(url):
    host = re.sub(r"^https?://", "", url or "").rsplit(":", 1)[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


def split_patch(path):
    """A patch's documents: (the v1alpha1 document or {}, {kind: document} of the others, all)."""
    docs = load_docs(path)
    legacy = [d for d in docs if isinstance(d, dict) and "kind" not in d]
    kinds = {d.get("kind"): d for d in docs if isinstance(d, dict) and "kind" in d}
    return (legacy[0] if legacy else {}), kinds, docs


def check_node_settings(where, role, legacy, kinds, port):
    """What both paths set on a node: KubePrism off, and the cluster endpoint on kprism for
    workers only.

    Either the v1alpha1 form (Talos 1.7-1.13: machine.features.kubePrism.enabled false,
    cluster.controlPlane.endpoint) or the 1.14 form (a KubePrismConfig document deleted with
    `$patch: delete`, KubeClusterConfig.endpoint), never both: Talos 1.14 rejects a config with a
    KubePrismConfig document and any .machine.features.kubePrism (types/k8s/kubeprism.go), and one
    with both cluster endpoints (types/k8s/cluster.go)."""
    machine = legacy.get("machine") or {}
    cluster = legacy.get("cluster") or {}
    features = machine.get("features") or {}
    old_prism = "kubePrism" in features
    new_prism = kinds.get("KubePrismConfig")
    if old_prism and new_prism:
        err(f"{where}: both .machine.features.kubePrism and a KubePrismConfig document: Talos 1.14 rejects "
            "the config (\"KubePrism config in v1alpha1 config ... can't be used with KubePrismConfig document\")")
    elif old_prism:
        if (features.get("kubePrism") or {}).get("enabled") is not False:
            err(f"{where}: machine.features.kubePrism.enabled must be false: KubePrism holds 127.0.0.1:7445")
    elif new_prism:
        if new_prism.get("$patch") != "delete" or new_prism.get("apiVersion") != "v1alpha1":
            err(f"{where}: the KubePrismConfig document must be `apiVersion: v1alpha1`, `$patch: delete` "
                "(deleting it disables KubePrism on Talos 1.14)")
    else:
        err(f"{where}: does not disable KubePrism (machine.features.kubePrism.enabled: false, or on "
            "Talos 1.14 a KubePrismConfig document with $patch: delete)")
    old_ep = (cluster.get("controlPlane") or {}).get("endpoint")
    new_ep = (kinds.get("KubeClusterConfig") or {}).get("endpoint")
    if old_ep and new_ep:
        err(f"{where}: both cluster.controlPlane.endpoint and KubeClusterConfig.endpoint: Talos 1.14 "
            "rejects the config")
    if new_prism and old_ep or old_prism and new_ep:
        err(f"{where}: mixes the Talos 1.14 documents with the v1alpha1 keys of 1.13")
    endpoint = old_ep or new_ep
    if role == "worker":
        want = f"https://127.0.0.1:{port}"
        if endpoint != want:
            why = (" (kprism listens on IPv4 loopback; localhost may resolve to ::1)"
                   if endpoint and "localhost" in endpoint else "")
            err(f"{where}: the worker's cluster endpoint must be {want}, is {endpoint!r}{why}: "
                "with KubePrism off a worker's kubelet uses it (controllers/secrets/kubelet.go)")
    elif endpoint and loopback(endpoint):
        err(f"{where}: a control-plane patch must not set the cluster endpoint to {endpoint}: there it "
            "also becomes the admin kubeconfig's server, the server kube-proxy uses cluster-wide with "
            "KubePrism off, and the apiserver's service-account issuer; keep the shared endpoint")


def check_digest(where, what, image, no_placeholders):
    """image pinned by digest; with no_placeholders, not by the examples' all-zero digest."""
    if not DIGEST_RE.search(image):
        err(f"{where}: {what} {image!r} is not pinned by digest (@sha256:...)")
    elif no_placeholders and image.endswith(PLACEHOLDER_DIGEST):
        err(f"{where}: {what} {image!r} still has the placeholder digest (all zeros): put the digest "
            "your registry gave the pushed image there")


def check_patch(role, path, service, no_placeholders=False):
    """A complete extension patch for one node role: the ExtensionServiceConfig, KubePrism off, the
    installer image pinned by digest, and the cluster endpoint on kprism for workers only."""
    where = os.path.basename(path)
    legacy, kinds, docs = split_patch(path)
    if not docs:
        err(f"{where}: no YAML documents")
        return
    esc = esc_of(docs, where)
    toml = check_service_config(where, esc, service) if esc else None
    image = ((legacy.get("machine") or {}).get("install") or {}).get("image")
    if not nonempty_str(image):
        err(f"{where}: machine.install.image missing: new nodes must install the custom installer "
            "that carries the extension")
    else:
        check_digest(where, "machine.install.image", image, no_placeholders)
    check_node_settings(where, role, legacy, kinds, (toml or {}).get("bind_port", 7445))


# --- the static pod (examples/static-pod-*.patch.yaml) -------------------------------------------

def flags_of(args):
    """kprism's command-line flags as {name: value} (True for a boolean given alone)."""
    flags, i = {}, 0
    while i < len(args):
        a = args[i]
        i += 1
        if not isinstance(a, str) or not a.startswith("--"):
            continue
        name, eq, value = a[2:].partition("=")
        if eq:
            flags[name] = value
        elif name not in BOOL_FLAGS and i < len(args) and isinstance(args[i], str) \
                and not args[i].startswith("--"):
            flags[name] = args[i]
            i += 1
        else:
            flags[name] = True
    return flags


def truthy(v):
    return v is True or (isinstance(v, str) and v.lower() in ("true", "1", "yes", "on"))


def int_flag(flags, name, default):
    """An integer flag's value, its default when absent or not a number (kprism check judges it)."""
    v = str(flags.get(name, default))
    return int(v) if v.isdigit() else default


def kib(quantity):
    """A Kubernetes memory quantity (64Mi, 128M, 1Gi, 134217728) in KiB, or None."""
    m = re.fullmatch(r"([0-9.]+(?:e[0-9]+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?", str(quantity))
    if not m:
        return None
    mult = {None: 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
            "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}[m.group(2)]
    return float(m.group(1)) * mult / 1024


def static_pods(where, legacy, kinds, docs):
    """The kprism pod of a patch: from .machine.pods (v1alpha1) or a KubeStaticPodConfig document
    (Talos 1.14), never both."""
    old = [p for p in ((legacy.get("machine") or {}).get("pods") or [])
           if isinstance(p, dict) and (p.get("metadata") or {}).get("name") == POD_NAME]
    new = [d for d in docs if isinstance(d, dict) and d.get("kind") == "KubeStaticPodConfig"
           and d.get("name") == POD_NAME]
    if old and new:
        err(f"{where}: the pod both in .machine.pods and in a KubeStaticPodConfig document: kubelet would "
            "be given two pods named kube-system/kprism")
    if len(old) + len(new) != 1:
        err(f"{where}: expected one static pod named {POD_NAME} (.machine.pods, or on Talos 1.14 a "
            f"KubeStaticPodConfig document named {POD_NAME}), found {len(old) + len(new)}")
        return None
    if new and (new[0].get("apiVersion") != "v1alpha1" or not isinstance(new[0].get("pod"), dict)):
        err(f"{where}: the KubeStaticPodConfig document needs apiVersion v1alpha1 and the pod under `pod`")
        return None
    return old[0] if old else new[0]["pod"]


def check_pod(where, pod, no_placeholders):
    """kprism's rules for the static pod: what packaging/kubernetes/kprism.yaml does for kubeadm,
    with Talos's paths. Returns the bind port."""
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    if pod.get("apiVersion") != "v1" or pod.get("kind") != "Pod":
        err(f"{where}: the static pod must be apiVersion v1, kind Pod")
    if meta.get("namespace") != POD_NAMESPACE:
        err(f"{where}: the pod's namespace must be {POD_NAMESPACE}, is {meta.get('namespace')!r}: Talos "
            "exempts only it from Pod Security admission, whose baseline refuses the mirror pod")
    if spec.get("hostNetwork") is not True:
        err(f"{where}: hostNetwork must be true: kprism listens on the node's loopback, before any CNI")
    if spec.get("priorityClassName") != "system-node-critical":
        err(f"{where}: priorityClassName must be system-node-critical, is {spec.get('priorityClassName')!r}")
    if spec.get("priority") not in (None, NODE_CRITICAL):
        err(f"{where}: priority must be {NODE_CRITICAL} (system-node-critical's value) if set")
    if spec.get("dnsPolicy") not in ("Default", "None"):
        err(f"{where}: dnsPolicy must be Default: cluster DNS needs the API that kprism provides")
    if spec.get("automountServiceAccountToken") is not False:
        err(f"{where}: automountServiceAccountToken must be false")
    containers = spec.get("containers") or []
    if len(containers) != 1 or not isinstance(containers[0], dict):
        err(f"{where}: the pod must have exactly one container")
        return 7445
    c = containers[0]
    image = c.get("image")
    if not nonempty_str(image):
        err(f"{where}: the container has no image")
    else:
        check_digest(where, "the pod's image", image, no_placeholders)
    flags = flags_of((c.get("command") or []) + (c.get("args") or []))

    # uid 0 to read root's files: kubelet's key (0600) and Talos's ca.crt (0400 in a 0700 directory,
    # KubeletServiceController.writePKI); nothing else root can do.
    psc, csc = spec.get("securityContext") or {}, c.get("securityContext") or {}

    def eff(key):  # the container's value, else the pod's
        return csc.get(key, psc.get(key))

    if eff("runAsUser") != 0 or eff("runAsGroup") != 0 or eff("runAsNonRoot") is not False:
        err(f"{where}: the pod must run as uid and gid 0 (runAsUser 0, runAsGroup 0, runAsNonRoot false): "
            "kubelet's key is 0600 and Talos's ca.crt 0400, both root's; the image's USER 65532 reads neither")
    caps = csc.get("capabilities") or {}
    if caps.get("drop") != ["ALL"] or caps.get("add"):
        err(f"{where}: capabilities must drop ALL and add none (uid 0 then gets a file owner's "
            "permission bits and nothing more)")
    if csc.get("allowPrivilegeEscalation") is not False:
        err(f"{where}: allowPrivilegeEscalation must be false")
    if csc.get("privileged"):
        err(f"{where}: the container must not be privileged")
    if csc.get("readOnlyRootFilesystem") is not True:
        err(f"{where}: readOnlyRootFilesystem must be true")
    if (eff("seccompProfile") or {}).get("type") != "RuntimeDefault":
        err(f"{where}: seccompProfile must be RuntimeDefault")

    # Probes on the admin endpoint, which listens on loopback: without host: 127.0.0.1 a
    # host-network pod's probes go to the node's address and fail.
    hport = int_flag(flags, "health-port", 7446)
    for probe, path_ in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        h = (c.get(probe) or {}).get("httpGet") or {}
        if h.get("host") != "127.0.0.1" or h.get("port") != hport or h.get("path") != path_ \
                or h.get("scheme", "HTTP") != "HTTP":
            err(f"{where}: {probe} must be httpGet http://127.0.0.1:{hport}{path_} (the admin port, "
                f"host 127.0.0.1), is {h or None}")

    # Mounts: hostPath only; read-only but the state directory; the kubelet PKI and the CA
    # directories at their own paths; nothing wider.
    volumes = {v.get("name"): v for v in spec.get("volumes") or [] if isinstance(v, dict)}
    mounts = [m for m in c.get("volumeMounts") or [] if isinstance(m, dict)]
    if any(set(v) != {"name", "hostPath"} for v in volumes.values()):
        err(f"{where}: volumes must be hostPath only (a static pod cannot use the API's objects)")
    hp = {}
    for m in mounts:
        h = (volumes.get(m.get("name")) or {}).get("hostPath") or {}
        if not h:
            err(f"{where}: volumeMount {m.get('name')!r} has no hostPath volume")
            continue
        hp[m.get("mountPath")] = (h, m)
        if m.get("mountPath") != STATE_DIR and m.get("readOnly") is not True:
            err(f"{where}: every volumeMount must be readOnly but the state directory {STATE_DIR}; "
                f"{m.get('mountPath')} is not")
        if os.path.normpath(h.get("path") or "/") in WIDE_DIRS:
            err(f"{where}: mounts the host's {h.get('path')}: that is every pod's volumes or the "
                f"cluster's keys; mount only {KUBELET_PKI}, {HOST_CA_DIR} and {STATE_DIR}")
    for want, types, why in ((KUBELET_PKI, ("DirectoryOrCreate",), "kubelet's rotating client certificate"),
                             (HOST_CA_DIR, ("Directory",), "the cluster CA Talos keeps current")):
        h, m = hp.get(want, ({}, {}))
        if h.get("path") != want or h.get("type") not in types or m.get("subPath"):
            err(f"{where}: {why}: mount the host's {want} (hostPath type {types[0]}) at {want}, read-only")
    h, m = hp.get(STATE_DIR, ({}, {}))
    if h.get("path") != STATE_DIR or h.get("type") not in (None, "") or m.get("readOnly") is True \
            or m.get("subPath"):
        err(f"{where}: the state directory: mount the host's {STATE_DIR} at {STATE_DIR}, writable, with no "
            "hostPath type (Talos's kubelet cannot see it, system/services/kubelet.go; containerd creates it)")

    def inside(p, roots):
        return any(p == r or p.startswith(r.rstrip("/") + "/") for r in roots)

    for flag, default in (("client-cert", KUBELET_PKI + "/kubelet-client-current.pem"),
                          ("client-key", KUBELET_PKI + "/kubelet-client-current.pem"),
                          ("ca-file", HOST_CA), ("config", None), ("discovery-snapshot-file", None)):
        p = flags.get(flag, default)
        if p is not None and not inside(str(p), list(hp)):
            err(f"{where}: --{flag} {p} is not inside a mount of the pod")
    if truthy(flags.get("enable-discovery")) and not inside(str(flags.get("discovery-snapshot-file", SNAPSHOT)),
                                                         [STATE_DIR]):
        err(f"{where}: --discovery-snapshot-file is not under the writable state mount {STATE_DIR}")

    # Memory limit against --max-connections; the grace period over the drain.
    n = int_flag(flags, "max-connections", DEFAULT_MAX_CONNECTIONS)
    limit = ((c.get("resources") or {}).get("limits") or {}).get("memory")
    need = BASE_KIB + n * PER_CONNECTION_KIB
    if limit is None or (kib(limit) or 0) < need:
        err(f"{where}: the memory limit {limit} does not cover --max-connections {n}: "
            f"{BASE_KIB} KiB + {n} x {PER_CONNECTION_KIB} KiB = {need / 1024:.0f} MiB")
    drain = seconds(flags.get("drain-timeout", f"{DEFAULT_DRAIN_SECONDS}s")) or DEFAULT_DRAIN_SECONDS
    grace = spec.get("terminationGracePeriodSeconds", 30)
    if not isinstance(grace, int) or grace <= drain:
        err(f"{where}: terminationGracePeriodSeconds {grace} is not over the drain timeout ({drain:g} s): "
            "kubelet would kill kprism while it drains")
    return int_flag(flags, "bind-port", 7445)


def check_pod_patch(role, path, no_placeholders=False):
    """A complete static-pod patch for one node role: the kprism pod (check_pod), KubePrism off,
    the cluster endpoint on kprism for workers only, and not the extension's configuration too."""
    where = os.path.basename(path)
    legacy, kinds, docs = split_patch(path)
    if not docs:
        err(f"{where}: no YAML documents")
        return
    if "ExtensionServiceConfig" in kinds:
        err(f"{where}: a static-pod patch must not carry the extension's ExtensionServiceConfig: both "
            "would listen on 127.0.0.1:7445; choose one path")
    pod = static_pods(where, legacy, kinds, docs)
    port = check_pod(where, pod, no_placeholders) if pod else 7445
    check_node_settings(where, role, legacy, kinds, port)


def main(argv):
    allow_dynamic = False
    no_placeholders = False
    service_config = None
    patches = []
    pod_patches = []
    args = argv[1:]
    while args and args[0].startswith("--"):
        if args[0] == "--allow-dynamic":
            allow_dynamic = True
            args = args[1:]
        elif args[0] == "--no-placeholders":
            no_placeholders = True
            args = args[1:]
        elif args[0] == "--service-config" and len(args) > 1:
            service_config = args[1]
            args = args[2:]
        elif args[0] in ("--patch", "--pod-patch") and len(args) > 2 and args[1] in ("worker", "controlplane"):
            (patches if args[0] == "--patch" else pod_patches).append((args[1], args[2]))
            args = args[3:]
        else:
            break
    # TREE is needed for the extension's checks; static-pod patches alone need none.
    if len(args) > 1 or not args and (patches or service_config or not pod_patches):
        print("\n".join(__doc__.strip().splitlines()[4:7]), file=sys.stderr)
        return 2
    if args:
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
        service = next((s for s in services if s.get("name") == mname), services[0] if services else None)
        if service_config:
            esc = esc_of(load_docs(service_config), os.path.basename(service_config))
            if esc:
                check_service_config(os.path.basename(service_config), esc, service)
        for role, path in patches:
            check_patch(role, path, service, no_placeholders)
    for role, path in pod_patches:
        check_pod_patch(role, path, no_placeholders)
    for e in errors:
        print(f"talos-extension: {e}")
    if errors:
        return 1
    what = [args[0]] if args else []
    what += [os.path.basename(path) for _, path in pod_patches]
    print(f"talos-extension: {', '.join(what)} ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
