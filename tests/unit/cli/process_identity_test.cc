// SPDX-License-Identifier: Apache-2.0
// Who a pid is (kprism/cli/process_identity.h): the executable rule, the listening sockets of a
// /proc/net/tcp table that take a connection to an address, and this process read from /proc.
#include "kprism/cli/process_identity.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "kprism/base/address.h"

namespace kprism::proc {
namespace {

// An address as the kernel prints it: each 32-bit word in host byte order, %08X.
std::string proc_hex(const std::string& ip) {
    unsigned char a[16];
    size_t words = 1;
    if (inet_pton(AF_INET, ip.c_str(), a) != 1) {
        EXPECT_EQ(inet_pton(AF_INET6, ip.c_str(), a), 1) << ip;
        words = 4;
    }
    std::string out;
    for (size_t i = 0; i < words; ++i) {
        uint32_t w;
        std::memcpy(&w, a + i * 4, 4);
        out += fmt::format("{:08X}", w);
    }
    return out;
}

std::string row(int sl, const std::string& ip, int port, const char* state, uint64_t inode) {
    bool v6 = ip.find(':') != std::string::npos;
    std::string zero(v6 ? 32 : 8, '0');
    return fmt::format("{:4}: {}:{:04X} {}:0000 {} 00000000:00000000 00:00000000 00000000  1000        0 {} 1 "
                       "0000000000000000 100 0 0 10 0\n",
                       sl, proc_hex(ip), port, zero, state, inode);
}

constexpr const char* kHeader =
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n";

sockaddr_storage addr(const std::string& ip, uint16_t port) {
    sockaddr_storage ss{};
    EXPECT_TRUE(ip_to_sockaddr(ip, port, ss)) << ip;
    return ss;
}

using Inodes = std::vector<uint64_t>;

TEST(ProcessIdentity, KprismPathRule) {
    EXPECT_TRUE(is_kprism_path("/usr/bin/kprism"));
    EXPECT_TRUE(is_kprism_path("/kprism"));  // the static pod image
    EXPECT_TRUE(is_kprism_path("/usr/bin/kprism (deleted)"));  // replaced by an upgrade
    EXPECT_TRUE(is_kprism_path("kprism"));
    EXPECT_FALSE(is_kprism_path("/usr/bin/sleep"));
    EXPECT_FALSE(is_kprism_path("/usr/lib/systemd/systemd"));
    EXPECT_FALSE(is_kprism_path("/opt/kprism/bin/sh"));
    EXPECT_FALSE(is_kprism_path("/usr/bin/kprism-standin"));
    EXPECT_FALSE(is_kprism_path("/tmp/notkprism (deleted)"));
    EXPECT_FALSE(is_kprism_path(" (deleted)"));
    EXPECT_FALSE(is_kprism_path(""));
}

TEST(ProcessIdentity, ListeningInodesV4) {
    std::string t = std::string(kHeader) + row(0, "127.0.0.1", 7446, "0A", 111) +  // the admin port
                    row(1, "127.0.0.1", 7445, "0A", 222) +                          // another port
                    row(2, "127.0.0.1", 7446, "01", 333) +                          // established, not listening
                    row(3, "127.0.0.2", 7446, "0A", 444) +                          // another address
                    row(4, "0.0.0.0", 9000, "0A", 555);                             // a wildcard
    EXPECT_EQ(listening_inodes(t, false, addr("127.0.0.1", 7446)), (Inodes{111}));
    EXPECT_EQ(listening_inodes(t, false, addr("127.0.0.2", 7446)), (Inodes{444}));
    EXPECT_EQ(listening_inodes(t, false, addr("127.0.0.1", 9000)), (Inodes{555}));
    EXPECT_EQ(listening_inodes(t, false, addr("127.0.0.1", 1)), Inodes{});
    EXPECT_EQ(listening_inodes(t, false, addr("::1", 7446)), Inodes{}) << "an IPv4 listener takes no IPv6";
    EXPECT_EQ(listening_inodes(t, false, addr("::ffff:127.0.0.1", 7446)), (Inodes{111}));
}

TEST(ProcessIdentity, ListeningInodesV6) {
    std::string t = std::string(kHeader) + row(0, "::1", 7446, "0A", 10) + row(1, "::", 7447, "0A", 20) +
                    row(2, "::ffff:127.0.0.1", 7448, "0A", 30) + row(3, "fd00::1", 7446, "0A", 40);
    EXPECT_EQ(listening_inodes(t, true, addr("::1", 7446)), (Inodes{10}));
    EXPECT_EQ(listening_inodes(t, true, addr("fd00::1", 7446)), (Inodes{40}));
    EXPECT_EQ(listening_inodes(t, true, addr("::1", 7447)), (Inodes{20}));
    EXPECT_EQ(listening_inodes(t, true, addr("127.0.0.1", 7447)), (Inodes{20})) << "[::] is dual-stack";
    EXPECT_EQ(listening_inodes(t, true, addr("127.0.0.1", 7448)), (Inodes{30}));
    EXPECT_EQ(listening_inodes(t, true, addr("127.0.0.1", 7446)), Inodes{});
}

TEST(ProcessIdentity, MalformedTableLinesAreSkipped) {
    std::string t = std::string(kHeader) + "garbage\n" + "   0: 0100007F 00000000:0000 0A\n" +
                    "   1: XYZ:1D16 00000000:0000 0A 0:0 00:0 0 0 0 77 1\n" +
                    "   2: " + proc_hex("127.0.0.1") + ":1D16 00000000:0000 0A 0:0 00:0 0 0 0 notanumber 1\n" +
                    "   3: " + proc_hex("127.0.0.1") + ":1D16 00000000:0000 0A 0:0 00:0 0 0 0 0 1\n" +
                    row(4, "127.0.0.1", 7446, "0A", 88);
    EXPECT_EQ(listening_inodes(t, false, addr("127.0.0.1", 7446)), (Inodes{88}));
    EXPECT_EQ(listening_inodes("", false, addr("127.0.0.1", 7446)), Inodes{});
}

// This process as /proc shows it: its executable is not named kprism, but it is the same file as
// its own (the rule for a copy under another name); sleep is neither.
TEST(ProcessIdentity, ReadsThisProcess) {
    Finding self = runs_kprism(getpid());
    EXPECT_EQ(self.answer, Answer::yes) << self.detail;
    EXPECT_NE(self.detail.find("unit"), std::string::npos) << self.detail;
    pid_t sleeper = ::fork();
    ASSERT_GE(sleeper, 0);
    if (sleeper == 0) {
        ::execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
        ::_exit(127);
    }
    Finding other;
    for (int i = 0; i < 500; ++i) {  // until the exec is done, 5 s at most
        other = runs_kprism(sleeper);
        if (other.detail.find("sleep") != std::string::npos) break;
        ::usleep(10000);
    }
    EXPECT_EQ(other.answer, Answer::no) << other.detail;
    EXPECT_NE(other.detail.find("sleep"), std::string::npos) << other.detail;
    ::kill(sleeper, SIGKILL);
    ::waitpid(sleeper, nullptr, 0);

    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    sockaddr_storage ss = addr("127.0.0.1", 0);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&ss), sizeof(sockaddr_in)), 0);
    socklen_t len = sizeof ss;
    ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len), 0);
    Finding before = holds_listener(getpid(), ss);
    EXPECT_EQ(before.answer, Answer::unknown) << "bound, not listening: " << before.detail;
    ASSERT_EQ(::listen(fd, 1), 0);
    EXPECT_EQ(holds_listener(getpid(), ss).answer, Answer::yes);
    pid_t parent = getppid();
    EXPECT_NE(holds_listener(parent, ss).answer, Answer::yes);
    ::close(fd);
}

// The pidfd keeps the signal from reaching a process that was given the pid later: once the child
// is reaped, sending fails with ESRCH.
TEST(ProcessIdentity, SignalsOnlyTheProcessPinned) {
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        ::pause();
        ::_exit(0);
    }
    ProcessRef ref(child);
    EXPECT_EQ(ref.pid(), child);
    EXPECT_EQ(ref.signal(0), 0);
    EXPECT_EQ(ref.signal(SIGTERM), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
    EXPECT_EQ(ref.signal(0), ESRCH);
    EXPECT_EQ(ProcessRef(child).signal(0), ESRCH);
}

}  // namespace
}  // namespace kprism::proc
