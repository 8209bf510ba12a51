// SPDX-License-Identifier: Apache-2.0
// kprism's own liveness: the heartbeat timer, the stall verdict behind /healthz, and the SIGURG
// stall test hook.
#include "kprism/daemon/heartbeat.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "kprism/base/log.h"

namespace kprism {

void HeartbeatClock::tick(uint64_t now_ns) {
    if (last_tick_ns_ != 0 && now_ns - last_tick_ns_ > kStaleNs) {
        stall_ns_ = now_ns - last_tick_ns_;
        stall_end_ns_ = now_ns;
    }
    last_tick_ns_ = now_ns;
}

bool HeartbeatClock::healthy(uint64_t now_ns, std::string* why) const {
    if (last_tick_ns_ == 0) {
        if (why) *why = "heartbeat not started";
        return false;
    }
    if (now_ns - last_tick_ns_ > kStaleNs) {
        if (why) *why = fmt::format("heartbeat stale: last tick {:.1f}s ago", age_seconds(now_ns));
        return false;
    }
    if (stall_end_ns_ != 0 && now_ns - stall_end_ns_ < kRecentNs) {
        if (why)
            *why = fmt::format("event loop stalled for {:.1f}s, {:.1f}s ago", static_cast<double>(stall_ns_) / 1e9,
                               static_cast<double>(now_ns - stall_end_ns_) / 1e9);
        return false;
    }
    return true;
}

double HeartbeatClock::age_seconds(uint64_t now_ns) const {
    if (last_tick_ns_ == 0 || now_ns < last_tick_ns_) return 0;
    return static_cast<double>(now_ns - last_tick_ns_) / 1e9;
}

void Heartbeat::start(uv_loop_t* loop) {
    uv_timer_init(loop, &timer_);
    timer_.data = this;
    open_ = true;
    clock_.tick(uv_hrtime());
    uv_timer_start(&timer_, on_tick, HeartbeatClock::kPeriodMs, HeartbeatClock::kPeriodMs);
    const char* hooks = std::getenv("KPRISM_TEST_HOOKS");
    if (hooks && std::strcmp(hooks, "1") == 0) {
        uv_signal_init(loop, &stall_signal_);
        stall_signal_.data = this;
        uv_signal_start(&stall_signal_, on_stall_signal, SIGURG);
        hook_ = true;
        log::warn("test hooks enabled: SIGURG stalls the event loop", {{"stall_ms", kTestStallMs}});
    }
}

void Heartbeat::close() {
    if (!open_) return;
    open_ = false;
    uv_close(reinterpret_cast<uv_handle_t*>(&timer_), nullptr);
    if (hook_) uv_close(reinterpret_cast<uv_handle_t*>(&stall_signal_), nullptr);
}

void Heartbeat::on_tick(uv_timer_t* t) { static_cast<Heartbeat*>(t->data)->clock_.tick(uv_hrtime()); }

void Heartbeat::on_stall_signal(uv_signal_t*, int) {
    log::warn("test hook: stalling the event loop", {{"stall_ms", kTestStallMs}});
    std::this_thread::sleep_for(std::chrono::milliseconds(kTestStallMs));  // resumes after EINTR
    log::warn("test hook: stall over");
}

}  // namespace kprism
