// SPDX-License-Identifier: Apache-2.0
// Discovery's parsing layer: the streamed HTTP response, watch lines, EndpointSlice lists and watch events.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "kprism/base/version.h"
#include "kprism/discovery/discovery.h"
#include "kprism/discovery/parse.h"

using kprism::DiscoveredSlice;
using kprism::HostPort;
using kprism::HttpStream;
using kprism::LineSplitter;
using kprism::SliceList;
using kprism::WatchEvent;
using kprism::WatchEventType;
using State = HttpStream::State;

namespace {

// Feeds `s` in pieces of `step` bytes (split at `cut` first when given); the body collected.
struct Fed {
    bool ok = true;
    std::string body;
};
Fed feed(HttpStream& h, std::string_view s, size_t step = SIZE_MAX, size_t cut = SIZE_MAX) {
    Fed f;
    auto on_body = [&](std::string_view b) {
        EXPECT_FALSE(b.empty());
        f.body.append(b);
        return true;
    };
    if (cut != SIZE_MAX) {
        f.ok = h.feed(s.substr(0, cut), on_body) && h.feed(s.substr(cut), on_body);
        return f;
    }
    for (size_t i = 0; i < s.size() && f.ok; i += step) f.ok = h.feed(s.substr(i, step), on_body);
    return f;
}

const std::string kChunked =
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    "5\r\nhello\r\n"
    "17;name=value;other\r\n{\"type\":\"ADDED\",\"x\":1}\n\r\n"
    "3 ; ext\r\nabc\r\n"
    "0\r\nX-Trailer: 1\r\n\r\n";
const std::string kChunkedBody = "hello{\"type\":\"ADDED\",\"x\":1}\nabc";

TEST(DiscoveryHttpStream, ChunkedSplitAtEveryByte) {
    for (size_t cut = 0; cut <= kChunked.size(); ++cut) {
        HttpStream h;
        Fed f = feed(h, kChunked, SIZE_MAX, cut);
        ASSERT_TRUE(f.ok) << "cut " << cut << ": " << h.error();
        EXPECT_EQ(h.state(), State::done) << "cut " << cut;
        EXPECT_EQ(h.status(), 200);
        EXPECT_TRUE(h.chunked());
        EXPECT_EQ(f.body, kChunkedBody) << "cut " << cut;
    }
    HttpStream h;
    Fed f = feed(h, kChunked, 1);
    EXPECT_TRUE(f.ok);
    EXPECT_EQ(h.state(), State::done);
    EXPECT_EQ(f.body, kChunkedBody);
    EXPECT_TRUE(h.eof());
}

TEST(DiscoveryHttpStream, ChunkExtensionsAndCaseAreAccepted) {
    HttpStream h;
    Fed f = feed(h, "HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked\r\n\r\n"
                    "a;foo=\"bar baz\"\r\n0123456789\r\nA\r\nabcdefghij\r\n000;last\r\n\r\n");
    EXPECT_TRUE(f.ok) << h.error();
    EXPECT_EQ(h.state(), State::done);
    EXPECT_EQ(f.body, "0123456789abcdefghij");
}

TEST(DiscoveryHttpStream, BytesAfterTheEndAreIgnored) {
    HttpStream h;
    Fed f = feed(h, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\ngarbage");
    EXPECT_TRUE(f.ok);
    EXPECT_EQ(f.body, "x");
    EXPECT_TRUE(feed(h, "more").ok);
    EXPECT_EQ(h.state(), State::done);
}

TEST(DiscoveryHttpStream, ContentLength) {
    std::string r = "HTTP/1.1 410 Gone\r\nContent-Length: 10\r\n\r\n0123456789extra";
    for (size_t step : {size_t{1}, size_t{7}, r.size()}) {
        HttpStream h;
        Fed f = feed(h, r, step);
        EXPECT_TRUE(f.ok);
        EXPECT_EQ(h.state(), State::done);
        EXPECT_EQ(h.status(), 410);
        EXPECT_FALSE(h.chunked());
        EXPECT_EQ(h.content_length(), 10);
        EXPECT_EQ(f.body, "0123456789");
    }
    HttpStream empty;
    EXPECT_TRUE(feed(empty, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").ok);
    EXPECT_EQ(empty.state(), State::done);
    HttpStream no_content;
    EXPECT_TRUE(feed(no_content, "HTTP/1.1 204 No Content\r\n\r\n").ok);
    EXPECT_EQ(no_content.state(), State::done);
}

TEST(DiscoveryHttpStream, TruncatedContentLengthIsAnErrorAtEof) {
    HttpStream h;
    EXPECT_TRUE(feed(h, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123").ok);
    EXPECT_EQ(h.state(), State::body);
    EXPECT_FALSE(h.eof());
    EXPECT_EQ(h.state(), State::error);
    EXPECT_NE(h.error().find("6 bytes before the end"), std::string::npos) << h.error();
}

TEST(DiscoveryHttpStream, EofDelimited) {
    HttpStream h;
    Fed f = feed(h, "HTTP/1.0 200 OK\r\nConnection: close\r\n\r\n{\"a\":1}\n{\"b\":2}\n", 3);
    EXPECT_TRUE(f.ok);
    EXPECT_EQ(h.state(), State::body);
    EXPECT_TRUE(h.eof());
    EXPECT_EQ(h.state(), State::done);
    EXPECT_EQ(f.body, "{\"a\":1}\n{\"b\":2}\n");
    EXPECT_TRUE(h.eof());
}

TEST(DiscoveryHttpStream, TruncatedChunkedAtEofIsAnError) {
    // Cut everywhere before the last byte: never done, and the close is an error.
    for (size_t n = 0; n + 1 < kChunked.size(); ++n) {
        HttpStream h;
        Fed f = feed(h, kChunked.substr(0, n));
        EXPECT_TRUE(f.ok) << n;
        EXPECT_NE(h.state(), State::done) << n;
        EXPECT_FALSE(h.eof()) << n;
        EXPECT_EQ(h.state(), State::error);
        EXPECT_FALSE(h.error().empty());
    }
}

TEST(DiscoveryHttpStream, OversizeHead) {
    std::string r = "HTTP/1.1 200 OK\r\nX-Big: " + std::string(HttpStream::kMaxResponseHead, 'a') + "\r\n\r\n";
    HttpStream h;
    EXPECT_FALSE(feed(h, r, 1000).ok);
    EXPECT_EQ(h.state(), State::error);
    EXPECT_NE(h.error().find("larger than 16384"), std::string::npos) << h.error();
    // Exactly at the bound is fine.
    std::string head = "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nX-Pad: ";
    head += std::string(HttpStream::kMaxResponseHead - head.size() - 4, 'p') + "\r\n\r\n";
    ASSERT_EQ(head.size(), HttpStream::kMaxResponseHead);
    HttpStream at;
    Fed f = feed(at, head + "x");
    EXPECT_TRUE(f.ok) << at.error();
    EXPECT_EQ(f.body, "x");
}

TEST(DiscoveryHttpStream, TooManyHeaderLines) {
    std::string r = "HTTP/1.1 200 OK\r\n";
    for (int i = 0; i < 101; ++i) r += "X-H: v\r\n";
    HttpStream h;
    EXPECT_FALSE(feed(h, r + "\r\n").ok);
    EXPECT_NE(h.error().find("more than 100 header lines"), std::string::npos) << h.error();
    std::string ok = "HTTP/1.1 200 OK\r\n";
    for (int i = 0; i < 100; ++i) ok += "X-H: v\r\n";
    HttpStream h2;
    EXPECT_TRUE(feed(h2, ok + "\r\n").ok) << h2.error();
}

TEST(DiscoveryHttpStream, BadChunkSize) {
    for (std::string chunk : {"zz\r\n", "\r\n", "-1\r\n", "1 2\r\n", "10000000000000000000\r\n", "5\nhello",
                              "5\r\nhelloXY", "1\r\na\n"}) {
        HttpStream h;
        std::string r = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk;
        EXPECT_FALSE(feed(h, r).ok) << chunk;
        EXPECT_EQ(h.state(), State::error) << chunk;
        EXPECT_FALSE(h.error().empty());
    }
    HttpStream long_line;
    std::string r = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;" + std::string(5000, 'e');
    EXPECT_FALSE(feed(long_line, r).ok);
    EXPECT_NE(long_line.error().find("too long"), std::string::npos);
}

TEST(DiscoveryHttpStream, MalformedHeads) {
    for (std::string r : {"HTTP/2 200 OK\r\n\r\n", "HTTP/1.1 20 OK\r\n\r\n", "HTTP/1.1 abc OK\r\n\r\n",
                          "SSH-2.0-OpenSSH\r\n\r\n", "HTTP/1.1 100 Continue\r\n\r\n", "HTTP/1.1 200OK\r\n\r\n",
                          "HTTP/1.1 200 OK\r\nno colon\r\n\r\n", "HTTP/1.1 200 OK\r\n folded: x\r\n\r\n",
                          "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
                          "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                          "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "HTTP/1.1 200 OK\r\nA: b\nC: d\r\n\r\n"}) {
        HttpStream h;
        EXPECT_FALSE(feed(h, r).ok) << r;
        EXPECT_EQ(h.state(), State::error) << r;
        EXPECT_FALSE(h.error().empty());
    }
    HttpStream nothing;
    EXPECT_FALSE(nothing.eof());
    EXPECT_EQ(nothing.error(), "connection closed without a response");
}

TEST(DiscoveryHttpStream, OnBodyStopsTheStream) {
    HttpStream h;
    int calls = 0;
    auto stop = [&](std::string_view) {
        ++calls;
        h.fail("event too large");
        return false;
    };
    EXPECT_FALSE(h.feed("HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nabcd", stop));
    EXPECT_EQ(h.error(), "event too large");
    EXPECT_FALSE(h.feed("more", stop));
    EXPECT_EQ(calls, 1);
    HttpStream g;
    EXPECT_FALSE(g.feed("HTTP/1.1 200 OK\r\n\r\nabcd", [](std::string_view) { return false; }));
    EXPECT_EQ(g.error(), "body rejected");
}

std::vector<std::string> split(LineSplitter& s, const std::vector<std::string>& feeds, bool* ok = nullptr) {
    std::vector<std::string> lines;
    bool all = true;
    for (const auto& f : feeds) {
        all = s.feed(f, [&](std::string_view l) {
            lines.emplace_back(l);
            return true;
        });
        if (!all) break;
    }
    if (ok) *ok = all;
    return lines;
}

TEST(DiscoveryLineSplitter, AcrossFeeds) {
    LineSplitter s;
    auto lines = split(s, {"{\"a\":", "1}\n\n{\"b\"", ":2}\r", "\n", "\r\n{\"c\":3}\n{\"d\""});
    EXPECT_EQ(lines, (std::vector<std::string>{"{\"a\":1}", "{\"b\":2}", "{\"c\":3}"}));
    EXPECT_EQ(s.buffered(), 4u);
    EXPECT_TRUE(s.error().empty());
}

TEST(DiscoveryLineSplitter, OverLongLine) {
    LineSplitter s(8);
    bool ok;
    auto lines = split(s, {"12345678\n123", "456789"}, &ok);
    EXPECT_FALSE(ok);
    EXPECT_EQ(lines, (std::vector<std::string>{"12345678"}));
    EXPECT_EQ(s.error(), "watch event longer than 8 bytes");
    EXPECT_LE(s.buffered(), 9u);
    EXPECT_FALSE(s.feed("\n", [](std::string_view) { return true; }));  // stays failed
    LineSplitter one(8);
    split(one, {"123456789\n"}, &ok);
    EXPECT_FALSE(ok);
    LineSplitter cr(8);  // the CR does not count
    EXPECT_EQ(split(cr, {"12345678\r", "\n"}, &ok), (std::vector<std::string>{"12345678"}));
    EXPECT_TRUE(ok);
}

// ---- slices ----

std::string slice_json(std::string_view name, std::string_view type, std::string_view endpoints, std::string_view ports,
                       std::string_view rv = "12") {
    return std::string("{\"kind\":\"EndpointSlice\",\"apiVersion\":\"discovery.k8s.io/v1\",\"metadata\":{\"name\":\"") +
        std::string(name) + "\",\"namespace\":\"default\",\"resourceVersion\":\"" + std::string(rv) +
        "\",\"labels\":{\"kubernetes.io/service-name\":\"kubernetes\"}},\"addressType\":\"" + std::string(type) +
        "\",\"endpoints\":" + std::string(endpoints) + ",\"ports\":" + std::string(ports) + "}";
}
const char* kHttps = R"([{"name":"https","protocol":"TCP","port":6443}])";

std::string list_json(const std::vector<std::string>& items, std::string_view rv = "42") {
    std::string s = R"({"kind":"EndpointSliceList","apiVersion":"discovery.k8s.io/v1","metadata":{"resourceVersion":")" +
                    std::string(rv) + R"("},"items":[)";
    for (size_t i = 0; i < items.size(); ++i) s += (i ? "," : "") + items[i];
    return s + "]}";
}

SliceList list_ok(const std::string& body) {
    SliceList l;
    std::string err;
    EXPECT_TRUE(kprism::parse_slice_list(body, l, err)) << err;
    return l;
}

std::string list_err(const std::string& body) {
    SliceList l;
    std::string err;
    EXPECT_FALSE(kprism::parse_slice_list(body, l, err)) << body.substr(0, 200);
    EXPECT_FALSE(err.empty());
    EXPECT_EQ(err.find('\n'), std::string::npos);
    return err;
}

std::vector<std::string> strs(const DiscoveredSlice& s) {
    std::vector<std::string> out;
    for (const HostPort& hp : s.endpoints) {
        EXPECT_TRUE(hp.is_ip);
        out.push_back(hp.str());
    }
    return out;
}

TEST(DiscoverySlices, TheRealShape) {
    SliceList l = list_ok(list_json(
        {R"({"kind":"EndpointSlice","apiVersion":"discovery.k8s.io/v1","metadata":{"name":"kubernetes","namespace":"default","resourceVersion":"12","labels":{"kubernetes.io/service-name":"kubernetes"}},"addressType":"IPv4","endpoints":[{"addresses":["127.0.0.11"],"conditions":{"ready":true}}],"ports":[{"name":"https","protocol":"TCP","port":6443}]})"}));
    EXPECT_EQ(l.resource_version, "42");
    ASSERT_EQ(l.items.size(), 1u);
    EXPECT_EQ(l.items[0].name, "kubernetes");
    EXPECT_EQ(strs(l.items[0]), (std::vector<std::string>{"127.0.0.11:6443"}));
    EXPECT_EQ(l.items[0].endpoints[0], (HostPort{"127.0.0.11", 6443, true}));
}

TEST(DiscoverySlices, IPv4AndIPv6) {
    SliceList l = list_ok(list_json(
        {slice_json("v4", "IPv4", R"([{"addresses":["10.0.0.1"]},{"addresses":["10.0.0.2","10.0.0.9"]}])", kHttps),
         slice_json("v6", "IPv6", R"([{"addresses":["fd00:0::1"]},{"addresses":["::1"]},{"addresses":["fd00::1"]}])",
                    kHttps)}));
    ASSERT_EQ(l.items.size(), 2u);
    EXPECT_EQ(strs(l.items[0]), (std::vector<std::string>{"10.0.0.1:6443", "10.0.0.2:6443"}));
    // Canonical text, brackets only in str(), and the duplicate (fd00:0::1 == fd00::1) dropped.
    EXPECT_EQ(strs(l.items[1]), (std::vector<std::string>{"[fd00::1]:6443", "[::1]:6443"}));
    EXPECT_EQ(l.items[1].endpoints[0].host, "fd00::1");
    // The wrong family, or no IP at all, is an error.
    EXPECT_NE(list_err(list_json({slice_json("a", "IPv4", R"([{"addresses":["fd00::1"]}])", kHttps)}))
                  .find("items[0].endpoints[0].addresses[0]: 'fd00::1' is not an IPv4 address"),
              std::string::npos);
    list_err(list_json({slice_json("a", "IPv6", R"([{"addresses":["10.0.0.1"]}])", kHttps)}));
    list_err(list_json({slice_json("a", "IPv4", R"([{"addresses":["api.example.com"]}])", kHttps)}));
    list_err(list_json({slice_json("a", "IPv4", R"([{"addresses":["010.0.0.1"]}])", kHttps)}));
    list_err(list_json({slice_json("a", "IPv6", R"([{"addresses":["fe80::1%eth0"]}])", kHttps)}));
    list_err(list_json({slice_json("a", "IPv4", R"([{"addresses":["10.0.0.1\u0000x"]}])", kHttps)}));
    list_err(list_json({slice_json("a", "IPv4", R"([{"addresses":[]}])", kHttps)}));
}

TEST(DiscoverySlices, DuplicatesDropped) {
    SliceList l = list_ok(list_json({slice_json(
        "a", "IPv4", R"([{"addresses":["10.0.0.1"]},{"addresses":["10.0.0.2"]},{"addresses":["10.0.0.1"]}])", kHttps)}));
    EXPECT_EQ(strs(l.items[0]), (std::vector<std::string>{"10.0.0.1:6443", "10.0.0.2:6443"}));
}

TEST(DiscoverySlices, Conditions) {
    SliceList l = list_ok(list_json({slice_json("a", "IPv4", R"([
        {"addresses":["10.0.0.1"],"conditions":{"ready":false}},
        {"addresses":["10.0.0.2"],"conditions":{"ready":true,"terminating":true}},
        {"addresses":["10.0.0.3"]},
        {"addresses":["10.0.0.4"],"conditions":{}},
        {"addresses":["10.0.0.5"],"conditions":{"serving":true,"terminating":false}},
        {"addresses":["10.0.0.6"],"conditions":{"ready":null}},
        {"addresses":["10.0.0.7"],"conditions":{"terminating":true}}])",
                                                kHttps)}));
    EXPECT_EQ(strs(l.items[0]),
              (std::vector<std::string>{"10.0.0.3:6443", "10.0.0.4:6443", "10.0.0.5:6443", "10.0.0.6:6443"}));
    list_err(list_json({slice_json("a", "IPv4", R"([{"addresses":["10.0.0.1"],"conditions":{"ready":"yes"}}])", kHttps)}));
    list_err(list_json({slice_json("a", "IPv4", R"([{"addresses":["10.0.0.1"],"conditions":[]}])", kHttps)}));
}

TEST(DiscoverySlices, PortByNameOnlyOrAmbiguous) {
    const char* ep = R"([{"addresses":["10.0.0.1"]}])";
    auto port_of = [&](const char* ports) {
        SliceList l = list_ok(list_json({slice_json("a", "IPv4", ep, ports)}));
        return l.items[0].endpoints.empty() ? 0 : l.items[0].endpoints[0].port;
    };
    EXPECT_EQ(port_of(R"([{"name":"metrics","port":9000},{"name":"https","port":6443}])"), 6443);
    EXPECT_EQ(port_of(R"([{"name":"other","port":7443}])"), 7443);
    EXPECT_EQ(port_of(R"([{"port":7443}])"), 7443);
    EXPECT_EQ(port_of(R"([{"name":"a","port":1},{"name":"b","port":2}])"), 0);  // ambiguous
    EXPECT_EQ(port_of(R"([])"), 0);
    EXPECT_EQ(port_of(R"(null)"), 0);
    EXPECT_EQ(port_of(R"([{"name":"https","protocol":"UDP","port":6443}])"), 0);
    EXPECT_EQ(port_of(R"([{"name":"https"}])"), 0);  // no number: "all ports", nothing to dial
    EXPECT_EQ(port_of(R"([{"name":"https","port":65535}])"), 65535);
    list_err(list_json({slice_json("a", "IPv4", ep, R"([{"name":"https","port":0}])")}));
    list_err(list_json({slice_json("a", "IPv4", ep, R"([{"name":"https","port":65536}])")}));
    list_err(list_json({slice_json("a", "IPv4", ep, R"([{"name":"https","port":-1}])")}));
    list_err(list_json({slice_json("a", "IPv4", ep, R"([{"name":"https","port":6443.5}])")}));
    list_err(list_json({slice_json("a", "IPv4", ep, R"([{"name":"https","port":"6443"}])")}));
    list_err(list_json({slice_json("a", "IPv4", ep, R"([{"name":7,"port":6443}])")}));
    list_err(list_json({slice_json("a", "IPv4", ep, R"({"name":"https","port":6443})")}));
}

TEST(DiscoverySlices, FqdnParsesWithoutEndpoints) {
    SliceList l = list_ok(list_json({slice_json("f", "FQDN", R"([{"addresses":["api.example.com"]}])", kHttps)}));
    ASSERT_EQ(l.items.size(), 1u);
    EXPECT_TRUE(l.items[0].endpoints.empty());
    list_err(list_json({slice_json("f", "IPv5", R"([])", kHttps)}));
}

TEST(DiscoverySlices, Bounds) {
    auto endpoints = [](size_t n) {
        std::string s = "[";
        for (size_t i = 0; i < n; ++i)
            s += (i ? ",{\"addresses\":[\"10.0." : "{\"addresses\":[\"10.0.") + std::to_string(i / 256) + "." +
                 std::to_string(i % 256) + "\"]}";
        return s + "]";
    };
    SliceList l = list_ok(list_json({slice_json("a", "IPv4", endpoints(1000), kHttps)}));
    EXPECT_EQ(l.items[0].endpoints.size(), 1000u);
    EXPECT_NE(list_err(list_json({slice_json("a", "IPv4", endpoints(1001), kHttps)})).find("1001 endpoints, at most 1000"),
              std::string::npos);
    std::vector<std::string> items;
    for (int i = 0; i < 33; ++i)
        items.push_back(slice_json("s" + std::to_string(i), "IPv4", R"([{"addresses":["10.0.0.1"]}])", kHttps));
    EXPECT_NE(list_err(list_json(items)).find("33 endpoint slices, at most 32"), std::string::npos);
    items.pop_back();
    EXPECT_EQ(list_ok(list_json(items)).items.size(), 32u);
}

TEST(DiscoverySlices, DeepNesting) {
    std::string deep = std::string(100, '[') + std::string(100, ']');
    std::string body = list_json({slice_json("a", "IPv4", R"([{"addresses":["10.0.0.1"],"x":)" + deep + "}]", kHttps)});
    EXPECT_NE(list_err(body).find("nested deeper than 32"), std::string::npos);
    WatchEvent e;
    std::string err;
    EXPECT_FALSE(kprism::parse_watch_event(R"({"type":"ADDED","object":)" + std::string(100, '{'), e, err));
    EXPECT_FALSE(err.empty());
}

TEST(DiscoverySlices, HugeInput) {
    std::string body = list_json({slice_json("a", "IPv4", "[]", kHttps)});
    body.insert(body.size() - 1, ",\"pad\":\"" + std::string(10u << 20, 'x') + "\"");
    EXPECT_NE(list_err(body).find("larger than 4194304 bytes"), std::string::npos);
    WatchEvent e;
    std::string err;
    EXPECT_FALSE(kprism::parse_watch_event(body, e, err));
    EXPECT_NE(err.find("larger than 1048576 bytes"), std::string::npos);
}

TEST(DiscoverySlices, BinaryGarbage) {
    std::string garbage;
    uint32_t x = 12345;
    for (int i = 0; i < 4096; ++i) {
        x = x * 1103515245u + 12345u;
        garbage += static_cast<char>(x >> 24);
    }
    list_err(garbage);
    list_err(std::string("{\"kind\":\"EndpointSliceList\",\"x\":\"\xff\xfe\"}"));
    list_err(std::string("\0\0\0", 3));
    list_err("");
    WatchEvent e;
    std::string err;
    EXPECT_FALSE(kprism::parse_watch_event(garbage, e, err));
    EXPECT_FALSE(err.empty());
}

TEST(DiscoverySlices, WrongTypes) {
    std::string ok_slice = slice_json("a", "IPv4", R"([{"addresses":["10.0.0.1"]}])", kHttps);
    list_err("[]");
    list_err("\"list\"");
    list_err(R"({"kind":"EndpointSliceList","metadata":{"resourceVersion":"1"}})");               // no items
    list_err(R"({"kind":"EndpointSliceList","metadata":{"resourceVersion":1},"items":[]})");      // rv a number
    list_err(R"({"kind":"EndpointSliceList","metadata":{},"items":[]})");                         // no rv
    list_err(R"({"kind":"PodList","metadata":{"resourceVersion":"1"},"items":[]})");              // another kind
    list_err(R"({"kind":"EndpointSliceList","metadata":{"resourceVersion":"1"},"items":{}})");    // items an object
    list_err(R"({"kind":"EndpointSliceList","metadata":"x","items":[]})");
    list_err(list_json({"7"}));
    list_err(list_json({"null"}));
    list_err(list_json({R"({"metadata":{"name":"a"},"endpoints":[]})"}));                       // no addressType
    list_err(list_json({R"({"metadata":{"name":5},"addressType":"IPv4"})"}));
    list_err(list_json({R"({"metadata":{"name":""},"addressType":"IPv4"})"}));
    list_err(list_json({R"({"metadata":{"name":"a"},"addressType":"IPv4","endpoints":{}})"}));
    list_err(list_json({R"({"metadata":{"name":"a"},"addressType":"IPv4","endpoints":["10.0.0.1"]})"}));
    list_err(list_json({R"({"metadata":{"name":"a"},"addressType":"IPv4","endpoints":[{"addresses":"10.0.0.1"}]})"}));
    list_err(list_json({R"({"metadata":{"name":"a"},"addressType":"IPv4","endpoints":[{"addresses":[1]}]})"}));
    list_err(list_json({R"({"metadata":{"name":"a"},"addressType":["IPv4"]})"}));
    // Unknown fields, null lists and items without kind (as kube-apiserver lists them) are fine.
    SliceList l = list_ok(R"({"metadata":{"resourceVersion":"7","continue":""},"items":null,"extra":[1,2]})");
    EXPECT_TRUE(l.items.empty());
    l = list_ok(list_json({R"({"metadata":{"name":"a"},"addressType":"IPv4","endpoints":null,"ports":null,"x":{}})"}));
    EXPECT_TRUE(l.items[0].endpoints.empty());
}

// ---- watch events ----

WatchEvent event_ok(const std::string& line) {
    WatchEvent e;
    std::string err;
    EXPECT_TRUE(kprism::parse_watch_event(line, e, err)) << err;
    return e;
}

std::string event_err(const std::string& line) {
    WatchEvent e;
    std::string err;
    EXPECT_FALSE(kprism::parse_watch_event(line, e, err)) << line;
    EXPECT_FALSE(err.empty());
    return err;
}

// ---- zones ----

TEST(DiscoveryZones, ValidZone) {
    std::string why;
    for (const std::string& z : std::vector<std::string>{"", "a", "b", "zone-a", "eu-west-1a", "us_east.1", "Z9", std::string(63, 'x')})
        EXPECT_TRUE(kprism::valid_zone(z, why)) << z;
    struct Case {
        std::string zone, reason;
    } cases[] = {
        {std::string(64, 'x'), "is 64 bytes, at most 63"},
        {std::string(100000, 'x'), "is 100000 bytes, at most 63"},
        {"a b", "'a b' is not a label value (want A-Z a-z 0-9 . _ -)"},
        {"a/b", "not a label value"},
        {"zone\n", "'zone?' is not a label value"},
        {std::string("a\0b", 3), "'a?b' is not a label value"},
        {"\xc3\xa9t\xc3\xa9", "not a label value"},
        {"-a", "must begin and end with a letter or digit"},
        {"a.", "must begin and end with a letter or digit"},
        {"_", "must begin and end with a letter or digit"},
    };
    for (const auto& c : cases) {
        why.clear();
        EXPECT_FALSE(kprism::valid_zone(c.zone, why)) << c.zone.substr(0, 80);
        EXPECT_NE(why.find(c.reason), std::string::npos) << why;
        EXPECT_LE(why.size(), 160u) << "the value is quoted cut to 64 bytes";
    }
}

// An endpoint's zone, from a list and from a watch event: kept when valid, none when absent, null
// or empty; anything else recorded with its reason and never an error of the slice (the endpoint
// is still admitted).
TEST(DiscoveryZones, ParsedPerEndpoint) {
    const std::string eps = std::string(R"([)") +
        R"({"addresses":["10.0.0.1"],"zone":"b"},)" +                              // valid
        R"({"addresses":["10.0.0.2"]},)" +                                         // absent
        R"({"addresses":["10.0.0.3"],"zone":null},)" +                             // null
        R"({"addresses":["10.0.0.4"],"zone":""},)" +                               // empty
        R"({"addresses":["10.0.0.5"],"zone":")" + std::string(64, 'z') + R"("},)" +  // too long
        R"({"addresses":["10.0.0.6"],"zone":"not valid!"},)" +                     // characters
        R"({"addresses":["10.0.0.7"],"zone":42},)" +                               // not a string
        R"({"addresses":["10.0.0.8"],"zone":{"name":"b"}},)" +
        R"({"addresses":["10.0.0.9"],"zone":["b"]},)" +
        R"({"addresses":["10.0.0.10"],"zone":true},)" +
        R"({"addresses":["10.0.0.11"],"zone":"-b"},)" +
        R"({"addresses":["10.0.0.1"],"zone":"c"},)" +                              // repeated: the first stays
        R"({"addresses":["10.0.0.12"],"zone":"a","conditions":{"ready":false}})" + // not admitted
        "]";
    auto check = [](const DiscoveredSlice& s) {
        ASSERT_EQ(s.endpoints.size(), 11u) << "every ready endpoint admitted, whatever its zone";
        EXPECT_EQ(s.zones, (std::map<std::string, std::string>{{"10.0.0.1:6443", "b"}}));
        ASSERT_EQ(s.zone_errors.size(), 7u);
        EXPECT_NE(s.zone_errors.at("10.0.0.5:6443").find("is 64 bytes, at most 63"), std::string::npos);
        EXPECT_NE(s.zone_errors.at("10.0.0.6:6443").find("'not valid!' is not a label value"), std::string::npos);
        EXPECT_EQ(s.zone_errors.at("10.0.0.7:6443"), "want a string, not number");
        EXPECT_EQ(s.zone_errors.at("10.0.0.8:6443"), "want a string, not object");
        EXPECT_EQ(s.zone_errors.at("10.0.0.9:6443"), "want a string, not array");
        EXPECT_EQ(s.zone_errors.at("10.0.0.10:6443"), "want a string, not boolean");
        EXPECT_NE(s.zone_errors.at("10.0.0.11:6443").find("must begin and end"), std::string::npos);
    };
    SliceList l = list_ok(list_json({slice_json("kubernetes", "IPv4", eps, kHttps)}));
    ASSERT_EQ(l.items.size(), 1u);
    check(l.items[0]);
    WatchEvent e;
    std::string err;
    ASSERT_TRUE(kprism::parse_watch_event(R"({"type":"MODIFIED","object":)" + slice_json("kubernetes", "IPv4", eps, kHttps) + "}",
                                  e, err))
        << err;
    check(e.slice);
    // IPv6: keyed by the canonical text with brackets, as HostPort::str() prints it.
    l = list_ok(list_json({slice_json("v6", "IPv6", R"([{"addresses":["fd00:0::1"],"zone":"b"}])", kHttps)}));
    EXPECT_EQ(l.items[0].zones, (std::map<std::string, std::string>{{"[fd00::1]:6443", "b"}}));
    // A zone the slice cannot be used for (FQDN, no port) records nothing.
    l = list_ok(list_json({slice_json("f", "FQDN", R"([{"addresses":["api"],"zone":"bad zone"}])", kHttps)}));
    EXPECT_TRUE(l.items[0].zones.empty() && l.items[0].zone_errors.empty());
}

// A slice of 1000 endpoints each with a 100 KB zone: refused zones, bounded reasons.
TEST(DiscoveryZones, HostileZonesStayBounded) {
    std::string eps = "[";
    const std::string big(1000, 'q');
    for (int i = 0; i < 1000; ++i)
        eps += (i ? "," : "") + std::string(R"({"addresses":["10.0.)") + std::to_string(i / 250) + "." +
               std::to_string(i % 250) + R"("],"zone":")" + big + R"("})";
    eps += "]";
    SliceList l = list_ok(list_json({slice_json("a", "IPv4", eps, kHttps)}));
    ASSERT_EQ(l.items[0].endpoints.size(), 1000u);
    EXPECT_TRUE(l.items[0].zones.empty());
    ASSERT_EQ(l.items[0].zone_errors.size(), 1000u);
    for (const auto& [addr, why] : l.items[0].zone_errors) EXPECT_LE(why.size(), 120u) << why;
}

TEST(DiscoveryEvents, EachType) {
    std::string obj = slice_json("kubernetes", "IPv4", R"([{"addresses":["127.0.0.11"],"conditions":{"ready":true}}])",
                                 kHttps, "99");
    for (auto [name, type] : {std::pair{"ADDED", WatchEventType::added}, std::pair{"MODIFIED", WatchEventType::modified},
                              std::pair{"DELETED", WatchEventType::deleted}}) {
        WatchEvent e = event_ok(std::string(R"({"type":")") + name + R"(","object":)" + obj + "}");
        EXPECT_EQ(e.type, type) << name;
        EXPECT_EQ(e.resource_version, "99");
        EXPECT_EQ(e.slice.name, "kubernetes");
        EXPECT_EQ(strs(e.slice), (std::vector<std::string>{"127.0.0.11:6443"}));
    }
    // A slice event without a resource version is unusable for resuming.
    event_err(R"({"type":"ADDED","object":{"metadata":{"name":"a"},"addressType":"IPv4"}})");
}

TEST(DiscoveryEvents, Bookmark) {
    WatchEvent e = event_ok(
        R"({"type":"BOOKMARK","object":{"kind":"EndpointSlice","apiVersion":"discovery.k8s.io/v1","metadata":{"resourceVersion":"1234","creationTimestamp":null,"annotations":{"k8s.io/initial-events-end":"true"}},"addressType":"","endpoints":null,"ports":null}})");
    EXPECT_EQ(e.type, WatchEventType::bookmark);
    EXPECT_EQ(e.resource_version, "1234");
    EXPECT_TRUE(e.slice.endpoints.empty());
    event_err(R"({"type":"BOOKMARK","object":{"metadata":{}}})");
    event_err(R"({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":5}}})");
}

TEST(DiscoveryEvents, Error410) {
    WatchEvent e = event_ok(
        R"j({"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (57)","reason":"Expired","code":410}})j");
    EXPECT_EQ(e.type, WatchEventType::error);
    EXPECT_EQ(e.code, 410);
    EXPECT_EQ(e.message, "too old resource version: 1 (57)");
    WatchEvent big = event_ok(R"({"type":"ERROR","object":{"code":500,"message":")" + std::string(2000, 'm') + "\"}}");
    EXPECT_EQ(big.code, 500);
    EXPECT_EQ(big.message.size(), 512u);
    event_err(R"({"type":"ERROR","object":{"code":"410"}})");
    event_err(R"({"type":"ERROR","object":{"code":4100000}})");
    event_err(R"({"type":"ERROR","object":{"kind":"EndpointSlice","code":410}})");
}

TEST(DiscoveryEvents, Malformed) {
    event_err(R"({"type":"RENAMED","object":{}})");
    event_err(R"({"type":1,"object":{}})");
    event_err(R"({"object":{}})");
    event_err(R"({"type":"ADDED"})");
    event_err(R"({"type":"ADDED","object":[]})");
    event_err(R"({"type":"ADDED","object":{"kind":"Pod","metadata":{"name":"a","resourceVersion":"1"},"addressType":"IPv4"}})");
    event_err("[]");
    event_err("");
    event_err(R"({"type":"ADDED","object":{}} trailing)");
}

TEST(DiscoveryEvents, AWatchStreamEndToEnd) {
    std::string events = std::string(R"({"type":"ADDED","object":)") +
                         slice_json("kubernetes", "IPv4", R"([{"addresses":["10.0.0.1"]}])", kHttps, "5") + "}\n" +
                         R"({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"6"}}})" + "\n" +
                         R"({"type":"ERROR","object":{"kind":"Status","code":410,"message":"gone"}})" + "\n";
    std::string r = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (size_t i = 0; i < events.size(); i += 17) {
        std::string piece = events.substr(i, 17);
        char size[16];
        std::snprintf(size, sizeof size, "%zx\r\n", piece.size());
        r += size + piece + "\r\n";
    }
    r += "0\r\n\r\n";
    for (size_t step : {size_t{1}, size_t{5}, r.size()}) {
        HttpStream h;
        LineSplitter s;
        std::vector<WatchEvent> got;
        for (size_t i = 0; i < r.size(); i += step) {
            ASSERT_TRUE(h.feed(std::string_view(r).substr(i, step), [&](std::string_view b) {
                return s.feed(b, [&](std::string_view line) {
                    WatchEvent e;
                    std::string err;
                    if (!kprism::parse_watch_event(line, e, err)) {
                        h.fail(err);
                        return false;
                    }
                    got.push_back(std::move(e));
                    return true;
                });
            })) << h.error();
        }
        EXPECT_EQ(h.state(), State::done);
        ASSERT_EQ(got.size(), 3u);
        EXPECT_EQ(got[0].type, WatchEventType::added);
        EXPECT_EQ(got[1].resource_version, "6");
        EXPECT_EQ(got[2].code, 410);
        EXPECT_EQ(s.buffered(), 0u);
    }
}

// ---- resource versions: sent back in the watch's request line, so never taken as they come ----

// JSON string bodies (escaped) an apiserver could send as a resourceVersion, none of them safe.
const char* const kHostileVersions[] = {
    R"(1 HTTP/1.1\r\nX-Injected: yes\r\nX-Pad: )",
    R"(1\r\nX-Injected: yes)",
    R"(1\nX-Injected: yes)",
    "1 2",
    "1&watch=false",
    "1#frag",
    "1?x=y",
    "1/../2",
    "1%0d%0aX-Injected:%20yes",
    R"(1\u0000)",
    R"(\u00e91)",
    "1+2",
    "1;x",
    R"(1\"x)",
    R"(1\t2)",
};

TEST(DiscoveryResourceVersion, HostileListIsRefusedNamingTheField) {
    for (const char* rv : kHostileVersions) {
        std::string err = list_err(list_json({}, rv));
        EXPECT_NE(err.find("list.metadata.resourceVersion: '"), std::string::npos) << rv << ": " << err;
        EXPECT_NE(err.find("refused (want at most 64 of 0-9 A-Z a-z . _ -)"), std::string::npos) << err;
        EXPECT_EQ(err.find('\r'), std::string::npos) << err;  // quoted: control bytes shown as '?'
    }
    std::string err = list_err(list_json({}, std::string(65, '7')));
    EXPECT_NE(err.find("list.metadata.resourceVersion"), std::string::npos) << err;
}

TEST(DiscoveryResourceVersion, HostileEventOrBookmarkOrItemIsRefused) {
    for (const char* rv : kHostileVersions) {
        std::string obj = slice_json("kubernetes", "IPv4", R"([{"addresses":["10.0.0.1"]}])", kHttps, rv);
        for (const char* type : {"ADDED", "MODIFIED", "DELETED"}) {
            std::string err = event_err(std::string(R"({"type":")") + type + R"(","object":)" + obj + "}");
            EXPECT_NE(err.find("event.object.metadata.resourceVersion: '"), std::string::npos) << rv << ": " << err;
        }
        std::string err = event_err(std::string(R"({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":")") + rv +
                                    "\"}}}");
        EXPECT_NE(err.find("event.object.metadata.resourceVersion: '"), std::string::npos) << rv << ": " << err;
        err = list_err(list_json({obj}));
        EXPECT_NE(err.find("items[0].metadata.resourceVersion: '"), std::string::npos) << rv << ": " << err;
    }
}

TEST(DiscoveryResourceVersion, WhatApiserversSendIsAccepted) {
    for (const std::string& rv : std::vector<std::string>{"0", "1", "123456789012345", "a.b_c-D", std::string(64, '9')}) {
        EXPECT_EQ(list_ok(list_json({}, rv)).resource_version, rv);
        EXPECT_EQ(event_ok(R"({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":")" + rv + "\"}}}").resource_version, rv);
        EXPECT_TRUE(kprism::valid_resource_version(rv)) << rv;
    }
    EXPECT_FALSE(kprism::valid_resource_version(""));
    EXPECT_FALSE(kprism::valid_resource_version(std::string(65, '9')));
    EXPECT_FALSE(kprism::valid_resource_version("1\r\nX: y"));
}

// The request head has exactly one request line and the fixed headers, whatever it is given.
void expect_one_head(const std::string& req) {
    ASSERT_GE(req.size(), 4u);
    EXPECT_EQ(req.find("\r\n\r\n"), req.size() - 4) << req;
    std::vector<std::string> lines;
    for (size_t at = 0; at < req.size() - 4;) {
        size_t end = req.find("\r\n", at);
        lines.push_back(req.substr(at, end - at));
        at = end + 2;
    }
    ASSERT_EQ(lines.size(), 5u) << req;
    EXPECT_EQ(lines[0].rfind("GET /apis/discovery.k8s.io/v1/namespaces/default/endpointslices?", 0), 0u) << lines[0];
    EXPECT_EQ(lines[0].find(' '), 3u);
    EXPECT_EQ(lines[0].find(' ', 4), lines[0].size() - 9) << lines[0];  // "... HTTP/1.1"
    EXPECT_EQ(lines[1], "Host: 10.0.0.1");
    EXPECT_EQ(lines[2], std::string("User-Agent: kprism/") + kprism::kVersion);  // as the readiness probe's
    for (const auto& l : lines) {
        EXPECT_EQ(l.find('\n'), std::string::npos);
        EXPECT_EQ(l.find("Injected"), std::string::npos) << l;
    }
}

TEST(DiscoveryResourceVersion, RequestLineTakesOnlyASafeVersion) {
    std::string list = kprism::discovery_request("", 300, "10.0.0.1");
    expect_one_head(list);
    EXPECT_NE(list.find("&limit=500 HTTP/1.1\r\n"), std::string::npos) << list;
    EXPECT_EQ(list.find("resourceVersion"), std::string::npos);
    std::string watch = kprism::discovery_request("4711", 321, "10.0.0.1");
    expect_one_head(watch);
    EXPECT_NE(watch.find("&watch=true&allowWatchBookmarks=true&resourceVersion=4711&timeoutSeconds=321 HTTP/1.1\r\n"),
              std::string::npos)
        << watch;
    for (std::string rv : {std::string("1 HTTP/1.1\r\nX-Injected: yes\r\nX-Pad: "), std::string("1\nX-Injected: yes"),
                           std::string("1&watch=false"), std::string("1 2"), std::string(65, '1')})
        EXPECT_EQ(kprism::discovery_request(rv, 300, "10.0.0.1"), "") << rv;
}

// What a list answers is what the next watch's request line carries, or nothing is sent.
TEST(DiscoveryResourceVersion, AnInjectedVersionNeverReachesARequestLine) {
    for (const char* rv : kHostileVersions) {
        SliceList l;
        std::string err;
        if (kprism::parse_slice_list(list_json({}, rv), l, err)) {
            ADD_FAILURE() << "accepted " << rv;
            std::string req = kprism::discovery_request(l.resource_version, 300, "10.0.0.1");
            if (!req.empty()) expect_one_head(req);
        }
    }
}

}  // namespace
