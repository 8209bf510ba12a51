// The version string, set by the Makefile from git or VERSION.
#pragma once

#ifndef KPRISM_VERSION
#define KPRISM_VERSION "0.1.0"
#endif

namespace kprism {
inline constexpr const char* kVersion = KPRISM_VERSION;
}
