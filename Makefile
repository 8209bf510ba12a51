# kprism - node-local load balancer for the Kubernetes API.
# `make` builds build/kprism; `make test` runs every test; see README.md for the rest.

PREFIX ?= /usr/local
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
DESTDIR ?=
BUILD ?= build
CXX ?= g++
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo 0.1.0)

PKGS := libuv fmt openssl
# WITH_SYSTEMD=0 drops libsystemd (static builds); src/notify.cc then speaks the sd_notify and
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
# STATIC=1 (see `make static`): a fully static binary - libuv_a.a, libssl.a/libcrypto.a, fmt
# header-only, static libstdc++/libgcc/glibc, stripped. KPRISM_STATIC=1 makes configuration
# validation reject hostname endpoints (a static glibc cannot load NSS modules to resolve them).
STATIC ?= 0
ifeq ($(STATIC),1)
CXXFLAGS_BASE += -DFMT_HEADER_ONLY -DKPRISM_STATIC=1
LDFLAGS += -static -static-libstdc++ -static-libgcc -s
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

.PHONY: all test test-core test-shipping test-systemd unit integration asan clean install deps run demo bench-failover bench-probes monitoring static test-static FORCE
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

# notify.o is rebuilt when WITH_SYSTEMD changes.
$(BUILD)/systemd.stamp: FORCE | $(BUILD)/obj
	@echo '$(WITH_SYSTEMD)' | cmp -s - $@ || echo '$(WITH_SYSTEMD)' > $@
$(BUILD)/obj/notify.o: $(BUILD)/systemd.stamp

# Every object is rebuilt when STATIC changes (only tracked once a tree has been built STATIC=1).
$(BUILD)/static.stamp: FORCE | $(BUILD)/obj
	@echo '$(STATIC)' | cmp -s - $@ || echo '$(STATIC)' > $@
ifneq ($(STATIC)$(wildcard $(BUILD)/static.stamp),0)
$(LIB_OBJS) $(BUILD)/obj/main.o: $(BUILD)/static.stamp
endif

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

# CPU per 1000 readiness probes with and without TLS session resumption (about 30 s).
bench-probes: $(BUILD)/kprism $(BUILD)/kprism-standin $(BUILD)/bench/probe_cost
	KPRISM_BIN=$(abspath $(BUILD)/kprism) KPRISM_STANDIN=$(abspath $(BUILD)/kprism-standin) $(BUILD)/bench/probe_cost $(SECONDS)

# Failover timing with default health settings (about 90 s): see bench/RESULTS.md.
bench-failover: $(BUILD)/kprism $(BUILD)/kprism-standin $(BUILD)/bench/failover
	KPRISM_BIN=$(abspath $(BUILD)/kprism) KPRISM_STANDIN=$(abspath $(BUILD)/kprism-standin) $(BUILD)/bench/failover all $(RUNS)

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
test-shipping: test-systemd test-static test-packaging test-images test-deb

# Both OCI images built with buildah (FROM scratch, no daemon, no registry) into
# build/images/kprism-talos.oci.tar and build/images/kprism.oci.tar, and their content checked.
.PHONY: images test-images
images test-images: talos-extension
	tests/packaging/images.sh

# The systemd units under systemd-analyze, and the unprivileged certificate copy end to end.
test-systemd: $(BUILD)/kprism $(BUILD)/kprism-standin
	KPRISM_BIN=$(abspath $(BUILD)/kprism) tests/packaging/systemd_verify.sh
	$(TEST_ENV) tests/packaging/copy_cert.sh

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
	debhelper dpkg-dev fakeroot buildah
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
