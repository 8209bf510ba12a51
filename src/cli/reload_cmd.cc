// SPDX-License-Identifier: Apache-2.0
// `kprism reload`: SIGHUP to the daemon that answers on the admin endpoint, once /proc shows that
// the pid it names is kprism and holds that endpoint's socket (or --pid names it), then /status
// polled until its reload generation moves (a blocking CLI, like `kprism status`).
#include "kprism/cli/reload_cmd.h"

#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <limits>
#include <thread>

#include "kprism/base/address.h"
#include "kprism/base/duration.h"
#include "kprism/cli/process_identity.h"
#include "kprism/cli/status_cmd.h"

namespace kprism {

// The most of the daemon's reload outcome (its changes or its error) printed, in characters.
constexpr size_t kReloadTextMax = 2000;

namespace {

using Clock = std::chrono::steady_clock;

int ms_left(Clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return left > 0 ? static_cast<int>(std::min<int64_t>(left, 3000)) : 0;  // one request: at most 3 s
}

template <class... Args>
int fail(int code, fmt::format_string<Args...> f, Args&&... args) {
    fmt::print(stderr, "kprism reload: {}\n", fmt::format(f, std::forward<Args>(args)...));
    return code;
}

// Why the pid that the admin endpoint at `t` names must not be signalled, or "" when /proc shows
// it is kprism and holds the endpoint's listening socket. Anything may answer on a port while
// kprism is down, and name any pid.
std::string not_the_daemon(const proc::ProcessRef& p, const AdminTarget& t) {
    const std::string who = fmt::format("pid {}, which the admin endpoint at {} names,", p.pid(), t.where);
    auto unknown = [&](const std::string& why) {
        return fmt::format("cannot tell whether {} is the kprism listening there: {}; nothing was sent (run "
                           "kprism reload as root or as kprism's user, or name the daemon with --pid)",
                           who, why);
    };
    if (p.signal(0) == ESRCH) return fmt::format("{} does not exist; nothing was sent", who);
    proc::Finding exe = proc::runs_kprism(p.pid());
    if (exe.answer == proc::Answer::unknown) return unknown(exe.detail);
    if (exe.answer == proc::Answer::no)
        return fmt::format("{} is not kprism ({}); nothing was sent", who, exe.detail);
    sockaddr_storage ss{};
    if (!ip_to_sockaddr(t.host, t.port, ss)) return unknown(fmt::format("{} is not an IP address", t.host));
    proc::Finding sock = proc::holds_listener(p.pid(), ss);
    if (sock.answer == proc::Answer::unknown) return unknown(sock.detail);
    if (sock.answer == proc::Answer::no)
        return fmt::format("{} is a kprism that does not hold the listening socket there; nothing was sent", who);
    return "";
}

}  // namespace

int reload_command(const CommandLine& cl) {
    std::vector<std::string> errors;
    std::optional<AdminTarget> where = locate_admin(cl, errors);
    if (!where) {
        // The file that does not load is the one that would name the admin endpoint. The daemon
        // would refuse it too: say why (on one line, like its own verdict), and leave it alone.
        // Otherwise even a broken file goes to the daemon, which judges and counts it
        // (kprism_config_reloads_total{result="failure"}).
        std::string all;
        for (const auto& e : errors) all += (all.empty() ? "" : "; ") + e;
        return fail(kReloadRejected, "reload failed; the old configuration keeps serving: {} (nothing was sent to "
                                     "kprism)", all);
    }
    const AdminTarget& t = *where;
    auto deadline = Clock::now() + std::chrono::milliseconds(cl.reload_timeout.count());
    std::string timeout = format_duration(cl.reload_timeout);
    StatusDoc before;
    std::string err;
    switch (fetch_status(t, std::max(ms_left(deadline), 1), before, err)) {
    case FetchStatus::ok: break;
    case FetchStatus::unreachable:
        // Without a published address it comes from the file being reloaded: a changed
        // health.port/bind_address points where the daemon is not listening yet.
        return fail(kReloadError,
                    "cannot reach the admin endpoint at {}: {}; nothing was sent (if the file changes "
                    "health.bind_address or health.port, restart kprism: those take effect at a restart)",
                    t.where, err);
    case FetchStatus::unexpected:
        return fail(kReloadError, "unexpected answer from the admin endpoint at {}: {}", t.where, err);
    }
    if (before.pid <= 0 || !before.has_reload)
        return fail(kReloadError, "the kprism at {} does not report its pid and reload results (an older version); "
                                  "send it SIGHUP instead", t.where);
    // pid_t is 32 bits: 4294967295 would be -1, kill(-1) every process this user may signal.
    if (before.pid > std::numeric_limits<pid_t>::max())
        return fail(kReloadError, "unexpected answer from the admin endpoint at {}: pid {} is no process id; "
                                  "nothing was sent", t.where, before.pid);
    const int64_t pid = before.pid;
    if (cl.reload_pid != 0 && cl.reload_pid != pid)
        return fail(kReloadError, "the admin endpoint at {} belongs to pid {}, not --pid {}; nothing was reloaded",
                    t.where, pid, cl.reload_pid);
    // Pinned before the checks: a signal never reaches a process that got the pid after them.
    proc::ProcessRef daemon(static_cast<pid_t>(pid));
    // --pid is the caller's word (systemd's $MAINPID) for which process to signal; the answer on
    // the port could only make the command refuse. Without it the pid comes from whatever
    // answered, and must be shown to be the daemon listening there.
    if (cl.reload_pid == 0)
        if (std::string why = not_the_daemon(daemon, t); !why.empty()) return fail(kReloadError, "{}", why);
    if (int e = daemon.signal(SIGHUP); e != 0)
        return fail(kReloadError, "cannot send SIGHUP to kprism (pid {}): {}", pid, std::strerror(e));
    for (;;) {
        std::this_thread::sleep_for(std::chrono::milliseconds(std::min(kReloadPollMs, ms_left(deadline))));
        if (ms_left(deadline) == 0) break;
        StatusDoc now;
        FetchStatus r = fetch_status(t, ms_left(deadline), now, err);
        if (r == FetchStatus::ok && now.pid != pid)
            return fail(kReloadError, "kprism (pid {}) is gone: pid {} answers at {} now", pid, now.pid, t.where);
        if (r == FetchStatus::ok && now.has_reload && now.reload.generation > before.reload.generation) {
            if (now.reload.last_result == "ok") {
                fmt::print("kprism reload: configuration reloaded: {}\n",
                           now.reload.last_changes.empty() ? "none" : terminal_cell(now.reload.last_changes, kReloadTextMax));
                return kReloadOk;
            }
            if (now.draining)  // nothing keeps serving for long: say what happened, not "rejected"
                return fail(kReloadRejected, "reload not applied: {}",
                            now.reload.last_error.empty() ? "kprism is shutting down"
                                                          : terminal_cell(now.reload.last_error, kReloadTextMax));
            return fail(kReloadRejected, "reload failed; the old configuration keeps serving: {}",
                        now.reload.last_error.empty() ? "no reason given"
                                                    : terminal_cell(now.reload.last_error, kReloadTextMax));
        }
        if (r != FetchStatus::ok && daemon.signal(0) == ESRCH)
            return fail(kReloadError, "kprism (pid {}) exited during the reload", pid);
    }
    return fail(kReloadTimeout, "no outcome from kprism (pid {}) within {} of SIGHUP (see its log); raise --timeout "
                                "to wait longer", pid, timeout);
}

}  // namespace kprism
