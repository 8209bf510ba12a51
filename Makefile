# SPDX-License-Identifier: Apache-2.0
# kprism - node-local load balancer for the Kubernetes API.
# `make help` lists every target and variable with one line each (start there); `make` builds
# build/kprism; `make test` runs every test; see README.md for the rest.
#
# The rules live in mk/, one file per concern, included in this order (later files use the
# variables of earlier ones):
#   mk/flags.mk     configuration variables; compiler, sanitizer, hardening and static flags
#   mk/build.mk     objects (with their header dependencies), library, binaries, clean, run
#   mk/test.mk      unit, integration, test, test-core, checks on the tree, asan
#   mk/shipping.mk  static, Talos extension, images, systemd, install, Debian package
#   mk/bench.mk     benchmarks
#   mk/fuzz.mk      libFuzzer targets
#   mk/faults.mk    fault injection and the soak
#   mk/scenarios.mk the control-plane scenarios beside HAProxy
#   mk/chaos.mk     make chaos: seeded random events, invariants checked
#   mk/drill.mk     make drill: the datacenter-loss drill in network namespaces, real etcd
#   mk/arm64.mk     the arm64 cross build and its tests under qemu-user
#   mk/deps.mk      make deps
#   mk/runtime.mk   make test-runtime: the static pods under podman, the extension under runc
#   mk/help.mk      make help (mk/help.awk): a target's `## ` comment on its rule line is its line
#                   there, a `## NAME=default: ...` comment above a variable documents it

.DEFAULT_GOAL := all

include mk/flags.mk mk/build.mk mk/test.mk mk/shipping.mk mk/bench.mk mk/fuzz.mk mk/faults.mk mk/scenarios.mk mk/drill.mk \
	mk/chaos.mk mk/runtime.mk mk/arm64.mk mk/deps.mk mk/help.mk
