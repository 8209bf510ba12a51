// SPDX-License-Identifier: Apache-2.0
// A fixed-bucket histogram of durations in seconds, as Prometheus exposes them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kprism {

// Per-bucket (non-cumulative) counts; render cumulatively. Upper bounds are inclusive (le).
struct Histogram {
    static constexpr double kBounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};
    static constexpr size_t kBuckets = sizeof kBounds / sizeof kBounds[0];

    uint64_t counts[kBuckets + 1] = {};  // the last one is +Inf
    uint64_t count = 0;
    double sum = 0;

    void observe(double v) {
        size_t i = 0;
        while (i < kBuckets && v > kBounds[i]) ++i;
        ++counts[i];
        ++count;
        sum += v;
    }
};

}  // namespace kprism
