# SPDX-License-Identifier: Apache-2.0
# arm64: the cross build (Debian's aarch64-linux-gnu toolchain, the :arm64 -dev packages) and its tests under qemu-user.

##@ arm64

# One tree, build/arm64-static, built like `make static` builds build/static: this Makefile with
# ARCH=arm64 (mk/flags.mk: the cross g++ and ar, pkg-config on the arm64 .pc files) and
# WITH_SYSTEMD=0 STATIC=1. kprism there is what the images and the Talos extension ship for
# linux/arm64; the stand-in and the unit and integration test binaries are linked the same way,
# so that they run under qemu-user with no arm64 loader or library. The packages come from
# `make deps-arm64`. (`make ARCH=arm64` alone builds a dynamic tree in build/arm64.)
ARM64_MAKE = $(MAKE) ARCH=arm64 WITH_SYSTEMD=0 STATIC=1 BUILD=build/arm64-static
.PHONY: arm64 static-arm64 test-arm64
static-arm64: ## build/arm64-static/kprism, the static binary for arm64 (cross-built; make deps-arm64)
	$(ARM64_MAKE) -j$(NPROC) build/arm64-static/kprism

arm64: ## static-arm64, and beside it the arm64 stand-in and unit and integration test binaries
	$(ARM64_MAKE) -j$(NPROC) build/arm64-static/kprism build/arm64-static/kprism-standin \
		build/arm64-static/tests/unit build/arm64-static/tests/integration

# The arm64 unit tests, then the arm64 integration tests against the arm64 kprism and stand-in, all
# under qemu-aarch64-static invoked explicitly (tests/arm64/run.sh: no binfmt_misc needed, and
# which tests it leaves out, and why), with the harness's deadlines ARM64_TIME_SCALE times longer;
# then no test process left running. Needs `make deps-arm64`; not part of `make test` or CI
# (README.md, "Build and test", gives its figures).
## ARM64_TIME_SCALE=4: how many times longer the harness waits under emulation (KPRISM_TEST_TIME_SCALE)
ARM64_TIME_SCALE ?= 4
## ARM64_RERUN=5: a binary's failed tests, up to this many, run once more alone (tests/run.sh)
ARM64_RERUN ?= 5
test-arm64: arm64 ## the arm64 unit and integration tests under qemu-user (make deps-arm64 first)
	ARM64_TIME_SCALE=$(ARM64_TIME_SCALE) TEST_RERUN_FAILED=$(ARM64_RERUN) TEST_SHARDS=$(TEST_SHARDS) tests/arm64/run.sh
	tests/leftovers.py $(abspath build/arm64-static)
