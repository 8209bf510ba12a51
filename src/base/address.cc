// SPDX-License-Identifier: Apache-2.0
// Parsing and printing of host:port strings and socket addresses.
#include "kprism/base/address.h"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <cstring>

namespace kprism {

std::string HostPort::str() const {
    if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
    return fmt::format("{}:{}", host, port);
}

bool parse_port(std::string_view s, uint16_t& out, std::string* err) {
    if (s.empty() || s.size() > 6) {
        if (err) *err = fmt::format("invalid port '{}'", s);
        return false;
    }
    uint32_t v = 0;
    for (char c : s) {
        if (c < '0' || c > '9') {
            if (err) *err = fmt::format("invalid port '{}'", s);
            return false;
        }
        v = v * 10 + static_cast<uint32_t>(c - '0');
    }
    if (v == 0 || v > 65535) {
        if (err) *err = fmt::format("port {} out of range 1-65535", v);
        return false;
    }
    out = static_cast<uint16_t>(v);
    return true;
}

// RFC 1123 names: labels of 1-63 letters, digits, '-' (not at either end) or '_', dot-separated.
static bool valid_hostname(std::string_view h) {
    if (h.empty() || h.size() > 253) return false;
    if (h.back() == '.') h.remove_suffix(1);  // a fully qualified name may end with a dot
    size_t start = 0;
    while (start <= h.size()) {
        size_t dot = h.find('.', start);
        if (dot == std::string_view::npos) dot = h.size();
        std::string_view label = h.substr(start, dot - start);
        if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') return false;
        for (char c : label)
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_'))
                return false;
        start = dot + 1;
    }
    // All-numeric dotted names ("256.1.1.1", "1.2.3") are malformed IPv4, not hostnames.
    return h.find_first_not_of("0123456789.") != std::string_view::npos;
}

bool parse_host_port(std::string_view s, HostPort& out, std::string* err) {
    auto bad = [&](std::string msg) {
        if (err) *err = std::move(msg);
        return false;
    };
    std::string_view host, port;
    if (!s.empty() && s.front() == '[') {
        size_t close = s.find(']');
        if (close == std::string_view::npos) return bad(fmt::format("invalid address '{}': missing ']'", s));
        host = s.substr(1, close - 1);
        if (close + 1 >= s.size() || s[close + 1] != ':')
            return bad(fmt::format("invalid address '{}': want [ipv6]:port", s));
        port = s.substr(close + 2);
        in6_addr a6;
        if (inet_pton(AF_INET6, std::string(host).c_str(), &a6) != 1)
            return bad(fmt::format("invalid address '{}': '{}' is not an IPv6 address", s, host));
    } else {
        size_t colon = s.rfind(':');
        if (colon == std::string_view::npos) return bad(fmt::format("invalid address '{}': missing port (want host:port)", s));
        host = s.substr(0, colon);
        port = s.substr(colon + 1);
        if (host.find(':') != std::string_view::npos)
            return bad(fmt::format("invalid address '{}': IPv6 addresses need brackets, e.g. [fd00::1]:6443", s));
        if (host.empty()) return bad(fmt::format("invalid address '{}': missing host", s));
    }
    std::string perr;
    if (!parse_port(port, out.port, &perr)) return bad(fmt::format("invalid address '{}': {}", s, perr));
    out.host = std::string(host);
    sockaddr_storage ss;
    out.is_ip = ip_to_sockaddr(out.host, out.port, ss);
    if (!out.is_ip && !valid_hostname(out.host))
        return bad(fmt::format("invalid address '{}': '{}' is not an IP address or hostname", s, out.host));
    return true;
}

bool ip_to_sockaddr(std::string_view ip, uint16_t port, sockaddr_storage& out) {
    std::memset(&out, 0, sizeof out);
    if (ip.size() >= 2 && ip.front() == '[' && ip.back() == ']') ip = ip.substr(1, ip.size() - 2);
    std::string s(ip);
    auto* v4 = reinterpret_cast<sockaddr_in*>(&out);
    if (inet_pton(AF_INET, s.c_str(), &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(port);
        return true;
    }
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&out);
    if (inet_pton(AF_INET6, s.c_str(), &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(port);
        return true;
    }
    return false;
}

bool is_loopback(const sockaddr* sa) {
    if (sa->sa_family == AF_INET) {
        auto* v4 = reinterpret_cast<const sockaddr_in*>(sa);
        return (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        auto* v6 = reinterpret_cast<const sockaddr_in6*>(sa);
        if (IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr)) return true;
        if (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr)) return v6->sin6_addr.s6_addr[12] == 127;
    }
    return false;
}

socklen_t sockaddr_len(const sockaddr* sa) {
    return sa->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

std::string sockaddr_str(const sockaddr* sa) {
    char buf[INET6_ADDRSTRLEN] = "?";
    if (sa->sa_family == AF_INET) {
        auto* v4 = reinterpret_cast<const sockaddr_in*>(sa);
        inet_ntop(AF_INET, &v4->sin_addr, buf, sizeof buf);
        return fmt::format("{}:{}", buf, ntohs(v4->sin_port));
    }
    if (sa->sa_family == AF_INET6) {
        auto* v6 = reinterpret_cast<const sockaddr_in6*>(sa);
        inet_ntop(AF_INET6, &v6->sin6_addr, buf, sizeof buf);
        return fmt::format("[{}]:{}", buf, ntohs(v6->sin6_port));
    }
    return "?";
}

}  // namespace kprism
