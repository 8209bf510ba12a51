// SPDX-License-Identifier: Apache-2.0
// The spliced sockets' readiness: one edge-triggered epoll set, and the loop that waits on it.
#pragma once

#include <uv.h>

#include <cstdint>

namespace kprism {

// Why not libuv's streams: a uv_tcp_t is level-triggered, re-registers a socket when its connect
// completes (EPOLL_CTL_MOD), removes it before closing it (EPOLL_CTL_DEL, which close(2) does
// anyway) and reads through read(2)'s file layer. Here each socket is added once, with every
// event it will ever need (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLPRI, edge-triggered), and leaves
// the set when it is closed: two epoll_ctl per spliced connection instead of five, and a peer's
// FIN often known from the event that brings its last bytes.
//
// Edge-triggered: an owner reads a socket until it would block, or re-arms it (rearm()) when it
// stops before that. A descriptor that another process also holds (handed over, in the crash
// copy) stays in the set after close(2); its owner calls remove() first.
//
// One wait: run() drives libuv's loop with this set as the only place the daemon blocks. libuv's
// own epoll descriptor is a member of the set (level-triggered), and libuv runs a non-blocking
// iteration only when that descriptor is ready, a timer is due or libuv has work queued
// (callbacks pending, handles closing, watchers not yet in its set). A wake-up that brings only
// spliced bytes, the common one under load, costs one epoll_wait, not two (libuv's, then this
// set's, as when the set was a uv_poll_t in libuv's loop).
//
// Owned by the Server: started first in Server::start, closed by Server::finish once no
// connection is left, or by Server::start when it fails. The set itself stays open until the
// SplicePoll is destroyed, after the loop has returned, so remove() always works.
class SplicePoll {
public:
    // Called for each event with the tag the socket was added with.
    using Handler = void (*)(uint64_t tag, uint32_t events);

    SplicePoll() = default;
    ~SplicePoll();
    SplicePoll(const SplicePoll&) = delete;
    SplicePoll& operator=(const SplicePoll&) = delete;

    // Creates the set, with `loop`'s own descriptor in it. Returns 0 or a negative errno.
    int start(uv_loop_t* loop, Handler handler);
    // Adds `fd` for every event, edge-triggered. Returns 0 or a negative errno.
    int add(int fd, uint64_t tag);
    // Reports `fd` again if it is still ready (EPOLL_CTL_MOD re-arms an edge-triggered socket).
    void rearm(int fd, uint64_t tag);
    // Takes `fd` out of the set before it is closed (needed only when another process holds it).
    void remove(int fd);
    // No socket is left in the set: run() returns once libuv's loop has nothing left either.
    void close();

    // Runs `loop` until it has nothing left to do and the set is closed: uv_run(UV_RUN_DEFAULT)
    // with one wait. Without a started set (start() failed) it is plain uv_run.
    void run(uv_loop_t* loop);

    // Events taken from the set per wait; more wait for the next one.
    static constexpr int kMaxEvents = 128;

private:
    int epfd_ = -1;
    bool open_ = false;  // started and not yet closed
    Handler handler_ = nullptr;
};

}  // namespace kprism
