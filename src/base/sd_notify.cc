// SPDX-License-Identifier: Apache-2.0
// Talking to systemd: sd_notify messages, the fd store and barriers, the watchdog interval, and
// socket-activation fds.
#include "kprism/base/sd_notify.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <charconv>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <vector>

#include <fmt/format.h>

#include "kprism/base/log.h"

#if KPRISM_WITH_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

namespace kprism::notify {

namespace {

constexpr int kListenFdsStart = 3;  // SD_LISTEN_FDS_START

#if KPRISM_WITH_SYSTEMD

// Each backend returns what sd-daemon does: > 0 done, 0 not applicable, -errno on failure.
int send_raw(const std::string& msg) { return sd_notify(0, msg.c_str()); }

int send_fds_raw(const std::string& msg, const int* fds, size_t n) {
    return sd_pid_notify_with_fds(0, 0, msg.c_str(), fds, static_cast<unsigned>(n));
}

int barrier_raw(int timeout_ms) { return sd_notify_barrier(0, static_cast<uint64_t>(timeout_ms) * 1000); }

int watchdog_raw(uint64_t* usec) { return sd_watchdog_enabled(0, usec); }

int listen_raw(std::vector<std::string>& names) {
    char** l = nullptr;
    int n = sd_listen_fds_with_names(1, &l);
    for (char** p = l; p && *p; ++p) {
        names.emplace_back(*p);
        free(*p);
    }
    free(l);
    return n;
}

#else  // The same protocol without libsystemd (static builds), following sd-daemon(3) of systemd 252.

template <typename T>
int parse_number(const char* s, T& out) {
    const char* end = s + std::strlen(s);
    auto [p, ec] = std::from_chars(s, end, out);
    return ec == std::errc() && p == end && p != s ? 0 : -EINVAL;
}

int parse_pid(const char* s, pid_t& out) {
    int r = parse_number(s, out);
    return r < 0 ? r : out <= 0 ? -ERANGE : 0;
}

int send_fds_raw(const std::string& msg, const int* fds, size_t n) {
    const char* e = std::getenv("NOTIFY_SOCKET");
    if (!e) return 0;
    size_t len = std::strlen(e);
    // A path, or '@' for the abstract namespace (the address then starts with a NUL byte).
    if (len == 0 || (e[0] != '/' && e[0] != '@')) return -EAFNOSUPPORT;
    sockaddr_un sa{};
    if (len >= sizeof sa.sun_path) return -EINVAL;
    sa.sun_family = AF_UNIX;
    std::memcpy(sa.sun_path, e, len);
    if (sa.sun_path[0] == '@') sa.sun_path[0] = '\0';
    auto salen = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + len + (e[0] == '/' ? 1 : 0));
    int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -errno;
    iovec iov{const_cast<char*>(msg.data()), msg.size()};
    msghdr mh{};
    mh.msg_name = &sa;
    mh.msg_namelen = salen;
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    std::vector<char> control(n > 0 ? CMSG_SPACE(sizeof(int) * n) : 0);
    if (n > 0) {
        mh.msg_control = control.data();
        mh.msg_controllen = control.size();
        cmsghdr* cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * n);
        std::memcpy(CMSG_DATA(cm), fds, sizeof(int) * n);
    }
    ssize_t sent = ::sendmsg(fd, &mh, MSG_NOSIGNAL);
    int err = errno;
    ::close(fd);
    if (sent < 0) return -err;
    return static_cast<size_t>(sent) == msg.size() ? 1 : -EMSGSIZE;
}

int send_raw(const std::string& msg) { return send_fds_raw(msg, nullptr, 0); }

// sd_notify_barrier(3): systemd closes its copy of the pipe's write end once it has read the
// message; the read end then sees POLLHUP.
int barrier_raw(int timeout_ms) {
    if (!std::getenv("NOTIFY_SOCKET")) return 0;
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) return -errno;
    int r = send_fds_raw("BARRIER=1", &p[1], 1);
    ::close(p[1]);
    if (r > 0) {
        pollfd pfd{p[0], 0, 0};
        int n = ::poll(&pfd, 1, timeout_ms);
        r = n > 0 ? 1 : n == 0 ? -ETIMEDOUT : -errno;
    }
    ::close(p[0]);
    return r;
}

int watchdog_raw(uint64_t* usec) {
    const char* s = std::getenv("WATCHDOG_USEC");
    if (!s) return 0;
    uint64_t u = 0;
    if (int r = parse_number(s, u); r < 0) return r;
    if (u == 0 || u == UINT64_MAX) return -EINVAL;
    if (const char* p = std::getenv("WATCHDOG_PID")) {
        pid_t pid = 0;
        if (int r = parse_pid(p, pid); r < 0) return r;
        if (pid != getpid()) return 0;  // meant for another process
    }
    *usec = u;
    return 1;
}

int listen_fds_only() {
    const char* e = std::getenv("LISTEN_PID");
    if (!e) return 0;
    pid_t pid = 0;
    if (int r = parse_pid(e, pid); r < 0) return r;
    if (pid != getpid()) return 0;
    e = std::getenv("LISTEN_FDS");
    if (!e) return 0;
    int n = 0;
    if (int r = parse_number(e, n); r < 0) return r;
    if (n <= 0 || n > INT_MAX - kListenFdsStart) return -EINVAL;
    for (int fd = kListenFdsStart; fd < kListenFdsStart + n; ++fd) {
        int flags = ::fcntl(fd, F_GETFD);
        if (flags < 0 || ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC) < 0) return -errno;
    }
    return n;
}

int listen_raw(std::vector<std::string>& names) {
    bool have_names = false;
    if (const char* e = std::getenv("LISTEN_FDNAMES")) {
        have_names = true;
        std::string_view s(e);
        while (!s.empty()) {
            size_t colon = s.find(':');
            names.emplace_back(s.substr(0, colon));
            if (colon == std::string_view::npos) break;
            s.remove_prefix(colon + 1);
            if (s.empty()) names.emplace_back();  // a trailing ':' ends with an empty name
        }
    }
    int n = listen_fds_only();
    for (const char* v : {"LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"}) unsetenv(v);
    if (n <= 0) {
        names.clear();
        return n;
    }
    if (!have_names) names.assign(static_cast<size_t>(n), "unknown");
    if (names.size() != static_cast<size_t>(n)) {
        names.clear();
        return -EINVAL;
    }
    return n;
}

#endif

bool send(const std::string& msg, const int* fds = nullptr, size_t n = 0) {
    int r = n > 0 ? send_fds_raw(msg, fds, n) : send_raw(msg);
    if (r < 0) {
        // Once: a broken NOTIFY_SOCKET would otherwise log on every watchdog ping.
        static bool logged = false;
        if (!logged)
            log::warn("cannot notify systemd", {{"socket", std::getenv("NOTIFY_SOCKET")},
                                                {"error", std::strerror(-r)}});
        logged = true;
    }
    return r > 0;
}

}  // namespace

bool ready() { return send("READY=1"); }

bool status(std::string_view line) {
    std::string msg = "STATUS=";
    msg += line;
    for (size_t i = 7; i < msg.size(); ++i)
        if (msg[i] == '\n') msg[i] = ' ';
    return send(msg);
}

bool reloading() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t usec = static_cast<uint64_t>(ts.tv_sec) * 1000000 + static_cast<uint64_t>(ts.tv_nsec) / 1000;
    return send(fmt::format("RELOADING=1\nMONOTONIC_USEC={}", usec));
}

bool stopping() { return send("STOPPING=1"); }

bool watchdog() { return send("WATCHDOG=1"); }

bool fdstore(std::string_view name, const int* fds, size_t n, bool poll) {
    std::string msg = fmt::format("FDSTORE=1\nFDNAME={}{}", name, poll ? "" : "\nFDPOLL=0");
    for (size_t i = 0; i < n; i += kMaxFdsPerMessage)
        if (!send(msg, fds + i, std::min(kMaxFdsPerMessage, n - i))) return false;
    return true;
}

bool fdstore_remove(std::string_view name) { return send(fmt::format("FDSTOREREMOVE=1\nFDNAME={}", name)); }

bool barrier(int timeout_ms) { return barrier_raw(timeout_ms) > 0; }

size_t fdstore_max() {
    const char* e = std::getenv("FDSTORE");
    if (!e || !std::getenv("NOTIFY_SOCKET")) return 0;
    size_t n = 0;
    auto [p, ec] = std::from_chars(e, e + std::strlen(e), n);
    return ec == std::errc() && *p == '\0' ? n : 0;
}

uint64_t watchdog_interval() {
    uint64_t usec = 0;
    return watchdog_raw(&usec) > 0 ? usec : 0;
}

std::vector<ListenFd> listen_fds(std::string* error) {
    std::vector<std::string> names;
    int n = listen_raw(names);
    std::vector<ListenFd> out;
    if (n < 0) {
        if (error) *error = fmt::format("invalid LISTEN_PID, LISTEN_FDS or LISTEN_FDNAMES: {}", std::strerror(-n));
        return out;
    }
    for (int i = 0; i < n; ++i) out.push_back({kListenFdsStart + i, names[static_cast<size_t>(i)]});
    return out;
}

}  // namespace kprism::notify
