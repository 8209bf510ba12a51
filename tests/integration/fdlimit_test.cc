// SPDX-License-Identifier: Apache-2.0
// kprism under a low RLIMIT_NOFILE: clients beyond what the descriptors allow are reset visibly
// (logged, counted) while the admin endpoint and the held connections keep working. Found by the
// fault suite (tests/faults, nofile-64): before, libuv's EMFILE reserve descriptor dropped them
// without a word, and the admin endpoint and the readiness checks could not get a socket either.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "harness/harness.h"

using namespace it;

TEST(FdLimit, ShedsVisiblyAndStaysObservable) {
    if (access("/usr/bin/prlimit", X_OK) != 0) GTEST_SKIP() << "needs /usr/bin/prlimit (util-linux)";
    TcpServer up(TcpServer::echo);
    int port = free_port(), admin = free_port();
    Process k({"/usr/bin/prlimit", "--nofile=64:64", "--", kprism_bin(), "--endpoints", up.endpoint(), "--bind-port",
               std::to_string(port), "--health-port", std::to_string(admin)});
    ASSERT_TRUE(k.wait_output("msg=started")) << k.output();
    EXPECT_TRUE(k.wait_output("RLIMIT_NOFILE allows fewer client connections than max_connections")) << k.output();

    // 60 clients at once, each holding its connection: 120 descriptors wanted, 64 allowed.
    std::vector<int> held;
    int shed = 0;
    for (int i = 0; i < 60; ++i) {
        int fd = connect_to(port);
        if (fd < 0 && errno == ECONNRESET) {  // shed before connect() returned: kprism accepted and reset
            ++shed;                              // it while this client was still waiting to be scheduled
            continue;
        }
        ASSERT_GE(fd, 0) << "client " << i << ": " << std::strerror(errno) << "; " << k.output();
        char b[4];
        if (send_all(fd, "ping", 4) && recv_exact(fd, b, 4, 3000ms) == 4 && memcmp(b, "ping", 4) == 0) {
            held.push_back(fd);
        } else {
            ++shed;
            ::close(fd);
        }
    }
    EXPECT_GT(held.size(), 5u);
    EXPECT_GT(shed, 0);
    // At the limit the admin endpoint still answers, and counts what was shed.
    std::string m = http_get(admin, "/metrics");
    size_t p = m.find("\nkprism_connections_rejected_total ");
    ASSERT_NE(p, std::string::npos) << "no answer from the admin endpoint at the descriptor limit";
    EXPECT_GE(std::strtol(m.c_str() + p + 35, nullptr, 10), shed);
    EXPECT_TRUE(k.wait_output("msg=\"connection rejected\" reason=\"connection limit reached (RLIMIT_NOFILE)\""))
        << k.output();
    for (int fd : held) {  // the held connections still carry data
        char b[4];
        EXPECT_TRUE(send_all(fd, "pong", 4) && recv_exact(fd, b, 4, 3000ms) == 4 && memcmp(b, "pong", 4) == 0);
        ::close(fd);
    }
    EXPECT_TRUE(eventually([&] { return echo_ok(port); })) << "not serving again once the clients left";
    k.signal(SIGTERM);
    EXPECT_EQ(k.wait(), 0);
}
