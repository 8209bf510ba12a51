// SPDX-License-Identifier: Apache-2.0
// Selection (kprism/proxy/selection.h): the policies, eligibility (zone, latency tier), and
// pick_upstream's order: tried, unchecked, fallback, below share.
#include "kprism/proxy/selection.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "../upstream_helpers.h"
#include "kprism/base/log.h"
#include "kprism/base/random.h"

namespace kprism {
namespace {

using unit::ip;
using unit::kNow;

// Upstreams 10.0.1.1, .2, ... in the given zones, all up, on a node in `node_zone`.
UpstreamPool zoned(std::string node_zone, std::initializer_list<const char*> zones) {
    UpstreamPool z;
    z.node_zone = std::move(node_zone);
    int i = 0;
    for (const char* zone : zones) z.add(ip("10.0.1." + std::to_string(++i)), zone);
    for (size_t k = 0; k < z.size(); ++k) z[k].health = Health::up;
    return z;
}

class PickTest : public unit::ThreeUpstreams {
protected:
    std::map<Upstream*, int> histogram(Policy& p, int n, TriedSet tried = 0) {
        std::map<Upstream*, int> hits;
        for (int i = 0; i < n; ++i) ++hits[pick_upstream(pool, p, tried, kNow)];
        return hits;
    }
    std::unique_ptr<Policy> random = make_policy(PolicyKind::random);
    std::unique_ptr<Policy> least = make_policy(PolicyKind::least_connections);
};

TEST(MakePolicy, Names) {
    for (const char* name : {"random", "least-connections", "latency"}) {
        PolicyKind k;
        ASSERT_TRUE(parse_policy(name, k)) << name;
        auto p = make_policy(k);
        ASSERT_NE(p, nullptr) << name;
        EXPECT_STREQ(p->name(), name);
        EXPECT_STREQ(policy_name(k), name);
    }
    PolicyKind k = PolicyKind::latency;
    EXPECT_FALSE(parse_policy("round-robin", k));
    EXPECT_FALSE(parse_policy("", k));
    EXPECT_FALSE(parse_policy("Random", k));
    EXPECT_EQ(k, PolicyKind::latency);  // untouched on failure
}

// Every choice the configuration accepts for `policy` names a policy.
TEST(MakePolicy, EveryConfigChoiceParses) {
    for (const auto& o : options()) {
        if (std::string_view(o.key) != "policy") continue;
        ASSERT_FALSE(o.choices.empty());
        for (const char* c : o.choices) {
            PolicyKind k;
            EXPECT_TRUE(parse_policy(c, k)) << c;
        }
    }
}

TEST_F(PickTest, SkipsTried) {
    for (int i = 0; i < 50; ++i) EXPECT_EQ(pick_upstream(pool, *random, 0b011, kNow), &pool[2]);
    for (int i = 0; i < 50; ++i) EXPECT_EQ(pick_upstream(pool, *least, 0b101, kNow), &pool[1]);
}

TEST_F(PickTest, AllTriedReturnsNull) {
    EXPECT_EQ(pick_upstream(pool, *random, 0b111, kNow), nullptr);
    EXPECT_EQ(pick_upstream(pool, *least, ~TriedSet{0}, kNow), nullptr);
    for (size_t i = 0; i < 3; ++i) pool[i].health = Health::down;
    EXPECT_EQ(pick_upstream(pool, *random, 0b111, kNow), nullptr);
}

TEST_F(PickTest, EmptyPoolReturnsNull) {
    UpstreamPool empty;
    EXPECT_EQ(pick_upstream(empty, *random, 0, kNow), nullptr);
}

TEST_F(PickTest, SkipsNotUp) {
    pool[0].health = Health::down;
    pool[2].health = Health::unknown;
    for (int i = 0; i < 50; ++i) EXPECT_EQ(pick_upstream(pool, *random, 0, kNow), &pool[1]);
    EXPECT_EQ(pool.available_count(kNow), 1u);
    EXPECT_EQ(pool.up_count(), 1u);
}

TEST_F(PickTest, SkipsUnresolved) {
    pool[1].resolved = false;
    pool[2].resolved = false;
    for (int i = 0; i < 20; ++i) EXPECT_EQ(pick_upstream(pool, *random, 0, kNow), &pool[0]);
    // An unresolved upstream is never a fallback either.
    EXPECT_EQ(pick_upstream(pool, *random, 0b001, kNow), nullptr);
}

TEST_F(PickTest, NoFallbackWhenFailClosed) {
    for (size_t i = 0; i < 3; ++i) pool[i].health = Health::down;
    EXPECT_EQ(pick_upstream(pool, *random, 0, kNow, /*fallback=*/false), nullptr);
    EXPECT_NE(pick_upstream(pool, *random, 0, kNow, /*fallback=*/true), nullptr);
    pool[1].health = Health::up;
    EXPECT_EQ(pick_upstream(pool, *random, 0, kNow, false), &pool[1]);
}

// Failing open (and during a TLS bootstrap, which falls back the same way), a discovered or
// snapshot upstream is a candidate only once it passed a check in this process; a configured one
// always is.
TEST_F(PickTest, FallbackNeverSendsToAnUncheckedDiscoveredOrSnapshotUpstream) {
    pool[0].health = Health::unknown;
    pool[0].source = Source::snapshot;
    pool[0].checked_earlier = true;  // checked by an earlier process: not enough
    pool[1].health = Health::down;
    pool[1].source = Source::discovered;
    pool[2].health = Health::down;
    pool[2].source = Source::configured;
    for (int i = 0; i < 50; ++i) EXPECT_EQ(pick_upstream(pool, *random, 0, kNow, true), &pool[2]);
    EXPECT_EQ(pick_upstream(pool, *random, 0b100, kNow, true), nullptr);
    pool[0].passed_check = true;  // answered ready once since kprism started
    EXPECT_EQ(pick_upstream(pool, *random, 0b100, kNow, true), &pool[0]);
}

TEST_F(PickTest, FallbackUnknownBeforeDown) {
    pool[0].health = Health::down;
    pool[1].health = Health::unknown;
    pool[2].health = Health::down;
    for (int i = 0; i < 20; ++i) EXPECT_EQ(pick_upstream(pool, *random, 0, kNow), &pool[1]);
    // With the unknown one tried, both down ones are reachable.
    auto hits = histogram(*random, 600, 0b010);
    EXPECT_GT(hits[&pool[0]], 200);
    EXPECT_GT(hits[&pool[2]], 200);
    EXPECT_EQ(hits.count(&pool[1]), 0u);
}

TEST_F(PickTest, FallbackOutOfBackoffBeforeInBackoff) {
    for (size_t i = 0; i < 3; ++i) pool[i].health = Health::down;
    pool[0].retry_at_ms = kNow + 1000;
    pool[1].retry_at_ms = kNow - 1;  // backoff already over
    pool[2].retry_at_ms = kNow + 500;
    for (int i = 0; i < 20; ++i) EXPECT_EQ(pick_upstream(pool, *random, 0, kNow), &pool[1]);
    // Then earliest retry first.
    EXPECT_EQ(pick_upstream(pool, *random, 0b010, kNow), &pool[2]);
    EXPECT_EQ(pick_upstream(pool, *random, 0b110, kNow), &pool[0]);
    EXPECT_EQ(pick_upstream(pool, *random, 0b111, kNow), nullptr);
}

TEST_F(PickTest, FallbackEarliestRetryFirst) {
    for (size_t i = 0; i < 3; ++i) pool[i].health = Health::down;
    pool[0].retry_at_ms = kNow + 3000;
    pool[1].retry_at_ms = kNow + 1000;
    pool[2].retry_at_ms = kNow + 2000;
    EXPECT_EQ(pick_upstream(pool, *random, 0, kNow), &pool[1]);
    EXPECT_EQ(pick_upstream(pool, *random, 0b010, kNow), &pool[2]);
    EXPECT_EQ(pick_upstream(pool, *random, 0b110, kNow), &pool[0]);
    EXPECT_EQ(pick_upstream(pool, *least, 0, kNow), &pool[1]);
}

TEST_F(PickTest, FallbackVisitsEveryUntriedUpstream) {
    pool[0].health = Health::down;
    pool[1].health = Health::unknown;
    pool[2].health = Health::down;
    pool[2].retry_at_ms = kNow + 10;
    TriedSet tried = 0;
    for (int i = 0; i < 3; ++i) {
        Upstream* p = pick_upstream(pool, *random, tried, kNow);
        ASSERT_NE(p, nullptr) << "attempt " << i;
        EXPECT_FALSE((tried >> p->index) & 1);
        tried |= TriedSet{1} << p->index;
    }
    EXPECT_EQ(tried, 0b111u);
    EXPECT_EQ(pick_upstream(pool, *random, tried, kNow), nullptr);
}

TEST_F(PickTest, UpBeatsAnyFallback) {
    pool[0].health = Health::unknown;
    pool[1].health = Health::down;
    for (int i = 0; i < 20; ++i) EXPECT_EQ(pick_upstream(pool, *random, 0, kNow), &pool[2]);
}

// A retry after every up upstream refused the connection is not failing open: it may go to a
// down upstream that passed a check before, never to a configured one that has not (rule 1 of
// kprism(8)). Once none is up, that one is a fallback again.
TEST_F(PickTest, RetryPastTheUpOnesNeverSendsToAnUncheckedConfiguredUpstream) {
    pool[0].health = Health::up;
    pool[1].health = Health::unknown;  // added by a reload, not checked yet
    pool[2].health = Health::down;
    pool[2].passed_check = true;  // ready once, down now
    EXPECT_EQ(pick_upstream(pool, *random, 0b001, kNow, true), &pool[2]);
    pool[2].passed_check = false;
    EXPECT_EQ(pick_upstream(pool, *random, 0b001, kNow, true), nullptr);
    pool[2].passed_check = true;
    pool[0].health = Health::down;
    std::map<Upstream*, int> hits;
    for (int i = 0; i < 50; ++i) ++hits[pick_upstream(pool, *random, 0b001, kNow, true)];
    EXPECT_EQ(hits[&pool[1]], 50);  // failing open: the unknown one comes first
}

// Passive backoff only orders the fallback; the health checker's "up" verdict wins.
TEST_F(PickTest, UpInBackoffIsStillAvailable) {
    pool[0].retry_at_ms = kNow + 5000;
    EXPECT_TRUE(pool[0].in_backoff(kNow));
    EXPECT_TRUE(pool[0].available(kNow));
    EXPECT_GT(histogram(*random, 600)[&pool[0]], 100);
}

TEST_F(PickTest, ZonePreferredWhileUp) {
    UpstreamPool z = zoned("a", {"b", "a", "b", "a"});
    std::map<Upstream*, int> hits;
    for (int i = 0; i < 1000; ++i) ++hits[pick_upstream(z, *random, 0, kNow)];
    EXPECT_EQ(hits.size(), 2u);
    EXPECT_GT(hits[&z[1]], 300);
    EXPECT_GT(hits[&z[3]], 300);
    // Retries leave the zone once its up upstreams are tried.
    Upstream* r = pick_upstream(z, *random, 0b1010, kNow);
    ASSERT_NE(r, nullptr);
    EXPECT_NE(r->zone, "a");
    // No up upstream in the zone: any up one.
    z[1].health = Health::down;
    z[3].health = Health::down;
    r = pick_upstream(z, *random, 0, kNow);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->zone, "b");
}

// The rule pick_upstream() and rebalancing share: up, the node's zone while one there is up, and
// (asked with the tier) the nearest latency tier while one is up.
TEST(EligibleUpstreams, ZoneThenTier) {
    UpstreamPool z = zoned("a", {"b", "a", "a", "a"});
    z[3].removed = true;
    z[0].fast_tier = z[2].fast_tier = true;
    EXPECT_EQ(eligible_upstreams(z, kNow, false), UpstreamSet{0b0110});
    EXPECT_EQ(eligible_upstreams(z, kNow, true), UpstreamSet{0b0100});
    // No tier member up: the tier leaves nobody out.
    z[0].fast_tier = z[2].fast_tier = false;
    EXPECT_EQ(eligible_upstreams(z, kNow, true), UpstreamSet{0b0110});
    // None up in the zone: every up upstream.
    z[1].health = z[2].health = Health::down;
    EXPECT_EQ(eligible_upstreams(z, kNow, false), UpstreamSet{0b0001});
    // No node zone: every up upstream.
    z[1].health = Health::up;
    z.node_zone.clear();
    EXPECT_EQ(eligible_upstreams(z, kNow, false), UpstreamSet{0b0011});
    z[0].health = z[1].health = Health::down;
    EXPECT_EQ(eligible_upstreams(z, kNow, true), UpstreamSet{0});
}

TEST_F(PickTest, NoNodeZoneMeansNoPreference) {
    UpstreamPool z = zoned("", {"a", ""});
    std::map<Upstream*, int> hits;
    for (int i = 0; i < 1000; ++i) ++hits[pick_upstream(z, *random, 0, kNow)];
    EXPECT_GT(hits[&z[0]], 350);
    EXPECT_GT(hits[&z[1]], 350);
}

TEST_F(PickTest, LeastConnectionsPicksMinimum) {
    pool[0].active = 5;
    pool[1].active = 2;
    pool[2].active = 9;
    for (int i = 0; i < 50; ++i) EXPECT_EQ(pick_upstream(pool, *least, 0, kNow), &pool[1]);
    // The minimum among the untried ones.
    EXPECT_EQ(pick_upstream(pool, *least, 0b010, kNow), &pool[0]);
    // The minimum among the available ones.
    pool[1].health = Health::down;
    EXPECT_EQ(pick_upstream(pool, *least, 0, kNow), &pool[0]);
}

TEST_F(PickTest, LeastConnectionsBreaksTiesAcrossAll) {
    pool[0].active = 1;
    pool[1].active = 1;
    pool[2].active = 4;
    auto hits = histogram(*least, 2000);
    EXPECT_EQ(hits.count(&pool[2]), 0u);
    EXPECT_GT(hits[&pool[0]], 800);
    EXPECT_GT(hits[&pool[1]], 800);
}

TEST_F(PickTest, RandomDistributesAcrossAll) {
    auto hits = histogram(*random, 3000);
    ASSERT_EQ(hits.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_GT(hits[&pool[i]], 800) << "upstream " << i;
}

TEST_F(PickTest, RandomDistributesAcrossAvailableOnly) {
    pool[1].health = Health::down;
    auto hits = histogram(*random, 2000);
    EXPECT_EQ(hits.count(&pool[1]), 0u);
    EXPECT_GT(hits[&pool[0]], 800);
    EXPECT_GT(hits[&pool[2]], 800);
}

TEST_F(PickTest, LatencyPicksWithinFastTier) {
    auto latency = make_policy(PolicyKind::latency);
    pool[0].fast_tier = true;
    pool[0].rtt_ms = 1.0;
    pool[1].fast_tier = false;
    pool[1].rtt_ms = 20.0;
    pool[2].fast_tier = true;
    pool[2].rtt_ms = 1.2;
    auto hits = histogram(*latency, 1000);
    EXPECT_EQ(hits.count(&pool[1]), 0u);
    EXPECT_GT(hits[&pool[0]], 350);
    EXPECT_GT(hits[&pool[2]], 350);
    // Tier exhausted by retries: lowest measured RTT among the rest, unmeasured last.
    EXPECT_EQ(pick_upstream(pool, *latency, 0b101, kNow), &pool[1]);
    pool[0].fast_tier = pool[2].fast_tier = false;
    pool[0].rtt_ms = -1;
    EXPECT_EQ(pick_upstream(pool, *latency, 0, kNow), &pool[2]);
}

TEST_F(PickTest, BelowShareIsFilledFirstThenRandomAgain) {
    for (size_t i = 0; i < 3; ++i) pool[i].share_target = 10;
    pool[0].active = pool[2].active = 10;
    pool[1].active = 4;
    auto hits = histogram(*random, 50);
    EXPECT_EQ(hits[&pool[1]], 50) << "counted live: picks alone do not fill it";
    pool[1].active = 10;
    EXPECT_EQ(histogram(*random, 600).size(), 3u);
    for (size_t i = 0; i < 3; ++i) pool[i].share_target = 0;  // no plan: no preference
    pool[1].active = 0;
    EXPECT_EQ(histogram(*random, 600).size(), 3u);
}

TEST_F(PickTest, BelowShareOnATriedUpstreamLeavesTheOthers) {
    for (size_t i = 0; i < 3; ++i) pool[i].share_target = 10;
    auto hits = histogram(*random, 300, TriedSet{1} << 1);
    EXPECT_EQ(hits.count(&pool[1]), 0u);
    EXPECT_EQ(hits.count(nullptr), 0u);
    EXPECT_EQ(hits.size(), 2u);
}

}  // namespace
}  // namespace kprism
