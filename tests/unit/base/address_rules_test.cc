// SPDX-License-Identifier: Apache-2.0
// Refused ranges, CIDRs, kprism's own listeners and the discovery admission rules (kprism/base/address_rules.h).
#include "kprism/base/address_rules.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <string>

#include "kprism/base/address.h"

namespace kprism {
namespace {

sockaddr_storage sa(std::string_view ip, uint16_t port = 6443) {
    sockaddr_storage ss;
    EXPECT_TRUE(ip_to_sockaddr(ip, port, ss)) << ip;
    return ss;
}

std::string range(std::string_view ip) {
    sockaddr_storage ss = sa(ip);
    const char* r = refused_range(as_sockaddr(ss));
    return r ? r : "";
}

OwnListener ol(std::string_view ip, uint16_t port, bool v6_only = false) { return {sa(ip, port), v6_only}; }

Cidr cidr(std::string_view s) {
    Cidr c;
    std::string err;
    EXPECT_TRUE(parse_cidr(s, c, &err)) << s << ": " << err;
    return c;
}

TEST(RefusedRange, EachRangeAndItsMappedForm) {
    for (const char* ip : {"127.0.0.1", "127.255.255.254", "::1", "::ffff:127.0.0.1"}) EXPECT_EQ(range(ip), "loopback") << ip;
    for (const char* ip : {"0.0.0.0", "::", "::ffff:0.0.0.0"}) EXPECT_EQ(range(ip), "unspecified") << ip;
    for (const char* ip : {"0.0.0.1", "0.1.2.3", "0.255.255.255", "::ffff:0.0.0.5"}) EXPECT_EQ(range(ip), "this network") << ip;
    for (const char* ip : {"169.254.169.254", "169.254.0.1", "fe80::1", "febf::1", "::ffff:169.254.169.254"})
        EXPECT_EQ(range(ip), "link-local") << ip;
    for (const char* ip : {"224.0.0.1", "239.255.255.255", "ff02::1", "ff00::", "::ffff:224.0.0.1"})
        EXPECT_EQ(range(ip), "multicast") << ip;
    for (const char* ip : {"255.255.255.255", "::ffff:255.255.255.255"}) EXPECT_EQ(range(ip), "broadcast") << ip;
    for (const char* ip : {"1.0.0.0", "10.0.0.1", "192.168.1.1", "126.255.255.255", "128.0.0.1", "169.253.1.1", "223.255.255.255",
                           "240.0.0.1", "255.255.255.254", "fd00::1", "2001:db8::1", "fec0::1", "::2", "::ffff:10.0.0.1"})
        EXPECT_EQ(range(ip), "") << ip;
}

// A name's addresses: the same ranges refused, loopback (and its mapped form) allowed.
TEST(RefusedRange, ForANameLoopbackIsAllowed) {
    auto name_range = [](std::string_view ip) {
        sockaddr_storage ss = sa(ip);
        const char* r = refused_name_range(as_sockaddr(ss));
        return std::string(r ? r : "");
    };
    for (const char* ip : {"127.0.0.1", "127.0.0.2", "::1", "::ffff:127.0.0.1", "10.0.0.1", "fd00::1"})
        EXPECT_EQ(name_range(ip), "") << ip;
    EXPECT_EQ(name_range("0.0.0.0"), "unspecified");
    EXPECT_EQ(name_range("::"), "unspecified");
    EXPECT_EQ(name_range("::ffff:0.0.0.0"), "unspecified");
    EXPECT_EQ(name_range("0.1.2.3"), "this network");
    EXPECT_EQ(name_range("169.254.169.254"), "link-local");
    EXPECT_EQ(name_range("::ffff:169.254.169.254"), "link-local");
    EXPECT_EQ(name_range("fe80::1"), "link-local");
    EXPECT_EQ(name_range("224.0.0.1"), "multicast");
    EXPECT_EQ(name_range("ff02::1"), "multicast");
    EXPECT_EQ(name_range("255.255.255.255"), "broadcast");
}

TEST(Cidr, ParseAndContain) {
    Cidr c = cidr("10.0.0.0/8");
    EXPECT_EQ(c.str(), "10.0.0.0/8");
    EXPECT_TRUE(c.contains(as_sockaddr(sa("10.255.0.1"))));
    EXPECT_TRUE(c.contains(as_sockaddr(sa("::ffff:10.1.1.1"))));
    EXPECT_FALSE(c.contains(as_sockaddr(sa("11.0.0.1"))));
    EXPECT_FALSE(c.contains(as_sockaddr(sa("fd00::1"))));
    EXPECT_EQ(cidr("10.1.2.3/12").str(), "10.0.0.0/12");  // host bits cleared
    Cidr n12 = cidr("10.16.0.0/12");
    EXPECT_TRUE(n12.contains(as_sockaddr(sa("10.31.255.255"))));
    EXPECT_FALSE(n12.contains(as_sockaddr(sa("10.32.0.0"))));
    EXPECT_TRUE(cidr("0.0.0.0/0").contains(as_sockaddr(sa("1.2.3.4"))));
    EXPECT_TRUE(cidr("127.0.0.0/8").contains(as_sockaddr(sa("127.0.0.1"))));
    Cidr v6 = cidr("fd00::/8");
    EXPECT_TRUE(v6.contains(as_sockaddr(sa("fd12::1"))));
    EXPECT_FALSE(v6.contains(as_sockaddr(sa("fe00::1"))));
    EXPECT_TRUE(cidr("::1/128").contains(as_sockaddr(sa("::1"))));
    for (const char* s : {"10.0.0.0", "10.0.0.0/", "10.0.0.0/33", "fd00::/129", "x/8", "10.0.0.0/8a", "/8",
                          "::ffff:10.0.0.0/104", "10.0.0.0/-1", ""}) {
        Cidr out;
        std::string err;
        EXPECT_FALSE(parse_cidr(s, out, &err)) << s;
        EXPECT_NE(err.find("is not a CIDR"), std::string::npos) << err;
    }
}

TEST(OwnListener, ExactWildcardAndMappedForms) {
    std::vector<OwnListener> ls{ol("127.0.0.1", 7445), ol("127.0.0.1", 7446)};
    std::vector<sockaddr_storage> local{sa("10.0.0.5", 0), sa("fd00::5", 0)};
    auto own = [&](std::string_view ip, uint16_t port) {
        sockaddr_storage t = sa(ip, port);
        return is_own_listener(as_sockaddr(t), ls, local);
    };
    EXPECT_TRUE(own("127.0.0.1", 7445));
    EXPECT_TRUE(own("::ffff:127.0.0.1", 7445));
    EXPECT_TRUE(own("127.0.0.1", 7446));  // the admin listener
    EXPECT_FALSE(own("127.0.0.1", 6443));
    EXPECT_FALSE(own("127.0.0.2", 7445));  // another address, nobody listens there
    EXPECT_FALSE(own("10.0.0.5", 7445));

    ls = {ol("0.0.0.0", 7445)};
    EXPECT_TRUE(own("10.0.0.5", 7445));  // a local address
    EXPECT_TRUE(own("127.0.0.9", 7445));
    EXPECT_TRUE(own("0.0.0.0", 7445));
    EXPECT_FALSE(own("10.0.0.6", 7445));  // not this host
    EXPECT_FALSE(own("10.0.0.5", 6443));
    // A 0.0.0.0 socket accepts no IPv6 connection: an IPv6 target is someone else.
    EXPECT_FALSE(own("::1", 7445));
    EXPECT_FALSE(own("::", 7445));
    EXPECT_FALSE(own("fd00::5", 7445));
    EXPECT_TRUE(own("::ffff:10.0.0.5", 7445));  // IPv4, mapped
    ls = {ol("::", 7445)};  // dual-stack: IPv6 and IPv4
    EXPECT_TRUE(own("fd00::5", 7445));
    EXPECT_TRUE(own("::1", 7445));
    EXPECT_TRUE(own("::ffff:10.0.0.5", 7445));
    EXPECT_TRUE(own("10.0.0.5", 7445));
    EXPECT_TRUE(own("127.0.0.1", 7445));
    EXPECT_FALSE(own("fd00::6", 7445));
    ls = {ol("::", 7445, true)};  // IPV6_V6ONLY: no IPv4
    EXPECT_TRUE(own("fd00::5", 7445));
    EXPECT_TRUE(own("::1", 7445));
    EXPECT_FALSE(own("10.0.0.5", 7445));
    EXPECT_FALSE(own("127.0.0.1", 7445));
    EXPECT_FALSE(own("::ffff:127.0.0.1", 7445));
}

// A connect() to the unspecified address goes to loopback (Linux routes 0.0.0.0 to 127.0.0.1 and
// :: to ::1): it reaches a listener bound to 127.0.0.1 or ::1 on its port.
TEST(OwnListener, UnspecifiedTargetReachesTheLoopbackListener) {
    std::vector<OwnListener> ls{ol("127.0.0.1", 7445), ol("::1", 7446)};
    auto own = [&](std::string_view ip, uint16_t port) {
        sockaddr_storage t = sa(ip, port);
        return is_own_listener(as_sockaddr(t), ls, {});
    };
    EXPECT_TRUE(own("0.0.0.0", 7445));
    EXPECT_TRUE(own("::ffff:0.0.0.0", 7445));
    EXPECT_TRUE(own("::", 7446));
    EXPECT_FALSE(own("0.0.0.0", 6443));  // another port
    EXPECT_FALSE(own("::", 7445));       // :: goes to ::1, and nobody listens on [::1]:7445
    EXPECT_FALSE(own("0.0.0.0", 7446));  // 0.0.0.0 goes to 127.0.0.1, not ::1
    ls = {ol("127.0.0.2", 7445)};  // another loopback address: 0.0.0.0 goes to 127.0.0.1 only
    EXPECT_FALSE(own("0.0.0.0", 7445));
}

TEST(OwnListeners, WildcardUsesTheHostsAddresses) {
    const OwnListeners own({ol("0.0.0.0", 7445), ol("127.0.0.1", 7446)});
    sockaddr_storage exact = sa("127.0.0.1", 7446), loop = sa("127.0.0.7", 7445), v6 = sa("::1", 7445);
    EXPECT_TRUE(own.contains(as_sockaddr(exact)));
    EXPECT_TRUE(own.contains(as_sockaddr(loop)));
    EXPECT_FALSE(own.contains(as_sockaddr(v6)));
    // Whatever interface address this host has is one of its own on the wildcard's port.
    for (const auto& a : local_addresses()) {
        sockaddr_storage t = a;
        reinterpret_cast<sockaddr_in*>(&t)->sin_port = htons(7445);  // same offset for IPv6
        if (t.ss_family == AF_INET) {
            EXPECT_TRUE(own.contains(as_sockaddr(t))) << sockaddr_str(t);
        }
    }
}

TEST(AddressRules, DefaultRefusesTheRangesAndListeners) {
    const OwnListeners own({ol("127.0.0.1", 7445), ol("127.0.0.1", 7446)});
    AddressRules rules({}, own);
    auto refuse = [&](std::string_view ip, uint16_t port = 6443) {
        sockaddr_storage t = sa(ip, port);
        return rules.refuse(as_sockaddr(t));
    };
    EXPECT_EQ(refuse("10.0.0.1"), "");
    EXPECT_EQ(refuse("fd00::1"), "");
    EXPECT_EQ(refuse("127.0.0.1"), "loopback address");
    EXPECT_EQ(refuse("169.254.169.254", 80), "link-local address");
    EXPECT_EQ(refuse("::"), "unspecified address");
    EXPECT_EQ(refuse("0.10.0.1"), "this network address");
    EXPECT_EQ(refuse("127.0.0.1", 7445), "kprism listens there");
}

TEST(AddressRules, AllowListAdmitsOnlyItsCidrsNeverAListener) {
    const OwnListeners own({ol("127.0.0.1", 7445), ol("0.0.0.0", 7446)});
    AddressRules rules({cidr("127.0.0.0/8"), cidr("fd00::/8")}, own);
    auto refuse = [&](std::string_view ip, uint16_t port = 6443) {
        sockaddr_storage t = sa(ip, port);
        return rules.refuse(as_sockaddr(t));
    };
    EXPECT_EQ(refuse("127.0.0.1"), "");  // loopback, allowed explicitly
    EXPECT_EQ(refuse("fd00::9"), "");
    EXPECT_EQ(refuse("10.0.0.1"), "in no CIDR of discovery.allowed_cidrs");
    EXPECT_EQ(refuse("127.0.0.1", 7445), "kprism listens there");
    EXPECT_EQ(refuse("::ffff:127.0.0.1", 7445), "kprism listens there");
    EXPECT_EQ(refuse("127.0.0.5", 7446), "kprism listens there");  // the wildcard admin listener
}

}  // namespace
}  // namespace kprism
