// SPDX-License-Identifier: Apache-2.0
// Configuration schema, TOML and flag parsing, whole-config validation and rendering.
#include "kprism/config/config.h"

#include <fmt/format.h>

#include "kprism/config/toml_compat.h"

#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <set>
#include <sstream>

#include "kprism/base/address_rules.h"
#include "kprism/base/log.h"
#include "kprism/base/version.h"

namespace kprism {


using S = Settings;
constexpr int64_t kSec = 1000;
constexpr bool kRestart = false;  // OptionDef::reloadable

const std::vector<OptionDef>& options() {
    static const std::vector<OptionDef> defs = {
        {"endpoints", "endpoints", &S::endpoints, "kube-apiserver endpoints, host:port (IPv6 as [addr]:port)"},
        {"bind_address", "bind-address", &S::bind_address, "addresses to listen on (loopback unless allow_non_loopback)"},
        {"bind_port", "bind-port", &S::bind_port, "port to listen on", 1, 65535},
        {"allow_non_loopback", "allow-non-loopback", &S::allow_non_loopback,
         "permit listening on non-loopback addresses (exposes the API port)"},
        {"policy", "policy", &S::policy, "upstream selection policy among ready upstreams", 0, 0,
         {"random", "least-connections", "latency"}},
        {"zone", "zone", &S::zone, "this node's zone: prefer ready upstreams with the same zone"},
        {"fail_mode", "fail-mode", &S::fail_mode,
         "no upstream ready: fail-open tries every endpoint, fail-closed refuses", 0, 0, {"fail-open", "fail-closed"}},
        {"first_response_timeout", "first-response-timeout", &S::first_response_timeout,
         "move a new connection to another upstream when it sends nothing this long after the client's first "
         "bytes (0: off)",
         0, 60 * kSec},
        {"close_on_down", "close-on-down", &S::close_on_down,
         "close established connections to an upstream that goes down"},
        {"close_spread", "close-spread", &S::close_spread, "spread those closes over this window", 0, 60 * kSec},
        {"connect_timeout", "connect-timeout", &S::connect_timeout, "upstream TCP connect timeout", 1, 60 * kSec},
        {"drain_timeout", "drain-timeout", &S::drain_timeout,
         "on SIGTERM, how long established connections may finish", 0, 3600 * kSec},
        {"keep_on_crash", "keep-on-crash", &S::keep_on_crash,
         "under systemd with a file descriptor store, keep a copy of the established connections there, so the "
         "process started after a crash resumes them",
         0, INT64_MAX, {}, kRestart},
        {"max_connections", "max-connections", &S::max_connections, "client connections held at once", 1, 1000000},
        {"resolve_interval", "resolve-interval", &S::resolve_interval, "how often hostname endpoints are re-resolved",
         1 * kSec, 3600 * kSec},
        {"rebalance.enabled", "rebalance", &S::rebalance,
         "move the oldest connections off upstreams holding more than their share (an apiserver that came back)"},
        {"rebalance.interval", "rebalance-interval", &S::rebalance_interval,
         "how often the shares are compared (each tick jittered by a tenth)", 1 * kSec, 3600 * kSec},
        {"rebalance.max_per_minute", "rebalance-max-per-minute", &S::rebalance_max_per_minute,
         "at most this many connections moved a minute", 1, 10000},
        {"rebalance.window", "rebalance-window", &S::rebalance_window,
         "each move closes its connection at a random moment inside this window", 0, 600 * kSec},
        {"rebalance.min_age", "rebalance-min-age", &S::rebalance_min_age,
         "only connections at least this old are moved", 0, 86400 * kSec},
        {"discovery.enabled", "enable-discovery", &S::discovery_enabled,
         "also use the apiservers the default/kubernetes EndpointSlices list (the static endpoints stay the floor)",
         0, INT64_MAX, {}, kRestart},
        {"discovery.snapshot_file", "discovery-snapshot-file", &S::discovery_snapshot_file,
         "where the discovered endpoints are kept across restarts (empty: nowhere)", 0, INT64_MAX, {}, kRestart},
        {"discovery.snapshot_max_age", "discovery-snapshot-max-age", &S::discovery_snapshot_max_age,
         "a snapshot older than this is ignored at start", 60 * kSec, 4320 * 3600 * kSec, {}, kRestart},
        {"discovery.allowed_cidrs", "discovery-allowed-cidrs", &S::discovery_allowed_cidrs,
         "admit only discovered (and snapshot) addresses in these CIDRs (empty: any but loopback, 0.0.0.0/8, ::, "
         "link-local, multicast and broadcast)",
         0, INT64_MAX, {}, kRestart},
        {"health.bind_address", "health-bind-address", &S::health_bind_address, "address of the admin/health HTTP port",
         0, INT64_MAX, {}, kRestart},
        {"health.port", "health-port", &S::health_port, "admin/health HTTP port", 1, 65535, {}, kRestart},
        {"health.interval", "health-interval", &S::health_interval, "time between upstream health checks", 100,
         3600 * kSec},
        {"health.timeout", "health-timeout", &S::health_timeout,
         "time limit of one health check (connect, TLS handshake and response)", 10, 3600 * kSec},
        {"health.fast_interval", "health-fast-interval", &S::health_fast_interval,
         "time between checks while an upstream is changing state", 100, 3600 * kSec},
        {"health.rise", "health-rise", &S::health_rise, "consecutive ready checks to bring a down upstream up", 1, 100},
        {"health.fall", "health-fall", &S::health_fall,
         "consecutive failed checks to take an upstream down (an HTTP 5xx from readyz takes it down at once)", 1, 100},
        {"health.path", "health-path", &S::health_path, "HTTP path of the readiness check"},
        {"health.client_cert", "client-cert", &S::client_cert,
         "client certificate (PEM) for the readiness check; kubelet's, re-read when it changes"},
        {"health.client_key", "client-key", &S::client_key, "private key (PEM) of the client certificate"},
        {"health.ca_file", "ca-file", &S::ca_file, "CA bundle that signed the apiservers' serving certificates"},
        {"health.server_name", "server-name", &S::server_name,
         "TLS server name (SNI) and the name verified in the apiserver's certificate; default: the endpoint's host"},
        {"health.tls_resumption", "health-tls-resumption", &S::health_tls_resumption,
         "resume TLS sessions between probes (a resumed probe costs the apiserver no full handshake)"},
        {"health.new_connection_interval", "health-new-connection-interval", &S::health_new_connection_interval,
         "probes reuse one kept connection and open a new one at least this often (0: a new connection each probe)",
         0, 86400 * kSec},
        {"tcp.nodelay", "tcp-nodelay", &S::tcp_nodelay, "set TCP_NODELAY on both sides"},
        {"tcp.keepalive", "tcp-keepalive", &S::tcp_keepalive, "idle time before TCP keepalive probes (0: off)", 0,
         7200 * kSec},
        {"tcp.keepalive_interval", "tcp-keepalive-interval", &S::tcp_keepalive_interval,
         "time between TCP keepalive probes", 1 * kSec, 3600 * kSec},
        {"tcp.keepalive_count", "tcp-keepalive-count", &S::tcp_keepalive_count,
         "unanswered keepalive probes before the connection drops", 1, 127},
        {"tcp.user_timeout", "tcp-user-timeout", &S::tcp_user_timeout,
         "TCP_USER_TIMEOUT: unacknowledged data drops the connection after this (0: kernel default)", 0,
         3600 * kSec},
        {"log.level", "log-level", &S::log_level, "log level", 0, 0, {"debug", "info", "warn", "error"}},
        {"log.format", "log-format", &S::log_format, "log format", 0, 0, {"logfmt", "json"}},
    };
    return defs;
}

size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
        cur[0] = i;
        for (size_t j = 1; j <= b.size(); ++j)
            cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
        std::swap(prev, cur);
    }
    return prev[b.size()];
}

namespace {

template <class Name>
std::string did_you_mean(std::string_view given, Name name) {
    std::string best;
    size_t best_d = SIZE_MAX;
    for (const auto& o : options()) {
        std::string cand = name(o);
        size_t d = edit_distance(given, cand);
        if (d < best_d) {
            best_d = d;
            best = cand;
        }
    }
    if (best_d <= std::max<size_t>(2, given.size() / 3)) return fmt::format(" (did you mean '{}'?)", best);
    return "";
}

const OptionDef* find_key(std::string_view key) {
    for (const auto& o : options())
        if (key == o.key) return &o;
    return nullptr;
}

const OptionDef* find_flag(std::string_view flag) {
    for (const auto& o : options())
        if (flag == o.flag) return &o;
    return nullptr;
}

bool is_section(std::string_view prefix) {
    for (const auto& o : options()) {
        std::string_view k = o.key;
        if (k.size() > prefix.size() && k.substr(0, prefix.size()) == prefix && k[prefix.size()] == '.') return true;
    }
    return false;
}

std::string trim(std::string_view s) {
    size_t b = 0, e = s.size();
    while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
    while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
    return std::string(s.substr(b, e - b));
}

std::vector<std::string> split_list(std::string_view s) {
    std::vector<std::string> out;
    size_t start = 0;
    while (start <= s.size()) {
        size_t comma = s.find(',', start);
        if (comma == std::string_view::npos) comma = s.size();
        std::string item = trim(s.substr(start, comma - start));
        if (!item.empty()) out.push_back(item);
        start = comma + 1;
    }
    return out;
}

// Text for a TOML comment (a file name in the origin comments of render_config()): TOML wants
// valid UTF-8 without control characters there, or the printed configuration does not load again
// (a --config path with a newline or a byte such as 0xff; found by tests/fuzz/config_fuzz.cc).
// Each byte that is neither is printed as '?'.
std::string comment_text(std::string_view v) {
    std::string out;
    for (size_t i = 0; i < v.size();) {
        auto c = static_cast<unsigned char>(v[i]);
        size_t n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
        uint32_t cp = n == 1 ? c : n ? c & (0x7f >> n) : 0;
        bool ok = n > 0 && i + n <= v.size();
        for (size_t k = 1; ok && k < n; ++k) {
            auto d = static_cast<unsigned char>(v[i + k]);
            ok = (d & 0xc0) == 0x80;
            cp = cp << 6 | (d & 0x3f);
        }
        ok = ok && !(n == 2 && cp < 0x80) && !(n == 3 && cp < 0x800) && !(n == 4 && (cp < 0x10000 || cp > 0x10ffff)) &&
             !(cp >= 0xd800 && cp <= 0xdfff) && !(cp < 0x20 && cp != '\t') && cp != 0x7f;
        if (ok) {
            out.append(v.substr(i, n));
            i += n;
        } else {
            out += '?';
            ++i;
        }
    }
    return out;
}

std::string quote(std::string_view v) {
    std::string out = "\"";
    for (char c : v) {
        if (c == '"' || c == '\\') out += '\\';
        // DEL too: TOML forbids it unescaped, and `kprism check` must print a file that loads again
        // (found by the round trip in tests/fuzz/config_fuzz.cc).
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
            out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
            continue;
        }
        out += c;
    }
    return out + "\"";
}

bool bool_from_text(std::string_view v, bool& out) {
    if (v == "true" || v == "1" || v == "yes" || v == "on") out = true;
    else if (v == "false" || v == "0" || v == "no" || v == "off") out = false;
    else return false;
    return true;
}

// Applies a textual value (from a flag, or a TOML string) to a setting. `where` prefixes errors.
bool apply_text(Settings& s, const OptionDef& o, std::string_view v, std::string& err) {
    return std::visit(
        [&](auto member) -> bool {
            using T = std::remove_reference_t<decltype(s.*member)>;
            if constexpr (std::is_same_v<T, std::string>) {
                if (!o.choices.empty() &&
                    std::none_of(o.choices.begin(), o.choices.end(), [&](const char* c) { return v == c; })) {
                    std::string list;
                    for (const char* c : o.choices) list += (list.empty() ? "" : ", ") + std::string(c);
                    err = fmt::format("invalid value {} (want one of: {})", quote(v), list);
                    return false;
                }
                s.*member = std::string(v);
            } else if constexpr (std::is_same_v<T, bool>) {
                if (!bool_from_text(v, s.*member)) {
                    err = fmt::format("invalid value {} (want true or false)", quote(v));
                    return false;
                }
            } else if constexpr (std::is_same_v<T, int64_t>) {
                int64_t n = 0;
                bool ok = !v.empty();
                for (char c : v) ok = ok && c >= '0' && c <= '9';
                if (!ok) {
                    err = fmt::format("invalid value {} (want a whole number)", quote(v));
                    return false;
                }
                if (v.size() > 18) {  // more digits than any bound has: out of range, not "not a number"
                    err = fmt::format("{} out of range {}-{}", v, o.min, o.max);
                    return false;
                }
                n = std::stoll(std::string(v));
                if (n < o.min || n > o.max) {
                    err = fmt::format("{} out of range {}-{}", n, o.min, o.max);
                    return false;
                }
                s.*member = n;
            } else if constexpr (std::is_same_v<T, Duration>) {
                std::string derr;
                auto d = parse_duration(v, &derr);
                if (!d) {
                    err = derr;
                    return false;
                }
                if (d->count() < o.min || d->count() > o.max) {
                    err = fmt::format("{} out of range {}-{}", quote(v), format_duration(Duration{o.min}),
                                      format_duration(Duration{o.max}));
                    return false;
                }
                s.*member = *d;
            } else {
                s.*member = split_list(v);
            }
            return true;
        },
        o.field);
}

const char* type_name(const OptionDef& o) {
    return std::visit(
        [](auto member) -> const char* {
            using T = std::remove_reference_t<decltype(std::declval<Settings&>().*member)>;
            if constexpr (std::is_same_v<T, std::string>) return "a string";
            else if constexpr (std::is_same_v<T, bool>) return "true or false";
            else if constexpr (std::is_same_v<T, int64_t>) return "an integer";
            else if constexpr (std::is_same_v<T, Duration>) return "a duration string such as \"5s\"";
            else return "an array of strings";
        },
        o.field);
}

// One endpoint in inline-table form: { address = "10.0.0.1:6443", zone = "a", server_name = "x" }.
bool endpoint_table(Settings& s, const toml::table& t, std::vector<std::string>& items, std::string& err) {
    std::string address;
    EndpointMeta meta;
    for (auto&& [k, v] : t) {
        std::string_view key = k.str();
        std::string* dst = key == "address" ? &address : key == "zone" ? &meta.zone
                           : key == "server_name"       ? &meta.server_name
                                                        : nullptr;
        if (!dst) {
            err = fmt::format("unknown endpoint field '{}' (fields: address, zone, server_name)", key);
            return false;
        }
        if (!v.is_string()) {
            err = fmt::format("endpoint field '{}' wants a string", key);
            return false;
        }
        *dst = trim(v.as_string()->get());
    }
    if (address.empty()) {
        err = "endpoint table without address";
        return false;
    }
    items.push_back(address);
    if (!meta.zone.empty() || !meta.server_name.empty()) s.endpoint_meta[address] = meta;
    return true;
}

// Applies one TOML value, checking its TOML type against the option's.
bool apply_node(Settings& s, const OptionDef& o, const toml::node& n, std::string& err) {
    return std::visit(
        [&](auto member) -> bool {
            using T = std::remove_reference_t<decltype(s.*member)>;
            if constexpr (std::is_same_v<T, bool>) {
                if (!n.is_boolean()) return err = fmt::format("want {}", type_name(o)), false;
                s.*member = n.as_boolean()->get();
                return true;
            } else if constexpr (std::is_same_v<T, int64_t>) {
                if (!n.is_integer()) return err = fmt::format("want {}", type_name(o)), false;
                int64_t v = n.as_integer()->get();
                if (v < o.min || v > o.max) return err = fmt::format("{} out of range {}-{}", v, o.min, o.max), false;
                s.*member = v;
                return true;
            } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
                std::vector<std::string> items;
                if (n.is_string()) {
                    items = split_list(n.as_string()->get());
                } else if (n.is_array()) {
                    for (const auto& el : *n.as_array()) {
                        if (el.is_table() && member == &Settings::endpoints) {
                            if (!endpoint_table(s, *el.as_table(), items, err)) return false;
                            continue;
                        }
                        if (!el.is_string()) return err = fmt::format("want {}", type_name(o)), false;
                        items.push_back(trim(el.as_string()->get()));
                    }
                } else {
                    return err = fmt::format("want {}", type_name(o)), false;
                }
                s.*member = std::move(items);
                return true;
            } else {
                if (!n.is_string()) return err = fmt::format("want {}", type_name(o)), false;
                return apply_text(s, o, n.as_string()->get(), err);
            }
        },
        o.field);
}

std::string loc(std::string_view file, const toml::source_region& r) {
    return fmt::format("{}:{}", file, r.begin.line);
}

void walk_table(const toml::table& t, const std::string& prefix, std::string_view file, Settings& s,
                std::map<std::string, std::string>& origin, std::vector<std::string>& errors) {
    for (auto&& [k, v] : t) {
        std::string key = prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
        std::string where = loc(file, k.source().begin.line ? k.source() : v.source());
        // A suggestion costs an edit distance to every key: only for the errors that are shown.
        const bool suggest = errors.size() < kMaxConfigErrors;
        if (v.is_table()) {
            if (const OptionDef* scalar = find_key(key)) {
                errors.push_back(fmt::format("{}: {}: want {}, not a table", where, key, type_name(*scalar)));
                continue;
            }
            if (!is_section(key)) {
                errors.push_back(
                    fmt::format("{}: unknown section [{}]{}", where, key,
                                suggest ? did_you_mean(key, [](auto& o) {
                                    std::string k2 = o.key;
                                    return k2.substr(0, k2.find('.'));
                                })
                                        : ""));
                continue;
            }
            walk_table(*v.as_table(), key, file, s, origin, errors);
            continue;
        }
        const OptionDef* o = find_key(key);
        if (!o && is_section(key)) {  // `health = 3` or `[[health]]`
            errors.push_back(fmt::format("{}: '{}' is a section: write [{}] and its keys under it, not a value or "
                                         "an array of tables",
                                         where, key, key));
            continue;
        }
        if (!o) {
            errors.push_back(fmt::format("{}: unknown key '{}'{}", where, key,
                                         suggest ? did_you_mean(key, [](auto& od) { return std::string(od.key); })
                                                 : ""));
            continue;
        }
        std::string err;
        if (!apply_node(s, *o, v, err)) {
            errors.push_back(fmt::format("{}: {}: {}", where, key, err));
            continue;
        }
        origin[key] = where;
    }
}

// Same host (IP literals compared as addresses, names case-insensitively) and port.
bool same_endpoint(const HostPort& x, const HostPort& y) {
    if (x.port != y.port) return false;
    if (x.is_ip && y.is_ip) {
        sockaddr_storage a, b;
        ip_to_sockaddr(x.host, x.port, a);
        ip_to_sockaddr(y.host, y.port, b);
        return sockaddr_str(a) == sockaddr_str(b);
    }
    std::string a = x.host, b = y.host;
    std::transform(a.begin(), a.end(), a.begin(), ::tolower);
    std::transform(b.begin(), b.end(), b.begin(), ::tolower);
    return a == b;
}

bool is_ip_literal(std::string_view host, sockaddr_storage& ss, uint16_t port) { return ip_to_sockaddr(host, port, ss); }

void validate(Config& c, std::vector<std::string>& errors) {
    const Settings& s = c.s;
    auto where = [&](const char* key) {
        auto it = c.origin.find(key);
        return it == c.origin.end() ? std::string("default") : it->second;
    };
    auto fail = [&](const char* key, std::string msg) {
        errors.push_back(fmt::format("{}: {}: {}", where(key), key, msg));
    };

    if (s.endpoints.empty())
        errors.push_back("no endpoints configured: pass --endpoints host:port,... or set endpoints = [...] in the "
                         "config file");
    // A list far past the limit is refused as a whole: its entries are not read one by one (the
    // duplicate check below compares each with those before it).
    if (s.endpoints.size() > kMaxListEntries)
        fail("endpoints", fmt::format("{} endpoints configured; at most {} are supported", s.endpoints.size(),
                                      kMaxUpstreams));
    for (const auto& e : s.endpoints) {
        if (s.endpoints.size() > kMaxListEntries) break;
        Endpoint ep;
        std::string err;
        if (!parse_host_port(e, ep.addr, &err)) {
            fail("endpoints", err);
            continue;
        }
        ep.origin = where("endpoints");
        if (auto m = s.endpoint_meta.find(e); m != s.endpoint_meta.end()) {
            ep.zone = m->second.zone;
            ep.server_name = m->second.server_name;
        }
        if (ep.server_name.empty()) ep.server_name = s.server_name;  // the one rule; see Endpoint
        for (auto& seen : c.endpoints) {
            if (same_endpoint(seen.addr, ep.addr)) {
                fail("endpoints", fmt::format("duplicate endpoint '{}'", e));
                goto next;
            }
        }
        c.endpoints.push_back(std::move(ep));
    next:;
    }

    if (c.endpoints.size() > kMaxUpstreams && s.endpoints.size() <= kMaxListEntries)
        fail("endpoints", fmt::format("{} endpoints configured; at most {} are supported", c.endpoints.size(),
                                      kMaxUpstreams));

    if (s.bind_address.empty()) fail("bind_address", "no listen address");
    if (s.bind_address.size() > kMaxListEntries)
        fail("bind_address", fmt::format("{} listen addresses; at most {} are supported", s.bind_address.size(),
                                         kMaxListEntries));
    for (const auto& a : s.bind_address) {
        if (s.bind_address.size() > kMaxListEntries) break;
        sockaddr_storage ss;
        if (!is_ip_literal(a, ss, static_cast<uint16_t>(s.bind_port))) {
            fail("bind_address", fmt::format("'{}' is not an IP address", a));
            continue;
        }
        if (!s.allow_non_loopback && !is_loopback(ss)) {
            fail("bind_address", fmt::format("'{}' is not a loopback address; kprism must not expose the API port "
                                             "(set allow_non_loopback = true to do it anyway)",
                                             a));
            continue;
        }
        for (auto& prev : c.listen)
            if (sockaddr_str(prev) == sockaddr_str(ss))
                fail("bind_address", fmt::format("duplicate address '{}'", a));
        c.listen.push_back(ss);
    }

    if (!is_ip_literal(s.health_bind_address, c.admin, static_cast<uint16_t>(s.health_port))) {
        fail("health.bind_address", fmt::format("'{}' is not an IP address", s.health_bind_address));
    } else if (!s.allow_non_loopback && !is_loopback(c.admin)) {
        fail("health.bind_address",
             fmt::format("'{}' is not a loopback address (set allow_non_loopback = true to do it anyway)",
                         s.health_bind_address));
    }
    // kprism never connects to itself: a configured endpoint that is one of its listeners would
    // nest each client connection into kprism until max_connections.
    {
        const OwnListeners own = configured_listeners(c);
        for (const auto& e : c.endpoints) {
            sockaddr_storage ss;
            if (e.addr.is_ip && ip_to_sockaddr(e.addr.host, e.addr.port, ss) && own.contains(as_sockaddr(ss)))
                fail("endpoints", fmt::format("'{}' is an address kprism itself listens on (bind_address:bind_port or "
                                              "health.bind_address:health.port); kprism never connects to itself",
                                              e.addr.str()));
        }
    }
    if (s.discovery_allowed_cidrs.size() > kMaxListEntries)
        fail("discovery.allowed_cidrs", fmt::format("{} CIDRs; at most {} are supported",
                                                    s.discovery_allowed_cidrs.size(), kMaxListEntries));
    for (const auto& text : s.discovery_allowed_cidrs) {
        if (s.discovery_allowed_cidrs.size() > kMaxListEntries) break;
        Cidr cidr;
        std::string err;
        if (!parse_cidr(text, cidr, &err)) fail("discovery.allowed_cidrs", err);
    }
    // A rule between two keys names where both came from.
    auto both = [&](const char* key, const char* other, std::string msg) {
        errors.push_back(fmt::format("{}: {}: {} (the other value is from {})", where(key), key, msg,
                                     where(other)));
    };
    if (s.health_port == s.bind_port)
        both("health.port", "bind_port", fmt::format("{} is also the listen port bind_port", s.health_port));
    if (s.health_timeout >= s.health_interval)
        both("health.timeout", "health.interval",
             fmt::format("{} must be shorter than health.interval ({})", format_duration(s.health_timeout),
                         format_duration(s.health_interval)));
    if (s.health_fast_interval > s.health_interval)
        both("health.fast_interval", "health.interval",
             fmt::format("{} must not be longer than health.interval ({})", format_duration(s.health_fast_interval),
                         format_duration(s.health_interval)));
    if (s.health_path.empty() || s.health_path[0] != '/' ||
        s.health_path.find_first_of(" \r\n\t") != std::string::npos)
        fail("health.path", fmt::format("{} must start with '/' and contain no spaces", quote(s.health_path)));
    for (const char* key : {"health.client_cert", "health.client_key", "health.ca_file"}) {
        const std::string& v = key == std::string_view("health.client_cert") ? s.client_cert
                               : key == std::string_view("health.client_key") ? s.client_key
                                                                              : s.ca_file;
        if (v.empty()) fail(key, "must not be empty");
    }
    if (!s.discovery_snapshot_file.empty() && s.discovery_snapshot_file[0] != '/')
        fail("discovery.snapshot_file", fmt::format("{} must be an absolute path (or empty: no snapshot)",
                                                    quote(s.discovery_snapshot_file)));
    if (s.discovery_enabled && c.endpoints.size() > kMaxUpstreams - kMaxDiscovered)
        both("endpoints", "discovery.enabled",
             fmt::format("{} endpoints configured; with discovery at most {} (the other {} slots are for discovered "
                         "ones)",
                         c.endpoints.size(), kMaxUpstreams - kMaxDiscovered, kMaxDiscovered));
    // The choices were checked when the values were read.
    c.fail_mode = s.fail_mode == "fail-closed" ? FailMode::closed : FailMode::open;
    parse_policy(s.policy, c.policy);
    log::parse_level(s.log_level, c.log_level);
    log::parse_format(s.log_format, c.log_format);
}

}  // namespace

std::string usage_text() {
    std::string out = fmt::format(
        "Usage: kprism [run] [--config FILE] [flags]\n"
        "       kprism check [--config FILE] [flags]   validate and print the effective configuration\n"
        "       kprism status [--config FILE] [--health-port PORT]   show a running kprism's upstreams\n"
        "       kprism reload [--config FILE] [flags] [--pid PID] [--timeout DURATION]\n"
        "              make a running kprism re-read its file; waits for the outcome (default 30s)\n"
        "       kprism --version | --help\n\n"
        "kprism {}: node-local load balancer for the Kubernetes API; passes TCP through to the\n"
        "kube-apiservers that report ready.\n\nFlags (each overrides the config file key in brackets):\n"
        "{:<32} TOML configuration file\n",
        kVersion, "  --config FILE");
    for (const auto& o : options()) {
        std::string lhs = fmt::format("  --{} {}", o.flag,
                                      std::holds_alternative<bool Settings::*>(o.field) ? "[=BOOL]" : "VALUE");
        out += fmt::format("{:<32} {} [{}]\n", lhs, o.help, o.key);
    }
    out += fmt::format("{:<32} print the version and exit\n{:<32} print this help and exit\n\n"
                       "See kprism(8) and kprism.toml(5).\n",
                       "  --version", "  --help");
    return out;
}

bool parse_command_line(int argc, const char* const* argv, CommandLine& out, std::vector<std::string>& errors) {
    bool saw_command = false;
    std::vector<std::string> reload_flags;  // --pid, --timeout as given
    std::string_view bool_flag;  // the previous argument, when it was a boolean flag without '='
    // A flag's value is the next argument, unless there is none or it is another flag
    // ("--health-interval --bind-port 1"); then the error names what follows.
    auto missing_value = [&](int i, std::string_view flag) {
        if (i + 1 >= argc) {
            errors.push_back(fmt::format("--{}: missing value", flag));
            return true;
        }
        std::string_view next = argv[i + 1];
        if (next.size() > 2 && next.substr(0, 2) == "--") {
            errors.push_back(fmt::format("--{}: missing value before {} (a value that starts with -- goes after "
                                         "'=', as in --{}=VALUE)",
                                         flag, next, flag));
            return true;
        }
        return false;
    };
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i], after_bool_flag = bool_flag;
        bool_flag = {};
        if (a == "--help" || a == "-h") {
            out.command = Command::help;
            continue;
        }
        if (a == "--version" || a == "-v") {
            out.command = Command::version;
            continue;
        }
        if (a.size() > 2 && a.substr(0, 2) == "--") {
            std::string_view name = a.substr(2), value;
            bool has_value = false;
            if (size_t eq = name.find('='); eq != std::string_view::npos) {
                value = name.substr(eq + 1);
                name = name.substr(0, eq);
                has_value = true;
            }
            if (name == "config") {
                if (!has_value) {
                    if (missing_value(i, name)) continue;
                    value = argv[++i];
                }
                out.config_file = std::string(value);
                continue;
            }
            if (name == "pid" || name == "timeout") {  // `kprism reload` only (checked below)
                if (!has_value) {
                    if (missing_value(i, name)) continue;
                    value = argv[++i];
                }
                reload_flags.push_back(std::string(name));
                if (name == "pid") {
                    uint64_t pid = 0;
                    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), pid);
                    if (ec != std::errc() || end != value.data() + value.size() || pid < 1 || pid > INT32_MAX)
                        errors.push_back(fmt::format("--pid: invalid value {} (want a process id)", quote(value)));
                    else out.reload_pid = static_cast<int64_t>(pid);
                } else {
                    std::string err;
                    auto d = parse_duration(value, &err);
                    if (!d || d->count() < 1 || d->count() > 3600 * kSec)
                        errors.push_back(fmt::format("--timeout: invalid value {} ({})", quote(value),
                                                     d ? "want 1ms to 1h" : err));
                    else out.reload_timeout = *d;
                }
                continue;
            }
            const OptionDef* o = find_flag(name);
            if (!o) {
                errors.push_back(fmt::format("unknown flag --{}{}", name, did_you_mean(name, [](auto& od) {
                                                 return std::string(od.flag);
                                             })));
                continue;
            }
            if (!has_value) {
                if (std::holds_alternative<bool Settings::*>(o->field)) {
                    value = "true";
                    bool_flag = name;
                } else if (missing_value(i, name)) {
                    continue;
                } else {
                    value = argv[++i];
                }
            }
            out.flags.emplace_back(o, std::string(value));
            continue;
        }
        if (!saw_command &&
            (a == "run" || a == "check" || a == "status" || a == "reload" || a == "version" || a == "help")) {
            saw_command = true;
            out.command = a == "run" ? Command::run
                          : a == "check" ? Command::check
                          : a == "status" ? Command::status
                          : a == "reload" ? Command::reload
                          : a == "version" ? Command::version
                                           : Command::help;
            continue;
        }
        bool ignored;
        if (!after_bool_flag.empty() && bool_from_text(a, ignored))
            errors.push_back(fmt::format("unexpected argument '{}': a boolean flag takes its value after '=', as in "
                                         "--{}={}",
                                         a, after_bool_flag, a));
        else
            errors.push_back(
                fmt::format("unexpected argument '{}' (commands: run, check, status, reload; see --help)", a));
    }
    if (out.command != Command::reload && out.command != Command::help && out.command != Command::version)
        for (const auto& f : reload_flags) errors.push_back(fmt::format("--{}: only 'kprism reload' takes it", f));
    return errors.empty();
}

static bool finish(const CommandLine& cl, Config& c, std::vector<std::string>& errors) {
    for (const auto& [o, value] : cl.flags) {
        std::string err;
        if (!apply_text(c.s, *o, value, err)) {
            errors.push_back(fmt::format("--{}: {}", o->flag, err));
            continue;
        }
        c.origin[o->key] = fmt::format("--{}", o->flag);
    }
    if (!errors.empty()) return false;
    // `status` and `reload` only need the admin address; they must work without endpoints (and
    // for reload the daemon is the judge of the file).
    if (cl.command != Command::status && cl.command != Command::reload) validate(c, errors);
    return errors.empty();
}


static bool load_config_text_whole(std::string_view text, std::string_view name, const CommandLine& cl, Config& out,
                                   std::vector<std::string>& errors) {
    Config c;
    c.config_file = std::string(name);
    std::optional<toml::table> t = parse_toml(text, name, errors);
    if (!t) return false;
    walk_table(*t, "", name, c.s, c.origin, errors);
    if (!finish(cl, c, errors)) return false;
    out = std::move(c);
    return true;
}

// At most kMaxConfigErrors of the errors since `first` are kept, and a line that counts the rest:
// a file of thousands of wrong lines gets a short answer, in the log and in /status alike.
static void cap_errors(std::vector<std::string>& errors, size_t first) {
    if (errors.size() - first <= kMaxConfigErrors) return;
    const size_t more = errors.size() - first - kMaxConfigErrors;
    errors.resize(first + kMaxConfigErrors);
    errors.push_back(fmt::format("... and {} more error{}", more, more == 1 ? "" : "s"));
}

bool load_config_text(std::string_view text, std::string_view name, const CommandLine& cl, Config& out,
                      std::vector<std::string>& errors) {
    const size_t first = errors.size();
    const bool ok = load_config_text_whole(text, name, cl, out, errors);
    cap_errors(errors, first);
    return ok;
}

bool load_config(const CommandLine& cl, Config& out, std::vector<std::string>& errors) {
    if (cl.config_file.empty()) {
        Config c;
        if (!finish(cl, c, errors)) return false;
        out = std::move(c);
        return true;
    }
    struct stat st {};
    const bool known = ::stat(cl.config_file.c_str(), &st) == 0;
    if (known && !S_ISREG(st.st_mode)) {
        errors.push_back(fmt::format("{}: cannot read config file: not a regular file", cl.config_file));
        return false;
    }
    auto too_large = [&](std::string_view size) {
        errors.push_back(fmt::format("{}: config file is {} bytes; the limit is {} bytes (64 KiB)", cl.config_file, size,
                                     kMaxConfigFileBytes));
        return false;
    };
    if (known && static_cast<uint64_t>(st.st_size) > kMaxConfigFileBytes) return too_large(std::to_string(st.st_size));
    std::ifstream f(cl.config_file, std::ios::binary);
    if (!f) {
        errors.push_back(fmt::format("{}: cannot read config file: {}", cl.config_file, std::strerror(errno)));
        return false;
    }
    // At most one byte past the limit, whatever the size said a moment ago (a file still growing).
    std::string text(kMaxConfigFileBytes + 1, '\0');
    f.read(text.data(), static_cast<std::streamsize>(text.size()));
    if (f.bad()) {
        errors.push_back(fmt::format("{}: cannot read config file: {}", cl.config_file, std::strerror(errno)));
        return false;
    }
    text.resize(static_cast<size_t>(f.gcount()));
    if (text.size() > kMaxConfigFileBytes) return too_large("more than " + std::to_string(kMaxConfigFileBytes));
    return load_config_text(text, cl.config_file, cl, out, errors);
}

OwnListeners configured_listeners(const Config& c) {
    std::vector<OwnListener> own;
    for (const auto& a : c.listen) own.push_back({a, false});
    own.push_back({c.admin, false});
    return OwnListeners(std::move(own));
}

std::vector<Cidr> discovery_allowed(const Config& c) {
    std::vector<Cidr> out;
    for (const auto& text : c.s.discovery_allowed_cidrs)
        if (Cidr cidr; parse_cidr(text, cidr, nullptr)) out.push_back(cidr);
    return out;
}

void keep_restart_only_settings(const Config& running, Config& next) {
    for (const OptionDef& o : options()) {
        if (o.reloadable) continue;
        std::visit(
            [&](auto member) {
                if (next.s.*member == running.s.*member) return;
                log::warn("setting not reloaded: it takes effect at the next restart", {{"key", o.key}});
                next.s.*member = running.s.*member;
            },
            o.field);
    }
    next.admin = running.admin;  // derived from health.bind_address and health.port
}

std::string render_config(const Config& c) {
    std::string out = fmt::format("# kprism {} effective configuration{}\n", kVersion,
                                  c.config_file.empty() ? "" : " (file " + comment_text(c.config_file) + ")");
    std::string section;
    for (const auto& o : options()) {
        std::string key = o.key;
        std::string sect, leaf = key;
        if (size_t dot = key.find('.'); dot != std::string::npos) {
            sect = key.substr(0, dot);
            leaf = key.substr(dot + 1);
        }
        if (sect != section) {
            out += fmt::format("\n[{}]\n", sect);
            section = sect;
        }
        std::string value = std::visit(
            [&](auto member) -> std::string {
                const auto& v = c.s.*member;
                using T = std::remove_cvref_t<decltype(v)>;
                if constexpr (std::is_same_v<T, std::string>) return quote(v);
                else if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
                else if constexpr (std::is_same_v<T, int64_t>) return fmt::format("{}", v);
                else if constexpr (std::is_same_v<T, Duration>) return quote(format_duration(v));
                else {
                    std::string list = "[";
                    for (size_t i = 0; i < v.size(); ++i) {
                        list += i ? ", " : "";
                        auto m = c.s.endpoint_meta.find(v[i]);
                        if (&v == &c.s.endpoints && m != c.s.endpoint_meta.end())
                            list += fmt::format("{{ address = {}, zone = {}, server_name = {} }}", quote(v[i]),
                                                quote(m->second.zone), quote(m->second.server_name));
                        else
                            list += quote(v[i]);
                    }
                    return list + "]";
                }
            },
            o.field);
        auto it = c.origin.find(key);
        out += fmt::format("{} = {}  # {}\n", leaf, value, it == c.origin.end() ? "default" : comment_text(it->second));
    }
    return out;
}

const char* policy_name(PolicyKind kind) {
    switch (kind) {
    case PolicyKind::random: return "random";
    case PolicyKind::least_connections: return "least-connections";
    case PolicyKind::latency: return "latency";
    }
    return "random";
}

bool parse_policy(std::string_view name, PolicyKind& out) {
    for (PolicyKind k : {PolicyKind::random, PolicyKind::least_connections, PolicyKind::latency})
        if (name == policy_name(k)) {
            out = k;
            return true;
        }
    return false;
}

}  // namespace kprism
