# SPDX-License-Identifier: Apache-2.0
# Chaos (tests/chaos/README.md): the real kprism in front of real TLS stand-in apiservers under a
# random, seeded sequence of events, with invariants I1-I9 checked every 150 ms.

##@ Chaos

# As root it runs in a network namespace of its own (unshare): blackholes by iptables there, and
# hostile discovered addresses off the host are unreachable; otherwise on the host's loopback
# without those. Ends with tests/leftovers.py: no process it started may be left running.
## CHAOS_SECONDS=: time budget of `make chaos` in seconds (default 180; seeds derived from CHAOS_BASE_SEED)
CHAOS_SECONDS ?= 180
## CHAOS_SEED=: run only this seed (or a comma-separated list), e.g. to replay a violation
CHAOS_SEED ?=
## CHAOS_BASE_SEED=: the seed the list of seeds is derived from (default 1)
CHAOS_BASE_SEED ?= 1
## CHAOS_SEED_SECONDS=: seconds of events per seed (default 35)
CHAOS_SEED_SECONDS ?= 35
.PHONY: chaos
chaos: $(BUILD)/kprism $(BUILD)/kprism-apiserver $(BUILD)/kprism-standin ## random seeded faults, discovery, reloads and restarts under traffic; invariants checked (about 3 min)
	$(TEST_ENV) KPRISM_BIN=$(abspath $(or $(KPRISM_BIN),$(BUILD)/kprism)) \
		KPRISM_APISERVER=$(abspath $(BUILD)/kprism-apiserver) KPRISM_STANDIN=$(abspath $(BUILD)/kprism-standin) \
		CHAOS_SECONDS=$(CHAOS_SECONDS) CHAOS_SEED=$(CHAOS_SEED) CHAOS_BASE_SEED=$(CHAOS_BASE_SEED) \
		CHAOS_SEED_SECONDS=$(CHAOS_SEED_SECONDS) /usr/bin/python3 tests/chaos/run.py; \
		rc=$$?; tests/leftovers.py $(abspath $(BUILD)) || rc=1; exit $$rc
