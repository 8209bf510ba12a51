// SPDX-License-Identifier: Apache-2.0
// The chunk free list behind every read buffer.
#include "kprism/proxy/buffer_pool.h"

#include <cstdlib>

namespace kprism {

BufferPool::~BufferPool() {
    while (head_) {
        Node* n = head_;
        head_ = n->next;
        std::free(n);
    }
}

char* BufferPool::get() {
    Node* n = head_;
    if (n) {
        head_ = n->next;
        --free_;
    } else {
        n = static_cast<Node*>(std::malloc(kChunkSize));
        if (!n) return nullptr;
        ++allocs_;
    }
    ++in_use_;
    return reinterpret_cast<char*>(n);
}

void BufferPool::put(char* chunk) {
    if (!chunk) return;
    --in_use_;
    if (free_ >= max_free_) {
        std::free(chunk);
        return;
    }
    Node* n = reinterpret_cast<Node*>(chunk);
    n->next = head_;
    head_ = n;
    ++free_;
}

}  // namespace kprism
