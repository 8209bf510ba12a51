// SPDX-License-Identifier: Apache-2.0
// Rebalancing: plans which long-lived connections to move off over-share upstreams and schedules
// their closes at a bounded rate with jitter; marks over-share upstreams for new connections.
#include "kprism/proxy/rebalancer.h"

#include <fmt/format.h>

#include <algorithm>

#include "kprism/proxy/connection.h"
#include "kprism/proxy/selection.h"
#include "kprism/base/log.h"
#include "kprism/base/random.h"
#include "kprism/daemon/server.h"

namespace kprism {

SharePlan plan_rebalance(const std::vector<ShareInput>& ups, uint32_t budget) {
    SharePlan p;
    p.moves.assign(ups.size(), 0);
    p.target.assign(ups.size(), 0);
    uint64_t total = 0, eligible = 0;
    for (const auto& u : ups) {
        if (u.up) total += u.connections;
        eligible += u.eligible;
    }
    if (eligible == 0 || total == 0) return p;
    p.fair_ceil = static_cast<uint32_t>((total + eligible - 1) / eligible);
    // Excess per upstream: above the fair share rounded up (eligible), or everything (up, but new
    // connections may not go there, e.g. another zone while this one has an up upstream).
    std::vector<uint32_t> excess(ups.size(), 0);
    bool over = false;
    for (size_t i = 0; i < ups.size(); ++i) {
        const ShareInput& u = ups[i];
        if (!u.up) continue;
        uint32_t allowed = u.eligible ? p.fair_ceil : 0;
        p.target[i] = allowed;
        over = over || u.connections > allowed;
        if (u.connections > allowed) excess[i] = std::min(u.connections - allowed, u.movable);
    }
    // Within one of the share everywhere: no plan, and selection is the policy's alone.
    if (!over) p.target.assign(ups.size(), 0);
    // The budget goes one move at a time to the upstream with the most excess left, so a small
    // budget still takes from the worst first.
    while (budget > 0) {
        size_t worst = ups.size();
        for (size_t i = 0; i < ups.size(); ++i)
            if (excess[i] > 0 && (worst == ups.size() || excess[i] > excess[worst])) worst = i;
        if (worst == ups.size()) break;
        --excess[worst];
        ++p.moves[worst];
        --budget;
    }
    return p;
}

Rebalancer::Rebalancer(Server& srv, Stats& stats) : srv_(srv), stats_(stats) {}

void Rebalancer::start() {
    uv_timer_init(srv_.loop(), &timer_);
    timer_.data = this;
    started_ = true;
    refilled_ms_ = uv_now(srv_.loop());
    tokens_ = static_cast<double>(srv_.config().s.rebalance_max_per_minute);
    arm(static_cast<uint64_t>(srv_.config().s.rebalance_interval.count()));
}

void Rebalancer::close() {
    if (closed_) return;
    closed_ = true;
    if (started_) uv_close(reinterpret_cast<uv_handle_t*>(&timer_), nullptr);
}

void Rebalancer::poke() {
    if (!started_ || closed_) return;
    arm(200 + random_below(800));
}

// Every interval, with a tenth of it as jitter, so nodes that started together drift apart.
void Rebalancer::arm(uint64_t delay_ms) {
    if (!started_ || closed_) return;
    uv_timer_start(&timer_, on_timer, delay_ms, 0);
}

void Rebalancer::on_timer(uv_timer_t* t) {
    auto* self = static_cast<Rebalancer*>(t->data);
    self->tick();
    auto every = static_cast<uint64_t>(self->srv_.config().s.rebalance_interval.count());
    self->arm(every - every / 10 + random_below(every / 5 + 1));
}

void Rebalancer::tick() {
    const Settings& s = srv_.config().s;
    UpstreamPool& pool = srv_.control().upstreams();
    const uint64_t now = uv_now(srv_.loop());
    const double per_ms = static_cast<double>(s.rebalance_max_per_minute) / 60000.0;
    tokens_ = std::min(static_cast<double>(s.rebalance_max_per_minute),
                       tokens_ + static_cast<double>(now - refilled_ms_) * per_ms);
    refilled_ms_ = now;
    for (size_t i = 0; i < pool.size(); ++i) pool[i].share_target = 0;
    // Nothing to move to while failing open, and nothing is known without checks.
    if (!s.rebalance || srv_.control().failing_open() || pool.up_count() < 1) return;

    // Eligible as pick_upstream() chooses: up, in the node's zone while one there is up, and in
    // the nearest latency tier under the latency policy.
    const UpstreamSet eligible = eligible_upstreams(pool, now, srv_.config().policy == PolicyKind::latency);
    std::vector<ShareInput> in(pool.size());
    for (size_t i = 0; i < pool.size(); ++i) {
        in[i].up = pool[i].available(now);
        in[i].eligible = (eligible >> i) & 1;
    }
    const auto min_age = static_cast<uint64_t>(s.rebalance_min_age.count());
    srv_.connections().for_each([&](Connection* c) {
        Upstream* u = c->upstream();
        if (!u || !c->splicing() || c->closing() || c->rebalance_pending()) return;
        ++in[u->index].connections;
        if (now - c->started_ms() >= min_age && c->movable()) ++in[u->index].movable;
    });
    auto budget = static_cast<uint32_t>(tokens_);
    SharePlan plan = plan_rebalance(in, budget);
    for (size_t i = 0; i < pool.size(); ++i) pool[i].share_target = plan.target[i];

    uint32_t planned = 0;
    for (uint32_t m : plan.moves) planned += m;
    if (planned == 0) return;
    // Oldest first: the connections of each over-share upstream, by age, then the first `moves`.
    std::vector<std::vector<Connection*>> movable(pool.size());
    srv_.connections().for_each([&](Connection* c) {
        Upstream* u = c->upstream();
        if (u && plan.moves[u->index] > 0 && c->splicing() && !c->closing() && !c->rebalance_pending() &&
            c->movable() && now - c->started_ms() >= min_age)
            movable[u->index].push_back(c);
    });
    const auto window = static_cast<uint64_t>(s.rebalance_window.count());
    std::string moves, shares;
    uint32_t scheduled = 0;
    for (size_t i = 0; i < pool.size(); ++i) {
        if (in[i].up) shares += fmt::format("{}{}={}", shares.empty() ? "" : ",", pool[i].name, in[i].connections);
        auto& v = movable[i];
        uint32_t n = std::min<uint32_t>(plan.moves[i], static_cast<uint32_t>(v.size()));
        if (n == 0) continue;
        std::partial_sort(v.begin(), v.begin() + n, v.end(),
                          [](Connection* a, Connection* b) { return a->started_ms() < b->started_ms(); });
        for (uint32_t k = 0; k < n; ++k) v[k]->close_later_for_rebalance(window ? random_below(window) : 0);
        scheduled += n;
        moves += fmt::format("{}{}={}", moves.empty() ? "" : ",", pool[i].name, n);
    }
    tokens_ -= scheduled;
    stats_.rebalance_scheduled += scheduled;
    log::info("rebalancing: moving the oldest connections off upstreams over their share",
              {{"moves", moves}, {"connections", shares}, {"fair_share", plan.fair_ceil},
               {"window", format_duration(s.rebalance_window)}});
}

}  // namespace kprism
