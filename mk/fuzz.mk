# SPDX-License-Identifier: Apache-2.0
# libFuzzer targets (tests/fuzz/README.md): clang++ with ASan + UBSan, in build/fuzz.

##@ Fuzzing

# build/fuzz/{config,readyz,admin_request,pem,discovery}_fuzz, built by clang++ with ASan + UBSan, the
# library sources compiled in build/fuzz with -fsanitize=fuzzer-no-link (own rules: clang, and
# none of the GCC-only or release flags of mk/flags.mk).
# `make fuzz-run FUZZ_SECONDS=600` runs each target that long, FUZZ_JOBS (2) at a time, growing
# build/fuzz/corpus/TARGET from the seeds in tests/fuzz/corpus/TARGET; `make fuzz-smoke` runs each
# for FUZZ_SMOKE_SECONDS (15) from the seeds alone (about 45 s, for CI). Both end with one table and
# "fuzz: N passed, N failed", exit status non-zero on a crash; FUZZ_TARGETS= picks targets.
FUZZ_DIR := build/fuzz
## FUZZ_CXX=clang++: the compiler of the fuzz targets
FUZZ_CXX ?= clang++
## FUZZ_TARGETS=config_fuzz ... discovery_fuzz: the targets fuzz-run and fuzz-smoke run
FUZZ_TARGETS ?= config_fuzz readyz_fuzz admin_request_fuzz pem_fuzz discovery_fuzz
## FUZZ_SECONDS=600 FUZZ_SMOKE_SECONDS=15 FUZZ_JOBS=2: how long each target runs, how many at a time
FUZZ_SECONDS ?= 600
FUZZ_SMOKE_SECONDS ?= 15
FUZZ_JOBS ?= 2
FUZZ_CXXFLAGS = -std=c++20 -O1 -g -Wall -Wextra -Wno-missing-field-initializers -Iinclude \
	$(shell pkg-config --cflags $(PKGS)) -DKPRISM_WITH_SYSTEMD=$(WITH_SYSTEMD) \
	-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_LIB_OBJS := $(LIB_SRCS:src/%.cc=$(FUZZ_DIR)/obj/%.o)
FUZZ_BINS := $(addprefix $(FUZZ_DIR)/,$(FUZZ_TARGETS))
.PHONY: fuzz fuzz-bins fuzz-run fuzz-smoke

$(FUZZ_DIR)/obj $(FUZZ_DIR)/obj/fuzz:
	mkdir -p $@

$(FUZZ_DIR)/obj/%.o: src/%.cc | $(FUZZ_DIR)/obj
	@mkdir -p $(@D)
	$(FUZZ_CXX) $(FUZZ_CXXFLAGS) -fsanitize=fuzzer-no-link $(DEPFLAGS) -c $< -o $@

$(FUZZ_DIR)/libkprism.a: $(FUZZ_LIB_OBJS)
	rm -f $@ && ar rcs $@ $^

# The targets themselves: tests/fuzz/NAME.cc compiled to build/fuzz/obj/fuzz/NAME.o.
$(FUZZ_DIR)/obj/fuzz/%.o: tests/fuzz/%.cc | $(FUZZ_DIR)/obj/fuzz
	$(FUZZ_CXX) $(FUZZ_CXXFLAGS) -fsanitize=fuzzer $(DEPFLAGS) -c $< -o $@

$(FUZZ_BINS): $(FUZZ_DIR)/%: $(FUZZ_DIR)/obj/fuzz/%.o $(FUZZ_DIR)/libkprism.a
	$(FUZZ_CXX) $(FUZZ_CXXFLAGS) -fsanitize=fuzzer -o $@ $^ $(LDLIBS)

fuzz: ## build the libFuzzer targets in build/fuzz (clang, ASan + UBSan)
	$(MAKE) -j$(NPROC) fuzz-bins
fuzz-bins: $(FUZZ_BINS) ## build the fuzz targets FUZZ_TARGETS with the current -j

fuzz-run: fuzz ## each fuzz target for FUZZ_SECONDS, FUZZ_JOBS at a time, growing the corpus
	tests/fuzz/run.sh $(FUZZ_DIR) $(FUZZ_SECONDS) $(FUZZ_JOBS) $(FUZZ_TARGETS)

fuzz-smoke: fuzz ## each fuzz target for FUZZ_SMOKE_SECONDS on the seeds (about 45 s, CI)
	tests/fuzz/run.sh --smoke $(FUZZ_DIR) $(FUZZ_SMOKE_SECONDS) $(FUZZ_JOBS) $(FUZZ_TARGETS)

-include $(wildcard $(FUZZ_DIR)/obj/*/*.d)
