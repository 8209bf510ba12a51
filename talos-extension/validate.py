#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Checks an assembled Talos system extension tree the way Talos and its imager would, plus the
rules kprism's own deployment needs, and the machine config patches in examples/.

Usage: talos-extension/validate.py [--allow-dynamic] [--service-config FILE]
                                   [--patch worker|controlplane FILE]... TREE

TREE is the image's content (build/talos-extension): manifest.yaml and rootfs/ (a Containerfile
next to them is ignored). --service-config checks an ExtensionServiceConfig document (or the one
inside a multi-document patch) against the service spec. --patch ROLE FILE checks a machine
config patch for a worker or a control-plane node (see check_patch). --allow-dynamic accepts a
dynamically linked entrypoint (only for testing with a non-static build: the container's root
filesystem has no loader or libc).

Prints one line per problem and exits 1 if there is any, else prints "talos-extension: TREE ok".
Needs python3-yaml (Debian: apt-get install python3-yaml) and Python >= 3.11 (tomllib).
Talos sources cited are siderolabs/talos v1.13.0 and v1.14.0-rc.1.
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


def check_patch(role, path, service):
    """A complete patch for one node role: the ExtensionServiceConfig, KubePrism off, the
    installer image pinned by digest, and the cluster endpoint on kprism for workers only.

    Either the v1alpha1 form (Talos 1.7-1.13: machine.features.kubePrism.enabled false,
    cluster.controlPlane.endpoint) or the 1.14 form (a KubePrismConfig document deleted with
    `$patch: delete`, KubeClusterConfig.endpoint), never both: Talos 1.14 rejects a config with a
    KubePrismConfig document and any .machine.features.kubePrism (types/k8s/kubeprism.go), and one
    with both cluster endpoints (types/k8s/cluster.go)."""
    where = os.path.basename(path)
    docs = load_docs(path)
    if not docs:
        err(f"{where}: no YAML documents")
        return
    legacy = [d for d in docs if isinstance(d, dict) and "kind" not in d]
    kinds = {d.get("kind"): d for d in docs if isinstance(d, dict) and "kind" in d}
    esc = esc_of(docs, where)
    toml = check_service_config(where, esc, service) if esc else None
    machine = (legacy[0].get("machine") or {}) if legacy else {}
    cluster = (legacy[0].get("cluster") or {}) if legacy else {}
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
    image = (machine.get("install") or {}).get("image")
    if not nonempty_str(image):
        err(f"{where}: machine.install.image missing: new nodes must install the custom installer "
            "that carries the extension")
    elif not DIGEST_RE.search(image):
        err(f"{where}: machine.install.image {image!r} is not pinned by digest (@sha256:...)")
    old_ep = (cluster.get("controlPlane") or {}).get("endpoint")
    new_ep = (kinds.get("KubeClusterConfig") or {}).get("endpoint")
    if old_ep and new_ep:
        err(f"{where}: both cluster.controlPlane.endpoint and KubeClusterConfig.endpoint: Talos 1.14 "
            "rejects the config")
    if new_prism and old_ep or old_prism and new_ep:
        err(f"{where}: mixes the Talos 1.14 documents with the v1alpha1 keys of 1.13")
    endpoint = old_ep or new_ep
    port = (toml or {}).get("bind_port", 7445)
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


def main(argv):
    allow_dynamic = False
    service_config = None
    patches = []
    args = argv[1:]
    while args and args[0].startswith("--"):
        if args[0] == "--allow-dynamic":
            allow_dynamic = True
            args = args[1:]
        elif args[0] == "--service-config" and len(args) > 1:
            service_config = args[1]
            args = args[2:]
        elif args[0] == "--patch" and len(args) > 2 and args[1] in ("worker", "controlplane"):
            patches.append((args[1], args[2]))
            args = args[3:]
        else:
            break
    if len(args) != 1:
        print(__doc__.strip().splitlines()[4], file=sys.stderr)
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
    service = next((s for s in services if s.get("name") == mname), services[0] if services else None)
    if service_config:
        esc = esc_of(load_docs(service_config), os.path.basename(service_config))
        if esc:
            check_service_config(os.path.basename(service_config), esc, service)
    for role, path in patches:
        check_patch(role, path, service)
    for e in errors:
        print(f"talos-extension: {e}")
    if errors:
        return 1
    print(f"talos-extension: {args[0]} ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
