// SPDX-License-Identifier: Apache-2.0
// Which addresses kprism may connect to: the refused ranges, the allow-list of CIDRs for
// discovered addresses, and its own listeners (src/base/address_rules.cc).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
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

// The refused range `sa` is in, as words for a log line ("loopback", "unspecified" (0.0.0.0, ::),
// "this network" (the rest of 0.0.0.0/8), "link-local", "multicast", "broadcast"), or nullptr. IPv4-mapped IPv6 addresses count as their IPv4 address.
const char* refused_range(const sockaddr* sa);

// The refused range a hostname endpoint's resolved address `sa` is in, or nullptr: refused_range
// except loopback, which stays allowed for names (an operator-written "localhost:6443").
const char* refused_name_range(const sockaddr* sa);

// A socket kprism listens on: its address with the port, and whether a "::" one takes IPv6 only
// (IPV6_V6ONLY). A "::" socket without it also accepts IPv4; a "0.0.0.0" one never accepts IPv6.
struct OwnListener {
    sockaddr_storage addr{};
    bool v6_only = false;
};

// Is `target` (address and port) one kprism listens on? A listener on a wildcard address
// (0.0.0.0, ::) matches its port on any local address of a family it accepts: loopback, the
// wildcard itself, or one of `local` (the host's interface addresses; ports ignored).
// IPv4-mapped forms count as their IPv4 address. An unspecified target (0.0.0.0, ::) is the
// loopback address a connect() to it reaches (127.0.0.1, ::1).
bool is_own_listener(const sockaddr* target, const std::vector<OwnListener>& listeners,
                     const std::vector<sockaddr_storage>& local);

// The host's interface addresses (getifaddrs), ports 0; empty if they cannot be read.
std::vector<sockaddr_storage> local_addresses();

// The one answer to "is this kprism itself?": the sockets it listens on (as bound, from the
// sockets; or as configured, for validation before anything is bound). The interface addresses
// are read only for a target on a wildcard listener's port, and then kept for kLocalAddressesTtl,
// so that a watch event naming a thousand endpoints reads them once.
class OwnListeners {
public:
    OwnListeners() = default;
    explicit OwnListeners(std::vector<OwnListener> listeners) : listeners_(std::move(listeners)) {}
    bool contains(const sockaddr* target) const;
    const std::vector<OwnListener>& list() const { return listeners_; }
    static constexpr std::chrono::milliseconds kLocalAddressesTtl{1000};

private:
    std::vector<OwnListener> listeners_;
    mutable std::vector<sockaddr_storage> local_;
    mutable std::chrono::steady_clock::time_point local_read_{};
    mutable bool local_valid_ = false;
};

// The rules for an address that discovery (or its snapshot) names. `allowed` empty: every address
// outside the refused ranges; else only those inside one of `allowed`. Never one of `own` (which
// must outlive the rules).
class AddressRules {
public:
    AddressRules(std::vector<Cidr> allowed, const OwnListeners& own) : allowed_(std::move(allowed)), own_(own) {}
    // Empty when `sa` is admitted; else why not, for a log line ("loopback address", ...).
    std::string refuse(const sockaddr* sa) const;

private:
    std::vector<Cidr> allowed_;
    const OwnListeners& own_;
};

}  // namespace kprism
