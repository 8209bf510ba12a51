// SPDX-License-Identifier: Apache-2.0
// The spliced sockets' edge-triggered epoll set, and the daemon's loop: one wait for both it and libuv.
#include "kprism/proxy/splice_poll.h"

#include <sys/epoll.h>

#include <unistd.h>

#include <cerrno>

namespace kprism {

namespace {
// EPOLLPRI: urgent data stops a read at its mark (splice: a short read is then not the end).
constexpr uint32_t kEvents = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI | EPOLLET;
// The tag of libuv's own descriptor in the set. A connection's tags are pointers with low bits
// set (Connection::tag), never all ones.
constexpr uint64_t kLoopTag = ~uint64_t{0};
}  // namespace

SplicePoll::~SplicePoll() {
    if (epfd_ >= 0) ::close(epfd_);
}

int SplicePoll::start(uv_loop_t* loop, Handler handler) {
    handler_ = handler;
    epfd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epfd_ < 0) return -errno;
    epoll_event ev{};
    ev.events = EPOLLIN;  // level-triggered: libuv leaves in its set what one iteration did not take
    ev.data.u64 = kLoopTag;
    if (epoll_ctl(epfd_, EPOLL_CTL_ADD, uv_backend_fd(loop), &ev) != 0) return -errno;
    open_ = true;
    return 0;
}

int SplicePoll::add(int fd, uint64_t tag) {
    epoll_event ev{};
    ev.events = kEvents;
    ev.data.u64 = tag;
    return epoll_ctl(epfd_, EPOLL_CTL_ADD, fd, &ev) == 0 ? 0 : -errno;
}

void SplicePoll::rearm(int fd, uint64_t tag) {
    epoll_event ev{};
    ev.events = kEvents;
    ev.data.u64 = tag;
    epoll_ctl(epfd_, EPOLL_CTL_MOD, fd, &ev);
}

void SplicePoll::remove(int fd) {
    epoll_event ev{};  // ignored since Linux 2.6.9, but not null for older kernels
    epoll_ctl(epfd_, EPOLL_CTL_DEL, fd, &ev);
}

void SplicePoll::close() { open_ = false; }

// Each turn: libuv's non-blocking iteration if it is due, then one wait on the set for as long as
// libuv allows. uv_backend_timeout is 0 while libuv has work before it may block (callbacks
// pending, handles closing, a watcher not yet in its own set): then the set is only looked at, so
// spliced bytes are not kept waiting by libuv's work, nor libuv's by theirs.
void SplicePoll::run(uv_loop_t* loop) {
    if (!open_) {
        uv_run(loop, UV_RUN_DEFAULT);
        return;
    }
    epoll_event events[kMaxEvents];
    bool libuv_due = true;
    for (;;) {
        if (libuv_due) uv_run(loop, UV_RUN_NOWAIT);
        bool alive = uv_loop_alive(loop);
        if (!alive && !open_) return;
        int timeout = alive ? uv_backend_timeout(loop) : -1;  // -1: only the set's sockets can wake us
        int n = epoll_wait(epfd_, events, kMaxEvents, timeout);
        // The handlers' timers and ages count from now, not from before the wait (libuv updates
        // its clock after its own wait the same way).
        if (n > 0) uv_update_time(loop);
        libuv_due = n <= 0 || timeout == 0;  // n <= 0: a timer is due, or a signal came
        for (int i = 0; i < n; ++i) {
            if (events[i].data.u64 == kLoopTag) libuv_due = true;
            else handler_(events[i].data.u64, events[i].events);
        }
    }
}

}  // namespace kprism
