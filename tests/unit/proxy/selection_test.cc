// SPDX-License-Identifier: Apache-2.0
// Selection policies, pick_upstream eligibility and UpstreamPool passive backoff / readiness
// (kprism/policy.h, kprism/upstream.h).
#include "kprism/proxy/selection.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "kprism/base/log.h"
#include "kprism/base/random.h"
#include "kprism/proxy/rebalancer.h"

namespace kprism {
namespace {

constexpr uint64_t kNow = 100000;

HostPort ip(const std::string& host, uint16_t port = 6443) {
    HostPort hp;
    hp.host = host;
    hp.port = port;
    hp.is_ip = true;
    return hp;
}

class PickTest : public ::testing::Test {
protected:
    void SetUp() override {
        log::set_level(log::Level::error);
        seed_random(42);
        for (int i = 0; i < 3; ++i) pool.add(ip("10.0.0." + std::to_string(i + 1)));
        for (size_t i = 0; i < 3; ++i) pool[i].health = Health::up;
    }
    void TearDown() override { log::set_level(log::Level::info); }
    std::map<Upstream*, int> histogram(Policy& p, int n, TriedSet tried = 0) {
        std::map<Upstream*, int> hits;
        for (int i = 0; i < n; ++i) ++hits[pick_upstream(pool, p, tried, kNow)];
        return hits;
    }
    UpstreamPool pool;
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

TEST_F(PickTest, PoolAdd) {
    ASSERT_EQ(pool.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(pool[i].index, i);
        EXPECT_TRUE(pool[i].resolved) << "IP literals need no resolving";
        EXPECT_TRUE(pool[i].available(kNow));
    }
    EXPECT_EQ(pool[0].name, "10.0.0.1:6443");
    EXPECT_EQ(pool.available_count(kNow), 3u);

    HostPort name;
    name.host = "api.example.com";
    name.port = 6443;
    pool.add(name, "zone-a", "api");
    EXPECT_FALSE(pool[3].resolved);
    EXPECT_EQ(pool[3].zone, "zone-a");
    EXPECT_EQ(pool[3].server_name, "api");
    pool[3].health = Health::up;
    EXPECT_FALSE(pool[3].available(kNow)) << "unresolved is never available";
    EXPECT_EQ(pool.available_count(kNow), 3u);
}

TEST_F(PickTest, NewUpstreamStartsUnknownAndUnavailable) {
    UpstreamPool p;
    p.add(ip("10.0.0.9"));
    EXPECT_EQ(p[0].health, Health::unknown);
    EXPECT_FALSE(p[0].available(kNow));
    EXPECT_EQ(p.up_count(), 0u);
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
    UpstreamPool z;
    z.node_zone = "a";
    z.add(ip("10.0.1.1"), "b");
    z.add(ip("10.0.1.2"), "a");
    z.add(ip("10.0.1.3"), "b");
    z.add(ip("10.0.1.4"), "a");
    for (size_t i = 0; i < z.size(); ++i) z[i].health = Health::up;
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
    UpstreamPool z;
    z.node_zone = "a";
    z.add(ip("10.0.1.1"), "b");
    z.add(ip("10.0.1.2"), "a");
    z.add(ip("10.0.1.3"), "a");
    z.add(ip("10.0.1.4"), "a");
    for (size_t i = 0; i < z.size(); ++i) z[i].health = Health::up;
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
    UpstreamPool z;
    z.add(ip("10.0.1.1"), "a");
    z.add(ip("10.0.1.2"), "");
    for (size_t i = 0; i < z.size(); ++i) z[i].health = Health::up;
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

TEST_F(PickTest, RttTiers) {
    for (size_t i = 0; i < 3; ++i) pool[i].health = Health::down;
    UpstreamPool& p = pool;
    p[0].health = p[1].health = p[2].health = Health::up;
    p.record_rtt(p[0], 1.0);
    p.record_rtt(p[1], 1.4);   // within 1.5x + 0.5 ms of the best
    p.record_rtt(p[2], 10.0);  // clearly slower
    EXPECT_TRUE(p[0].fast_tier);
    EXPECT_TRUE(p[1].fast_tier);
    EXPECT_FALSE(p[2].fast_tier);
    EXPECT_DOUBLE_EQ(p[0].rtt_ms, 1.0) << "first sample is taken as is";
    p.record_rtt(p[0], 2.0);
    EXPECT_DOUBLE_EQ(p[0].rtt_ms, 0.7 * 1.0 + 0.3 * 2.0) << "EWMA";
}

TEST(Random, SeedIsDeterministicAndBounded) {
    seed_random(7);
    uint64_t a = random_u64(), b = random_u64();
    seed_random(7);
    EXPECT_EQ(random_u64(), a);
    EXPECT_EQ(random_u64(), b);
    for (int i = 0; i < 1000; ++i) EXPECT_LT(random_below(3), 3u);
    for (int i = 0; i < 1000; ++i) {
        uint64_t j = jitter(1000, 0.2);
        EXPECT_GE(j, 800u);
        EXPECT_LE(j, 1200u);
    }
    EXPECT_EQ(jitter(1000, 0.0), 1000u);
}

// ---- UpstreamPool passive backoff ----

class BackoffTest : public ::testing::Test {
protected:
    void SetUp() override {
        log::set_level(log::Level::error);
        seed_random(1234);
        pool.add(ip("10.0.0.1"));
    }
    void TearDown() override { log::set_level(log::Level::info); }
    UpstreamPool pool;
};

TEST_F(BackoffTest, FirstFailure) {
    Upstream& u = pool[0];
    pool.connect_failed(u, ConnectFailure::refused, "connection refused", kNow);
    EXPECT_EQ(u.consecutive_failures, 1u);
    EXPECT_EQ(u.connect_failures, 1u);
    EXPECT_EQ(u.backoff_ms, UpstreamPool::kBackoffMinMs);
    EXPECT_GE(u.retry_at_ms, kNow + 800);
    EXPECT_LE(u.retry_at_ms, kNow + 1200);
    EXPECT_TRUE(u.in_backoff(kNow));
    EXPECT_TRUE(u.in_backoff(u.retry_at_ms - 1));
    EXPECT_FALSE(u.in_backoff(u.retry_at_ms));
}

TEST_F(BackoffTest, FirstFailureJitterRange) {
    // Over many independent first failures, every wait lies in [800, 1200] and the spread is used.
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < 500; ++i) {
        Upstream& u = pool[0];
        pool.connect_succeeded(u);
        pool.connect_failed(u, ConnectFailure::refused, "connection refused", kNow);
        uint64_t wait = u.retry_at_ms - kNow;
        ASSERT_GE(wait, 800u);
        ASSERT_LE(wait, 1200u);
        lo = std::min(lo, wait);
        hi = std::max(hi, wait);
    }
    EXPECT_LT(lo, 900u);
    EXPECT_GT(hi, 1100u);
}

TEST_F(BackoffTest, DoublesUpToCap) {
    Upstream& u = pool[0];
    const uint64_t expect[] = {1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000};
    uint64_t now = kNow;
    for (size_t i = 0; i < std::size(expect); ++i) {
        pool.connect_failed(u, ConnectFailure::timeout, "connect timeout", now);
        SCOPED_TRACE(i);
        EXPECT_EQ(u.consecutive_failures, i + 1);
        EXPECT_EQ(u.backoff_ms, expect[i]);
        uint64_t wait = u.retry_at_ms - now;
        EXPECT_GE(wait, expect[i] * 8 / 10);
        EXPECT_LE(wait, expect[i] * 12 / 10);
        now = u.retry_at_ms;  // fail again right when the backoff ends
    }
}

TEST_F(BackoffTest, SucceededResets) {
    Upstream& u = pool[0];
    // Each failure after the previous backoff window ended doubles it; failures inside a window
    // (a burst of clients) do not.
    uint64_t t = kNow;
    for (int i = 0; i < 4; ++i) {
        pool.connect_failed(u, ConnectFailure::refused, "connection refused", t);
        t = u.retry_at_ms;
    }
    EXPECT_EQ(u.backoff_ms, 8000u);
    pool.connect_failed(u, ConnectFailure::refused, "connection refused", t - 1);
    EXPECT_EQ(u.backoff_ms, 8000u);
    pool.connect_failed(u, ConnectFailure::refused, "connection refused", kNow);
    pool.connect_succeeded(u);
    EXPECT_EQ(u.consecutive_failures, 0u);
    EXPECT_EQ(u.backoff_ms, 0u);
    EXPECT_EQ(u.retry_at_ms, 0u);
    EXPECT_EQ(u.connect_failures, 6u) << "lifetime counter is not reset";
    EXPECT_FALSE(u.in_backoff(kNow));
    // After a reset the next failure starts from the minimum again.
    pool.connect_failed(u, ConnectFailure::refused, "connection refused", kNow);
    EXPECT_EQ(u.backoff_ms, 1000u);
    EXPECT_LE(u.retry_at_ms, kNow + 1200);
}

TEST_F(BackoffTest, SucceededOnFreshUpstreamIsNoop) {
    Upstream& u = pool[0];
    pool.connect_succeeded(u);
    EXPECT_EQ(u.consecutive_failures, 0u);
    EXPECT_EQ(u.retry_at_ms, 0u);
    EXPECT_FALSE(u.in_backoff(kNow));
}

// ---- readiness (rise/fall) ----

class HealthTest : public BackoffTest {
protected:
    void SetUp() override {
        BackoffTest::SetUp();
        pool.rise_fall.rise = 2;
        pool.rise_fall.fall = 2;
        pool.on_change = [this](Upstream& u, Health old) { changes.emplace_back(u.index, old, u.health); };
    }
    bool rec(CheckResult r, bool explicit_down = false) { return pool.record(pool[0], r, "", explicit_down, now += 1000); }
    std::vector<std::tuple<size_t, Health, Health>> changes;
    uint64_t now = kNow;
};

TEST_F(HealthTest, FirstResultDecidesAtOnce) {
    EXPECT_TRUE(rec(CheckResult::ready));
    EXPECT_EQ(pool[0].health, Health::up);
    ASSERT_EQ(changes.size(), 1u);
    EXPECT_EQ(std::get<1>(changes[0]), Health::unknown);
    EXPECT_EQ(std::get<2>(changes[0]), Health::up);
    EXPECT_EQ(pool[0].last_change_ms, now);

    UpstreamPool p2;
    p2.add(ip("10.0.0.2"));
    EXPECT_TRUE(p2.record(p2[0], CheckResult::timeout, "slow", false, kNow));
    EXPECT_EQ(p2[0].health, Health::down);
    EXPECT_EQ(p2[0].last_error, "slow");
}

TEST_F(HealthTest, FallNeedsConsecutiveFailures) {
    rec(CheckResult::ready);
    EXPECT_FALSE(rec(CheckResult::not_ready));
    EXPECT_EQ(pool[0].health, Health::up);
    EXPECT_FALSE(rec(CheckResult::ready)) << "a success resets the fall count";
    EXPECT_FALSE(rec(CheckResult::connect_failed));
    EXPECT_EQ(pool[0].health, Health::up);
    EXPECT_TRUE(rec(CheckResult::timeout));
    EXPECT_EQ(pool[0].health, Health::down);
    EXPECT_EQ(pool[0].checks[static_cast<int>(CheckResult::ready)], 2u);
    EXPECT_EQ(pool[0].checks[static_cast<int>(CheckResult::timeout)], 1u);
}

TEST_F(HealthTest, ExplicitDownIsImmediate) {
    rec(CheckResult::ready);
    EXPECT_TRUE(rec(CheckResult::not_ready, /*explicit_down=*/true));
    EXPECT_EQ(pool[0].health, Health::down);
}

TEST_F(HealthTest, RiseNeedsConsecutiveSuccesses) {
    rec(CheckResult::timeout);
    ASSERT_EQ(pool[0].health, Health::down);
    EXPECT_FALSE(rec(CheckResult::ready));
    EXPECT_FALSE(rec(CheckResult::tls_failed)) << "a failure resets the rise count";
    EXPECT_FALSE(rec(CheckResult::ready));
    EXPECT_EQ(pool[0].health, Health::down);
    EXPECT_TRUE(rec(CheckResult::ready));
    EXPECT_EQ(pool[0].health, Health::up);
    EXPECT_EQ(pool.up_count(), 1u);
    ASSERT_EQ(changes.size(), 2u);
    EXPECT_EQ(std::get<1>(changes[1]), Health::down);
}

TEST(HealthNames, All) {
    EXPECT_STREQ(health_name(Health::unknown), "unknown");
    EXPECT_STREQ(health_name(Health::up), "up");
    EXPECT_STREQ(health_name(Health::down), "down");
    EXPECT_STREQ(result_name(CheckResult::ready), "ready");
    EXPECT_STREQ(result_name(CheckResult::unauthorized), "unauthorized");
}

}  // namespace
}  // namespace kprism

namespace kprism {
namespace {

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

ShareInput up(uint32_t connections, uint32_t movable, bool eligible = true) {
    ShareInput s;
    s.up = true;
    s.eligible = eligible;
    s.connections = connections;
    s.movable = movable;
    return s;
}

TEST(PlanRebalance, ReturningUpstreamGetsItsShare) {
    // a0 came back with nothing; a1 and a2 hold 15 each: fair share 10, five move off each.
    SharePlan p = plan_rebalance({up(0, 0), up(15, 15), up(15, 15)}, 100);
    EXPECT_EQ(p.fair_ceil, 10u);
    EXPECT_EQ(p.moves, (std::vector<uint32_t>{0, 5, 5}));
    EXPECT_EQ(p.target, (std::vector<uint32_t>{10, 10, 10}));
}

TEST(PlanRebalance, BudgetTakesFromTheWorstFirst) {
    SharePlan p = plan_rebalance({up(0, 0), up(20, 20), up(10, 10)}, 4);
    EXPECT_EQ(p.moves, (std::vector<uint32_t>{0, 4, 0}));
    p = plan_rebalance({up(0, 0), up(12, 12), up(12, 12)}, 3);
    EXPECT_EQ(p.moves[1] + p.moves[2], 3u);
    EXPECT_LE(std::max(p.moves[1], p.moves[2]) - std::min(p.moves[1], p.moves[2]), 1u);
}

TEST(PlanRebalance, BalancedWithinOneMovesNothing) {
    // 11 over 3: fair share rounded up is 4; nobody is above it, nobody has a better place.
    SharePlan p = plan_rebalance({up(4, 4), up(4, 4), up(3, 3)}, 100);
    EXPECT_EQ(p.moves, (std::vector<uint32_t>{0, 0, 0}));
    EXPECT_EQ(p.target, (std::vector<uint32_t>{0, 0, 0})) << "no plan: new connections as the policy says";
    p = plan_rebalance({up(1, 1), up(0, 0), up(0, 0)}, 100);
    EXPECT_EQ(p.moves, (std::vector<uint32_t>{0, 0, 0}));
}

TEST(PlanRebalance, OnlyOldEnoughConnectionsMove) {
    SharePlan p = plan_rebalance({up(0, 0), up(15, 2), up(15, 15)}, 100);
    EXPECT_EQ(p.moves, (std::vector<uint32_t>{0, 2, 5}));
}

TEST(PlanRebalance, DownUpstreamsAreNotCountedOrMoved) {
    ShareInput down = up(30, 30);
    down.up = false;
    down.eligible = false;
    SharePlan p = plan_rebalance({down, up(3, 3), up(3, 3)}, 100);
    EXPECT_EQ(p.moves, (std::vector<uint32_t>{0, 0, 0}));
    EXPECT_EQ(p.target, (std::vector<uint32_t>{0, 0, 0}));
}

TEST(PlanRebalance, UpButNotEligibleGivesEverythingBack) {
    // Another zone's upstream while this zone has one up: its connections belong in the zone.
    SharePlan p = plan_rebalance({up(0, 0), up(6, 6, false)}, 100);
    EXPECT_EQ(p.moves, (std::vector<uint32_t>{0, 6}));
    EXPECT_EQ(p.target, (std::vector<uint32_t>{6, 0}));
}

TEST(PlanRebalance, NothingEligibleOrNothingHeld) {
    EXPECT_EQ(plan_rebalance({up(5, 5, false)}, 100).moves, (std::vector<uint32_t>{0}));
    EXPECT_EQ(plan_rebalance({up(0, 0), up(0, 0)}, 100).moves, (std::vector<uint32_t>{0, 0}));
    EXPECT_EQ(plan_rebalance({}, 100).moves.size(), 0u);
    EXPECT_EQ(plan_rebalance({up(0, 0), up(9, 9)}, 0).moves, (std::vector<uint32_t>{0, 0}));
}

}  // namespace
}  // namespace kprism
