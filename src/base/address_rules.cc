// SPDX-License-Identifier: Apache-2.0
// Which addresses kprism may connect to: refused ranges, the discovery allow-list, its own listeners.
#include "kprism/base/address_rules.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <ifaddrs.h>

#include <cstring>

#include "kprism/base/address.h"

namespace kprism {

namespace {

// The address bytes of `sa`, an IPv4-mapped IPv6 address as its IPv4 address. Family 0 if neither.
struct Bytes {
    int family = 0;
    unsigned char b[16] = {};
    uint16_t port = 0;
};

Bytes bytes_of(const sockaddr* sa) {
    Bytes out;
    if (sa->sa_family == AF_INET) {
        auto* v4 = reinterpret_cast<const sockaddr_in*>(sa);
        out.family = AF_INET;
        std::memcpy(out.b, &v4->sin_addr, 4);
        out.port = ntohs(v4->sin_port);
    } else if (sa->sa_family == AF_INET6) {
        auto* v6 = reinterpret_cast<const sockaddr_in6*>(sa);
        out.port = ntohs(v6->sin6_port);
        if (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr)) {
            out.family = AF_INET;
            std::memcpy(out.b, &v6->sin6_addr.s6_addr[12], 4);
        } else {
            out.family = AF_INET6;
            std::memcpy(out.b, &v6->sin6_addr, 16);
        }
    }
    return out;
}

size_t width(int family) { return family == AF_INET ? 4 : 16; }

bool all_zero(const Bytes& a) {
    for (size_t i = 0; i < width(a.family); ++i)
        if (a.b[i] != 0) return false;
    return true;
}

bool same_address(const Bytes& a, const Bytes& b) {
    return a.family == b.family && std::memcmp(a.b, b.b, width(a.family)) == 0;
}

}  // namespace

std::string Cidr::str() const {
    char buf[INET6_ADDRSTRLEN] = "?";
    inet_ntop(family, addr, buf, sizeof buf);
    return fmt::format("{}/{}", buf, prefix);
}

bool Cidr::contains(const sockaddr* sa) const {
    Bytes a = bytes_of(sa);
    if (a.family != family) return false;
    unsigned full = prefix / 8, rest = prefix % 8;
    if (std::memcmp(a.b, addr, full) != 0) return false;
    if (rest == 0) return true;
    auto mask = static_cast<unsigned char>(0xff << (8 - rest));
    return (a.b[full] & mask) == addr[full];
}

bool parse_cidr(std::string_view s, Cidr& out, std::string* err) {
    auto bad = [&](std::string_view why) {
        if (err) *err = fmt::format("'{}' is not a CIDR ({}; want e.g. 10.0.0.0/8 or fd00::/8)", s, why);
        return false;
    };
    size_t slash = s.find('/');
    if (slash == std::string_view::npos) return bad("no /prefix");
    std::string ip(s.substr(0, slash));
    std::string_view len = s.substr(slash + 1);
    Cidr c;
    if (inet_pton(AF_INET, ip.c_str(), c.addr) == 1) {
        c.family = AF_INET;
    } else if (inet_pton(AF_INET6, ip.c_str(), c.addr) == 1) {
        c.family = AF_INET6;
    } else {
        return bad("not an IP address before the /");
    }
    if (len.empty() || len.size() > 3 || len.find_first_not_of("0123456789") != std::string_view::npos)
        return bad("the prefix length is not a number");
    unsigned p = 0;
    for (char ch : len) p = p * 10 + static_cast<unsigned>(ch - '0');
    if (p > width(c.family) * 8) return bad(fmt::format("prefix longer than {}", width(c.family) * 8));
    if (c.family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(reinterpret_cast<const in6_addr*>(c.addr)))
        return bad("an IPv4-mapped network: write it as IPv4");
    c.prefix = p;
    for (size_t i = 0; i < 16; ++i) {
        unsigned bit = static_cast<unsigned>(i) * 8;
        if (bit >= p) c.addr[i] = 0;
        else if (bit + 8 > p) c.addr[i] &= static_cast<unsigned char>(0xff << (bit + 8 - p));
    }
    out = c;
    return true;
}

const char* refused_range(const sockaddr* sa) {
    Bytes a = bytes_of(sa);
    if (a.family == 0) return "not an IP";
    if (all_zero(a)) return "unspecified";
    if (a.family == AF_INET) {
        if (a.b[0] == 0) return "this network";  // 0.0.0.0/8 (RFC 1122): no host to reach there
        if (a.b[0] == 127) return "loopback";
        if (a.b[0] == 169 && a.b[1] == 254) return "link-local";
        if ((a.b[0] & 0xf0) == 224) return "multicast";
        if (a.b[0] == 255 && a.b[1] == 255 && a.b[2] == 255 && a.b[3] == 255) return "broadcast";
        return nullptr;
    }
    static const unsigned char loop6[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    if (std::memcmp(a.b, loop6, 16) == 0) return "loopback";
    if (a.b[0] == 0xfe && (a.b[1] & 0xc0) == 0x80) return "link-local";
    if (a.b[0] == 0xff) return "multicast";
    return nullptr;
}

const char* refused_name_range(const sockaddr* sa) {
    const char* r = refused_range(sa);
    return r && std::strcmp(r, "loopback") == 0 ? nullptr : r;
}

namespace {

// Does the listener `l` (a wildcard one included) take connections of `t`'s family?
bool accepts_family(const OwnListener& ol, const Bytes& l, const Bytes& t) {
    if (l.family == t.family) return true;
    return l.family == AF_INET6 && t.family == AF_INET && !ol.v6_only && all_zero(l);
}

bool wildcard_on_port(const std::vector<OwnListener>& listeners, const Bytes& t) {
    for (const auto& ol : listeners) {
        Bytes l = bytes_of(as_sockaddr(ol.addr));
        if (l.family != 0 && l.port == t.port && all_zero(l) && accepts_family(ol, l, t)) return true;
    }
    return false;
}

}  // namespace

bool is_own_listener(const sockaddr* target, const std::vector<OwnListener>& listeners,
                     const std::vector<sockaddr_storage>& local) {
    Bytes t = bytes_of(target);
    if (t.family == 0) return false;
    // connect() to the unspecified address goes to loopback (Linux: 0.0.0.0 to 127.0.0.1, :: to ::1),
    // so it reaches a listener bound there.
    if (all_zero(t)) {
        if (t.family == AF_INET) t.b[0] = 127;
        t.b[width(t.family) - 1] = 1;
    }
    for (const auto& ol : listeners) {
        Bytes l = bytes_of(as_sockaddr(ol.addr));
        if (l.family == 0 || l.port != t.port) continue;
        if (same_address(l, t)) return true;
        if (!all_zero(l) || !accepts_family(ol, l, t)) continue;
        // A wildcard listener: any address of this host in a family it accepts.
        const char* range = refused_range(target);
        if (range && (std::strcmp(range, "loopback") == 0 || std::strcmp(range, "unspecified") == 0)) return true;
        for (const auto& a : local)
            if (same_address(bytes_of(as_sockaddr(a)), t)) return true;
    }
    return false;
}

bool OwnListeners::contains(const sockaddr* target) const {
    // The interface addresses matter only to a wildcard listener on this port.
    if (!wildcard_on_port(listeners_, bytes_of(target))) return is_own_listener(target, listeners_, {});
    const auto now = std::chrono::steady_clock::now();
    if (!local_valid_ || now - local_read_ >= kLocalAddressesTtl) {
        local_ = local_addresses();
        local_read_ = now;
        local_valid_ = true;
    }
    return is_own_listener(target, listeners_, local_);
}

std::vector<sockaddr_storage> local_addresses() {
    std::vector<sockaddr_storage> out;
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0) return out;
    for (ifaddrs* i = list; i; i = i->ifa_next) {
        if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) continue;
        sockaddr_storage ss{};
        std::memcpy(&ss, i->ifa_addr, sockaddr_len(i->ifa_addr));
        out.push_back(ss);
    }
    freeifaddrs(list);
    return out;
}

std::string AddressRules::refuse(const sockaddr* sa) const {
    if (own_.contains(sa)) return "kprism listens there";
    if (allowed_.empty()) {
        if (const char* r = refused_range(sa)) return fmt::format("{} address", r);
        return "";
    }
    for (const auto& c : allowed_)
        if (c.contains(sa)) return "";
    return "in no CIDR of discovery.allowed_cidrs";
}

}  // namespace kprism
