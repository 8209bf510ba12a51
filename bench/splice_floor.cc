// SPDX-License-Identifier: Apache-2.0
// The least CPU a user-space TCP splice can spend per keep-alive request: a reference for `make bench-floor`.
//
// kprism's CPU per keep-alive request is compared with HAProxy's in `make bench-cpu`. This program
// says how low any proxy that copies the bytes through user space could go on the same machine:
// it does nothing but move bytes between each accepted connection and one upstream connection,
// with no timers, no health, no limits, no logging, in one of two ways:
//   epoll   an edge-triggered epoll set; on each event one recv(2) and one send(2) of what it read
//           (kprism's own data path, without its features);
//   uring   io_uring: a multishot recv per socket into a ring of provided buffers, the send of each
//           buffer queued at once, every submission and completion of a turn in one io_uring_enter
//           (single issuer, task work deferred to that call): no system call per recv or send.
// It is a measuring instrument, not a proxy: it connects upstream with a blocking connect(2) when
// it accepts (so it is meant for keep-alive load, where connections are made once), and it keeps
// one message in flight per direction (HTTP/1.1 without pipelining): a partial send is finished
// before anything else on that connection, but sends on one socket are not ordered against each
// other beyond that. A connection ends at either side's end or error (no half-close).
//
// Usage: splice_floor epoll|uring LISTEN_PORT UPSTREAM_PORT... (all on 127.0.0.1)
#include <arpa/inet.h>
#include <fcntl.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr size_t kBufSize = 16384;

struct Side {
    int fd = -1;
    int peer = -1;
    uint16_t gen = 0;  // which connection on this descriptor: io_uring completions outlive a close
};
std::vector<Side> sides;  // by descriptor
uint16_t next_gen = 0;
std::vector<int> upstream_ports;
size_t next_upstream = 0;

[[noreturn]] void die(const char* what, int err) {
    std::fprintf(stderr, "splice_floor: %s: %s\n", what, std::strerror(err));
    std::exit(1);
}

sockaddr_in loopback(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

void nodelay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

int listen_on(int port) {
    int l = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
    if (l < 0) die("socket", errno);
    setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a = loopback(port);
    if (bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("bind", errno);
    if (listen(l, 4096) != 0) die("listen", errno);
    return l;
}

// Pairs an accepted client with a new upstream connection (round robin); false: client closed.
bool pair_with_upstream(int client, bool nonblocking) {
    nodelay(client);
    int up = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a = loopback(upstream_ports[next_upstream++ % upstream_ports.size()]);
    if (up < 0 || connect(up, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        if (up >= 0) close(up);
        close(client);
        return false;
    }
    nodelay(up);
    if (nonblocking) fcntl(up, F_SETFL, fcntl(up, F_GETFL) | O_NONBLOCK);
    size_t need = static_cast<size_t>(client > up ? client : up) + 1;
    if (sides.size() < need) sides.resize(need);
    uint16_t gen = ++next_gen;
    sides[static_cast<size_t>(client)] = {client, up, gen};
    sides[static_cast<size_t>(up)] = {up, client, gen};
    return true;
}

void drop(int fd) {
    if (fd < 0 || static_cast<size_t>(fd) >= sides.size() || sides[static_cast<size_t>(fd)].fd < 0) return;
    int peer = sides[static_cast<size_t>(fd)].peer;
    sides[static_cast<size_t>(fd)] = {};
    sides[static_cast<size_t>(peer)] = {};
    // shutdown first: it ends an io_uring recv still armed on the socket, which holds the file
    // open past close(2) (and with it the connection).
    for (int s : {fd, peer}) {
        shutdown(s, SHUT_RDWR);
        close(s);
    }
}

// The rest of a partial send, waiting for room (rare: one small message in flight).
bool send_rest(int fd, const char* p, size_t n) {
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            p += w;
            n -= static_cast<size_t>(w);
        } else if (w < 0 && errno == EAGAIN) {
            pollfd pfd{fd, POLLOUT, 0};
            poll(&pfd, 1, -1);
        } else if (!(w < 0 && errno == EINTR)) {
            return false;
        }
    }
    return true;
}

void run_epoll(int listener) {
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0) die("epoll_create1", errno);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = listener;
    epoll_ctl(ep, EPOLL_CTL_ADD, listener, &ev);
    static char buf[kBufSize];
    epoll_event events[256];
    for (;;) {
        int n = epoll_wait(ep, events, 256, -1);
        for (int i = 0; i < n; ++i) {
            int fd = events[i].data.fd;
            if (fd == listener) {
                int c;
                while ((c = accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    if (!pair_with_upstream(c, true)) continue;
                    for (int s : {c, sides[static_cast<size_t>(c)].peer}) {
                        epoll_event e{};
                        e.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
                        e.data.fd = s;
                        epoll_ctl(ep, EPOLL_CTL_ADD, s, &e);
                    }
                }
                continue;
            }
            if (sides[static_cast<size_t>(fd)].fd < 0) continue;  // dropped earlier in this batch
            for (;;) {
                ssize_t r = recv(fd, buf, sizeof buf, 0);
                if (r < 0 && errno == EAGAIN) break;
                if (r <= 0 || !send_rest(sides[static_cast<size_t>(fd)].peer, buf, static_cast<size_t>(r))) {
                    drop(fd);
                    break;
                }
                if (static_cast<size_t>(r) < sizeof buf) break;  // edge-triggered: a short read took it all
            }
        }
    }
}

// io_uring user_data: the operation (4 bits), a buffer id (12), the connection's generation (16),
// the descriptor (32).
enum Op : uint64_t { kAccept = 1, kRecv = 2, kSend = 3 };
uint64_t tag(Op op, unsigned bid, int fd) {
    uint16_t gen = static_cast<size_t>(fd) < sides.size() ? sides[static_cast<size_t>(fd)].gen : 0;
    return (static_cast<uint64_t>(op) << 60) | (static_cast<uint64_t>(bid) << 48) | (static_cast<uint64_t>(gen) << 32) |
           static_cast<uint32_t>(fd);
}

void run_uring(int listener) {
    io_uring ring;
    io_uring_params params{};
    params.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN;
    if (int e = io_uring_queue_init_params(4096, &ring, &params)) die("io_uring_queue_init_params", -e);
    constexpr unsigned kBufs = 2048;
    constexpr unsigned kSize = 4096;
    static_assert(kBufs <= 0xfff, "a buffer id has 12 bits in user_data");
    void* ring_mem = nullptr;
    if (posix_memalign(&ring_mem, 4096, kBufs * sizeof(io_uring_buf)) != 0) die("posix_memalign", ENOMEM);
    auto* br = static_cast<io_uring_buf_ring*>(ring_mem);
    std::vector<char> mem(static_cast<size_t>(kBufs) * kSize);
    struct Pending {
        int to = -1;
        unsigned off = 0, len = 0;
    };
    std::vector<Pending> pending(kBufs);
    io_uring_buf_reg reg{};
    reg.ring_addr = reinterpret_cast<uintptr_t>(br);
    reg.ring_entries = kBufs;
    reg.bgid = 1;
    if (int e = io_uring_register_buf_ring(&ring, &reg, 0)) die("io_uring_register_buf_ring", -e);
    io_uring_buf_ring_init(br);
    const int mask = io_uring_buf_ring_mask(kBufs);
    char* base = mem.data();
    for (unsigned i = 0; i < kBufs; ++i)
        io_uring_buf_ring_add(br, base + static_cast<size_t>(i) * kSize, kSize, static_cast<unsigned short>(i), mask,
                              static_cast<int>(i));
    io_uring_buf_ring_advance(br, kBufs);

    auto sqe = [&] {
        io_uring_sqe* q = io_uring_get_sqe(&ring);
        if (!q) {
            io_uring_submit(&ring);
            q = io_uring_get_sqe(&ring);
        }
        return q;
    };
    auto recv_on = [&](int fd) {
        io_uring_sqe* q = sqe();
        io_uring_prep_recv_multishot(q, fd, nullptr, 0, 0);
        q->flags |= IOSQE_BUFFER_SELECT;
        q->buf_group = 1;
        io_uring_sqe_set_data64(q, tag(kRecv, 0, fd));
    };
    auto send_from = [&](unsigned bid) {
        Pending& p = pending[bid];
        io_uring_sqe* q = sqe();
        io_uring_prep_send(q, p.to, base + static_cast<size_t>(bid) * kSize + p.off, p.len, MSG_NOSIGNAL);
        io_uring_sqe_set_data64(q, tag(kSend, bid, p.to));
    };
    io_uring_sqe* q = sqe();
    io_uring_prep_multishot_accept(q, listener, nullptr, nullptr, SOCK_CLOEXEC);
    io_uring_sqe_set_data64(q, tag(kAccept, 0, listener));
    for (;;) {
        io_uring_submit_and_wait(&ring, 1);
        io_uring_cqe* cqe;
        unsigned head, seen = 0;
        int returned = 0;
        auto give_back = [&](unsigned bid) {
            io_uring_buf_ring_add(br, base + static_cast<size_t>(bid) * kSize, kSize, static_cast<unsigned short>(bid),
                                  mask, returned++);
        };
        io_uring_for_each_cqe(&ring, head, cqe) {
            ++seen;
            auto op = static_cast<Op>(cqe->user_data >> 60);
            unsigned bid = static_cast<unsigned>((cqe->user_data >> 48) & 0xfff);
            auto gen = static_cast<uint16_t>(cqe->user_data >> 32);
            int fd = static_cast<int>(cqe->user_data & 0xffffffff), res = cqe->res;
            // A completion for a connection already dropped, whose descriptor may now be another's.
            bool live = fd >= 0 && static_cast<size_t>(fd) < sides.size() && sides[static_cast<size_t>(fd)].fd >= 0 &&
                        sides[static_cast<size_t>(fd)].gen == gen;
            if (op == kAccept) {
                if (res >= 0 && pair_with_upstream(res, false)) {
                    recv_on(res);
                    recv_on(sides[static_cast<size_t>(res)].peer);
                }
                if (!(cqe->flags & IORING_CQE_F_MORE)) die("multishot accept ended", res < 0 ? -res : EIO);
            } else if (op == kRecv) {
                if (res > 0 && (cqe->flags & IORING_CQE_F_BUFFER)) {
                    unsigned got = cqe->flags >> IORING_CQE_BUFFER_SHIFT;
                    if (!live) {
                        give_back(got);
                        continue;
                    }
                    pending[got] = {sides[static_cast<size_t>(fd)].peer, 0, static_cast<unsigned>(res)};
                    send_from(got);
                    if (!(cqe->flags & IORING_CQE_F_MORE)) recv_on(fd);
                } else if (res == -ENOBUFS && live) {
                    recv_on(fd);  // every buffer in flight: ask again
                } else if (!(cqe->flags & IORING_CQE_F_MORE) && live) {
                    drop(fd);  // the end, or an error
                }
            } else if (op == kSend) {
                Pending& p = pending[bid];
                if (res > 0 && static_cast<unsigned>(res) < p.len && live) {
                    p.off += static_cast<unsigned>(res);
                    p.len -= static_cast<unsigned>(res);
                    send_from(bid);
                    continue;
                }
                if (res < 0 && live) drop(fd);
                give_back(bid);
            }
        }
        if (returned) io_uring_buf_ring_advance(br, returned);
        io_uring_cq_advance(&ring, seen);
    }
}

}  // namespace

int main(int argc, char** argv) {
    bool epoll_mode = argc >= 4 && std::strcmp(argv[1], "epoll") == 0;
    if (argc < 4 || (!epoll_mode && std::strcmp(argv[1], "uring") != 0)) {
        std::fprintf(stderr, "usage: splice_floor epoll|uring LISTEN_PORT UPSTREAM_PORT...\n");
        return 2;
    }
    for (int i = 3; i < argc; ++i) upstream_ports.push_back(std::atoi(argv[i]));
    int listener = listen_on(std::atoi(argv[2]));
    if (epoll_mode) run_epoll(listener);
    else run_uring(listener);
}
