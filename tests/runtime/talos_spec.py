#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Builds the OCI runtime spec (config.json) Talos would give the extension service, from its spec YAML.
"""Usage: talos_spec.py --service kprism.yaml --patch worker.patch.yaml --host DIR --rootfs DIR
                       --bundle DIR --endpoints A,B [--cgroup PATH]

Reads the extension service spec (talos-extension/kprism.yaml, the schema of
pkg/machinery/extensions/services/services.go: name, container{entrypoint, args, environment,
environmentFile, mounts, security{writeableSysfs, maskedPaths, readonlyPaths, writeableRootfs,
rootfsPropagation}}, depends[{service, path, network, time, configuration}], restart) and the
ExtensionServiceConfig document named like the service from a machine config patch, and writes
BUNDLE/config.json the way siderolabs/talos v1.13.9 builds the container:

  internal/app/machined/pkg/system/services/extension.go   Extension.Runner, getOCIOptions, Condition
  internal/app/machined/pkg/system/runner/containerd/containerd.go   newOCISpecOpts
  internal/app/machined/pkg/controllers/runtime/extension_service_config_files.go   the config files
  containerd/containerd pkg/oci/spec.go populateDefaultUnixSpec, pkg/oci/mounts.go defaultMounts

on a simulated host whose "/" is --host: every host path (mount sources, the config files Talos
writes under /system/overlays/extensions/NAME/, /etc/hosts, /etc/resolv.conf) is taken below it.
The only edit to what the documents say: the `endpoints` line of the ExtensionServiceConfig's
kprism.toml is replaced by --endpoints (the test's stand-in apiservers).

Where the test cannot do what Talos does, it says so here:
  - the root filesystem: Talos mounts an overlay over /usr/local/lib/containers/NAME (PreFunc,
    "to allow containerd to mount there /dev, /proc") and containerd marks it read-only unless
    writeableRootfs; here --rootfs is a private copy of that directory, standing in for the overlay;
  - the cgroup: Talos uses /system/extensions/NAME (runner.WithCgroupPath); here --cgroup, so the
    test does not write into a cgroup Talos would own;
  - oomScoreAdj -600 (WithOOMScoreAdj) only where this machine may lower it (CAP_SYS_RESOURCE);
  - seccomp: Talos applies containerd's default profile (contrib/seccomp, seccomp.WithDefaultProfile,
    added last); here the moby-derived default profile containers-common ships,
    /usr/share/containers/seccomp.json, translated for the capabilities granted (the same lineage);
  - depends: `path` (and environmentFile) are checked to exist, `configuration` that the config
    files were written, `network` (addresses) that an address is up, `time` that the clock is past
    2024; a `service` dependency cannot be met here and is an error. The result is printed, and the
    script exits 3 when a dependency is not met (Talos would wait; the caller fails).
"""
import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time

import yaml

# pkg/machinery/constants/constants.go (v1.13.9)
EXTENSION_ROOTFS = "/usr/local/lib/containers"      # ExtensionServiceRootfsPath
USER_CONFIG = "/system/overlays/extensions"          # ExtensionServiceUserConfigPath
DROPPED_CAPS = {"CAP_SYS_BOOT", "CAP_SYS_MODULE"}    # DefaultDroppedCapabilities
SECCOMP_SOURCE = "/usr/share/containers/seccomp.json"


def host(root, path):
    return os.path.join(root, path.lstrip("/"))


def grantable_caps():
    """capability.AllGrantableCapabilities: every capability in the bounding set but the dropped."""
    bnd = int(re.search(r"^CapBnd:\s*([0-9a-f]+)$", open("/proc/self/status").read(), re.M).group(1), 16)
    names = {}
    for line in open("/usr/include/linux/capability.h"):
        m = re.match(r"#define (CAP_[A-Z_]+)\s+(\d+)$", line)
        if m and m.group(1) not in ("CAP_LAST_CAP",):
            names[int(m.group(2))] = m.group(1)
    return sorted(n for b, n in names.items() if bnd >> b & 1 and n not in DROPPED_CAPS)


def seccomp_profile(caps):
    """The moby-format default profile as an OCI LinuxSeccomp, for this machine and these caps."""
    d = json.load(open(SECCOMP_SOURCE))
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    scmp_arch = {"amd64": "SCMP_ARCH_X86_64", "arm64": "SCMP_ARCH_AARCH64"}[arch]
    arches = []
    for a in d.get("archMap", []):
        if a["architecture"] == scmp_arch:
            arches = [a["architecture"]] + a.get("subArchitectures", [])
    syscalls = []
    for s in d["syscalls"]:
        inc, exc = s.get("includes") or {}, s.get("excludes") or {}
        if inc.get("arches") and arch not in inc["arches"]:
            continue
        if exc.get("arches") and arch in exc["arches"]:
            continue
        if inc.get("caps") and not set(inc["caps"]) <= set(caps):
            continue
        if exc.get("caps") and set(exc["caps"]) & set(caps):
            continue
        if inc.get("minKernel") or exc.get("minKernel"):
            continue
        rule = {"names": s["names"], "action": s["action"]}
        if s.get("args"):
            rule["args"] = [{k: v for k, v in a.items() if k in ("index", "value", "valueTwo", "op")} for a in s["args"]]
        if s.get("errnoRet") is not None:
            rule["errnoRet"] = s["errnoRet"]
        syscalls.append(rule)
    out = {"defaultAction": d["defaultAction"], "architectures": arches, "syscalls": syscalls}
    if d.get("defaultErrnoRet") is not None:
        out["defaultErrnoRet"] = d["defaultErrnoRet"]
    return out


def config_doc(patch, name):
    for doc in yaml.safe_load_all(open(patch)):
        if isinstance(doc, dict) and doc.get("kind") == "ExtensionServiceConfig" and doc.get("name") == name:
            return doc
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--service", required=True)
    ap.add_argument("--patch", required=True)
    ap.add_argument("--host", required=True)
    ap.add_argument("--rootfs", required=True)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--endpoints", required=True)
    ap.add_argument("--cgroup", default="")
    a = ap.parse_args()

    spec = yaml.safe_load(open(a.service))
    name, c = spec["name"], spec["container"]
    sec = c.get("security") or {}
    if spec.get("restart") not in ("always", "never", "untilSuccess"):
        sys.exit(f"talos-spec: restart {spec.get('restart')!r}: Talos skips a spec without a valid restart")

    # ExtensionServiceConfigFilesController: each configFiles entry written 0644 to
    # /system/overlays/extensions/NAME/<mountPath without the leading /, / -> ->.
    cfg = config_doc(a.patch, name)
    config_mounts, config_env = [], []
    if cfg:
        for f in cfg.get("configFiles") or []:
            content = f["content"]
            if f["mountPath"].endswith(".toml"):
                eps = ", ".join(f'"{e}"' for e in a.endpoints.split(","))
                content, n = re.subn(r"^endpoints = \[.*\]$", f"endpoints = [{eps}]", content, flags=re.M)
                if n != 1:
                    sys.exit("talos-spec: no single `endpoints = [...]` line in the configuration to point at the stand-ins")
            src = host(a.host, os.path.join(USER_CONFIG, name, f["mountPath"].lstrip("/").replace("/", "-")))
            os.makedirs(os.path.dirname(src), exist_ok=True)
            with open(src, "w") as out:
                out.write(content)
            os.chmod(src, 0o644)
            # extension.go Runner: {"ro", "bind"} at the file's mountPath.
            config_mounts.append({"destination": f["mountPath"], "type": "bind", "source": src, "options": ["ro", "bind"]})
        config_env = list(cfg.get("environment") or [])

    # Condition: the depends, checked instead of waited for.
    unmet = []
    env_file = c.get("environmentFile")
    if env_file and not os.path.exists(host(a.host, env_file)):
        unmet.append(f"environmentFile {env_file}")
    for dep in spec.get("depends") or []:
        if dep.get("path"):
            if not os.path.exists(host(a.host, dep["path"])):
                unmet.append(f"path {dep['path']}")
        elif dep.get("network"):
            addrs = subprocess.run(["ip", "-o", "addr", "show", "up"], capture_output=True, text=True).stdout
            for st in dep["network"]:
                if st != "addresses":
                    unmet.append(f"network {st} (only addresses can be checked here)")
                elif " inet" not in addrs:
                    unmet.append("network addresses")
        elif dep.get("time"):
            if time.time() < 1704067200:
                unmet.append("time")
        elif dep.get("configuration"):
            if not cfg or not config_mounts:
                unmet.append(f"configuration (no ExtensionServiceConfig {name} with configFiles)")
        elif dep.get("service"):
            unmet.append(f"service {dep['service']}")
        else:
            unmet.append(f"unknown dependency {dep}")
    if unmet:
        print("talos-spec: dependencies not met: " + "; ".join(unmet), file=sys.stderr)
        sys.exit(3)

    # Runner: a missing mount source is created 0700.
    mounts = []
    for m in c.get("mounts") or []:
        src = host(a.host, m["source"])
        if not os.path.exists(src):
            os.makedirs(src, mode=0o700)
        mounts.append({"destination": m["destination"], "type": m.get("type", "bind"), "source": src,
                       "options": list(m.get("options") or [])})

    # environment: the spec's environmentFile and environment, then the config document's
    # (Runner), then the runner's own defaults before them (newOCISpecOpts WithEnv(environment.Get)).
    env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    env += list(c.get("environment") or []) + config_env

    caps = grantable_caps()
    default_mounts = [  # containerd pkg/oci/mounts.go defaultMounts
        {"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
         "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
        {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs",
         "options": ["nosuid", "noexec", "nodev"] + ([] if sec.get("writeableSysfs") else ["ro"])},
        {"destination": "/run", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
    ]
    # WithHostHostsFile, WithHostResolvconf (newOCISpecOpts).
    host_files = [
        {"destination": "/etc/hosts", "type": "bind", "source": host(a.host, "/etc/hosts"), "options": ["rbind", "ro"]},
        {"destination": "/etc/resolv.conf", "type": "bind", "source": host(a.host, "/etc/resolv.conf"), "options": ["rbind", "ro"]},
    ]
    for f in host_files:
        if not os.path.exists(f["source"]):
            os.makedirs(os.path.dirname(f["source"]), exist_ok=True)
            open(f["source"], "w").close()
    # oci.WithMounts replaces a default mount with the same destination and appends the others.
    user = mounts + config_mounts
    dests = {m["destination"] for m in user}
    all_mounts = [m for m in default_mounts + host_files if m["destination"] not in dests] + user

    linux = {
        # the default namespaces but network (WithHostNamespace(NetworkNamespace)).
        "namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount")],
        "maskedPaths": sec["maskedPaths"] if sec.get("maskedPaths") is not None else [
            "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
            "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/sys/devices/virtual/powercap", "/proc/scsi"],
        "readonlyPaths": sec["readonlyPaths"] if sec.get("readonlyPaths") is not None else [
            "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
        # WithAllDevicesAllowed.
        "resources": {"devices": [{"allow": True, "access": "rwm"}]},
        "seccomp": seccomp_profile(caps),
    }
    if sec.get("rootfsPropagation"):
        linux["rootfsPropagation"] = sec["rootfsPropagation"]
    if a.cgroup:
        linux["cgroupsPath"] = a.cgroup

    oci = {
        "ociVersion": "1.0.2",
        "root": {"path": os.path.abspath(a.rootfs), "readonly": not sec.get("writeableRootfs", False)},
        "process": {
            "terminal": False,
            "user": {"uid": 0, "gid": 0},
            "args": [c["entrypoint"]] + list(c.get("args") or []),
            "env": env,
            "cwd": "/",
            # WithCapabilities(AllGrantableCapabilities): bounding, permitted, effective.
            "capabilities": {"bounding": caps, "permitted": caps, "effective": caps},
            "noNewPrivileges": True,
            # no rlimits: "allow to inherit from machined -> containerd".
        },
        "mounts": all_mounts,
        "linux": linux,
    }
    # WithOOMScoreAdj(-600): lowering the score needs CAP_SYS_RESOURCE, which a test machine that
    # is itself a container may not have in its bounding set; then it is left out, and said.
    if "CAP_SYS_RESOURCE" in caps:
        oci["process"]["oomScoreAdj"] = -600
    else:
        print("talos-spec: no CAP_SYS_RESOURCE here: oomScoreAdj -600 left out", file=sys.stderr)
    os.makedirs(a.bundle, exist_ok=True)
    with open(os.path.join(a.bundle, "config.json"), "w") as out:
        json.dump(oci, out, indent=1)
    print(f"talos-spec: {a.bundle}/config.json for ext-{name}: {len(all_mounts)} mounts, "
          f"{len(caps)} capabilities, read-only root {oci['root']['readonly']}, restart {spec['restart']}")


if __name__ == "__main__":
    main()
