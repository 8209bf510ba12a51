// SPDX-License-Identifier: Apache-2.0
// The version string, set by the Makefile from git (compiled into src/base/version.cc only).
#pragma once

namespace kprism {
extern const char* const kVersion;
}
