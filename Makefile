# kprism - node-local load balancer for the Kubernetes API.
# `make` builds build/kprism; `make test` runs every test; see README.md for the rest.

PREFIX ?= /usr/local
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
CXXFLAGS += $(CXXFLAGS_BASE)
# Deferred (=) so `make deps all` works before pkg-config and the -dev packages are installed.
LDLIBS = $(shell pkg-config --libs $(PKGS))

LIB_SRCS := $(filter-out src/main.cc,$(wildcard src/*.cc))
LIB_OBJS := $(LIB_SRCS:src/%.cc=$(BUILD)/obj/%.o)
UNIT_SRCS := $(wildcard tests/unit/*.cc)
IT_SRCS := $(wildcard tests/integration/*.cc)
HARNESS_SRCS := $(wildcard tests/harness/*.cc)
GTEST_LIBS := -lgtest -lgtest_main -lpthread

.PHONY: all test unit integration asan clean install deps run demo bench-failover bench-probes monitoring FORCE
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

# Every test: unit, then integration against the real binary; ends with "N passed, N failed".
test: $(BUILD)/tests/unit $(BUILD)/kprism $(BUILD)/kprism-standin $(BUILD)/tests/integration
ifeq ($(SAN),)
	tests/monitoring/run.sh
endif
	$(TEST_ENV) tests/run.sh $(BUILD)/tests/unit $(BUILD)/tests/integration

# Alerting rules and Grafana dashboard (packaging/monitoring): promtool checks and unit tests.
monitoring:
	tests/monitoring/run.sh

# ASan + UBSan build in its own tree, all tests under it.
asan:
	$(MAKE) BUILD=build/asan SAN=address,undefined OPT=-O1 test

clean:
	rm -rf build

install: $(BUILD)/kprism
	install -D -m 0755 $(BUILD)/kprism $(DESTDIR)$(PREFIX)/bin/kprism
	install -D -m 0644 man/kprism.8 $(DESTDIR)$(PREFIX)/share/man/man8/kprism.8
	install -D -m 0644 man/kprism.toml.5 $(DESTDIR)$(PREFIX)/share/man/man5/kprism.toml.5
	install -D -m 0644 packaging/kprism.toml.example $(DESTDIR)$(PREFIX)/share/doc/kprism/kprism.toml.example

DEB_PKGS := build-essential pkg-config libuv1-dev libssl-dev libtomlplusplus-dev libfmt-dev libsystemd-dev \
	libbenchmark-dev libgtest-dev libgmock-dev openssl curl mandoc prometheus python3
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
