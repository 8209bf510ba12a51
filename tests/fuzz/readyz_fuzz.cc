// SPDX-License-Identifier: Apache-2.0
// Fuzzes the readiness probe's HTTP response parser (src/upstreams/http_response.cc), fed in pieces, against its invariants;
// and the same parser in Body::whole mode with the /status parser behind it, as `kprism status` reads the admin endpoint;
// and the failing-check names of a not-ready body (src/upstreams/readyz_body.cc), against their bounds.
//
// Input: the bytes an upstream sends, as they are. Each input is parsed several ways - in one piece,
// in pseudo-random pieces (seeded by a hash of the input), one byte at a time (inputs up to 4 KiB),
// each then followed by the peer's close - with the probe's bounds (16 KiB, 1 KiB excerpt) and with
// small bounds derived from the hash. Every way must end in the same state and status.
#include <string>

#include "fuzz_util.h"
#include "kprism/upstreams/http_response.h"
#include "kprism/upstreams/readyz_body.h"
#include "kprism/admin/status.h"

using kprism::HttpResponseParser;
using State = HttpResponseParser::State;

namespace {

struct Outcome {
    State state;
    State after_eof;
    int status;
    bool ended;       // read exactly to its framed end, before the close
    size_t received;  // then: the bytes it took, its length in the stream
};

Outcome run(const uint8_t* data, size_t size, const std::vector<size_t>& pieces, size_t max, size_t excerpt,
            bool reuse) {
    HttpResponseParser p(max, excerpt, HttpResponseParser::Body::excerpt, reuse);
    State st = State::need_more;
    size_t off = 0;
    for (size_t n : pieces) {
        if (st != State::need_more) break;  // the probe stops reading (conclude()) here
        fuzz::Piece piece(data + off, n);
        st = p.feed(piece.data(), piece.size());
        off += n;
        FUZZ_CHECK(st == p.state());
        FUZZ_CHECK(p.buffered() <= max);  // never keeps more than the bound
        FUZZ_CHECK(p.buffered() <= off);  // nor more than it was given
        if (st == State::error) FUZZ_CHECK(!p.error().empty());
        // Reused only after a complete, exactly delimited answer, and only when asked for.
        FUZZ_CHECK(!p.reusable() || (reuse && st == State::done));
        FUZZ_CHECK(!p.reusable() || (p.ended() && !p.trailing()));
        FUZZ_CHECK(!p.ended() || st == State::done);
        // The bytes after a framed end are never taken: they are the caller's to see.
        FUZZ_CHECK(!p.ended() || p.received() + (p.trailing() ? 1 : 0) <= off);
        FUZZ_CHECK(!p.trailing() || st == State::done);
    }
    FUZZ_CHECK(off <= size);
    Outcome o{st, State::need_more, p.status(), p.ended(), p.ended() ? p.received() : 0};
    // A parser that is done or failed stays so, whatever follows.
    if (st != State::need_more) {
        static const char more[] = "HTTP/1.1 200 OK\r\n\r\n";
        FUZZ_CHECK(p.feed(more, sizeof more - 1) == st);
        FUZZ_CHECK(p.status() == o.status);
    }
    o.after_eof = p.eof();
    FUZZ_CHECK(o.after_eof != State::need_more);  // the peer's close always concludes
    FUZZ_CHECK(p.eof() == o.after_eof);
    if (o.after_eof == State::done) {
        FUZZ_CHECK(p.status() >= 100 && p.status() <= 999);
        std::string body = p.body_excerpt();
        FUZZ_CHECK(body.size() <= excerpt);
        for (char c : body) FUZZ_CHECK(static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f);
        FUZZ_CHECK(body.empty() || body.back() != ' ');
    } else {
        FUZZ_CHECK(!p.error().empty());
    }
    return o;
}

void compare(const Outcome& a, const Outcome& b) {
    FUZZ_CHECK(a.state == b.state);
    FUZZ_CHECK(a.after_eof == b.after_eof);
    if (a.after_eof == State::done) FUZZ_CHECK(a.status == b.status);
    // Where a framed response ends in the stream does not depend on how it arrived.
    FUZZ_CHECK(a.ended == b.ended);
    FUZZ_CHECK(a.received == b.received);
}

// The outcome does not depend on how the bytes arrive (whether the connection can be reused
// does: bytes after the answer in the same piece forbid it).
void all_ways(const uint8_t* data, size_t size, uint64_t h, size_t max, size_t excerpt, bool reuse = false) {
    Outcome one = run(data, size, fuzz::whole(size), max, excerpt, reuse);
    compare(one, run(data, size, fuzz::random_pieces(size, h), max, excerpt, reuse));
    if (size <= 4096) compare(one, run(data, size, fuzz::bytewise(size), max, excerpt, reuse));
}

// Body::whole, as `kprism status` and `kprism reload` read /status: the same outcome however the
// bytes arrive, the body never beyond the bound, and whatever body results goes through the bounded
// /status parser (nlohmann-json with the size and depth limits of json.h) without crashing.
struct Whole {
    State after_eof;
    int status;
    std::string body;
};

Whole run_whole(const uint8_t* data, size_t size, const std::vector<size_t>& pieces, size_t max) {
    (void)size;  // the pieces add up to it
    HttpResponseParser p(max, 0, HttpResponseParser::Body::whole);
    State st = State::need_more;
    size_t off = 0;
    for (size_t n : pieces) {
        if (st != State::need_more) break;
        fuzz::Piece piece(data + off, n);
        st = p.feed(piece.data(), piece.size());
        off += n;
        FUZZ_CHECK(st == p.state());
        FUZZ_CHECK(p.buffered() <= max);
        if (st == State::error) FUZZ_CHECK(!p.error().empty());
    }
    Whole w{p.eof(), p.status(), ""};
    FUZZ_CHECK(w.after_eof != State::need_more);
    if (w.after_eof == State::done) {
        w.body = p.body();
        FUZZ_CHECK(w.body.size() <= max);
        FUZZ_CHECK(p.status() >= 100 && p.status() <= 999);
    } else {
        FUZZ_CHECK(!p.error().empty());
    }
    return w;
}

void whole_ways(const uint8_t* data, size_t size, uint64_t h, size_t max) {
    Whole one = run_whole(data, size, fuzz::whole(size), max);
    Whole pieces = run_whole(data, size, fuzz::random_pieces(size, h), max);
    FUZZ_CHECK(one.after_eof == pieces.after_eof);
    if (one.after_eof != State::done) return;
    FUZZ_CHECK(one.status == pieces.status);
    FUZZ_CHECK(one.body == pieces.body);
    kprism::StatusDoc doc;
    std::string error;
    if (!kprism::parse_status_json(one.body, doc, error)) FUZZ_CHECK(!error.empty());
}

// The names a failing body yields: at most kMaxNames, each 1..kMaxNameLen bytes of
// [A-Za-z0-9/_.-], no repeats, found in the body as "[-]NAME"; the same from any prefix cut at
// kReadyzBodyMax (what the probe reads), and str() made of them.
void failing_checks(const uint8_t* data, size_t size) {
    std::string_view body(reinterpret_cast<const char*>(data), size);
    kprism::FailingChecks f = kprism::parse_readyz_body(body);
    FUZZ_CHECK(f.names.size() <= kprism::FailingChecks::kMaxNames);
    for (size_t i = 0; i < f.names.size(); ++i) {
        const std::string& n = f.names[i];
        FUZZ_CHECK(!n.empty() && n.size() <= kprism::FailingChecks::kMaxNameLen);
        for (char c : n)
            FUZZ_CHECK((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '/' ||
                       c == '_' || c == '.' || c == '-');
        FUZZ_CHECK(body.find("[-]" + n) != std::string_view::npos);
        for (size_t j = 0; j < i; ++j) FUZZ_CHECK(f.names[j] != n);
    }
    FUZZ_CHECK(f.empty() == f.str().empty());
    FUZZ_CHECK(f.str().size() <= kprism::FailingChecks::kMaxNames * (kprism::FailingChecks::kMaxNameLen + 1) + 32);
    FUZZ_CHECK(f.etcd() == (f.has("etcd") || f.has("etcd-readiness")));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    uint64_t h = fuzz::hash(data, size);
    all_ways(data, size, h, 16384, 1024);            // HttpResponseParser()
    all_ways(data, size, h ^ 2, 16384, 8192, true);  // the probe's, on a connection it may keep
    whole_ways(data, size, h, 65536);      // /status as the CLI reads it
    failing_checks(data, size);            // the failing checks of a not-ready body
    uint64_t s = h;
    size_t max = fuzz::next(s) % 600, excerpt = fuzz::next(s) % 200;
    all_ways(data, size, h ^ 1, max, excerpt, (s & 1) != 0);
    return 0;
}
