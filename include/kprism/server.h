// The daemon: owns the loop's long-lived handles, the upstreams and every live Connection.
#pragma once

#include <uv.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kprism/buffer_pool.h"
#include "kprism/config.h"
#include "kprism/health_check.h"
#include "kprism/heartbeat.h"
#include "kprism/listener.h"
#include "kprism/policy.h"
#include "kprism/tls_context.h"
#include "kprism/upstream.h"

namespace kprism {

class Admin;
class Connection;

struct Stats {
    uint64_t accepted = 0;
    uint64_t rejected = 0;        // over max_connections
    uint64_t accept_errors = 0;   // EMFILE and friends
    uint64_t client_failures = 0; // every upstream failed a client
    uint64_t connect_failures = 0;
    uint64_t replayed = 0;         // moved to another upstream before any answer
    uint64_t closed_for_down = 0;  // established connections closed because their upstream went down
    uint64_t fail_open_episodes = 0;
    uint64_t reloads_ok = 0, reloads_failed = 0;
};

// Lifetime: constructed before uv_run, destroyed after it returns. Listeners, signal handles and
// timers are members closed by stop(); Connections free themselves (see connection.h).
class Server {
public:
    // Re-reads the configuration for SIGHUP (the same file and flags as at start).
    using Loader = std::function<bool(Config&, std::vector<std::string>& errors)>;

    Server(uv_loop_t* loop, Config cfg, Loader loader = nullptr);
    ~Server();
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;

    // Binds every listener and starts resolving hostnames. On failure returns false with a
    // message; nothing is left listening.
    bool start(std::string& error);

    uv_loop_t* loop() const { return loop_; }
    const Config& config() const { return cfg_; }
    BufferPool& pool() { return pool_; }
    RequestPool<uv_write_t>& write_reqs() { return write_reqs_; }
    RequestPool<uv_shutdown_t>& shutdown_reqs() { return shutdown_reqs_; }
    RequestPool<uv_connect_t>& connect_reqs() { return connect_reqs_; }
    UpstreamPool& upstreams() { return ups_; }
    Policy& policy() { return *policy_; }
    const Stats& stats() const { return stats_; }
    size_t active_connections() const { return active_; }
    // For the admin endpoint: no upstream up (an episode of failing open or closed), shutting
    // down, and the event loop's own heartbeat.
    bool failing_open() const { return failing_open_; }
    bool draining() const { return draining_; }
    const Heartbeat& heartbeat() const { return heartbeat_; }

    // Called by Connection.
    void connection_opened(Connection* c);
    void connection_closed(Connection* c);
    bool over_connection_limit() const { return active_ > connection_limit_; }
    // max_connections, or fewer when RLIMIT_NOFILE cannot give each connection its two
    // descriptors and still leave kprism its own (see update_connection_limit()).
    size_t connection_limit() const { return connection_limit_; }
    void note_rejected();
    void note_accept_error(int status);
    void note_client_failed(uint32_t attempts);
    void note_replayed() { ++stats_.replayed; }
    void note_closed_for_down() { ++stats_.closed_for_down; }
    // May a connection go to upstreams that are not up (fail-open, or nothing to check with)?
    bool fallback_allowed() const;

    // Health: results of probes, and passive signals from the data path (a failed client connect,
    // an upstream that did not answer): counted like a failed check, and a probe is started.
    TlsClientContext& tls() { return *tls_; }
    void record_check(Upstream& u, CheckResult r, const std::string& error, bool explicit_down);
    // `attempt_started_ms`: when the failed attempt began (uv_now()); see server.cc.
    void passive_failure(Upstream& u, const char* reason, uint64_t attempt_started_ms);

    // SIGHUP: load the configuration whole, then apply it (see server_reload.cc). A configuration that
    // does not load, or listeners that cannot be bound, leave everything as it was.
    void reload();

    // SIGTERM/SIGINT: stop accepting, drain, then close what is left. A second call closes now.
    void begin_shutdown(const char* why);
    void log_stats();

    // systemd (see server_systemd.cc). The listening socket passed for the admin server
    // (FileDescriptorName=admin, checked like the data sockets), or -1; the admin server listens on
    // it instead of health.bind_address:health.port. take_admin_fd() hands it over (the caller then
    // owns and closes it); until then the Server closes it when it is destroyed.
    int admin_fd() const { return admin_fd_; }
    int take_admin_fd() { return std::exchange(admin_fd_, -1); }
    // Did systemd pass the data sockets? Then bind_address/bind_port are not used, also not on reload.
    bool socket_activated() const { return socket_activated_; }
    // The STATUS= line: "2/3 upstreams ready", plus " (fail-open)" or " (fail-closed)" when none is.
    std::string status_summary() const;

private:
    void close_all(const char* reason);
    void finish();
    void resolve(Upstream& u);
    void start_checker(Upstream& u, uint64_t first_delay_ms);
    bool apply_listeners(const Config& next, std::string& error, std::string& summary);
    void apply_endpoints(const Config& next, std::string& summary);
    void on_health_change(Upstream& u, Health old);
    static void on_resolved(uv_getaddrinfo_t* req, int status, addrinfo* res);
    static void on_signal(uv_signal_t* s, int signum);
    static void on_drain_timeout(uv_timer_t* t);
    static void on_resolve_timer(uv_timer_t* t);
    bool adopt_passed_sockets(std::string& error);
    void apply_listener_tcp_options();
    void update_connection_limit();
    void start_systemd();
    void systemd_health_changed();
    void maybe_ready();
    void send_ready(const char* reason);
    static void on_ready_timeout(uv_timer_t* t);
    static void on_watchdog(uv_timer_t* t);

    uv_loop_t* loop_;
    Config cfg_;
    BufferPool pool_;
    RequestPool<uv_write_t> write_reqs_;
    RequestPool<uv_shutdown_t> shutdown_reqs_;
    RequestPool<uv_connect_t> connect_reqs_;
    UpstreamPool ups_;
    std::unique_ptr<Policy> policy_;
    Stats stats_;
    Loader loader_;
    std::vector<std::unique_ptr<Listener>> listeners_;
    std::unique_ptr<TlsClientContext> tls_;
    std::vector<std::unique_ptr<HealthChecker>> checkers_;  // index = upstream index
    // Closed by a reload but possibly still inside a pending close callback: freed with the Server.
    std::vector<std::unique_ptr<Listener>> retired_listeners_;
    std::vector<std::unique_ptr<HealthChecker>> retired_checkers_;
    bool failing_open_ = false;
    uint64_t last_client_fail_log_ = 0;
    uint64_t suppressed_client_fails_ = 0;
    Connection* conns_ = nullptr;  // head of the intrusive list
    size_t active_ = 0;
    size_t connection_limit_ = 0;  // set by update_connection_limit() at start and on reload
    bool fd_limited_ = false;      // connection_limit_ is below max_connections because of RLIMIT_NOFILE
    int fds_at_start_ = -1;
    uv_signal_t sig_term_{}, sig_int_{}, sig_usr1_{}, sig_hup_{};
    uv_timer_t drain_timer_{}, resolve_timer_{};
    bool draining_ = false;
    bool finished_ = false;
    uint64_t last_accept_error_log_ = 0;
    uint64_t suppressed_accept_errors_ = 0;
    uint64_t last_reject_log_ = 0;
    uint64_t suppressed_rejects_ = 0;
    // systemd: READY=1 is sent once, after the first health round (ready_timer_ bounds the wait).
    uv_timer_t ready_timer_{}, watchdog_timer_{};
    bool ready_sent_ = false;
    bool socket_activated_ = false;
    int admin_fd_ = -1;
    std::unique_ptr<Admin> admin_;  // the admin HTTP endpoint (admin.h); closed by finish()
    Heartbeat heartbeat_;
};

}  // namespace kprism
