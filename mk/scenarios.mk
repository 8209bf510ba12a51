# SPDX-License-Identifier: Apache-2.0
# The control-plane scenarios (tests/scenarios/README.md): kprism beside two HAProxy setups.

##@ Control-plane scenarios

# kprism, HAProxy with an mTLS GET /readyz check and HAProxy with a TCP check, side by side in one
# run in front of the same three Go kube-apiserver stand-ins: rolling restarts, etcd lost on one
# and on all, an apiserver down and back, the kubelet certificate running out. Checks what kprism
# is built to do, measures all three, prints one table. Not root; about 4 minutes. Ends with
# tests/leftovers.py: no process it started may be left running.
## SCENARIOS_FULL=1: `make scenarios` with full durations (60 s windows, 10 min after a return, 3-minute certificates; about 25 min)
SCENARIOS_FULL ?= 0
## SCENARIOS_BEFORE=: an earlier kprism binary that `make scenarios` runs beside, with its defaults
SCENARIOS_BEFORE ?=
.PHONY: scenarios
scenarios: $(BUILD)/kprism $(BUILD)/kprism-apiserver ## control-plane scenarios, kprism beside HAProxy mTLS /readyz and HAProxy TCP (about 4 min)
	$(TEST_ENV) /usr/bin/python3 tests/scenarios/run.py $(abspath $(BUILD)/kprism) $(abspath $(BUILD)/kprism-apiserver) \
		$(if $(filter 1,$(SCENARIOS_FULL)),--full) $(if $(SCENARIOS_BEFORE),--kprism-before $(SCENARIOS_BEFORE)) \
		--out $(abspath $(BUILD)/scenarios.md); \
		rc=$$?; tests/leftovers.py $(abspath $(BUILD)) || rc=1; exit $$rc

# Discovery (tests/discovery/README.md): kprism with --enable-discovery against the Go
# stand-ins' default/kubernetes EndpointSlice: an apiserver added and one removed under load, the
# snapshot at a start with the API unreachable, corrupt snapshots, an empty slice, an unready
# discovered address, discovery off, IPv6, more than 32, a hung watch, 410, every member replaced,
# zones (from the slices, a configured one winning, invalid ones).
# Not root; about 130 s. Ends with tests/leftovers.py.
.PHONY: test-discovery
test-discovery: $(BUILD)/kprism $(BUILD)/kprism-apiserver ## discovery from the default/kubernetes EndpointSlices against the Go stand-ins (about 130 s)
	$(TEST_ENV) /usr/bin/python3 tests/discovery/run.py $(abspath $(BUILD)/kprism) $(abspath $(BUILD)/kprism-apiserver); \
		rc=$$?; tests/leftovers.py $(abspath $(BUILD)) || rc=1; exit $$rc
