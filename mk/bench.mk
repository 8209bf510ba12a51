# SPDX-License-Identifier: Apache-2.0
# Benchmarks: micro-benchmarks, probe cost, failover timing, memory under busy connections, kprism against HAProxy and nginx (bench/RESULTS.md).

##@ Benchmarks

BENCH_OBJS := $(patsubst bench/%.cc,$(BUILD)/bench/obj/%.o,$(wildcard bench/*.cc))

# failover and probe_cost use the test harness ("harness/..."): tests/ is on the include path.
$(BUILD)/bench/obj/%.o: bench/%.cc
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) -Itests $(DEPFLAGS) -c $< -o $@
$(BENCH_OBJS): $(BUILD)/harden.stamp
ifneq ($(STATIC)$(wildcard $(BUILD)/static.stamp),0)
$(BENCH_OBJS): $(BUILD)/static.stamp
endif

$(BUILD)/bench/failover: $(BUILD)/bench/obj/failover.o $(HARNESS_OBJS) $(BUILD)/libkprism.a
	$(CXX) $(CXXFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS) -lpthread

$(BUILD)/bench/probe_cost: $(BUILD)/bench/obj/probe_cost.o $(HARNESS_OBJS) $(BUILD)/libkprism.a
	$(CXX) $(CXXFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS) -lpthread

# Storing every connection in systemd's fd store (bench/fdstore_cost.cc, run by bench-restart).
$(BUILD)/bench/fdstore_cost: $(BUILD)/bench/obj/fdstore_cost.o $(BUILD)/libkprism.a
	$(CXX) $(CXXFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Google Benchmark micro-benchmarks (bench/micro.cc; libbenchmark-dev). benchmark_main before
# benchmark: it is a static archive that needs the shared library's symbols.
$(BUILD)/bench/micro: $(BUILD)/bench/obj/micro.o $(BUILD)/libkprism.a
	$(CXX) $(CXXFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS) -lbenchmark_main -lbenchmark -lpthread

-include $(wildcard $(BUILD)/bench/obj/*.d)

.PHONY: bench bench-failover bench-probes bench-probes-go bench-probe-restart bench-busy bench-compare bench-deps

# Micro-benchmarks (about 30 s; see bench/RESULTS.md): BENCH_ARGS=--benchmark_filter=Pick etc.
## BENCH_ARGS=: passed to build/bench/micro, e.g. --benchmark_filter=Pick
bench: $(BUILD)/bench/micro ## Google Benchmark micro-benchmarks, about 30 s (BENCH_ARGS= is passed on)
	$(BUILD)/bench/micro $(BENCH_ARGS)

# CPU per 1000 readiness probes with and without TLS session resumption (about 30 s).
bench-probes: $(BUILD)/kprism $(BUILD)/kprism-standin $(BUILD)/bench/probe_cost ## CPU per 1000 readiness probes, with and without TLS resumption (about 30 s)
	KPRISM_BIN=$(abspath $(BUILD)/kprism) KPRISM_STANDIN=$(abspath $(BUILD)/kprism-standin) $(BUILD)/bench/probe_cost $(SECONDS)

# The same against the Go kube-apiserver stand-in (tests/apiserver): its CPU per 1000 probes with a
# full and a resumed handshake, TLS 1.3 and 1.2 (--tls-max-version), and the cores 5000 nodes cost
# each apiserver (about 75 s; the four modes take turns in 5 slices). PROBE_PATH=/readyz/ping
# probes without the stand-in's two store round trips per /readyz. See bench/RESULTS.md.
## SECONDS=10: seconds per mode of bench-probes and bench-probes-go
## PROBE_PATH=/readyz: the path bench-probes-go probes (health.path)
bench-probes-go: $(BUILD)/kprism $(BUILD)/kprism-apiserver $(BUILD)/bench/probe_cost ## CPU per 1000 probes on the Go apiserver stand-in: TLS 1.3 and 1.2, full and resumed; cores at 5000 nodes (about 75 s)
	KPRISM_BIN=$(abspath $(BUILD)/kprism) $(BUILD)/bench/probe_cost $(SECONDS) --apiserver $(abspath $(BUILD)/kprism-apiserver)$(if $(PROBE_PATH), --path $(PROBE_PATH))

# What a restart of one apiserver costs it in the first 10 s with NODES (1000) nodes probing it
# (bench/restart_cost.py, bench/RESULTS.md): 10 Go stand-in `serve` processes on one store
# are the apiserver, NODES/10 kprism processes with the 10 as endpoints are the nodes (default health
# settings); all 10 are SIGKILLed and restarted 3 s later with new session-ticket keys. Server CPU,
# connections, full and resumed handshakes, requests, the most handshakes in 100 ms and in 1 s, and
# when every prober had it up again. About 85 s per binary at ROUNDS=2. KPRISM_BEFORE=path measures
# that binary too, alternating with the other round by round, and prints after/before;
# RESTART_ARGS= passes more options (--steady, --down, --window, --kprism-args "FLAGS", --keep).
## KPRISM_BEFORE=: an earlier kprism that `make bench-probe-restart` measures beside KPRISM_BIN, alternating
## NODES=1000 ROUNDS=2: probers (a multiple of 10) and rounds per binary of `make bench-probe-restart`
## RESTART_ARGS=: more options for bench/restart_cost.py (`make bench-probe-restart`)
bench-probe-restart: $(BUILD)/kprism $(BUILD)/kprism-apiserver ## what an apiserver restart costs it in its first 10 s with 1000 nodes (about 85 s; KPRISM_BEFORE= compares)
	python3 bench/restart_cost.py --kprism $(or $(KPRISM_BIN),$(abspath $(BUILD)/kprism)) \
		--apiserver $(abspath $(BUILD)/kprism-apiserver) $(if $(KPRISM_BEFORE),--kprism-before $(KPRISM_BEFORE)) \
		--nodes $(or $(NODES),1000) --rounds $(or $(ROUNDS),2) $(RESTART_ARGS)

# Probes on the kept connection (health.new_connection_interval 30 s, the default) against
# a new, resumed, TLS connection per probe (0), on the Go stand-in, the two taking turns, at about
# 1, 100 and 1000 probes/s (1, 2 and 11 kprism processes): its CPU per 1000 probes, kprism's, the
# handshakes, and the cores at 5000 nodes (about 4 minutes; PROBE_PATH as above). See bench/RESULTS.md.
## KEEPALIVE_ARGS=: passed to probe_cost by bench-probes-kept, e.g. --tls 1.2 --rates 100,1000
.PHONY: bench-probes-kept
bench-probes-kept: $(BUILD)/kprism $(BUILD)/kprism-apiserver $(BUILD)/bench/probe_cost ## CPU per 1000 probes on the Go stand-in, kept connection vs a new one per probe, at 1, 100 and 1000/s (about 4 min)
	KPRISM_BIN=$(abspath $(BUILD)/kprism) $(BUILD)/bench/probe_cost --apiserver $(abspath $(BUILD)/kprism-apiserver) \
		--keepalive-compare$(if $(PROBE_PATH), --path $(PROBE_PATH)) $(KEEPALIVE_ARGS)

# Failover timing with default health settings (about 90 s): see bench/RESULTS.md.
bench-failover: $(BUILD)/kprism $(BUILD)/kprism-standin $(BUILD)/bench/failover ## failover timing with default health settings (about 90 s)
	KPRISM_BIN=$(abspath $(BUILD)/kprism) KPRISM_STANDIN=$(abspath $(BUILD)/kprism-standin) $(BUILD)/bench/failover all $(RUNS)

# RSS with 100-1000 stalled busy connections (about 45 s; bench/busy_rss.py, bench/RESULTS.md):
# the figures behind the static pod's memory limit (packaging/kubernetes/kprism.yaml).
bench-busy: $(BUILD)/kprism ## RSS with 100-1000 stalled busy connections, for memory limits (about 45 s)
	python3 bench/busy_rss.py $(BUILD)/kprism 100 250 500 1000

# kprism vs HAProxy (mode tcp) vs nginx stream vs direct on the same three local HTTP backends, one
# table (about 6 minutes on a quiet machine, longer while it waits out other load; needs
# `make bench-deps`): see bench/RESULTS.md. RUNS (3), DURATION (10 s) and the other knobs are
# bench/compare.sh's environment; KPRISM_BIN=path measures another binary; SMOKE=1 only checks
# correctness (1 s runs, exit status 1 on a mismatch).
## KPRISM_BIN=path: the binary `make bench-compare` and `make bench-probe-restart` measure (default: $(BUILD)/kprism)
## SMOKE=1: `make bench-compare` only checks that each proxy passes exact bytes
bench-compare: $(BUILD)/kprism $(BUILD)/kprism-standin $(BUILD)/bench/probe_cost ## kprism vs HAProxy vs nginx stream vs direct, one table (about 6 min; bench-deps)
	KPRISM_BIN=$(or $(KPRISM_BIN),$(abspath $(BUILD)/kprism)) KPRISM_STANDIN=$(abspath $(BUILD)/kprism-standin) \
		PROBE_COST=$(abspath $(BUILD)/bench/probe_cost) bench/compare.sh $(if $(filter 1,$(SMOKE)),--smoke)

# kprism's and HAProxy's own CPU and system calls per keep-alive request and per new connection,
# both up at once in front of the same three nginx backends: wrk in ABBA slices (CPU) and strace -c
# (system calls), one table with the ratios and a 90% interval of each CPU ratio over the rounds
# (about 8 minutes; bench/cpu_compare.sh, bench/RESULTS.md). In the keep-alive rounds it also
# measures the floor: the least any user-space splice spends per request here, with epoll and with
# io_uring (bench/splice_floor.cc), so the ratio to HAProxy is read against what is possible.
# CPU_ARGS=--syscalls-only counts system calls only (they do not depend on the machine's load).
# PLACEMENT="W N P" pins wrk, nginx and both proxies to those CPUs; unset, the scheduler places them.
## CPU_ARGS=: passed to bench/cpu_compare.sh by `make bench-cpu` (--syscalls-only, --cpu-only)
## PLACEMENT=: `make bench-cpu` pins wrk, nginx and both proxies to these CPUs ("0 0 1"); unset: the scheduler places them
.PHONY: bench-cpu
bench-cpu: $(BUILD)/kprism $(BUILD)/bench/splice_floor ## kprism vs HAProxy up at once: CPU (ABBA slices), syscalls and TCP segments per request and per connection, and the floor any splice has (about 8 min; bench-deps)
	KPRISM_BIN=$(or $(KPRISM_BIN),$(abspath $(BUILD)/kprism)) FLOOR_BIN=$(abspath $(BUILD)/bench/splice_floor) \
		bench/cpu_compare.sh $(CPU_ARGS)

# The packages the benchmarks need (bench-compare, bench/bulk.sh), kept out of `make deps`. The
# distribution's nginx and haproxy services are not started meanwhile (a temporary policy-rc.d,
# unless one exists); bench/compare.sh refuses to run if its ports are taken anyway.
BENCH_PKGS := haproxy nginx libnginx-mod-stream wrk socat bc curl python3 iproute2 strace liburing-dev
bench-deps: ## apt-get install the benchmarks' own packages (haproxy, nginx, wrk, ...)
	@if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; prc=; \
	if [ ! -e /usr/sbin/policy-rc.d ]; then \
		printf '#!/bin/sh\nexit 101\n' | $$SUDO tee /usr/sbin/policy-rc.d >/dev/null && $$SUDO chmod 755 /usr/sbin/policy-rc.d && prc=1; \
	fi; \
	$$SUDO apt-get update && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(BENCH_PKGS); \
	rc=$$?; if [ -n "$$prc" ]; then $$SUDO rm -f /usr/sbin/policy-rc.d; fi; exit $$rc

# What discovery costs (bench/discovery_cost.py, bench/RESULTS.md): kprism's CPU and RSS
# over 60 s idle with discovery on (holding its watch) and off, side by side; then the Go stand-in's
# CPU and memory per watch with DISCOVERY_WATCHES (1000) watches of the EndpointSlices, one change
# sent to all, extrapolated to 5000 nodes (about 3 minutes).
## DISCOVERY_WATCHES=1000: concurrent watches of `make bench-discovery`
.PHONY: bench-discovery
bench-discovery: $(BUILD)/kprism $(BUILD)/kprism-apiserver ## what discovery costs: kprism on vs off idle, the apiserver per watch at 1000 watches, 5000 nodes (about 3 min)
	python3 bench/discovery_cost.py --kprism $(or $(KPRISM_BIN),$(abspath $(BUILD)/kprism)) \
		--apiserver $(abspath $(BUILD)/kprism-apiserver) --watches $(or $(DISCOVERY_WATCHES),1000)

# Restarts under a real systemd (tests/systemd/reload.sh, bench/history/restarts.md):
# RESTART_WATCHERS (1000) watches through kprism across RESTART_COUNT (10) `systemctl restart`s
# and as many `dpkg -i` upgrades and SIGKILLs (the crash copy), then through HAProxy (master-worker) across as many reloads and
# one restart, new connections timed throughout; what keep_on_crash costs (CRASH_COST: 1000 idle
# connections and a churn of new ones, off and on); then what keeping every connection in the fd
# store from its start would cost (bench/fdstore_cost.cc at 1000 and 4000 connections, with and
# without). Root; about 8 minutes plus the package build.
## RESTART_WATCHERS=1000 RESTART_COUNT=10: watches and restarts of `make bench-restart`
.PHONY: bench-restart
bench-restart: deb $(BUILD)/kprism-standin $(BUILD)/kprism-apiserver $(BUILD)/bench/fdstore_cost ## watches across 10 systemd restarts, 10 upgrades and 10 SIGKILLs of kprism, HAProxy's reloads beside; the fd store's cost per connection (root; about 5 min)
	BUILD=$(BUILD) KPRISM_INSTALL=deb WATCHERS=$(or $(RESTART_WATCHERS),1000) WATCH_RESTARTS=$(or $(RESTART_COUNT),10) \
		WATCH_UPGRADES=$(or $(RESTART_COUNT),10) WATCH_CRASHES=$(or $(RESTART_COUNT),10) FDSTORE_COST="1000 4000" CRASH_COST=10 \
		tests/systemd/reload.sh

# Memory under membership churn (bench/membership_churn.py, bench/RESULTS.md): kprism's RSS and
# kprism_health_checkers over CHURN_EVENTS (100 000) EndpointSlice watch events alternating two sets
# of 31 endpoints (31 upstreams added and 31 removed each), from a Python TLS stand-in on 63
# loopback addresses; flat within 10 % after 10 000 events of warm-up, or exit status 1 (about 4 min).
## CHURN_EVENTS=100000: watch events of `make bench-membership`
.PHONY: bench-membership
bench-membership: $(BUILD)/kprism ## RSS and checkers over 100 000 discovery events swapping 31 endpoints (about 4 min)
	python3 bench/membership_churn.py --kprism $(or $(KPRISM_BIN),$(abspath $(BUILD)/kprism)) --events $(or $(CHURN_EVENTS),100000)

# The floor `make bench-cpu` measures beside the proxies (bench/splice_floor.cc): epoll, or
# io_uring through liburing (liburing-dev, in bench-deps; nothing else links it).
$(BUILD)/bench/splice_floor: $(BUILD)/bench/obj/splice_floor.o
	$(CXX) $(CXXFLAGS) $(LDFLAGS) -o $@ $^ -luring
