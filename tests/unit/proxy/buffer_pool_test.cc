// SPDX-License-Identifier: Apache-2.0
// BufferPool free-list accounting (kprism/proxy/buffer_pool.h).
#include "kprism/proxy/buffer_pool.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <vector>

namespace kprism {
namespace {

// The pool's three counters at once.
void expect_counts(const BufferPool& p, size_t in_use, size_t free, size_t allocations) {
    EXPECT_EQ(p.in_use(), in_use);
    EXPECT_EQ(p.free_count(), free);
    EXPECT_EQ(p.allocations(), allocations);
}

TEST(BufferPool, StartsEmpty) {
    BufferPool p;
    expect_counts(p, 0, 0, 0);
}

TEST(BufferPool, GetPutAccounting) {
    BufferPool p;
    char* a = p.get();
    ASSERT_NE(a, nullptr);
    expect_counts(p, 1, 0, 1);
    char* b = p.get();
    ASSERT_NE(b, nullptr);
    EXPECT_NE(a, b);
    expect_counts(p, 2, 0, 2);

    p.put(a);
    expect_counts(p, 1, 1, 2);
    p.put(b);
    expect_counts(p, 0, 2, 2);
}

TEST(BufferPool, ReusesFreeChunks) {
    BufferPool p;
    char* a = p.get();
    p.put(a);
    char* again = p.get();
    EXPECT_EQ(again, a) << "LIFO reuse of the spare chunk";
    EXPECT_EQ(p.allocations(), 1u);
    EXPECT_EQ(p.free_count(), 0u);
    EXPECT_EQ(p.in_use(), 1u);
    p.put(again);

    // 100 rounds of get/put never allocate again.
    for (int i = 0; i < 100; ++i) p.put(p.get());
    EXPECT_EQ(p.allocations(), 1u);
    EXPECT_EQ(p.in_use(), 0u);
    EXPECT_EQ(p.free_count(), 1u);
}

TEST(BufferPool, ChunksAreWholeAndDistinct) {
    BufferPool p;
    std::vector<char*> v;
    std::set<char*> seen;
    for (int i = 0; i < 8; ++i) {
        char* c = p.get();
        ASSERT_NE(c, nullptr);
        std::memset(c, i, BufferPool::kChunkSize);  // the whole chunk is writable (ASan checks this)
        v.push_back(c);
        seen.insert(c);
    }
    EXPECT_EQ(seen.size(), 8u);
    for (int i = 0; i < 8; ++i) EXPECT_EQ(v[i][BufferPool::kChunkSize - 1], static_cast<char>(i));
    for (char* c : v) p.put(c);
    EXPECT_EQ(p.free_count(), 8u);
}

TEST(BufferPool, MaxFreeCap) {
    BufferPool p(2);
    std::vector<char*> v;
    for (int i = 0; i < 5; ++i) v.push_back(p.get());
    EXPECT_EQ(p.allocations(), 5u);
    EXPECT_EQ(p.in_use(), 5u);
    for (char* c : v) p.put(c);
    EXPECT_EQ(p.in_use(), 0u);
    EXPECT_EQ(p.free_count(), 2u) << "spares beyond max_free are freed";

    // Only the two cached chunks are reused; the next three come from the allocator.
    for (int i = 0; i < 5; ++i) v[i] = p.get();
    EXPECT_EQ(p.allocations(), 8u);
    EXPECT_EQ(p.free_count(), 0u);
    for (char* c : v) p.put(c);
    EXPECT_EQ(p.free_count(), 2u);
}

TEST(BufferPool, ZeroMaxFreeCachesNothing) {
    BufferPool p(0);
    char* a = p.get();
    p.put(a);
    EXPECT_EQ(p.free_count(), 0u);
    EXPECT_EQ(p.in_use(), 0u);
    p.put(p.get());
    EXPECT_EQ(p.allocations(), 2u);
}

TEST(BufferPool, PutNullIsIgnored) {
    BufferPool p;
    char* a = p.get();
    p.put(nullptr);
    EXPECT_EQ(p.in_use(), 1u);
    EXPECT_EQ(p.free_count(), 0u);
    p.put(a);
    EXPECT_EQ(p.in_use(), 0u);
}

TEST(BufferPool, DestructorFreesOutstandingSpares) {
    // Leak checkers (make asan) verify the spares are released by the destructor.
    auto* p = new BufferPool(16);
    std::vector<char*> v;
    for (int i = 0; i < 10; ++i) v.push_back(p->get());
    for (char* c : v) p->put(c);
    EXPECT_EQ(p->free_count(), 10u);
    delete p;
    SUCCEED();
}

}  // namespace
}  // namespace kprism
