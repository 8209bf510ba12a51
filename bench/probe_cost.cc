// SPDX-License-Identifier: Apache-2.0
// CPU cost of readiness probes, with and without TLS session resumption: kprism probes 8 TLS
// stand-in apiservers every 100 ms for a fixed time; CPU of kprism and of the stand-ins is read
// from /proc and divided by the number of probes. Prints one line per mode.
//
// Usage: build/bench/probe_cost [seconds] [--apiserver PATH [--path /readyz] [--rounds 5]]
//        build/bench/probe_cost --apiserver PATH --keepalive-compare [--path /readyz] [--tls 1.3|1.2]
//                               [--rates 1,100,1000] [--rounds N] [--window SECONDS]
//
// Without --apiserver: the C++ stand-in ($KPRISM_STANDIN, thread per connection, OpenSSL), which
// logs every handshake; two modes, resumption on and off (bench/compare.sh parses these lines).
// With --apiserver PATH: the Go kube-apiserver stand-in (tests/apiserver, crypto/tls and
// net/http as kube-apiserver uses them), 8 `serve` processes per mode on one `store`; four modes,
// TLS 1.3 and 1.2 (--tls-max-version) each with a full handshake per probe (tls_resumption =
// false) and resumed, taking turns in --rounds slices of seconds/rounds each, so that drift hits
// all four alike. Handshakes are counted by kprism (kprism_tls_handshakes_total on /metrics), the
// store's CPU is reported apart; --path sets health.path (/readyz/ping: no store round trip).
// With --apiserver PATH --keepalive-compare: probes on the kept connection (kprism's
// default health.new_connection_interval, 30 s) against a new, resumed, TLS connection for every
// probe (--health-new-connection-interval 0), at about 1, 100 and 1000 probes/s in all (--rates;
// 1, 2 and 11 kprism processes), the two modes taking turns; see run_keepalive() and
// bench/RESULTS.md. --tls 1.2 pins the stand-ins to TLS 1.2; --rounds and --window (seconds)
// override every rate's slices, for a quick look.
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>

#include <fmt/format.h>

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
                   resumption ? "--health-tls-resumption=true" : "--health-tls-resumption=false",
                   "--health-new-connection-interval", "0"});  // a handshake per probe, as before the kept connection
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

// The same from the scheduler, in ns rather than clock ticks (10 ms, too coarse for a second of
// probes at 1/s): the sum of /proc/PID/task/*/schedstat's run time over the process's threads (a
// thread that has exited drops out; the Go stand-ins and kprism keep theirs). /proc/PID/stat if
// there is no schedstat.
double cpu_seconds_fine(pid_t pid) {
    const std::string dir = "/proc/" + std::to_string(pid) + "/task";
    DIR* d = opendir(dir.c_str());
    if (!d) return cpu_seconds(pid);
    unsigned long long ns = 0;
    bool any = false;
    while (dirent* e = readdir(d)) {
        if (e->d_name[0] == '.') continue;
        std::ifstream f(dir + "/" + e->d_name + "/schedstat");
        unsigned long long run = 0;
        if (f >> run) ns += run, any = true;
    }
    closedir(d);
    return any ? static_cast<double>(ns) / 1e9 : cpu_seconds(pid);
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

void start_servers(GoMode& m, const std::string& bin, const Pki& pki, const std::string& sock,
                   const std::string& prefix = "g") {
    for (int i = 0; i < 8; ++i) {
        m.servers.push_back(std::make_unique<Process>(std::vector<std::string>{
            bin, "serve", "--store", "unix:" + sock, "--tls-cert-file", pki.server_cert, "--tls-private-key-file",
            pki.server_key, "--client-ca-file", pki.ca_cert, "--bind-address", "127.0.0.1", "--secure-port", "0",
            "--tls-max-version", m.tls, "--name", prefix + m.tls + "-" + std::to_string(i)}));
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
                     m.resumption ? "--health-tls-resumption=true" : "--health-tls-resumption=false",
                     "--health-new-connection-interval", "0"});  // a handshake per probe: what it counts
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

// The Go stand-ins' shared store on a unix socket; an empty Process (said why) if it did not start.
Process start_store(const std::string& bin, const std::string& sock) {
    Process store({bin, "store", "--listen", "unix:" + sock});
    if (store.wait_output("event=store-listening", 10000ms)) return store;
    fprintf(stderr, "probe_cost: the store did not start:\n%s\n", store.output().c_str());
    return Process();
}

int run_go(const std::string& bin, const std::string& path, int seconds, int rounds) {
    printf("# readiness probe cost: 8 Go kube-apiserver stand-ins per mode (%s, crypto/tls + net/http) on one "
           "store, probes of %s every 100 ms, %d s per mode in %d interleaved slices\n",
           bin.c_str(), path.c_str(), seconds, rounds);
    fflush(stdout);
    Pki pki;
    std::string sock = pki.dir + "/store.sock";
    Process store = start_store(bin, sock);
    if (store.pid() <= 0) return 1;
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

// --keepalive-compare: the kept probe connection against a new connection for every
// probe, at about 1, 100 and 1000 probes/s in all. Two sets of 8 `serve` processes on one store,
// one set per mode, both TLS 1.3 (or --tls 1.2), live for the whole run; per slice a fresh set of
// kprism processes probes one mode's set while the other set sits idle (its CPU over the window is
// that set's idle baseline). "kept" runs kprism's default health.new_connection_interval (30 s);
// "new" passes --health-new-connection-interval 0 (a new TLS connection per probe, resumed).
struct KaRate {
    std::string name;  // "1", "100", "1000": the target in probes/s
    int kprisms, upstreams;
    long interval_ms, timeout_ms, fast_ms;
    long window_ms;
    int rounds;
    // Nominal probes/s: each upstream's start-to-start period is the interval times [0.8, 1.0].
    double nominal() const { return kprisms * upstreams * 1000.0 / (0.9 * static_cast<double>(interval_ms)); }
};

struct KaCounters {
    double full = 0, resumed = 0, reused = 0, checks = 0, ready = 0, ended = 0;
    KaCounters& operator+=(const KaCounters& o) {
        full += o.full, resumed += o.resumed, reused += o.reused, checks += o.checks, ready += o.ready,
            ended += o.ended;
        return *this;
    }
    KaCounters operator-(const KaCounters& o) const {
        return {full - o.full, resumed - o.resumed, reused - o.reused, checks - o.checks, ready - o.ready,
                ended - o.ended};
    }
    double probes() const { return full + resumed + reused; }  // a probe is a handshake or a reuse
};

// kprism's probe counters from one scrape of /metrics; false if it cannot be read.
bool read_counters(int admin_port, KaCounters& c) {
    std::string m = http_get(admin_port, "/metrics");
    if (m.rfind("HTTP/1.1 200", 0) != 0) return false;
    std::istringstream in(m);
    for (std::string line; std::getline(in, line);) {
        auto is = [&](const char* family) { return line.rfind(std::string(family) + "{", 0) == 0; };
        double v = std::strtod(line.c_str() + line.rfind(' ') + 1, nullptr);
        if (is("kprism_tls_handshakes_total")) (line.find("resumed=\"true\"") != std::string::npos ? c.resumed : c.full) += v;
        else if (is("kprism_health_checks_reused_connection_total")) c.reused += v;
        else if (is("kprism_health_check_connections_ended_total")) c.ended += v;
        else if (is("kprism_health_checks_total")) {
            c.checks += v;
            if (line.find("result=\"ready\"") != std::string::npos) c.ready += v;
        }
    }
    return true;
}

struct KaTotals {
    KaCounters n;
    double wall_s = 0, serve_s = 0, store_s = 0, kprism_s = 0, others_s = 0;
    double idle_s = 0, idle_wall_s = 0;  // this set's CPU while the other mode ran (its probed processes)
    std::vector<double> slice_serve_ms;  // server CPU per 1000 probes, slice by slice
    double per_1000(double cpu_s) const { return n.probes() > 0 ? cpu_s * 1e6 / n.probes() : 0; }
    double serve_ms() const { return per_1000(serve_s); }
    double kprism_ms() const { return per_1000(kprism_s); }
    double store_ms() const { return per_1000(store_s); }
    double idle_per_s() const { return idle_wall_s > 0 ? idle_s / idle_wall_s : 0; }  // CPU s per s, probed set
    double serve_above_idle_ms() const { return per_1000(std::max(0.0, serve_s - idle_per_s() * wall_s)); }
    double per_s() const { return wall_s > 0 ? n.probes() / wall_s : 0; }
};

std::string ms_arg(long ms) { return std::to_string(ms) + "ms"; }

// One slice: fresh kprism processes probe `set`'s first r.upstreams stand-ins; CPU and kprism's
// counters are read over r.window_ms once every kprism has every upstream up, plus 1 s.
void ka_slice(const KaRate& r, bool new_each, GoMode& set, GoMode& idle_set, KaTotals& t, KaTotals& idle_t,
              const std::vector<const Process*>& all_serve, const Pki& pki, const Process& store,
              const std::string& path) {
    std::vector<std::string> eps(set.eps.begin(), set.eps.begin() + r.upstreams);
    std::vector<std::string> args = {"--client-cert", pki.client_pem, "--client-key", pki.client_pem, "--ca-file",
                                     pki.ca_cert, "--health-interval", ms_arg(r.interval_ms), "--health-timeout",
                                     ms_arg(r.timeout_ms), "--health-fast-interval", ms_arg(r.fast_ms),
                                     "--health-path", path, "--health-tls-resumption=true"};
    if (new_each) args.insert(args.end(), {"--health-new-connection-interval", "0"});
    std::vector<std::unique_ptr<Kprism>> ks;
    for (int i = 0; i < r.kprisms; ++i) ks.push_back(std::make_unique<Kprism>(eps, args));
    const size_t want = static_cast<size_t>(r.upstreams);
    if (!eventually([&] {
            for (auto& k : ks)
                if (k->count_output("msg=\"upstream up\"") < want) return false;
            return true;
        }, 15000ms))
        fprintf(stderr, "probe_cost: rate %s/s, %s: not every upstream came up in 15 s; measuring anyway\n",
                r.name.c_str(), new_each ? "new" : "kept");
    std::this_thread::sleep_for(1s);
    auto sum_cpu = [](const auto& procs, size_t n) {
        double c = 0;
        for (size_t i = 0; i < n && i < procs.size(); ++i) c += cpu_seconds_fine(procs[i]->pid());
        return c;
    };
    auto counters = [&] {
        KaCounters c;
        for (auto& k : ks)
            if (!read_counters(k->admin_port, c)) {
                fprintf(stderr, "probe_cost: cannot read kprism's /metrics\n");
                exit(1);
            }
        return c;
    };
    // Counters are read before the CPU at the start and after it at the end: /metrics rendering
    // stays out of kprism's CPU; the counts span the CPU window and a scrape more (well under 1 %).
    KaCounters c0 = counters();
    double kc0 = sum_cpu(ks, ks.size()), sc0 = sum_cpu(set.servers, want), ic0 = sum_cpu(idle_set.servers, want);
    double all0 = sum_cpu(all_serve, all_serve.size()), st0 = cpu_seconds_fine(store.pid());
    double busy0 = machine_busy_seconds(), self0 = cpu_seconds_fine(getpid());
    auto t0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(r.window_ms));
    double kc1 = sum_cpu(ks, ks.size()), sc1 = sum_cpu(set.servers, want), ic1 = sum_cpu(idle_set.servers, want);
    double all1 = sum_cpu(all_serve, all_serve.size()), st1 = cpu_seconds_fine(store.pid());
    double busy1 = machine_busy_seconds(), self1 = cpu_seconds_fine(getpid());
    double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    KaCounters d = counters() - c0;
    if (d.probes() <= 0) {
        fprintf(stderr, "probe_cost: no probes counted on kprism's /metrics\n");
        exit(1);
    }
    t.n += d;
    t.wall_s += wall;
    t.serve_s += sc1 - sc0;
    t.store_s += st1 - st0;
    t.kprism_s += kc1 - kc0;
    double others = std::max(0.0, (busy1 - busy0) - (kc1 - kc0) - (all1 - all0) - (st1 - st0) - (self1 - self0));
    t.others_s += others;
    idle_t.idle_s += ic1 - ic0;
    idle_t.idle_wall_s += wall;
    double serve_ms = (sc1 - sc0) * 1e6 / d.probes();
    t.slice_serve_ms.push_back(serve_ms);
    const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    printf("# slice %s/s %-4s probes=%.0f (%.1f/s) handshakes=%.0f full+%.0f resumed reused=%.0f ready=%.0f/%.0f  "
           "server_ms_per_1000=%.0f kprism_ms_per_1000=%.0f store_ms_per_1000=%.0f  machine=%.0f%% others=%.0f%%\n",
           r.name.c_str(), new_each ? "new" : "kept", d.probes(), d.probes() / wall, d.full, d.resumed, d.reused,
           d.ready, d.checks, serve_ms, (kc1 - kc0) * 1e6 / d.probes(), (st1 - st0) * 1e6 / d.probes(),
           100.0 * (busy1 - busy0) / (wall * static_cast<double>(ncpu)),
           100.0 * others / (wall * static_cast<double>(ncpu)));
    fflush(stdout);
}

std::vector<KaRate> ka_rates() {
    // ~1.1/s: one kprism, 5 upstreams at kprism's default interval (5 s, timeout 3 s, fast 1 s): the
    // mix of kept and new connections of a real node. A 36 s window after start-up holds exactly
    // one new connection per upstream (its first probe at an age of 30 s or more), 1 probe in
    // about 8; in steady state it is 1 in 7 (probes 4.5 s apart on average: a connection carries
    // those at ages 0 to 27 s). 100 and 1000/s: 180 and 100 ms intervals, where a kept connection
    // outlives the window (steady state: 1 probe in about 185 and 330 opens a new one).
    return {KaRate{"1", 1, 5, 5000, 3000, 1000, 36000, 2}, KaRate{"100", 2, 8, 180, 170, 180, 4000, 3},
            KaRate{"1000", 11, 8, 100, 90, 100, 4000, 3}};
}

int run_keepalive(const std::string& bin, const std::string& path, const std::string& tls,
                  const std::vector<std::string>& only, int rounds_override, long window_override_ms) {
    std::vector<KaRate> rates;
    for (auto& r : ka_rates())
        if (only.empty() || std::find(only.begin(), only.end(), r.name) != only.end()) rates.push_back(r);
    if (rates.empty()) {
        fprintf(stderr, "probe_cost: --rates takes some of 1,100,1000\n");
        return 2;
    }
    for (auto& r : rates) {
        if (rounds_override > 0) r.rounds = rounds_override;
        if (window_override_ms > 0) r.window_ms = window_override_ms;
    }
    printf("# probe cost, kept connection vs a new one per probe: 2 x 8 Go kube-apiserver stand-ins (%s, "
           "TLS %s) on one store, probes of %s; modes take turns (kept, new, new, kept, ...)\n",
           bin.c_str(), tls.c_str(), path.c_str());
    for (auto& r : rates)
        printf("# rate %s/s: %d kprism x %d upstreams, interval %ld ms (timeout %ld, fast %ld), nominal %.1f probes/s; "
               "%d slices of %ld ms per mode\n",
               r.name.c_str(), r.kprisms, r.upstreams, r.interval_ms, r.timeout_ms, r.fast_ms, r.nominal(), r.rounds,
               r.window_ms);
    fflush(stdout);
    auto loadavg = [] {
        std::ifstream f("/proc/loadavg");
        std::string a, b, c;
        f >> a >> b >> c;
        return a + " " + b + " " + c;
    };
    printf("# load average at the start: %s\n", loadavg().c_str());
    auto started = Clock::now();
    Pki pki;
    std::string sock = pki.dir + "/store.sock";
    Process store = start_store(bin, sock);
    if (store.pid() <= 0) return 1;
    std::array<GoMode, 2> sets{GoMode{tls, true}, GoMode{tls, true}};  // [0] kept, [1] new
    start_servers(sets[0], bin, pki, sock, "kept");
    start_servers(sets[1], bin, pki, sock, "new");
    std::vector<const Process*> all_serve;
    for (auto& s : sets)
        for (auto& p : s.servers) all_serve.push_back(p.get());
    std::vector<std::array<KaTotals, 2>> totals(rates.size());
    for (size_t i = 0; i < rates.size(); ++i)
        for (int round = 0; round < rates[i].rounds; ++round)
            for (int j = 0; j < 2; ++j) {
                int m = (round % 2 == 0) ? j : 1 - j;  // kept new | new kept | ...: linear drift cancels
                ka_slice(rates[i], m == 1, sets[m], sets[1 - m], totals[i][m], totals[i][1 - m], all_serve, pki,
                         store, path);
            }
    const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    printf("\n| rate (target) | mode | probes | probes/s | handshakes full / resumed | on the kept connection | "
           "ready | server CPU ms / 1000 probes | above idle | store | kprism | slices (server) | other processes |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < rates.size(); ++i)
        for (int m = 0; m < 2; ++m) {
            const KaTotals& t = totals[i][m];
            std::string sl;
            for (double v : t.slice_serve_ms) sl += (sl.empty() ? "" : ", ") + std::to_string(static_cast<long>(v + 0.5));
            printf("| %s/s | %s | %.0f | %.1f | %.0f / %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %s | %.0f%% |\n",
                   rates[i].name.c_str(), m ? "new each probe" : "kept", t.n.probes(), t.per_s(), t.n.full,
                   t.n.resumed, t.n.reused, t.n.ready, t.serve_ms(), t.serve_above_idle_ms(), t.store_ms(),
                   t.kprism_ms(), sl.c_str(), 100.0 * t.others_s / (t.wall_s * static_cast<double>(ncpu)));
        }
    printf("\n");
    for (size_t i = 0; i < rates.size(); ++i) {
        const KaTotals &k = totals[i][0], &n = totals[i][1];
        printf("# %s/s: kept / new: server CPU %.2f (above idle %.2f), store %.2f, kprism %.2f; achieved %.0f%% and "
               "%.0f%% of nominal %.1f/s; idle baseline %.2f ms/s per stand-in; connections the stand-ins ended: "
               "%.0f\n",
               rates[i].name.c_str(), k.serve_ms() / n.serve_ms(), k.serve_above_idle_ms() / n.serve_above_idle_ms(),
               k.store_ms() / n.store_ms(), k.kprism_ms() / n.kprism_ms(), 100.0 * k.per_s() / rates[i].nominal(),
               100.0 * n.per_s() / rates[i].nominal(), rates[i].nominal(),
               1000.0 * (k.idle_per_s() + n.idle_per_s()) / 2 / rates[i].upstreams, k.n.ended + n.n.ended);
    }
    // 5000 nodes x 3 apiservers at the default 5 s interval: 1000 probes/s at each apiserver, so
    // its CPU seconds per 1000 probes are the cores it spends. Per probe: a = a request on the kept
    // connection, b = a new connection (resumed) per probe, from the highest rate measured below
    // saturation, the mix of the two from the default-interval row (1/s) when it ran.
    auto find = [&](const std::string& name) -> const std::array<KaTotals, 2>* {
        for (size_t i = 0; i < rates.size(); ++i)
            if (rates[i].name == name) return &totals[i];
        return nullptr;
    };
    const std::array<KaTotals, 2>* base = find("100") ? find("100") : &totals.back();
    const KaTotals &bk = (*base)[0], &bn = (*base)[1];
    double b = bn.serve_s / bn.n.probes();  // CPU s per new-connection probe
    double hk = bk.n.full + bk.n.resumed;
    double a = bk.n.reused > 0 ? std::max(0.0, bk.serve_s - b * hk) / bk.n.reused : 0;
    const double f = 1.0 / 7;  // default interval 5 s x [0.8, 1] and 30 s: a new connection every 7 probes
    double fm = -1;            // the share measured in the 1/s row's windows
    if (const auto* one = find("1"); one && (*one)[0].n.probes() > 0)
        fm = ((*one)[0].n.full + (*one)[0].n.resumed) / (*one)[0].n.probes();
    auto kept = [&](double share) { return (a * (1 - share) + b * share) * 1000; };
    double store_b = bn.store_s / bn.n.probes(), store_k = bk.store_s / bk.n.probes();
    printf("# at 5000 nodes x 3 apiservers, interval 5 s (1000 probes/s per apiserver), per-probe costs from the "
           "%s/s row: new each probe %.2f cores per apiserver; kept %.2f (%.2f per request on the kept connection, "
           "1 probe in 7 on a new one%s); kept / new %.2f; the 3 apiservers together %.2f against %.2f cores; the "
           "stand-in's store %.2f (new) and %.2f (kept) more per apiserver\n",
           base == find("100") ? "100" : rates.back().name.c_str(), b * 1000, kept(f), a * 1000,
           fm >= 0 ? fmt::format("; {:.2f} with the {:.1f}% measured at 1/s", kept(fm), 100 * fm).c_str() : "",
           kept(f) / (b * 1000), 3 * kept(f), 3 * b * 1000, store_b * 1000, store_k * 1000);
    printf("# run time %.0f s; load average at the end: %s\n",
           std::chrono::duration<double>(Clock::now() - started).count(), loadavg().c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    int seconds = 10;
    int rounds = 0;  // 0: each mode's own (5 for --apiserver)
    long window_ms = 0;
    bool keepalive = false;
    std::string apiserver, path = "/readyz", tls = "1.3";
    std::vector<std::string> rates;
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i];
        if (a == "--apiserver" && i + 1 < argc) apiserver = argv[++i];
        else if (a == "--path" && i + 1 < argc) path = argv[++i];
        else if (a == "--rounds" && i + 1 < argc && std::atoi(argv[i + 1]) > 0) rounds = std::atoi(argv[++i]);
        else if (a == "--keepalive-compare") keepalive = true;
        else if (a == "--tls" && i + 1 < argc) tls = argv[++i];
        else if (a == "--window" && i + 1 < argc && std::atof(argv[i + 1]) > 0)
            window_ms = static_cast<long>(std::atof(argv[++i]) * 1000);
        else if (a == "--rates" && i + 1 < argc) {
            std::istringstream in(argv[++i]);
            for (std::string r; std::getline(in, r, ',');) rates.push_back(r);
        } else if (!a.empty() && a[0] != '-' && std::atoi(argv[i]) > 0) seconds = std::atoi(argv[i]);
        else {
            fprintf(stderr,
                    "usage: %s [seconds] [--apiserver PATH [--path /readyz] [--rounds 5]]\n"
                    "       %s --apiserver PATH --keepalive-compare [--path /readyz] [--tls 1.3|1.2] "
                    "[--rates 1,100,1000] [--rounds N] [--window SECONDS]\n",
                    argv[0], argv[0]);
            return 2;
        }
    }
    if (keepalive && apiserver.empty()) {
        fprintf(stderr, "probe_cost: --keepalive-compare needs --apiserver PATH\n");
        return 2;
    }
    if (keepalive) return run_keepalive(apiserver, path, tls, rates, rounds, window_ms);
    if (!apiserver.empty()) return run_go(apiserver, path, seconds, rounds > 0 ? rounds : 5);
    printf("# readiness probe cost: 8 TLS stand-ins (thread per connection, OpenSSL), probes every 100 ms, %d s each\n",
           seconds);
    measure(true, seconds);
    measure(false, seconds);
}
