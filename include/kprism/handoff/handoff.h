// SPDX-License-Identifier: Apache-2.0
// Passing the listeners and connections to the next process: restarts through systemd's fd store,
// the crash copy (keep_on_crash) and restart in place (SIGUSR2). The record itself is record.h.
#pragma once

#include <sys/socket.h>
#include <uv.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kprism/base/sd_notify.h"

namespace kprism {

class Server;

// Lifetime: a member of the Server (Server::handoff()), constructed and destroyed with it. It owns
// the handover-* descriptors passed in until resume_handover() (or close_passed()) has used or
// closed them, the duplicates of the listening sockets while handing over, its two timers (the
// handover's flush wait, the crash copy's) and the `kprism check` process of a restart in place.
// Each is initialised on the loop only when used and closed here: the flush timer by
// finish_handover(), the crash timer by drop_crash_copy(), the check process by close().
//
// It is the Server's peer, not a part of it seen from outside: it walks the Server's connection
// list and listeners, reads its configuration and control plane, and, as a friend, sets the
// Server's draining flag, closes its listeners and calls its finish() (see server.h).
//
// Its code is one file per concern: fd_store.cc (SIGTERM out through systemd's fd store, and the
// way back in at start, also after a crash), crash_copy.cc (keep_on_crash), in_place.cc (SIGUSR2).
class Handoff {
public:
    explicit Handoff(Server& srv) : srv_(srv) {}
    Handoff(const Handoff&) = delete;
    Handoff& operator=(const Handoff&) = delete;

    // In, at start (fd_store.cc). Server::adopt_passed_sockets() gives each handover-* descriptor
    // here (keep_passed); if start fails there, close_passed() closes them. start_listeners() takes
    // the passed listening socket bound to each configured address (take_handover_listener: the fd,
    // now the caller's, or -1); once the listeners and the control plane run, resume_handover()
    // resumes the connections the record names and closes everything else passed.
    void keep_passed(const notify::ListenFd& fd) {
        handover_.passed.push_back(fd);
        restarted_ = true;
    }
    void close_passed();
    size_t passed_count() const { return handover_.passed.size(); }
    int take_handover_listener(const sockaddr_storage& addr);
    // Also takes back the upstreams' health the previous process passed (its health record, or
    // the crash copy's), before the first client is accepted: ControlPlane::restore_health.
    void resume_handover();
    // This process took over from a previous one (a handover, a restart in place or a crash copy
    // was passed): its first clients wait for the first verdicts the record did not carry
    // (Server::hold_new_clients).
    bool restarted() const { return restarted_; }

    // Out (fd_store.cc): SIGTERM under systemd with a file descriptor store ($FDSTORE), or SIGUSR2
    // once the new executable accepted the configuration. This process stops reading, waits
    // (bounded) for what it has queued to be written, then stores listeners, connection sockets and
    // the record in systemd's fd store, or passes them by exec, and the Server finishes.
    void begin_handover(const char* why);
    // Handing the established connections over to the next process (from begin_handover() on).
    bool handing_over() const { return handover_.active; }

    // The crash copy (crash_copy.cc, keep_on_crash). Started at the end of Server::start();
    // crash_copy_changed(): a connection was spliced, resumed, or one in the copy closed;
    // listeners_changed(): a reload changed the listeners (a removed one must not stay open in it).
    void start_crash_copy();
    void crash_copy_changed() { crash_.changed = true; }
    void listeners_changed();
    // An upstream's state or a node condition changed: the crash copy's health record is
    // rewritten now (it is also every 250 ms).
    void health_changed();
    // keep_on_crash is on (a store exists), and how many connections the stored copy holds.
    bool crash_copy_on() const { return crash_.on; }
    size_t crash_copy_connections() const { return crash_.connections; }

    // SIGUSR2: restart in place (in_place.cc). The executable kprism was started from (as it is on
    // disk now, so an upgraded binary) is run with `check` and the same flags; if it accepts the
    // configuration, this process hands everything over to it by exec, keeping its PID. argv is
    // kept from set_command_line() (main).
    void set_command_line(int argc, char** argv);
    void begin_restart_in_place();
    // What main() returns once the loop has ended: 1 after a restart in place failed past the
    // point of return, else 0.
    int exit_code() const { return exit_code_; }

    // Server::finish(): the crash copy is dropped (it must not outlive this process) and a restart
    // in place still being checked will not happen.
    void close();

private:
    // Handover (fd_store.cc). Out: this process stops reading, waits (bounded) for what it has
    // queued to be written, then stores listeners, connection sockets and the record in systemd's
    // fd store and exits. In: the next process takes them back (LISTEN_FDNAMES handover-*),
    // removes them from the store and resumes splicing.
    struct Handover {
        bool active = false;             // handing over (out)
        uint64_t deadline_ms = 0;        // give up waiting for writes to finish
        size_t closed_unconnected = 0;   // connections still connecting: closed at the start
        std::vector<int> listen_fds;     // duplicates of the listening sockets, kept open meanwhile
        std::vector<notify::ListenFd> passed;  // in: the handover-* descriptors systemd passed
        uv_timer_t timer{};
        bool in_place = false;           // out by exec (SIGUSR2), not through systemd's store
    };
    // Crash survival (keep_on_crash, crash_copy.cc): the listeners, the connection sockets and a
    // record stored in systemd's fd store, replaced at most once a second when connections have
    // come or gone, under alternating generations so that a whole copy is always there.
    struct CrashCopy {
        bool on = false;
        bool changed = false;           // since the last copy
        bool listeners_changed = false; // started, or a reload changed them
        unsigned generation = 0;        // of the stored copy, if any
        size_t connections = 0;         // in the stored copy; 0: none is stored
        bool partial = false;           // the last copy could not hold every connection (logged once)
        bool failing = false;           // the last copy could not be stored (logged once)
        // The health record (handover::kCrashHealthName): stored once, rewritten in place every
        // 250 ms and on every change (the store holds the same file).
        int health_fd = -1;
        uint64_t copied_ms = 0;  // loop time of the last copy of the connections
        uv_timer_t timer{};
    };

    void finish_handover();
    static void on_handover_timer(uv_timer_t* t);
    void copy_for_crash();
    // A planned handover or a stop: removes the copy from the store and closes its timer.
    void drop_crash_copy();
    static void on_crash_timer(uv_timer_t* t);
    // Restart in place (in_place.cc): the check of the new executable, then the exec.
    static void on_check_exit(uv_process_t* p, int64_t status, int term_signal);
    void exec_in_place(const std::vector<int>& listeners, int carrier, int record, int health, size_t connections);
    void write_crash_health();
    // The health record read from what was passed, applied to the control plane; logged.
    void restore_health(const std::string& text, const char* from);

    Server& srv_;
    Handover handover_;
    CrashCopy crash_;
    std::vector<std::string> argv_;    // the command line (set_command_line)
    std::string exe_;                  // the executable's path, /proc/self/exe at start
    uv_process_t check_{};             // `exe_ check ...` before a restart in place
    bool checking_ = false;
    bool restarted_ = false;
    int exit_code_ = 0;
};

}  // namespace kprism
