// SPDX-License-Identifier: Apache-2.0
// The version string, set by the Makefile from git (compiled into src/base/version.cc only), and
// the User-Agent made of it.
#pragma once

namespace kprism {
extern const char* const kVersion;
// "kprism/<version>": the User-Agent of kprism's own requests to the apiservers (readiness
// probes, discovery's list and watch).
extern const char* const kUserAgent;
}
