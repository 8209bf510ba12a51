// SPDX-License-Identifier: Apache-2.0
// The spliced sockets' edge-triggered epoll set, drained from libuv's loop.
#include "kprism/proxy/splice_poll.h"

#include <sys/epoll.h>

#include <unistd.h>

#include <cerrno>

namespace kprism {

namespace {
// EPOLLPRI: urgent data stops a read at its mark (splice: a short read is then not the end).
constexpr uint32_t kEvents = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI | EPOLLET;
}

SplicePoll::~SplicePoll() {
    if (epfd_ >= 0) ::close(epfd_);
}

int SplicePoll::start(uv_loop_t* loop, Handler handler) {
    handler_ = handler;
    epfd_ = epoll_create1(EPOLL_CLOEXEC);
    if (epfd_ < 0) return -errno;
    if (int r = uv_poll_init(loop, &poll_, epfd_); r != 0) return r;
    open_ = true;
    poll_.data = this;
    return uv_poll_start(&poll_, UV_READABLE, on_ready);
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

void SplicePoll::close() {
    if (!open_) return;
    open_ = false;
    uv_close(reinterpret_cast<uv_handle_t*>(&poll_), nullptr);
}

// The set is level-triggered towards libuv: while events wait in it, the loop reports it again,
// so taking at most kMaxEvents per wake-up leaves the rest for the next iteration (after timers).
void SplicePoll::on_ready(uv_poll_t* p, int status, int) {
    auto* self = static_cast<SplicePoll*>(p->data);
    if (status != 0) return;
    epoll_event events[kMaxEvents];
    int n;
    do n = epoll_wait(self->epfd_, events, kMaxEvents, 0);
    while (n < 0 && errno == EINTR);
    for (int i = 0; i < n; ++i) self->handler_(events[i].data.u64, events[i].events);
}

}  // namespace kprism
