// SPDX-License-Identifier: Apache-2.0
// Which addresses kprism may connect to: the refused ranges, the allow-list of CIDRs for
// discovered addresses, and its own listeners (src/address_rules.cc).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <string>
#include <utility>
#include <string_view>
#include <vector>

namespace kprism {

// An IPv4 or IPv6 network, "10.0.0.0/8" or "fd00::/8". IPv4-mapped IPv6 addresses are compared
// as the IPv4 address they map.
struct Cidr {
    int family = AF_INET;
    unsigned char addr[16] = {};  // network bytes (4 used for IPv4), host bits cleared
    unsigned prefix = 0;
    std::string str() const;
    bool contains(const sockaddr* sa) const;
};

// "10.0.0.0/8", "fd00::/8" (host bits are cleared: "10.1.2.3/8" is 10.0.0.0/8). False with `err`.
bool parse_cidr(std::string_view s, Cidr& out, std::string* err);

// The refused range `sa` is in, as words for a log line ("loopback", "unspecified", "link-local",
// "multicast", "broadcast"), or nullptr. IPv4-mapped IPv6 addresses count as their IPv4 address.
const char* refused_range(const sockaddr* sa);

// Is `target` (address and port) one kprism listens on? A listener on a wildcard address
// (0.0.0.0, ::) matches its port on any local address: loopback, the wildcard itself, or one of
// `local` (the host's interface addresses; ports ignored). IPv4-mapped forms match their IPv4.
bool is_own_listener(const sockaddr* target, const std::vector<sockaddr_storage>& listeners,
                     const std::vector<sockaddr_storage>& local);

// The host's interface addresses (getifaddrs), ports 0; empty if they cannot be read.
std::vector<sockaddr_storage> local_addresses();

// The rules for an address that discovery (or its snapshot) names. `allowed` empty: every address
// outside the refused ranges; else only those inside one of `allowed`. Never one of `listeners`
// (the bind addresses and the admin address, each with its port).
class AddressRules {
public:
    AddressRules(std::vector<Cidr> allowed, std::vector<sockaddr_storage> listeners)
        : allowed_(std::move(allowed)), listeners_(std::move(listeners)) {}
    // Empty when `sa` is admitted; else why not, for a log line ("loopback address", ...).
    std::string refuse(const sockaddr* sa) const;

private:
    std::vector<Cidr> allowed_;
    std::vector<sockaddr_storage> listeners_;
};

}  // namespace kprism
