// SPDX-License-Identifier: Apache-2.0
// Pooled memory of the data path: I/O chunks for reads and libuv request structs (write, shutdown,
// connect), taken only while in flight, so an idle connection holds neither.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

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

// Single-threaded free list of one libuv request type (uv_write_t, uv_shutdown_t, uv_connect_t):
// a connection takes one while a write, shutdown or connect is in flight and gives it back from
// that request's callback. Keeps at most `max_free` spares. get() returns nullptr only if the
// allocator fails.
template <class T>
class RequestPool {
public:
    explicit RequestPool(size_t max_free = 1024) : max_free_(max_free) {}
    ~RequestPool() {
        for (T* r : free_) delete r;
    }
    RequestPool(const RequestPool&) = delete;
    RequestPool& operator=(const RequestPool&) = delete;

    T* get() {
        ++in_use_;
        if (free_.empty()) return new (std::nothrow) T{};
        T* r = free_.back();
        free_.pop_back();
        return r;
    }
    void put(T* r) {
        if (!r) return;
        --in_use_;
        if (free_.size() >= max_free_) {
            delete r;
            return;
        }
        free_.push_back(r);
    }
    size_t in_use() const { return in_use_; }

private:
    std::vector<T*> free_;
    size_t max_free_;
    size_t in_use_ = 0;
};

}  // namespace kprism
