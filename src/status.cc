// The /status JSON document (render and parse) and the /readyz text of a Snapshot.
#include "kprism/status.h"

#include <fmt/format.h>

#include <cmath>

#include "kprism/json.h"

namespace kprism {

namespace {

// One line of text: control characters (there should be none) become spaces.
std::string one_line(std::string_view s) {
    std::string out(s);
    for (char& c : out)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
    return out;
}

}  // namespace

std::string render_status_json(const Snapshot& s) {
    std::string out = fmt::format(R"({{"version":{},"ready":{},"fail_open":{},"draining":{},"connections_active":{},"upstreams":[)",
                                  json_quote(s.version), snapshot_ready(s), s.fail_open, s.draining,
                                  s.connections_active);
    for (size_t i = 0; i < s.upstreams.size(); ++i) {
        const Upstream& u = *s.upstreams[i];
        out += fmt::format(
            R"({}{{"address":{},"zone":{},"state":"{}","last_result":{},"last_error":{},"last_change_unix":{},"rtt_ms":{},"active_connections":{}}})",
            i ? "," : "", json_quote(u.name), json_quote(u.zone), health_name(u.health),
            u.has_result ? json_quote(result_name(u.last_result)) : "null", json_quote(u.last_error),
            u.last_change_unix ? fmt::format("{}", u.last_change_unix) : "null",
            u.rtt_ms >= 0 ? fmt::format("{:.3f}", u.rtt_ms) : "null", u.active);
    }
    return out + "]}\n";
}

bool snapshot_ready(const Snapshot& s) { return !s.draining && s.up_count() > 0; }

std::string render_readyz(const Snapshot& s, bool verbose) {
    std::string out;
    if (verbose) {
        for (const Upstream* u : s.upstreams) {
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
    auto doc = parse_json(text, &error);
    if (!doc) return false;
    auto want = [&](const JsonValue& obj, const char* key, JsonValue::Type type, bool nullable = false) -> const JsonValue* {
        const JsonValue* v = obj.get(key);
        if (v && (v->type == type || (nullable && v->is_null()))) return v;
        if (error.empty()) error = fmt::format("member '{}' missing or of the wrong type", key);
        return nullptr;
    };
    using T = JsonValue::Type;
    auto count = [](const JsonValue* v) -> uint64_t {
        return v && v->number > 0 && std::isfinite(v->number) ? static_cast<uint64_t>(v->number) : 0;
    };
    if (doc->type != T::object) {
        error = "not a JSON object";
        return false;
    }
    StatusDoc d;
    const JsonValue *version = want(*doc, "version", T::string), *ready = want(*doc, "ready", T::boolean),
                    *fail_open = want(*doc, "fail_open", T::boolean),
                    *active = want(*doc, "connections_active", T::number), *ups = want(*doc, "upstreams", T::array);
    if (!version || !ready || !fail_open || !active || !ups) return false;
    d.version = version->string;
    d.ready = ready->boolean;
    d.fail_open = fail_open->boolean;
    if (const JsonValue* dr = doc->get("draining"); dr && dr->type == T::boolean) d.draining = dr->boolean;
    d.connections_active = count(active);
    for (const JsonValue& e : ups->array) {
        if (e.type != T::object) {
            error = "upstream entry is not an object";
            return false;
        }
        StatusUpstream u;
        const JsonValue *addr = want(e, "address", T::string), *zone = want(e, "zone", T::string),
                        *state = want(e, "state", T::string), *result = want(e, "last_result", T::string, true),
                        *err = want(e, "last_error", T::string),
                        *since = want(e, "last_change_unix", T::number, true), *rtt = want(e, "rtt_ms", T::number, true),
                        *conns = want(e, "active_connections", T::number);
        if (!addr || !zone || !state || !result || !err || !since || !rtt || !conns) return false;
        u.address = addr->string;
        u.zone = zone->string;
        u.state = state->string;
        u.last_result = result->is_null() ? "" : result->string;
        u.last_error = err->string;
        u.last_change_unix = since->is_null() ? 0 : static_cast<int64_t>(since->number);
        u.rtt_ms = rtt->is_null() || !std::isfinite(rtt->number) ? -1 : rtt->number;
        u.active_connections = count(conns);
        d.upstreams.push_back(std::move(u));
    }
    out = std::move(d);
    return true;
}

}  // namespace kprism
