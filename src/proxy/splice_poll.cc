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

static_assert(UV_VERSION_MAJOR == 1, "libuv_has_new_watchers reads a libuv 1 loop field");
// A watcher started since libuv last polled (a stream that began reading, a connect under way)
// enters libuv's epoll set only when its loop next runs, and uv_backend_timeout does not count it.
bool libuv_has_new_watchers(const uv_loop_t* loop) {
    return loop->watcher_queue[0] != static_cast<const void*>(&loop->watcher_queue);
}
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
// libuv's next timer allows. libuv's loop time is brought up to date first, or a timer would be
// waited for from a stale clock.
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
        int timeout = -1;  // libuv has nothing alive: only the set's sockets can wake the daemon
        if (alive) {
            uv_update_time(loop);
            timeout = uv_backend_timeout(loop);  // 0: callbacks pending, handles closing
        }
        libuv_due = timeout == 0 || libuv_has_new_watchers(loop);
        if (libuv_due) continue;
        int n = epoll_wait(epfd_, events, kMaxEvents, timeout);
        libuv_due = n <= 0;  // a timer is due, or a signal came (libuv reads its signal pipe)
        for (int i = 0; i < n; ++i) {
            if (events[i].data.u64 == kLoopTag) libuv_due = true;
            else handler_(events[i].data.u64, events[i].events);
        }
    }
}

}  // namespace kprism
