# SPDX-License-Identifier: Apache-2.0
# The datacenter-loss drill (tests/drill/README.md): three sites in network namespaces, a real etcd.

##@ Datacenter-loss drill

# Three sites A, B and witness W behind a router namespace (latency from a user-space delay line:
# this kernel has no netem), one real 3-member etcd 3.4 (/usr/bin/etcd), the Go apiserver stand-in
# on each control-plane node storing through its own site's member, and on every node every
# balancer of tests/drill/balancers.toml with kubelet-like clients behind each; network cuts in
# the router. Root; skips with a message otherwise or when a tool is missing. Asserts kprism's
# outcome only. The quick run (the A-B cut with the leader in A) writes build/drill.md; the full
# run writes tests/drill/RESULTS.md.
## DRILL_QUICK=1: `make drill` runs the A-B cut with the etcd leader in A only, held 60 s (about 2 min; in CI)
DRILL_QUICK ?= 0
## DRILL_CUT_SECONDS=: how long `make drill` holds each cut (default 90; quick 60)
DRILL_CUT_SECONDS ?=
## DRILL_AB_MS=10: round-trip latency between datacenters A and B in `make drill`
DRILL_AB_MS ?= 10
## DRILL_APISERVER=: the apiserver stand-in binary `make drill` runs (default build/kprism-apiserver)
DRILL_APISERVER ?=
## DRILL_ONLY=: comma-separated cuts for `make drill` (1,2a,2b,3,4,5,6)
DRILL_ONLY ?=
## DRILL_KEEP=1: `make drill` keeps its work directory (every log and config) and prints where
DRILL_KEEP ?= 0
## DRILL_CLIENTS=both: the client models `make drill` runs behind every balancer: both, h2 (client-go's HTTP/2) or http1
DRILL_CLIENTS ?= both
## DRILL_BALANCERS_EXTRA=FILE: more [[balancer]] blocks for `make drill` (balancers you built; format of tests/drill/balancers.toml)
DRILL_BALANCERS_EXTRA ?=
## DRILL_LINK_MBIT=100, DRILL_JITTER_MS=1: each site-to-site link's bandwidth each way and its delay jitter in `make drill`
DRILL_LINK_MBIT ?= 100
DRILL_JITTER_MS ?= 1

# The HTTP/2 client model (tests/drill/client): Go's standard library and Debian's
# golang-golang-x-net-dev (x/net/http2, for client-go's ReadIdleTimeout and PingTimeout), built in
# GOPATH mode from /usr/share/gocode, offline.
DRILL_CLIENT_ENV = CGO_ENABLED=0 GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS=-trimpath GOPROXY=off GOCACHE=$(abspath $(BUILD))/go-cache
$(BUILD)/drill-client: $(wildcard tests/drill/client/*.go)
	@mkdir -p $(@D)
	cd tests/drill/client && $(DRILL_CLIENT_ENV) $(GO) vet . && $(DRILL_CLIENT_ENV) $(GO) build -o $(abspath $@) .

.PHONY: drill
drill: $(BUILD)/kprism $(BUILD)/drill-client $(if $(DRILL_APISERVER),,$(BUILD)/kprism-apiserver) ## datacenter-loss drill: 3 sites in netns, real etcd, kprism beside HAProxy, nginx and any DRILL_BALANCERS_EXTRA; HTTP/2 and HTTP/1.1 clients (root; full about 21 min, DRILL_QUICK=1 about 2 min)
	DRILL_AB_MS=$(DRILL_AB_MS) $(if $(DRILL_CUT_SECONDS),DRILL_CUT_SECONDS=$(DRILL_CUT_SECONDS)) \
		DRILL_CLIENTS=$(DRILL_CLIENTS) DRILL_LINK_MBIT=$(DRILL_LINK_MBIT) DRILL_JITTER_MS=$(DRILL_JITTER_MS) \
		$(if $(DRILL_BALANCERS_EXTRA),DRILL_BALANCERS_EXTRA=$(abspath $(DRILL_BALANCERS_EXTRA))) \
		/usr/bin/python3 tests/drill/run.py --client $(abspath $(BUILD)/drill-client) $(abspath $(BUILD)/kprism) \
		$(if $(DRILL_APISERVER),$(abspath $(DRILL_APISERVER)),$(abspath $(BUILD)/kprism-apiserver)) \
		$(if $(filter 1,$(DRILL_QUICK)),--quick --out $(abspath $(BUILD)/drill.md),--out tests/drill/RESULTS.md) \
		$(if $(DRILL_ONLY),--only $(DRILL_ONLY)) $(if $(filter 1,$(DRILL_KEEP)),--keep)
