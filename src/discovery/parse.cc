// SPDX-License-Identifier: Apache-2.0
// Discovery's untrusted input, parsed and bounded: a streamed HTTP response, watch lines, EndpointSlices.
#include "kprism/discovery/parse.h"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <algorithm>
#include <exception>

#include "kprism/base/json.h"

namespace kprism {

namespace {

// A bad value quoted in an error: at most 64 bytes, anything not printable ASCII as '?'.
std::string quote(std::string_view s) {
    std::string out(s.substr(0, 64));
    for (char& c : out)
        if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
    if (s.size() > 64) out += "...";
    return out;
}

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool iequals(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return lower(x) == lower(y); });
}

bool is_token_char(char c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
    return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

std::string_view trim_ows(std::string_view v) {
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
    return v;
}

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    c = lower(c);
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

}  // namespace

// ---- HttpStream ----

void HttpStream::fail(std::string why) {
    if (state_ == State::error) return;  // the first reason stays
    error_ = std::move(why);
    state_ = State::error;
}

bool HttpStream::fail_false(std::string why) {
    fail(std::move(why));
    return false;
}

bool HttpStream::feed(std::string_view data, const std::function<bool(std::string_view)>& on_body) {
    if (state_ == State::error) return false;
    if (state_ == State::done) return true;
    if (state_ == State::head) {
        size_t old = head_.size();
        size_t take = std::min(data.size(), kMaxResponseHead - old);
        head_.append(data.data(), take);
        if (head_.size() >= 5 && head_.compare(0, 5, "HTTP/") != 0) return fail_false("not an HTTP response");
        size_t end = head_.find("\r\n\r\n", old >= 3 ? old - 3 : 0);
        if (end == std::string::npos) {
            if (head_.size() >= kMaxResponseHead) return fail_false(fmt::format("response head larger than {} bytes", kMaxResponseHead));
            return true;
        }
        head_.resize(end + 4);
        data.remove_prefix(end + 4 - old);
        if (!parse_head()) return false;
        if (state_ == State::done) return true;
    }
    return feed_body(data, on_body);
}

bool HttpStream::parse_head() {
    std::string_view head(head_);
    head.remove_suffix(2);  // the blank line's CRLF; every line below ends in CRLF
    size_t eol = head.find("\r\n");
    std::string_view status_line = head.substr(0, eol);
    // "HTTP/1.x NNN[ reason]"
    if (status_line.size() < 12 || status_line.compare(0, 7, "HTTP/1.") != 0 ||
        (status_line[7] != '0' && status_line[7] != '1') || status_line[8] != ' ')
        return fail_false(fmt::format("malformed status line '{}'", quote(status_line)));
    int code = 0;
    for (size_t i = 9; i < 12; ++i) {
        if (status_line[i] < '0' || status_line[i] > '9')
            return fail_false(fmt::format("malformed status line '{}'", quote(status_line)));
        code = code * 10 + (status_line[i] - '0');
    }
    if (code < 100 || (status_line.size() > 12 && status_line[12] != ' '))
        return fail_false(fmt::format("malformed status line '{}'", quote(status_line)));
    if (code < 200) return fail_false(fmt::format("unexpected interim response {}", code));
    for (char c : status_line)
        if (c == '\r' || c == '\n') return fail_false("bare CR or LF in the status line");

    size_t lines = 0;
    bool te_seen = false;
    for (size_t pos = eol + 2; pos < head.size();) {
        size_t next = head.find("\r\n", pos);
        std::string_view line = head.substr(pos, next - pos);
        pos = next + 2;
        if (++lines > kMaxHeaderLines) return fail_false(fmt::format("more than {} header lines", kMaxHeaderLines));
        for (char c : line)
            if (c == '\r' || c == '\n' || c == '\0') return fail_false("bare CR, LF or NUL in a header line");
        size_t colon = line.find(':');
        if (colon == std::string_view::npos || colon == 0)
            return fail_false(fmt::format("malformed header line '{}'", quote(line)));
        std::string_view name = line.substr(0, colon), value = trim_ows(line.substr(colon + 1));
        if (!std::all_of(name.begin(), name.end(), is_token_char))
            return fail_false(fmt::format("malformed header line '{}'", quote(line)));
        if (iequals(name, "transfer-encoding")) {
            if (te_seen || !iequals(value, "chunked"))
                return fail_false(fmt::format("unsupported transfer-encoding '{}'", quote(value)));
            te_seen = chunked_ = true;
        } else if (iequals(name, "content-length")) {
            bool ok = !value.empty() && value.size() <= 15 &&
                      std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; });
            long long cl = 0;
            for (char c : value) cl = ok ? cl * 10 + (c - '0') : 0;
            if (!ok || (content_length_ >= 0 && cl != content_length_))
                return fail_false(fmt::format("bad content-length '{}'", quote(value)));
            content_length_ = cl;
        }
    }
    status_ = code;
    state_ = State::body;
    if (code == 204 || code == 304) {
        state_ = State::done;
    } else if (chunked_) {
        content_length_ = -1;  // chunked framing wins over a Content-Length (RFC 9112 6.3)
    } else if (content_length_ >= 0) {
        left_ = static_cast<uint64_t>(content_length_);
        if (left_ == 0) state_ = State::done;
    }
    head_ = std::string();  // not needed any more
    return true;
}

bool HttpStream::hand_out(std::string_view piece, const std::function<bool(std::string_view)>& on_body) {
    if (piece.empty()) return true;
    bool ok = on_body(piece);
    if (state_ == State::error) return false;  // on_body called fail()
    if (!ok) return fail_false("body rejected");
    return true;
}

bool HttpStream::feed_body(std::string_view data, const std::function<bool(std::string_view)>& on_body) {
    if (data.empty()) return true;
    if (chunked_) return feed_chunked(data, on_body);
    if (content_length_ < 0) return hand_out(data, on_body);  // to the peer's close
    size_t n = static_cast<size_t>(std::min<uint64_t>(left_, data.size()));
    left_ -= n;
    if (left_ == 0) state_ = State::done;  // before on_body: the body is complete with this piece
    if (!hand_out(data.substr(0, n), on_body)) return false;
    return true;
}

bool HttpStream::feed_chunked(std::string_view data, const std::function<bool(std::string_view)>& on_body) {
    while (!data.empty() && state_ == State::body) {
        switch (chunk_) {
        case Chunk::data: {
            size_t n = static_cast<size_t>(std::min<uint64_t>(left_, data.size()));
            left_ -= n;
            if (left_ == 0) chunk_ = Chunk::data_crlf;
            if (!hand_out(data.substr(0, n), on_body)) return false;
            data.remove_prefix(n);
            break;
        }
        case Chunk::data_crlf:
            if (data.front() != "\r\n"[crlf_seen_]) return fail_false("chunk data not followed by CRLF");
            data.remove_prefix(1);
            if (++crlf_seen_ == 2) {
                crlf_seen_ = 0;
                chunk_ = Chunk::size_line;
            }
            break;
        case Chunk::size_line:
        case Chunk::trailers: {
            size_t lf = data.find('\n');
            size_t n = lf == std::string_view::npos ? data.size() : lf;
            if (line_.size() + n > kMaxLine)
                return fail_false(chunk_ == Chunk::size_line ? "chunk size line too long" : "trailer line too long");
            line_.append(data.data(), n);
            if (lf == std::string_view::npos) return true;
            data.remove_prefix(lf + 1);
            if (line_.empty() || line_.back() != '\r') return fail_false("bare LF in the chunked framing");
            line_.pop_back();
            std::string line = std::move(line_);
            line_.clear();
            if (!chunk_line(line)) return false;
            break;
        }
        }
    }
    return state_ != State::error;
}

// One complete chunk-size line ("1a;ext=v") or trailer line, without its CRLF.
bool HttpStream::chunk_line(std::string_view line) {
    if (chunk_ == Chunk::trailers) {
        if (line.empty()) {
            state_ = State::done;
            return true;
        }
        trailer_bytes_ += line.size() + 2;
        if (++trailer_lines_ > kMaxHeaderLines || trailer_bytes_ > kMaxResponseHead)
            return fail_false("too many trailer lines");
        return true;
    }
    uint64_t size = 0;
    size_t i = 0;
    for (; i < line.size() && hex_value(line[i]) >= 0; ++i) {
        if (size > (uint64_t{1} << 56)) return fail_false(fmt::format("chunk size '{}' too large", quote(line)));
        size = size * 16 + static_cast<uint64_t>(hex_value(line[i]));
    }
    std::string_view rest = trim_ows(line.substr(i));
    if (i == 0 || (!rest.empty() && rest.front() != ';'))
        return fail_false(fmt::format("bad chunk size '{}'", quote(line)));
    // Extensions (";name=value") carry nothing for us; any CR or NUL in them is malformed.
    if (rest.find_first_of(std::string_view("\r\0", 2)) != std::string_view::npos)
        return fail_false(fmt::format("bad chunk size '{}'", quote(line)));
    if (size == 0) {
        chunk_ = Chunk::trailers;
    } else {
        left_ = size;
        chunk_ = Chunk::data;
    }
    return true;
}

bool HttpStream::eof() {
    switch (state_) {
    case State::done: return true;
    case State::error: return false;
    case State::head:
        return fail_false(head_.empty() ? "connection closed without a response"
                                        : "connection closed inside the response head");
    case State::body: break;
    }
    if (chunked_) return fail_false("connection closed inside the chunked body");
    if (content_length_ >= 0)
        return fail_false(fmt::format("connection closed {} bytes before the end of the body", left_));
    state_ = State::done;
    return true;
}

// ---- LineSplitter ----

bool LineSplitter::feed(std::string_view data, const std::function<bool(std::string_view line)>& on_line) {
    if (!error_.empty()) return false;
    auto deliver = [&](std::string_view line) {
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.size() > max_) {
            error_ = fmt::format("watch event longer than {} bytes", max_);
            return false;
        }
        if (line.empty()) return true;
        if (!on_line(line)) {
            error_ = "line rejected";
            return false;
        }
        return true;
    };
    while (!data.empty()) {
        size_t lf = data.find('\n');
        if (lf == std::string_view::npos) {
            // One byte more when it is a CR, which goes when the LF arrives.
            size_t total = buf_.size() + data.size();
            if (total > max_ && !(total == max_ + 1 && data.back() == '\r')) {
                error_ = fmt::format("watch event longer than {} bytes", max_);
                buf_ = std::string();
                return false;
            }
            buf_.append(data);
            return true;
        }
        bool ok;
        if (buf_.empty()) {
            ok = deliver(data.substr(0, lf));
        } else {
            if (buf_.size() + lf > max_ + 1) {
                error_ = fmt::format("watch event longer than {} bytes", max_);
                buf_ = std::string();
                return false;
            }
            buf_.append(data.substr(0, lf));
            std::string line = std::move(buf_);
            buf_.clear();
            ok = deliver(line);
        }
        if (!ok) return false;
        data.remove_prefix(lf + 1);
    }
    return true;
}

// ---- EndpointSlices ----

namespace {

// The JSON walk: each check returns false with `err` naming the field ("items[2].ports[0].port").
struct Reader {
    std::string& err;

    bool bad(std::string_view where, std::string_view what) {
        err = fmt::format("{}: {}", where, what);
        return false;
    }
    static const char* type_name(const Json& j) { return j.type_name(); }

    // A member that may be absent or null (nullptr then); else it must have the expected type.
    const Json* member(const Json& obj, const char* key) {
        auto it = obj.find(key);
        if (it == obj.end() || it->is_null()) return nullptr;
        return &*it;
    }
    bool object(const Json& obj, const char* key, const std::string& where, const Json*& out, bool required) {
        out = member(obj, key);
        if (!out) return !required || bad(where, "missing");
        return out->is_object() || bad(where, fmt::format("want an object, not {}", type_name(*out)));
    }
    bool array(const Json& obj, const char* key, const std::string& where, const Json*& out, bool required) {
        out = member(obj, key);
        if (!out) return !required || bad(where, "missing");
        return out->is_array() || bad(where, fmt::format("want an array, not {}", type_name(*out)));
    }
    // `present` says whether it was there; absent leaves `out` as it is.
    bool string(const Json& obj, const char* key, const std::string& where, std::string& out, bool required,
                bool* present = nullptr) {
        const Json* j = member(obj, key);
        if (present) *present = j != nullptr;
        if (!j) return !required || bad(where, "missing");
        if (!j->is_string()) return bad(where, fmt::format("want a string, not {}", type_name(*j)));
        out = j->get_ref<const std::string&>();
        return true;
    }
    bool boolean(const Json& obj, const char* key, const std::string& where, bool& out) {
        const Json* j = member(obj, key);
        if (!j) return true;
        if (!j->is_boolean()) return bad(where, fmt::format("want true or false, not {}", type_name(*j)));
        out = j->get<bool>();
        return true;
    }
    // An integer member; absent: *present = false.
    bool integer(const Json& obj, const char* key, const std::string& where, long long& out, bool& present) {
        const Json* j = member(obj, key);
        present = j != nullptr;
        if (!j) return true;
        if (j->is_number_unsigned()) {
            uint64_t v = j->get<uint64_t>();
            if (v > 1'000'000'000ull) return bad(where, fmt::format("{} out of range", v));
            out = static_cast<long long>(v);
            return true;
        }
        if (j->is_number_integer()) {
            int64_t v = j->get<int64_t>();
            if (v < -1'000'000'000ll) return bad(where, fmt::format("{} out of range", v));
            out = v;
            return true;
        }
        return bad(where, fmt::format("want an integer, not {}", type_name(*j)));
    }

    bool kind(const Json& obj, const std::string& where, std::string_view want) {
        std::string k;
        bool present = false;
        if (!string(obj, "kind", where + ".kind", k, false, &present)) return false;
        return !present || k == want || bad(where + ".kind", fmt::format("'{}', want {}", quote(k), want));
    }

    bool metadata(const Json& obj, const std::string& where, std::string* name, std::string& rv, bool rv_required) {
        const Json* md;
        if (!object(obj, "metadata", where + ".metadata", md, true)) return false;
        if (name && !string(*md, "name", where + ".metadata.name", *name, true)) return false;
        if (name && name->empty()) return bad(where + ".metadata.name", "empty");
        if (!string(*md, "resourceVersion", where + ".metadata.resourceVersion", rv, rv_required)) return false;
        if (rv.empty()) return !rv_required || bad(where + ".metadata.resourceVersion", "empty");
        return valid_resource_version(rv) ||
               bad(where + ".metadata.resourceVersion",
                   fmt::format("'{}' refused (want at most {} of 0-9 A-Z a-z . _ -)", quote(rv), kMaxResourceVersion));
    }

    // The port endpoints are reached on: 0 when the slice has none usable.
    bool port(const Json& slice, const std::string& where, uint16_t& out) {
        out = 0;
        const Json* ports;
        if (!array(slice, "ports", where + ".ports", ports, false)) return false;
        if (!ports) return true;
        if (ports->size() > kMaxSliceEndpoints) return bad(where + ".ports", fmt::format("more than {} entries", kMaxSliceEndpoints));
        const Json* chosen = nullptr;
        for (size_t i = 0; i < ports->size(); ++i) {
            const Json& p = (*ports)[i];
            std::string at = fmt::format("{}.ports[{}]", where, i);
            if (!p.is_object()) return bad(at, fmt::format("want an object, not {}", type_name(p)));
            std::string name, protocol;
            long long number = 0;
            bool has_number;
            if (!string(p, "name", at + ".name", name, false) || !string(p, "protocol", at + ".protocol", protocol, false) ||
                !integer(p, "port", at + ".port", number, has_number))
                return false;
            if (name == "https" && !chosen) chosen = &p;
        }
        if (!chosen && ports->size() == 1) chosen = &(*ports)[0];
        if (!chosen) return true;  // ambiguous or none
        size_t index = static_cast<size_t>(chosen - &(*ports)[0]);
        std::string at = fmt::format("{}.ports[{}]", where, index);
        std::string protocol = "TCP";
        long long number = 0;
        bool has_number;
        string(*chosen, "protocol", at, protocol, false);
        integer(*chosen, "port", at + ".port", number, has_number);
        if (!has_number || protocol != "TCP") return true;  // nothing to connect to
        if (number < 1 || number > 65535) return bad(at + ".port", fmt::format("{} out of range 1-65535", number));
        out = static_cast<uint16_t>(number);
        return true;
    }

    bool slice(const Json& obj, const std::string& where, DiscoveredSlice& out, std::string& rv, bool rv_required) {
        if (!obj.is_object()) return bad(where, fmt::format("want an object, not {}", type_name(obj)));
        if (!kind(obj, where, "EndpointSlice") || !metadata(obj, where, &out.name, rv, rv_required)) return false;
        std::string type;
        if (!string(obj, "addressType", where + ".addressType", type, true)) return false;
        int family = type == "IPv4" ? AF_INET : type == "IPv6" ? AF_INET6 : 0;
        if (!family && type != "FQDN") return bad(where + ".addressType", fmt::format("'{}', want IPv4, IPv6 or FQDN", quote(type)));
        uint16_t port_number;
        if (!port(obj, where, port_number)) return false;
        const Json* eps;
        if (!array(obj, "endpoints", where + ".endpoints", eps, false)) return false;
        if (!eps) return true;
        if (eps->size() > kMaxSliceEndpoints)
            return bad(where + ".endpoints", fmt::format("{} endpoints, at most {}", eps->size(), kMaxSliceEndpoints));
        for (size_t i = 0; i < eps->size(); ++i) {
            std::string at = fmt::format("{}.endpoints[{}]", where, i);
            HostPort hp;
            bool admitted = false;
            if (!endpoint((*eps)[i], at, family, port_number, hp, admitted)) return false;
            if (admitted && std::find(out.endpoints.begin(), out.endpoints.end(), hp) == out.endpoints.end()) {
                zone((*eps)[i], hp.str(), out);
                out.endpoints.push_back(std::move(hp));
            }
        }
        return true;
    }

    // An admitted endpoint's zone: never an error of the slice, only of the zone.
    static void zone(const Json& ep, const std::string& key, DiscoveredSlice& out) {
        auto it = ep.find("zone");
        if (it == ep.end() || it->is_null()) return;
        std::string why;
        if (!it->is_string()) {
            why = fmt::format("want a string, not {}", type_name(*it));
        } else {
            const std::string& z = it->get_ref<const std::string&>();
            if (valid_zone(z, why)) {
                if (!z.empty()) out.zones.emplace(key, z);
                return;
            }
        }
        out.zone_errors.emplace(key, std::move(why));
    }

    bool endpoint(const Json& ep, const std::string& at, int family, uint16_t port_number, HostPort& out, bool& admitted) {
        if (!ep.is_object()) return bad(at, fmt::format("want an object, not {}", type_name(ep)));
        const Json* addrs;
        if (!array(ep, "addresses", at + ".addresses", addrs, true)) return false;
        if (addrs->empty()) return bad(at + ".addresses", "empty");
        const Json& a0 = (*addrs)[0];
        if (!a0.is_string()) return bad(at + ".addresses[0]", fmt::format("want a string, not {}", type_name(a0)));
        const Json* cond;
        if (!object(ep, "conditions", at + ".conditions", cond, false)) return false;
        bool ready = true, terminating = false;
        if (cond && (!boolean(*cond, "ready", at + ".conditions.ready", ready) ||
                     !boolean(*cond, "terminating", at + ".conditions.terminating", terminating)))
            return false;
        if (!family) return true;  // FQDN: nothing we dial without DNS
        const std::string& text = a0.get_ref<const std::string&>();
        unsigned char bin[sizeof(in6_addr)];
        char canon[INET6_ADDRSTRLEN];
        if (text.find('\0') != std::string::npos || inet_pton(family, text.c_str(), bin) != 1 ||
            !inet_ntop(family, bin, canon, sizeof canon))
            return bad(at + ".addresses[0]",
                       fmt::format("'{}' is not an {} address", quote(text), family == AF_INET ? "IPv4" : "IPv6"));
        if (!ready || terminating || port_number == 0) return true;
        out.host = canon;
        out.port = port_number;
        out.is_ip = true;
        admitted = true;
        return true;
    }
};

bool parse_bounded(std::string_view text, size_t max, const char* what, Json& out, std::string& err) {
    if (text.size() > max) {
        err = fmt::format("{} larger than {} bytes ({})", what, max, text.size());
        return false;
    }
    std::string why;
    if (!parse_json(text, out, why)) {
        err = fmt::format("{}: {}", what, why);
        return false;
    }
    if (!out.is_object()) {
        err = fmt::format("{}: want an object, not {}", what, out.type_name());
        return false;
    }
    return true;
}

WatchEventType event_type(std::string_view t, bool& ok) {
    ok = true;
    if (t == "ADDED") return WatchEventType::added;
    if (t == "MODIFIED") return WatchEventType::modified;
    if (t == "DELETED") return WatchEventType::deleted;
    if (t == "BOOKMARK") return WatchEventType::bookmark;
    if (t == "ERROR") return WatchEventType::error;
    ok = false;
    return WatchEventType::error;
}

}  // namespace

bool valid_resource_version(std::string_view rv) {
    if (rv.empty() || rv.size() > kMaxResourceVersion) return false;
    return std::all_of(rv.begin(), rv.end(), [](char c) {
        return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '.' || c == '_' ||
               c == '-';
    });
}

bool valid_zone(std::string_view zone, std::string& why) {
    auto alnum = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); };
    if (zone.empty()) return true;
    if (zone.size() > kMaxZone) {
        why = fmt::format("'{}' is {} bytes, at most {}", quote(zone), zone.size(), kMaxZone);
        return false;
    }
    if (!std::all_of(zone.begin(), zone.end(), [&](char c) { return alnum(c) || c == '.' || c == '_' || c == '-'; })) {
        why = fmt::format("'{}' is not a label value (want A-Z a-z 0-9 . _ -)", quote(zone));
        return false;
    }
    if (!alnum(zone.front()) || !alnum(zone.back())) {
        why = fmt::format("'{}' is not a label value (must begin and end with a letter or digit)", quote(zone));
        return false;
    }
    return true;
}

bool parse_slice_list(std::string_view body, SliceList& out, std::string& err) {
    out = SliceList();
    try {
        Json doc;
        if (!parse_bounded(body, kMaxSliceListBytes, "endpoint slice list", doc, err)) return false;
        Reader r{err};
        if (!r.kind(doc, "list", "EndpointSliceList") || !r.metadata(doc, "list", nullptr, out.resource_version, true))
            return false;
        // Present, as kube-apiserver always sends it; null (a Go nil slice) is an empty list.
        if (doc.find("items") == doc.end()) return r.bad("list.items", "missing");
        const Json* items;
        if (!r.array(doc, "items", "list.items", items, false)) return false;
        if (!items) return true;
        if (items->size() > kMaxSlices)
            return r.bad("list.items", fmt::format("{} endpoint slices, at most {}", items->size(), kMaxSlices));
        for (size_t i = 0; i < items->size(); ++i) {
            DiscoveredSlice s;
            std::string rv;
            if (!r.slice((*items)[i], fmt::format("items[{}]", i), s, rv, false)) return false;
            out.items.push_back(std::move(s));
        }
        return true;
    } catch (const std::exception& e) {
        err = fmt::format("endpoint slice list: {}", e.what());
    }
    return false;
}

bool parse_watch_event(std::string_view line, WatchEvent& out, std::string& err) {
    out = WatchEvent();
    try {
        Json doc;
        if (!parse_bounded(line, kMaxWatchEventBytes, "watch event", doc, err)) return false;
        Reader r{err};
        std::string type;
        if (!r.string(doc, "type", "event.type", type, true)) return false;
        bool known;
        out.type = event_type(type, known);
        if (!known) return r.bad("event.type", fmt::format("unknown '{}'", quote(type)));
        const Json* obj;
        if (!r.object(doc, "object", "event.object", obj, true)) return false;
        switch (out.type) {
        case WatchEventType::bookmark:
            return r.metadata(*obj, "event.object", nullptr, out.resource_version, true);
        case WatchEventType::error: {
            long long code = 0;
            bool has_code;
            if (!r.kind(*obj, "event.object", "Status") || !r.integer(*obj, "code", "event.object.code", code, has_code) ||
                !r.string(*obj, "message", "event.object.message", out.message, false))
                return false;
            if (code < 0 || code > 999) return r.bad("event.object.code", fmt::format("{} out of range", code));
            out.code = static_cast<int>(code);
            if (out.message.size() > 512) out.message.resize(512);
            return true;
        }
        default:
            return r.slice(*obj, "event.object", out.slice, out.resource_version, true);
        }
    } catch (const std::exception& e) {
        err = fmt::format("watch event: {}", e.what());
    }
    return false;
}

}  // namespace kprism
