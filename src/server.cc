// Daemon lifecycle: listeners, signals, hostname resolution, drain on shutdown, stats.
#include "kprism/server.h"

#include <dirent.h>
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstring>

#include "kprism/admin.h"
#include "kprism/connection.h"
#include "kprism/log.h"
#include "kprism/sd_notify.h"
#include "kprism/random.h"
#include "kprism/sockopt.h"

#ifndef KPRISM_STATIC
#define KPRISM_STATIC 0  // 1 in `make static` builds (see Makefile)
#endif

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

Server::Server(uv_loop_t* loop, Config cfg, Loader loader)
    : loop_(loop),
      cfg_(std::move(cfg)),
      policy_(make_policy(cfg_.s.policy)),
      loader_(std::move(loader)),
      tls_(std::make_unique<TlsClientContext>(cfg_.s.client_cert, cfg_.s.client_key, cfg_.s.ca_file)) {
    for (const auto& e : cfg_.endpoints) ups_.add(e.addr, e.zone, e.server_name);
    ups_.node_zone = cfg_.s.zone;
    ups_.policy.rise = static_cast<uint32_t>(cfg_.s.health_rise);
    ups_.policy.fall = static_cast<uint32_t>(cfg_.s.health_fall);
    ups_.on_change = [this](Upstream& u, Health old) { on_health_change(u, old); };
}

Server::~Server() {
    if (admin_fd_ >= 0) ::close(admin_fd_);  // passed by systemd and never taken by the admin server
}

// Accepted sockets inherit these from their listener (sockopt.h); called at start and on reload.
void Server::apply_listener_tcp_options() {
    for (auto& l : listeners_)
        if (int r = apply_tcp_options(&l->tcp, cfg_.s, true); r != 0)
            log::warn("cannot set TCP options on a listening socket", {{"address", l->name}, {"error", uv_strerror(r)}});
}

bool Server::start(std::string& error) {
    if (!adopt_passed_sockets(error)) return false;
    for (const auto& addr : cfg_.listen) {
        if (socket_activated_) break;  // systemd's sockets replace the configured addresses
        auto l = std::make_unique<Listener>();
        int r = l->start(loop_, this, reinterpret_cast<const sockaddr*>(&addr));
        if (r != 0) {
            error = fmt::format("cannot listen on {}: {}", sockaddr_str(reinterpret_cast<const sockaddr*>(&addr)),
                                uv_strerror(r));
            l->close();
            listeners_.push_back(std::move(l));
            for (auto& x : listeners_) x->close();
            return false;
        }
        log::info("listening", {{"address", l->name}});
        listeners_.push_back(std::move(l));
    }
    apply_listener_tcp_options();
    admin_ = std::make_unique<Admin>(*this);
    int admin_fd = take_admin_fd();
    int ar = admin_fd >= 0 ? admin_->start_fd(loop_, admin_fd)
                           : admin_->start(loop_, reinterpret_cast<const sockaddr*>(&cfg_.admin));
    if (ar != 0) {
        error = fmt::format("cannot listen on the admin address {} (health.bind_address, health.port): {}",
                            admin_->name(), uv_strerror(ar));
        admin_->close();
        for (auto& x : listeners_) x->close();
        return false;
    }
    log::info("admin endpoint listening", {{"address", admin_->name()}});
    update_connection_limit();
    uv_signal_init(loop_, &sig_term_);
    uv_signal_init(loop_, &sig_int_);
    uv_signal_init(loop_, &sig_usr1_);
    uv_signal_init(loop_, &sig_hup_);
    for (uv_signal_t* s : {&sig_term_, &sig_int_, &sig_usr1_, &sig_hup_}) s->data = this;
    uv_signal_start(&sig_term_, on_signal, SIGTERM);
    uv_signal_start(&sig_int_, on_signal, SIGINT);
    uv_signal_start(&sig_usr1_, on_signal, SIGUSR1);
    uv_signal_start(&sig_hup_, on_signal, SIGHUP);
    uv_timer_init(loop_, &drain_timer_);
    drain_timer_.data = this;
    uv_timer_init(loop_, &resolve_timer_);
    resolve_timer_.data = this;
    heartbeat_.start(loop_);

    bool any_hostname = false;
    for (size_t i = 0; i < ups_.size(); ++i) {
        if (!ups_[i].addr.is_ip) {
            any_hostname = true;
            resolve(ups_[i]);
        }
    }
    if (any_hostname) {
        auto every = static_cast<uint64_t>(cfg_.s.resolve_interval.count());
        uv_timer_start(&resolve_timer_, on_resolve_timer, every, every);
    }
    // First probes spread over up to a second (kprism restarts on many nodes at once after a
    // rollout); after that every checker drifts on its own jittered period.
    for (size_t i = 0; i < ups_.size(); ++i)
        start_checker(ups_[i], random_below(std::min<uint64_t>(1000, cfg_.s.health_interval.count())));
    std::string names;
    for (const auto& e : cfg_.endpoints) names += (names.empty() ? "" : ",") + e.addr.str();
    log::info("started", {{"upstreams", names}, {"policy", policy_->name()},
                          {"max_connections", cfg_.s.max_connections}});
    start_systemd();
    return true;
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
        if (fds_at_start_ < 0) fds_at_start_ = open_fds() >= 0 ? open_fds() : 16;
        uint64_t reserve = static_cast<uint64_t>(fds_at_start_) + ups_.size() + kAdminReserveFds + kSpareFds;
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

void Server::start_checker(Upstream& u, uint64_t first_delay_ms) {
    if (checkers_.size() <= u.index) checkers_.resize(u.index + 1);
    if (checkers_[u.index]) retired_checkers_.push_back(std::move(checkers_[u.index]));
    checkers_[u.index] = std::make_unique<HealthChecker>(*this, u);
    checkers_[u.index]->start(first_delay_ms);
}

void Server::resolve(Upstream& u) {
#if KPRISM_STATIC
    // Static build: validation rejects hostname endpoints, so this is never reached, and
    // uv_getaddrinfo (glibc getaddrinfo, which needs NSS modules) is not linked in at all.
    log::error("cannot resolve endpoint: this static build cannot resolve names", {{"upstream", u.name}});
}
#else
    if (u.resolving) return;
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    u.resolve_req.data = this;
    if (int r = uv_getaddrinfo(loop_, &u.resolve_req, on_resolved, u.addr.host.c_str(), nullptr, &hints); r != 0) {
        log::warn("cannot resolve endpoint", {{"upstream", u.name}, {"error", uv_strerror(r)}});
        return;
    }
    u.resolving = true;
}

void Server::on_resolved(uv_getaddrinfo_t* req, int status, addrinfo* res) {
    auto* self = static_cast<Server*>(req->data);
    Upstream* u = nullptr;
    for (size_t i = 0; i < self->ups_.size(); ++i)
        if (&self->ups_[i].resolve_req == req) u = &self->ups_[i];
    u->resolving = false;
    if (status == UV_ECANCELED || self->finished_) {
        uv_freeaddrinfo(res);
        return;
    }
    if (status != 0 || !res) {
        // DNS may come up after kprism: warn once, keep the other upstreams, retry on the timer.
        if (!u->resolve_failed_logged)
            log::warn("cannot resolve endpoint; will retry",
                      {{"upstream", u->name}, {"error", uv_strerror(status)},
                       {"retry_in", format_duration(self->cfg_.s.resolve_interval)}});
        u->resolve_failed_logged = true;
        uv_freeaddrinfo(res);
        return;
    }
    sockaddr_storage ss{};
    std::memcpy(&ss, res->ai_addr, res->ai_addrlen);
    reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(u->addr.port);  // same offset for v6
    std::string now = sockaddr_str(reinterpret_cast<sockaddr*>(&ss));
    if (!u->resolved || sockaddr_str(reinterpret_cast<sockaddr*>(&u->sa)) != now)
        log::info("endpoint resolved", {{"upstream", u->name}, {"address", now}});
    u->sa = ss;
    u->resolved = true;
    u->resolve_failed_logged = false;
    uv_freeaddrinfo(res);
}
#endif  // KPRISM_STATIC

void Server::on_resolve_timer(uv_timer_t* t) {
    auto* self = static_cast<Server*>(t->data);
    for (size_t i = 0; i < self->ups_.size(); ++i)
        if (!self->ups_[i].addr.is_ip) self->resolve(self->ups_[i]);
}

void Server::connection_opened(Connection* c) {
    c->next = conns_;
    if (conns_) conns_->prev = c;
    conns_ = c;
    ++active_;
    ++stats_.accepted;
}

void Server::connection_closed(Connection* c) {
    if (c->prev) c->prev->next = c->next;
    else conns_ = c->next;
    if (c->next) c->next->prev = c->prev;
    --active_;
    if (draining_ && active_ == 0) finish();
}

bool Server::fallback_allowed() const {
    return cfg_.s.fail_mode == "fail-open" || tls_->get() == nullptr || ups_.up_count() > 0;
}

void Server::record_check(Upstream& u, CheckResult r, const std::string& error, bool explicit_down) {
    bool was_unauthorized = u.has_result && u.last_result == CheckResult::unauthorized;
    if (r == CheckResult::unauthorized && !was_unauthorized)
        log::error("health check unauthorized: the apiserver does not accept kprism's client certificate; this is "
                   "a misconfiguration, not an unready apiserver",
                   {{"upstream", u.name}, {"error", error}, {"client_cert", cfg_.s.client_cert},
                    {"subject", tls_->subject()}});
    ups_.record(u, r, error, explicit_down, uv_now(loop_));
}

void Server::passive_failure(Upstream& u, const char* reason, uint64_t attempt_started_ms) {
    uint64_t now = uv_now(loop_);
    ++stats_.connect_failures;
    ups_.connect_failed(u, reason, now);
    CheckResult r = std::string_view(reason).find("timeout") != std::string_view::npos ||
                            std::string_view(reason) == "no response"
                        ? CheckResult::timeout
                        : CheckResult::connect_failed;
    // Without a client certificate there are no checks, so passive failures only order the fallback.
    // An attempt that began before the upstream's health last changed says nothing about it now:
    // after an outage, failing open, the connects that hung on it while it was unreachable time
    // out just after it came back up and would take it down again at once (flapping).
    bool stale = u.last_change_ms > attempt_started_ms;
    if (tls_->get() && u.health != Health::down && !stale)
        ups_.record(u, r, fmt::format("client connection: {}", reason), false, now);
    if (u.index < checkers_.size() && checkers_[u.index]) checkers_[u.index]->check_soon();
}

// Down: spread closes of its established connections over close_spread, unless that would leave
// nothing ready. Also the one line per fail-open episode.
void Server::on_health_change(Upstream& u, Health old) {
    size_t up = ups_.up_count();
    if (u.health == Health::down && old == Health::up && cfg_.s.close_on_down) {
        if (up == 0) {
            log::warn("not closing connections of the down upstream: no other upstream is up",
                      {{"upstream", u.name}, {"connections", u.active}});
        } else if (u.active > 0) {
            auto spread = static_cast<uint64_t>(cfg_.s.close_spread.count());
            log::info("closing connections of the down upstream",
                      {{"upstream", u.name}, {"connections", u.active}, {"spread", format_duration(cfg_.s.close_spread)}});
            for (Connection* c = conns_; c; c = c->next)
                if (c->upstream() == &u && c->splicing()) c->close_later_for_down(spread ? random_below(spread) : 0);
        }
    }
    bool all_judged = true;
    for (size_t i = 0; i < ups_.size(); ++i)
        all_judged = all_judged && (ups_[i].removed || ups_[i].health != Health::unknown);
    if (up == 0 && (all_judged || old == Health::up) && !failing_open_) {
        failing_open_ = true;
        ++stats_.fail_open_episodes;
        log::error(cfg_.s.fail_mode == "fail-open" ? "no upstream ready: failing open, connections go to every endpoint"
                                                   : "no upstream ready: failing closed, new connections are refused",
                   {{"upstreams", static_cast<uint64_t>(ups_.size())}});
    } else if (up > 0 && failing_open_) {
        failing_open_ = false;
        log::info("an upstream is ready again: no-ready episode over", {{"upstream", u.name}});
    }
    systemd_health_changed();
}

void Server::note_client_failed(uint32_t attempts) {
    ++stats_.client_failures;
    uint64_t now = uv_now(loop_);
    if (now - last_client_fail_log_ >= 1000 || last_client_fail_log_ == 0) {
        log::warn("client connection failed", {{"reason", fallback_allowed() ? "every upstream failed" : "no upstream ready (fail-closed)"},
                                               {"attempts", attempts},
                                               {"suppressed", suppressed_client_fails_}});
        last_client_fail_log_ = now;
        suppressed_client_fails_ = 0;
    } else {
        ++suppressed_client_fails_;
    }
}

void Server::note_rejected() {
    ++stats_.rejected;
    uint64_t now = uv_now(loop_);
    if (now - last_reject_log_ >= 1000 || last_reject_log_ == 0) {
        log::warn("connection rejected", {{"reason", fd_limited_ ? "connection limit reached (RLIMIT_NOFILE)"
                                                              : "max_connections reached"},
                                          {"max_connections", cfg_.s.max_connections},
                                          {"connection_limit", static_cast<uint64_t>(connection_limit_)},
                                          {"suppressed", suppressed_rejects_}});
        last_reject_log_ = now;
        suppressed_rejects_ = 0;
    } else {
        ++suppressed_rejects_;
    }
}

void Server::note_accept_error(int status) {
    ++stats_.accept_errors;
    uint64_t now = uv_now(loop_);
    if (now - last_accept_error_log_ >= 1000 || last_accept_error_log_ == 0) {
        log::error("accept failed", {{"error", uv_strerror(status)},
                                     {"active_connections", static_cast<uint64_t>(active_)},
                                     {"suppressed", suppressed_accept_errors_}});
        last_accept_error_log_ = now;
        suppressed_accept_errors_ = 0;
    } else {
        ++suppressed_accept_errors_;
    }
}

void Server::on_signal(uv_signal_t* s, int signum) {
    auto* self = static_cast<Server*>(s->data);
    switch (signum) {
    case SIGTERM: self->begin_shutdown("SIGTERM"); break;
    case SIGINT: self->begin_shutdown("SIGINT"); break;
    case SIGUSR1: self->log_stats(); break;
    case SIGHUP: self->reload(); break;
    }
}

void Server::begin_shutdown(const char* why) {
    if (finished_) return;
    if (draining_) {
        log::warn("second shutdown signal: closing connections now", {{"signal", why}});
        close_all("shutdown");
        return;
    }
    draining_ = true;
    notify::stopping();
    notify::status(fmt::format("shutting down: draining {} connections", active_));
    for (auto& l : listeners_) l->close();
    log::info("shutting down", {{"signal", why},
                                {"connections", static_cast<uint64_t>(active_)},
                                {"drain_timeout", format_duration(cfg_.s.drain_timeout)}});
    if (active_ == 0) {
        finish();
        return;
    }
    uv_timer_start(&drain_timer_, on_drain_timeout, static_cast<uint64_t>(cfg_.s.drain_timeout.count()), 0);
}

void Server::on_drain_timeout(uv_timer_t* t) {
    auto* self = static_cast<Server*>(t->data);
    log::warn("drain timeout: closing remaining connections",
              {{"connections", static_cast<uint64_t>(self->active_)}});
    self->close_all("drain timeout");
}

void Server::close_all(const char* reason) {
    for (Connection* c = conns_; c; c = c->next) c->close(reason);
}

// Closes the daemon's own handles so uv_run returns once the last connection is gone.
void Server::finish() {
    if (finished_) return;
    finished_ = true;
    for (auto& l : listeners_) l->close();
    if (admin_) admin_->close();
    heartbeat_.close();
    for (auto& c : checkers_)
        if (c) c->close();
    for (size_t i = 0; i < ups_.size(); ++i)
        if (ups_[i].resolving) uv_cancel(reinterpret_cast<uv_req_t*>(&ups_[i].resolve_req));
    for (void* p : {static_cast<void*>(&sig_term_), static_cast<void*>(&sig_int_), static_cast<void*>(&sig_usr1_),
                    static_cast<void*>(&sig_hup_), static_cast<void*>(&drain_timer_),
                    static_cast<void*>(&resolve_timer_), static_cast<void*>(&ready_timer_),
                    static_cast<void*>(&watchdog_timer_)})
        if (!uv_is_closing(h(p))) uv_close(h(p), nullptr);
    log::info("stopped", {{"connections_served", stats_.accepted}});
}

void Server::log_stats() {
    log::info("stats", {{"connections_active", static_cast<uint64_t>(active_)},
                        {"connections_total", stats_.accepted},
                        {"rejected", stats_.rejected},
                        {"accept_errors", stats_.accept_errors},
                        {"client_failures", stats_.client_failures},
                        {"connect_failures", stats_.connect_failures},
                        {"replayed", stats_.replayed},
                        {"closed_for_down", stats_.closed_for_down},
                        {"fail_open_episodes", stats_.fail_open_episodes},
                        {"buffers_in_use", static_cast<uint64_t>(pool_.in_use())},
                        {"buffers_free", static_cast<uint64_t>(pool_.free_count())}});
    uint64_t now = uv_now(loop_);
    for (size_t i = 0; i < ups_.size(); ++i) {
        const Upstream& u = ups_[i];
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
