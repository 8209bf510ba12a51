// Selection policies and pick_upstream eligibility (kprism/policy.h).
#include "kprism/policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <string>

#include "kprism/log.h"
#include "kprism/random.h"

namespace kprism {
namespace {

constexpr uint64_t kNow = 100000;

class PickTest : public ::testing::Test {
protected:
    void SetUp() override {
        log::set_level(log::Level::error);
        seed_random(42);
        for (int i = 0; i < 3; ++i) {
            HostPort hp;
            hp.host = "10.0.0." + std::to_string(i + 1);
            hp.port = 6443;
            hp.is_ip = true;
            pool.add(hp);
        }
    }
    UpstreamPool pool;
    std::unique_ptr<Policy> random = make_policy("random");
    std::unique_ptr<Policy> least = make_policy("least-connections");
};

TEST(MakePolicy, Names) {
    auto r = make_policy("random");
    ASSERT_NE(r, nullptr);
    EXPECT_STREQ(r->name(), "random");
    auto l = make_policy("least-connections");
    ASSERT_NE(l, nullptr);
    EXPECT_STREQ(l->name(), "least-connections");
    EXPECT_EQ(make_policy("round-robin"), nullptr);
    EXPECT_EQ(make_policy(""), nullptr);
    EXPECT_EQ(make_policy("Random"), nullptr);
}

TEST_F(PickTest, PoolAddResolvesIpLiterals) {
    ASSERT_EQ(pool.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(pool[i].index, i);
        EXPECT_TRUE(pool[i].resolved);
        EXPECT_TRUE(pool[i].available(kNow));
    }
    EXPECT_EQ(pool[0].name, "10.0.0.1:6443");
    EXPECT_EQ(pool.available_count(kNow), 3u);

    HostPort name;
    name.host = "api.example.com";
    name.port = 6443;
    pool.add(name);
    EXPECT_FALSE(pool[3].resolved);
    EXPECT_FALSE(pool[3].available(kNow));
    EXPECT_EQ(pool.available_count(kNow), 3u);
}

TEST_F(PickTest, SkipsTried) {
    TriedSet tried = 0b011;
    for (int i = 0; i < 50; ++i) EXPECT_EQ(pick_upstream(pool, *random, tried, kNow), &pool[2]);
    for (int i = 0; i < 50; ++i) EXPECT_EQ(pick_upstream(pool, *least, 0b101, kNow), &pool[1]);
}

TEST_F(PickTest, AllTriedReturnsNull) {
    EXPECT_EQ(pick_upstream(pool, *random, 0b111, kNow), nullptr);
    EXPECT_EQ(pick_upstream(pool, *least, ~TriedSet{0}, kNow), nullptr);
}

TEST_F(PickTest, EmptyPoolReturnsNull) {
    UpstreamPool empty;
    EXPECT_EQ(pick_upstream(empty, *random, 0, kNow), nullptr);
}

TEST_F(PickTest, SkipsUnhealthy) {
    pool[0].healthy = false;
    pool[2].healthy = false;
    for (int i = 0; i < 50; ++i) EXPECT_EQ(pick_upstream(pool, *random, 0, kNow), &pool[1]);
}

TEST_F(PickTest, SkipsBackoff) {
    pool[0].retry_at_ms = kNow + 1;
    pool[1].retry_at_ms = kNow + 5000;
    for (int i = 0; i < 50; ++i) EXPECT_EQ(pick_upstream(pool, *random, 0, kNow), &pool[2]);
    // Backoff over (now >= retry_at): eligible again.
    pool[2].healthy = false;
    EXPECT_EQ(pick_upstream(pool, *random, 0, kNow + 1), &pool[0]);
}

TEST_F(PickTest, SkipsUnresolved) {
    pool[1].resolved = false;
    pool[2].resolved = false;
    for (int i = 0; i < 20; ++i) EXPECT_EQ(pick_upstream(pool, *random, 0, kNow), &pool[0]);
    // An unresolved upstream is never a fallback either.
    EXPECT_EQ(pick_upstream(pool, *random, 0b001, kNow), nullptr);
}

TEST_F(PickTest, FallbackEarliestRetryFirst) {
    pool[0].retry_at_ms = kNow + 3000;
    pool[1].retry_at_ms = kNow + 1000;
    pool[2].retry_at_ms = kNow + 2000;
    EXPECT_EQ(pick_upstream(pool, *random, 0, kNow), &pool[1]);
    EXPECT_EQ(pick_upstream(pool, *random, 0b010, kNow), &pool[2]);
    EXPECT_EQ(pick_upstream(pool, *random, 0b110, kNow), &pool[0]);
    EXPECT_EQ(pick_upstream(pool, *random, 0b111, kNow), nullptr);
    EXPECT_EQ(pick_upstream(pool, *least, 0, kNow), &pool[1]);
}

TEST_F(PickTest, AvailableBeatsFallback) {
    pool[0].retry_at_ms = kNow + 10;
    pool[1].healthy = false;
    EXPECT_EQ(pick_upstream(pool, *random, 0, kNow), &pool[2]);
    // With the available one tried, a backoff-only upstream is preferred over an unhealthy one.
    EXPECT_EQ(pick_upstream(pool, *random, 0b100, kNow), &pool[0]);
    EXPECT_EQ(pick_upstream(pool, *random, 0b101, kNow), &pool[1]);
}

TEST_F(PickTest, FallbackWhenAllUnhealthy) {
    for (size_t i = 0; i < 3; ++i) pool[i].healthy = false;
    Upstream* u = pick_upstream(pool, *random, 0, kNow);
    ASSERT_NE(u, nullptr);
    // Every untried upstream is reachable by successive retries.
    TriedSet tried = 0;
    for (int i = 0; i < 3; ++i) {
        Upstream* p = pick_upstream(pool, *random, tried, kNow);
        ASSERT_NE(p, nullptr);
        EXPECT_FALSE((tried >> p->index) & 1);
        tried |= TriedSet{1} << p->index;
    }
    EXPECT_EQ(tried, 0b111u);
    EXPECT_EQ(pick_upstream(pool, *random, tried, kNow), nullptr);
}

TEST_F(PickTest, LeastConnectionsPicksMinimum) {
    pool[0].active = 5;
    pool[1].active = 2;
    pool[2].active = 9;
    for (int i = 0; i < 50; ++i) EXPECT_EQ(pick_upstream(pool, *least, 0, kNow), &pool[1]);
    // The minimum among the untried ones.
    EXPECT_EQ(pick_upstream(pool, *least, 0b010, kNow), &pool[0]);
    // The minimum among the available ones.
    pool[1].healthy = false;
    EXPECT_EQ(pick_upstream(pool, *least, 0, kNow), &pool[0]);
}

TEST_F(PickTest, LeastConnectionsBreaksTiesAcrossAll) {
    pool[0].active = 1;
    pool[1].active = 1;
    pool[2].active = 4;
    std::map<Upstream*, int> hits;
    for (int i = 0; i < 2000; ++i) ++hits[pick_upstream(pool, *least, 0, kNow)];
    EXPECT_EQ(hits.count(&pool[2]), 0u);
    EXPECT_GT(hits[&pool[0]], 800);
    EXPECT_GT(hits[&pool[1]], 800);
}

TEST_F(PickTest, RandomDistributesAcrossAll) {
    std::map<Upstream*, int> hits;
    for (int i = 0; i < 3000; ++i) ++hits[pick_upstream(pool, *random, 0, kNow)];
    ASSERT_EQ(hits.size(), 3u);
    for (size_t i = 0; i < 3; ++i) EXPECT_GT(hits[&pool[i]], 800) << "upstream " << i;
}

TEST_F(PickTest, RandomDistributesAcrossAvailableOnly) {
    pool[1].healthy = false;
    std::map<Upstream*, int> hits;
    for (int i = 0; i < 2000; ++i) ++hits[pick_upstream(pool, *random, 0, kNow)];
    EXPECT_EQ(hits.count(&pool[1]), 0u);
    EXPECT_GT(hits[&pool[0]], 800);
    EXPECT_GT(hits[&pool[2]], 800);
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
        HostPort hp{"10.0.0.1", 6443, true};
        pool.add(hp);
    }
    UpstreamPool pool;
};

TEST_F(BackoffTest, FirstFailure) {
    Upstream& u = pool[0];
    pool.connect_failed(u, "refused", kNow);
    EXPECT_EQ(u.consecutive_failures, 1u);
    EXPECT_EQ(u.connect_failures, 1u);
    EXPECT_EQ(u.backoff_ms, UpstreamPool::kBackoffMinMs);
    EXPECT_GE(u.retry_at_ms, kNow + 800);
    EXPECT_LE(u.retry_at_ms, kNow + 1200);
    EXPECT_TRUE(u.in_backoff(kNow));
    EXPECT_FALSE(u.available(kNow));
    EXPECT_EQ(pool.available_count(kNow), 0u);
    EXPECT_FALSE(u.in_backoff(u.retry_at_ms));
    EXPECT_TRUE(u.available(u.retry_at_ms));
}

TEST_F(BackoffTest, FirstFailureJitterRange) {
    // Over many independent first failures, every wait lies in [800, 1200] and the spread is used.
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < 500; ++i) {
        Upstream& u = pool[0];
        pool.connect_succeeded(u);
        pool.connect_failed(u, "refused", kNow);
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
        pool.connect_failed(u, "timeout", now);
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
    for (int i = 0; i < 4; ++i) pool.connect_failed(u, "refused", kNow);
    EXPECT_EQ(u.backoff_ms, 8000u);
    pool.connect_succeeded(u);
    EXPECT_EQ(u.consecutive_failures, 0u);
    EXPECT_EQ(u.backoff_ms, 0u);
    EXPECT_EQ(u.retry_at_ms, 0u);
    EXPECT_EQ(u.connect_failures, 4u) << "lifetime counter is not reset";
    EXPECT_FALSE(u.in_backoff(kNow));
    EXPECT_TRUE(u.available(kNow));
    // After a reset the next failure starts from the minimum again.
    pool.connect_failed(u, "refused", kNow);
    EXPECT_EQ(u.backoff_ms, 1000u);
    EXPECT_LE(u.retry_at_ms, kNow + 1200);
}

TEST_F(BackoffTest, SucceededOnHealthyIsNoop) {
    Upstream& u = pool[0];
    pool.connect_succeeded(u);
    EXPECT_EQ(u.consecutive_failures, 0u);
    EXPECT_EQ(u.retry_at_ms, 0u);
    EXPECT_TRUE(u.available(kNow));
}

}  // namespace
}  // namespace kprism
