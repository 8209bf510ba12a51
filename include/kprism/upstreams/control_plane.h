// SPDX-License-Identifier: Apache-2.0
// The control plane as kprism sees it: the upstreams, their readiness checks and passive signals,
// hostname endpoints (every address an upstream of its own), up/down changes and what follows
// from them (closes on down, no-ready episodes).
#pragma once

#include <uv.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kprism/base/resolver.h"
#include "kprism/config/config.h"
#include "kprism/handoff/record.h"
#include "kprism/upstreams/credentials.h"
#include "kprism/upstreams/health_check.h"
#include "kprism/upstreams/tls_context.h"
#include "kprism/upstreams/upstream.h"

namespace kprism {

class Server;
struct Stats;
class Membership;
struct DiscoveryStatus;
struct SnapshotStatus;

// Owned by the Server, which it reaches for the loop, the configuration in force, the live
// connections (closes on down) and the systemd status. It owns the Membership (discovered
// upstreams and the snapshot, membership.h), made with it, and the Resolver (made by start()).
// Its handles (resolve timer, checkers, the Resolver's, and the Membership's discovery) are closed
// by close(); their memory is released with it, after the loop has stopped.
//
// A hostname endpoint is not an upstream: each address it resolves to is one (named
// "HOST@ADDRESS:PORT", Upstream::of_name set, source configured), added and checked like a
// discovered one; an address it no longer resolves to leaves like a discovered one that left the
// slices (Membership::depart). A resolution that fails or finds no address changes nothing.
class ControlPlane {
public:
    ControlPlane(Server& srv, Stats& stats);
    ~ControlPlane();
    ControlPlane(const ControlPlane&) = delete;
    ControlPlane& operator=(const ControlPlane&) = delete;

    // Starts resolving hostname endpoints and checking every upstream.
    void start();
    // Closes the checkers and the resolve timer and cancels pending resolutions. Idempotent.
    void close();
    // Reload, before anything is applied: when `next` names other certificate, key or CA paths,
    // loads those files now into `fresh`. False, with the reason in `error`, when they do not
    // load while a certificate is in use: the reload is then refused whole. Without one in use
    // (the TLS bootstrap) the new paths are taken even if their files do not load yet.
    bool prepare_tls(const Config& next, std::unique_ptr<TlsClientContext>& fresh, std::string& error);
    // Reload: applies endpoints, TLS files (`fresh` from prepare_tls) and health settings of
    // `next` (validated, and about to be the configuration in force); each change is appended to
    // `summary` (" key=value"). Files whose content did not change keep the context in use.
    void reconfigure(const Config& next, std::unique_ptr<TlsClientContext> fresh, std::string& summary);
    // Reload, once `next` is the configuration in force: the TLS files looked at now rather than
    // at the next check, so that new content ends the credentials condition and has every
    // upstream checked at once, and the summary says so (" tls_files=reloaded").
    void reload_tls_now(std::string& summary);

    uv_loop_t* loop() const;
    const Config& config() const;
    UpstreamPool& upstreams() { return ups_; }
    const UpstreamPool& upstreams() const { return ups_; }
    TlsClientContext& tls() { return *tls_; }
    const TlsClientContext& tls() const { return *tls_; }
    // The certificate files, re-read if they changed (TlsClientContext::refresh); a new
    // certificate ends the credentials condition and every upstream is probed again at once.
    SSL_CTX* refresh_tls(uint64_t now_ms);
    // Whether the apiservers accept the client certificate (credentials.h).
    CredentialsState credentials() const { return creds_.state(); }

    // Every live upstream has a verdict and every hostname endpoint an address (or kprism has no
    // client certificate to check with, or every apiserver rejects it).
    bool all_judged() const;
    // An episode of no upstream ready is going on (failing open or closed).
    bool failing_open() const { return failing_open_; }
    // Every live upstream is down for its etcd checks: the control plane has no etcd quorum.
    // From that moment until one is up again nothing is closed for being down.
    bool etcd_quorum_lost() const { return etcd_quorum_lost_; }
    // May a connection go to upstreams that are not up (fail-open, nothing to check with, or a
    // certificate every apiserver rejects)?
    bool fallback_allowed() const;
    // "2/3 upstreams ready", plus " (fail-open)" or " (fail-closed)" when none is. A hostname
    // endpoint without an address counts as one upstream, not ready.
    std::string summary() const;

    // A probe's result. `explicit_down`: the apiserver's own verdict (HTTP 5xx) or a hung one.
    // `generation`: that of the certificate the probe ran with; `checks`: the failing checks its
    // /readyz body named.
    void record_check(Upstream& u, CheckResult r, const std::string& error, bool explicit_down, uint64_t generation,
                      const FailingChecks& checks = {});
    // A client connection's attempt failed on `u` (`attempt_started_ms`: uv_now() when it began):
    // counted like a failed check, and a probe is started at once.
    void passive_failure(Upstream& u, ConnectFailure why, std::string_view detail, uint64_t attempt_started_ms);
    // The sockets kprism listens on, as bound (Server::own_listeners): it never connects to them.
    const OwnListeners& own_listeners() const;
    // Starts checking `u` (a new upstream) after `first_delay_ms`; an earlier checker of its slot
    // is closed first.
    void start_checker(Upstream& u, uint64_t first_delay_ms);
    // `u` takes no new connection from now on, its checker is closed and its connections drain
    // for up to `drain_ms` (an endpoint removed by a reload, or one that left the slices); `msg`
    // is the log line.
    void remove_upstream(Upstream& u, const char* msg, uint64_t drain_ms);
    // Discovered upstreams and the snapshot (membership.h); what /status shows of them.
    // discovery(): nullptr when discovery is off.
    const DiscoveryStatus* discovery() const;
    const SnapshotStatus& snapshot() const;
    // A connection to a down upstream was closed (close_on_down).
    void note_closed_for_down();
    // May the connections of `u` be closed for being down now (close_on_down, down, not removed,
    // no hold)? Asked again when each close is due.
    bool may_close_for_down(const Upstream& u) const;
    // Closes for being down go at most this many a second, across every check that scheduled
    // them: beyond close_spread when there are many.
    static constexpr uint64_t kDownClosesPerSecond = 100;
    static constexpr uint64_t kDownCloseGapMs = 1000 / kDownClosesPerSecond;
    // The upstream side ended an established connection first (FIN or reset before the client's),
    // `age_ms` after it reached this upstream. kCloseBurst of those older than kCloseBurstMinAgeMs within
    // kCloseBurstWindowMs (a graceful shutdown, a GOAWAY wave) start a check at once.
    void upstream_ended(Upstream& u, uint64_t age_ms);
    static constexpr size_t kCloseBurst = 3;
    static constexpr uint64_t kCloseBurstWindowMs = 1000;
    static constexpr uint64_t kCloseBurstMinAgeMs = 1000;
    // One stand-in per hostname endpoint that has no address now, named as configured, unknown,
    // its last_error saying why (never in the pool: no checker, no connection), for /status.
    std::vector<const Upstream*> unresolved_names() const;
    // A handed-over connection's upstream, by name: a live one, or else an address of a configured
    // hostname endpoint that the previous process had ("HOST@ADDRESS:PORT"), added now (and checked)
    // before this process has resolved the name; nullptr: none.
    Upstream* upstream_for_handover(const std::string& name);
    // A restart (handoff/): what this process knows of each live upstream and of the node, for the
    // next process (handover::HealthRecord), and, in that one, taking it back before the first
    // client is accepted. An upstream's verdict carries only when its last result is at most
    // carry_limit_ms() old (health.interval x health.fall: the old process would still hold it,
    // at most one fall away), and only onto an upstream of this process's set with the same name
    // (address, or HOST@ADDRESS:PORT of a configured hostname endpoint, added here as
    // upstream_for_handover does); the rest start unknown and are checked at once.
    handover::HealthRecord carry_health() const;
    struct Restored {
        size_t carried = 0;       // verdicts taken over
        size_t too_old = 0;       // older than carry_limit_ms(): unknown, checked at once
        size_t not_present = 0;   // named upstreams this process does not have
        size_t unknown = 0;       // live upstreams left without a verdict (checked at once)
    };
    Restored restore_health(const handover::HealthRecord& r, uint64_t now_boottime_ms);
    uint64_t carry_limit_ms() const;
    // Once the handed-over connections are resumed: what follows a check result (holds, etcd
    // condition, the closes of connections on a down upstream within close_spread), so that a
    // connection resumed onto an upstream that was down before the restart closes as it would have.
    void review_resumed();
    // Time and size bounds of one resolution.
    static constexpr uint64_t kResolveTimeoutMs = 5000;
    // The environment variable naming the DNS servers asked instead of resolv.conf's (tests).
    static constexpr const char* kTestDnsServersEnv = "KPRISM_TEST_DNS_SERVERS";

    // The last handle of a closed checker has closed (from its close callback): a removed
    // upstream's checker is freed here, one closed by close() stays until the destructor.
    void checker_closed(HealthChecker* c);
    // Checkers allocated: one per live upstream, plus those of removed ones still closing.
    size_t checkers_allocated() const;

private:
    void on_health_change(Upstream& u, Health old);
    // Down for etcd: its closes wait (close_held_since_ms) until every other live upstream has a
    // result from after that, or for at most two fast intervals, so that etcd lost everywhere at
    // once is told from one apiserver losing it. review() ends holds and quorum episodes.
    void hold_closes(Upstream& u);
    void review();
    void arm_hold_timer();
    static void on_hold_timer(uv_timer_t* t);
    void on_credentials(const Credentials::Outcome& out, Upstream& u, uint64_t now);
    void log_rejected_by_all(const Upstream& u) const;
    void check_all_soon(const Upstream* except);
    const char* close_hold(const Upstream& u) const;
    void close_stranded();
    void stop_checker(Upstream& u);
    void reconfigure_endpoints(const Config& next, std::string& summary);
    // A configured hostname endpoint: its resolution and what was said about it. Its addresses
    // are the live upstreams whose of_name is `name`.
    struct NamedEndpoint {
        HostPort addr;     // as configured; host is the hostname
        std::string name;  // addr.str()
        std::string zone, server_name;
        uint64_t query = 0;     // the Resolver's id of the resolution in flight; 0: none
        bool answered = false;  // a resolution has ended (with or without an address)
        bool failed_logged = false;
        bool over_cap_logged = false;
        std::string resolved_logged;  // the addresses of the last "endpoint resolved" line
        Upstream shown;               // what /status shows while it has no address
        std::string skipped_self;    // addresses skipped as kprism's own listeners, as warned
        std::string skipped_taken;   // addresses that are already another endpoint, as logged
        std::vector<std::string> refused;  // addresses of the last answer in a refused range, as warned
    };
    void add_name(const Endpoint& e);
    void resolve(NamedEndpoint& n);
    void on_resolved(NamedEndpoint& n, const ResolveResult& r);
    // The live upstreams that are addresses of `n`.
    std::vector<Upstream*> addresses_of(const NamedEndpoint& n);
    bool has_address(const NamedEndpoint& n) const;
    Upstream* find_address(const sockaddr_storage& ss);
    // `u` (an address of a name) is no longer one: a discovered one again when the slices still
    // list it, else removed (`wait`: once an upstream that stays is up, Membership::depart; else
    // at once, logged as `msg`, its connections drained for `drain_ms`).
    void leave_name(Upstream& u, bool wait, const char* msg, uint64_t drain_ms);
    // A configured IP endpoint that is one of kprism's own sockets (possible when systemd passed
    // them: validation knows only the configured addresses) is never connected to.
    void refuse_if_own(Upstream& u);
    // A removed IP endpoint's upstream kept as the address of a name in `next` that resolves to it.
    bool adopt_by_name(Upstream& u, const Config& next);
    void arm_resolve_timer(const Config& cfg);
    static void on_resolve_timer(uv_timer_t* t);

    Server& srv_;
    Stats& stats_;
    UpstreamPool ups_;
    std::unique_ptr<TlsClientContext> tls_;
    std::vector<std::unique_ptr<HealthChecker>> checkers_;  // index = upstream index
    // Closed (endpoint removed, or replaced), their close callbacks pending: each is freed by
    // checker_closed() from the last one.
    std::vector<std::unique_ptr<HealthChecker>> retired_checkers_;
    uv_timer_t resolve_timer_{};
    uv_timer_t hold_timer_{};
    uint64_t next_down_close_ms_ = 0;  // uv_now() before which no further close for being down is scheduled
    // The heap freed checkers held goes back to the kernel (malloc_trim), so that RSS follows the
    // live set under membership churn instead of the largest burst's high-water mark: the first
    // time the retired list becomes empty while no trim is pending starts this one-shot timer, and
    // the trim runs kTrimDelayMs after that moment (later emptyings do not push it back); so at
    // most one trim per kTrimDelayMs.
    uv_timer_t trim_timer_{};
    static constexpr uint64_t kTrimDelayMs = 5000;
    static void on_trim_timer(uv_timer_t* t);
    bool started_ = false;
    bool closed_ = false;
    bool failing_open_ = false;
    bool etcd_quorum_lost_ = false;
    Credentials creds_;
    uint64_t tls_generation_seen_ = 0;

    // Discovered upstreams and the snapshot (membership.h); its Discovery is closed by close().
    std::unique_ptr<Membership> membership_;
    std::vector<std::unique_ptr<NamedEndpoint>> names_;  // the hostname endpoints, in configured order
    std::unique_ptr<Resolver> resolver_;                 // made by start(), closed by close()
};

}  // namespace kprism
