// Selection policies (random, least-connections) and the eligibility rules around them.
#include "kprism/policy.h"

#include "kprism/random.h"

namespace kprism {
namespace {

class RandomPolicy final : public Policy {
public:
    Upstream* choose(Upstream* const* c, size_t n) override { return c[random_below(n)]; }
    const char* name() const override { return "random"; }
};

class LeastConnectionsPolicy final : public Policy {
public:
    // Fewest active connections; ties broken uniformly at random (reservoir of size one).
    Upstream* choose(Upstream* const* c, size_t n) override {
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
    const char* name() const override { return "least-connections"; }
};

}  // namespace

std::unique_ptr<Policy> make_policy(std::string_view name) {
    if (name == "random") return std::make_unique<RandomPolicy>();
    if (name == "least-connections") return std::make_unique<LeastConnectionsPolicy>();
    return nullptr;
}

Upstream* pick_upstream(UpstreamPool& pool, Policy& policy, TriedSet tried, uint64_t now) {
    Upstream* candidates[kMaxUpstreams];
    size_t n = 0;
    Upstream* fallback = nullptr;
    for (size_t i = 0; i < pool.size() && i < kMaxUpstreams; ++i) {
        Upstream& u = pool[i];
        if ((tried >> i) & 1 || !u.resolved) continue;
        if (u.available(now)) {
            candidates[n++] = &u;
        } else if (!fallback || (u.healthy && !fallback->healthy) ||
                   (u.healthy == fallback->healthy && u.retry_at_ms < fallback->retry_at_ms)) {
            fallback = &u;
        }
    }
    if (n > 0) return policy.choose(candidates, n);
    return fallback;
}

}  // namespace kprism
