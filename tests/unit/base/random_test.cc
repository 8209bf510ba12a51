// SPDX-License-Identifier: Apache-2.0
// The random number generator (kprism/base/random.h): seeding, bounds, jitter.
#include "kprism/base/random.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace kprism {
namespace {

TEST(Random, SeedIsDeterministicAndBounded) {
    seed_random(7);
    uint64_t a = random_u64(), b = random_u64();
    seed_random(7);
    EXPECT_EQ(random_u64(), a);
    EXPECT_EQ(random_u64(), b);
    for (int i = 0; i < 1000; ++i) EXPECT_LT(random_below(3), 3u);
    for (int i = 0; i < 1000; ++i) {
        uint64_t j = jitter(1000, 0.2);
        EXPECT_GE(j, 800u);
        EXPECT_LE(j, 1200u);
    }
    EXPECT_EQ(jitter(1000, 0.0), 1000u);
}

}  // namespace
}  // namespace kprism
