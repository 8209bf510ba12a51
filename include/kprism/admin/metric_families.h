// SPDX-License-Identifier: Apache-2.0
// The metric families of /metrics: name, type and help text of each, in the order rendered.
//
// kMetricFamilies is the one list: render_metrics() writes each family's HELP and TYPE from its
// row (by Metric), the unit tests compare /metrics and tests/monitoring/metric-families.txt with
// it, and tests/packaging/doc_drift.sh compares kprism(8) with it. The family names are an
// interface: alerting rules and dashboards are written against them. A new family gets a Metric
// value and a row at the place /metrics renders it; each row starts on one line as
// `{Metric::x, "kprism_x", "type",` (doc_drift.sh reads the names and types from there).
// Static data: the strings live for the whole program.
#pragma once

#include <cstddef>
#include <iterator>
#include <string_view>

#include "kprism/base/enum_table.h"

namespace kprism {

// One value per family, in rendering order.
enum class Metric : size_t {
    build_info, connections_active, connections_accepted_total, connections_resumed_total,
    crash_copy_connections, connections_rejected_total, client_failures_total, connections_replayed_total,
    accept_errors_total, upstream_connections_active, upstream_connections_total,
    upstream_connect_errors_total, upstream_bytes_total, upstream_source, upstream_state, upstream_down_reason,
    upstream_close_bursts_total, upstream_transitions_total, health_checks_total,
    health_check_duration_seconds, upstream_probe_rtt_seconds, tls_handshakes_total,
    health_checks_reused_connection_total, health_check_connections_ended_total,
    health_check_protocol_errors_total, health_checkers,
    connections_closed_upstream_down_total, connections_rebalanced_total, fail_open_active, etcd_quorum_lost,
    fail_open_episodes_total, config_reloads_total, client_certificate_expiry_timestamp_seconds,
    client_certificate_remaining_seconds, client_certificate_rejected, discovery_endpoints,
    discovery_lists_total, discovery_relists_total, discovery_watch_events_total, discovery_errors_total,
    discovery_snapshot_age_seconds, heartbeat_age_seconds, last = heartbeat_age_seconds,
};

struct MetricFamily {
    Metric metric;
    std::string_view name;  // kprism_...; a counter's ends in _total, no other's does
    std::string_view type;  // gauge, counter or histogram (Prometheus text format 0.0.4)
    std::string_view help;  // the # HELP text
};

inline constexpr MetricFamily kMetricFamilies[] = {
    {Metric::build_info, "kprism_build_info", "gauge",
     "Build information; the value is always 1."},
    {Metric::connections_active, "kprism_connections_active", "gauge",
     "Client connections open now."},
    {Metric::connections_accepted_total, "kprism_connections_accepted_total", "counter",
     "Client connections accepted."},
    {Metric::connections_resumed_total, "kprism_connections_resumed_total", "counter",
     "Established connections taken over from the previous kprism process at a restart."},
    {Metric::crash_copy_connections, "kprism_crash_copy_connections", "gauge",
     "Established connections in the crash copy in systemd's fd store (keep_on_crash); no sample when it is off."},
    {Metric::connections_rejected_total, "kprism_connections_rejected_total", "counter",
     "Client connections reset because max_connections was reached."},
    {Metric::client_failures_total, "kprism_client_failures_total", "counter",
     "Client connections reset because every candidate upstream failed them (or fail-closed refused them)."},
    {Metric::connections_replayed_total, "kprism_connections_replayed_total", "counter",
     "Client connections moved to another upstream before any answer, their first bytes replayed."},
    {Metric::accept_errors_total, "kprism_accept_errors_total", "counter",
     "Failed accepts on the listening sockets (EMFILE and the like)."},
    {Metric::upstream_connections_active, "kprism_upstream_connections_active", "gauge",
     "Client connections to the upstream open now, counted from the pick."},
    {Metric::upstream_connections_total, "kprism_upstream_connections_total", "counter",
     "Client connections established to the upstream."},
    {Metric::upstream_connect_errors_total, "kprism_upstream_connect_errors_total", "counter",
     "Passive failures of client connections on the upstream, by reason."},
    {Metric::upstream_bytes_total, "kprism_upstream_bytes_total", "counter",
     "Bytes passed through to and from the upstream."},
    {Metric::upstream_source, "kprism_upstream_source", "gauge",
     "Where the upstream came from: 1 for its source (static: the configured list; discovered: the EndpointSlices; snapshot: the discovery snapshot read at start), 0 for the others."},
    {Metric::upstream_state, "kprism_upstream_state", "gauge",
     "Health of the upstream: 1 for its current state, 0 for the others."},
    {Metric::upstream_down_reason, "kprism_upstream_down_reason", "gauge",
     "Why the upstream is down: 1 for its reason (shutdown, etcd, other: the failing /readyz checks; unauthorized, connect, timeout, tls: the check result), 0 for the others; all 0 while it is not down."},
    {Metric::upstream_close_bursts_total, "kprism_upstream_close_bursts_total", "counter",
     "Bursts of established connections the upstream ended itself (3 within 1 s), each starting a check at once."},
    {Metric::upstream_transitions_total, "kprism_upstream_transitions_total", "counter",
     "Health changes of the upstream, by the state it went to."},
    {Metric::health_checks_total, "kprism_health_checks_total", "counter",
     "Readiness check results of the upstream (passive failures of client connections count as failed checks)."},
    {Metric::health_check_duration_seconds, "kprism_health_check_duration_seconds", "histogram",
     "Duration of readiness checks, from the TCP connect to the result."},
    {Metric::upstream_probe_rtt_seconds, "kprism_upstream_probe_rtt_seconds", "gauge",
     "Moving average of the readiness checks' TCP connect plus TLS handshake time."},
    {Metric::tls_handshakes_total, "kprism_tls_handshakes_total", "counter",
     "TLS handshakes of the readiness checks, resumed or full."},
    {Metric::health_checks_reused_connection_total, "kprism_health_checks_reused_connection_total", "counter",
     "Readiness checks sent on the kept probe connection (the rest opened a new one: kprism_tls_handshakes_total)."},
    {Metric::health_check_connections_ended_total, "kprism_health_check_connections_ended_total", "counter",
     "Kept probe connections the apiserver ended, between probes or as a probe went out (each is followed by a probe on a new connection)."},
    {Metric::health_check_protocol_errors_total, "kprism_health_check_protocol_errors_total", "counter",
     "Probe connections closed because the apiserver sent more than its answer: bytes after it, or between probes (the answer still counted)."},
    {Metric::health_checkers, "kprism_health_checkers", "gauge",
     "Readiness checkers in memory: one per upstream, plus those of removed upstreams until their sockets and timers have closed."},
    {Metric::connections_closed_upstream_down_total, "kprism_connections_closed_upstream_down_total", "counter",
     "Established connections closed because their upstream went down."},
    {Metric::connections_rebalanced_total, "kprism_connections_rebalanced_total", "counter",
     "Established connections closed by rebalancing to move them off an upstream over its share."},
    {Metric::fail_open_active, "kprism_fail_open_active", "gauge",
     "1 during an episode of no upstream up (logged as \"no upstream ready\"; failing open or closed), else 0."},
    {Metric::etcd_quorum_lost, "kprism_etcd_quorum_lost", "gauge",
     "1 while every upstream is down for its etcd checks (logged as \"control plane has no etcd quorum\"; nothing is closed for being down), else 0."},
    {Metric::fail_open_episodes_total, "kprism_fail_open_episodes_total", "counter",
     "Episodes of no upstream up."},
    {Metric::config_reloads_total, "kprism_config_reloads_total", "counter",
     "Configuration reloads (SIGHUP), by result."},
    {Metric::client_certificate_expiry_timestamp_seconds, "kprism_client_certificate_expiry_timestamp_seconds", "gauge",
     "notAfter of the loaded client certificate of the readiness checks, as a unix time."},
    {Metric::client_certificate_remaining_seconds, "kprism_client_certificate_remaining_seconds", "gauge",
     "Seconds until the loaded client certificate's notAfter; negative once it has expired."},
    {Metric::client_certificate_rejected, "kprism_client_certificate_rejected", "gauge",
     "1 while every apiserver that answers rejects the client certificate (401/403 or a TLS alert; logged as \"client certificate rejected by every apiserver\"), else 0."},
    {Metric::discovery_endpoints, "kprism_discovery_endpoints", "gauge",
     "Endpoints the EndpointSlices list now, as admitted (ready, an IP, a port); absent while discovery is off."},
    {Metric::discovery_lists_total, "kprism_discovery_lists_total", "counter",
     "Successful lists of the EndpointSlices."},
    {Metric::discovery_relists_total, "kprism_discovery_relists_total", "counter",
     "Lists after the watch's resource version was too old (410 Gone)."},
    {Metric::discovery_watch_events_total, "kprism_discovery_watch_events_total", "counter",
     "Watch events read (bookmarks included)."},
    {Metric::discovery_errors_total, "kprism_discovery_errors_total", "counter",
     "Failed discovery requests (each followed by a backoff of 1 s to 30 s)."},
    {Metric::discovery_snapshot_age_seconds, "kprism_discovery_snapshot_age_seconds", "gauge",
     "Age of the discovery snapshot kprism last read or wrote; absent when there is none."},
    {Metric::heartbeat_age_seconds, "kprism_heartbeat_age_seconds", "gauge",
     "Seconds since the event loop's 1 s heartbeat last ticked."},
};
inline constexpr size_t kMetricFamilyCount = std::size(kMetricFamilies);

static_assert(is_enum_table<&MetricFamily::metric>(kMetricFamilies), "kMetricFamilies: a row per Metric, in order");
consteval bool metric_families_well_formed() {
    for (size_t i = 0; i < kMetricFamilyCount; ++i) {
        const MetricFamily& f = kMetricFamilies[i];
        if (!f.name.starts_with("kprism_") || f.help.empty()) return false;
        if (f.type != "gauge" && f.type != "counter" && f.type != "histogram") return false;
        if ((f.type == "counter") != f.name.ends_with("_total")) return false;
        for (size_t j = 0; j < i; ++j)
            if (kMetricFamilies[j].name == f.name) return false;  // each name once
    }
    return true;
}
static_assert(metric_families_well_formed(),
              "kMetricFamilies: kprism_ names each once, a known type, _total on counters "
              "and only on them, help text");

constexpr const MetricFamily& metric_family(Metric m) { return kMetricFamilies[static_cast<size_t>(m)]; }

}  // namespace kprism
