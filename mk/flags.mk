# SPDX-License-Identifier: Apache-2.0
# Build configuration: install paths, version, libraries, compiler, sanitizer, hardening and static flags.

## PREFIX=/usr/local DESTDIR= SYSTEMDUNITDIR=: where `make install` puts the files
PREFIX ?= /usr/local
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
DESTDIR ?=
## ARCH=: arm64 cross-compiles for arm64 into build/arm64 (aarch64-linux-gnu-, the packages of `make deps-arm64`)
ARCH ?=
## CROSS=: a cross toolchain prefix such as aarch64-linux-gnu- (ARCH=arm64 sets it): its g++ and ar, the triplet's .pc files
CROSS ?= $(if $(filter arm64,$(ARCH)),aarch64-linux-gnu-)
## BUILD=build: the build directory (objects, binaries, tests); one per configuration
BUILD ?= build$(if $(ARCH),/$(ARCH))
CXX ?= g++
# pkg-config reads the .pc files of the target's multiarch directory (the :arm64 -dev packages for
# aarch64-linux-gnu-) and the architecture-independent ones; the library lists below come from it
# for every architecture alike.
PKG_CONFIG ?= pkg-config
ifneq ($(CROSS),)
CXX := $(CROSS)g++
AR := $(CROSS)ar
PKG_CONFIG := PKG_CONFIG_LIBDIR=/usr/lib/$(CROSS:-=)/pkgconfig:/usr/share/pkgconfig pkg-config
endif
## VERSION=`git describe`: the version string compiled into kprism
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo 0.1.0)
# The release version, from the Debian changelog's first entry without its Debian revision: what
# the Talos extension manifest carries (VERSION above may be a commit hash between releases).
RELEASE := $(shell sed -n '1s/^kprism (\([^-)]*\).*/\1/p' packaging/debian/changelog)

# The libraries, by pkg-config module; libcares resolves hostname endpoints (src/base/resolver.cc).
PKGS := libuv fmt openssl libcares
# WITH_SYSTEMD=0 drops libsystemd (static builds); src/base/sd_notify.cc then speaks the sd_notify and
# socket-activation protocol itself, with the same behaviour.
## WITH_SYSTEMD=1: 0 builds without libsystemd, speaking the same protocol itself
WITH_SYSTEMD ?= 1
ifeq ($(WITH_SYSTEMD),1)
PKGS += libsystemd
endif
## WERROR=0: 1 turns compiler warnings into errors (CI)
WERROR ?= 0
NPROC := $(shell nproc 2>/dev/null || echo 2)
## SAN=: sanitizers, e.g. SAN=address,undefined (`make asan` sets it, with OPT=-O1)
SAN ?=
## OPT=-O2: the optimisation flag
OPT ?= -O2

CXXFLAGS_BASE = -std=c++20 $(OPT) -g -Wall -Wextra -Wshadow=local -Wno-missing-field-initializers \
	-Iinclude $(shell $(PKG_CONFIG) --cflags $(PKGS))
ifeq ($(WERROR),1)
CXXFLAGS_BASE += -Werror
endif
CXXFLAGS_BASE += -DKPRISM_WITH_SYSTEMD=$(WITH_SYSTEMD)
ifneq ($(SAN),)
CXXFLAGS_BASE += -fsanitize=$(SAN) -fno-omit-frame-pointer
LDFLAGS += -fsanitize=$(SAN)
endif
# Hardening (HARDEN=0 leaves it out; checked by `make test-hardening`): stack protector, stack
# clash protection and CET where the compiler has them, PIE, full RELRO (-z relro -z now), a
# non-executable stack, and _FORTIFY_SOURCE=2 - only when optimising (it needs -O1 or more), not
# under sanitizers (ASan intercepts the very functions it replaces), and not when CPPFLAGS or
# CXXFLAGS already choose a level (dpkg-buildflags does, see packaging/debian/rules).
## HARDEN=1: 0 leaves out the hardening flags (PIE, RELRO, stack protector, fortify, CET)
HARDEN ?= 1
ifeq ($(HARDEN),1)
cxx_has = $(shell $(CXX) -Werror $(1) -x c++ -S -o /dev/null /dev/null >/dev/null 2>&1 && echo $(1))
HARDEN_CXXFLAGS := -fstack-protector-strong -fPIE $(call cxx_has,-fstack-clash-protection) \
	$(call cxx_has,-fcf-protection)
ifneq ($(filter -O1 -O2 -O3 -Os -Og -Ofast -Oz,$(OPT)),)
ifeq ($(SAN)$(findstring _FORTIFY_SOURCE,$(CPPFLAGS) $(CXXFLAGS)),)
HARDEN_CXXFLAGS += -U_FORTIFY_SOURCE -D_FORTIFY_SOURCE=2
endif
endif
HARDEN_LDFLAGS := -Wl,-z,relro -Wl,-z,now -Wl,-z,noexecstack
CXXFLAGS_BASE += $(HARDEN_CXXFLAGS)
LDFLAGS += $(HARDEN_LDFLAGS) $(if $(filter 1,$(STATIC)),,-pie)
endif
# STATIC=1 (see `make static`): a fully static binary - libuv_a.a, libssl.a/libcrypto.a, fmt
# header-only, static libstdc++/libgcc/glibc, stripped; with HARDEN=1 a static PIE (-static-pie:
# glibc relocates it itself at start, so it gets ASLR and RELRO without a loader; without
# -static-libstdc++, which g++ 12 wraps in -Bstatic/-Bdynamic so that libc ends up linked
# dynamically into a binary that crashes at once - -static-pie links libstdc++ statically anyway).
# Hostnames are resolved by c-ares (libcares.a here), which reads /etc/hosts and /etc/resolv.conf
# itself: no glibc NSS module is needed, so the static binary resolves them like the dynamic one.
## STATIC=0: 1 links everything statically (`make static` uses it, in build/static)
STATIC ?= 0
ifeq ($(STATIC),1)
CXXFLAGS_BASE += -DFMT_HEADER_ONLY
LDFLAGS += $(if $(filter 1,$(HARDEN)),-static-pie,-static -static-libstdc++) -static-libgcc -s
endif
CXXFLAGS += $(CXXFLAGS_BASE)
# Deferred (=) so `make deps all` works before pkg-config and the -dev packages are installed.
ifeq ($(STATIC),1)
# The static libraries of PKGS: libuv's static .pc is libuv-static; fmt is header-only here.
LDLIBS = $(shell $(PKG_CONFIG) --libs --static $(patsubst libuv,libuv-static,$(filter-out fmt,$(PKGS))))
else
LDLIBS = $(shell $(PKG_CONFIG) --libs $(PKGS))
endif
