// SPDX-License-Identifier: Apache-2.0
// Daemon lifecycle: listeners, signals, the connection list and its limit, drain on shutdown, stats.
#include "kprism/daemon/server.h"

#include <dirent.h>
#include <signal.h>
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <iterator>

#include "kprism/proxy/connection.h"
#include "kprism/base/log.h"
#include "kprism/daemon/runtime_dir.h"
#include "kprism/base/sd_notify.h"
#include "kprism/proxy/sockopt.h"

namespace kprism {

namespace {
uv_handle_t* h(void* p) { return static_cast<uv_handle_t*>(p); }

// Descriptors kept out of the client connection limit beyond those open at start and one
// readiness check per upstream: a few admin connections, and spare ones (the over-limit
// connection's own socket until it is reset, TLS file reloads, the resolver, a reload's listeners).
constexpr uint64_t kAdminReserveFds = 8;
constexpr uint64_t kSpareFds = 8;

// Descriptors open now, from /proc/self/fd; -1 without /proc.
int open_fds() {
    DIR* d = opendir("/proc/self/fd");
    if (!d) return -1;
    int n = 0;
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
    return n - 1;  // not the directory's own descriptor
}
}  // namespace

// The signals the daemon handles, in the order of signals_.
constexpr int kSignals[] = {SIGTERM, SIGINT, SIGUSR1, SIGHUP, SIGUSR2};

// A restart in place blocks these before its exec: the signal mask, and signals that arrive
// meanwhile, survive execve, and the new image would otherwise die of a SIGHUP (a reload) sent
// before it has its handlers. start() unblocks them once it has; what arrived is handled then.
void Server::block_signals(bool block) {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : kSignals) sigaddset(&set, sig);
    sigprocmask(block ? SIG_BLOCK : SIG_UNBLOCK, &set, nullptr);
}

Server::Server(uv_loop_t* loop, Config cfg, AdminFactory admin, Loader loader)
    : loop_(loop),
      cfg_(std::move(cfg)),
      loader_(std::move(loader)),
      selection_(make_policy(cfg_.policy)),
      control_(*this, stats_),
      rebalancer_(*this, stats_),
      make_admin_(std::move(admin)) {}

Server::~Server() {
    if (sd_.admin_fd >= 0) ::close(sd_.admin_fd);  // passed by systemd and never taken by the admin server
}

// Accepted sockets inherit these from their listener (sockopt.h); called at start and on reload.
void Server::apply_listener_tcp_options() {
    for (auto& l : listeners_) {
        uv_os_fd_t fd;
        if (!l->open || uv_fileno(reinterpret_cast<uv_handle_t*>(&l->tcp), &fd) != 0) continue;
        if (int r = apply_tcp_options(fd, cfg_.s, true); r != 0)
            log::warn("cannot set TCP options on a listening socket", {{"address", l->name}, {"error", uv_strerror(r)}});
    }
}

bool Server::start_listeners(std::string& error) {
    if (sd_.socket_activated) return true;  // systemd's sockets replace the configured addresses
    for (const auto& addr : cfg_.listen) {
        auto l = std::make_unique<Listener>();
        // A socket the previous process handed over: it has been listening all along.
        int fd = handoff_.take_handover_listener(addr);
        int r = fd >= 0 ? l->start_fd(loop_, this, fd) : l->start(loop_, this, as_sockaddr(addr));
        if (r != 0) {
            error = fmt::format("cannot listen on {}: {}", sockaddr_str(addr), uv_strerror(r));
            l->close();
            listeners_.push_back(std::move(l));
            for (auto& x : listeners_) x->close();
            return false;
        }
        log::info("listening", {{"address", l->name}, {"handed_over", fd >= 0}});
        listeners_.push_back(std::move(l));
    }
    return true;
}

bool Server::start_admin(std::string& error) {
    admin_ = make_admin_(*this);
    int admin_fd = take_admin_fd();
    int ar = admin_fd >= 0 ? admin_->start_fd(loop_, admin_fd) : admin_->start(loop_, as_sockaddr(cfg_.admin));
    if (ar != 0) {
        error = fmt::format("cannot listen on the admin address {} (health.bind_address, health.port): {}",
                            admin_->name(), uv_strerror(ar));
        admin_->close();
        for (auto& x : listeners_) x->close();
        return false;
    }
    log::info("admin endpoint listening", {{"address", admin_->name()}});
    if (std::string err; !runtime::publish_admin_address(admin_->name(), err))
        log::warn("cannot publish the admin address for kprism status and reload", {{"error", err}});
    note_own_listeners();
    return true;
}

// The addresses the sockets are bound to, not the configured ones: systemd's sockets, or those a
// previous process handed over, may be elsewhere.
void Server::note_own_listeners() {
    std::vector<OwnListener> own;
    OwnListener ol;
    for (const auto& l : listeners_)
        if (l->open && bound_listener(l->tcp, ol)) own.push_back(ol);
    if (admin_ && admin_->handle() && bound_listener(*admin_->handle(), ol)) own.push_back(ol);
    own_ = OwnListeners(std::move(own));
}

bool Server::start(std::string& error) {
    if (int r = splice_poll_.start(loop_, Connection::on_poll); r != 0) {
        error = fmt::format("cannot create the connections' epoll set: {}", uv_strerror(r));
        splice_poll_.close();
        return false;
    }
    if (!adopt_passed_sockets(error) || !start_listeners(error)) {
        splice_poll_.close();
        return false;
    }
    apply_listener_tcp_options();
    if (!start_admin(error)) {
        splice_poll_.close();
        return false;
    }
    update_connection_limit();
    for (size_t i = 0; i < std::size(kSignals); ++i) {
        uv_signal_init(loop_, &signals_[i]);
        signals_[i].data = this;
        uv_signal_start(&signals_[i], on_signal, kSignals[i]);
    }
    block_signals(false);  // blocked across a restart in place's exec
    uv_timer_init(loop_, &drain_timer_);
    drain_timer_.data = this;
    uv_timer_init(loop_, &half_close_timer_);
    half_close_timer_.data = this;
    uv_timer_init(loop_, &options_timer_);
    options_timer_.data = this;
    heartbeat_.start(loop_);
    control_.start();
    rebalancer_.start();
    handoff_.resume_handover();
    handoff_.start_crash_copy();
    std::string names;
    for (const auto& e : cfg_.endpoints) names += (names.empty() ? "" : ",") + e.addr.str();
    log::info("started", {{"upstreams", names}, {"policy", selection_->name()},
                          {"max_connections", cfg_.s.max_connections}});
    start_systemd();
    start_hold();
    return true;
}

// After start_systemd(): the client certificate is loaded by then (without one nothing is checked
// and nothing is held).
void Server::start_hold() {
    uv_timer_init(loop_, &hold_timer_);
    hold_timer_.data = this;
    if (!handoff_.restarted() || !control_.tls().get() || control_.all_judged()) return;
    holding_ = true;
    hold_started_ms_ = uv_now(loop_);
    const uint64_t wait = std::min<uint64_t>(static_cast<uint64_t>(cfg_.s.health_timeout.count()) + 100, kHoldMaxMs);
    uv_timer_start(&hold_timer_, on_hold_timeout, wait, 0);
    log::info("restarted with upstreams not yet judged: new clients wait for their first checks",
              {{"status", control_.summary()}, {"at_most", format_duration(Duration{static_cast<int64_t>(wait)})}});
}

bool Server::hold_new_client(int fd) {
    if (!holding_ || held_.size() >= connection_limit_) return false;
    held_.push_back(fd);
    return true;
}

void Server::on_hold_timeout(uv_timer_t* t) { static_cast<Server*>(t->data)->release_held("health.timeout passed"); }

// Each held client is taken as if it had just arrived, in the order they came.
void Server::release_held(const char* reason) {
    if (!holding_) return;
    holding_ = false;
    uv_timer_stop(&hold_timer_);
    std::vector<int> held = std::move(held_);
    held_.clear();
    log::info("new clients no longer wait: upstreams judged after the restart",
              {{"reason", reason},
               {"held", static_cast<uint64_t>(held.size())},
               {"waited", format_duration(Duration{static_cast<int64_t>(uv_now(loop_) - hold_started_ms_)})},
               {"status", control_.summary()}});
    for (int fd : held) {
        if (finished_) ::close(fd);
        else Connection::accept(*this, fd);
    }
}

// Each client connection holds two descriptors, client and upstream socket. At RLIMIT_NOFILE,
// libuv sheds new clients without a word (its reserve descriptor accepts and closes them; the
// connection callback never runs), and the admin endpoint and the readiness checks cannot get a
// socket any more either: kprism would drop clients unseen while blind and unable to check. So
// the client limit leaves kprism its own descriptors, and clients beyond it are reset through
// the max_connections path: logged ("connection rejected") and counted
// (kprism_connections_rejected_total).
void Server::update_connection_limit() {
    uint64_t limit = static_cast<uint64_t>(cfg_.s.max_connections);
    bool by_fds = false;
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        // Not the handed-over sockets still waiting to become connections (counted as those).
        if (fds_at_start_ < 0)
            fds_at_start_ = open_fds() >= 0 ? std::max(0, open_fds() - static_cast<int>(handoff_.passed_count())) : 16;
        uint64_t reserve = static_cast<uint64_t>(fds_at_start_) + control_.upstreams().size() + kAdminReserveFds + kSpareFds;
        uint64_t fit = rl.rlim_cur > reserve + 2 ? (rl.rlim_cur - reserve) / 2 : 1;
        if (fit < limit) {
            limit = fit;
            by_fds = true;
        }
    }
    if (by_fds && (!fd_limited_ || limit != connection_limit_))
        log::warn("RLIMIT_NOFILE allows fewer client connections than max_connections",
                  {{"rlimit_nofile", static_cast<uint64_t>(rl.rlim_cur)},
                   {"max_connections", cfg_.s.max_connections},
                   {"connection_limit", limit},
                   {"hint", "raise the limit (LimitNOFILE=): two descriptors per connection"}});
    fd_limited_ = by_fds;
    connection_limit_ = static_cast<size_t>(limit);
}

void Server::connection_opened(Connection* c, bool resumed) {
    conns_.push_front(c);
    ++(resumed ? stats_.resumed : stats_.accepted);
}

void Server::connection_closed(Connection* c) {
    conns_.remove(c);
    if (draining_ && !handoff_.handing_over() && conns_.empty()) finish();
}

void Server::watch_half_closed() {
    if (!finished_ && !uv_is_active(h(&half_close_timer_)))
        uv_timer_start(&half_close_timer_, on_half_close_sweep, kHalfCloseSweepMs, kHalfCloseSweepMs);
}

// One walk of the connection list a second, and one getsockopt per half-closed socket, only
// while there are any; idle connections cost nothing (no timer of their own).
void Server::on_half_close_sweep(uv_timer_t* t) {
    auto* self = static_cast<Server*>(t->data);
    if (self->handoff_.handing_over()) return;  // the sockets go to the next process as they are
    bool any = false;
    self->conns_.for_each([&any](Connection* c) { any |= c->check_half_closed(); });
    if (!any) uv_timer_stop(t);
}

unsigned Server::upstream_options_deferred() {
    unsigned gen = options_tick_ & 1;
    ++options_pending_[gen];
    if (!finished_ && !uv_is_active(h(&options_timer_)))
        uv_timer_start(&options_timer_, on_options_sweep, kUpstreamOptionsMs, kUpstreamOptionsMs);
    return gen;
}

// Sweep k applies the options to the connections that began waiting between sweeps k-2 and k-1
// (those of before were done by sweep k-1): the generation k & 1. The waiting connections are the
// newest (connections are added at the front of the list), so the walk stops soon after the last
// of them, however many older connections there are.
void Server::on_options_sweep(uv_timer_t* t) {
    auto* self = static_cast<Server*>(t->data);
    unsigned due = ++self->options_tick_ & 1;
    for (Connection* c = self->conns_.front(); c && self->options_pending_[due] > 0; c = c->next)
        if (c->options_waiting(due)) c->apply_deferred_options();
    if (self->options_pending_[0] + self->options_pending_[1] == 0) uv_timer_stop(t);
}

void Server::note_client_failed(uint32_t attempts) {
    ++stats_.client_failures;
    if (auto suppressed = client_fail_log_.take(uv_now(loop_)))
        log::warn("client connection failed",
                  {{"reason", control_.fallback_allowed() ? "every upstream failed" : "no upstream ready (fail-closed)"},
                   {"attempts", attempts},
                   {"suppressed", *suppressed}});
}

void Server::note_rejected() {
    ++stats_.rejected;
    if (auto suppressed = reject_log_.take(uv_now(loop_)))
        log::warn("connection rejected",
                  {{"reason", fd_limited_ ? "connection limit reached (RLIMIT_NOFILE)" : "max_connections reached"},
                   {"max_connections", cfg_.s.max_connections},
                   {"connection_limit", static_cast<uint64_t>(connection_limit_)},
                   {"suppressed", *suppressed}});
}

void Server::note_accept_error(int status) {
    ++stats_.accept_errors;
    if (auto suppressed = accept_error_log_.take(uv_now(loop_)))
        log::error("accept failed", {{"error", uv_strerror(status)},
                                     {"active_connections", static_cast<uint64_t>(conns_.size())},
                                     {"suppressed", *suppressed}});
}

void Server::on_signal(uv_signal_t* s, int signum) {
    auto* self = static_cast<Server*>(s->data);
    switch (signum) {
    case SIGTERM:
    case SIGINT: self->begin_shutdown(signum); break;
    case SIGUSR1: self->log_stats(); break;
    case SIGHUP: self->reload(); break;
    case SIGUSR2: self->handoff_.begin_restart_in_place(); break;
    }
}

void Server::begin_shutdown(int signum) {
    const char* why = signum == SIGTERM ? "SIGTERM" : "SIGINT";
    if (finished_) return;
    if (draining_) {
        log::warn("second shutdown signal: closing connections now", {{"signal", why}});
        close_all("shutdown");
        return;
    }
    release_held("shutting down");
    if (signum == SIGTERM && notify::fdstore_max() > 0) {
        handoff_.begin_handover(why);
        return;
    }
    draining_ = true;
    notify::stopping();
    notify::status(fmt::format("shutting down: draining {} connections", conns_.size()));
    for (auto& l : listeners_) l->close();
    log::info("shutting down", {{"signal", why},
                                {"connections", static_cast<uint64_t>(conns_.size())},
                                {"drain_timeout", format_duration(cfg_.s.drain_timeout)}});
    if (conns_.empty()) {
        finish();
        return;
    }
    uv_timer_start(&drain_timer_, on_drain_timeout, static_cast<uint64_t>(cfg_.s.drain_timeout.count()), 0);
}

void Server::on_drain_timeout(uv_timer_t* t) {
    auto* self = static_cast<Server*>(t->data);
    log::warn("drain timeout: closing remaining connections",
              {{"connections", static_cast<uint64_t>(self->conns_.size())}});
    self->close_all("drain timeout");
}

void Server::close_all(const char* reason) {
    conns_.for_each([reason](Connection* c) { c->close(reason); });
}

// Closes the daemon's own handles so the loop (SplicePoll::run) returns once the last connection
// is gone.
void Server::finish() {
    if (finished_) return;
    finished_ = true;
    release_held("stopping");  // closes them
    for (auto& l : listeners_) l->close();
    if (admin_) {
        admin_->close();
        runtime::withdraw_admin_address();
    }
    handoff_.close();  // the crash copy, and a restart in place being checked
    splice_poll_.close();  // no connection is left, or each has closed its sockets (handed over)
    heartbeat_.close();
    control_.close();
    rebalancer_.close();
    for (uv_signal_t& sig : signals_)
        if (sig.data && !uv_is_closing(h(&sig))) uv_close(h(&sig), nullptr);
    for (uv_timer_t* t :
         {&drain_timer_, &half_close_timer_, &options_timer_, &sd_.ready_timer, &sd_.watchdog_timer, &hold_timer_})
        if (t->data && !uv_is_closing(h(t))) uv_close(h(t), nullptr);
    log::info("stopped", {{"connections_served", stats_.accepted}});
}

void Server::log_stats() {
    log::info("stats", {{"connections_active", static_cast<uint64_t>(conns_.size())},
                        {"connections_total", stats_.accepted},
                        {"connections_resumed", stats_.resumed},
                        {"rejected", stats_.rejected},
                        {"accept_errors", stats_.accept_errors},
                        {"client_failures", stats_.client_failures},
                        {"connect_failures", stats_.connect_failures},
                        {"replayed", stats_.replayed},
                        {"closed_for_down", stats_.closed_for_down},
                        {"rebalanced", stats_.rebalanced},
                        {"fail_open_episodes", stats_.fail_open_episodes},
                        {"buffers_in_use", static_cast<uint64_t>(pools_.buffers.in_use())},
                        {"buffers_free", static_cast<uint64_t>(pools_.buffers.free_count())}});
    uint64_t now = uv_now(loop_);
    const UpstreamPool& ups = control_.upstreams();
    for (size_t i = 0; i < ups.size(); ++i) {
        const Upstream& u = ups[i];
        log::info("upstream stats", {{"upstream", u.name},
                                     {"health", health_name(u.health)},
                                     {"available", u.available(now)},
                                     {"last_result", u.has_result ? result_name(u.last_result) : "-"},
                                     {"rtt_ms", fmt::format("{:.3f}", u.rtt_ms)},
                                     {"full_handshakes", u.full_handshakes},
                                     {"resumed_handshakes", u.resumed_handshakes},
                                     {"active", u.active},
                                     {"total", u.total},
                                     {"connect_failures", u.connect_failures},
                                     {"bytes_to_upstream", u.bytes_to_upstream},
                                     {"bytes_from_upstream", u.bytes_from_upstream}});
    }
}

}  // namespace kprism
