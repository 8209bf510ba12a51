// SPDX-License-Identifier: Apache-2.0
// The DNS server wrapper of the hostname tests (dns.h): the Python server as a child process.
#include "harness/dns.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>

namespace it {

DnsServer::DnsServer(const std::string& address) {
    char dir[] = "/tmp/kprism-dns-XXXXXX";
    if (!mkdtemp(dir)) throw std::runtime_error("mkdtemp");
    dir_ = dir;
    zone_ = dir_ + "/zone.json";
    set_zone("{}");
    // Relative to the repository's top, where the suites run (make integration).
    proc_ = std::make_unique<Process>(std::vector<std::string>{"/usr/bin/python3", "tests/harness/dns_server.py", address, zone_});
    const std::string tag = "dns: listening on ";
    if (!proc_->wait_output(tag)) throw std::runtime_error("DNS server did not start: " + proc_->output());
    std::string out = proc_->output();
    size_t at = out.find(tag) + tag.size();
    servers_ = out.substr(at, out.find('\n', at) - at);
}

DnsServer::~DnsServer() {
    proc_.reset();  // killed and reaped
    std::remove(zone_.c_str());
    ::rmdir(dir_.c_str());
}

void DnsServer::set_zone(const std::string& json) {
    std::ofstream(zone_ + ".tmp") << json;
    std::rename((zone_ + ".tmp").c_str(), zone_.c_str());
}

size_t DnsServer::queries(const std::string& name, const std::string& transport) const {
    std::string out = proc_->output(), needle = "dns: query " + name + " ";
    size_t n = 0;
    for (size_t at = out.find(needle); at != std::string::npos; at = out.find(needle, at + 1)) {
        size_t eol = out.find('\n', at);
        if (eol != std::string::npos && out.compare(eol - transport.size(), transport.size(), transport) == 0) ++n;
    }
    return n;
}

}  // namespace it
