# SPDX-License-Identifier: Apache-2.0
# Fault injection and the soak (tests/faults/README.md): root only, network namespaces.

##@ Fault injection

# The real kprism in front of TLS stand-in apiservers, each in its own network namespace; faults
# from iptables, a delaying relay, signals and resource limits; one line per check, a table of
# figures per fault, "faults: N passed, M failed". Root only, and skipped (exit 0) without `ip
# netns`; about 2.5 minutes on 2 cores. `make soak` is the soak alone (SOAK_SECONDS, default 180;
# SOAK_SEED); `make soak-asan` the same against kprism built with ASan + UBSan in
# build/faults-asan, its sanitizer output checked (LSan at exit after SIGTERM). Each ends with
# tests/leftovers.py: no process they started may be left running, whether they passed or not.
FAULTS_ASAN := build/faults-asan
.PHONY: test-faults soak soak-asan
test-faults: $(BUILD)/kprism $(BUILD)/kprism-standin ## fault injection, upstreams in network namespaces (root; about 2.5 min)
	$(TEST_ENV) tests/faults/run.py; rc=$$?; tests/leftovers.py $(abspath $(BUILD)) || rc=1; exit $$rc

## SOAK_SECONDS=180 SOAK_SEED=: how long the soak runs, and its random seed
soak: $(BUILD)/kprism $(BUILD)/kprism-standin ## the soak alone, for SOAK_SECONDS (180)
	$(TEST_ENV) tests/faults/run.py --only soak; rc=$$?; tests/leftovers.py $(abspath $(BUILD)) || rc=1; exit $$rc

soak-asan: $(BUILD)/kprism-standin ## the soak against an ASan + UBSan kprism in build/faults-asan
	$(MAKE) BUILD=$(FAULTS_ASAN) SAN=address,undefined OPT=-O1 $(FAULTS_ASAN)/kprism
	KPRISM_BIN=$(abspath $(FAULTS_ASAN)/kprism) KPRISM_STANDIN=$(abspath $(BUILD)/kprism-standin) SOAK_LABEL=soak-asan \
		tests/faults/run.py --only soak; rc=$$?; tests/leftovers.py $(abspath $(FAULTS_ASAN) $(BUILD)) || rc=1; exit $$rc
