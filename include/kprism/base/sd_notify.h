// SPDX-License-Identifier: Apache-2.0
// systemd integration: readiness notification, watchdog, sockets passed by socket activation, and
// the file descriptor store.
//
// The dynamic build uses libsystemd (sd_notify, sd_listen_fds_with_names, sd_watchdog_enabled); the
// static build (WITH_SYSTEMD=0, for Talos) cannot link it, and speaks the same documented protocol
// by hand (systemd.io, sd_notify(3)) with the same behaviour, tested against both builds.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

// Built with libsystemd's sd-daemon by default; WITH_SYSTEMD=0 (for static builds) compiles the
// same protocol by hand, with the same behaviour.
#ifndef KPRISM_WITH_SYSTEMD
#define KPRISM_WITH_SYSTEMD 1
#endif

namespace kprism::notify {

// Each sends one datagram to $NOTIFY_SOCKET (a path, or an abstract name when it starts with '@')
// and returns true if it was sent; without NOTIFY_SOCKET (not run by systemd) they do nothing and
// return false. NOTIFY_SOCKET is left in the environment so later notifications find it.
bool ready();                          // READY=1
bool status(std::string_view line);    // STATUS=<line>; newlines are replaced by spaces
bool reloading();                      // RELOADING=1 and MONOTONIC_USEC=<CLOCK_MONOTONIC now>
bool stopping();                       // STOPPING=1
bool watchdog();                       // WATCHDOG=1

// systemd's file descriptor store (systemd.io/FILE_DESCRIPTOR_STORE): FDSTORE=1 with FDNAME=name
// and `fds` passed as SCM_RIGHTS, at most kMaxFdsPerMessage at a time (the kernel's limit per
// message); FDSTOREREMOVE=1 with FDNAME=name drops every descriptor stored under that name.
// systemd keeps what it accepts across a restart of the service and passes it back through
// LISTEN_FDS/LISTEN_FDNAMES; whether it accepted them (FileDescriptorStoreMax=) it does not say.
// poll=false adds FDPOLL=0: systemd otherwise drops a stored descriptor that reports POLLHUP,
// as a socket whose peer has closed does.
constexpr size_t kMaxFdsPerMessage = 250;
bool fdstore(std::string_view name, const int* fds, size_t n, bool poll = true);
bool fdstore_remove(std::string_view name);
// How many descriptors the store takes, from $FDSTORE (systemd 254 and later set it to
// FileDescriptorStoreMax=; kprism.service sets it itself for systemd 252); 0 when unset or invalid.
size_t fdstore_max();
// BARRIER=1: waits (at most timeout_ms) until systemd has processed every message sent before,
// so that stored descriptors are in the store before this process exits. False on timeout or
// without NOTIFY_SOCKET.
bool barrier(int timeout_ms);

// The watchdog timeout in microseconds from $WATCHDOG_USEC, or 0 when the watchdog is not
// enabled for this process ($WATCHDOG_PID names another one, or a value is malformed).
uint64_t watchdog_interval();

struct ListenFd {
    int fd;
    std::string name;  // FileDescriptorName= of the socket unit; "unknown" when none was given
};

// The sockets systemd passed ($LISTEN_FDS, starting at fd 3, when $LISTEN_PID is this process),
// marked close-on-exec. Removes LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES from the environment, so
// a second call returns nothing. Empty when none were passed; empty with *error set when the
// variables are malformed.
std::vector<ListenFd> listen_fds(std::string* error = nullptr);

}  // namespace kprism::notify
