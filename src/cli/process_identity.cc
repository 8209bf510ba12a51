// SPDX-License-Identifier: Apache-2.0
// Who a process id is (its executable, the listening sockets it holds, from /proc) and a signal
// through a pidfd, for `kprism reload`, which must not signal whatever pid an admin port names.
#include "kprism/cli/process_identity.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

namespace kprism::proc {

namespace {

int sys_pidfd_open([[maybe_unused]] pid_t pid) {
#ifdef SYS_pidfd_open
    return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
    errno = ENOSYS;
    return -1;
#endif
}

int sys_pidfd_send_signal([[maybe_unused]] int fd, [[maybe_unused]] int sig) {
#ifdef SYS_pidfd_send_signal
    return static_cast<int>(::syscall(SYS_pidfd_send_signal, fd, sig, nullptr, 0));
#else
    errno = ENOSYS;
    return -1;
#endif
}

std::string proc_path(pid_t pid, std::string_view leaf) { return fmt::format("/proc/{}/{}", pid, leaf); }

bool read_link(const std::string& path, std::string& out) {
    char buf[4096];
    ssize_t n = ::readlink(path.c_str(), buf, sizeof buf);
    if (n < 0) return false;
    out.assign(buf, static_cast<size_t>(n));
    return true;
}

bool parse_hex(std::string_view s, uint64_t& v) {
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
    return ec == std::errc() && end == s.data() + s.size();
}

// "0100007F" (v4) or 32 digits (v6): 32-bit words printed in host byte order, as the kernel does.
bool parse_proc_address(std::string_view hex, bool v6, unsigned char* out) {
    size_t words = v6 ? 4 : 1;
    if (hex.size() != words * 8) return false;
    for (size_t i = 0; i < words; ++i) {
        uint64_t w = 0;
        if (!parse_hex(hex.substr(i * 8, 8), w)) return false;
        uint32_t word = static_cast<uint32_t>(w);
        std::memcpy(out + i * 4, &word, 4);
    }
    return true;
}

bool all_zero(const unsigned char* p, size_t n) {
    for (size_t i = 0; i < n; ++i)
        if (p[i] != 0) return false;
    return true;
}

bool is_v4_mapped(const unsigned char* a) {
    static const unsigned char prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return std::memcmp(a, prefix, 12) == 0;
}

// Whether a listener bound to `bound` (4 or 16 bytes) takes connections to the target.
bool accepts(const unsigned char* bound, bool v6, const unsigned char* v4_target, const unsigned char* v6_target) {
    if (!v6) return v4_target && (all_zero(bound, 4) || std::memcmp(bound, v4_target, 4) == 0);
    if (all_zero(bound, 16)) return true;  // [::] (dual-stack unless IPV6_V6ONLY, which /proc does not show)
    if (v6_target) return std::memcmp(bound, v6_target, 16) == 0;
    return is_v4_mapped(bound) && std::memcmp(bound + 12, v4_target, 4) == 0;
}

}  // namespace

ProcessRef::ProcessRef(pid_t pid) : pid_(pid) {
    fd_ = sys_pidfd_open(pid);
    if (fd_ < 0 && errno == ESRCH) open_error_ = ESRCH;
    // Any other failure (ENOSYS, or EPERM from a seccomp filter): the pid alone, as kill(2) would.
}

ProcessRef::~ProcessRef() {
    if (fd_ >= 0) ::close(fd_);
}

int ProcessRef::signal(int sig) const {
    if (open_error_) return open_error_;
    int rc = fd_ >= 0 ? sys_pidfd_send_signal(fd_, sig) : ::kill(pid_, sig);
    return rc == 0 ? 0 : errno;
}

bool is_kprism_path(std::string_view link) {
    constexpr std::string_view deleted = " (deleted)";
    if (link.size() > deleted.size() && link.substr(link.size() - deleted.size()) == deleted)
        link.remove_suffix(deleted.size());
    size_t slash = link.rfind('/');
    return (slash == std::string_view::npos ? link : link.substr(slash + 1)) == "kprism";
}

Finding runs_kprism(pid_t pid) {
    std::string exe = proc_path(pid, "exe"), link;
    if (!read_link(exe, link)) {
        int e = errno;
        if (e == ENOENT && ::access(proc_path(pid, "").c_str(), F_OK) == 0)
            return {Answer::no, "no executable: a kernel thread or a process that is exiting"};
        if (e == ENOENT) return {Answer::unknown, fmt::format("{} is not there (hidden from this user?)", exe)};
        return {Answer::unknown, fmt::format("{}: {}", exe, std::strerror(e))};
    }
    if (is_kprism_path(link)) return {Answer::yes, link};
    struct stat theirs {}, ours {};
    if (::stat(exe.c_str(), &theirs) == 0 && ::stat("/proc/self/exe", &ours) == 0 && theirs.st_dev == ours.st_dev &&
        theirs.st_ino == ours.st_ino)
        return {Answer::yes, link};
    return {Answer::no, link};
}

std::vector<uint64_t> listening_inodes(std::string_view table, bool v6, const sockaddr_storage& target) {
    unsigned char v4_target[4], v6_target[16];
    const unsigned char* t4 = nullptr;
    const unsigned char* t6 = nullptr;
    uint16_t port = 0;
    if (target.ss_family == AF_INET) {
        const auto& sin = reinterpret_cast<const sockaddr_in&>(target);
        std::memcpy(v4_target, &sin.sin_addr, 4);
        t4 = v4_target;
        port = ntohs(sin.sin_port);
    } else if (target.ss_family == AF_INET6) {
        const auto& sin6 = reinterpret_cast<const sockaddr_in6&>(target);
        std::memcpy(v6_target, &sin6.sin6_addr, 16);
        port = ntohs(sin6.sin6_port);
        if (is_v4_mapped(v6_target)) {  // a connection to ::ffff:a.b.c.d goes to a.b.c.d
            std::memcpy(v4_target, v6_target + 12, 4);
            t4 = v4_target;
        } else {
            t6 = v6_target;
        }
    } else {
        return {};
    }
    std::vector<uint64_t> out;
    std::istringstream lines{std::string(table)};
    std::string line;
    std::getline(lines, line);  // the header
    // "  0: 0100007F:1D16 00000000:0000 0A 00000000:00000000 00:00000000 00000000  0  0 12345 ..."
    while (std::getline(lines, line)) {
        std::istringstream f(line);
        std::string sl, local, remote, st, queues, timer, retr, uid, timeout, inode;
        if (!(f >> sl >> local >> remote >> st >> queues >> timer >> retr >> uid >> timeout >> inode)) continue;
        size_t colon = local.find(':');
        uint64_t lport = 0, ino = 0;
        unsigned char bound[16];
        if (st != "0A" || colon == std::string::npos || !parse_hex(std::string_view(local).substr(colon + 1), lport) ||
            lport != port || !parse_proc_address(std::string_view(local).substr(0, colon), v6, bound))
            continue;
        auto [end, ec] = std::from_chars(inode.data(), inode.data() + inode.size(), ino);
        if (ec != std::errc() || end != inode.data() + inode.size() || ino == 0) continue;
        if (accepts(bound, v6, t4, t6)) out.push_back(ino);
    }
    return out;
}

Finding holds_listener(pid_t pid, const sockaddr_storage& target) {
    std::vector<uint64_t> inodes;
    bool read_any = false;
    for (bool v6 : {false, true}) {
        std::ifstream f(v6 ? "/proc/net/tcp6" : "/proc/net/tcp");
        if (!f) continue;  // no tcp6 without IPv6
        read_any = true;
        std::stringstream text;
        text << f.rdbuf();
        for (uint64_t ino : listening_inodes(text.str(), v6, target)) inodes.push_back(ino);
    }
    if (!read_any) return {Answer::unknown, "cannot read /proc/net/tcp"};
    if (inodes.empty()) return {Answer::unknown, "no listening socket for it in /proc/net/tcp (another network namespace?)"};
    std::string dir = proc_path(pid, "fd");
    DIR* d = ::opendir(dir.c_str());
    if (!d) return {Answer::unknown, fmt::format("{}: {}", dir, std::strerror(errno))};
    Finding found{Answer::no, ""};
    // Listening sockets are opened early: their descriptors come first, in the order /proc lists them.
    while (dirent* e = ::readdir(d)) {
        char buf[64];
        ssize_t n = ::readlinkat(::dirfd(d), e->d_name, buf, sizeof buf);
        if (n <= 0) continue;
        std::string_view link(buf, static_cast<size_t>(n));
        if (link.substr(0, 8) != "socket:[" || link.back() != ']') continue;
        uint64_t ino = 0;
        auto digits = link.substr(8, link.size() - 9);
        auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), ino);
        if (ec != std::errc() || end != digits.data() + digits.size()) continue;
        for (uint64_t want : inodes)
            if (ino == want) found = {Answer::yes, ""};
        if (found.answer == Answer::yes) break;
    }
    ::closedir(d);
    return found;
}

}  // namespace kprism::proc
