# SPDX-License-Identifier: Apache-2.0
# arm64: the cross build (Debian's aarch64-linux-gnu toolchain, the :arm64 -dev packages) and its tests under qemu-user.

##@ arm64

# Two trees, built like `make static` and `make asan` build theirs, by this Makefile with other
# variables (ARCH=arm64 in mk/flags.mk: the cross g++ and ar, pkg-config on the arm64 .pc files):
#   build/arm64-static/kprism  fully static and stripped, WITH_SYSTEMD=0 STATIC=1: what the images
#                              and the Talos extension ship for linux/arm64
#   build/arm64/               kprism (dynamic, WITH_SYSTEMD=0: no libsystemd:arm64 needed), the
#                              C++ stand-in and the unit and integration test binaries
# The packages come from `make deps-arm64`.
ARM64_MAKE = $(MAKE) ARCH=arm64 WITH_SYSTEMD=0
.PHONY: arm64 static-arm64
static-arm64: ## build/arm64-static/kprism, the static binary for arm64 (cross-built; make deps-arm64)
	$(ARM64_MAKE) -j$(NPROC) BUILD=build/arm64-static STATIC=1 build/arm64-static/kprism

arm64: static-arm64 ## static-arm64, and in build/arm64 kprism, the stand-in and the unit and integration tests for arm64
	$(ARM64_MAKE) -j$(NPROC) BUILD=build/arm64 build/arm64/kprism build/arm64/kprism-standin \
		build/arm64/tests/unit build/arm64/tests/integration
