// SPDX-License-Identifier: Apache-2.0
// Selection policies (random, least-connections, latency) and the eligibility rules around them.
#include "kprism/proxy/selection.h"

#include <utility>

#include "kprism/base/random.h"

namespace kprism {
namespace {

class RandomPolicy final : public Policy {
public:
    Upstream* choose(Upstream* const* c, size_t n) override { return c[random_below(n)]; }
    const char* name() const override { return policy_name(PolicyKind::random); }
};

// Fewest active connections; ties broken uniformly at random (reservoir of size one).
Upstream* least_connections(Upstream* const* c, size_t n) {
    Upstream* best = nullptr;
    size_t ties = 0;
    for (size_t i = 0; i < n; ++i) {
        if (!best || c[i]->active < best->active) {
            best = c[i];
            ties = 1;
        } else if (c[i]->active == best->active && random_below(++ties) == 0) {
            best = c[i];
        }
    }
    return best;
}

class LeastConnectionsPolicy final : public Policy {
public:
    Upstream* choose(Upstream* const* c, size_t n) override { return least_connections(c, n); }
    const char* name() const override { return policy_name(PolicyKind::least_connections); }
};

// Random within the nearest tier of ready upstreams (probe RTT, with hysteresis; see
// UpstreamPool::update_tiers). Readiness is decided before this runs, so speed never wins over it.
class LatencyPolicy final : public Policy {
public:
    Upstream* choose(Upstream* const* c, size_t n) override {
        Upstream* tier[kMaxUpstreams];
        size_t t = 0;
        for (size_t i = 0; i < n; ++i)
            if (c[i]->fast_tier) tier[t++] = c[i];
        if (t > 0) return tier[random_below(t)];
        // No tier member left untried: the lowest measured RTT, unmeasured last.
        Upstream* best = c[0];
        for (size_t i = 1; i < n; ++i)
            if (c[i]->rtt_ms >= 0 && (best->rtt_ms < 0 || c[i]->rtt_ms < best->rtt_ms)) best = c[i];
        return best;
    }
    const char* name() const override { return policy_name(PolicyKind::latency); }
};

}  // namespace

std::unique_ptr<Policy> make_policy(PolicyKind kind) {
    switch (kind) {
    case PolicyKind::least_connections: return std::make_unique<LeastConnectionsPolicy>();
    case PolicyKind::latency: return std::make_unique<LatencyPolicy>();
    case PolicyKind::random: break;
    }
    return std::make_unique<RandomPolicy>();
}

namespace {

// Rebalancing's plan: the candidates below their share, moved to the front, and how many there
// are; or n when none is below (then all stay candidates). Counted live (Upstream::active), so a
// short connection that comes and goes does not use up the returning upstream's place.
size_t below_share_first(Upstream** c, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; ++i)
        if (c[i]->below_share()) std::swap(c[k++], c[i]);
    return k > 0 ? k : n;
}

}  // namespace

UpstreamSet eligible_upstreams(const UpstreamPool& pool, uint64_t now, bool latency_tier) {
    bool zone_up = false, tier_up = false;
    for (size_t i = 0; i < pool.size(); ++i) {
        const Upstream& u = pool[i];
        zone_up = zone_up || (!pool.node_zone.empty() && u.zone == pool.node_zone && u.available(now));
        tier_up = tier_up || (u.available(now) && u.fast_tier);
    }
    UpstreamSet set = 0;
    for (size_t i = 0; i < pool.size() && i < kMaxUpstreams; ++i) {
        const Upstream& u = pool[i];
        if (u.available(now) && (!zone_up || u.zone == pool.node_zone) && (!latency_tier || !tier_up || u.fast_tier))
            set |= UpstreamSet{1} << i;
    }
    return set;
}

Upstream* pick_upstream(UpstreamPool& pool, Policy& policy, TriedSet tried, uint64_t now, bool fallback) {
    Upstream* up[kMaxUpstreams];
    Upstream* eligible_up[kMaxUpstreams];
    Upstream* unknown[kMaxUpstreams];
    Upstream* down[kMaxUpstreams];
    size_t n_up = 0, n_eligible = 0, n_unknown = 0, n_down = 0;
    Upstream* backoff = nullptr;
    const UpstreamSet eligible = eligible_upstreams(pool, now, false);
    const bool any_up = eligible != 0;  // without the tier, some upstream is eligible iff one is up
    for (size_t i = 0; i < pool.size() && i < kMaxUpstreams; ++i) {
        Upstream& u = pool[i];
        if ((tried >> i) & 1 || !u.resolved || u.removed) continue;
        if (u.available(now)) {
            up[n_up++] = &u;
            if ((eligible >> i) & 1) eligible_up[n_eligible++] = &u;
        } else if (!u.passed_check && (u.source != Source::configured || any_up)) {
            // Never ready since kprism started. Discovered (or read from the snapshot): not even
            // fail-open or a TLS bootstrap sends there (an address the slices list is not yet
            // known to be an apiserver of this cluster). Configured: only while no upstream is up
            // (failing open, bootstrap); a retry after every up one refused is not failing open.
            continue;
        } else if (u.in_backoff(now)) {
            if (!backoff || u.retry_at_ms < backoff->retry_at_ms) backoff = &u;
        } else if (u.health == Health::unknown) {
            unknown[n_unknown++] = &u;
        } else {
            down[n_down++] = &u;
        }
    }
    // While an up upstream in the node's zone exists, stay in the zone (untried ones first, then
    // the rest of the up ones as retries); with none there every up one is eligible. While
    // rebalancing fills an upstream below its share (rebalancer.h), new connections go there first.
    if (n_eligible > 0) return policy.choose(eligible_up, below_share_first(eligible_up, n_eligible));
    if (n_up > 0) return policy.choose(up, below_share_first(up, n_up));
    if (!fallback) return nullptr;
    if (n_unknown > 0) return policy.choose(unknown, n_unknown);
    if (n_down > 0) return policy.choose(down, n_down);
    return backoff;
}

}  // namespace kprism
