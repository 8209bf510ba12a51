// SPDX-License-Identifier: Apache-2.0
// Who a process id is, before `kprism reload` signals it: whether its executable is kprism and
// whether it holds the listening socket of the admin endpoint (both read from /proc), and a
// signal that reaches the process checked and no other (a pidfd).
#pragma once

#include <sys/socket.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kprism::proc {

// A process pinned by a pidfd (pidfd_open, Linux 5.3), so that a signal sent after checks reaches
// the process that was checked, never one that was given its pid after it exited. Where
// pidfd_open is missing (an older kernel, a seccomp filter that refuses it) the pid alone is used.
class ProcessRef {
public:
    explicit ProcessRef(pid_t pid);
    ~ProcessRef();
    ProcessRef(const ProcessRef&) = delete;
    ProcessRef& operator=(const ProcessRef&) = delete;

    pid_t pid() const { return pid_; }
    // Sends `sig` (0: only whether it exists and may be signalled). Returns 0 or an errno: ESRCH
    // once it has exited (also when it exited before the pidfd was opened), EPERM when not allowed.
    int signal(int sig) const;

private:
    pid_t pid_;
    int fd_ = -1;
    int open_error_ = 0;  // ESRCH when the pid named no process at pidfd_open
};

// yes/no when /proc said so; unknown when it could not be read (another user's process: its
// /proc/PID/exe and fd are unreadable without root), `detail` then says why.
enum class Answer { yes, no, unknown };
struct Finding {
    Answer answer = Answer::unknown;
    std::string detail;  // no/yes: the executable (runs_kprism); unknown: why
};

// The rule for "runs kprism": its executable (/proc/PID/exe) is the very file this process runs
// (same device and inode: a copy under any name, also across mount namespaces), or a file named
// "kprism". The name rule keeps kprism recognised after an upgrade replaced the file: the link
// then reads "/usr/bin/kprism (deleted)" and the new `kprism reload` is another inode.
bool is_kprism_path(std::string_view exe_link);
Finding runs_kprism(pid_t pid);

// The inodes of the listening TCP sockets (state 0A) in a /proc/net/tcp (`v6` false) or
// /proc/net/tcp6 table that accept a connection to `target` (an AF_INET or AF_INET6 address):
// bound to that address, or to the wildcard of a family that reaches it (:: also takes IPv4,
// ::ffff:a.b.c.d is a.b.c.d).
std::vector<uint64_t> listening_inodes(std::string_view table, bool v6, const sockaddr_storage& target);
// Whether one of the process's descriptors (/proc/PID/fd, "socket:[INODE]") is a listening
// socket for `target` in this network namespace (/proc/net/tcp and tcp6).
Finding holds_listener(pid_t pid, const sockaddr_storage& target);

}  // namespace kprism::proc
