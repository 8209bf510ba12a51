// SPDX-License-Identifier: Apache-2.0
// The small shared helpers: IntrusiveList (Server's connections, Admin's connections) and
// LogLimiter (rate-limited warnings on the data path).
#include <gtest/gtest.h>

#include <vector>

#include "kprism/base/intrusive_list.h"
#include "kprism/base/log_limiter.h"

using namespace kprism;

namespace {
struct Item {
    int id = 0;
    Item* prev = nullptr;
    Item* next = nullptr;
};

std::vector<int> ids(IntrusiveList<Item>& l) {
    std::vector<int> out;
    l.for_each([&](Item* i) { out.push_back(i->id); });
    return out;
}
}  // namespace

TEST(IntrusiveList, PushRemoveAnywhere) {
    Item a{1}, b{2}, c{3};
    IntrusiveList<Item> l;
    EXPECT_TRUE(l.empty());
    l.push_front(&a);
    l.push_front(&b);
    l.push_front(&c);
    EXPECT_EQ(ids(l), (std::vector<int>{3, 2, 1}));
    EXPECT_EQ(l.size(), 3u);
    l.remove(&b);  // middle
    EXPECT_EQ(ids(l), (std::vector<int>{3, 1}));
    EXPECT_EQ(b.prev, nullptr);
    EXPECT_EQ(b.next, nullptr);
    l.remove(&c);  // head
    EXPECT_EQ(l.front(), &a);
    l.remove(&a);  // last
    EXPECT_TRUE(l.empty());
    EXPECT_EQ(l.front(), nullptr);
}

// A connection unlinks itself from inside the walk (a synchronous close): the walk goes on.
TEST(IntrusiveList, ForEachToleratesRemovingTheCurrentElement) {
    Item items[5];
    IntrusiveList<Item> l;
    for (int i = 0; i < 5; ++i) {
        items[i].id = i;
        l.push_front(&items[i]);
    }
    std::vector<int> seen;
    l.for_each([&](Item* i) {
        seen.push_back(i->id);
        if (i->id % 2 == 0) l.remove(i);
    });
    EXPECT_EQ(seen, (std::vector<int>{4, 3, 2, 1, 0}));
    EXPECT_EQ(ids(l), (std::vector<int>{3, 1}));
}

TEST(LogLimiter, OneLineAPeriodWithTheSuppressedCount) {
    LogLimiter lim;
    auto first = lim.take(5);
    ASSERT_TRUE(first.has_value());
    EXPECT_EQ(*first, 0u);
    for (uint64_t t = 6; t < 5 + LogLimiter::kPeriodMs; t += 100) EXPECT_FALSE(lim.take(t).has_value());
    auto next = lim.take(5 + LogLimiter::kPeriodMs);
    ASSERT_TRUE(next.has_value());
    EXPECT_EQ(*next, 10u);  // t = 6, 106, ..., 906
    EXPECT_FALSE(lim.take(5 + LogLimiter::kPeriodMs + 1).has_value());
}

// At loop time 0 (a test loop, or the very first millisecond) the first event still logs.
TEST(LogLimiter, FirstEventAtTimeZeroLogs) {
    LogLimiter lim;
    EXPECT_TRUE(lim.take(0).has_value());
    EXPECT_FALSE(lim.take(0).has_value());
}
