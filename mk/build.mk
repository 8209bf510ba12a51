# SPDX-License-Identifier: Apache-2.0
# Objects, library and binaries (kprism, the stand-in apiserver, the test binaries), with header dependencies.

##@ Building

# src/FOLDER/NAME.cc (src/README.md), compiled to $(BUILD)/obj/FOLDER/NAME.o; the CLI's main() is not in the library.
LIB_SRCS := $(filter-out src/cli/main.cc,$(wildcard src/*/*.cc))
LIB_OBJS := $(LIB_SRCS:src/%.cc=$(BUILD)/obj/%.o)
UNIT_SRCS := $(wildcard tests/unit/*.cc tests/unit/*/*.cc)
IT_SRCS := $(wildcard tests/integration/*.cc)
HARNESS_SRCS := $(wildcard tests/harness/*.cc)
# Test objects: tests/DIR/NAME.cc is compiled to $(BUILD)/tests/obj/DIR/NAME.o.
UNIT_OBJS := $(UNIT_SRCS:tests/%.cc=$(BUILD)/tests/obj/%.o)
IT_OBJS := $(IT_SRCS:tests/%.cc=$(BUILD)/tests/obj/%.o)
HARNESS_OBJS := $(HARNESS_SRCS:tests/%.cc=$(BUILD)/tests/obj/%.o)
STANDIN_OBJ := $(BUILD)/tests/obj/standin/standin.o
TEST_OBJS := $(UNIT_OBJS) $(IT_OBJS) $(HARNESS_OBJS) $(STANDIN_OBJ)
GTEST_LIBS := -lgtest -lgtest_main -lpthread
# Header dependencies: -MMD writes NAME.d next to each object, listing the headers it included
# (not the system ones), read back by the -include lines below; -MP adds an empty rule for each
# header, so that removing or renaming one does not stop make.
DEPFLAGS := -MMD -MP

.PHONY: all clean run demo FORCE
all: $(BUILD)/kprism $(BUILD)/kprism-standin $(BUILD)/kprism-apiserver ## build build/kprism, build/kprism-standin and build/kprism-apiserver (the default goal)

$(BUILD)/obj/%.o: src/%.cc | $(BUILD)/obj
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) $(DEPFLAGS) -c $< -o $@

$(BUILD)/obj/base/version.o: src/base/version.cc | $(BUILD)/obj
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) -DKPRISM_VERSION='"$(VERSION)"' $(DEPFLAGS) -c $< -o $@

# Integration tests and the harness include "harness/...": tests/ is on their include path.
$(BUILD)/tests/obj/%.o: tests/%.cc
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) $(test_includes) $(DEPFLAGS) -c $< -o $@
$(BUILD)/tests/obj/integration/%.o $(BUILD)/tests/obj/harness/%.o: test_includes := -Itests

$(BUILD)/obj $(BUILD)/tests:
	mkdir -p $@

# Emptied first: `ar r` alone would keep the members of sources since removed or renamed.
$(BUILD)/libkprism.a: $(LIB_OBJS)
	rm -f $@ && $(AR) rcs $@ $^

# version.o is rebuilt when the version string changes.
$(BUILD)/version.stamp: FORCE | $(BUILD)/obj
	@echo '$(VERSION)' | cmp -s - $@ || echo '$(VERSION)' > $@
$(BUILD)/obj/base/version.o: $(BUILD)/version.stamp

# sd_notify.o is rebuilt when WITH_SYSTEMD changes.
$(BUILD)/systemd.stamp: FORCE | $(BUILD)/obj
	@echo '$(WITH_SYSTEMD)' | cmp -s - $@ || echo '$(WITH_SYSTEMD)' > $@
$(BUILD)/obj/base/sd_notify.o: $(BUILD)/systemd.stamp

# Every object is rebuilt when STATIC changes (only tracked once a tree has been built STATIC=1).
$(BUILD)/static.stamp: FORCE | $(BUILD)/obj
	@echo '$(STATIC)' | cmp -s - $@ || echo '$(STATIC)' > $@
ifneq ($(STATIC)$(wildcard $(BUILD)/static.stamp),0)
$(LIB_OBJS) $(BUILD)/obj/cli/main.o $(TEST_OBJS): $(BUILD)/static.stamp
endif

# Every object is rebuilt, and the binaries relinked, when the hardening flags change.
$(BUILD)/harden.stamp: FORCE | $(BUILD)/obj
	@echo '$(HARDEN) $(HARDEN_CXXFLAGS) $(HARDEN_LDFLAGS)' | cmp -s - $@ || echo '$(HARDEN) $(HARDEN_CXXFLAGS) $(HARDEN_LDFLAGS)' > $@
$(LIB_OBJS) $(BUILD)/obj/cli/main.o $(TEST_OBJS): $(BUILD)/harden.stamp

$(BUILD)/kprism: $(BUILD)/obj/cli/main.o $(BUILD)/libkprism.a
	$(CXX) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/kprism-standin: $(STANDIN_OBJ) $(BUILD)/libkprism.a
	$(CXX) $(CXXFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS) -lpthread

# The Go stand-in for kube-apiserver (tests/apiserver/README.md): Go standard library only, built
# offline (GOPROXY=off) with its build cache and GOPATH inside $(BUILD).
GO ?= go
GO_ENV = CGO_ENABLED=0 $(if $(ARCH),GOARCH=$(ARCH)) GOFLAGS=-trimpath GOPROXY=off GOCACHE=$(abspath $(BUILD))/go-cache GOPATH=$(abspath $(BUILD))/go-path
$(BUILD)/kprism-apiserver: $(wildcard tests/apiserver/*.go) tests/apiserver/go.mod
	@mkdir -p $(@D)
	cd tests/apiserver && $(GO_ENV) $(GO) build -o $(abspath $@) .

$(BUILD)/tests/unit: $(UNIT_OBJS) $(BUILD)/libkprism.a | $(BUILD)/tests
	$(CXX) $(CXXFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(GTEST_LIBS)

$(BUILD)/tests/integration: $(IT_OBJS) $(HARNESS_OBJS) $(BUILD)/libkprism.a | $(BUILD)/tests
	$(CXX) $(CXXFLAGS) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(GTEST_LIBS)

-include $(wildcard $(BUILD)/obj/*/*.d $(BUILD)/tests/obj/*/*.d $(BUILD)/tests/obj/*/*/*.d)

clean: ## remove build/ (every build tree, the packages and images)
	rm -rf build

# Without ENDPOINTS: a self-contained demo with local stand-in apiservers.
# With ENDPOINTS=host:port,...: kprism in the foreground in front of those apiservers.
## ENDPOINTS=host:port,...: `make run` runs kprism in front of these apiservers (KPRISM_ARGS= adds flags)
run: all ## the demo: stand-in apiservers behind kprism (tests/demo.sh); see ENDPOINTS
ifeq ($(ENDPOINTS),)
	tests/demo.sh $(BUILD)
else
	$(BUILD)/kprism --endpoints $(ENDPOINTS) $(KPRISM_ARGS)
endif
demo: run ## the same as `make run`
