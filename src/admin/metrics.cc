// SPDX-License-Identifier: Apache-2.0
// Prometheus text rendering of a StateView, and taking the view from the Server.
#include "kprism/admin/metrics.h"

#include <fmt/format.h>
#include <unistd.h>

#include <ctime>

#include "kprism/daemon/server.h"
#include "kprism/upstreams/tls_context.h"
#include "kprism/base/version.h"

namespace kprism {

size_t StateView::up_count() const {
    size_t n = 0;
    for (const Upstream* u : upstreams) n += u->health == Health::up;
    return n;
}

StateView take_state_view(Server& srv) {
    StateView s;
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
    s.unresolved = srv.control().unresolved_names();
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

// Appends a family's HELP and TYPE lines (from its row in kMetricFamilies), then its samples.
class Writer {
public:
    explicit Writer(std::string& out) : out_(out) {}

    void family(Metric m) {
        const MetricFamily& f = metric_family(m);
        name_ = f.name;
        fmt::format_to(std::back_inserter(out_), "# HELP {} {}\n# TYPE {} {}\n", f.name, f.help, f.name, f.type);
    }
    // A family of one sample without labels.
    template <class V>
    void single(Metric m, V value) {
        family(m);
        sample("", value);
    }
    // `labels` is already rendered ("" or `a="x",b="y"`); `suffix` extends the family name.
    template <class V>
    void sample(std::string_view labels, V value, std::string_view suffix = "") {
        if (labels.empty()) fmt::format_to(std::back_inserter(out_), "{}{} {}\n", name_, suffix, value);
        else fmt::format_to(std::back_inserter(out_), "{}{}{{{}}} {}\n", name_, suffix, labels, value);
    }

private:
    std::string& out_;
    std::string_view name_;  // of the current family (kMetricFamilies)
};

std::string label(std::string_view k, std::string_view v) { return fmt::format("{}=\"{}\"", k, escape_label_value(v)); }
std::string up_label(const Upstream& u) { return label("upstream", u.name); }
std::string up_label(const Upstream& u, std::string_view k, std::string_view v) {
    return up_label(u) + "," + label(k, v);
}

// Floats as Go's strconv would parse them; never NaN or Inf here.
std::string num(double v) { return fmt::format("{}", v); }

}  // namespace

std::string render_metrics(const StateView& s) {
    std::string out;
    out.reserve(4096 + 2048 * s.upstreams.size());
    Writer w(out);
    const auto& ups = s.upstreams;

    w.family(Metric::build_info);
    w.sample(label("version", s.version), 1);

    w.single(Metric::connections_active, s.connections_active);
    w.single(Metric::connections_accepted_total, s.stats.accepted);
    w.single(Metric::connections_resumed_total, s.stats.resumed);
    w.family(Metric::crash_copy_connections);
    if (s.crash_copy_connections >= 0) w.sample("", static_cast<uint64_t>(s.crash_copy_connections));
    w.single(Metric::connections_rejected_total, s.stats.rejected);
    w.single(Metric::client_failures_total, s.stats.client_failures);
    w.single(Metric::connections_replayed_total, s.stats.replayed);
    w.single(Metric::accept_errors_total, s.stats.accept_errors);

    w.family(Metric::upstream_connections_active);
    for (const Upstream* u : ups) w.sample(up_label(*u), u->active);
    w.family(Metric::upstream_connections_total);
    for (const Upstream* u : ups) w.sample(up_label(*u), u->total);
    w.family(Metric::upstream_connect_errors_total);
    for (const Upstream* u : ups)
        for (const ConnectErrorInfo& e : kConnectErrorTable)
            w.sample(up_label(*u, "reason", e.name), u->connect_errors[static_cast<size_t>(e.error)]);
    w.family(Metric::upstream_bytes_total);
    for (const Upstream* u : ups) {
        w.sample(up_label(*u, "direction", "to_upstream"), u->bytes_to_upstream);
        w.sample(up_label(*u, "direction", "from_upstream"), u->bytes_from_upstream);
    }
    w.family(Metric::upstream_source);
    for (const Upstream* u : ups)
        for (Source src : {Source::configured, Source::discovered, Source::snapshot})
            w.sample(up_label(*u, "source", source_name(src)), u->source == src ? 1 : 0);
    w.family(Metric::upstream_state);
    for (const Upstream* u : ups)
        for (Health h : {Health::up, Health::down, Health::unknown})
            w.sample(up_label(*u, "state", health_name(h)), u->health == h ? 1 : 0);
    w.family(Metric::upstream_down_reason);
    for (const Upstream* u : ups)
        for (const DownReasonInfo& d : kDownReasonTable)
            w.sample(up_label(*u, "reason", d.name), u->health == Health::down && u->down_reason == d.reason ? 1 : 0);
    w.family(Metric::upstream_close_bursts_total);
    for (const Upstream* u : ups) w.sample(up_label(*u), u->close_bursts);
    w.family(Metric::upstream_transitions_total);
    for (const Upstream* u : ups) {
        w.sample(up_label(*u, "to", "up"), u->went_up);
        w.sample(up_label(*u, "to", "down"), u->went_down);
    }
    w.family(Metric::health_checks_total);
    for (const Upstream* u : ups)
        for (const CheckResultInfo& c : kCheckResultTable)
            w.sample(up_label(*u, "result", c.name), u->checks[static_cast<size_t>(c.result)]);
    w.family(Metric::health_check_duration_seconds);
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
    w.family(Metric::upstream_probe_rtt_seconds);
    for (const Upstream* u : ups)
        if (u->rtt_ms >= 0) w.sample(up_label(*u), num(u->rtt_ms / 1000));
    w.family(Metric::tls_handshakes_total);
    for (const Upstream* u : ups) {
        w.sample(up_label(*u, "resumed", "true"), u->resumed_handshakes);
        w.sample(up_label(*u, "resumed", "false"), u->full_handshakes);
    }
    w.family(Metric::health_checks_reused_connection_total);
    for (const Upstream* u : ups) w.sample(up_label(*u), u->probes_reused);
    w.family(Metric::health_check_connections_ended_total);
    for (const Upstream* u : ups) w.sample(up_label(*u), u->probe_connections_ended);
    w.family(Metric::health_check_protocol_errors_total);
    for (const Upstream* u : ups) w.sample(up_label(*u), u->probe_protocol_errors);

    w.single(Metric::health_checkers, s.health_checkers);

    w.single(Metric::connections_closed_upstream_down_total, s.stats.closed_for_down);
    w.single(Metric::connections_rebalanced_total, s.stats.rebalanced);
    w.single(Metric::fail_open_active, s.fail_open ? 1 : 0);
    w.single(Metric::etcd_quorum_lost, s.etcd_quorum_lost ? 1 : 0);
    w.single(Metric::fail_open_episodes_total, s.stats.fail_open_episodes);
    w.family(Metric::config_reloads_total);
    w.sample(label("result", "success"), s.stats.reloads_ok);
    w.sample(label("result", "failure"), s.stats.reloads_failed);
    w.family(Metric::client_certificate_expiry_timestamp_seconds);
    if (s.client_cert_not_after != 0) w.sample("", s.client_cert_not_after);
    w.family(Metric::client_certificate_remaining_seconds);
    if (s.client_cert_not_after != 0) w.sample("", s.client_cert_not_after - s.now_unix);
    w.single(Metric::client_certificate_rejected, std::string_view(s.credentials) == "rejected" ? 1 : 0);
    w.family(Metric::discovery_endpoints);
    if (s.discovery.enabled) w.sample("", s.discovery.endpoints);
    w.family(Metric::discovery_lists_total);
    if (s.discovery.enabled) w.sample("", s.discovery.lists);
    w.family(Metric::discovery_relists_total);
    if (s.discovery.enabled) w.sample("", s.discovery.relists);
    w.family(Metric::discovery_watch_events_total);
    if (s.discovery.enabled) w.sample("", s.discovery.events);
    w.family(Metric::discovery_errors_total);
    if (s.discovery.enabled) w.sample("", s.discovery.errors);
    w.family(Metric::discovery_snapshot_age_seconds);
    if (s.discovery.enabled && s.snapshot.written_unix != 0) w.sample("", s.now_unix - s.snapshot.written_unix);
    w.single(Metric::heartbeat_age_seconds, num(s.heartbeat_age_seconds));
    return out;
}

}  // namespace kprism
