// SPDX-License-Identifier: Apache-2.0
// UpstreamPool (kprism/upstreams/upstream.h): adding endpoints, latency tiers, passive backoff
// and the rise/fall state machine.
#include "kprism/upstreams/upstream.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include "../upstream_helpers.h"
#include "kprism/base/log.h"
#include "kprism/base/random.h"

namespace kprism {
namespace {

using unit::ip;
using unit::kNow;

using PoolTest = unit::ThreeUpstreams;

TEST_F(PoolTest, Add) {
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

// An address of a hostname endpoint: an IP upstream of its own, named "HOST@ADDRESS:PORT", the
// hostname its TLS name and the endpoint its Host header (unless a server name is configured).
TEST(NameAddress, IsAnIpUpstreamNamedByTheHostname) {
    UpstreamPool p;
    HostPort ep{"api.example.com", 6443, false};
    sockaddr_storage v4{}, v6{};
    ASSERT_TRUE(ip_to_sockaddr("10.0.0.2", 6443, v4));
    ASSERT_TRUE(ip_to_sockaddr("fd00::1", 6443, v6));
    Upstream* a = p.add_name_address(ep, v4, "zone-a");
    Upstream* b = p.add_name_address(ep, v6, "", "api-b");
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->name, "api.example.com@10.0.0.2:6443");
    EXPECT_EQ(b->name, "api.example.com@[fd00::1]:6443");
    EXPECT_TRUE(a->resolved && a->addr.is_ip);
    EXPECT_EQ(a->addr.host, "10.0.0.2");
    EXPECT_EQ(a->of_name, "api.example.com:6443");
    EXPECT_EQ(a->zone, "zone-a");
    EXPECT_EQ(a->tls_name(), "api.example.com");
    EXPECT_EQ(a->host_header(), "api.example.com:6443");
    EXPECT_EQ(b->tls_name(), "api-b") << "a configured server name wins";
    EXPECT_EQ(b->host_header(), "api-b");
    EXPECT_EQ(sockaddr_str(a->sa), "10.0.0.2:6443");
    a->health = Health::up;
    EXPECT_TRUE(a->available(kNow));

    std::string host;
    HostPort addr;
    ASSERT_TRUE(parse_name_address_label(b->name, host, addr));
    EXPECT_EQ(host, "api.example.com");
    EXPECT_EQ(addr.host, "fd00::1");
    EXPECT_EQ(addr.port, 6443);
    for (const char* bad : {"10.0.0.2:6443", "@10.0.0.2:6443", "api@other.example:6443", "api@10.0.0.2", ""})
        EXPECT_FALSE(parse_name_address_label(bad, host, addr)) << bad;
}

TEST_F(PoolTest, NewUpstreamStartsUnknownAndUnavailable) {
    UpstreamPool p;
    p.add(ip("10.0.0.9"));
    EXPECT_EQ(p[0].health, Health::unknown);
    EXPECT_FALSE(p[0].available(kNow));
    EXPECT_EQ(p.up_count(), 0u);
}

TEST_F(PoolTest, RttTiers) {
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
