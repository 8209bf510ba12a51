// SPDX-License-Identifier: Apache-2.0
// TCP options set on a listening socket reach the sockets it accepts (kprism relies on this to
// set nothing per accepted connection), and a listener can turn each of them off again.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include <chrono>

#include "kprism/proxy/sockopt.h"

using namespace kprism;
using namespace std::chrono_literals;

namespace {

struct Accepted {
    int nodelay, keepalive, idle, interval, count, user_timeout;
};

int get(int fd, int level, int name) {
    int v = -1;
    socklen_t len = sizeof v;
    EXPECT_EQ(getsockopt(fd, level, name, &v, &len), 0);
    return v;
}

// Listens on 127.0.0.1 with `s` applied as to a listener (after any `before`), accepts one real
// loopback connection and reads the accepted socket's options.
Accepted accept_one(const Settings& s, const Settings* before = nullptr) {
    uv_loop_t loop;
    uv_loop_init(&loop);
    uv_tcp_t listener;
    uv_tcp_init(&loop, &listener);
    sockaddr_in addr{};
    uv_ip4_addr("127.0.0.1", 0, &addr);
    EXPECT_EQ(uv_tcp_bind(&listener, reinterpret_cast<const sockaddr*>(&addr), 0), 0);
    uv_os_fd_t lfd;
    uv_fileno(reinterpret_cast<uv_handle_t*>(&listener), &lfd);
    if (before) {
        EXPECT_EQ(apply_tcp_options(lfd, *before, true), 0);
    }
    EXPECT_EQ(apply_tcp_options(lfd, s, true), 0);
    EXPECT_EQ(uv_listen(reinterpret_cast<uv_stream_t*>(&listener), 8, [](uv_stream_t*, int) {}), 0);
    int namelen = sizeof addr;
    uv_tcp_getsockname(&listener, reinterpret_cast<sockaddr*>(&addr), &namelen);

    int client = socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    int fd = accept(lfd, nullptr, nullptr);  // the handshake is complete: the backlog has it
    EXPECT_GE(fd, 0);
    Accepted a{get(fd, IPPROTO_TCP, TCP_NODELAY),  get(fd, SOL_SOCKET, SO_KEEPALIVE),
               get(fd, IPPROTO_TCP, TCP_KEEPIDLE), get(fd, IPPROTO_TCP, TCP_KEEPINTVL),
               get(fd, IPPROTO_TCP, TCP_KEEPCNT),  get(fd, IPPROTO_TCP, TCP_USER_TIMEOUT)};
    close(fd);
    close(client);
    uv_close(reinterpret_cast<uv_handle_t*>(&listener), nullptr);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return a;
}

}  // namespace

TEST(Sockopt, AcceptedSocketsInheritTheListenersOptions) {
    Settings s;
    s.tcp_nodelay = true;
    s.tcp_keepalive = 17s;
    s.tcp_keepalive_interval = 3s;
    s.tcp_keepalive_count = 4;
    s.tcp_user_timeout = 9s;
    Accepted a = accept_one(s);
    EXPECT_NE(a.nodelay, 0);
    EXPECT_NE(a.keepalive, 0);
    EXPECT_EQ(a.idle, 17);
    EXPECT_EQ(a.interval, 3);
    EXPECT_EQ(a.count, 4);
    EXPECT_EQ(a.user_timeout, 9000);
}

TEST(Sockopt, AListenerTurnsOptionsOffAgain) {
    Settings on;
    on.tcp_nodelay = true;
    on.tcp_keepalive = 17s;
    on.tcp_user_timeout = 9s;
    Settings off = on;
    off.tcp_nodelay = false;
    off.tcp_keepalive = Duration(0);
    off.tcp_user_timeout = Duration(0);
    Accepted a = accept_one(off, &on);  // as after a reload that turned them off
    EXPECT_EQ(a.nodelay, 0);
    EXPECT_EQ(a.keepalive, 0);
    EXPECT_EQ(a.user_timeout, 0);
}
