// SPDX-License-Identifier: Apache-2.0
// Endpoint and listen address syntax: "host:port", "[v6]:port", IP literals, loopback checks.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace kprism {

struct HostPort {
    std::string host;  // without brackets
    uint16_t port = 0;
    bool is_ip = false;  // host is an IPv4/IPv6 literal (no DNS needed)

    // "10.0.0.1:6443", "[fd00::1]:6443", "api.example.com:6443"
    std::string str() const;
    bool operator==(const HostPort&) const = default;
};

// Parses "host:port". IPv6 literals need brackets. On failure returns false with *err set.
bool parse_host_port(std::string_view s, HostPort& out, std::string* err);

// Parses a port number 1..65535 given as text.
bool parse_port(std::string_view s, uint16_t& out, std::string* err);

// Fills `out` for an IP literal (IPv4 or IPv6, brackets optional). False if not a literal.
bool ip_to_sockaddr(std::string_view ip, uint16_t port, sockaddr_storage& out);

inline const sockaddr* as_sockaddr(const sockaddr_storage& ss) { return reinterpret_cast<const sockaddr*>(&ss); }
bool is_loopback(const sockaddr* sa);
inline bool is_loopback(const sockaddr_storage& ss) { return is_loopback(as_sockaddr(ss)); }
std::string sockaddr_str(const sockaddr* sa);  // "127.0.0.1:7445" / "[::1]:7445"
inline std::string sockaddr_str(const sockaddr_storage& ss) { return sockaddr_str(as_sockaddr(ss)); }
socklen_t sockaddr_len(const sockaddr* sa);

}  // namespace kprism
