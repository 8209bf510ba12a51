// SPDX-License-Identifier: Apache-2.0
// Rebalancing: moves long-lived connections off upstreams that hold more than their share of this
// node's connections (an apiserver that came back holds none), oldest first, at a bounded rate,
// each close at a random moment inside a window.
#pragma once

#include <uv.h>

#include <cstdint>
#include <vector>

namespace kprism {

class Server;
struct Stats;

// One upstream as the plan sees it.
struct ShareInput {
    bool eligible = false;  // up, and new connections may go to it (eligible_upstreams(), selection.h)
    bool up = false;        // up (an up upstream outside the eligible set should hold nothing)
    uint32_t connections = 0;  // established connections on it, not already being moved
    uint32_t movable = 0;      // of those, the ones old enough to be moved (rebalance.min_age)
};

struct SharePlan {
    std::vector<uint32_t> moves;     // per upstream: connections to close now
    std::vector<uint32_t> target;    // per upstream: its share while some upstream is above it (0: none)
    uint32_t fair_ceil = 0;          // the most connections an eligible upstream should hold
};

// Pure: which connections to move so that every eligible upstream holds at most its fair share
// (rounded up) of the connections on up upstreams, at most `budget` moves in all, never from an
// upstream whose connection would have no better place (each move goes from an upstream above
// the fair share; some eligible one is then below it). Down upstreams are left to close_on_down.
SharePlan plan_rebalance(const std::vector<ShareInput>& ups, uint32_t budget);

// Owned by the Server. Its timer is closed by close(); a tick plans with the configuration in
// force (so a reload applies at the next tick) and schedules the closes on the connections.
class Rebalancer {
public:
    Rebalancer(Server& srv, Stats& stats);
    Rebalancer(const Rebalancer&) = delete;
    Rebalancer& operator=(const Rebalancer&) = delete;

    void start();
    void close();
    // An upstream's health changed: plan within a second (a returning apiserver at once), not
    // at the next interval.
    void poke();

private:
    void tick();
    void arm(uint64_t delay_ms);
    static void on_timer(uv_timer_t* t);

    Server& srv_;
    Stats& stats_;
    uv_timer_t timer_{};
    bool started_ = false;
    bool closed_ = false;
    double tokens_ = 0;         // moves allowed now (a bucket of max_per_minute, refilled evenly)
    uint64_t refilled_ms_ = 0;  // uv_now() of the last refill
};

}  // namespace kprism
