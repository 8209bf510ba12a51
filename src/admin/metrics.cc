// SPDX-License-Identifier: Apache-2.0
// Prometheus text rendering of a Snapshot, and taking the snapshot from the Server.
#include "kprism/admin/metrics.h"

#include <fmt/format.h>
#include <unistd.h>

#include <ctime>

#include "kprism/upstreams/tls_context.h"
#include "kprism/base/version.h"

namespace kprism {

size_t Snapshot::up_count() const {
    size_t n = 0;
    for (const Upstream* u : upstreams) n += u->health == Health::up;
    return n;
}

Snapshot take_snapshot(Server& srv) {
    Snapshot s;
    s.version = kVersion;
    s.pid = static_cast<int64_t>(getpid());
    s.stats = srv.stats();
    s.connections_active = srv.active_connections();
    const Handoff& handoff = srv.handoff();
    s.crash_copy_connections = handoff.crash_copy_on() ? static_cast<int64_t>(handoff.crash_copy_connections()) : -1;
    s.fail_open = srv.control().failing_open();
    s.etcd_quorum_lost = srv.control().etcd_quorum_lost();
    s.health_checkers = srv.control().checkers_allocated();
    s.draining = srv.draining();
    TlsClientContext& tls = srv.control().tls();
    s.client_cert_not_after = tls.get() ? tls.not_after() : 0;
    s.client_cert = srv.config().s.client_cert;
    if (tls.get()) s.client_cert_subject = tls.subject();
    s.credentials = credentials_state_name(srv.control().credentials());
    s.now_unix = static_cast<int64_t>(std::time(nullptr));
    s.heartbeat_age_seconds = srv.heartbeat().age_seconds();
    UpstreamPool& ups = srv.control().upstreams();
    for (size_t i = 0; i < ups.size(); ++i)
        if (!ups[i].removed) s.upstreams.push_back(&ups[i]);
    if (const DiscoveryStatus* d = srv.control().discovery()) s.discovery = *d;
    s.snapshot = srv.control().snapshot();
    return s;
}

std::string escape_label_value(std::string_view v) {
    std::string out;
    out.reserve(v.size());
    for (char c : v) {
        if (c == '\\') out += "\\\\";
        else if (c == '"') out += "\\\"";
        else if (c == '\n') out += "\\n";
        else out += c;
    }
    return out;
}

namespace {

// Appends the family header, then samples through the returned writer.
class Writer {
public:
    explicit Writer(std::string& out) : out_(out) {}

    void family(std::string_view name, std::string_view type, std::string_view help) {
        name_ = name;
        fmt::format_to(std::back_inserter(out_), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
    }
    // `labels` is already rendered ("" or `a="x",b="y"`); `suffix` extends the family name.
    template <class V>
    void sample(std::string_view labels, V value, std::string_view suffix = "") {
        if (labels.empty()) fmt::format_to(std::back_inserter(out_), "{}{} {}\n", name_, suffix, value);
        else fmt::format_to(std::back_inserter(out_), "{}{}{{{}}} {}\n", name_, suffix, labels, value);
    }

private:
    std::string& out_;
    std::string name_;
};

std::string label(std::string_view k, std::string_view v) { return fmt::format("{}=\"{}\"", k, escape_label_value(v)); }
std::string up_label(const Upstream& u) { return label("upstream", u.name); }
std::string up_label(const Upstream& u, std::string_view k, std::string_view v) {
    return up_label(u) + "," + label(k, v);
}

// Floats as Go's strconv would parse them; never NaN or Inf here.
std::string num(double v) { return fmt::format("{}", v); }

}  // namespace

std::string render_metrics(const Snapshot& s) {
    std::string out;
    out.reserve(4096 + 2048 * s.upstreams.size());
    Writer w(out);
    const auto& ups = s.upstreams;

    w.family("kprism_build_info", "gauge", "Build information; the value is always 1.");
    w.sample(label("version", s.version), 1);

    w.family("kprism_connections_active", "gauge", "Client connections open now.");
    w.sample("", s.connections_active);
    w.family("kprism_connections_accepted_total", "counter", "Client connections accepted.");
    w.sample("", s.stats.accepted);
    w.family("kprism_connections_resumed_total", "counter",
             "Established connections taken over from the previous kprism process at a restart.");
    w.sample("", s.stats.resumed);
    w.family("kprism_crash_copy_connections", "gauge",
             "Established connections in the crash copy in systemd's fd store (keep_on_crash); no sample when it is off.");
    if (s.crash_copy_connections >= 0) w.sample("", static_cast<uint64_t>(s.crash_copy_connections));
    w.family("kprism_connections_rejected_total", "counter", "Client connections reset because max_connections was reached.");
    w.sample("", s.stats.rejected);
    w.family("kprism_client_failures_total", "counter", "Client connections reset because every candidate upstream failed them (or fail-closed refused them).");
    w.sample("", s.stats.client_failures);
    w.family("kprism_connections_replayed_total", "counter", "Client connections moved to another upstream before any answer, their first bytes replayed.");
    w.sample("", s.stats.replayed);
    w.family("kprism_accept_errors_total", "counter", "Failed accepts on the listening sockets (EMFILE and the like).");
    w.sample("", s.stats.accept_errors);

    w.family("kprism_upstream_connections_active", "gauge", "Client connections to the upstream open now, counted from the pick.");
    for (const Upstream* u : ups) w.sample(up_label(*u), u->active);
    w.family("kprism_upstream_connections_total", "counter", "Client connections established to the upstream.");
    for (const Upstream* u : ups) w.sample(up_label(*u), u->total);
    w.family("kprism_upstream_connect_errors_total", "counter", "Passive failures of client connections on the upstream, by reason.");
    for (const Upstream* u : ups)
        for (size_t i = 0; i < kConnectErrors; ++i)
            w.sample(up_label(*u, "reason", connect_error_name(static_cast<ConnectError>(i))), u->connect_errors[i]);
    w.family("kprism_upstream_bytes_total", "counter", "Bytes passed through to and from the upstream.");
    for (const Upstream* u : ups) {
        w.sample(up_label(*u, "direction", "to_upstream"), u->bytes_to_upstream);
        w.sample(up_label(*u, "direction", "from_upstream"), u->bytes_from_upstream);
    }
    w.family("kprism_upstream_source", "gauge", "Where the upstream came from: 1 for its source (static: the configured list; discovered: the EndpointSlices; snapshot: the discovery snapshot read at start), 0 for the others.");
    for (const Upstream* u : ups)
        for (Source src : {Source::configured, Source::discovered, Source::snapshot})
            w.sample(up_label(*u, "source", source_name(src)), u->source == src ? 1 : 0);
    w.family("kprism_upstream_state", "gauge", "Health of the upstream: 1 for its current state, 0 for the others.");
    for (const Upstream* u : ups)
        for (Health h : {Health::up, Health::down, Health::unknown})
            w.sample(up_label(*u, "state", health_name(h)), u->health == h ? 1 : 0);
    w.family("kprism_upstream_down_reason", "gauge", "Why the upstream is down: 1 for its reason (shutdown, etcd, other: the failing /readyz checks; unauthorized, connect, timeout, tls: the check result), 0 for the others; all 0 while it is not down.");
    for (const Upstream* u : ups)
        for (const DownReasonInfo& d : kDownReasonTable)
            w.sample(up_label(*u, "reason", d.name), u->health == Health::down && u->down_reason == d.reason ? 1 : 0);
    w.family("kprism_upstream_close_bursts_total", "counter", "Bursts of established connections the upstream ended itself (3 within 1 s), each starting a check at once.");
    for (const Upstream* u : ups) w.sample(up_label(*u), u->close_bursts);
    w.family("kprism_upstream_transitions_total", "counter", "Health changes of the upstream, by the state it went to.");
    for (const Upstream* u : ups) {
        w.sample(up_label(*u, "to", "up"), u->went_up);
        w.sample(up_label(*u, "to", "down"), u->went_down);
    }
    w.family("kprism_health_checks_total", "counter", "Readiness check results of the upstream (passive failures of client connections count as failed checks).");
    for (const Upstream* u : ups)
        for (const CheckResultInfo& c : kCheckResultTable)
            w.sample(up_label(*u, "result", c.name), u->checks[static_cast<size_t>(c.result)]);
    w.family("kprism_health_check_duration_seconds", "histogram", "Duration of readiness checks, from the TCP connect to the result.");
    for (const Upstream* u : ups) {
        const Histogram& h = u->check_duration;
        uint64_t cumulative = 0;
        for (size_t i = 0; i < Histogram::kBuckets; ++i) {
            cumulative += h.counts[i];
            w.sample(up_label(*u, "le", num(Histogram::kBounds[i])), cumulative, "_bucket");
        }
        w.sample(up_label(*u, "le", "+Inf"), h.count, "_bucket");
        w.sample(up_label(*u), num(h.sum), "_sum");
        w.sample(up_label(*u), h.count, "_count");
    }
    w.family("kprism_upstream_probe_rtt_seconds", "gauge", "Moving average of the readiness checks' TCP connect plus TLS handshake time.");
    for (const Upstream* u : ups)
        if (u->rtt_ms >= 0) w.sample(up_label(*u), num(u->rtt_ms / 1000));
    w.family("kprism_tls_handshakes_total", "counter", "TLS handshakes of the readiness checks, resumed or full.");
    for (const Upstream* u : ups) {
        w.sample(up_label(*u, "resumed", "true"), u->resumed_handshakes);
        w.sample(up_label(*u, "resumed", "false"), u->full_handshakes);
    }
    w.family("kprism_health_checks_reused_connection_total", "counter", "Readiness checks sent on the kept probe connection (the rest opened a new one: kprism_tls_handshakes_total).");
    for (const Upstream* u : ups) w.sample(up_label(*u), u->probes_reused);
    w.family("kprism_health_check_connections_ended_total", "counter", "Kept probe connections the apiserver ended, between probes or as a probe went out (each is followed by a probe on a new connection).");
    for (const Upstream* u : ups) w.sample(up_label(*u), u->probe_connections_ended);

    w.family("kprism_health_checkers", "gauge", "Readiness checkers in memory: one per upstream, plus those of removed upstreams until their sockets and timers have closed.");
    w.sample("", s.health_checkers);

    w.family("kprism_connections_closed_upstream_down_total", "counter", "Established connections closed because their upstream went down.");
    w.sample("", s.stats.closed_for_down);
    w.family("kprism_connections_rebalanced_total", "counter", "Established connections closed by rebalancing to move them off an upstream over its share.");
    w.sample("", s.stats.rebalanced);
    w.family("kprism_fail_open_active", "gauge", "1 during an episode of no upstream up (logged as \"no upstream ready\"; failing open or closed), else 0.");
    w.sample("", s.fail_open ? 1 : 0);
    w.family("kprism_etcd_quorum_lost", "gauge", "1 while every upstream is down for its etcd checks (logged as \"control plane has no etcd quorum\"; nothing is closed for being down), else 0.");
    w.sample("", s.etcd_quorum_lost ? 1 : 0);
    w.family("kprism_fail_open_episodes_total", "counter", "Episodes of no upstream up.");
    w.sample("", s.stats.fail_open_episodes);
    w.family("kprism_config_reloads_total", "counter", "Configuration reloads (SIGHUP), by result.");
    w.sample(label("result", "success"), s.stats.reloads_ok);
    w.sample(label("result", "failure"), s.stats.reloads_failed);
    w.family("kprism_client_certificate_expiry_timestamp_seconds", "gauge", "notAfter of the loaded client certificate of the readiness checks, as a unix time.");
    if (s.client_cert_not_after != 0) w.sample("", s.client_cert_not_after);
    w.family("kprism_client_certificate_remaining_seconds", "gauge", "Seconds until the loaded client certificate's notAfter; negative once it has expired.");
    if (s.client_cert_not_after != 0) w.sample("", s.client_cert_not_after - s.now_unix);
    w.family("kprism_client_certificate_rejected", "gauge", "1 while every apiserver that answers rejects the client certificate (401/403 or a TLS alert; logged as \"client certificate rejected by every apiserver\"), else 0.");
    w.sample("", std::string_view(s.credentials) == "rejected" ? 1 : 0);
    w.family("kprism_discovery_endpoints", "gauge", "Endpoints the EndpointSlices list now, as admitted (ready, an IP, a port); absent while discovery is off.");
    if (s.discovery.enabled) w.sample("", s.discovery.endpoints);
    w.family("kprism_discovery_lists_total", "counter", "Successful lists of the EndpointSlices.");
    if (s.discovery.enabled) w.sample("", s.discovery.lists);
    w.family("kprism_discovery_relists_total", "counter", "Lists after the watch's resource version was too old (410 Gone).");
    if (s.discovery.enabled) w.sample("", s.discovery.relists);
    w.family("kprism_discovery_watch_events_total", "counter", "Watch events read (bookmarks included).");
    if (s.discovery.enabled) w.sample("", s.discovery.events);
    w.family("kprism_discovery_errors_total", "counter", "Failed discovery requests (each followed by a backoff of 1 s to 30 s).");
    if (s.discovery.enabled) w.sample("", s.discovery.errors);
    w.family("kprism_discovery_snapshot_age_seconds", "gauge", "Age of the discovery snapshot kprism last read or wrote; absent when there is none.");
    if (s.discovery.enabled && s.snapshot.written_unix != 0) w.sample("", s.now_unix - s.snapshot.written_unix);
    w.family("kprism_heartbeat_age_seconds", "gauge", "Seconds since the event loop's 1 s heartbeat last ticked.");
    w.sample("", num(s.heartbeat_age_seconds));
    return out;
}

}  // namespace kprism
