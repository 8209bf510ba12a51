// SPDX-License-Identifier: Apache-2.0
// Upstream (kube-apiserver) state: address, readiness verdict with rise/fall, passive failure
// backoff, latency tier and counters.
#pragma once

#include <netinet/in.h>
#include <uv.h>

#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kprism/base/enum_table.h"
#include "kprism/base/address.h"
#include "kprism/config/config.h"
#include "kprism/base/histogram.h"
#include "kprism/upstreams/readyz_body.h"

namespace kprism {

// Where an upstream came from: the configured list (the floor discovery never removes), the
// EndpointSlices, or the snapshot of them read at start.
enum class Source { configured, discovered, snapshot };
const char* source_name(Source s);  // "static", "discovered", "snapshot"

// What a probe result says about the client certificate: ready and not_ready are HTTP answers
// after authentication (accepted), unauthorized is a rejection, the rest say nothing
// (credentials.h).
enum class CertVerdict { accepted, rejected, silent };

// The outcome classes of one readiness check, listed once in kCheckResultTable (a row per value,
// in the enum's order), which sizes every array and loop over them. A new class goes before
// `last` and gets its row.
enum class CheckResult { ready, not_ready, timeout, connect_failed, tls_failed, unauthorized, last = unauthorized };
struct CheckResultInfo {
    CheckResult result;
    const char* name;    // the metric label, /status's last_result, log lines
    CertVerdict verdict;  // what it says about the client certificate
    DownReason down;     // the down reason of an upstream it takes down (not_ready: from its failing checks)
};
inline constexpr CheckResultInfo kCheckResultTable[] = {
    {CheckResult::ready, "ready", CertVerdict::accepted, DownReason::other},
    {CheckResult::not_ready, "not_ready", CertVerdict::accepted, DownReason::other},
    {CheckResult::timeout, "timeout", CertVerdict::silent, DownReason::timeout},
    {CheckResult::connect_failed, "connect_failed", CertVerdict::silent, DownReason::connect},
    {CheckResult::tls_failed, "tls_failed", CertVerdict::silent, DownReason::tls},
    {CheckResult::unauthorized, "unauthorized", CertVerdict::rejected, DownReason::unauthorized},
};
inline constexpr size_t kCheckResults = std::size(kCheckResultTable);
static_assert(is_enum_table<&CheckResultInfo::result>(kCheckResultTable), "kCheckResultTable: a row per CheckResult, in order");
constexpr const CheckResultInfo& check_result_info(CheckResult r) { return kCheckResultTable[static_cast<size_t>(r)]; }
constexpr const char* result_name(CheckResult r) { return check_result_info(r).name; }

// unknown: no verdict yet (start-up, or no client certificate to check with).
enum class Health { unknown, up, down };
const char* health_name(Health h);

// Why a client connection's attempt on an upstream failed (a passive failure), decided where it
// happened - from the libuv error or the connection's own timers - and carried as this type to
// the bookkeeping. Metric labels and check result classes come from it, never from a message.
enum class ConnectFailure {
    refused,      // ECONNREFUSED: nothing listens
    timeout,      // connect_timeout, or the kernel's ETIMEDOUT
    unreachable,  // EHOSTUNREACH, ENETUNREACH
    reset,        // ECONNRESET during the connect
    no_response,  // connected, the client sent its first bytes, and nothing came back in time
    hung_up,      // connected, then closed or reset before sending anything
    other,
};
ConnectFailure connect_failure_from_uv(int uv_status);
const char* connect_failure_name(ConnectFailure f);  // for log lines: "refused", "no_response", ...

// The label set of kprism_upstream_connect_errors_total{reason=...}: kept small and stable, and
// listed once in kConnectErrorTable (a row per value, in the enum's order), which sizes every
// array and loop over them. A new one goes before `last` and gets its row.
enum class ConnectError { refused, timeout, no_response, other, last = other };
struct ConnectErrorInfo {
    ConnectError error;
    const char* name;  // the metric label
};
inline constexpr ConnectErrorInfo kConnectErrorTable[] = {
    {ConnectError::refused, "refused"},
    {ConnectError::timeout, "timeout"},
    {ConnectError::no_response, "no_response"},
    {ConnectError::other, "other"},
};
inline constexpr size_t kConnectErrors = std::size(kConnectErrorTable);
static_assert(is_enum_table<&ConnectErrorInfo::error>(kConnectErrorTable), "kConnectErrorTable: a row per ConnectError, in order");
constexpr const char* connect_error_name(ConnectError e) { return kConnectErrorTable[static_cast<size_t>(e)].name; }
ConnectError connect_error_of(ConnectFailure f);
// How a passive failure counts among the check results: silence is a timeout, the rest a
// failed connect.
CheckResult check_result_of(ConnectFailure f);
// The kprism_upstream_down_reason label of a failed result (`checks`: its failing checks).
DownReason down_reason_of(CheckResult r, const FailingChecks& checks);

// The last readiness probe's result as the credentials condition reads it (credentials.h).
struct ProbeMark {
    bool has = false;
    CheckResult result = CheckResult::ready;
    uint64_t at_ms = 0;       // loop time (uv_now) of the result
    uint64_t generation = 0;  // TlsClientContext::generation() the probe ran with
};

struct Upstream {
    size_t index = 0;
    HostPort addr;
    // For logs, /status and the metrics' upstream label: addr.str(), or for an address of a
    // hostname endpoint "HOST@ADDRESS:PORT" (name_address_label): one word, unique per address.
    std::string name;
    // The zone in force (selection, /status): the configured one when set (an operator's explicit
    // word wins), else the one the slices give (discovery, or the snapshot read at start).
    std::string zone;
    std::string configured_zone;  // Endpoint::zone of the configured endpoint (or name) it is, or empty
    std::string discovered_zone;  // from the slices while they list it, valid_zone() checked; or empty
    void settle_zone() { zone = !configured_zone.empty() ? configured_zone : discovered_zone; }
    std::string server_name;  // Endpoint::server_name: configured TLS name, or empty
    Source source = Source::configured;
    // An address of a hostname endpoint: that endpoint as configured ("api.example.com:6443");
    // empty for an IP endpoint and a discovered address.
    std::string of_name;
    std::string hostname;  // of_name's host
    // The name for SNI and certificate verification, and the probe's Host header: the configured
    // server name, else the hostname the address came from, else the address.
    const std::string& tls_name() const {
        return !server_name.empty() ? server_name : !hostname.empty() ? hostname : addr.host;
    }
    std::string host_header() const { return !server_name.empty() ? server_name : !of_name.empty() ? of_name : name; }

    // Address to connect to: false only for a hostname given to UpstreamPool::add (never by the
    // daemon, which adds each address of a name instead) and for one of kprism's own listeners.
    sockaddr_storage sa{};
    bool resolved = false;
    std::string resolved_to_self;  // the address refused as kprism's own listener, as logged

    // Readiness, decided by health checks (rise/fall) and passive signals.
    Health health = Health::unknown;
    uint32_t rises = 0;  // consecutive ready results while down
    uint32_t falls = 0;  // consecutive failures while up
    bool has_result = false;
    CheckResult last_result = CheckResult::ready;
    std::string last_error;
    uint64_t last_result_ms = 0;  // loop time of the last result (check or passive failure)
    // The apiserver's failing checks in its last result (not_ready only; empty otherwise).
    FailingChecks failing_checks;
    // Why it is out: set by each failed result, kept through the ready ones of its rise.
    DownReason down_reason = DownReason::other;
    uint64_t last_change_ms = 0;
    // Answered a readiness check "ready" at least once in this process. A discovered or snapshot
    // upstream without it never gets a client connection, not even failing open (pick_upstream).
    bool passed_check = false;
    // Read from a snapshot that records it as checked in an earlier process: kept in the snapshot
    // while the slices list it, but never a reason to send it traffic.
    bool checked_earlier = false;
    ProbeMark probe;                // the last probe (passive failures leave it alone)
    bool rejection_logged = false;  // "health check unauthorized" said since it last accepted us
    double rtt_ms = -1;  // EWMA of the probe's connect + TLS handshake time; -1 until measured
    bool fast_tier = false;  // in the nearest latency tier (latency policy)
    // Its share of this node's connections, from rebalancing's last plan (rebalancer.h; 0: no
    // plan). While `active` is below it, new connections go here before the upstreams at it.
    uint32_t share_target = 0;
    bool below_share() const { return share_target > 0 && active < share_target; }

    // Passive detection: consecutive failed client connects back the upstream off until retry_at.
    // Orders the fallback when nothing is up (fail-open), e.g. during kubelet TLS bootstrap.
    uint32_t consecutive_failures = 0;
    uint64_t retry_at_ms = 0;  // loop time (uv_now); 0 = no backoff
    uint64_t backoff_ms = 0;

    // Loop times of the last connections the upstream ended first (ControlPlane::upstream_ended),
    // a ring; 0 = none.
    uint64_t upstream_ends_ms[3] = {};
    uint8_t upstream_ends_next = 0;
    uint64_t close_bursts = 0;
    // Went down for etcd: its connections' closes wait until this loop time plus the hold; 0 = none.
    uint64_t close_held_since_ms = 0;
    // Down with connections that stay: why (ControlPlane::close_hold, logged when it changes); nullptr: none.
    const char* close_hold = nullptr;

    // Counters.
    uint32_t active = 0;
    uint64_t total = 0;
    uint64_t connect_failures = 0;
    uint64_t bytes_to_upstream = 0;
    uint64_t bytes_from_upstream = 0;
    uint64_t checks[kCheckResults] = {};  // per CheckResult
    uint64_t resumed_handshakes = 0;
    uint64_t full_handshakes = 0;
    uint64_t probes_reused = 0;            // readiness probes sent on the kept probe connection
    uint64_t probe_connections_ended = 0;  // kept probe connections the apiserver ended
    uint64_t probe_protocol_errors = 0;    // probe connections closed for what followed an answer
    uint16_t probe_local_port = 0;         // the kept probe connection's local port; 0: none kept
    uint64_t connect_errors[kConnectErrors] = {};  // per ConnectError
    uint64_t went_up = 0, went_down = 0;          // health transitions
    int64_t last_change_unix = 0;                 // wall clock (s) of the last health change; 0: none
    Histogram check_duration;                     // seconds from TCP connect to result, per probe

    // Removed from the configuration by a reload: no new connections, established ones drain.
    // The slot is reused for a new endpoint once nothing refers to it.
    bool removed = false;
    // Discovered, left the slices, and waiting for an upstream that stays to be up (membership.cc).
    bool removal_waits = false;

    bool in_backoff(uint64_t now) const { return retry_at_ms != 0 && now < retry_at_ms; }
    // May receive new connections in normal operation.
    bool available(uint64_t) const { return resolved && health == Health::up && !removed; }
};

// Readiness thresholds: consecutive ready results that take a down upstream up, consecutive
// failures that take an up one down (health.rise, health.fall).
struct RiseFall {
    uint32_t rise = 2;
    uint32_t fall = 2;
};

// "api.example.com@10.0.0.2:6443", "api.example.com@[fd00::1]:6443": the name of an upstream
// that is an address of a hostname endpoint (no space: it is one token in a handover record).
std::string name_address_label(const std::string& hostname, const sockaddr_storage& address);
// Its inverse: false unless `label` is HOST@ADDRESS:PORT with an IP address.
bool parse_name_address_label(std::string_view label, std::string& hostname, HostPort& address);

class UpstreamPool {
public:
    UpstreamPool() = default;
    // Adds an endpoint (reusing a drained removed slot if there is one); nullptr when full. `zone`
    // is the configured one (Upstream::configured_zone).
    Upstream* add(const HostPort& addr, std::string zone = "", std::string server_name = "");
    // Adds `address` (its port set) as an address of the hostname endpoint `endpoint`, named
    // name_address_label(endpoint.host, address); nullptr when full.
    Upstream* add_name_address(const HostPort& endpoint, const sockaddr_storage& address, std::string zone = "",
                               std::string server_name = "");
    // The live (not removed) upstream with this address, if any.
    Upstream* find(const HostPort& addr);
    size_t size() const { return ups_.size(); }
    Upstream& operator[](size_t i) { return *ups_[i]; }
    const Upstream& operator[](size_t i) const { return *ups_[i]; }

    std::string node_zone;  // prefer upstreams in this zone while any there is up
    RiseFall rise_fall;
    // Called after an upstream's health changed (old value given).
    std::function<void(Upstream&, Health)> on_change;

    // Passive signals from the data path. `detail` is logged on a state change only.
    void connect_failed(Upstream& u, ConnectFailure why, std::string_view detail, uint64_t now);
    void connect_succeeded(Upstream& u);

    // Applies one check result with rise/fall. `explicit_down` marks the apiserver's own verdict
    // (HTTP 5xx), which takes an up upstream down at once; `checks` are the failing checks its
    // /readyz named (not_ready), the reason logged instead of the body. Returns true if health changed.
    bool record(Upstream& u, CheckResult r, const std::string& error, bool explicit_down, uint64_t now,
                const FailingChecks& checks = {});
    // The two halves of record(): note() counts the result and keeps it (and its failing checks)
    // as the last one (health untouched; returns whether its class changed), apply() runs
    // rise/fall on it.
    bool note(Upstream& u, CheckResult r, const std::string& error, uint64_t now, const FailingChecks& checks = {});
    bool apply(Upstream& u, CheckResult r, const std::string& error, bool explicit_down, uint64_t now,
               bool class_changed);
    // Recomputes the latency tiers (after health was set from outside, a restart's record).
    void update_tiers_now() { update_tiers(); }
    // Feeds a probe's connect time into the EWMA and recomputes latency tiers.
    void record_rtt(Upstream& u, double rtt_ms);

    size_t available_count(uint64_t now) const;
    size_t up_count() const;

    static constexpr uint64_t kBackoffMinMs = 1000;
    static constexpr uint64_t kBackoffMaxMs = 30000;

private:
    // `detail`, when given, is logged beside the reason (the response the failing checks came in).
    void set_health(Upstream& u, Health h, const std::string& reason, uint64_t now, const std::string& detail = "");
    void update_tiers();
    std::vector<std::unique_ptr<Upstream>> ups_;
};

}  // namespace kprism
