// The admin endpoint's views of a Snapshot: the /status JSON document (rendered by the daemon,
// parsed by `kprism status`) and the /readyz text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kprism/metrics.h"

namespace kprism {

// {"version":..., "ready":bool, "fail_open":bool, "draining":bool, "connections_active":N,
//  "upstreams":[{"address", "zone", "state": "up"|"down"|"unknown", "last_result": name|null,
//  "last_error", "last_change_unix": seconds|null, "rtt_ms": number|null, "active_connections"}]}
std::string render_status_json(const Snapshot& s);

// /readyz: "ok" or why not; verbose adds one line per upstream ("[+]10.0.0.1:6443 up",
// "[-]10.0.0.2:6443 down: not_ready: HTTP 500 ..."). Ready: some upstream is up and kprism is
// not shutting down.
bool snapshot_ready(const Snapshot& s);
std::string render_readyz(const Snapshot& s, bool verbose);

// The /status document as `kprism status` reads it.
struct StatusUpstream {
    std::string address, zone, state;
    std::string last_result;  // empty: null (no result yet)
    std::string last_error;
    int64_t last_change_unix = 0;  // 0: null
    double rtt_ms = -1;            // < 0: null
    uint64_t active_connections = 0;
};
struct StatusDoc {
    std::string version;
    bool ready = false;
    bool fail_open = false;
    bool draining = false;
    uint64_t connections_active = 0;
    std::vector<StatusUpstream> upstreams;
};
// Strict about the members it needs and their types, lenient about extra ones.
bool parse_status_json(std::string_view text, StatusDoc& out, std::string& error);

}  // namespace kprism
