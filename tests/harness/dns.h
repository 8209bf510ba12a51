// SPDX-License-Identifier: Apache-2.0
// A real DNS server for the hostname tests: tests/harness/dns_server.py (UDP and TCP) on a
// loopback address, its answers set by the test; kprism is pointed at it with dns_env().
#pragma once

#include <memory>
#include <string>

#include "harness/harness.h"

namespace it {

class DnsServer {
public:
    // Starts the server on `address` (any port); throws std::runtime_error if it does not start.
    explicit DnsServer(const std::string& address = "127.0.0.1");
    ~DnsServer();
    DnsServer(const DnsServer&) = delete;
    DnsServer& operator=(const DnsServer&) = delete;

    // The zone from now on, as dns_server.py reads it: {"name": {"A": [...], "AAAA": [...], "mode": ...}}.
    void set_zone(const std::string& json);
    // "127.0.0.1:PORT"
    const std::string& servers() const { return servers_; }
    // The environment entry that makes kprism ask this server (kprism(8), ENVIRONMENT).
    std::string dns_env() const { return "KPRISM_TEST_DNS_SERVERS=" + servers_; }
    // Queries so far for `name` over `transport` ("udp", "tcp").
    size_t queries(const std::string& name, const std::string& transport) const;
    std::string output() const { return proc_->output(); }

private:
    std::string dir_, zone_, servers_;
    std::unique_ptr<Process> proc_;
};

}  // namespace it
