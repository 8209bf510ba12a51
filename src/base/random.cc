// SPDX-License-Identifier: Apache-2.0
// splitmix64-seeded xorshift64* generator; the loop is single-threaded so no locking.
#include "kprism/base/random.h"

#include <sys/random.h>

#include <ctime>

namespace kprism {
namespace {

uint64_t g_state = 0;

uint64_t splitmix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

}  // namespace

void seed_random(uint64_t seed) { g_state = splitmix(seed) | 1; }

uint64_t random_u64() {
    if (g_state == 0) {
        uint64_t seed = 0;
        if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != sizeof seed)
            seed = static_cast<uint64_t>(time(nullptr)) ^ reinterpret_cast<uintptr_t>(&seed);
        seed_random(seed);
    }
    g_state ^= g_state >> 12;
    g_state ^= g_state << 25;
    g_state ^= g_state >> 27;
    return g_state * 0x2545f4914f6cdd1dULL;
}

uint64_t random_below(uint64_t n) { return random_u64() % n; }

uint64_t jitter(uint64_t base, double spread) {
    double f = 1.0 - spread + 2.0 * spread * (static_cast<double>(random_u64() >> 11) / 9007199254740992.0);
    return static_cast<uint64_t>(static_cast<double>(base) * f);
}

}  // namespace kprism
