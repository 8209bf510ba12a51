// SPDX-License-Identifier: Apache-2.0
// The sd-daemon wrapper: message texts, environment parsing, passed fds. Run against both builds
// (libsystemd and WITH_SYSTEMD=0) to show they behave the same.
#include "kprism/base/sd_notify.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

using namespace kprism;

namespace {

// Sets NOTIFY_SOCKET to a datagram socket in a temp dir for the test's lifetime.
class NotifySink {
public:
    NotifySink() {
        char tmpl[] = "/tmp/kprism-unit-notify-XXXXXX";
        dir_ = mkdtemp(tmpl);
        std::string path = dir_ + "/notify";
        fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        sockaddr_un sa{};
        sa.sun_family = AF_UNIX;
        std::memcpy(sa.sun_path, path.data(), path.size());
        EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
        setenv("NOTIFY_SOCKET", path.c_str(), 1);
    }
    ~NotifySink() {
        unsetenv("NOTIFY_SOCKET");
        ::close(fd_);
        std::filesystem::remove_all(dir_);
    }
    std::string next() {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 1000) != 1) return "(nothing)";
        char buf[4096];
        ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
        return n < 0 ? "(error)" : std::string(buf, static_cast<size_t>(n));
    }

private:
    std::string dir_;
    int fd_ = -1;
};

void clear_listen_env() {
    for (const char* v : {"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"}) unsetenv(v);
}

bool listen_env_gone() {
    return !getenv("LISTEN_PID") && !getenv("LISTEN_FDS") && !getenv("LISTEN_FDNAMES");
}

// Puts a listening socket at fd 3 (saving whatever was there) for tests of LISTEN_FDS=1.
class FdThree {
public:
    FdThree() {
        saved_ = ::fcntl(3, F_DUPFD_CLOEXEC, 100);
        int s = ::socket(AF_INET, SOCK_STREAM, 0);  // without FD_CLOEXEC, as a socket unit passes it
        if (s != 3) {
            ::dup2(s, 3);
            ::close(s);
        }
    }
    ~FdThree() {
        if (saved_ >= 0) {
            ::dup3(saved_, 3, O_CLOEXEC);
            ::close(saved_);
        } else {
            ::close(3);
        }
    }

private:
    int saved_ = -1;
};

}  // namespace

TEST(NotifyUnit, Messages) {
    NotifySink sink;
    EXPECT_TRUE(notify::ready());
    EXPECT_EQ(sink.next(), "READY=1");
    EXPECT_TRUE(notify::status("2/3 upstreams ready\nsecond line"));
    EXPECT_EQ(sink.next(), "STATUS=2/3 upstreams ready second line");
    EXPECT_TRUE(notify::stopping());
    EXPECT_EQ(sink.next(), "STOPPING=1");
    EXPECT_TRUE(notify::watchdog());
    EXPECT_EQ(sink.next(), "WATCHDOG=1");
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long now = ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
    EXPECT_TRUE(notify::reloading());
    std::string m = sink.next();
    ASSERT_EQ(m.rfind("RELOADING=1\nMONOTONIC_USEC=", 0), 0u) << m;
    long long usec = std::atoll(m.c_str() + std::strlen("RELOADING=1\nMONOTONIC_USEC="));
    EXPECT_GE(usec, now);
    EXPECT_LT(usec, now + 1000000);
}

TEST(NotifyUnit, NoSocketOrBrokenSocket) {
    unsetenv("NOTIFY_SOCKET");
    EXPECT_FALSE(notify::ready());
    setenv("NOTIFY_SOCKET", "/nonexistent/notify", 1);
    EXPECT_FALSE(notify::ready());
    EXPECT_FALSE(notify::watchdog());
    setenv("NOTIFY_SOCKET", "@kprism-unit-nobody-listens-here", 1);
    EXPECT_FALSE(notify::ready());
    unsetenv("NOTIFY_SOCKET");
}

TEST(NotifyUnit, WatchdogInterval) {
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
    EXPECT_EQ(notify::watchdog_interval(), 0u);
    setenv("WATCHDOG_USEC", "200000", 1);
    EXPECT_EQ(notify::watchdog_interval(), 200000u);
    EXPECT_EQ(notify::watchdog_interval(), 200000u) << "the environment is kept";
    setenv("WATCHDOG_PID", std::to_string(getpid()).c_str(), 1);
    EXPECT_EQ(notify::watchdog_interval(), 200000u);
    setenv("WATCHDOG_PID", "1", 1);
    EXPECT_EQ(notify::watchdog_interval(), 0u) << "meant for another process";
    setenv("WATCHDOG_PID", "x", 1);
    EXPECT_EQ(notify::watchdog_interval(), 0u);
    unsetenv("WATCHDOG_PID");
    for (const char* bad : {"0", "abc", "-5", "12x", ""}) {
        setenv("WATCHDOG_USEC", bad, 1);
        EXPECT_EQ(notify::watchdog_interval(), 0u) << bad;
    }
    unsetenv("WATCHDOG_USEC");
}

TEST(NotifyUnit, ListenFdsNotForUs) {
    clear_listen_env();
    std::string err;
    EXPECT_TRUE(notify::listen_fds(&err).empty());
    EXPECT_EQ(err, "");
    setenv("LISTEN_PID", "1", 1);
    setenv("LISTEN_FDS", "1", 1);
    setenv("LISTEN_FDNAMES", "data", 1);
    EXPECT_TRUE(notify::listen_fds(&err).empty());
    EXPECT_EQ(err, "");
    EXPECT_TRUE(listen_env_gone());
}

TEST(NotifyUnit, ListenFdsMalformed) {
    std::string pid = std::to_string(getpid());
    for (const char* fds : {"0", "-1", "abc", ""}) {
        clear_listen_env();
        setenv("LISTEN_PID", pid.c_str(), 1);
        setenv("LISTEN_FDS", fds, 1);
        std::string err;
        EXPECT_TRUE(notify::listen_fds(&err).empty()) << fds;
        EXPECT_NE(err.find("invalid LISTEN_PID, LISTEN_FDS or LISTEN_FDNAMES"), std::string::npos) << fds << err;
        EXPECT_TRUE(listen_env_gone()) << fds;
    }
    clear_listen_env();
    setenv("LISTEN_PID", "garbage", 1);
    setenv("LISTEN_FDS", "1", 1);
    std::string err;
    EXPECT_TRUE(notify::listen_fds(&err).empty());
    EXPECT_NE(err, "");
    EXPECT_TRUE(listen_env_gone());
}

TEST(NotifyUnit, ListenFdsNamedUnnamedAndMismatched) {
    FdThree fd3;
    std::string pid = std::to_string(getpid());
    auto pass = [&](const char* names) {
        clear_listen_env();
        setenv("LISTEN_PID", pid.c_str(), 1);
        setenv("LISTEN_FDS", "1", 1);
        if (names) setenv("LISTEN_FDNAMES", names, 1);
        ::fcntl(3, F_SETFD, 0);
    };
    std::string err;
    pass("data");
    auto fds = notify::listen_fds(&err);
    ASSERT_EQ(fds.size(), 1u) << err;
    EXPECT_EQ(fds[0].fd, 3);
    EXPECT_EQ(fds[0].name, "data");
    EXPECT_EQ(::fcntl(3, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC) << "kprism execs nothing, but passes nothing on either";
    EXPECT_TRUE(listen_env_gone());
    EXPECT_TRUE(notify::listen_fds(&err).empty()) << "a second call finds nothing";

    pass(nullptr);
    fds = notify::listen_fds(&err);
    ASSERT_EQ(fds.size(), 1u) << err;
    EXPECT_EQ(fds[0].name, "unknown");

    pass("data:admin");
    EXPECT_TRUE(notify::listen_fds(&err).empty());
    EXPECT_NE(err.find("invalid"), std::string::npos);
    EXPECT_TRUE(listen_env_gone());
}
