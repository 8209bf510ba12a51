// SPDX-License-Identifier: Apache-2.0
// The spliced sockets' readiness: one edge-triggered epoll set, watched by libuv's loop as one descriptor.
#pragma once

#include <uv.h>

#include <cstdint>

namespace kprism {

// Why not libuv's streams: a uv_tcp_t is level-triggered, re-registers a socket when its connect
// completes (EPOLL_CTL_MOD), removes it before closing it (EPOLL_CTL_DEL, which close(2) does
// anyway) and reads through read(2)'s file layer. Here each socket is added once, with every
// event it will ever need (EPOLLIN | EPOLLOUT | EPOLLRDHUP, edge-triggered), and leaves the set
// when it is closed: two epoll_ctl per spliced connection instead of five, and a peer's FIN often
// known from the event that brings its last bytes.
//
// Edge-triggered: an owner reads a socket until it would block, or re-arms it (rearm()) when it
// stops before that. A descriptor that another process also holds (handed over, in the crash
// copy) stays in the set after close(2); its owner calls remove() first.
//
// Owned by the Server. The handle is closed by close() (from Server::finish); the epoll set itself
// stays open until the SplicePoll is destroyed, after the loop has returned, so remove() always
// works.
class SplicePoll {
public:
    // Called for each event with the tag the socket was added with.
    using Handler = void (*)(uint64_t tag, uint32_t events);

    SplicePoll() = default;
    ~SplicePoll();
    SplicePoll(const SplicePoll&) = delete;
    SplicePoll& operator=(const SplicePoll&) = delete;

    // Creates the set and starts watching it. Returns 0 or a libuv error code.
    int start(uv_loop_t* loop, Handler handler);
    // Adds `fd` for every event, edge-triggered. Returns 0 or a negative errno.
    int add(int fd, uint64_t tag);
    // Reports `fd` again if it is still ready (EPOLL_CTL_MOD re-arms an edge-triggered socket).
    void rearm(int fd, uint64_t tag);
    // Takes `fd` out of the set before it is closed (needed only when another process holds it).
    void remove(int fd);
    void close();

    // Events taken from the set per wake-up of libuv's loop; more wait for the next one.
    static constexpr int kMaxEvents = 128;

private:
    static void on_ready(uv_poll_t* p, int status, int events);

    uv_poll_t poll_{};
    int epfd_ = -1;
    bool open_ = false;  // poll_ initialised and not yet closed
    Handler handler_ = nullptr;
};

}  // namespace kprism
