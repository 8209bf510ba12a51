// SPDX-License-Identifier: Apache-2.0
// What the unit tests on upstreams share (selection, the pool): an IP endpoint and a loop time.
#pragma once

#include <cstdint>
#include <string>

#include "kprism/base/address.h"

namespace kprism::unit {

// A loop time (uv_now) well after zero, so that backoffs and retries can lie before it.
inline constexpr uint64_t kNow = 100000;

// An IP endpoint, as the configuration would give it.
inline HostPort ip(const std::string& host, uint16_t port = 6443) {
    HostPort hp;
    hp.host = host;
    hp.port = port;
    hp.is_ip = true;
    return hp;
}

}  // namespace kprism::unit
