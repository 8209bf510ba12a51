// SPDX-License-Identifier: Apache-2.0
// Fuzzes discovery's parsing layer (src/discovery/parse.cc): HttpStream, LineSplitter, parse_slice_list, parse_watch_event.
//
// Input: what an apiserver sends to a list or watch request, as it is. It is read three ways:
// - as an HTTP response through HttpStream, fed whole, in pseudo-random pieces (seeded by a hash of
//   the input) and one byte at a time (inputs up to 4 KiB), each then followed by the peer's close;
//   every way must end in the same state, status and body. The body then goes through
//   parse_slice_list (as a list answer) and, split by a LineSplitter, each line through
//   parse_watch_event (as a watch stream);
// - as a JSON document: the input itself through parse_slice_list and parse_watch_event (so that
//   seeds and mutations of bare JSON reach the slice rules without an HTTP head);
// - as a watch stream: the input through a LineSplitter with a small bound derived from the hash,
//   whole and in pieces, which must yield the same lines.
// - as a snapshot file: the input through parse_snapshot.
// Checked: no crash or UB; every failure has a one-line reason; a list has at most kMaxSlices
// slices, a slice at most kMaxSliceEndpoints endpoints, each an IP literal with a port, canonical
// and unique in its slice, each zone kept a valid label value of an admitted endpoint and each zone
// ignored given a bounded one-line reason; a snapshot read renders and reads back the same; events
// carry what their type promises. Every endpoint of a slice or a
// snapshot goes through the address rules (address_rules.h) as discovery applies them: by default
// none admitted is loopback, unspecified, link-local, multicast or broadcast (also IPv4-mapped),
// told here from the address bytes on their own; with an allow-list, each admitted one is in it;
// never kprism's own listeners. Every accepted resourceVersion is 1 to 64 bytes of
// [0-9A-Za-z._-] (it goes back into a watch's request line) and makes a request head of exactly
// one request line.
#include <arpa/inet.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "kprism/base/address_rules.h"
#include "kprism/discovery/discovery.h"
#include "kprism/discovery/parse.h"
#include "kprism/discovery/snapshot.h"
#include "kprism/upstreams/upstream.h"

using kprism::DiscoveredSlice;
using kprism::HostPort;
using kprism::HttpStream;
using kprism::LineSplitter;
using kprism::WatchEvent;
using kprism::WatchEventType;
using State = HttpStream::State;

namespace {

void check_reason(const std::string& err) {
    FUZZ_CHECK(!err.empty());
    FUZZ_CHECK(err.find('\n') == std::string::npos);
}

// Refused by the byte rules alone (IPv4-mapped IPv6 as its IPv4 address).
bool in_refused_range(const unsigned char* b, bool v6) {
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (v6 && std::equal(mapped, mapped + 12, b)) return in_refused_range(b + 12, false);
    const size_t n = v6 ? 16 : 4;
    if (std::all_of(b, b + n, [](unsigned char c) { return c == 0; })) return true;  // unspecified
    if (!v6)
        return b[0] == 127 || (b[0] == 169 && b[1] == 254) || (b[0] >= 224 && b[0] <= 239) ||
               std::all_of(b, b + 4, [](unsigned char c) { return c == 0xff; });
    const bool loop = std::all_of(b, b + 15, [](unsigned char c) { return c == 0; }) && b[15] == 1;
    return loop || (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) || b[0] == 0xff;
}

// The address rules on one endpoint, as membership applies them to slices and snapshots.
void check_rules(const HostPort& hp) {
    static const kprism::OwnListeners listeners = [] {
        std::vector<kprism::OwnListener> v(2);
        kprism::ip_to_sockaddr("127.0.0.1", 7445, v[0].addr);
        kprism::ip_to_sockaddr("10.1.2.3", 6443, v[1].addr);
        return kprism::OwnListeners(std::move(v));
    }();
    static const kprism::AddressRules defaults({}, listeners);
    static const kprism::AddressRules allow10 = [] {
        kprism::Cidr c;
        kprism::parse_cidr("10.0.0.0/8", c, nullptr);
        return kprism::AddressRules({c}, listeners);
    }();
    sockaddr_storage ss;
    FUZZ_CHECK(kprism::ip_to_sockaddr(hp.host, hp.port, ss));
    const bool v6 = ss.ss_family == AF_INET6;
    const unsigned char* b = v6 ? reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr.s6_addr
                                : reinterpret_cast<const unsigned char*>(&reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr);
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    const unsigned char* v4 = !v6 ? b : std::equal(mapped, mapped + 12, b) ? b + 12 : nullptr;
    const bool listener = v4 && ((hp.port == 7445 && v4[0] == 127 && v4[1] == 0 && v4[2] == 0 && v4[3] == 1) ||
                                 (hp.port == 6443 && v4[0] == 10 && v4[1] == 1 && v4[2] == 2 && v4[3] == 3));
    const bool refused = in_refused_range(b, v6);
    const bool admitted = defaults.refuse(kprism::as_sockaddr(ss)).empty();
    FUZZ_CHECK(admitted == (!refused && !listener));
    if (allow10.refuse(kprism::as_sockaddr(ss)).empty()) FUZZ_CHECK(v4 && v4[0] == 10 && !listener);
}

// Zones kept (a slice's or a snapshot's): each of an endpoint it has, a label value checked by
// hand: 1 to 63 bytes of [A-Za-z0-9._-], a letter or digit at both ends.
void check_zones(const std::vector<HostPort>& endpoints, const std::map<std::string, std::string>& zones) {
    FUZZ_CHECK(zones.size() <= endpoints.size());
    auto alnum = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); };
    for (const auto& [key, zone] : zones) {
        const std::string& addr = key;  // clang 14 cannot capture a structured binding in a lambda
        FUZZ_CHECK(std::any_of(endpoints.begin(), endpoints.end(), [&](const HostPort& hp) { return hp.str() == addr; }));
        FUZZ_CHECK(!zone.empty() && zone.size() <= 63 && alnum(zone.front()) && alnum(zone.back()));
        for (char c : zone) FUZZ_CHECK(alnum(c) || c == '.' || c == '_' || c == '-');
    }
}

void check_slice(const DiscoveredSlice& s) {
    FUZZ_CHECK(!s.name.empty());
    FUZZ_CHECK(s.endpoints.size() <= kprism::kMaxSliceEndpoints);
    for (size_t i = 0; i < s.endpoints.size(); ++i) {
        const HostPort& hp = s.endpoints[i];
        FUZZ_CHECK(hp.is_ip);
        FUZZ_CHECK(hp.port != 0);
        // The canonical text of an address of either family, never with brackets...
        unsigned char bin[16];
        char canon[INET6_ADDRSTRLEN];
        int family = hp.host.find(':') == std::string::npos ? AF_INET : AF_INET6;
        FUZZ_CHECK(inet_pton(family, hp.host.c_str(), bin) == 1);
        FUZZ_CHECK(inet_ntop(family, bin, canon, sizeof canon) != nullptr && hp.host == canon);
        // ...which reads back as the same endpoint from its str() (what the snapshot stores)...
        HostPort back;
        std::string err;
        FUZZ_CHECK(kprism::parse_host_port(hp.str(), back, &err));
        FUZZ_CHECK(back == hp);
        // ...once per slice.
        for (size_t j = 0; j < i; ++j) FUZZ_CHECK(!(s.endpoints[j] == hp));
        check_rules(hp);
    }
    check_zones(s.endpoints, s.zones);
    // An ignored zone: an endpoint's, not also kept, with a bounded one-line reason.
    FUZZ_CHECK(s.zone_errors.size() <= s.endpoints.size());
    for (const auto& [key, why] : s.zone_errors) {
        const std::string& addr = key;
        FUZZ_CHECK(s.zones.count(addr) == 0);
        FUZZ_CHECK(std::any_of(s.endpoints.begin(), s.endpoints.end(), [&](const HostPort& hp) { return hp.str() == addr; }));
        check_reason(why);
        FUZZ_CHECK(why.size() <= 160);
    }
}

// Checked by hand, not by valid_resource_version(): the set the request line may carry.
void check_resource_version(const std::string& rv) {
    FUZZ_CHECK(!rv.empty() && rv.size() <= 64);
    for (char c : rv)
        FUZZ_CHECK((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '.' || c == '_' ||
                   c == '-');
    std::string req = kprism::discovery_request(rv, 300, "10.0.0.1");
    FUZZ_CHECK(req.find("&resourceVersion=" + rv + "&timeoutSeconds=300 HTTP/1.1\r\nHost: 10.0.0.1\r\n") !=
               std::string::npos);
    FUZZ_CHECK(std::count(req.begin(), req.end(), '\n') == 6 && req.find("\r\n\r\n") == req.size() - 4);
}

void check_list(std::string_view body) {
    kprism::SliceList l;
    std::string err;
    if (!kprism::parse_slice_list(body, l, err)) {
        check_reason(err);
        return;
    }
    FUZZ_CHECK(body.size() <= kprism::kMaxSliceListBytes);
    check_resource_version(l.resource_version);
    FUZZ_CHECK(l.items.size() <= kprism::kMaxSlices);
    for (const auto& s : l.items) check_slice(s);
}

void check_event(std::string_view line) {
    WatchEvent e;
    std::string err;
    if (!kprism::parse_watch_event(line, e, err)) {
        check_reason(err);
        return;
    }
    FUZZ_CHECK(line.size() <= kprism::kMaxWatchEventBytes);
    switch (e.type) {
    case WatchEventType::added:
    case WatchEventType::modified:
    case WatchEventType::deleted:
        check_resource_version(e.resource_version);
        check_slice(e.slice);
        break;
    case WatchEventType::bookmark:
        check_resource_version(e.resource_version);
        FUZZ_CHECK(e.slice.endpoints.empty());
        break;
    case WatchEventType::error:
        FUZZ_CHECK(e.code >= 0 && e.code <= 999);
        FUZZ_CHECK(e.message.size() <= 512);
        FUZZ_CHECK(e.slice.endpoints.empty());
        break;
    }
}

struct Outcome {
    State state;         // after the last feed
    State after_eof;
    int status;
    std::string body;
};

Outcome run_http(const uint8_t* data, size_t size, const std::vector<size_t>& pieces) {
    HttpStream h;
    Outcome o{State::head, State::head, 0, ""};
    size_t off = 0;
    for (size_t n : pieces) {
        fuzz::Piece piece(data + off, n);
        off += n;
        State before = h.state();
        bool ok = h.feed(std::string_view(piece.data(), piece.size()), [&](std::string_view b) {
            FUZZ_CHECK(!b.empty());
            FUZZ_CHECK(h.state() == State::body || h.state() == State::done);
            o.body.append(b);
            return true;
        });
        FUZZ_CHECK(ok == (h.state() != State::error));
        if (h.state() == State::error) check_reason(h.error());
        // Done or failed stays so.
        if (before == State::done || before == State::error) FUZZ_CHECK(h.state() == before);
        if (h.state() == State::body || h.state() == State::done) FUZZ_CHECK(h.status() >= 200 && h.status() <= 999);
        FUZZ_CHECK(o.body.size() <= off);
    }
    FUZZ_CHECK(off == size);
    o.state = h.state();
    o.status = h.status();
    bool done = h.eof();
    o.after_eof = h.state();
    FUZZ_CHECK(done == (o.after_eof == State::done));
    FUZZ_CHECK(o.after_eof == State::done || o.after_eof == State::error);  // the close concludes
    if (o.after_eof == State::error) check_reason(h.error());
    FUZZ_CHECK(h.eof() == done);
    if (o.state == State::body && h.chunked()) FUZZ_CHECK(o.after_eof == State::error);
    return o;
}

void compare(const Outcome& a, const Outcome& b) {
    FUZZ_CHECK(a.state == b.state);
    FUZZ_CHECK(a.after_eof == b.after_eof);
    FUZZ_CHECK(a.status == b.status);
    // A failure may come a piece later or earlier; up to it, the body is the same.
    if (a.state != State::error) FUZZ_CHECK(a.body == b.body);
}

// The lines of `data` fed in `pieces` to a splitter bounded by `max`; `ok` false once it failed.
std::vector<std::string> lines_of(std::string_view data, const std::vector<size_t>& pieces, size_t max, bool& ok) {
    LineSplitter s(max);
    std::vector<std::string> lines;
    ok = true;
    size_t off = 0;
    for (size_t n : pieces) {
        fuzz::Piece piece(reinterpret_cast<const uint8_t*>(data.data()) + off, n);
        off += n;
        ok = s.feed(std::string_view(piece.data(), piece.size()), [&](std::string_view line) {
            FUZZ_CHECK(!line.empty() && line.size() <= max);
            FUZZ_CHECK(line.find('\n') == std::string_view::npos);
            lines.emplace_back(line);
            return true;
        });
        FUZZ_CHECK(s.buffered() <= max + 1);
        if (!ok) {
            check_reason(s.error());
            FUZZ_CHECK(!s.feed("\n", [](std::string_view) { return true; }));  // stays failed
            break;
        }
    }
    return lines;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    uint64_t h = fuzz::hash(data, size);
    std::string_view input(reinterpret_cast<const char*>(data), size);

    // As an HTTP response, three ways; then its body as a list and as a watch stream.
    Outcome one = run_http(data, size, fuzz::whole(size));
    compare(one, run_http(data, size, fuzz::random_pieces(size, h)));
    if (size <= 4096) compare(one, run_http(data, size, fuzz::bytewise(size)));
    if (one.after_eof == State::done) {
        check_list(one.body);
        bool ok;
        for (const std::string& line : lines_of(one.body, fuzz::whole(one.body.size()), 1 << 20, ok)) check_event(line);
    }

    // As bare JSON.
    check_list(input);
    check_event(input);

    // As a snapshot file.
    kprism::DiscoverySnapshot snap;
    std::string serr;
    if (kprism::parse_snapshot(input, snap, serr)) {
        FUZZ_CHECK(snap.endpoints.size() <= kprism::kMaxDiscovered);
        for (const HostPort& hp : snap.endpoints) {
            FUZZ_CHECK(hp.is_ip && hp.port != 0);
            check_rules(hp);
        }
        check_zones(snap.endpoints, snap.zones);
        // What kprism would write again reads back the same.
        kprism::DiscoverySnapshot again;
        FUZZ_CHECK(kprism::parse_snapshot(kprism::render_snapshot(snap), again, serr));
        FUZZ_CHECK(again.endpoints == snap.endpoints && again.zones == snap.zones);
    } else {
        check_reason(serr);
    }

    // As a watch stream with a small bound: the same lines however the bytes arrive.
    uint64_t s = h;
    size_t max = 1 + fuzz::next(s) % 256;
    bool ok_whole, ok_pieces;
    std::vector<std::string> a = lines_of(input, fuzz::whole(size), max, ok_whole);
    std::vector<std::string> b = lines_of(input, fuzz::random_pieces(size, h ^ 1), max, ok_pieces);
    FUZZ_CHECK(ok_whole == ok_pieces);
    if (ok_whole) FUZZ_CHECK(a == b);
    for (const std::string& line : a) check_event(line);
    return 0;
}
