// SPDX-License-Identifier: Apache-2.0
// At most one log line a second for an event that can repeat thousands of times a second.
#pragma once

#include <cstdint>
#include <optional>

namespace kprism {

// Usage: `if (auto n = limiter.take(uv_now(loop))) log::warn("...", {{"suppressed", *n}});`
class LogLimiter {
public:
    static constexpr uint64_t kPeriodMs = 1000;

    // When a line may be written now: how many were suppressed since the last one. Otherwise
    // nullopt, and this occurrence is counted as suppressed.
    std::optional<uint64_t> take(uint64_t now_ms) {
        if (logged_ && now_ms - last_ms_ < kPeriodMs) {
            ++suppressed_;
            return std::nullopt;
        }
        logged_ = true;
        last_ms_ = now_ms;
        uint64_t n = suppressed_;
        suppressed_ = 0;
        return n;
    }

private:
    bool logged_ = false;
    uint64_t last_ms_ = 0;
    uint64_t suppressed_ = 0;
};

}  // namespace kprism
