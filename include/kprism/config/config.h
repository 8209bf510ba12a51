// SPDX-License-Identifier: Apache-2.0
// Configuration: one declarative schema, read from TOML and flags, validated whole, immutable after.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kprism/base/address.h"
#include "kprism/base/address_rules.h"
#include "kprism/base/duration.h"
#include "kprism/base/log.h"

namespace kprism {

// Raw settings as written by the user, one member per schema option (see kOptions in config.cc).
// Per-endpoint extras, only from the TOML inline-table form {address = ..., zone = ..., server_name = ...}.
struct EndpointMeta {
    std::string zone;
    std::string server_name;
    bool operator==(const EndpointMeta&) const = default;
};

struct Settings {
    std::vector<std::string> endpoints;
    std::map<std::string, EndpointMeta> endpoint_meta;  // keyed by the endpoint string
    std::vector<std::string> bind_address{"127.0.0.1"};
    int64_t bind_port = 7445;
    bool allow_non_loopback = false;
    std::string health_bind_address = "127.0.0.1";
    int64_t health_port = 7446;
    Duration health_interval{5000};
    Duration health_timeout{3000};
    Duration health_fast_interval{1000};
    int64_t health_rise = 2;
    int64_t health_fall = 2;
    std::string health_path = "/readyz";
    std::string client_cert = "/var/lib/kubelet/pki/kubelet-client-current.pem";
    std::string client_key = "/var/lib/kubelet/pki/kubelet-client-current.pem";
    std::string ca_file = "/etc/kubernetes/pki/ca.crt";
    std::string server_name;  // SNI and name to verify; empty: the endpoint's host
    bool health_tls_resumption = true;
    Duration health_new_connection_interval{30000};  // 0: every probe on a new connection
    std::string policy = "random";
    std::string zone;  // this node's zone; upstreams in it are preferred while any is ready
    std::string fail_mode = "fail-open";
    Duration first_response_timeout{2000};
    bool close_on_down = true;
    Duration close_spread{1000};
    Duration connect_timeout{2000};
    Duration drain_timeout{30000};
    bool keep_on_crash = true;  // a standing copy of the connections in systemd's fd store (handoff/crash_copy.cc)
    int64_t max_connections = 10000;
    Duration resolve_interval{30000};
    bool rebalance = true;  // move connections off upstreams over their share (rebalancer.h)
    Duration rebalance_interval{15000};
    int64_t rebalance_max_per_minute = 6;
    Duration rebalance_window{30000};
    Duration rebalance_min_age{60000};
    bool discovery_enabled = false;  // EndpointSlice discovery (discovery.h)
    std::string discovery_snapshot_file = "/var/lib/kprism/discovery.json";
    Duration discovery_snapshot_max_age{168LL * 3600 * 1000};
    std::vector<std::string> discovery_allowed_cidrs;  // empty: every address outside the refused ranges
    bool tcp_nodelay = true;
    Duration tcp_keepalive{30000};  // idle time before probes; 0 disables keepalive
    Duration tcp_keepalive_interval{10000};
    int64_t tcp_keepalive_count = 3;
    Duration tcp_user_timeout{30000};  // 0 leaves the kernel default
    std::string log_level = "info";
    std::string log_format = "logfmt";
};

using SettingField = std::variant<std::string Settings::*, bool Settings::*, int64_t Settings::*, Duration Settings::*,
                                  std::vector<std::string> Settings::*>;

// One configurable setting: its TOML key, its flag, its type (via the member), bounds and docs.
struct OptionDef {
    const char* key;   // dotted TOML path, e.g. "health.interval"
    const char* flag;  // long flag without dashes, e.g. "health-interval"
    SettingField field;
    const char* help;
    int64_t min = 0;  // for integers (value) and durations (milliseconds)
    int64_t max = INT64_MAX;
    std::vector<const char*> choices{};  // for strings with a fixed set of values
    // Applied by a reload (SIGHUP); when false, a changed value is logged and waits for a restart.
    bool reloadable = true;
};

const std::vector<OptionDef>& options();

struct Endpoint {
    HostPort addr;
    std::string zone;
    // TLS server name (SNI, and the name verified in the apiserver's certificate): the endpoint's
    // own server_name, else health.server_name; empty: the endpoint's host (Upstream::tls_name()).
    std::string server_name;
    std::string origin;  // where it was configured, for error messages
};

// The settings with a fixed set of values, decided once by validation; nothing compares their
// strings afterwards.
enum class FailMode { open, closed };
enum class PolicyKind { random, least_connections, latency };
// The policy names of the configuration ("random", "least-connections", "latency").
const char* policy_name(PolicyKind kind);
bool parse_policy(std::string_view name, PolicyKind& out);

// Upstream slots: configured endpoints plus removed ones still draining (validation allows as
// many endpoints; a connection remembers the ones it tried in a 64-bit mask, proxy/selection.h).
constexpr size_t kMaxUpstreams = 64;
// Of those, at most this many come from discovery (discovery/discovery.h).
constexpr size_t kMaxDiscovered = 32;
// Addresses of one hostname endpoint, each an upstream (in address order, the rest left out;
// upstreams/control_plane.h); all of them together still share the kMaxUpstreams slots.
constexpr size_t kMaxNameAddresses = 16;
// Addresses read from one DNS answer before the refused ones are skipped and kMaxNameAddresses is
// applied (a TCP answer can carry thousands; those past this are dropped unread).
constexpr size_t kMaxNameAnswer = 256;
// The largest configuration file read (the example, every key with its comment, is 8 KiB).
// A larger one is refused unread past this, with an error naming the limit: the file is read
// and parsed on the event loop at a reload, and a dump written to the wrong path must not stall
// the splice, the checks and /healthz (or grow the daemon by its size).
constexpr size_t kMaxConfigFileBytes = 64 * 1024;
// A list setting (endpoints, bind_address, discovery.allowed_cidrs) longer than this is refused
// whole, its entries unread; each list has its own, lower, limit where one applies (kMaxUpstreams).
constexpr size_t kMaxListEntries = 256;
// Errors reported for one configuration, the rest counted in one more line.
constexpr size_t kMaxConfigErrors = 20;

// Validated configuration. Built only by load_config(); never modified afterwards.
struct Config {
    Settings s;
    FailMode fail_mode = FailMode::open;             // s.fail_mode
    PolicyKind policy = PolicyKind::random;          // s.policy
    log::Level log_level = log::Level::info;         // s.log_level
    log::Format log_format = log::Format::logfmt;    // s.log_format
    std::vector<Endpoint> endpoints;
    std::vector<sockaddr_storage> listen;     // bind_address x bind_port
    sockaddr_storage admin{};                 // health_bind_address:health_port
    std::string config_file;                  // empty when none
    std::map<std::string, std::string> origin;  // option key -> "file:line", "flag", or absent (default)
};

// What the configuration says kprism listens on (bind_address x bind_port, the admin address; a
// "::" one taken as also accepting IPv4), for validation before anything is bound. The running
// daemon asks its bound sockets instead (Server::own_listeners): systemd's, or handed over.
OwnListeners configured_listeners(const Config& c);

// The networks of s.discovery_allowed_cidrs, parsed where they are used so that nothing derived
// can disagree with the setting in force (validation has parsed each one already).
std::vector<Cidr> discovery_allowed(const Config& c);

// Reload: the settings a reload cannot apply (OptionDef::reloadable), and the values derived from
// them, keep those of `running`; a change to one is logged and waits for the next restart.
void keep_restart_only_settings(const Config& running, Config& next);

// status: ask a running kprism for its upstreams (status_cmd.h); reads health.* only, no validation.
// reload: make a running kprism re-read its file and report the outcome (reload_cmd.h); the same.
enum class Command { run, check, status, reload, version, help };

struct CommandLine {
    Command command = Command::run;
    std::string config_file;
    // flag name -> value, in the order given; applied over the file
    std::vector<std::pair<const OptionDef*, std::string>> flags;
    // `kprism reload` only: --pid (the daemon's pid must be this one; 0: not given) and --timeout
    // (how long to wait for the outcome).
    int64_t reload_pid = 0;
    Duration reload_timeout{30000};
};

// Parses argv. Returns false with one message per error in `errors`.
bool parse_command_line(int argc, const char* const* argv, CommandLine& out, std::vector<std::string>& errors);

// Loads the TOML file (if any), applies flags over it and validates the whole. Each error is one
// line naming the file and line (or the flag), the key and the bad value.
bool load_config(const CommandLine& cl, Config& out, std::vector<std::string>& errors);

// Parses TOML text (exposed for tests; `name` stands in for the file name in messages).
bool load_config_text(std::string_view toml_text, std::string_view name, const CommandLine& cl, Config& out,
                      std::vector<std::string>& errors);

// The effective configuration as TOML, each value commented with where it came from.
std::string render_config(const Config& c);

std::string usage_text();

// Edit distance, for "did you mean" hints.
size_t edit_distance(std::string_view a, std::string_view b);

}  // namespace kprism
