// SPDX-License-Identifier: Apache-2.0
// Fuzzes the admin endpoint's HTTP request head parser (src/admin/http_request.cc), fed in pieces, against its invariants.
//
// Input: the bytes a client sends, as they are. Each input is parsed in one piece, in pseudo-random
// pieces (seeded by a hash of the input) and one byte at a time (inputs up to 4 KiB), as the admin
// connection feeds whatever each read returns; every way must end in the same state and request.
#include <string>
#include <string_view>

#include "fuzz_util.h"
#include "kprism/admin/http_request.h"

using kprism::HttpRequest;
using kprism::HttpRequestParser;
using State = HttpRequestParser::State;

namespace {

struct Outcome {
    State state;
    int status;
    size_t consumed;
    HttpRequest req;
};

bool token_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

void check_done(const uint8_t* data, size_t fed, const HttpRequestParser& p) {
    const HttpRequest& r = p.request();
    std::string_view in(reinterpret_cast<const char*>(data), fed);
    size_t c = p.consumed();
    FUZZ_CHECK(c >= 4 && c <= fed && c <= HttpRequestParser::kMaxHead && c <= p.buffered());
    FUZZ_CHECK(in.substr(c - 4, 4) == "\r\n\r\n");
    FUZZ_CHECK(r.method == "GET" || r.method == "HEAD");  // anything else is 405
    FUZZ_CHECK(!r.target.empty() && r.target[0] == '/' && r.target.size() <= HttpRequestParser::kMaxTarget);
    for (char ch : r.target) FUZZ_CHECK(static_cast<unsigned char>(ch) > 0x20 && static_cast<unsigned char>(ch) < 0x7f);
    FUZZ_CHECK(r.minor == 0 || r.minor == 1);
    // The request line is exactly what was sent.
    std::string line = r.method + " " + r.target + " HTTP/1." + std::to_string(r.minor) + "\r\n";
    FUZZ_CHECK(in.substr(0, line.size()) == line);
    // path and query split the target at its first '?'.
    FUZZ_CHECK(r.path.find('?') == std::string::npos);
    FUZZ_CHECK(r.target == (r.target.find('?') == std::string::npos ? r.path : r.path + "?" + r.query));
    // Every parameter of the query is found, with its value.
    std::string_view q = r.query;
    while (!q.empty()) {
        size_t amp = q.find('&');
        std::string_view item = q.substr(0, amp);
        size_t eq = item.find('=');
        std::string_view name = item.substr(0, eq);
        FUZZ_CHECK(r.has_param(name));
        if (amp == std::string_view::npos) break;
        q.remove_prefix(amp + 1);
    }
    r.param("verbose");
    r.has_param("verbose");
    // Header names are tokens; exactly one Host in HTTP/1.1.
    std::string_view head = in.substr(line.size(), c - line.size() - 2);
    int hosts = 0;
    while (!head.empty()) {
        size_t eol = head.find("\r\n");
        FUZZ_CHECK(eol != std::string_view::npos);
        std::string_view h = head.substr(0, eol);
        size_t colon = h.find(':');
        FUZZ_CHECK(colon != std::string_view::npos && colon > 0);
        for (char ch : h.substr(0, colon)) FUZZ_CHECK(token_char(ch));
        std::string name(h.substr(0, colon));
        for (auto& ch : name) ch = static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
        hosts += name == "host";
        head.remove_prefix(eol + 2);
    }
    if (r.minor == 1) FUZZ_CHECK(hosts == 1);
}

Outcome run(const uint8_t* data, size_t size, const std::vector<size_t>& pieces) {
    HttpRequestParser p;
    State st = State::need_more;
    size_t off = 0;
    for (size_t n : pieces) {
        if (st != State::need_more) break;  // the connection answers and stops parsing here
        fuzz::Piece piece(data + off, n);
        st = p.feed(piece.data(), piece.size());
        off += n;
        FUZZ_CHECK(st == p.state());
        FUZZ_CHECK(p.buffered() <= HttpRequestParser::kMaxHead + 1);
        FUZZ_CHECK(p.buffered() <= off);
    }
    FUZZ_CHECK(off <= size);
    if (st == State::done) {
        check_done(data, off, p);
    } else if (st == State::error) {
        int s = p.error_status();
        FUZZ_CHECK(s == 400 || s == 405 || s == 414 || s == 431 || s == 505);
        FUZZ_CHECK(!p.error().empty());
        if (s == 405) FUZZ_CHECK(p.request().method != "GET" && p.request().method != "HEAD");
    } else {
        FUZZ_CHECK(off == size);
        FUZZ_CHECK(size <= HttpRequestParser::kMaxHead);  // more than the bound is never "need more"
    }
    if (st != State::need_more) {  // done or failed stays so
        FUZZ_CHECK(p.feed("GET / HTTP/1.0\r\n\r\n") == st);
    }
    return {st, p.error_status(), p.consumed(), p.request()};
}

void compare(const Outcome& a, const Outcome& b) {
    FUZZ_CHECK(a.state == b.state);
    if (a.state == State::done) {
        FUZZ_CHECK(a.consumed == b.consumed);
        FUZZ_CHECK(a.req.method == b.req.method && a.req.target == b.req.target && a.req.minor == b.req.minor);
    }
    // Two errors may differ in status: a piece can end where a prefix is already wrong in one way
    // (a target over 2048 bytes: 414) before a later byte is wrong in another (a control byte: 400).
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    Outcome one = run(data, size, fuzz::whole(size));
    compare(one, run(data, size, fuzz::random_pieces(size, fuzz::hash(data, size))));
    if (size <= 4096) compare(one, run(data, size, fuzz::bytewise(size)));
    return 0;
}
