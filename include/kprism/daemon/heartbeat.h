// SPDX-License-Identifier: Apache-2.0
// kprism's own liveness: a 1 s heartbeat timer on the event loop, and whether it kept time.
#pragma once

#include <uv.h>

#include <cstdint>
#include <string>

namespace kprism {

// The bookkeeping behind /healthz, on a monotonic clock in nanoseconds (uv_hrtime), so the verdict
// is computed at request time, not from the loop's cached time.
//
// libuv runs due timers before polling for I/O, so after a stall the heartbeat ticks before an
// admin request that waited through the stall is read: "the last tick is old" alone would never be
// seen. Each tick therefore also measures the gap since the previous one; a gap over kStaleNs is a
// stall, and the loop counts as unhealthy until kRecentNs after the stall ended.
class HeartbeatClock {
public:
    static constexpr uint64_t kPeriodMs = 1000;
    static constexpr uint64_t kStaleNs = 5'000'000'000;
    static constexpr uint64_t kRecentNs = 10'000'000'000;

    void tick(uint64_t now_ns);
    // True when the loop is live; otherwise false with a one-line reason in *why.
    bool healthy(uint64_t now_ns, std::string* why = nullptr) const;
    // Seconds since the last tick (0 before the first).
    double age_seconds(uint64_t now_ns) const;

private:
    uint64_t last_tick_ns_ = 0;  // 0: no tick yet
    uint64_t stall_end_ns_ = 0;  // the tick that ended the last stall; 0: none
    uint64_t stall_ns_ = 0;      // that stall's length
};

// Owned by the Server: start() after the listeners, close() with the other handles. The handles
// are members, closed without callbacks; the Server frees them after the loop has stopped.
//
// Test hook: with KPRISM_TEST_HOOKS=1 in the environment, SIGURG blocks the loop for
// kTestStallMs, so tests can see /healthz report the stall. Never set it in production: without
// it SIGURG keeps its default action (ignored).
class Heartbeat {
public:
    static constexpr uint64_t kTestStallMs = 7000;

    void start(uv_loop_t* loop);
    void close();
    bool healthy(std::string* why = nullptr) const { return clock_.healthy(uv_hrtime(), why); }
    double age_seconds() const { return clock_.age_seconds(uv_hrtime()); }

private:
    static void on_tick(uv_timer_t* t);
    static void on_stall_signal(uv_signal_t* s, int signum);

    HeartbeatClock clock_;
    uv_timer_t timer_{};
    uv_signal_t stall_signal_{};
    bool open_ = false;
    bool hook_ = false;
};

}  // namespace kprism
