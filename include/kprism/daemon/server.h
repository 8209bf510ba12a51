// SPDX-License-Identifier: Apache-2.0
// The daemon: owns the loop's long-lived handles, the upstreams and every live Connection.
#pragma once

#include <uv.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kprism/daemon/admin_endpoint.h"
#include "kprism/proxy/buffer_pool.h"
#include "kprism/config/config.h"
#include "kprism/upstreams/control_plane.h"
#include "kprism/daemon/heartbeat.h"
#include "kprism/handoff/handoff.h"
#include "kprism/base/intrusive_list.h"
#include "kprism/daemon/listener.h"
#include "kprism/base/log_limiter.h"
#include "kprism/proxy/selection.h"
#include "kprism/proxy/rebalancer.h"
#include "kprism/proxy/splice_poll.h"
#include "kprism/base/sd_notify.h"
#include "kprism/daemon/stats.h"

namespace kprism {

class Connection;

// What connections borrow only while they need it: read chunks.
struct ConnectionPools {
    BufferPool buffers;
};

// Lifetime: constructed before the loop runs (SplicePoll::run), destroyed after it returns.
// Listeners, signal handles and timers are members closed by finish(); Connections free
// themselves (see connection.h).
// Its methods live in daemon/server.cc (lifecycle, connections, limits, shutdown), daemon/reload.cc
// (SIGHUP) and daemon/systemd.cc (socket activation, READY/STATUS, watchdog); the upstreams and
// their health are the ControlPlane's (control_plane.h); passing the connections to the next
// process (SIGTERM under systemd's fd store, the crash copy, SIGUSR2) is the Handoff's (handoff.h).
class Server {
public:
    // Re-reads the configuration for SIGHUP (the same file and flags as at start).
    using Loader = std::function<bool(Config&, std::vector<std::string>& errors)>;

    // `admin` builds the admin endpoint at start() (the daemon does not know what it serves).
    Server(uv_loop_t* loop, Config cfg, AdminFactory admin, Loader loader = nullptr);
    ~Server();
    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;

    // Binds every listener and starts the control plane. On failure returns false with a
    // message; nothing is left listening.
    bool start(std::string& error);

    uv_loop_t* loop() const { return loop_; }
    const Config& config() const { return cfg_; }
    // The sockets kprism listens on, as bound (the data listeners and the admin socket, systemd's
    // or handed over included): the addresses it never connects to. Read again from the sockets
    // after start and after each reload.
    const OwnListeners& own_listeners() const { return own_; }
    ConnectionPools& pools() { return pools_; }
    SplicePoll& splice_poll() { return splice_poll_; }  // the connections' sockets (splice_poll.h)
    ControlPlane& control() { return control_; }
    const ControlPlane& control() const { return control_; }
    Policy& selection() { return *selection_; }  // the selection policy in force
    const Stats& stats() const { return stats_; }
    IntrusiveList<Connection>& connections() { return conns_; }
    size_t active_connections() const { return conns_.size(); }
    // For the admin endpoint: shutting down, and the event loop's own heartbeat.
    bool draining() const { return draining_; }
    const Heartbeat& heartbeat() const { return heartbeat_; }

    // Called by Connection.
    void connection_opened(Connection* c, bool resumed = false);
    void connection_closed(Connection* c);
    bool over_connection_limit() const { return conns_.size() > connection_limit_; }
    // A connection has read one peer's FIN: the half-close sweep runs (every kHalfCloseSweepMs)
    // until no connection is half-closed (Connection::check_half_closed).
    void watch_half_closed();
    static constexpr uint64_t kHalfCloseSweepMs = 1000;
    // A new upstream socket waits for its keepalive and TCP_USER_TIMEOUT settings (and
    // TCP_NODELAY, unless a second write needs it first): the options sweep (every
    // kUpstreamOptionsMs, only while one waits) applies them to the connections that have waited
    // a whole period (between one and two periods after their connect), so a connection that ends
    // sooner costs none of these setsockopt calls (Connection::apply_deferred_options; only
    // TCP_QUICKACK, before each connect, sockopt.h). Returns the waiting
    // connection's generation (0 or 1), which it passes back to upstream_options_done().
    unsigned upstream_options_deferred();
    void upstream_options_done(unsigned gen) { --options_pending_[gen]; }
    static constexpr uint64_t kUpstreamOptionsMs = 250;
    // max_connections, or fewer when RLIMIT_NOFILE cannot give each connection its two
    // descriptors and still leave kprism its own (see update_connection_limit()).
    size_t connection_limit() const { return connection_limit_; }
    void note_rejected();
    void note_accept_error(int status);
    void note_client_failed(uint32_t attempts);
    void note_replayed() { ++stats_.replayed; }
    void note_rebalanced() { ++stats_.rebalanced; }

    // SIGHUP: load the configuration whole, then apply it (see reload.cc). A configuration that
    // does not load, or listeners that cannot be bound, leave everything as it was.
    void reload();
    // Records the outcome of a reload attempt in stats_ (and counts it).
    void finish_reload(bool ok, std::string changes, std::string error);

    // SIGTERM/SIGINT: stop accepting, drain, then close what is left. A second call closes now.
    // Under systemd with a file descriptor store ($FDSTORE), SIGTERM hands over instead.
    void begin_shutdown(int signum);
    // Handing over (SIGTERM with a store, SIGUSR2), the crash copy, and what main() returns:
    // handing_over(), crash_copy_changed(), set_command_line(), exit_code() (handoff.h).
    Handoff& handoff() { return handoff_; }
    const Handoff& handoff() const { return handoff_; }
    void log_stats();

    // systemd (see systemd.cc). The listening socket passed for the admin server
    // (FileDescriptorName=admin, checked like the data sockets), or -1; the admin server listens on
    // it instead of health.bind_address:health.port. take_admin_fd() hands it over (the caller then
    // owns and closes it); until then the Server closes it when it is destroyed.
    int admin_fd() const { return sd_.admin_fd; }
    int take_admin_fd() { return std::exchange(sd_.admin_fd, -1); }
    // Did systemd pass the data sockets? Then bind_address/bind_port are not used, also not on reload.
    bool socket_activated() const { return sd_.socket_activated; }
    // An upstream's health changed (from the ControlPlane): READY=1 after the first round, STATUS=.
    void health_changed();
    // After a restart (Handoff::restarted) that left some live upstream without a verdict (the
    // record did not carry it, it was too old, or there was none: an older kprism's handover),
    // new clients wait, accepted but not yet connected, until every upstream has a verdict or
    // health.timeout (at most kHoldMaxMs) has passed; then they go where those verdicts say.
    // Returns true when `fd` is held (the Server owns it then). From the listener.
    bool hold_new_client(int fd);
    static constexpr uint64_t kHoldMaxMs = 3000;

private:
    // The Handoff is a peer (handoff.h): handing over, it sets draining_, closes listeners_ (after
    // duplicating them) and calls finish(); it copies listeners_ for the crash copy, checks
    // finished_ before a restart in place and calls block_signals() around its exec.
    friend class Handoff;

    // The systemd side of the daemon (systemd.cc): READY=1 is sent once, after the first
    // health round (ready_timer bounds the wait); the watchdog pings from the loop.
    struct Systemd {
        uv_timer_t ready_timer{}, watchdog_timer{};
        bool ready_sent = false;
        bool socket_activated = false;
        int admin_fd = -1;
    };

    bool start_listeners(std::string& error);
    bool start_admin(std::string& error);
    void note_own_listeners();
    void close_all(const char* reason);
    void finish();
    bool apply_listeners(const Config& next, std::string& error, std::string& summary);
    static void on_signal(uv_signal_t* s, int signum);
    // Blocks (or unblocks) the signals in kSignals (server.cc) for the process.
    static void block_signals(bool block);
    static void on_drain_timeout(uv_timer_t* t);
    static void on_half_close_sweep(uv_timer_t* t);
    static void on_options_sweep(uv_timer_t* t);
    bool adopt_passed_sockets(std::string& error);
    void apply_listener_tcp_options();
    void update_connection_limit();
    void start_systemd();
    void maybe_ready();
    void send_ready(const char* reason);
    static void on_ready_timeout(uv_timer_t* t);
    static void on_watchdog(uv_timer_t* t);
    void start_hold();
    void release_held(const char* reason);
    static void on_hold_timeout(uv_timer_t* t);

    uv_loop_t* loop_;
    Config cfg_;
    Loader loader_;
    Stats stats_;
    ConnectionPools pools_;
    SplicePoll splice_poll_;
    std::unique_ptr<Policy> selection_;
    ControlPlane control_;
    Rebalancer rebalancer_;
    std::vector<std::unique_ptr<Listener>> listeners_;
    // Closed by a reload but possibly still inside a pending close callback: freed with the Server.
    std::vector<std::unique_ptr<Listener>> retired_listeners_;
    IntrusiveList<Connection> conns_;  // every live client connection
    size_t connection_limit_ = 0;      // set by update_connection_limit() at start and on reload
    bool fd_limited_ = false;          // connection_limit_ is below max_connections because of RLIMIT_NOFILE
    int fds_at_start_ = -1;
    LogLimiter reject_log_, accept_error_log_, client_fail_log_;
    uv_signal_t signals_[5]{};         // kSignals in server.cc
    uv_timer_t drain_timer_{};
    uv_timer_t half_close_timer_{};  // active only while some connection is half-closed
    uv_timer_t options_timer_{};     // active only while some upstream socket waits for its options
    size_t options_pending_[2] = {0, 0};  // connections waiting for them, by generation
    unsigned options_tick_ = 0;           // options sweeps so far
    bool draining_ = false;
    bool finished_ = false;
    // hold_new_client(): clients accepted while the first verdicts after a restart are awaited.
    bool holding_ = false;
    std::vector<int> held_;
    uint64_t hold_started_ms_ = 0;
    uv_timer_t hold_timer_{};
    Systemd sd_;
    Handoff handoff_{*this};           // handover, crash copy, restart in place; closed by finish()
    AdminFactory make_admin_;
    std::unique_ptr<AdminEndpoint> admin_;  // the admin HTTP endpoint (admin/admin.h); closed by finish()
    OwnListeners own_;              // from listeners_ and admin_ by note_own_listeners()
    Heartbeat heartbeat_;
};

}  // namespace kprism
