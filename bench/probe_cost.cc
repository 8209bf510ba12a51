// SPDX-License-Identifier: Apache-2.0
// CPU cost of readiness probes, with and without TLS session resumption: kprism probes 8 TLS
// stand-in apiservers every 100 ms for a fixed time; CPU of kprism and of the stand-ins is read
// from /proc and divided by the number of probes. Prints one line per mode.
// Usage: build/bench/probe_cost [seconds]
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "harness/harness.h"
#include "harness/pki.h"

using namespace it;

namespace {

double cpu_seconds(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::istringstream in(s.substr(s.rfind(')') + 2));
    std::string field;
    unsigned long long utime = 0, stime = 0;
    for (int i = 3; i <= 15; ++i) {
        in >> field;
        if (i == 14) utime = std::stoull(field);
        if (i == 15) stime = std::stoull(field);
    }
    return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

void measure(bool resumption, int seconds) {
    Pki pki;
    std::vector<std::unique_ptr<Process>> servers;
    std::vector<std::string> eps;
    for (int i = 0; i < 8; ++i) {
        int port = free_port();
        eps.push_back("127.0.0.1:" + std::to_string(port));
        servers.push_back(std::make_unique<Process>(std::vector<std::string>{
            standin_bin(), "--listen", eps.back(), "--name", "s" + std::to_string(i), "--tls-cert", pki.server_cert,
            "--tls-key", pki.server_key, "--client-ca", pki.ca_cert}));
        servers.back()->wait_output("listening");
    }
    Kprism k(eps, {"--client-cert", pki.client_pem, "--client-key", pki.client_pem, "--ca-file", pki.ca_cert,
                   "--health-interval", "100ms", "--health-timeout", "90ms", "--health-fast-interval", "100ms",
                   resumption ? "--health-tls-resumption=true" : "--health-tls-resumption=false"});
    eventually([&] { return k.count_output("msg=\"upstream up\"") >= 8; }, 10000ms);
    auto count = [&](const char* what) {
        size_t n = 0;
        for (auto& s : servers) n += s->count_output(what);
        return n;
    };
    size_t full0 = count("handshake resumed=0"), res0 = count("handshake resumed=1");
    double kc0 = cpu_seconds(k.pid()), sc0 = 0;
    for (auto& s : servers) sc0 += cpu_seconds(s->pid());
    std::this_thread::sleep_for(std::chrono::seconds(seconds));
    double kc1 = cpu_seconds(k.pid()), sc1 = 0;
    for (auto& s : servers) sc1 += cpu_seconds(s->pid());
    size_t full = count("handshake resumed=0") - full0, res = count("handshake resumed=1") - res0;
    size_t probes = full + res;
    double k_ms = (kc1 - kc0) * 1000.0 / static_cast<double>(probes) * 1000.0;
    double s_ms = (sc1 - sc0) * 1000.0 / static_cast<double>(probes) * 1000.0;
    // 1000 nodes probing every 5 s = 200 probes/s at each apiserver.
    printf("resumption=%-3s probes=%zu full_handshakes=%zu resumed=%zu  kprism_cpu_ms_per_1000=%.0f  "
           "apiserver_cpu_ms_per_1000=%.0f  at_1000_nodes: %zu full handshakes/s per apiserver, %.1f%% of a core\n",
           resumption ? "on" : "off", probes, full, res, k_ms, s_ms,
           probes ? static_cast<size_t>(200.0 * static_cast<double>(full) / static_cast<double>(probes)) : 0,
           200.0 * s_ms / 1000.0 / 10.0);
    fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
    int seconds = argc > 1 ? std::atoi(argv[1]) : 10;
    printf("# readiness probe cost: 8 TLS stand-ins (thread per connection, OpenSSL), probes every 100 ms, %d s each\n",
           seconds);
    measure(true, seconds);
    measure(false, seconds);
}
