// SPDX-License-Identifier: Apache-2.0
// The admin endpoint's other renderings of a StateView (metrics.h): the /status JSON document
// (rendered by the daemon, parsed by `kprism status`) and the /readyz text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kprism/admin/metrics.h"
#include "kprism/upstreams/readyz_body.h"

namespace kprism {

// {"version":..., "pid":N, "ready":bool, "fail_open":bool, "draining":bool, "connections_active":N,
//  "reload":{"generation":N, "ok":N, "failed":N, "last_result":"ok"|"failed"|null, "last_error",
//            "last_changes", "last_unix": seconds|null},
//  "credentials":{"state": "ok"|"rejected"|"unknown", "client_cert": path, "subject": string|null,
//                 "not_after_unix": seconds|null, "remaining_seconds": seconds|null},
//  "upstreams":[{"address", "zone", "state": "up"|"down"|"unknown", "last_result": name|null,
//  "last_error", "last_change_unix": seconds|null, "rtt_ms": number|null, "active_connections",
//  "failing_checks": [names the last /readyz answer failed, at most 8], "failing_checks_more": N,
//  "down_reason": "shutdown"|"etcd"|"other"|"unauthorized"|"connect"|"timeout"|"tls"|null (not down)}],
//  "condition": "no-etcd-quorum" (every upstream down for its etcd checks) | null,
//  "discovery":{"enabled", "state": "off"|"waiting"|"listing"|"watching"|"backoff", "via": upstream|null,
//               "resource_version": string|null, "endpoints", "lists", "relists", "events", "errors",
//               "last_error", "snapshot":{"path", "state": "disabled"|"none"|"loaded"|"ignored"|"written"|"failed",
//               "detail", "written_unix": seconds|null, "age_seconds": seconds|null}}}
// and "source": "static"|"discovered"|"snapshot" in each upstream entry.
// reload.generation counts finished reload attempts (ok + failed); `kprism reload` waits for it to
// move. Strings are valid UTF-8 (invalid bytes from an upstream become U+FFFD).
std::string render_status_json(const StateView& s);

// /readyz: "ok" or why not; verbose adds one line per upstream ("[+]10.0.0.1:6443 up",
// "[-]10.0.0.2:6443 down: not_ready: HTTP 500 ..."). Ready: some upstream is up and kprism is
// not shutting down.
bool state_ready(const StateView& s);
std::string render_readyz(const StateView& s, bool verbose);

// The /status document as `kprism status` reads it.
struct StatusUpstream {
    std::string address, zone, state;
    std::string last_result;  // empty: null (no result yet)
    std::string last_error;
    int64_t last_change_unix = 0;  // 0: null
    double rtt_ms = -1;            // < 0: null
    uint64_t active_connections = 0;
    FailingChecks failing_checks;  // empty when absent
    std::string down_reason;       // empty: null or absent
    std::string source = "static";  // static, discovered, snapshot (absent before discovery, ba1b214: static)
};
// The "discovery" member, as much as `kprism status` prints (absent before discovery, ba1b214).
struct StatusDiscovery {
    bool enabled = false;
    std::string state, via, last_error, snapshot_state;
    uint64_t endpoints = 0;
    bool has_snapshot_age = false;
    int64_t snapshot_age_seconds = 0;
};
struct StatusReload {
    uint64_t generation = 0, ok = 0, failed = 0;
    std::string last_result;  // "ok", "failed"; empty: null (no reload yet)
    std::string last_error;   // why the last one failed (every error, joined with "; ")
    std::string last_changes; // what the last successful one changed ("none", "endpoint_added=...")
    int64_t last_unix = 0;    // 0: null
};
// The client certificate and whether the apiservers accept it (credentials.h). Bounded when
// parsed: strings longer than kMaxStatusCredentialsString are cut, numbers clamped.
struct StatusCredentials {
    std::string state;        // "ok", "rejected", "unknown" (another value is kept as it is)
    std::string client_cert;  // the configured path
    std::string subject;      // empty: null (no certificate loaded)
    int64_t not_after_unix = 0;  // 0: null
    bool has_remaining = false;
    int64_t remaining_seconds = 0;  // negative once expired
};
constexpr size_t kMaxStatusCredentialsString = 1024;
struct StatusDoc {
    std::string version;
    int64_t pid = 0;            // 0: absent (a kprism from before pid and reload were reported)
    bool has_reload = false;    // the "reload" member was there
    StatusReload reload;
    bool ready = false;
    bool fail_open = false;
    std::string condition;  // "no-etcd-quorum"; empty: null or absent
    bool draining = false;
    uint64_t connections_active = 0;
    bool has_credentials = false;  // the "credentials" member was there (absent before 820d3ae)
    StatusCredentials credentials;
    std::vector<StatusUpstream> upstreams;
    StatusDiscovery discovery;
};
// Strict about the members it needs and their types, lenient about extra ones (and about "pid",
// "reload" and "credentials" missing: `kprism reload` checks for those itself). Bounded: see parse_json (json.h).
bool parse_status_json(std::string_view text, StatusDoc& out, std::string& error);

}  // namespace kprism
