# SPDX-License-Identifier: Apache-2.0
# Test targets: unit, integration, test, monitoring and man page checks, checks on the tree, leftover processes, asan.

##@ Testing

## TEST_SHARDS=3: GoogleTest shards run at once per test binary (the integration tests mostly wait)
TEST_SHARDS ?= 3
TEST_ENV = KPRISM_BIN=$(abspath $(BUILD)/kprism) KPRISM_STANDIN=$(abspath $(BUILD)/kprism-standin) TEST_SHARDS=$(TEST_SHARDS)

# One marker per make run, in the environment of every process a recipe starts (sub-makes keep
# the outer one): tests/leftovers.py reports the processes that carry it, or whose executable is
# in the build directories, once the suites are done.
ifndef KPRISM_TEST_RUN
KPRISM_TEST_RUN := $(shell cat /proc/sys/kernel/random/uuid 2>/dev/null || echo $$$$)
endif
export KPRISM_TEST_RUN

.PHONY: test test-core unit integration test-man monitoring test-tree asan test-apiserver
unit: $(BUILD)/tests/unit ## build and run the unit tests
	tests/run.sh $(BUILD)/tests/unit

integration: $(BUILD)/kprism $(BUILD)/kprism-standin $(BUILD)/tests/integration ## build and run the integration tests against the real binary
	$(TEST_ENV) tests/run.sh $(BUILD)/tests/integration

# Every test: unit, then integration against the real binary, then (SHIPPING=1, the default, and
# not under sanitizers) the shipping checks: static binary, Talos extension, static pod, example
# configs, systemd units, Debian package. Each suite ends with "N passed, N failed". Last, no
# process started by the tests may still be running (tests/leftovers.py).
## SHIPPING=1: 0 leaves the shipping checks (test-shipping) out of `make test`
SHIPPING ?= 1
RUN_SHIPPING := $(and $(filter 1,$(SHIPPING)),$(if $(SAN),,1))
LEFTOVER_DIRS = $(abspath $(BUILD)) \
	$(if $(RUN_SHIPPING),$(abspath build/static build/talos-extension build/deb build/images))
test: test-core $(if $(RUN_SHIPPING),test-shipping) ## every test: test-core, test-shipping, then no test process left running
	tests/leftovers.py $(LEFTOVER_DIRS)

test-core: $(BUILD)/tests/unit $(BUILD)/kprism $(BUILD)/kprism-standin $(BUILD)/tests/integration ## unit and integration tests, monitoring, man page and drift checks, test-tree, the Go apiserver stand-in, the demo
ifeq ($(SAN),)
	$(MAKE) --no-print-directory test-apiserver
	tests/monitoring/run.sh
	KPRISM_BIN=$(abspath $(BUILD)/kprism) tests/packaging/man_coverage.sh
	KPRISM_BIN=$(abspath $(BUILD)/kprism) tests/packaging/doc_drift.sh
endif
	$(TEST_ENV) tests/run.sh $(BUILD)/tests/unit $(BUILD)/tests/integration
ifeq ($(SAN),)
	tests/tree/make_help.sh
	tests/tree/spdx.sh
	tests/tree/layers.py --self-test
	tests/tree/loopback_only.py --self-test
	tests/drill/selftest.py
	DEMO_HOLD=0 tests/demo.sh $(BUILD)
endif

# The Go kube-apiserver stand-in (tests/apiserver): go vet, its Go tests (formats pinned to the
# apiserver's source, lifecycle, store, endpoints, TLS), then kubectl against it.
test-apiserver: $(BUILD)/kprism-apiserver $(BUILD)/kprism ## the Go kube-apiserver stand-in: go vet, go test, kubectl smoke; kubectl and python3-kubernetes through kprism (tests/apiserver)
	cd tests/apiserver && $(GO_ENV) $(GO) vet . && $(GO_ENV) $(GO) test -count=1 -timeout 120s .
	tests/apiserver/kubectl_smoke.sh $(abspath $(BUILD)/kprism-apiserver)
	$(TEST_ENV) /usr/bin/python3 tests/apiserver/clients_through_kprism.py $(abspath $(BUILD)/kprism) $(abspath $(BUILD)/kprism-apiserver)

# Checks on the tree itself: every target has its line in `make help`, every source file its
# SPDX-License-Identifier line (src/ and include/ too), no include of a higher layer (ARCHITECTURE.md).
test-tree: ## checks on the tree: `make help` lists every target; SPDX lines; the layers of src/; tests reach only loopback; the drill's own parts
	tests/tree/make_help.sh
	tests/tree/spdx.sh
	tests/tree/layers.py --self-test
	tests/tree/loopback_only.py --self-test
	tests/drill/selftest.py

test-man: $(BUILD)/kprism ## every --help flag and `check` key is in the man pages, mandoc -Tlint is clean, and the numbers they quote match the code (doc_drift.sh)
	KPRISM_BIN=$(abspath $(BUILD)/kprism) tests/packaging/man_coverage.sh
	KPRISM_BIN=$(abspath $(BUILD)/kprism) tests/packaging/doc_drift.sh

# Alerting rules and Grafana dashboard (packaging/monitoring): promtool checks and unit tests.
monitoring: ## promtool checks and unit tests of the alerting rules and the Grafana dashboard
	tests/monitoring/run.sh

# ASan + UBSan build in its own tree: kprism, the stand-in and the unit tests built with them;
# the integration tests (which only drive those binaries) are the ordinary build's. UBSan stops
# the process at its first report, so a finding in kprism fails the test that caused it.
ASAN_MAKE = $(MAKE) BUILD=build/asan SAN=address,undefined OPT=-O1
ASAN_ENV = KPRISM_BIN=$(abspath build/asan/kprism) KPRISM_STANDIN=$(abspath build/asan/kprism-standin) \
	TEST_SHARDS=$(TEST_SHARDS) UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
asan: $(BUILD)/tests/integration ## every unit and integration test against kprism built with ASan + UBSan, in build/asan
	$(ASAN_MAKE) -j$(NPROC) build/asan/kprism build/asan/kprism-standin build/asan/tests/unit
	$(ASAN_ENV) tests/run.sh build/asan/tests/unit $(BUILD)/tests/integration
	tests/leftovers.py $(abspath build/asan $(BUILD))
