// SPDX-License-Identifier: Apache-2.0
// Fast non-cryptographic randomness for selection and jitter (xoshiro-style, seeded once).
#pragma once

#include <cstdint>

namespace kprism {

uint64_t random_u64();
// Uniform in [0, n); n > 0.
uint64_t random_below(uint64_t n);
// `base` scaled by a random factor in [1 - spread, 1 + spread].
uint64_t jitter(uint64_t base, double spread);
void seed_random(uint64_t seed);

}  // namespace kprism
