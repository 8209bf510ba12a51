// SPDX-License-Identifier: Apache-2.0
// host:port parsing, IP literals, loopback detection and sockaddr printing (kprism/base/address.h).
#include "kprism/base/address.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <string>
#include <utility>

namespace kprism {
namespace {

HostPort ok(std::string_view s) {
    HostPort hp;
    std::string err;
    EXPECT_TRUE(parse_host_port(s, hp, &err)) << "'" << s << "': " << err;
    return hp;
}

std::string bad(std::string_view s) {
    HostPort hp;
    std::string err;
    EXPECT_FALSE(parse_host_port(s, hp, &err)) << "'" << s << "' unexpectedly accepted as " << hp.str();
    return err;
}

#define EXPECT_HAS(hay, needle) EXPECT_NE(std::string(hay).find(needle), std::string::npos) << "in: " << (hay)

// Accepted inputs: host, port, whether the host is an IP literal, and the canonical form.
TEST(ParseHostPort, Accepted) {
    struct Case {
        const char* input;
        const char* host;
        uint16_t port;
        bool is_ip;
        const char* str;
    };
    const Case cases[] = {
        {"10.0.0.1:6443", "10.0.0.1", 6443, true, "10.0.0.1:6443"},
        {"[fd00::1]:6443", "fd00::1", 6443, true, "[fd00::1]:6443"},
        {"[::1]:1", "::1", 1, true, "[::1]:1"},
        {"[::ffff:10.0.0.1]:443", "::ffff:10.0.0.1", 443, true, "[::ffff:10.0.0.1]:443"},
        {"api.example.com:6443", "api.example.com", 6443, false, "api.example.com:6443"},
        {"localhost:80", "localhost", 80, false, "localhost:80"},
        // underscore, hyphen, trailing dot (FQDN)
        {"kube_api-1.internal.:65535", "kube_api-1.internal.", 65535, false, "kube_api-1.internal.:65535"},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.input);
        HostPort hp = ok(c.input);
        EXPECT_EQ(hp.host, c.host);
        EXPECT_EQ(hp.port, c.port);
        EXPECT_EQ(hp.is_ip, c.is_ip);
        EXPECT_EQ(hp.str(), c.str);
    }
}

TEST(ParseHostPort, PortBounds) {
    EXPECT_EQ(ok("h:1").port, 1);
    EXPECT_EQ(ok("h:65535").port, 65535);
}

// Each refused input and the words its error must contain.
TEST(ParseHostPort, RefusedWithTheReason) {
    const std::pair<const char*, const char*> cases[] = {
        {"10.0.0.1:0", "port 0 out of range 1-65535"},
        {"10.0.0.1:70000", "port 70000 out of range 1-65535"},
        {"10.0.0.1:65536", "out of range"},
        {"[::1]:0", "out of range"},
        {"10.0.0.1:99999999", "invalid port"},
        {"10.0.0.1:-1", "invalid port"},
        {"10.0.0.1:+80", "invalid port"},
        {"10.0.0.1:80a", "invalid port"},
        {"10.0.0.1: 80", "invalid port"},
        {"10.0.0.1", "missing port"},
        {"api.example.com", "missing port"},
        {"10.0.0.1:", "invalid port ''"},
        {"[::1]", "want [ipv6]:port"},
        {"[::1]:", "invalid port"},
        {"[::1]6443", "want [ipv6]:port"},
        {"", "missing port"},
        {":6443", "missing host"},
        {"fd00::1:6443", "need brackets"},
        {"::1:6443", "need brackets"},
        {"[::1:6443", "missing ']'"},
        {"[10.0.0.1]:6443", "is not an IPv6 address"},
        {"[example.com]:6443", "is not an IPv6 address"},
        {"[]:6443", "is not an IPv6 address"},
        {"[fe80::1%eth0]:6443", "is not an IPv6 address"},
    };
    for (const auto& [input, reason] : cases) {
        SCOPED_TRACE(input);
        EXPECT_HAS(bad(input), reason);
    }
}

TEST(ParseHostPort, BadHostnames) {
    for (const char* s : {"bad host:80", "-leading.hyphen:80", ".leading.dot:80", "exa$mple.com:80", "a/b:80",
                          "h\xc3\xa9llo:80", "tab\there:80"}) {
        SCOPED_TRACE(s);
        EXPECT_HAS(bad(s), "is not an IP address or hostname");
    }
    std::string long_label(64, 'a');
    EXPECT_HAS(bad(long_label + ".com:80"), "is not an IP address or hostname");
    EXPECT_FALSE(ok(std::string(63, 'a') + ".com:80").is_ip);
    std::string long_name;
    while (long_name.size() < 254) long_name += "abcdefghi.";
    EXPECT_HAS(bad(long_name + ":80"), "is not an IP address or hostname");
}

// "a..b" has an empty label, which is not a valid DNS name.
TEST(ParseHostPort, EmptyLabelRejected) { bad("a..b:80"); }

TEST(ParseHostPort, NullErrorPointer) {
    HostPort hp;
    EXPECT_FALSE(parse_host_port("nope", hp, nullptr));
    EXPECT_TRUE(parse_host_port("1.2.3.4:5", hp, nullptr));
}

TEST(ParsePort, Values) {
    uint16_t p = 0;
    std::string err;
    EXPECT_TRUE(parse_port("443", p, &err));
    EXPECT_EQ(p, 443);
    EXPECT_TRUE(parse_port("000443", p, &err));
    EXPECT_EQ(p, 443);
    p = 7;
    EXPECT_FALSE(parse_port("0", p, &err));
    EXPECT_EQ(p, 7) << "output untouched on failure";
    EXPECT_HAS(err, "port 0 out of range");
    EXPECT_FALSE(parse_port("", p, &err));
    EXPECT_FALSE(parse_port("65536", p, &err));
    EXPECT_FALSE(parse_port("0000443", p, &err));  // 7 characters
    EXPECT_FALSE(parse_port("4x3", p, nullptr));
}

TEST(IpToSockaddr, Literals) {
    sockaddr_storage ss;
    ASSERT_TRUE(ip_to_sockaddr("192.168.1.2", 80, ss));
    EXPECT_EQ(ss.ss_family, AF_INET);
    EXPECT_EQ(ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port), 80);
    EXPECT_EQ(sockaddr_len(reinterpret_cast<sockaddr*>(&ss)), sizeof(sockaddr_in));

    ASSERT_TRUE(ip_to_sockaddr("fd00::2", 443, ss));
    EXPECT_EQ(ss.ss_family, AF_INET6);
    EXPECT_EQ(ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port), 443);
    EXPECT_EQ(sockaddr_len(reinterpret_cast<sockaddr*>(&ss)), sizeof(sockaddr_in6));

    ASSERT_TRUE(ip_to_sockaddr("[::1]", 1, ss));
    EXPECT_EQ(ss.ss_family, AF_INET6);

    EXPECT_FALSE(ip_to_sockaddr("example.com", 1, ss));
    EXPECT_FALSE(ip_to_sockaddr("", 1, ss));
    EXPECT_FALSE(ip_to_sockaddr("1.2.3", 1, ss));
    EXPECT_FALSE(ip_to_sockaddr("256.1.1.1", 1, ss));
    EXPECT_FALSE(ip_to_sockaddr("[10.0.0.1", 1, ss));
}

bool loopback(const char* ip) {
    sockaddr_storage ss;
    EXPECT_TRUE(ip_to_sockaddr(ip, 1, ss)) << ip;
    return is_loopback(reinterpret_cast<sockaddr*>(&ss));
}

TEST(IsLoopback, Addresses) {
    EXPECT_TRUE(loopback("127.0.0.1"));
    EXPECT_TRUE(loopback("127.1.2.3"));
    EXPECT_TRUE(loopback("127.255.255.255"));
    EXPECT_TRUE(loopback("::1"));
    EXPECT_TRUE(loopback("::ffff:127.0.0.1"));
    EXPECT_TRUE(loopback("::ffff:127.9.9.9"));
    EXPECT_FALSE(loopback("10.0.0.1"));
    EXPECT_FALSE(loopback("128.0.0.1"));
    EXPECT_FALSE(loopback("0.0.0.0"));
    EXPECT_FALSE(loopback("::"));
    EXPECT_FALSE(loopback("::ffff:10.0.0.1"));
    EXPECT_FALSE(loopback("fd00::1"));
    EXPECT_FALSE(loopback("::2"));
}

TEST(IsLoopback, OtherFamily) {
    sockaddr_storage ss{};
    ss.ss_family = AF_UNIX;
    EXPECT_FALSE(is_loopback(reinterpret_cast<sockaddr*>(&ss)));
    EXPECT_EQ(sockaddr_str(reinterpret_cast<sockaddr*>(&ss)), "?");
}

std::string str_of(const char* ip, uint16_t port) {
    sockaddr_storage ss;
    EXPECT_TRUE(ip_to_sockaddr(ip, port, ss)) << ip;
    return sockaddr_str(reinterpret_cast<sockaddr*>(&ss));
}

TEST(SockaddrStr, Formats) {
    EXPECT_EQ(str_of("127.0.0.1", 7445), "127.0.0.1:7445");
    EXPECT_EQ(str_of("::1", 7445), "[::1]:7445");
    EXPECT_EQ(str_of("fd00:0:0::1", 6443), "[fd00::1]:6443");  // canonical form
    EXPECT_EQ(str_of("10.1.2.3", 65535), "10.1.2.3:65535");
}

TEST(HostPortStr, RoundTrips) {
    for (const char* s : {"10.0.0.1:6443", "[fd00::1]:6443", "api.example.com:443", "[::1]:1"}) {
        EXPECT_EQ(ok(s).str(), s);
        EXPECT_EQ(ok(ok(s).str()), ok(s));
    }
}

}  // namespace
}  // namespace kprism
