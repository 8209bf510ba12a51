// SPDX-License-Identifier: Apache-2.0
// Handoff: restart in place without systemd's store: SIGUSR2 checks the executable on disk against the
// configuration, then hands every connection over to it by exec, keeping the PID.
#include "kprism/handoff/handoff.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <csignal>
#include <cstring>

#include "kprism/handoff/record.h"
#include "kprism/base/log.h"
#include "kprism/daemon/server.h"

extern char** environ;

namespace kprism {

void Handoff::set_command_line(int argc, char** argv) {
    argv_.assign(argv, argv + argc);
    // The path, not the open file: after a package upgrade the new binary is at the same path.
    char buf[PATH_MAX];
    ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    exe_ = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

void Handoff::begin_restart_in_place() {
    auto refuse = [this](std::string_view why, std::string_view error = {}) {
        log::warn("restart in place refused: kprism keeps running",
                  {{"reason", why}, {"executable", exe_}, {"error", error}});
    };
    if (srv_.finished_ || srv_.draining()) return refuse("already shutting down");
    if (checking_) return refuse("a restart in place is already being checked");
    if (srv_.socket_activated())
        return refuse("the listening sockets are systemd's (socket activation): use systemctl restart");
    if (exe_.empty() || ::access(exe_.c_str(), X_OK) != 0)
        return refuse("cannot execute the executable", std::strerror(errno));
    // `kprism check` with the same flags, from the executable as it is on disk now.
    std::vector<std::string> args = argv_;
    bool had_command = false;
    for (size_t i = 1; i < args.size() && !had_command; ++i)
        if (args[i] == "run") args[i] = "check", had_command = true;
    if (!had_command) args.insert(args.begin() + 1, "check");
    std::vector<char*> argp;
    for (auto& a : args) argp.push_back(a.data());
    argp.push_back(nullptr);
    uv_stdio_container_t stdio[3];
    stdio[0].flags = UV_IGNORE;
    stdio[1].flags = UV_IGNORE;  // the configuration it prints
    stdio[2].flags = UV_INHERIT_FD;  // its errors, in kprism's log
    stdio[2].data.fd = 2;
    uv_process_options_t opts{};
    opts.file = exe_.c_str();
    opts.args = argp.data();
    opts.exit_cb = on_check_exit;
    opts.stdio = stdio;
    opts.stdio_count = 3;
    check_.data = this;
    if (int r = uv_spawn(srv_.loop(), &check_, &opts); r != 0) {
        uv_close(reinterpret_cast<uv_handle_t*>(&check_), nullptr);
        return refuse("cannot run the executable's check", uv_strerror(r));
    }
    checking_ = true;
    log::info("restart in place: checking the configuration with the executable", {{"signal", "SIGUSR2"},
                                                                                    {"executable", exe_}});
}

void Handoff::on_check_exit(uv_process_t* p, int64_t status, int term_signal) {
    auto* self = static_cast<Handoff*>(p->data);
    uv_close(reinterpret_cast<uv_handle_t*>(p), nullptr);
    self->checking_ = false;
    if (self->srv_.finished_ || self->srv_.draining()) return;
    if (status != 0 || term_signal != 0) {
        log::warn("restart in place refused: kprism keeps running",
                  {{"reason", "the executable rejects the configuration (its check's errors are above)"},
                   {"exit_status", status},
                   {"signal", static_cast<int64_t>(term_signal)}});
        return;
    }
    self->handover_.in_place = true;
    self->begin_handover("SIGUSR2");
}

// The descriptors go to 3, 4, ... (listeners, the carrier of the connection sockets, the record, the
// health record) without close-on-exec, the counts in KPRISM_HANDOVER, the health record's in
// KPRISM_HANDOVER_HEALTH; the new process finds them with
// handover::inherited_fds(). Returns only when nothing has been moved yet; an exec that fails
// after the move exits, since the loop's own descriptors may have been overwritten.
void Handoff::exec_in_place(const std::vector<int>& listeners, int carrier, int record, int health,
                            size_t connections) {
    std::vector<int> order = listeners;
    if (carrier >= 0) order.push_back(carrier);
    order.push_back(record);
    if (health >= 0) order.push_back(health);  // the last: KPRISM_HANDOVER_HEALTH names it
    const int n = static_cast<int>(order.size());
    std::vector<int> high;  // first above 3 + n, so that moving one never overwrites another
    for (int fd : order) {
        int d = ::fcntl(fd, F_DUPFD_CLOEXEC, 3 + n);
        if (d < 0) {
            log::error("restart in place failed: cannot move the descriptors; closing the connections",
                       {{"descriptors", static_cast<int64_t>(n)}, {"error", std::strerror(errno)}});
            for (int h : high) ::close(h);
            return;
        }
        high.push_back(d);
    }
    std::string var = fmt::format("{}={}", handover::kInheritEnv,
                                  handover::inherit_value(listeners.size(), carrier >= 0 ? 1 : 0, 1));
    std::string health_var = fmt::format("{}={}", handover::kInheritHealthEnv, 3 + n - 1);
    std::vector<char*> envp;
    for (char** e = environ; *e; ++e)
        if (!std::string_view(*e).starts_with(fmt::format("{}=", handover::kInheritEnv)) &&
            !std::string_view(*e).starts_with(fmt::format("{}=", handover::kInheritHealthEnv)))
            envp.push_back(*e);
    envp.push_back(var.data());
    if (health >= 0) envp.push_back(health_var.data());
    envp.push_back(nullptr);
    std::vector<char*> argp;
    for (auto& a : argv_) argp.push_back(a.data());
    argp.push_back(nullptr);
    log::info("restarting in place: executing the new kprism",
              {{"executable", exe_}, {"connections", static_cast<uint64_t>(connections)},
               {"descriptors", static_cast<int64_t>(n)}});
    for (int i = 0; i < n; ++i) ::dup2(high[static_cast<size_t>(i)], 3 + i);  // the copy is not close-on-exec
    Server::block_signals(true);  // until the new image has its handlers: a reload sent meanwhile waits for it
    ::execve(exe_.c_str(), argp.data(), envp.data());
    Server::block_signals(false);
    log::error("restart in place failed: exec; exiting so that the supervisor starts kprism again",
               {{"executable", exe_}, {"error", std::strerror(errno)}});
    _exit(1);
}

// Server::finish(): nothing is handed over any more; a restart in place being checked will not
// happen now.
void Handoff::close() {
    drop_crash_copy();
    if (checking_) {
        uv_process_kill(&check_, SIGKILL);
        uv_close(reinterpret_cast<uv_handle_t*>(&check_), nullptr);
        checking_ = false;
    }
}

}  // namespace kprism
