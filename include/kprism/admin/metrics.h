// SPDX-License-Identifier: Apache-2.0
// A view of the daemon's counters and state (StateView), and its Prometheus text rendering
// (/metrics). The families rendered are listed in metric_families.h.
//
// The text format is rendered here rather than with prometheus-cpp: that library brings threads and
// an HTTP server of its own, where kprism has one event loop and serves /metrics from it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kprism/admin/metric_families.h"
#include "kprism/daemon/stats.h"
#include "kprism/discovery/discovery.h"
#include "kprism/discovery/membership.h"
#include "kprism/upstreams/upstream.h"

namespace kprism {

class Server;

// What /metrics, /readyz and /status show, gathered in one place. The upstream pointers are valid
// only while the Server is (take, render and drop it within one callback).
struct StateView {
    std::string version;
    int64_t pid = 0;  // the daemon's process id
    Stats stats;
    uint64_t connections_active = 0;
    int64_t crash_copy_connections = -1;  // in the stored crash copy; -1: keep_on_crash off or unavailable
    bool fail_open = false;
    bool etcd_quorum_lost = false;
    uint64_t health_checkers = 0;  // ControlPlane::checkers_allocated()
    bool draining = false;
    int64_t client_cert_not_after = 0;  // unix time; 0: no certificate loaded
    std::string client_cert;            // the configured path
    std::string client_cert_subject;    // of the loaded certificate
    const char* credentials = "unknown";  // credentials_state_name()
    int64_t now_unix = 0;               // when the view was taken
    double heartbeat_age_seconds = 0;
    std::vector<const Upstream*> upstreams;  // configured ones (not those removed by a reload)
    // Hostname endpoints without an address now (ControlPlane::unresolved_names): a row each in
    // /status and /readyz?verbose, none in the metrics.
    std::vector<const Upstream*> unresolved;
    DiscoveryStatus discovery;  // enabled=false when off
    SnapshotStatus snapshot;  // the discovery snapshot file

    size_t up_count() const;
};

// The state of `srv` now (skipping upstreams removed by a reload).
StateView take_state_view(Server& srv);

// Prometheus text exposition format 0.0.4: HELP and TYPE for every family of kMetricFamilies, in
// its order, even one without samples. The family names are an interface: alert rules are
// written against them.
std::string render_metrics(const StateView& s);
constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

// A label value escaped for the text format: backslash, double quote and newline.
std::string escape_label_value(std::string_view v);

}  // namespace kprism
