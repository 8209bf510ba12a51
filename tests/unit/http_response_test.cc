// The readiness response parser: status classes, bounds, and hostile input.
#include <gtest/gtest.h>

#include "kprism/http_response.h"

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
