// SPDX-License-Identifier: Apache-2.0
// A doubly linked list threaded through its elements' own `prev`/`next` members: linking and
// unlinking never allocate, and an element unlinks itself in O(1) from its close callback.
#pragma once

#include <cstddef>

namespace kprism {

// T has public `T* prev` and `T* next`, both nullptr while unlinked. The list does not own its
// elements: each frees itself after removing itself.
template <class T>
class IntrusiveList {
public:
    void push_front(T* e) {
        e->prev = nullptr;
        e->next = head_;
        if (head_) head_->prev = e;
        head_ = e;
        ++size_;
    }
    void remove(T* e) {
        if (e->prev) e->prev->next = e->next;
        else head_ = e->next;
        if (e->next) e->next->prev = e->prev;
        e->prev = e->next = nullptr;
        --size_;
    }
    T* front() const { return head_; }
    size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }

    // Calls f(e) for each element; f may remove e itself (not its neighbours).
    template <class F>
    void for_each(F&& f) {
        for (T* e = head_; e;) {
            T* next = e->next;
            f(e);
            e = next;
        }
    }

private:
    T* head_ = nullptr;
    size_t size_ = 0;
};

}  // namespace kprism
