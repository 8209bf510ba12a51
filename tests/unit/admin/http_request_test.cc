// SPDX-License-Identifier: Apache-2.0
// The admin endpoint's request parser: methods, bounds, garbage, and pipelined bytes.
#include <gtest/gtest.h>

#include "kprism/admin/http_request.h"

using kprism::HttpRequest;
using kprism::HttpRequestParser;
using State = HttpRequestParser::State;

namespace {

// Feeds `s` in chunks of `step` bytes until the parser is no longer hungry.
State feed_all(HttpRequestParser& p, std::string_view s, size_t step = 1) {
    State st = State::need_more;
    for (size_t i = 0; i < s.size() && st == State::need_more; i += step) st = p.feed(s.substr(i, step));
    return st;
}

int status_of(std::string_view s) {
    HttpRequestParser p;
    State st = feed_all(p, s, 1000000);
    if (st == State::done) return 200;
    if (st == State::need_more) return 0;
    return p.error_status();
}

}  // namespace

TEST(HttpRequest, SimpleGetInAnyChunking) {
    const std::string req = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:7446\r\nUser-Agent: curl/7.88\r\nAccept: */*\r\n\r\n";
    for (size_t step : {size_t{1}, size_t{2}, size_t{7}, req.size()}) {
        HttpRequestParser p;
        ASSERT_EQ(feed_all(p, req, step), State::done) << step;
        EXPECT_EQ(p.request().method, "GET");
        EXPECT_EQ(p.request().path, "/healthz");
        EXPECT_EQ(p.request().query, "");
        EXPECT_EQ(p.request().minor, 1);
        EXPECT_EQ(p.consumed(), req.size());
    }
}

TEST(HttpRequest, HeadIsAllowed) {
    HttpRequestParser p;
    ASSERT_EQ(p.feed("HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), State::done);
    EXPECT_EQ(p.request().method, "HEAD");
}

TEST(HttpRequest, PathAndQuerySplit) {
    HttpRequestParser p;
    ASSERT_EQ(p.feed("GET /readyz?verbose&x=1&format=tsv HTTP/1.1\r\nHost: x\r\n\r\n"), State::done);
    const HttpRequest& r = p.request();
    EXPECT_EQ(r.path, "/readyz");
    EXPECT_EQ(r.query, "verbose&x=1&format=tsv");
    EXPECT_EQ(r.target, "/readyz?verbose&x=1&format=tsv");
    EXPECT_TRUE(r.has_param("verbose"));
    EXPECT_TRUE(r.has_param("x"));
    EXPECT_FALSE(r.has_param("verb"));
    EXPECT_FALSE(r.has_param("1"));
    EXPECT_EQ(r.param("format"), "tsv");
    EXPECT_EQ(r.param("verbose"), "");
    EXPECT_EQ(r.param("missing"), "");
}

TEST(HttpRequest, OtherMethodsAre405OnlyOnceTheHeadIsComplete) {
    for (const char* m : {"POST", "PUT", "DELETE", "OPTIONS", "PATCH", "get", "BREW"}) {
        HttpRequestParser p;
        std::string line = std::string(m) + " /healthz HTTP/1.1\r\nHost: x\r\n";
        EXPECT_EQ(p.feed(line), State::need_more) << m;
        EXPECT_EQ(p.feed("\r\n"), State::error) << m;
        EXPECT_EQ(p.error_status(), 405) << m;
        EXPECT_STREQ(HttpRequestParser::kAllow, "GET, HEAD");
    }
}

TEST(HttpRequest, Http10NeedsNoHost) {
    EXPECT_EQ(status_of("GET / HTTP/1.0\r\n\r\n"), 200);
    EXPECT_EQ(status_of("GET / HTTP/1.1\r\n\r\n"), 400);
    EXPECT_EQ(status_of("GET / HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n"), 400);
    EXPECT_EQ(status_of("GET / HTTP/1.1\r\nHOST: a\r\n\r\n"), 200);
}

TEST(HttpRequest, Garbage) {
    EXPECT_EQ(status_of(std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11)), 400) << "TLS ClientHello";
    EXPECT_EQ(status_of("SSH-2.0-OpenSSH_9.2\r\n"), 400);
    EXPECT_EQ(status_of("GET\r\n\r\n"), 400);
    EXPECT_EQ(status_of("GET /\r\n\r\n"), 400) << "HTTP/0.9";
    EXPECT_EQ(status_of("GET  / HTTP/1.1\r\nHost: x\r\n\r\n"), 400);
    EXPECT_EQ(status_of("GET / HTTP/1.1 \r\nHost: x\r\n\r\n"), 400);
    EXPECT_EQ(status_of("GET http://x/ HTTP/1.1\r\nHost: x\r\n\r\n"), 400) << "absolute form";
    EXPECT_EQ(status_of("GET * HTTP/1.1\r\nHost: x\r\n\r\n"), 400);
    EXPECT_EQ(status_of("GET / HTTP/1.1\nHost: x\n\n"), 400) << "bare LF";
    EXPECT_EQ(status_of("GET / HTTP/1.1\rHost: x\r\n\r\n"), 400) << "bare CR";
    EXPECT_EQ(status_of("GET / HTTP/1.1\r\nHost x\r\n\r\n"), 400) << "no colon";
    EXPECT_EQ(status_of("GET / HTTP/1.1\r\n: x\r\n\r\n"), 400) << "empty name";
    EXPECT_EQ(status_of("GET / HTTP/1.1\r\nHo st: x\r\n\r\n"), 400);
    EXPECT_EQ(status_of("GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n"), 400) << "obs-fold";
    EXPECT_EQ(status_of(std::string("GET / HTTP/1.1\r\nHost: x\0y\r\n\r\n", 28)), 400) << "NUL";
    EXPECT_EQ(status_of("GET /a\x7f HTTP/1.1\r\nHost: x\r\n\r\n"), 400);
    EXPECT_EQ(status_of("GET /\xc3\xa9 HTTP/1.1\r\nHost: x\r\n\r\n"), 400) << "raw non-ASCII in target";
    EXPECT_EQ(status_of("GET / HTTX/1.1\r\nHost: x\r\n\r\n"), 400);
    EXPECT_EQ(status_of("GET / HTTP/1.1\r\nHost: a\tb\r\n\r\n"), 200) << "HTAB in a value is fine";
    EXPECT_EQ(status_of("\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n"), 400);
}

TEST(HttpRequest, GarbageIsRejectedBeforeTheLineEnds) {
    HttpRequestParser p;
    EXPECT_EQ(p.feed("\x16\x03"), State::error);
    HttpRequestParser q;
    EXPECT_EQ(q.feed("GET nope"), State::error);
    EXPECT_EQ(q.error_status(), 400);
    HttpRequestParser r;
    EXPECT_EQ(r.feed(std::string(HttpRequestParser::kMaxMethod + 1, 'G')), State::error);
}

TEST(HttpRequest, OtherVersionsAre505) {
    EXPECT_EQ(status_of("GET / HTTP/2.0\r\nHost: x\r\n\r\n"), 505);
    EXPECT_EQ(status_of("GET / HTTP/1.2\r\nHost: x\r\n\r\n"), 505);
    EXPECT_EQ(status_of("GET / HTTP/0.9\r\nHost: x\r\n\r\n"), 505);
}

TEST(HttpRequest, LongTargetIs414EvenBeforeTheLineEnds) {
    std::string target = "/" + std::string(HttpRequestParser::kMaxTarget, 'a');
    EXPECT_EQ(status_of("GET " + target + " HTTP/1.1\r\nHost: x\r\n\r\n"), 414);
    HttpRequestParser p;
    EXPECT_EQ(feed_all(p, "GET " + target, 100), State::error);
    EXPECT_EQ(p.error_status(), 414);
    std::string fits = "/" + std::string(HttpRequestParser::kMaxTarget - 1, 'a');
    EXPECT_EQ(status_of("GET " + fits + " HTTP/1.1\r\nHost: x\r\n\r\n"), 200);
}

TEST(HttpRequest, LargeHeadIs431) {
    std::string head = "GET / HTTP/1.1\r\nHost: x\r\n";
    std::string big = head + "X-Big: " + std::string(HttpRequestParser::kMaxHead, 'b') + "\r\n\r\n";
    EXPECT_EQ(status_of(big), 431);
    // Never complete: stops at the bound, whatever keeps coming.
    HttpRequestParser p;
    State st = p.feed(head);
    for (int i = 0; i < 1000 && st == State::need_more; ++i) st = p.feed("X-Slow: 0123456789\r\n");
    EXPECT_EQ(st, State::error);
    EXPECT_EQ(p.error_status(), 431);
    // Exactly at the bound is fine.
    std::string pad = "X-Pad: ";
    std::string exact = head + pad;
    exact += std::string(HttpRequestParser::kMaxHead - exact.size() - 4, 'p') + "\r\n\r\n";
    ASSERT_EQ(exact.size(), HttpRequestParser::kMaxHead);
    EXPECT_EQ(status_of(exact), 200);
    EXPECT_EQ(status_of(exact.substr(0, exact.size() - 4) + "p\r\n\r\n"), 431);
}

TEST(HttpRequest, PipelinedBytesAreLeftAlone) {
    std::string first = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    std::string both = first + "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    HttpRequestParser p;
    ASSERT_EQ(p.feed(both), State::done);
    EXPECT_EQ(p.request().path, "/healthz");
    EXPECT_EQ(p.consumed(), first.size());
    EXPECT_EQ(p.feed("more"), State::done) << "done is final";
    // A body after a GET head is not the parser's business either.
    HttpRequestParser q;
    ASSERT_EQ(q.feed("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"), State::done);
    EXPECT_EQ(q.consumed(), std::string("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n").size());
}

TEST(HttpRequest, ErrorIsFinal) {
    HttpRequestParser p;
    ASSERT_EQ(p.feed("BAD\x01"), State::error);
    int status = p.error_status();
    EXPECT_EQ(p.feed("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), State::error);
    EXPECT_EQ(p.error_status(), status);
    EXPECT_FALSE(p.error().empty());
}
