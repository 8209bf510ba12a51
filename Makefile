# kprism - node-local load balancer for the Kubernetes API.
# `make` builds build/kprism; `make test` runs every test; see README.md for the rest.

PREFIX ?= /usr/local
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
DESTDIR ?=
BUILD ?= build
CXX ?= g++
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo 0.1.0)

PKGS := libuv fmt openssl
# WITH_SYSTEMD=0 drops libsystemd (static builds); src/sd_notify.cc then speaks the sd_notify and
# socket-activation protocol itself, with the same behaviour.
WITH_SYSTEMD ?= 1
ifeq ($(WITH_SYSTEMD),1)
PKGS += libsystemd
endif
WERROR ?= 0
NPROC := $(shell nproc 2>/dev/null || echo 2)
SAN ?=
OPT ?= -O2

CXXFLAGS_BASE = -std=c++20 $(OPT) -g -Wall -Wextra -Wshadow=local -Wno-missing-field-initializers \
	-Iinclude $(shell pkg-config --cflags $(PKGS))
ifeq ($(WERROR),1)
CXXFLAGS_BASE += -Werror
endif
CXXFLAGS_BASE += -DKPRISM_WITH_SYSTEMD=$(WITH_SYSTEMD)
ifneq ($(SAN),)
CXXFLAGS_BASE += -fsanitize=$(SAN) -fno-omit-frame-pointer
LDFLAGS += -fsanitize=$(SAN)
endif
# Hardening (HARDEN=0 leaves it out; checked by `make test-hardening`): stack protector, stack
# clash protection and CET where the compiler has them, PIE, full RELRO (-z relro -z now), a
# non-executable stack, and _FORTIFY_SOURCE=2 - only when optimising (it needs -O1 or more), not
# under sanitizers (ASan intercepts the very functions it replaces), and not when CPPFLAGS or
# CXXFLAGS already choose a level (dpkg-buildflags does, see packaging/debian/rules).
HARDEN ?= 1
ifeq ($(HARDEN),1)
cxx_has = $(shell $(CXX) -Werror $(1) -x c++ -S -o /dev/null /dev/null >/dev/null 2>&1 && echo $(1))
HARDEN_CXXFLAGS := -fstack-protector-strong -fPIE $(call cxx_has,-fstack-clash-protection) \
	$(call cxx_has,-fcf-protection)
ifneq ($(filter -O1 -O2 -O3 -Os -Og -Ofast -Oz,$(OPT)),)
ifeq ($(SAN)$(findstring _FORTIFY_SOURCE,$(CPPFLAGS) $(CXXFLAGS)),)
HARDEN_CXXFLAGS += -U_FORTIFY_SOURCE -D_FORTIFY_SOURCE=2
endif
endif
HARDEN_LDFLAGS := -Wl,-z,relro -Wl,-z,now -Wl,-z,noexecstack
CXXFLAGS_BASE += $(HARDEN_CXXFLAGS)
LDFLAGS += $(HARDEN_LDFLAGS) $(if $(filter 1,$(STATIC)),,-pie)
endif
# STATIC=1 (see `make static`): a fully static binary - libuv_a.a, libssl.a/libcrypto.a, fmt
# header-only, static libstdc++/libgcc/glibc, stripped; with HARDEN=1 a static PIE (-static-pie:
# glibc relocates it itself at start, so it gets ASLR and RELRO without a loader; without
# -static-libstdc++, which g++ 12 wraps in -Bstatic/-Bdynamic so that libc ends up linked
# dynamically into a binary that crashes at once - -static-pie links libstdc++ statically anyway).
# KPRISM_STATIC=1 makes configuration validation reject hostname endpoints (a static glibc cannot
# load NSS modules to resolve them).
STATIC ?= 0
ifeq ($(STATIC),1)
CXXFLAGS_BASE += -DFMT_HEADER_ONLY -DKPRISM_STATIC=1
LDFLAGS += $(if $(filter 1,$(HARDEN)),-static-pie,-static -static-libstdc++) -static-libgcc -s
endif
CXXFLAGS += $(CXXFLAGS_BASE)
# Deferred (=) so `make deps all` works before pkg-config and the -dev packages are installed.
ifeq ($(STATIC),1)
LDLIBS = $(shell pkg-config --libs --static libuv-static openssl)
else
LDLIBS = $(shell pkg-config --libs $(PKGS))
endif

LIB_SRCS := $(filter-out src/main.cc,$(wildcard src/*.cc))
LIB_OBJS := $(LIB_SRCS:src/%.cc=$(BUILD)/obj/%.o)
UNIT_SRCS := $(wildcard tests/unit/*.cc)
IT_SRCS := $(wildcard tests/integration/*.cc)
HARNESS_SRCS := $(wildcard tests/harness/*.cc)
GTEST_LIBS := -lgtest -lgtest_main -lpthread

.PHONY: all test test-core test-shipping test-systemd unit integration asan clean install deps run demo bench bench-failover bench-probes bench-compare bench-deps monitoring static test-static FORCE
all: $(BUILD)/kprism $(BUILD)/kprism-standin

$(BUILD)/obj/%.o: src/%.cc $(wildcard include/kprism/*.h) | $(BUILD)/obj
	$(CXX) $(CXXFLAGS) -MMD -c $< -o $@

$(BUILD)/obj/version.o: src/version.cc | $(BUILD)/obj
	$(CXX) $(CXXFLAGS) -DKPRISM_VERSION='"$(VERSION)"' -c $< -o $@

$(BUILD)/obj $(BUILD)/tests:
	mkdir -p $@

$(BUILD)/libkprism.a: $(LIB_OBJS)
	ar rcs $@ $^

# version.o is rebuilt when the version string changes.
$(BUILD)/version.stamp: FORCE | $(BUILD)/obj
	@echo '$(VERSION)' | cmp -s - $@ || echo '$(VERSION)' > $@
$(BUILD)/obj/version.o: $(BUILD)/version.stamp

# sd_notify.o is rebuilt when WITH_SYSTEMD changes.
$(BUILD)/systemd.stamp: FORCE | $(BUILD)/obj
	@echo '$(WITH_SYSTEMD)' | cmp -s - $@ || echo '$(WITH_SYSTEMD)' > $@
$(BUILD)/obj/sd_notify.o: $(BUILD)/systemd.stamp

# Every object is rebuilt when STATIC changes (only tracked once a tree has been built STATIC=1).
$(BUILD)/static.stamp: FORCE | $(BUILD)/obj
	@echo '$(STATIC)' | cmp -s - $@ || echo '$(STATIC)' > $@
ifneq ($(STATIC)$(wildcard $(BUILD)/static.stamp),0)
$(LIB_OBJS) $(BUILD)/obj/main.o: $(BUILD)/static.stamp
endif

# Every object is rebuilt, and the binaries relinked, when the hardening flags change.
$(BUILD)/harden.stamp: FORCE | $(BUILD)/obj
	@echo '$(HARDEN) $(HARDEN_CXXFLAGS) $(HARDEN_LDFLAGS)' | cmp -s - $@ || echo '$(HARDEN) $(HARDEN_CXXFLAGS) $(HARDEN_LDFLAGS)' > $@
$(LIB_OBJS) $(BUILD)/obj/main.o: $(BUILD)/harden.stamp

$(BUILD)/kprism: $(BUILD)/obj/main.o $(BUILD)/libkprism.a
	$(CXX) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/kprism-standin: tests/standin/standin.cc $(BUILD)/libkprism.a | $(BUILD)/obj
	$(CXX) $(CXXFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS) -lpthread

$(BUILD)/tests/unit: $(UNIT_SRCS) $(BUILD)/libkprism.a | $(BUILD)/tests
	$(CXX) $(CXXFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(GTEST_LIBS)

$(BUILD)/tests/integration: $(IT_SRCS) $(HARNESS_SRCS) $(BUILD)/libkprism.a | $(BUILD)/tests
	$(CXX) $(CXXFLAGS) -Itests $(LDFLAGS) -o $@ $^ $(LDLIBS) $(GTEST_LIBS)

$(BUILD)/bench/failover: bench/failover.cc $(HARNESS_SRCS) $(BUILD)/libkprism.a
	mkdir -p $(BUILD)/bench
	$(CXX) $(CXXFLAGS) -Itests $(LDFLAGS) -o $@ $^ $(LDLIBS) -lpthread

$(BUILD)/bench/probe_cost: bench/probe_cost.cc $(HARNESS_SRCS) $(BUILD)/libkprism.a
	mkdir -p $(BUILD)/bench
	$(CXX) $(CXXFLAGS) -Itests $(LDFLAGS) -o $@ $^ $(LDLIBS) -lpthread

# Google Benchmark micro-benchmarks (bench/micro.cc; libbenchmark-dev). benchmark_main before
# benchmark: it is a static archive that needs the shared library's symbols.
$(BUILD)/bench/micro: bench/micro.cc $(BUILD)/libkprism.a
	mkdir -p $(BUILD)/bench
	$(CXX) $(CXXFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS) -lbenchmark_main -lbenchmark -lpthread

# Micro-benchmarks (about 30 s; see bench/RESULTS.md): BENCH_ARGS=--benchmark_filter=Pick etc.
bench: $(BUILD)/bench/micro
	$(BUILD)/bench/micro $(BENCH_ARGS)

# CPU per 1000 readiness probes with and without TLS session resumption (about 30 s).
bench-probes: $(BUILD)/kprism $(BUILD)/kprism-standin $(BUILD)/bench/probe_cost
	KPRISM_BIN=$(abspath $(BUILD)/kprism) KPRISM_STANDIN=$(abspath $(BUILD)/kprism-standin) $(BUILD)/bench/probe_cost $(SECONDS)

# Failover timing with default health settings (about 90 s): see bench/RESULTS.md.
bench-failover: $(BUILD)/kprism $(BUILD)/kprism-standin $(BUILD)/bench/failover
	KPRISM_BIN=$(abspath $(BUILD)/kprism) KPRISM_STANDIN=$(abspath $(BUILD)/kprism-standin) $(BUILD)/bench/failover all $(RUNS)

# kprism vs HAProxy (mode tcp) vs nginx stream vs direct on the same three local HTTP backends, one
# table (about 6 minutes on a quiet machine, longer while it waits out other load; needs
# `make bench-deps`): see bench/RESULTS.md. RUNS (3), DURATION (10 s) and the other knobs are
# bench/compare.sh's environment; KPRISM_BIN=path measures another binary; SMOKE=1 only checks
# correctness (1 s runs, exit status 1 on a mismatch).
bench-compare: $(BUILD)/kprism $(BUILD)/kprism-standin $(BUILD)/bench/probe_cost
	KPRISM_BIN=$(or $(KPRISM_BIN),$(abspath $(BUILD)/kprism)) KPRISM_STANDIN=$(abspath $(BUILD)/kprism-standin) \
		PROBE_COST=$(abspath $(BUILD)/bench/probe_cost) bench/compare.sh $(if $(filter 1,$(SMOKE)),--smoke)

# The packages the benchmarks need (bench-compare, bench/bulk.sh), kept out of `make deps`. The
# distribution's nginx and haproxy services are not started meanwhile (a temporary policy-rc.d,
# unless one exists); bench/compare.sh refuses to run if its ports are taken anyway.
BENCH_PKGS := haproxy nginx libnginx-mod-stream wrk socat bc curl python3 iproute2
bench-deps:
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; prc=; \
	if [ ! -e /usr/sbin/policy-rc.d ]; then \
		printf '#!/bin/sh\nexit 101\n' | $$SUDO tee /usr/sbin/policy-rc.d >/dev/null && $$SUDO chmod 755 /usr/sbin/policy-rc.d && prc=1; \
	fi; \
	$$SUDO apt-get update && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(BENCH_PKGS); \
	rc=$$?; if [ -n "$$prc" ]; then $$SUDO rm -f /usr/sbin/policy-rc.d; fi; exit $$rc

TEST_ENV = KPRISM_BIN=$(abspath $(BUILD)/kprism) KPRISM_STANDIN=$(abspath $(BUILD)/kprism-standin)

unit: $(BUILD)/tests/unit
	tests/run.sh $(BUILD)/tests/unit

integration: $(BUILD)/kprism $(BUILD)/kprism-standin $(BUILD)/tests/integration
	$(TEST_ENV) tests/run.sh $(BUILD)/tests/integration

# Every test: unit, then integration against the real binary, then (SHIPPING=1, the default, and
# not under sanitizers) the shipping checks: static binary, Talos extension, static pod, example
# configs, systemd units, Debian package. Each suite ends with "N passed, N failed".
SHIPPING ?= 1
test: test-core $(if $(and $(filter 1,$(SHIPPING)),$(if $(SAN),,1)),test-shipping)

test-core: $(BUILD)/tests/unit $(BUILD)/kprism $(BUILD)/kprism-standin $(BUILD)/tests/integration
ifeq ($(SAN),)
	tests/monitoring/run.sh
	KPRISM_BIN=$(abspath $(BUILD)/kprism) tests/packaging/man_coverage.sh
endif
	$(TEST_ENV) tests/run.sh $(BUILD)/tests/unit $(BUILD)/tests/integration

# About three minutes on two cores, most of it compiling the static binary and the package.
test-shipping: test-systemd test-static test-hardening test-packaging test-images test-deb

# Both OCI images built with buildah (FROM scratch, no daemon, no registry) into
# build/images/kprism-talos.oci.tar and build/images/kprism.oci.tar, and their content checked.
.PHONY: images test-images
images test-images: talos-extension
	tests/packaging/images.sh

# The systemd units under systemd-analyze, and the unprivileged certificate copy end to end.
test-systemd: $(BUILD)/kprism $(BUILD)/kprism-standin
	KPRISM_BIN=$(abspath $(BUILD)/kprism) tests/packaging/systemd_verify.sh
	$(TEST_ENV) tests/packaging/copy_cert.sh

# The hardening flags read back from build/kprism and the static build/static/kprism with readelf
# and nm (PIE, RELRO, BIND_NOW, non-executable stack, stack protector, fortify, CET), after a
# self-test on a trivial program built with and without them; ends "hardening: N passed, M failed".
# test-deb checks the packaged binary the same way.
.PHONY: test-hardening
test-hardening: $(BUILD)/kprism static
	KPRISM_BIN=$(abspath $(BUILD)/kprism) KPRISM_STATIC_BIN=$(abspath build/static/kprism) tests/packaging/hardening.sh

# Alerting rules and Grafana dashboard (packaging/monitoring): promtool checks and unit tests.
monitoring:
	tests/monitoring/run.sh

# Fully static, stripped build/static/kprism (Talos extensions, see README "Static build").
static:
	$(MAKE) -j$(NPROC) BUILD=build/static WITH_SYSTEMD=0 STATIC=1 build/static/kprism

# Checks on the static binary (static, runs in an empty chroot, rejects hostnames) and a subset
# of the integration suite against it; ends with "static: N passed, M failed".
test-static: static $(BUILD)/kprism-standin $(BUILD)/tests/integration
	KPRISM_STATIC_BIN=$(abspath build/static/kprism) KPRISM_STANDIN=$(abspath $(BUILD)/kprism-standin) \
		KPRISM_IT=$(abspath $(BUILD)/tests/integration) tests/static/run.sh

# Talos system extension tree, build/talos-extension/ (manifest.yaml, rootfs/, Containerfile):
# the image content for `buildah bud`/`docker build`, see talos-extension/README.md.
# TALOS_BIN=path uses another binary instead of `make static`'s (for tests only: the validator
# then needs --allow-dynamic for a dynamically linked one).
TALOS_BIN ?= build/static/kprism
TALOS_TREE := build/talos-extension
.PHONY: talos-extension test-packaging
talos-extension: $(if $(filter build/static/kprism,$(TALOS_BIN)),static,$(TALOS_BIN))
	rm -rf $(TALOS_TREE)
	install -d -m 0755 $(TALOS_TREE)/rootfs/usr/local/lib/containers/kprism \
		$(TALOS_TREE)/rootfs/usr/local/etc/containers
	sed 's|@VERSION@|$(VERSION)|' talos-extension/manifest.yaml > $(TALOS_TREE)/manifest.yaml
	chmod 0644 $(TALOS_TREE)/manifest.yaml
	install -m 0644 talos-extension/Containerfile $(TALOS_TREE)/Containerfile
	install -m 0644 talos-extension/kprism.yaml $(TALOS_TREE)/rootfs/usr/local/etc/containers/kprism.yaml
	install -m 0755 $(TALOS_BIN) $(TALOS_TREE)/rootfs/usr/local/lib/containers/kprism/kprism
	chmod -R go-w $(TALOS_TREE)
	talos-extension/validate.py $(if $(filter build/static/kprism,$(TALOS_BIN)),,--allow-dynamic) \
		--service-config talos-extension/examples/extension-service-config.yaml $(TALOS_TREE)

# Packaging checks: the Talos extension tree, the static pod manifest, `kprism check` on every
# example configuration; ends with "packaging: N passed, M failed".
test-packaging: talos-extension $(BUILD)/kprism
	KPRISM_BIN=$(abspath $(BUILD)/kprism) TALOS_TREE=$(abspath $(TALOS_TREE)) \
		TALOS_ALLOW_DYNAMIC=$(if $(filter build/static/kprism,$(TALOS_BIN)),0,1) tests/packaging/run.sh

# ASan + UBSan build in its own tree, all tests under it.
asan:
	$(MAKE) BUILD=build/asan SAN=address,undefined OPT=-O1 test

# libFuzzer targets (tests/fuzz/README.md): build/fuzz/{config,readyz,admin_request,pem}_fuzz, built
# by clang++ with ASan + UBSan, the library sources compiled in build/fuzz with
# -fsanitize=fuzzer-no-link (own rules: clang, and none of the GCC-only or release flags above).
# `make fuzz-run FUZZ_SECONDS=600` runs each target that long, FUZZ_JOBS (2) at a time, growing
# build/fuzz/corpus/TARGET from the seeds in tests/fuzz/corpus/TARGET; `make fuzz-smoke` runs each
# for FUZZ_SMOKE_SECONDS (15) from the seeds alone (about 30 s, for CI). Both end with one table and
# "fuzz: N passed, N failed", exit status non-zero on a crash; FUZZ_TARGETS= picks targets.
FUZZ_DIR := build/fuzz
FUZZ_CXX ?= clang++
FUZZ_TARGETS ?= config_fuzz readyz_fuzz admin_request_fuzz pem_fuzz
FUZZ_SECONDS ?= 600
FUZZ_SMOKE_SECONDS ?= 15
FUZZ_JOBS ?= 2
FUZZ_CXXFLAGS = -std=c++20 -O1 -g -Wall -Wextra -Wno-missing-field-initializers -Iinclude \
	$(shell pkg-config --cflags $(PKGS)) -DKPRISM_WITH_SYSTEMD=$(WITH_SYSTEMD) \
	-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_LIB_OBJS := $(LIB_SRCS:src/%.cc=$(FUZZ_DIR)/obj/%.o)
FUZZ_BINS := $(addprefix $(FUZZ_DIR)/,$(FUZZ_TARGETS))
.PHONY: fuzz fuzz-bins fuzz-run fuzz-smoke

$(FUZZ_DIR)/obj:
	mkdir -p $@

$(FUZZ_DIR)/obj/%.o: src/%.cc $(wildcard include/kprism/*.h) | $(FUZZ_DIR)/obj
	$(FUZZ_CXX) $(FUZZ_CXXFLAGS) -fsanitize=fuzzer-no-link -MMD -c $< -o $@

$(FUZZ_DIR)/libkprism.a: $(FUZZ_LIB_OBJS)
	rm -f $@ && ar rcs $@ $^

$(FUZZ_BINS): $(FUZZ_DIR)/%: tests/fuzz/%.cc tests/fuzz/fuzz_util.h $(FUZZ_DIR)/libkprism.a
	$(FUZZ_CXX) $(FUZZ_CXXFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_DIR)/libkprism.a $(LDLIBS)

fuzz:
	$(MAKE) -j$(NPROC) fuzz-bins
fuzz-bins: $(FUZZ_BINS)

fuzz-run: fuzz
	tests/fuzz/run.sh $(FUZZ_DIR) $(FUZZ_SECONDS) $(FUZZ_JOBS) $(FUZZ_TARGETS)

fuzz-smoke: fuzz
	tests/fuzz/run.sh --smoke $(FUZZ_DIR) $(FUZZ_SMOKE_SECONDS) $(FUZZ_JOBS) $(FUZZ_TARGETS)

-include $(wildcard $(FUZZ_DIR)/obj/*.d)

# Fault injection (tests/faults/README.md): the real kprism in front of TLS stand-in apiservers,
# each in its own network namespace; faults from iptables, a delaying relay, signals and resource
# limits; one line per check, a table of figures per fault, "faults: N passed, M failed". Root
# only, and skipped (exit 0) without `ip netns`; about 2.5 minutes on 2 cores. `make soak` is the
# soak alone (SOAK_SECONDS, default 180; SOAK_SEED); `make soak-asan` the same against kprism
# built with ASan + UBSan in build/faults-asan, its sanitizer output checked (LSan at exit after
# SIGTERM).
FAULTS_ASAN := build/faults-asan
.PHONY: test-faults soak soak-asan
test-faults: $(BUILD)/kprism $(BUILD)/kprism-standin
	$(TEST_ENV) tests/faults/run.py

soak: $(BUILD)/kprism $(BUILD)/kprism-standin
	$(TEST_ENV) tests/faults/run.py --only soak

soak-asan: $(BUILD)/kprism-standin
	$(MAKE) BUILD=$(FAULTS_ASAN) SAN=address,undefined OPT=-O1 $(FAULTS_ASAN)/kprism
	KPRISM_BIN=$(abspath $(FAULTS_ASAN)/kprism) KPRISM_STANDIN=$(abspath $(BUILD)/kprism-standin) SOAK_LABEL=soak-asan \
		tests/faults/run.py --only soak

clean:
	rm -rf build

SYSTEMD_UNITS := kprism.service kprism.socket kprism-admin.socket kprism-cert.path kprism-cert.service
install: $(BUILD)/kprism
	install -D -m 0755 $(BUILD)/kprism $(DESTDIR)$(PREFIX)/bin/kprism
	install -D -m 0644 man/kprism.8 $(DESTDIR)$(PREFIX)/share/man/man8/kprism.8
	install -D -m 0644 man/kprism.toml.5 $(DESTDIR)$(PREFIX)/share/man/man5/kprism.toml.5
	install -D -m 0644 packaging/kprism.toml.example $(DESTDIR)$(PREFIX)/share/doc/kprism/kprism.toml.example
	install -D -m 0755 packaging/systemd/kprism-copy-cert $(DESTDIR)$(PREFIX)/lib/kprism/kprism-copy-cert
	install -d $(DESTDIR)$(SYSTEMDUNITDIR)
	for u in $(SYSTEMD_UNITS); do \
		sed -e 's|/usr/bin/kprism|$(PREFIX)/bin/kprism|g' -e 's|/usr/lib/kprism/|$(PREFIX)/lib/kprism/|g' \
			packaging/systemd/$$u > $(DESTDIR)$(SYSTEMDUNITDIR)/$$u && \
		chmod 0644 $(DESTDIR)$(SYSTEMDUNITDIR)/$$u || exit 1; \
	done

# The Debian package (packaging/debian): dpkg-buildpackage -us -uc -b in a staged copy of the
# tree's tracked and untracked, not ignored files, build/deb/kprism-$(DEB_VERSION)/, with
# packaging/debian as debian/; the .deb lands in build/. test-deb checks its contents and runs the
# extracted binary; test-man checks the man pages against --help and `check` (part of `test`).
DEB_VERSION := $(shell dpkg-parsechangelog -l packaging/debian/changelog -S Version 2>/dev/null | sed 's/-[^-]*$$//')
DEB_STAGE := build/deb/kprism-$(DEB_VERSION)
.PHONY: deb test-deb test-man
deb:
	rm -rf build/deb && mkdir -p $(DEB_STAGE)
	git ls-files -z --cached --others --exclude-standard | \
		xargs -0 sh -c 'for f; do [ -f "$$f" ] && printf "%s\0" "$$f"; done; true' sh | \
		tar --null -T - -cf - | tar -xf - -C $(DEB_STAGE)
	rm -rf $(DEB_STAGE)/debian && cp -a packaging/debian $(DEB_STAGE)/debian
	cd $(DEB_STAGE) && dpkg-buildpackage -us -uc -b -jauto
	rm -f build/kprism_*.deb build/kprism-dbgsym_*.deb build/kprism_*.buildinfo build/kprism_*.changes
	for f in build/deb/kprism_* build/deb/kprism-dbgsym_*; do [ ! -e "$$f" ] || mv "$$f" build/; done
	@ls build/kprism_*.deb

test-deb: deb
	tests/packaging/deb_check.sh build/kprism_$(DEB_VERSION)-*.deb

test-man: $(BUILD)/kprism
	KPRISM_BIN=$(abspath $(BUILD)/kprism) tests/packaging/man_coverage.sh

DEB_PKGS := build-essential pkg-config libuv1-dev libssl-dev libtomlplusplus-dev libfmt-dev libsystemd-dev \
	libbenchmark-dev libgtest-dev libgmock-dev openssl curl mandoc prometheus python3 python3-yaml \
	debhelper dpkg-dev fakeroot buildah clang libclang-rt-dev llvm iptables iproute2
deps:
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	$$SUDO apt-get update && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(DEB_PKGS)

# Without ENDPOINTS: a self-contained demo with local stand-in apiservers.
# With ENDPOINTS=host:port,...: kprism in the foreground in front of those apiservers.
run: all
ifeq ($(ENDPOINTS),)
	tests/demo.sh $(BUILD)
else
	$(BUILD)/kprism --endpoints $(ENDPOINTS) $(KPRISM_ARGS)
endif
demo: run

-include $(wildcard $(BUILD)/obj/*.d)
