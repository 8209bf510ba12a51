// SPDX-License-Identifier: Apache-2.0
// Rebalancing's plan (plan_rebalance, kprism/proxy/rebalancer.h): fair shares, the budget, who
// may give connections back.
#include "kprism/proxy/rebalancer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace kprism {
namespace {

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
