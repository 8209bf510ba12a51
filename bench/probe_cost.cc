// SPDX-License-Identifier: Apache-2.0
// CPU cost of readiness probes, with and without TLS session resumption: kprism probes 8 TLS
// stand-in apiservers every 100 ms for a fixed time; CPU of kprism and of the stand-ins is read
// from /proc and divided by the number of probes. Prints one line per mode.
//
// Usage: build/bench/probe_cost [seconds] [--apiserver PATH [--path /readyz] [--rounds 5]]
//
// Without --apiserver: the C++ stand-in ($KPRISM_STANDIN, thread per connection, OpenSSL), which
// logs every handshake; two modes, resumption on and off (bench/compare.sh parses these lines).
// With --apiserver PATH: the Go kube-apiserver stand-in (tests/apiserver, crypto/tls and
// net/http as kube-apiserver uses them), 8 `serve` processes per mode on one `store`; four modes,
// TLS 1.3 and 1.2 (--tls-max-version) each with a full handshake per probe (tls_resumption =
// false) and resumed, taking turns in --rounds slices of seconds/rounds each, so that drift hits
// all four alike. Handshakes are counted by kprism (kprism_tls_handshakes_total on /metrics), the
// store's CPU is reported apart; --path sets health.path (/readyz/ping: no store round trip).
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>

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

// Busy CPU seconds of the whole machine (every CPU), from the first line of /proc/stat.
double machine_busy_seconds() {
    std::ifstream f("/proc/stat");
    std::string cpu;
    unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
    f >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
    unsigned long long busy = user + nice + system + irq + softirq + steal;
    return static_cast<double>(busy) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The sum over upstreams of a kprism counter family's samples whose labels contain `label`, from
// the admin endpoint's /metrics; -1 if it cannot be read.
double metric_sum(int admin_port, const std::string& family, const std::string& label) {
    std::string m = http_get(admin_port, "/metrics");
    if (m.rfind("HTTP/1.1 200", 0) != 0) return -1;
    double sum = 0;
    std::istringstream in(m);
    for (std::string line; std::getline(in, line);) {
        if (line.rfind(family + "{", 0) != 0 || line.find(label) == std::string::npos) continue;
        sum += std::strtod(line.c_str() + line.rfind(' ') + 1, nullptr);
    }
    return sum;
}

// One of the four modes against the Go stand-in: its 8 `serve` processes (highest TLS version
// `tls`, on the shared store) live for the whole run; kprism is started fresh for each slice.
struct GoMode {
    std::string tls;
    bool resumption;
    std::vector<std::unique_ptr<Process>> servers;
    std::vector<std::string> eps;
    double kprism_s = 0, apiserver_s = 0, store_s = 0, others_s = 0, wall_s = 0;  // summed over slices
    double full = 0, resumed = 0, ready = 0;

    double per_1000(double cpu_s) const { return cpu_s * 1e6 / (full + resumed); }
    double apiserver_ms() const { return per_1000(apiserver_s); }
    double kprism_ms() const { return per_1000(kprism_s); }
    double store_ms() const { return per_1000(store_s); }
};

void start_servers(GoMode& m, const std::string& bin, const Pki& pki, const std::string& sock) {
    for (int i = 0; i < 8; ++i) {
        m.servers.push_back(std::make_unique<Process>(std::vector<std::string>{
            bin, "serve", "--store", "unix:" + sock, "--tls-cert-file", pki.server_cert, "--tls-private-key-file",
            pki.server_key, "--client-ca-file", pki.ca_cert, "--bind-address", "127.0.0.1", "--secure-port", "0",
            "--tls-max-version", m.tls, "--name", "g" + m.tls + "-" + std::to_string(i)}));
        Process& p = *m.servers.back();
        const std::string mark = "event=listening address=";
        if (!p.wait_output(mark, 10000ms)) {
            fprintf(stderr, "probe_cost: kprism-apiserver did not start:\n%s\n", p.output().c_str());
            exit(1);
        }
        std::string o = p.output();
        size_t a = o.find(mark) + mark.size();
        m.eps.push_back(o.substr(a, o.find_first_of(" \n", a) - a));
    }
}

// One slice of a mode: a fresh kprism probes the mode's stand-ins every 100 ms; after they are
// up and 1 s more (the first, full, handshakes), CPU and kprism's counters are read over `ms`.
void slice(GoMode& m, const Pki& pki, const Process& store, const std::string& path, long ms) {
    Kprism k(m.eps, {"--client-cert", pki.client_pem, "--client-key", pki.client_pem, "--ca-file", pki.ca_cert,
                     "--health-interval", "100ms", "--health-timeout", "90ms", "--health-fast-interval", "100ms",
                     "--health-path", path,
                     m.resumption ? "--health-tls-resumption=true" : "--health-tls-resumption=false"});
    if (!eventually([&] { return k.count_output("msg=\"upstream up\"") >= 8; }, 10000ms)) {
        fprintf(stderr, "probe_cost: not every Go stand-in came up:\n%s\n", k.output().c_str());
        exit(1);
    }
    std::this_thread::sleep_for(1s);
    auto servers_cpu = [&] {
        double c = 0;
        for (auto& s : m.servers) c += cpu_seconds(s->pid());
        return c;
    };
    const std::string hs = "kprism_tls_handshakes_total", checks = "kprism_health_checks_total";
    auto counters = [&] {
        return std::array<double, 3>{metric_sum(k.admin_port, hs, "resumed=\"false\""),
                                     metric_sum(k.admin_port, hs, "resumed=\"true\""),
                                     metric_sum(k.admin_port, checks, "result=\"ready\"")};
    };
    auto c0 = counters();
    double kc0 = cpu_seconds(k.pid()), sc0 = servers_cpu(), st0 = cpu_seconds(store.pid());
    double busy0 = machine_busy_seconds(), self0 = cpu_seconds(getpid());
    auto t0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    double kc1 = cpu_seconds(k.pid()), sc1 = servers_cpu(), st1 = cpu_seconds(store.pid());
    double busy1 = machine_busy_seconds(), self1 = cpu_seconds(getpid());
    double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    auto c1 = counters();
    if (c0[0] < 0 || c1[0] < 0 || c1[0] + c1[1] <= c0[0] + c0[1]) {
        fprintf(stderr, "probe_cost: no probes counted on kprism's /metrics\n");
        exit(1);
    }
    m.full += c1[0] - c0[0];
    m.resumed += c1[1] - c0[1];
    m.ready += c1[2] - c0[2];
    m.kprism_s += kc1 - kc0;
    m.apiserver_s += sc1 - sc0;
    m.store_s += st1 - st0;
    // What the rest of the machine used meanwhile: on a shared box a mode with a large share is suspect.
    m.others_s += std::max(0.0, (busy1 - busy0) - (kc1 - kc0) - (sc1 - sc0) - (st1 - st0) - (self1 - self0));
    m.wall_s += wall;
}

int run_go(const std::string& bin, const std::string& path, int seconds, int rounds) {
    printf("# readiness probe cost: 8 Go kube-apiserver stand-ins per mode (%s, crypto/tls + net/http) on one "
           "store, probes of %s every 100 ms, %d s per mode in %d interleaved slices\n",
           bin.c_str(), path.c_str(), seconds, rounds);
    fflush(stdout);
    Pki pki;
    std::string sock = pki.dir + "/store.sock";
    Process store({bin, "store", "--listen", "unix:" + sock});
    if (!store.wait_output("event=store-listening", 10000ms)) {
        fprintf(stderr, "probe_cost: the store did not start:\n%s\n", store.output().c_str());
        return 1;
    }
    // Every mode's stand-ins run from the start (idle ones cost well under 1 ms of CPU per
    // second each), and the modes take turns, so that drift on a shared machine hits all four.
    std::array<GoMode, 4> modes{GoMode{"1.3", false}, GoMode{"1.3", true}, GoMode{"1.2", false}, GoMode{"1.2", true}};
    for (auto& m : modes) start_servers(m, bin, pki, sock);
    long ms = std::max(1000L, 1000L * seconds / rounds);
    for (int r = 0; r < rounds; ++r)
        for (auto& m : modes) slice(m, pki, store, path, ms);
    const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    for (auto& m : modes) {
        double probes = m.full + m.resumed;
        printf("tls=%s resumption=%-3s probes=%.0f full_handshakes=%.0f resumed=%.0f (%.1f%%) ready=%.0f  "
               "kprism_cpu_ms_per_1000=%.0f  apiserver_cpu_ms_per_1000=%.0f  store_cpu_ms_per_1000=%.0f  "
               "other_processes=%.0f%%\n",
               m.tls.c_str(), m.resumption ? "on" : "off", probes, m.full, m.resumed, 100.0 * m.resumed / probes,
               m.ready, m.kprism_ms(), m.apiserver_ms(), m.store_ms(),
               100.0 * m.others_s / (m.wall_s * static_cast<double>(ncpu)));
    }
    const GoMode &f13 = modes[0], &r13 = modes[1], &f12 = modes[2], &r12 = modes[3];
    printf("# resumed / full, apiserver CPU: TLS 1.3 %.2f, TLS 1.2 %.2f; kprism CPU: TLS 1.3 %.2f, TLS 1.2 %.2f\n",
           r13.apiserver_ms() / f13.apiserver_ms(), r12.apiserver_ms() / f12.apiserver_ms(),
           r13.kprism_ms() / f13.kprism_ms(), r12.kprism_ms() / f12.kprism_ms());
    // 5000 nodes, each probing each apiserver every 5 s (health.interval): 1000 probes/s at every
    // apiserver, so CPU seconds per 1000 probes = cores busy.
    double smin = 1e9, smax = 0;
    for (auto& m : modes) smin = std::min(smin, m.store_ms()), smax = std::max(smax, m.store_ms());
    printf("# at 5000 nodes, interval 5 s (1000 probes/s per apiserver), cores per apiserver: "
           "TLS 1.3 full %.2f, resumed %.2f; TLS 1.2 full %.2f, resumed %.2f (store: %.2f-%.2f more)\n",
           f13.apiserver_ms() / 1000, r13.apiserver_ms() / 1000, f12.apiserver_ms() / 1000, r12.apiserver_ms() / 1000,
           smin / 1000, smax / 1000);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    int seconds = 10;
    int rounds = 5;
    std::string apiserver, path = "/readyz";
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i];
        if (a == "--apiserver" && i + 1 < argc) apiserver = argv[++i];
        else if (a == "--path" && i + 1 < argc) path = argv[++i];
        else if (a == "--rounds" && i + 1 < argc && std::atoi(argv[i + 1]) > 0) rounds = std::atoi(argv[++i]);
        else if (!a.empty() && a[0] != '-' && std::atoi(argv[i]) > 0) seconds = std::atoi(argv[i]);
        else {
            fprintf(stderr, "usage: %s [seconds] [--apiserver PATH [--path /readyz] [--rounds 5]]\n", argv[0]);
            return 2;
        }
    }
    if (!apiserver.empty()) return run_go(apiserver, path, seconds, rounds);
    printf("# readiness probe cost: 8 TLS stand-ins (thread per connection, OpenSSL), probes every 100 ms, %d s each\n",
           seconds);
    measure(true, seconds);
    measure(false, seconds);
}
