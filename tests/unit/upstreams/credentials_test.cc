// SPDX-License-Identifier: Apache-2.0
// The credentials condition's state machine (kprism/upstreams/credentials.h): rounds, entering, the odd
// one out, leaving on an accepted certificate or a rotation, stale generations.
#include "kprism/upstreams/credentials.h"

#include <gtest/gtest.h>

#include <string>

namespace kprism {
namespace {

using Event = Credentials::Event;
constexpr uint64_t kGen = 7;

class CredentialsTest : public ::testing::Test {
protected:
    void SetUp() override {
        for (int i = 0; i < 3; ++i) {
            HostPort hp;
            hp.host = "10.0.0." + std::to_string(i + 1);
            hp.port = 6443;
            hp.is_ip = true;
            pool.add(hp);
        }
    }
    // A probe result of upstream i at time t, as ControlPlane::record_check feeds it.
    Credentials::Outcome result(size_t i, CheckResult r, uint64_t t, uint64_t gen = kGen, uint64_t current = kGen) {
        ProbeMark prev = pool[i].probe;
        pool[i].probe = ProbeMark{true, r, t, gen};
        return creds.on_result(pool, pool[i], prev, t, current);
    }
    UpstreamPool pool;
    Credentials creds;
};

TEST(CertVerdict, OfEveryResult) {
    EXPECT_EQ(cert_verdict_of(CheckResult::ready), CertVerdict::accepted);
    EXPECT_EQ(cert_verdict_of(CheckResult::not_ready), CertVerdict::accepted) << "an HTTP answer after authentication";
    EXPECT_EQ(cert_verdict_of(CheckResult::unauthorized), CertVerdict::rejected);
    for (CheckResult r : {CheckResult::timeout, CheckResult::connect_failed, CheckResult::tls_failed})
        EXPECT_EQ(cert_verdict_of(r), CertVerdict::silent) << result_name(r);
    EXPECT_STREQ(credentials_state_name(CredentialsState::rejected), "rejected");
    EXPECT_STREQ(credentials_state_name(CredentialsState::ok), "ok");
    EXPECT_STREQ(credentials_state_name(CredentialsState::unknown), "unknown");
}

TEST_F(CredentialsTest, EveryApiserverRejectingEntersOnceTheRoundIsComplete) {
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(result(i, CheckResult::ready, 100 + i).event, Event::none);
    EXPECT_EQ(creds.state(), CredentialsState::ok);
    // The certificate expires: the first rejection opens a round and is held.
    auto o = result(0, CheckResult::unauthorized, 1000);
    EXPECT_EQ(o.event, Event::round_started);
    EXPECT_TRUE(o.hold);
    EXPECT_TRUE(creds.round_running());
    o = result(1, CheckResult::unauthorized, 1010);
    EXPECT_EQ(o.event, Event::none);
    EXPECT_TRUE(o.hold);
    o = result(2, CheckResult::unauthorized, 1020);
    EXPECT_EQ(o.event, Event::entered);
    EXPECT_TRUE(o.hold);
    EXPECT_TRUE(creds.rejected());
    EXPECT_FALSE(creds.round_running());
    // In the condition every rejection is held and nothing more happens.
    for (size_t i = 0; i < 3; ++i) {
        o = result(i, CheckResult::unauthorized, 2000 + i);
        EXPECT_EQ(o.event, Event::none);
        EXPECT_TRUE(o.hold);
    }
    // Silent results are not held: a timeout is a timeout.
    o = result(1, CheckResult::timeout, 3000);
    EXPECT_EQ(o.event, Event::none);
    EXPECT_FALSE(o.hold);
    EXPECT_TRUE(creds.rejected());
    // Any apiserver accepting it ends the condition.
    o = result(2, CheckResult::ready, 4000);
    EXPECT_EQ(o.event, Event::left);
    EXPECT_FALSE(o.hold);
    EXPECT_EQ(creds.state(), CredentialsState::ok);
}

TEST_F(CredentialsTest, ASilentResultDuringTheRoundCountsAsAnswered) {
    EXPECT_EQ(result(1, CheckResult::unauthorized, 500).event, Event::round_started);
    EXPECT_FALSE(result(1, CheckResult::timeout, 600).hold) << "a timeout is applied as a timeout";
    EXPECT_TRUE(creds.round_running());
    result(0, CheckResult::unauthorized, 1000);
    EXPECT_EQ(result(2, CheckResult::unauthorized, 1001).event, Event::entered)
        << "1 answered in the round (silently), 0 and 2 reject";
}

TEST_F(CredentialsTest, StaleReadyFromBeforeExpiryDoesNotCount) {
    for (size_t i = 0; i < 3; ++i) result(i, CheckResult::ready, 100);
    EXPECT_EQ(result(0, CheckResult::unauthorized, 1000).event, Event::round_started);
    // 1 and 2 last said ready at 100, before the round: the round waits for them.
    EXPECT_FALSE(creds.rejected());
    EXPECT_TRUE(creds.round_running());
    EXPECT_EQ(result(1, CheckResult::unauthorized, 1001).event, Event::none);
    EXPECT_EQ(result(2, CheckResult::unauthorized, 1002).event, Event::entered);
}

TEST_F(CredentialsTest, TheOddOneOutCountsAsAFailure) {
    auto o = result(0, CheckResult::unauthorized, 1000);
    EXPECT_EQ(o.event, Event::round_started);
    EXPECT_TRUE(o.hold);
    o = result(1, CheckResult::ready, 1001);
    EXPECT_EQ(o.event, Event::partial) << "someone accepts: no need to wait for 2";
    EXPECT_EQ(o.round_start_ms, 1000u);
    EXPECT_FALSE(o.hold);
    EXPECT_FALSE(creds.round_running());
    EXPECT_EQ(creds.state(), CredentialsState::ok);
    // Its next rejections are failed checks like any other, without a new round.
    o = result(0, CheckResult::unauthorized, 2000);
    EXPECT_EQ(o.event, Event::none);
    EXPECT_FALSE(o.hold);
    EXPECT_FALSE(creds.round_running());
}

TEST_F(CredentialsTest, RejectingThenSilentIsNotTheCondition) {
    result(0, CheckResult::unauthorized, 1000);
    result(1, CheckResult::connect_failed, 1001);
    auto o = result(0, CheckResult::timeout, 1002);
    EXPECT_EQ(o.event, Event::none) << "2 has not answered yet";
    o = result(2, CheckResult::connect_failed, 1003);
    EXPECT_EQ(o.event, Event::partial) << "nobody rejects any more: nothing to enter";
    EXPECT_FALSE(creds.rejected());
}

TEST_F(CredentialsTest, UnreachableOnesDoNotPreventIt) {
    result(0, CheckResult::connect_failed, 1000);
    result(1, CheckResult::unauthorized, 1001);
    EXPECT_EQ(result(0, CheckResult::timeout, 1002).event, Event::none);
    EXPECT_EQ(result(2, CheckResult::unauthorized, 1003).event, Event::entered)
        << "every apiserver that answers rejects the certificate";
}

TEST_F(CredentialsTest, RemovedAndUnresolvedUpstreamsAreNotWaitedFor) {
    pool[1].removed = true;
    pool[2].resolved = false;
    EXPECT_EQ(result(0, CheckResult::unauthorized, 1000).event, Event::entered);
}

TEST_F(CredentialsTest, ASingleUpstreamEntersAtOnce) {
    UpstreamPool one;
    HostPort hp;
    hp.host = "10.0.0.9";
    hp.port = 6443;
    hp.is_ip = true;
    one.add(hp);
    one[0].probe = ProbeMark{true, CheckResult::unauthorized, 50, kGen};
    auto o = creds.on_result(one, one[0], ProbeMark{}, 50, kGen);
    EXPECT_EQ(o.event, Event::entered);
    EXPECT_TRUE(o.hold);
}

TEST_F(CredentialsTest, RotationLeavesAndOldResultsNoLongerCount) {
    for (size_t i = 0; i < 3; ++i) result(i, CheckResult::unauthorized, 1000 + i);
    ASSERT_TRUE(creds.rejected());
    EXPECT_TRUE(creds.on_rotation());
    EXPECT_EQ(creds.state(), CredentialsState::unknown);
    EXPECT_FALSE(creds.on_rotation()) << "only the first one left the condition";
    // A probe that began with the old certificate and ended after the rotation: held, no round.
    auto o = result(0, CheckResult::unauthorized, 2000, kGen, kGen + 1);
    EXPECT_EQ(o.event, Event::none);
    EXPECT_TRUE(o.hold);
    EXPECT_FALSE(creds.round_running());
    // The new certificate is rejected too: a new round, entered once all answered with it.
    EXPECT_EQ(result(1, CheckResult::unauthorized, 2001, kGen + 1, kGen + 1).event, Event::round_started);
    EXPECT_EQ(result(2, CheckResult::unauthorized, 2002, kGen + 1, kGen + 1).event, Event::none);
    EXPECT_EQ(result(0, CheckResult::unauthorized, 2003, kGen + 1, kGen + 1).event, Event::entered);
}

TEST_F(CredentialsTest, RotationDuringARoundDropsIt) {
    result(0, CheckResult::unauthorized, 1000);
    ASSERT_TRUE(creds.round_running());
    EXPECT_FALSE(creds.on_rotation());
    EXPECT_FALSE(creds.round_running());
}

}  // namespace
}  // namespace kprism
