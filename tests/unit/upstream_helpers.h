// SPDX-License-Identifier: Apache-2.0
// What the unit tests on upstreams share (selection, the pool): an IP endpoint, a loop time, and a
// pool of three up upstreams.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "kprism/base/address.h"
#include "kprism/base/log.h"
#include "kprism/base/random.h"
#include "kprism/upstreams/upstream.h"

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

// Three IP upstreams (10.0.0.1-3), up; random numbers seeded, only errors logged.
class ThreeUpstreams : public ::testing::Test {
protected:
    void SetUp() override {
        log::set_level(log::Level::error);
        seed_random(42);
        for (int i = 0; i < 3; ++i) pool.add(ip("10.0.0." + std::to_string(i + 1)));
        for (size_t i = 0; i < 3; ++i) pool[i].health = Health::up;
    }
    void TearDown() override { log::set_level(log::Level::info); }
    UpstreamPool pool;
};

}  // namespace kprism::unit
