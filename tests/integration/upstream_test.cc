// SPDX-License-Identifier: Apache-2.0
// Upstream failures seen through the real binary: refused, hung connect, death mid-stream.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include <set>
#include <unistd.h>

#include "harness/harness.h"

using namespace it;

namespace {
std::string refused_endpoint() { return "127.0.0.1:" + std::to_string(refused_port()); }

}  // namespace

TEST(Upstream, RefusedIsRetriedOnAnother) {
    TcpServer up(TcpServer::echo);
    Kprism k({refused_endpoint(), refused_endpoint(), up.endpoint()});
    for (int i = 0; i < 30; ++i) EXPECT_TRUE(echo_ok(k.port)) << i;
    EXPECT_EQ(k.stat("client_failures"), 0);
    EXPECT_TRUE(k.wait_output("msg=\"upstream connect failed\""));
    EXPECT_TRUE(k.wait_output("reason=refused error=\"connection refused\""));
}

TEST(Upstream, AllDownClosesClientPromptly) {
    Kprism k({refused_endpoint(), refused_endpoint()});
    int fd = connect_to(k.port);
    ASSERT_GE(fd, 0);
    auto t0 = Clock::now();
    int err = -1;
    recv_until_eof(fd, &err, 5000ms);
    EXPECT_NE(err, ETIMEDOUT);
    EXPECT_LT(Clock::now() - t0, 2000ms);
    ::close(fd);
    EXPECT_TRUE(k.wait_output("reason=\"every upstream failed\""));
    EXPECT_EQ(k.stat("client_failures"), 1);
}

// An upstream whose accept queue is full never completes the handshake: the connect times out
// and the client is served by another upstream.
TEST(Upstream, ConnectTimeoutIsRetriedOnAnother) {
    TcpServer hung(nullptr, false, /*backlog=*/0);
    std::vector<int> fillers;
    for (int i = 0; i < 4; ++i) {  // fill the accept queue so further SYNs are dropped
        int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(static_cast<uint16_t>(hung.port()));
        ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
        fillers.push_back(fd);
    }
    TcpServer good(TcpServer::echo);
    Kprism k({hung.endpoint(), good.endpoint()}, {"--connect-timeout", "300ms", "--policy", "least-connections"});
    for (int i = 0; i < 6; ++i) EXPECT_TRUE(echo_ok(k.port)) << i;
    EXPECT_EQ(k.stat("client_failures"), 0);
    EXPECT_TRUE(k.wait_output("reason=timeout error=\"connect timeout\""));
    for (int fd : fillers) ::close(fd);
}

TEST(Upstream, SurvivesOneUpstreamDying) {
    auto a = std::make_unique<TcpServer>(TcpServer::echo);
    TcpServer b(TcpServer::echo);
    Kprism k({a->endpoint(), b.endpoint()});
    int held = connect_to(k.port);
    ASSERT_GE(held, 0);
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(echo_ok(k.port));
    a.reset();  // closes its listener and every connection it holds
    for (int i = 0; i < 30; ++i) ASSERT_TRUE(echo_ok(k.port)) << i << k.output();
    EXPECT_EQ(k.stat("client_failures"), 0);
    ::close(held);
}

TEST(Upstream, MaxConnectionsShedsAndRecovers) {
    TcpServer up(TcpServer::echo);
    Kprism k({up.endpoint()}, {"--max-connections", "5"});
    std::vector<int> fds;
    for (int i = 0; i < 5; ++i) {
        int fd = connect_to(k.port);
        ASSERT_TRUE(send_all(fd, "a", 1));
        char c;
        ASSERT_EQ(recv_exact(fd, &c, 1), 1u);
        fds.push_back(fd);
    }
    int extra = connect_to(k.port);
    ASSERT_GE(extra, 0);
    int err = -1;
    recv_until_eof(extra, &err, 3000ms);
    EXPECT_NE(err, ETIMEDOUT) << "the sixth connection must be closed";
    ::close(extra);
    EXPECT_TRUE(k.wait_output("max_connections reached"));
    EXPECT_TRUE(echo_ok(k.port) == false);  // still full
    ::close(fds.back());
    fds.pop_back();
    EXPECT_TRUE(eventually([&] { return echo_ok(k.port); }));
    for (int fd : fds) ::close(fd);
}

TEST(Upstream, UnresolvableHostnameIsAWarningNotFatal) {
    TcpServer up(TcpServer::echo);
    Kprism k({"no-such-host.invalid:6443", up.endpoint(), "localhost:" + std::to_string(up.port())});
    EXPECT_TRUE(k.wait_output("cannot resolve endpoint; will retry"));
    EXPECT_TRUE(k.wait_output("msg=\"endpoint resolved\" upstream=localhost:"));
    for (int i = 0; i < 10; ++i) EXPECT_TRUE(echo_ok(k.port));
    EXPECT_EQ(k.stat("client_failures"), 0);
}

TEST(Upstream, StandinAnswersThroughKprism) {
    int p1 = free_port(), p2 = free_port();
    Process s1({standin_bin(), "--listen", "127.0.0.1:" + std::to_string(p1), "--name", "one"});
    Process s2({standin_bin(), "--listen", "127.0.0.1:" + std::to_string(p2), "--name", "two"});
    ASSERT_TRUE(s1.wait_output("listening"));
    ASSERT_TRUE(s2.wait_output("listening"));
    Kprism k({"127.0.0.1:" + std::to_string(p1), "127.0.0.1:" + std::to_string(p2)});
    std::set<std::string> seen;
    ASSERT_TRUE(eventually([&] {
        std::string r = http_get(k.port, "/version");
        if (r.find("served by one") != std::string::npos) seen.insert("one");
        if (r.find("served by two") != std::string::npos) seen.insert("two");
        return seen.size() == 2;
    }));
    s1.signal(SIGKILL);
    s1.wait();
    for (int i = 0; i < 10; ++i) EXPECT_NE(http_get(k.port).find("served by two"), std::string::npos);
}
