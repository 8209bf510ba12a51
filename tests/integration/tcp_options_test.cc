// SPDX-License-Identifier: Apache-2.0
// The TCP options kprism(8) promises, read back with getsockopt from kprism's own accepted and upstream sockets.
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "harness/harness.h"

using namespace it;

namespace {

// Through syscall(2): Debian 12's <sys/pidfd.h> declares them without C linkage.
int pidfd_open(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }
int pidfd_getfd(int pidfd, int fd) { return static_cast<int>(syscall(SYS_pidfd_getfd, pidfd, fd, 0)); }

int port_of(const sockaddr_storage& ss) {
    return ntohs(reinterpret_cast<const sockaddr_in&>(ss).sin_port);
}

// Copies of every TCP socket of process `pid` (pidfd_getfd(2): the same open socket, so getsockopt
// on the copy reads kprism's own options), keyed by "local port:peer port". Needs ptrace
// permission over the process (root, or the same user without Yama's restriction).
struct Sockets {
    std::map<std::string, int> fds;
    int error = 0;
    ~Sockets() {
        for (auto& [k, fd] : fds) ::close(fd);
    }
};
void collect(pid_t pid, Sockets& out) {
    for (auto& [k, fd] : out.fds) ::close(fd);
    out.fds.clear();
    int pidfd = pidfd_open(pid);
    if (pidfd < 0) {
        out.error = errno;
        return;
    }
    DIR* d = opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
    if (!d) {
        out.error = errno;
        ::close(pidfd);
        return;
    }
    while (dirent* e = readdir(d)) {
        if (e->d_name[0] == '.') continue;
        int fd = pidfd_getfd(pidfd, std::atoi(e->d_name));
        if (fd < 0) {
            if (errno == EPERM || errno == ENOSYS) out.error = errno;
            continue;
        }
        sockaddr_storage local{}, peer{};
        socklen_t ll = sizeof local, pl = sizeof peer;
        int type = 0;
        socklen_t tl = sizeof type;
        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_STREAM ||
            getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0 || local.ss_family != AF_INET ||
            getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) {
            ::close(fd);
            continue;
        }
        out.fds[std::to_string(port_of(local)) + ":" + std::to_string(port_of(peer))] = fd;
    }
    closedir(d);
    ::close(pidfd);
}

int local_port(int fd) {
    sockaddr_storage ss{};
    socklen_t l = sizeof ss;
    return getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &l) == 0 ? port_of(ss) : -1;
}

int opt(int fd, int level, int name) {
    int v = -1;
    socklen_t l = sizeof v;
    return getsockopt(fd, level, name, &v, &l) == 0 ? v : -1;
}

struct Want {
    int nodelay, keepalive, idle, interval, count, user_timeout;
};
std::string describe(int fd) {
    return "nodelay " + std::to_string(opt(fd, IPPROTO_TCP, TCP_NODELAY)) + ", keepalive " +
           std::to_string(opt(fd, SOL_SOCKET, SO_KEEPALIVE)) + ", idle " +
           std::to_string(opt(fd, IPPROTO_TCP, TCP_KEEPIDLE)) + ", interval " +
           std::to_string(opt(fd, IPPROTO_TCP, TCP_KEEPINTVL)) + ", count " +
           std::to_string(opt(fd, IPPROTO_TCP, TCP_KEEPCNT)) + ", user timeout " +
           std::to_string(opt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT));
}
bool has(int fd, const Want& w) {
    return (opt(fd, IPPROTO_TCP, TCP_NODELAY) != 0) == (w.nodelay != 0) &&
           (opt(fd, SOL_SOCKET, SO_KEEPALIVE) != 0) == (w.keepalive != 0) &&
           (!w.keepalive || (opt(fd, IPPROTO_TCP, TCP_KEEPIDLE) == w.idle &&
                             opt(fd, IPPROTO_TCP, TCP_KEEPINTVL) == w.interval &&
                             opt(fd, IPPROTO_TCP, TCP_KEEPCNT) == w.count)) &&
           opt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT) == w.user_timeout;
}

// One spliced connection through kprism started with `flags`; both of kprism's sockets of it
// must carry `want` (the upstream one within the options sweep's half second).
void check_options(const std::vector<std::string>& flags, const Want& want) {
    std::atomic<int> upstream_peer_port{-1};
    TcpServer up([&](int fd) {
        sockaddr_storage ss{};
        socklen_t l = sizeof ss;
        if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &l) == 0) upstream_peer_port = port_of(ss);
        TcpServer::echo(fd);
    });
    Kprism k({up.endpoint()}, flags);
    int fd = connect_to(k.port);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_all(fd, "ping", 4));
    char b[4];
    ASSERT_EQ(recv_exact(fd, b, 4), 4u);
    ASSERT_TRUE(eventually([&] { return upstream_peer_port.load() > 0; }));
    const std::string accepted = std::to_string(k.port) + ":" + std::to_string(local_port(fd));
    const std::string upstream = std::to_string(upstream_peer_port.load()) + ":" + std::to_string(up.port());
    Sockets s;
    collect(k.pid(), s);
    if (s.error == EPERM) GTEST_SKIP() << "pidfd_getfd: no ptrace permission over kprism";
    if (s.error == ENOSYS) GTEST_SKIP() << "no pidfd_open/pidfd_getfd here (Linux 5.6+; not under every emulator)";
    ASSERT_EQ(s.error, 0) << std::strerror(s.error);
    ASSERT_EQ(s.fds.count(accepted), 1u) << "kprism's accepted socket " << accepted;
    EXPECT_TRUE(has(s.fds[accepted], want)) << "accepted socket: " << describe(s.fds[accepted]);
    bool ok = eventually([&] {
        collect(k.pid(), s);
        return s.fds.count(upstream) && has(s.fds[upstream], want);
    });
    ASSERT_EQ(s.fds.count(upstream), 1u) << "kprism's upstream socket " << upstream;
    EXPECT_TRUE(ok) << "upstream socket: " << describe(s.fds[upstream]);
    ::close(fd);
}

}  // namespace

// Every option of the tcp group, away from its default, on both sockets of a connection.
TEST(TcpOptions, AcceptedAndUpstreamSocketsCarryThem) {
    check_options({"--tcp-keepalive", "45s", "--tcp-keepalive-interval", "7s", "--tcp-keepalive-count", "4",
                   "--tcp-user-timeout", "20s"},
                  {1, 1, 45, 7, 4, 20000});
}

TEST(TcpOptions, Defaults) { check_options({}, {1, 1, 30, 10, 3, 30000}); }

// Turned off: no TCP_NODELAY, no keepalive, the kernel's user timeout (0).
TEST(TcpOptions, Off) {
    check_options({"--tcp-nodelay=false", "--tcp-keepalive", "0", "--tcp-user-timeout", "0"}, {0, 0, 0, 0, 0, 0});
}

// A user timeout under a second (set on the upstream socket at once, not by the options sweep).
TEST(TcpOptions, ShortUserTimeout) {
    check_options({"--tcp-user-timeout", "500ms"}, {1, 1, 30, 10, 3, 500});
}
