// SPDX-License-Identifier: Apache-2.0
// The /status JSON document (render and parse, with nlohmann-json) and the /readyz text of a StateView.
#include "kprism/admin/status.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "kprism/base/json.h"

namespace kprism {

namespace {

// One line of text: control characters (there should be none) become spaces.
std::string one_line(std::string_view s) {
    std::string out(s);
    for (char& c : out)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
    return out;
}

Json or_null(bool present, Json v) { return present ? std::move(v) : Json(nullptr); }

// A count as the daemon writes it (an unsigned integer); anything else that is a number is
// clamped into range rather than trusted.
uint64_t count_of(const Json& v) {
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    if (v.is_number_integer()) return 0;  // negative
    double d = v.get<double>();
    if (!(d > 0)) return 0;
    if (d >= 18446744073709551615.0) return std::numeric_limits<uint64_t>::max();
    return static_cast<uint64_t>(d);
}

int64_t int_of(const Json& v) {
    if (v.is_number_integer()) {
        if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return INT64_MAX;
        return v.get<int64_t>();
    }
    double d = v.get<double>();
    if (!std::isfinite(d)) return 0;
    if (d >= 9.2e18) return INT64_MAX;
    if (d <= -9.2e18) return INT64_MIN;
    return static_cast<int64_t>(d);
}

}  // namespace

std::string render_status_json(const StateView& s) {
    const Stats& st = s.stats;
    Json doc = {
        {"version", s.version},
        {"pid", s.pid},
        {"ready", state_ready(s)},
        {"fail_open", s.fail_open},
        {"draining", s.draining},
        {"connections_active", s.connections_active},
        {"reload",
         {{"generation", st.reload_generation},
          {"ok", st.reloads_ok},
          {"failed", st.reloads_failed},
          {"last_result", or_null(st.reload_generation != 0, st.reload_last_ok ? "ok" : "failed")},
          {"last_error", st.reload_last_error},
          {"last_changes", st.reload_last_changes},
          {"last_unix", or_null(st.reload_last_unix != 0, st.reload_last_unix)}}},
    };
    const bool loaded = s.client_cert_not_after != 0;
    doc["credentials"] = {
        {"state", s.credentials},
        {"client_cert", s.client_cert},
        {"subject", or_null(loaded, s.client_cert_subject)},
        {"not_after_unix", or_null(loaded, s.client_cert_not_after)},
        {"remaining_seconds", or_null(loaded, s.client_cert_not_after - s.now_unix)},
    };
    Json ups = Json::array();
    std::vector<const Upstream*> rows = s.upstreams;
    rows.insert(rows.end(), s.unresolved.begin(), s.unresolved.end());
    for (const Upstream* u : rows) {
        Json entry = {
            {"address", u->name},
            {"zone", u->zone},
            {"source", source_name(u->source)},
            {"state", health_name(u->health)},
            {"last_result", or_null(u->has_result, result_name(u->last_result))},
            {"last_error", u->last_error},
            {"last_change_unix", or_null(u->last_change_unix != 0, u->last_change_unix)},
            // Milliseconds to the microsecond: 1.438, not 1.4375000000000002.
            {"rtt_ms", or_null(u->rtt_ms >= 0, std::round(u->rtt_ms * 1000) / 1000)},
            {"active_connections", u->active},
            // Which of kprism's sockets to the upstream is the kept probe connection (ss shows it).
            {"probe_local_port", or_null(u->probe_local_port != 0, u->probe_local_port)},
        };
        Json checks = Json::array();
        for (const auto& n : u->failing_checks.names) checks.push_back(n);
        entry["failing_checks"] = std::move(checks);
        entry["failing_checks_more"] = u->failing_checks.more;
        entry["down_reason"] = or_null(u->health == Health::down, down_reason_name(u->down_reason));
        ups.push_back(std::move(entry));
    }
    doc["upstreams"] = std::move(ups);
    doc["condition"] = or_null(s.etcd_quorum_lost, "no-etcd-quorum");
    const DiscoveryStatus& d = s.discovery;
    const bool has_file = s.snapshot.written_unix != 0;
    doc["discovery"] = {
        {"enabled", d.enabled},
        {"state", d.state},
        {"via", or_null(!d.via.empty(), d.via)},
        {"resource_version", or_null(!d.resource_version.empty(), d.resource_version)},
        {"endpoints", d.endpoints},
        {"lists", d.lists},
        {"relists", d.relists},
        {"events", d.events},
        {"errors", d.errors},
        {"last_error", d.last_error},
        {"snapshot",
         {{"path", s.snapshot.path},
          {"state", d.enabled ? s.snapshot.state : "disabled"},
          {"detail", s.snapshot.detail},
          {"written_unix", or_null(has_file, s.snapshot.written_unix)},
          {"age_seconds", or_null(has_file, s.now_unix - s.snapshot.written_unix)}}},
    };
    return json_dump(doc) + "\n";
}

bool state_ready(const StateView& s) { return !s.draining && s.up_count() > 0; }

std::string render_readyz(const StateView& s, bool verbose) {
    std::string out;
    if (verbose) {
        std::vector<const Upstream*> rows = s.upstreams;
        rows.insert(rows.end(), s.unresolved.begin(), s.unresolved.end());
        for (const Upstream* u : rows) {
            if (u->health == Health::up) {
                out += fmt::format("[+]{} up\n", u->name);
                continue;
            }
            std::string why;
            if (u->has_result)
                why = u->last_error.empty() ? fmt::format(": {}", result_name(u->last_result))
                                            : fmt::format(": {}: {}", result_name(u->last_result), one_line(u->last_error));
            out += fmt::format("[-]{} {}{}\n", u->name, health_name(u->health), why);
        }
    }
    if (s.draining) return out + "not ready: shutting down\n";
    if (s.up_count() == 0) return out + "not ready: no upstream is up\n";
    return out + "ok\n";
}

bool parse_status_json(std::string_view text, StatusDoc& out, std::string& error) {
    Json doc;
    if (!parse_json(text, doc, error)) return false;
    if (!doc.is_object()) {
        error = "not a JSON object";
        return false;
    }
    enum class T { string, boolean, number, array, object };
    auto is = [](const Json& v, T type) {
        switch (type) {
        case T::string: return v.is_string();
        case T::boolean: return v.is_boolean();
        case T::number: return v.is_number();
        case T::array: return v.is_array();
        case T::object: return v.is_object();
        }
        return false;
    };
    // The member `key` of `obj` if it has the type (or is null, when that is allowed), else null
    // with `error` naming the first member that is missing or of the wrong type.
    auto want = [&](const Json& obj, const char* key, T type, bool nullable = false) -> const Json* {
        auto it = obj.find(key);
        if (it != obj.end() && (is(*it, type) || (nullable && it->is_null()))) return &*it;
        if (error.empty()) error = fmt::format("member '{}' missing or of the wrong type", key);
        return nullptr;
    };
    StatusDoc d;
    const Json *version = want(doc, "version", T::string), *ready = want(doc, "ready", T::boolean),
               *fail_open = want(doc, "fail_open", T::boolean), *active = want(doc, "connections_active", T::number),
               *ups = want(doc, "upstreams", T::array);
    if (!version || !ready || !fail_open || !active || !ups) return false;
    d.version = version->get<std::string>();
    d.ready = ready->get<bool>();
    d.fail_open = fail_open->get<bool>();
    if (auto dr = doc.find("draining"); dr != doc.end() && dr->is_boolean()) d.draining = dr->get<bool>();
    if (auto c = doc.find("condition"); c != doc.end() && c->is_string())
        d.condition = c->get<std::string>().substr(0, 64);
    d.connections_active = count_of(*active);
    if (auto pid = doc.find("pid"); pid != doc.end() && pid->is_number()) d.pid = int_of(*pid);
    if (auto rl = doc.find("reload"); rl != doc.end()) {
        if (!rl->is_object()) {
            error = "member 'reload' is not an object";
            return false;
        }
        const Json *gen = want(*rl, "generation", T::number), *ok = want(*rl, "ok", T::number),
                   *failed = want(*rl, "failed", T::number), *result = want(*rl, "last_result", T::string, true),
                   *err = want(*rl, "last_error", T::string), *changes = want(*rl, "last_changes", T::string),
                   *when = want(*rl, "last_unix", T::number, true);
        if (!gen || !ok || !failed || !result || !err || !changes || !when) return false;
        d.has_reload = true;
        d.reload.generation = count_of(*gen);
        d.reload.ok = count_of(*ok);
        d.reload.failed = count_of(*failed);
        d.reload.last_result = result->is_null() ? "" : result->get<std::string>();
        d.reload.last_error = err->get<std::string>();
        d.reload.last_changes = changes->get<std::string>();
        d.reload.last_unix = when->is_null() ? 0 : int_of(*when);
    }
    if (auto cr = doc.find("credentials"); cr != doc.end()) {
        if (!cr->is_object()) {
            error = "member 'credentials' is not an object";
            return false;
        }
        const Json *state = want(*cr, "state", T::string), *cert = want(*cr, "client_cert", T::string),
                   *subject = want(*cr, "subject", T::string, true), *na = want(*cr, "not_after_unix", T::number, true),
                   *rem = want(*cr, "remaining_seconds", T::number, true);
        if (!state || !cert || !subject || !na || !rem) return false;
        auto bounded = [](const Json& v) {
            std::string str = v.is_null() ? "" : v.get<std::string>();
            if (str.size() > kMaxStatusCredentialsString) {
                size_t cut = kMaxStatusCredentialsString;  // never inside a UTF-8 sequence
                while (cut > 0 && (static_cast<unsigned char>(str[cut]) & 0xc0) == 0x80) --cut;
                str.resize(cut);
            }
            return str;
        };
        d.has_credentials = true;
        d.credentials.state = bounded(*state);
        d.credentials.client_cert = bounded(*cert);
        d.credentials.subject = bounded(*subject);
        d.credentials.not_after_unix = na->is_null() ? 0 : int_of(*na);
        d.credentials.has_remaining = !rem->is_null();
        d.credentials.remaining_seconds = rem->is_null() ? 0 : int_of(*rem);
    }
    if (auto di = doc.find("discovery"); di != doc.end() && di->is_object()) {
        auto str = [&](const Json& o, const char* k) {
            auto it = o.find(k);
            return it != o.end() && it->is_string() ? it->get<std::string>().substr(0, 256) : std::string();
        };
        if (auto en = di->find("enabled"); en != di->end() && en->is_boolean()) d.discovery.enabled = en->get<bool>();
        d.discovery.state = str(*di, "state");
        d.discovery.via = str(*di, "via");
        d.discovery.last_error = str(*di, "last_error");
        if (auto n = di->find("endpoints"); n != di->end() && n->is_number()) d.discovery.endpoints = count_of(*n);
        if (auto sn = di->find("snapshot"); sn != di->end() && sn->is_object()) {
            d.discovery.snapshot_state = str(*sn, "state");
            if (auto a = sn->find("age_seconds"); a != sn->end() && a->is_number()) {
                d.discovery.has_snapshot_age = true;
                d.discovery.snapshot_age_seconds = int_of(*a);
            }
        }
    }
    for (const Json& e : *ups) {
        if (!e.is_object()) {
            error = "upstream entry is not an object";
            return false;
        }
        StatusUpstream u;
        const Json *addr = want(e, "address", T::string), *zone = want(e, "zone", T::string),
                   *state = want(e, "state", T::string), *result = want(e, "last_result", T::string, true),
                   *err = want(e, "last_error", T::string), *since = want(e, "last_change_unix", T::number, true),
                   *rtt = want(e, "rtt_ms", T::number, true), *conns = want(e, "active_connections", T::number);
        if (!addr || !zone || !state || !result || !err || !since || !rtt || !conns) return false;
        u.address = addr->get<std::string>();
        u.zone = zone->get<std::string>();
        u.state = state->get<std::string>();
        u.last_result = result->is_null() ? "" : result->get<std::string>();
        u.last_error = err->get<std::string>();
        u.last_change_unix = since->is_null() ? 0 : int_of(*since);
        double r = rtt->is_null() ? -1 : rtt->get<double>();
        u.rtt_ms = std::isfinite(r) ? r : -1;
        u.active_connections = count_of(*conns);
        // Optional (a kprism from before c533960 has none); names are bounded like the daemon's.
        if (auto fc = e.find("failing_checks"); fc != e.end() && fc->is_array()) {
            for (const Json& n : *fc) {
                if (!n.is_string()) continue;
                if (u.failing_checks.names.size() < FailingChecks::kMaxNames)
                    u.failing_checks.names.push_back(n.get<std::string>().substr(0, FailingChecks::kMaxNameLen));
                else ++u.failing_checks.more;
            }
        }
        if (auto m = e.find("failing_checks_more"); m != e.end() && m->is_number())
            u.failing_checks.more += count_of(*m);
        if (auto dr = e.find("down_reason"); dr != e.end() && dr->is_string()) u.down_reason = dr->get<std::string>();
        if (auto so = e.find("source"); so != e.end() && so->is_string()) u.source = so->get<std::string>().substr(0, 16);
        d.upstreams.push_back(std::move(u));
    }
    out = std::move(d);
    return true;
}

}  // namespace kprism
