// SPDX-License-Identifier: Apache-2.0
// Upstream bookkeeping: the rise/fall state machine, passive backoff with jitter, latency tiers,
// and the one log line for each change.
#include "kprism/upstreams/upstream.h"

#include <fmt/format.h>

#include <ctime>

#include "kprism/base/duration.h"
#include "kprism/base/log.h"
#include "kprism/base/random.h"

namespace kprism {

const char* source_name(Source s) {
    switch (s) {
    case Source::configured: return "static";
    case Source::discovered: return "discovered";
    case Source::snapshot: return "snapshot";
    }
    return "static";
}

const char* health_name(Health h) {
    switch (h) {
    case Health::unknown: return "unknown";
    case Health::up: return "up";
    case Health::down: return "down";
    }
    return "?";
}

ConnectFailure connect_failure_from_uv(int uv_status) {
    switch (uv_status) {
    case UV_ECONNREFUSED: return ConnectFailure::refused;
    case UV_ETIMEDOUT: return ConnectFailure::timeout;
    case UV_EHOSTUNREACH:
    case UV_ENETUNREACH: return ConnectFailure::unreachable;
    case UV_ECONNRESET: return ConnectFailure::reset;
    default: return ConnectFailure::other;
    }
}

const char* connect_failure_name(ConnectFailure f) {
    switch (f) {
    case ConnectFailure::refused: return "refused";
    case ConnectFailure::timeout: return "timeout";
    case ConnectFailure::unreachable: return "unreachable";
    case ConnectFailure::reset: return "reset";
    case ConnectFailure::no_response: return "no_response";
    case ConnectFailure::hung_up: return "hung_up";
    case ConnectFailure::other: return "other";
    }
    return "other";
}

ConnectError connect_error_of(ConnectFailure f) {
    switch (f) {
    case ConnectFailure::refused: return ConnectError::refused;
    case ConnectFailure::timeout: return ConnectError::timeout;
    case ConnectFailure::no_response:
    case ConnectFailure::hung_up: return ConnectError::no_response;
    case ConnectFailure::unreachable:
    case ConnectFailure::reset:
    case ConnectFailure::other: return ConnectError::other;
    }
    return ConnectError::other;
}

CheckResult check_result_of(ConnectFailure f) {
    return f == ConnectFailure::timeout || f == ConnectFailure::no_response ? CheckResult::timeout
                                                                            : CheckResult::connect_failed;
}

DownReason down_reason_of(CheckResult r, const FailingChecks& checks) {
    return r == CheckResult::not_ready ? down_reason_of_checks(checks) : check_result_info(r).down;
}

Upstream* UpstreamPool::find(const HostPort& addr) {
    for (auto& u : ups_)
        if (!u->removed && u->addr == addr) return u.get();
    return nullptr;
}

Upstream* UpstreamPool::add(const HostPort& addr, std::string zone, std::string server_name) {
    auto u = std::make_unique<Upstream>();
    size_t slot = ups_.size();
    for (size_t i = 0; i < ups_.size(); ++i)
        if (ups_[i]->removed && ups_[i]->active == 0) {
            slot = i;
            break;
        }
    if (slot >= kMaxUpstreams) return nullptr;
    u->index = slot;
    u->addr = addr;
    u->name = addr.str();
    u->configured_zone = std::move(zone);
    u->settle_zone();
    u->server_name = std::move(server_name);
    if (addr.is_ip) {
        ip_to_sockaddr(addr.host, addr.port, u->sa);
        u->resolved = true;
    }
    Upstream* raw = u.get();
    if (slot == ups_.size()) ups_.push_back(std::move(u));
    else ups_[slot] = std::move(u);
    return raw;
}

std::string name_address_label(const std::string& hostname, const sockaddr_storage& address) {
    return hostname + "@" + sockaddr_str(address);
}

bool parse_name_address_label(std::string_view label, std::string& hostname, HostPort& address) {
    const size_t at = label.find('@');
    if (at == std::string_view::npos || at == 0) return false;
    if (!parse_host_port(label.substr(at + 1), address, nullptr) || !address.is_ip) return false;
    hostname = std::string(label.substr(0, at));
    return true;
}

Upstream* UpstreamPool::add_name_address(const HostPort& endpoint, const sockaddr_storage& address, std::string zone,
                                         std::string server_name) {
    HostPort ip;
    if (!parse_host_port(sockaddr_str(address), ip, nullptr)) return nullptr;
    Upstream* u = add(ip, std::move(zone), std::move(server_name));
    if (!u) return nullptr;
    u->name = name_address_label(endpoint.host, u->sa);
    u->of_name = endpoint.str();
    u->hostname = endpoint.host;
    return u;
}

void UpstreamPool::connect_failed(Upstream& u, ConnectFailure why, std::string_view detail, uint64_t now) {
    ++u.connect_failures;
    ++u.connect_errors[static_cast<size_t>(connect_error_of(why))];
    ++u.consecutive_failures;
    bool was_in_backoff = u.in_backoff(now);
    if (was_in_backoff) return;  // a burst of clients failing at once is one failure, not many
    // Exponential backoff x2 with +-20 % jitter (capped), so nodes do not retry a recovering
    // apiserver at once.
    u.backoff_ms = u.backoff_ms == 0 ? kBackoffMinMs : std::min(u.backoff_ms * 2, kBackoffMaxMs);
    uint64_t wait = std::min(jitter(u.backoff_ms, 0.2), kBackoffMaxMs);
    u.retry_at_ms = now + wait;
    if (u.health != Health::up)
        log::warn("upstream connect failed", {{"upstream", u.name},
                                              {"reason", connect_failure_name(why)},
                                              {"error", detail},
                                              {"health", health_name(u.health)},
                                              {"failures", u.consecutive_failures},
                                              {"retry_in", format_duration(Duration{static_cast<int64_t>(wait)})}});
}

void UpstreamPool::connect_succeeded(Upstream& u) {
    u.consecutive_failures = 0;
    u.backoff_ms = 0;
    u.retry_at_ms = 0;
}

void UpstreamPool::set_health(Upstream& u, Health h, const std::string& reason, uint64_t now,
                              const std::string& detail) {
    Health old = u.health;
    if (old == h) return;
    u.health = h;
    u.last_change_ms = now;
    u.last_change_unix = static_cast<int64_t>(std::time(nullptr));
    if (h == Health::up) ++u.went_up;
    if (h == Health::down) ++u.went_down;
    u.rises = u.falls = 0;
    auto level = h == Health::up ? log::Level::info : log::Level::warn;
    if (detail.empty())
        log::write(level, h == Health::up ? "upstream up" : "upstream down",
                   {{"upstream", u.name}, {"was", health_name(old)}, {"reason", reason}});
    else
        log::write(level, h == Health::up ? "upstream up" : "upstream down",
                   {{"upstream", u.name}, {"was", health_name(old)}, {"reason", reason}, {"error", detail}});
    update_tiers();
    if (on_change) on_change(u, old);
}

bool UpstreamPool::record(Upstream& u, CheckResult r, const std::string& error, bool explicit_down, uint64_t now,
                          const FailingChecks& checks) {
    bool class_changed = note(u, r, error, now, checks);
    return apply(u, r, error, explicit_down, now, class_changed);
}

bool UpstreamPool::note(Upstream& u, CheckResult r, const std::string& error, uint64_t now,
                        const FailingChecks& checks) {
    FailingChecks failing = r == CheckResult::not_ready ? checks : FailingChecks{};
    bool class_changed = !u.has_result || u.last_result != r || u.failing_checks != failing;
    u.has_result = true;
    u.last_result = r;
    u.last_error = error;
    u.last_result_ms = now;
    u.failing_checks = std::move(failing);
    if (r != CheckResult::ready) u.down_reason = down_reason_of(r, u.failing_checks);
    ++u.checks[static_cast<size_t>(r)];
    if (r == CheckResult::ready) u.passed_check = true;
    return class_changed;
}

bool UpstreamPool::apply(Upstream& u, CheckResult r, const std::string& error, bool explicit_down, uint64_t now,
                         bool class_changed) {
    Health before = u.health;
    // The failing checks say why better than the body they came in ("not_ready: etcd,shutdown").
    std::string why = u.failing_checks.empty() ? error : u.failing_checks.str();
    std::string reason = why.empty() ? result_name(r) : fmt::format("{}: {}", result_name(r), why);
    // The apiserver's own text stays in the line beside them.
    const std::string detail = u.failing_checks.empty() ? "" : error;
    if (r == CheckResult::ready) {
        u.falls = 0;
        if (u.health == Health::unknown) set_health(u, Health::up, reason, now);
        else if (u.health == Health::down && ++u.rises >= rise_fall.rise) set_health(u, Health::up, reason, now);
        else if (u.health == Health::down && class_changed)
            log::info("health check passed", {{"upstream", u.name}, {"rises", u.rises}, {"need", rise_fall.rise}});
    } else {
        u.rises = 0;
        if (u.health == Health::unknown) {
            set_health(u, Health::down, reason, now, detail);
        } else if (u.health == Health::up) {
            ++u.falls;
            if (explicit_down || u.falls >= rise_fall.fall) set_health(u, Health::down, reason, now, detail);
            else
                log::warn("health check failed", {{"upstream", u.name}, {"result", result_name(r)},
                                                  {"error", error}, {"falls", u.falls}, {"need", rise_fall.fall}});
        } else if (class_changed) {
            log::warn("health check failed", {{"upstream", u.name}, {"result", result_name(r)}, {"error", error},
                                              {"checks", u.failing_checks.str()}, {"health", "down"}});
        }
    }
    return u.health != before;
}

void UpstreamPool::record_rtt(Upstream& u, double rtt_ms) {
    u.rtt_ms = u.rtt_ms < 0 ? rtt_ms : 0.7 * u.rtt_ms + 0.3 * rtt_ms;
    update_tiers();
}

// The nearest tier: up upstreams whose RTT is close to the best one. Hysteresis keeps a member in
// until it is clearly slower (2x + 1 ms) and lets a newcomer in only when clearly close (1.5x + 0.5 ms).
void UpstreamPool::update_tiers() {
    double best = -1;
    for (auto& u : ups_)
        if (u->health == Health::up && !u->removed && u->rtt_ms >= 0 && (best < 0 || u->rtt_ms < best))
            best = u->rtt_ms;
    for (auto& u : ups_) {
        if (u->health != Health::up || u->rtt_ms < 0 || best < 0) {
            u->fast_tier = false;
            continue;
        }
        if (u->fast_tier) u->fast_tier = u->rtt_ms <= best * 2 + 1.0;
        else u->fast_tier = u->rtt_ms <= best * 1.5 + 0.5;
    }
}

size_t UpstreamPool::available_count(uint64_t now) const {
    size_t n = 0;
    for (const auto& u : ups_) n += u->available(now);
    return n;
}

size_t UpstreamPool::up_count() const {
    size_t n = 0;
    for (const auto& u : ups_) n += u->health == Health::up && !u->removed;
    return n;
}

}  // namespace kprism
