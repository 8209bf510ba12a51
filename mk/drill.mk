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
.PHONY: drill
drill: $(BUILD)/kprism $(if $(DRILL_APISERVER),,$(BUILD)/kprism-apiserver) ## datacenter-loss drill: 3 sites in netns, real etcd, kprism beside HAProxy and nginx (root; full about 20 min, DRILL_QUICK=1 about 2 min)
	DRILL_AB_MS=$(DRILL_AB_MS) $(if $(DRILL_CUT_SECONDS),DRILL_CUT_SECONDS=$(DRILL_CUT_SECONDS)) \
		/usr/bin/python3 tests/drill/run.py $(abspath $(BUILD)/kprism) \
		$(if $(DRILL_APISERVER),$(abspath $(DRILL_APISERVER)),$(abspath $(BUILD)/kprism-apiserver)) \
		$(if $(filter 1,$(DRILL_QUICK)),--quick --out $(abspath $(BUILD)/drill.md),--out tests/drill/RESULTS.md) \
		$(if $(DRILL_ONLY),--only $(DRILL_ONLY)) $(if $(filter 1,$(DRILL_KEEP)),--keep)
