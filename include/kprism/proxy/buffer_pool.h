// SPDX-License-Identifier: Apache-2.0
// Pooled memory of the data path: I/O chunks for reads, taken only while bytes wait in them, so an
// idle connection holds none.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kprism {

// Single-threaded free list of equal-sized chunks. Keeps at most `max_free` spare chunks so a burst
// does not pin memory forever. get() returns nullptr only if the allocator fails.
class BufferPool {
public:
    static constexpr size_t kChunkSize = 64 * 1024;  // bulk throughput ~1.5x that of 16 KiB (bench/bulk.sh)

    explicit BufferPool(size_t max_free = 64) : max_free_(max_free) {}
    ~BufferPool();
    BufferPool(const BufferPool&) = delete;
    BufferPool& operator=(const BufferPool&) = delete;

    char* get();
    void put(char* chunk);

    size_t in_use() const { return in_use_; }      // handed out, not yet returned
    size_t free_count() const { return free_; }    // cached spares
    uint64_t allocations() const { return allocs_; }  // chunks obtained from the allocator, ever

private:
    struct Node {
        Node* next;
    };
    Node* head_ = nullptr;
    size_t max_free_;
    size_t free_ = 0;
    size_t in_use_ = 0;
    uint64_t allocs_ = 0;
};

}  // namespace kprism
