// SPDX-License-Identifier: Apache-2.0
// The one place the build's version string is compiled in (rebuilt when it changes).
#include "kprism/base/version.h"

#ifndef KPRISM_VERSION
#define KPRISM_VERSION "0.1.0"
#endif

namespace kprism {
const char* const kVersion = KPRISM_VERSION;
const char* const kUserAgent = "kprism/" KPRISM_VERSION;
}
