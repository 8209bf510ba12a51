// The version string, set by the Makefile from git (compiled into src/version.cc only).
#pragma once

namespace kprism {
extern const char* const kVersion;
}
