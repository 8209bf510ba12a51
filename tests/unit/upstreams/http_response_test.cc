// SPDX-License-Identifier: Apache-2.0
// The readiness response parser: status classes, bounds, and hostile input.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <vector>

#include "kprism/upstreams/http_response.h"
#include "kprism/upstreams/readyz_body.h"

using kprism::HttpResponseParser;
using State = HttpResponseParser::State;

namespace {
State feed_all(HttpResponseParser& p, std::string_view s, size_t step = 1) {
    State st = State::need_more;
    for (size_t i = 0; i < s.size() && st == State::need_more; i += step)
        st = p.feed(s.data() + i, std::min(step, s.size() - i));
    return st;
}
}  // namespace

TEST(HttpResponse, OkIsDoneAtTheHeaders) {
    for (size_t step : {size_t{1}, size_t{3}, size_t{1000}}) {
        HttpResponseParser p;
        EXPECT_EQ(feed_all(p, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", step), State::done);
        EXPECT_EQ(p.status(), 200);
    }
}

TEST(HttpResponse, NotReadyKeepsABodyExcerpt) {
    HttpResponseParser p;
    std::string body = "[+]ping ok\n[-]etcd failed: reason withheld\nreadyz check failed\n";
    std::string r = "HTTP/1.1 500 Internal Server Error\r\ncontent-length: " + std::to_string(body.size()) +
                    "\r\n\r\n" + body;
    EXPECT_EQ(feed_all(p, r, 7), State::done);
    EXPECT_EQ(p.status(), 500);
    EXPECT_EQ(p.body_excerpt(), "[+]ping ok [-]etcd failed: reason withheld readyz check failed");
}

TEST(HttpResponse, BodyUntilEofWithoutContentLength) {
    HttpResponseParser p;
    EXPECT_EQ(feed_all(p, "HTTP/1.0 503 Service Unavailable\r\n\r\nnot yet"), State::need_more);
    EXPECT_EQ(p.eof(), State::done);
    EXPECT_EQ(p.status(), 503);
    EXPECT_EQ(p.body_excerpt(), "not yet");
}

TEST(HttpResponse, GarbageIsAnError) {
    HttpResponseParser p;
    EXPECT_EQ(feed_all(p, "NOT HTTP AT ALL\r\n\r\n"), State::error);
    EXPECT_EQ(p.error(), "not an HTTP response");
}

TEST(HttpResponse, MalformedStatusLines) {
    for (const char* bad : {"HTTP/2 200 OK\r\n\r\n", "HTTP/1.1 2x0 OK\r\n\r\n", "HTTP/1.1 099 X\r\n\r\n",
                            "HTTP/1.1200 OK\r\n\r\n", "HTTP/1.x 200 OK\r\n\r\n"}) {
        HttpResponseParser p;
        EXPECT_EQ(feed_all(p, bad), State::error) << bad;
    }
    HttpResponseParser short_line;
    EXPECT_EQ(feed_all(short_line, "HTTP/1.1\r\n\r\n"), State::error);
}

TEST(HttpResponse, OversizedHeadersAreBounded) {
    HttpResponseParser p(1024);
    std::string r = "HTTP/1.1 500 X\r\n" + std::string(5000, 'a');
    EXPECT_EQ(feed_all(p, r, 100), State::error);
    EXPECT_NE(p.error().find("larger than 1024"), std::string::npos);
}

TEST(HttpResponse, HugeBodyStopsAtTheExcerpt) {
    HttpResponseParser p(16384, 64);
    std::string r = "HTTP/1.1 500 X\r\nContent-Length: 99999999\r\n\r\n" + std::string(200, 'b');
    EXPECT_EQ(feed_all(p, r, 50), State::done);
    EXPECT_EQ(p.body_excerpt().size(), 64u);
}

TEST(HttpResponse, EofBeforeAnything) {
    HttpResponseParser p;
    EXPECT_EQ(p.eof(), State::error);
    EXPECT_EQ(p.error(), "connection closed without a response");
    HttpResponseParser q;
    feed_all(q, "HTTP/1.1 200 OK\r\nX: y");
    EXPECT_EQ(q.eof(), State::error);
}

TEST(HttpResponse, ControlBytesInBodyAreScrubbed) {
    HttpResponseParser p;
    std::string r = std::string("HTTP/1.1 500 X\r\nContent-Length: 6\r\n\r\na\x1b[2Jb");
    feed_all(p, r);
    EXPECT_EQ(p.body_excerpt(), "a?[2Jb");
}

TEST(HttpResponse, CarriageReturnsAndTabsInTheExcerptAreSpaces) {
    HttpResponseParser p;
    feed_all(p, "HTTP/1.1 400 Bad Request\r\nContent-Length: 20\r\n\r\n<html>\r\n<head>\tx\r\n\r\n");
    EXPECT_EQ(p.body_excerpt(), "<html>  <head> x");
}

// Body::whole, as `kprism status` reads /status: the whole body whatever the status, to
// Content-Length or to the close, and never more than the bound.
TEST(HttpResponse, WholeBodyToContentLength) {
    std::string body(5000, 'j');
    std::string r = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5000\r\n\r\n" + body;
    for (size_t step : {size_t{1}, size_t{7}, size_t{100000}}) {
        HttpResponseParser p(65536, 0, HttpResponseParser::Body::whole);
        EXPECT_EQ(feed_all(p, r, step), State::done) << step;
        EXPECT_EQ(p.status(), 200);
        EXPECT_EQ(p.body(), body);
    }
    HttpResponseParser extra(65536, 0, HttpResponseParser::Body::whole);
    EXPECT_EQ(feed_all(extra, "HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\nnoMORE", 100), State::done);
    EXPECT_EQ(extra.status(), 404);
    EXPECT_EQ(extra.body(), "no") << "bytes past Content-Length are not the body";
}

TEST(HttpResponse, WholeBodyToTheClose) {
    HttpResponseParser p(65536, 0, HttpResponseParser::Body::whole);
    EXPECT_EQ(feed_all(p, "HTTP/1.0 200 OK\r\n\r\n{\"a\":\x01\"\xff\"}", 4), State::need_more);
    EXPECT_EQ(p.eof(), State::done);
    EXPECT_EQ(p.body(), "{\"a\":\x01\"\xff\"}") << "not scrubbed: the caller parses it";
    HttpResponseParser cut(65536, 0, HttpResponseParser::Body::whole);
    EXPECT_EQ(feed_all(cut, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"), State::need_more);
    EXPECT_EQ(cut.eof(), State::error);
    EXPECT_EQ(cut.error(), "connection closed inside the response body");
}

TEST(HttpResponse, WholeBodyIsBounded) {
    HttpResponseParser p(100, 0, HttpResponseParser::Body::whole);
    EXPECT_EQ(feed_all(p, "HTTP/1.1 200 OK\r\n\r\n" + std::string(200, 'x'), 50), State::error);
    EXPECT_EQ(p.error(), "response larger than 100 bytes");
    EXPECT_LE(p.buffered(), 100u);
    // A Content-Length beyond the bound fails at the headers, before the body is read.
    HttpResponseParser q(100, 0, HttpResponseParser::Body::whole);
    EXPECT_EQ(feed_all(q, "HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n", 100), State::error);
    EXPECT_EQ(q.error(), "response larger than 100 bytes");
    HttpResponseParser g(100, 0, HttpResponseParser::Body::whole);
    EXPECT_EQ(feed_all(g, "SSH-2.0-OpenSSH\r\n"), State::error);
    EXPECT_EQ(g.error(), "not an HTTP response");
}

// Keep-alive probes: a connection is reused only after a response that ends exactly
// where its Content-Length (or its last chunk) says, on HTTP/1.1, without "Connection: close".
TEST(HttpResponse, ReusableOnlyAfterAnExactlyDelimitedResponse) {
    auto parse = [](std::string_view r, size_t step = 1) {
        HttpResponseParser p(16384, 8192, HttpResponseParser::Body::excerpt, true);
        feed_all(p, r, step);
        return p;
    };
    for (size_t step : {size_t{1}, size_t{5}, size_t{1000}}) {
        auto ok = parse("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok", step);
        EXPECT_EQ(ok.state(), State::done);
        EXPECT_TRUE(ok.reusable());
    }
    // A 2xx waits for its body when the connection is to be reused.
    HttpResponseParser half(16384, 8192, HttpResponseParser::Body::excerpt, true);
    EXPECT_EQ(feed_all(half, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\no"), State::need_more);
    EXPECT_EQ(half.feed("k", 1), State::done);
    EXPECT_TRUE(half.reusable());
    std::string body = "[-]etcd failed: reason withheld\nreadyz check failed\n";
    EXPECT_TRUE(parse("HTTP/1.1 500 Internal Server Error\r\nContent-Length: " + std::to_string(body.size()) +
                      "\r\n\r\n" + body)
                    .reusable());
    EXPECT_FALSE(parse("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok").reusable());
    EXPECT_FALSE(parse("HTTP/1.1 200 OK\r\nconnection: Close\r\nContent-Length: 2\r\n\r\nok").reusable());
    EXPECT_FALSE(parse("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok").reusable());
    EXPECT_TRUE(parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n").reusable());
    // Chunked, but not alone, or with bytes after the last chunk: read to the close, or not ours.
    EXPECT_FALSE(parse("HTTP/1.1 500 X\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n").reusable());
    EXPECT_FALSE(parse("HTTP/1.1 500 X\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\nHTTP", 1000)
                     .reusable());
    EXPECT_FALSE(parse("HTTP/1.1 500 X\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n").reusable());
    EXPECT_FALSE(parse("HTTP/1.1 200 OK\r\n\r\nok").reusable());  // no length: ends at the peer's close
    EXPECT_FALSE(parse("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n", 1000).reusable());
    // A body past the excerpt is not read to its end: not reusable.
    std::string big(9000, 'x');
    EXPECT_FALSE(parse("HTTP/1.1 500 Internal Server Error\r\nContent-Length: 9000\r\n\r\n" + big, 1000).reusable());
    // Without reuse, a 2xx is done at its headers as before, and not reusable (its body was not read).
    HttpResponseParser plain;
    EXPECT_EQ(feed_all(plain, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"), State::done);
    EXPECT_FALSE(plain.reusable());
}

// Where a response ends is known only when it is framed (Content-Length, or chunked alone to its
// last chunk): then whatever follows it is no part of it, and the probe looks for any (ended(),
// trailing()). A response read to the close, or done at its headers or excerpt, has no known end.
TEST(HttpResponse, EndedOnlyAtAFramedEnd) {
    auto parse = [](std::string_view r, size_t step) {
        HttpResponseParser p(16384, 8192, HttpResponseParser::Body::excerpt, true);
        feed_all(p, r, step);
        return p;
    };
    const std::string ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    for (size_t step : {size_t{1}, size_t{4}, size_t{1000}}) {
        auto a = parse(ok, step);
        EXPECT_TRUE(a.ended()) << step;
        EXPECT_FALSE(a.trailing()) << step;
        EXPECT_EQ(a.received(), ok.size()) << step;
        // HTTP/1.0 and "Connection: close" end where their length says too, though not reusable.
        auto old = parse("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", step);
        EXPECT_TRUE(old.ended()) << step;
        EXPECT_FALSE(old.reusable()) << step;
        auto chunked = parse("HTTP/1.1 500 X\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", step);
        EXPECT_TRUE(chunked.ended()) << step;
        // 1xx before the answer are part of it.
        auto interim = parse("HTTP/1.1 100 Continue\r\n\r\n" + ok, step);
        EXPECT_TRUE(interim.ended()) << step;
        EXPECT_TRUE(interim.reusable()) << step;
    }
    // The next answer in the same piece: not taken, and said.
    auto two = parse(ok + ok, 1000);
    EXPECT_TRUE(two.ended());
    EXPECT_TRUE(two.trailing());
    EXPECT_EQ(two.received(), ok.size());
    EXPECT_FALSE(two.reusable());
    EXPECT_FALSE(parse("HTTP/1.1 200 OK\r\n\r\nok", 1000).ended());  // to the close
    std::string big(9000, 'x');
    EXPECT_FALSE(parse("HTTP/1.1 500 X\r\nContent-Length: 9000\r\n\r\n" + big, 1000).ended());  // the excerpt
    HttpResponseParser plain;  // not for reuse: a 2xx is done at its headers
    feed_all(plain, ok, 1000);
    EXPECT_FALSE(plain.ended());
}

// ---- chunked bodies and interim answers: what Go's net/http sends for a long /readyz failure ----

namespace {

// A body in chunks of `size` bytes, as a server sends it.
std::string chunked(std::string_view body, size_t size, std::string_view last = "0\r\n\r\n") {
    std::string out;
    for (size_t i = 0; i < body.size(); i += size) {
        std::string_view piece = body.substr(i, size);
        out += fmt::format("{:x}\r\n", piece.size()) + std::string(piece) + "\r\n";
    }
    return out + std::string(last);
}

// kube-apiserver's /readyz failure: one line per check, past 2048 bytes with enough hooks.
std::string readyz_failure(int hooks) {
    std::string b = "[+]ping ok\n[+]log ok\n[-]etcd failed: reason withheld\n";
    for (int i = 1; i <= hooks; ++i) b += fmt::format("[+]poststarthook/extra-{} ok\n", i);
    return b + "[+]shutdown ok\nreadyz check failed\n";
}

const char* kChunkedHead = "HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain; charset=utf-8\r\n"
                           "X-Content-Type-Options: nosniff\r\nTransfer-Encoding: chunked\r\n\r\n";

}  // namespace

TEST(HttpResponse, ChunkedFailureIsDecodedAndDoneAtTheLastChunk) {
    std::string body = readyz_failure(80);
    ASSERT_GT(body.size(), 2048u);
    ASSERT_LT(body.size(), 8192u);
    std::string r = kChunkedHead + chunked(body, 2048);
    for (size_t step : {size_t{1}, size_t{2}, size_t{7}, size_t{4096}, r.size()}) {
        HttpResponseParser p(16384, 8192, HttpResponseParser::Body::excerpt, true);
        EXPECT_EQ(feed_all(p, r, step), State::done) << step;  // no wait for the close or the deadline
        EXPECT_EQ(p.status(), 500);
        EXPECT_EQ(p.body(), body) << step;
        EXPECT_EQ(p.received(), r.size());
        EXPECT_TRUE(p.reusable()) << step;  // Go's failing /readyz: the probe connection stays
        EXPECT_EQ(kprism::parse_readyz_body(p.body()).str(), "etcd");
    }
    // Past the excerpt, a chunked failure is still read to its last chunk when the connection is to
    // be reused (the excerpt is what is kept without reuse), with trailers too.
    std::string big = readyz_failure(400);
    ASSERT_GT(big.size(), 8192u);
    std::string r2 = kChunkedHead + chunked(big, 4000, "0\r\nX-Trailer: one\r\n\r\n");
    for (size_t step : {size_t{1}, size_t{999}, r2.size()}) {
        HttpResponseParser p(65536, 8192, HttpResponseParser::Body::excerpt, true);
        EXPECT_EQ(feed_all(p, r2, step), State::done);
        EXPECT_TRUE(p.reusable()) << step;
        HttpResponseParser small(8192, 1024, HttpResponseParser::Body::excerpt, true);
        EXPECT_EQ(feed_all(small, r2, step), State::done);  // larger than max_bytes: the excerpt, no reuse
        EXPECT_FALSE(small.reusable()) << step;
        EXPECT_LE(small.buffered(), 8192u);
    }
}

TEST(HttpResponse, ChunkedWithExtensionsTrailersAndUppercaseHex) {
    std::string r = "HTTP/1.1 503 Service Unavailable\r\ntransfer-encoding:  Chunked \r\n\r\n"
                    "A;name=value\r\n[-]etcd fa\r\n1C ; x\r\niled: reason withheld\nreadyz\r\n"
                    "0\r\nX-Trailer: one\r\nX-Other: two\r\n\r\n";
    for (size_t step : {size_t{1}, size_t{3}, r.size()}) {
        HttpResponseParser whole(65536, 0, HttpResponseParser::Body::whole);
        EXPECT_EQ(feed_all(whole, r, step), State::done) << step;
        EXPECT_EQ(whole.body(), "[-]etcd failed: reason withheld\nreadyz");
    }
}

TEST(HttpResponse, InterimAnswersAreSkipped) {
    std::string r = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n"
                    "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 31\r\n\r\n[-]etcd failed: reason withheld";
    for (size_t step : {size_t{1}, size_t{5}, r.size()}) {
        HttpResponseParser p(16384, 8192);
        EXPECT_EQ(feed_all(p, r, step), State::done) << step;
        EXPECT_EQ(p.status(), 500);
        EXPECT_EQ(p.body(), "[-]etcd failed: reason withheld");
    }
    HttpResponseParser ok;
    EXPECT_EQ(feed_all(ok, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"), State::done);
    EXPECT_EQ(ok.status(), 200);
    // A close after an interim answer is no answer.
    HttpResponseParser cut;
    EXPECT_EQ(feed_all(cut, "HTTP/1.1 100 Continue\r\n\r\n"), State::need_more);
    EXPECT_EQ(cut.status(), 0);
    EXPECT_EQ(cut.eof(), State::error);
    EXPECT_EQ(cut.error(), "connection closed after an interim (1xx) response");
    // Bounded: a server that sends nothing but interim answers fails.
    std::string many;
    for (int i = 0; i < 9; ++i) many += "HTTP/1.1 100 Continue\r\n\r\n";
    HttpResponseParser flood;
    EXPECT_EQ(feed_all(flood, many + "HTTP/1.1 200 OK\r\n\r\n", 3), State::error);
    EXPECT_EQ(flood.error(), "more than 8 interim (1xx) responses");
    HttpResponseParser sw;
    EXPECT_EQ(feed_all(sw, "HTTP/1.1 101 Switching Protocols\r\n\r\n"), State::error);
}

TEST(HttpResponse, MalformedChunkedBodiesAreErrorsNotWaits) {
    const std::string head = "HTTP/1.1 500 X\r\nTransfer-Encoding: chunked\r\n\r\n";
    struct Bad {
        std::string body;
        std::string error;
    };
    const std::vector<Bad> cases = {
        {"zz\r\nabc", "malformed chunk size 'zz'"},
        {"\r\nabc", "malformed chunk size ''"},
        {"-1\r\nabc", "malformed chunk size '-1'"},
        {"0x10\r\nabc", "malformed chunk size '0x10'"},
        {"5 5\r\nabc", "malformed chunk size '5 5'"},
        {"ffffffffffffffffff\r\n", "chunk size 'ffffffffffffffffff' too large"},
        {"3\nabc", "malformed chunked body: a line not ended by CRLF"},
        {"3\r\nabcX\r\n0\r\n\r\n", "malformed chunked body: a chunk's data not followed by CRLF"},
        {"3\r\nabc\r0\r\n\r\n", "malformed chunked body: a chunk's data not followed by CRLF"},
        {"1;" + std::string(2000, 'e') + "\r\nx", "chunk-size line longer than 1024 bytes"},
        {"1\r\nx\r\n0\r\n" + std::string(5000, 't'), "chunked body's trailers longer than 4096 bytes"},
    };
    for (const auto& c : cases) {
        for (size_t step : {size_t{1}, size_t{4}, size_t{100000}}) {
            HttpResponseParser p(16384, 8192);
            EXPECT_EQ(feed_all(p, head + c.body, step), State::error) << c.body.substr(0, 40) << " step " << step;
            EXPECT_EQ(p.error(), c.error);
        }
    }
}

TEST(HttpResponse, ChunkedBodiesAreBounded) {
    std::string big(20000, 'b');
    std::string r = "HTTP/1.1 500 X\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(big, 3000);
    for (size_t step : {size_t{1}, size_t{999}, r.size()}) {
        HttpResponseParser p(16384, 8192);
        EXPECT_EQ(feed_all(p, r, step), State::done);  // the excerpt is all that is kept
        EXPECT_EQ(p.body(), std::string(8192, 'b'));
        EXPECT_LE(p.buffered(), 16384u);
        HttpResponseParser w(4096, 0, HttpResponseParser::Body::whole);
        EXPECT_EQ(feed_all(w, r, step), State::error);
        EXPECT_EQ(w.error(), "response larger than 4096 bytes");
        EXPECT_LE(w.buffered(), 4096u);
    }
    // A chunk that says more than it carries: the excerpt at the close, an error for the whole body.
    std::string cut = "HTTP/1.1 500 X\r\nTransfer-Encoding: chunked\r\n\r\n100\r\n[-]etcd failed";
    HttpResponseParser p;
    EXPECT_EQ(feed_all(p, cut), State::need_more);
    EXPECT_EQ(p.eof(), State::done);
    EXPECT_EQ(p.body_excerpt(), "[-]etcd failed");
    HttpResponseParser w(65536, 0, HttpResponseParser::Body::whole);
    EXPECT_EQ(feed_all(w, cut), State::need_more);
    EXPECT_EQ(w.eof(), State::error);
    EXPECT_EQ(w.error(), "connection closed inside the chunked body");
}

// With a Transfer-Encoding the Content-Length is not the body's length (RFC 9112, 6.3); one the
// parser does not decode is read to the close.
TEST(HttpResponse, TransferEncodingOverridesContentLength) {
    HttpResponseParser p(65536, 0, HttpResponseParser::Body::whole);
    EXPECT_EQ(feed_all(p, "HTTP/1.1 500 X\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
              State::done);
    EXPECT_EQ(p.body(), "hello");
    HttpResponseParser g(65536, 0, HttpResponseParser::Body::whole);
    EXPECT_EQ(feed_all(g, "HTTP/1.1 500 X\r\nTransfer-Encoding: gzip\r\n\r\n\x1f\x8b"), State::need_more);
    EXPECT_EQ(g.eof(), State::done);
    EXPECT_EQ(g.body(), "\x1f\x8b");
}
