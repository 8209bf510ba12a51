// SPDX-License-Identifier: Apache-2.0
// Failover timing of the real binary with default health settings (interval 5s, timeout 3s):
// how long an unready, hung or killed apiserver keeps getting new connections, how long its
// established connections live on, and how many new client connections fail meanwhile.
// Usage: build/bench/failover [readyz500|hang|hang-quiet|kill|all] [runs]   (prints one line per run)
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "harness/harness.h"
#include "harness/apiserver.h"
#include "harness/pki.h"

using namespace it;
using SysClock = std::chrono::system_clock;

namespace {


// A blocking TLS client through kprism: connect, handshake (5 s limit, like a patient kubelet),
// one keep-alive GET; remembers which stand-in answered.
struct Client {
    SSL* ssl = nullptr;
    int fd = -1;
    std::string served_by;
    bool open(SSL_CTX* ctx, int port, int timeout_ms = 5000) {
        fd = connect_to(port);
        if (fd < 0) return false;
        timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        ssl = SSL_new(ctx);
        SSL_set_fd(ssl, fd);
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), "127.0.0.1");
        if (SSL_connect(ssl) != 1) return false;
        const char req[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
        if (SSL_write(ssl, req, sizeof req - 1) <= 0) return false;
        char buf[4096];
        int n = SSL_read(ssl, buf, sizeof buf - 1);
        if (n <= 0) return false;
        std::string r(buf, static_cast<size_t>(n));
        size_t p = r.find("served by ");
        if (p == std::string::npos) return false;
        served_by = r.substr(p + 10, r.find(' ', p + 10) - p - 10);
        timeval zero{0, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &zero, sizeof zero);
        return true;
    }
    void close() {
        if (ssl) SSL_free(ssl);
        if (fd >= 0) ::close(fd);
        ssl = nullptr;
        fd = -1;
    }
};

double secs(SysClock::time_point a, SysClock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Timestamp of the first log line containing `needle` at or after `after`, from kprism's ts=.
bool log_time(const std::string& log, const std::string& needle, SysClock::time_point after, SysClock::time_point& out) {
    for (size_t p = log.find(needle); p != std::string::npos; p = log.find(needle, p + 1)) {
        size_t ls = log.rfind('\n', p);
        ls = ls == std::string::npos ? 0 : ls + 1;
        struct tm tm {};
        int ms = 0;
        if (sscanf(log.c_str() + ls, "ts=%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                   &tm.tm_min, &tm.tm_sec, &ms) != 7)
            continue;
        tm.tm_year -= 1900;
        tm.tm_mon -= 1;
        auto t = SysClock::from_time_t(timegm(&tm)) + std::chrono::milliseconds(ms);
        if (t >= after - std::chrono::milliseconds(1)) {
            out = t;
            return true;
        }
    }
    return false;
}

void run_once(const std::string& scenario) {
    Pki pki;
    SSL_CTX* cctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_verify(cctx, SSL_VERIFY_NONE, nullptr);  // the path is measured, not the PKI
    SSL_CTX_use_certificate_chain_file(cctx, pki.client_pem.c_str());
    SSL_CTX_use_PrivateKey_file(cctx, pki.client_pem.c_str(), SSL_FILETYPE_PEM);
    Apiserver a(pki, "a"), b(pki, "b");
    Kprism k({a.addr(), b.addr()},
             {"--client-cert", pki.client_pem, "--client-key", pki.client_pem, "--ca-file", pki.ca_cert});
    eventually([&] { return k.count_output("msg=\"upstream up\"") >= 2; }, 10000ms);

    // Established connections, as kubelet's watches would be.
    std::vector<Client> held;
    for (int i = 0; i < 40; ++i) {
        Client c;
        if (c.open(cctx, k.port)) held.push_back(c);
    }
    std::vector<size_t> on_a;
    for (size_t i = 0; i < held.size(); ++i)
        if (held[i].served_by == "a") on_a.push_back(i);

    std::mutex mu;
    std::vector<std::pair<SysClock::time_point, std::string>> news;  // start time, served_by ("" = failed)
    std::atomic<bool> stop{false};
    const bool quiet = scenario == "hang-quiet";  // no new client connections: probes alone decide
    std::thread loop([&] {
        while (!stop && !quiet) {
            auto t = SysClock::now();
            Client c;
            bool ok = c.open(cctx, k.port);
            std::string who = ok ? c.served_by : "";
            c.close();
            {
                std::lock_guard<std::mutex> g(mu);
                news.emplace_back(t, who);
            }
            std::this_thread::sleep_for(50ms);
        }
    });
    // The fault lands at a random phase of the 5 s check cycle, so runs sample the whole range.
    std::this_thread::sleep_for(std::chrono::milliseconds(1000 + rand() % 5000));
    auto t0 = SysClock::now();
    if (scenario == "readyz500") a.set("500");
    else if (scenario == "hang" || scenario == "hang-quiet") a.proc->signal(SIGSTOP);
    else a.proc->signal(SIGKILL);

    // Watch A's established connections for EOF/RST.
    std::vector<double> closed_at(on_a.size(), -1);
    auto deadline = SysClock::now() + 30s;
    while (SysClock::now() < deadline) {
        bool all = true;
        for (size_t j = 0; j < on_a.size(); ++j) {
            if (closed_at[j] >= 0) continue;
            pollfd p{held[on_a[j]].fd, POLLIN, 0};
            if (::poll(&p, 1, 0) > 0) closed_at[j] = secs(t0, SysClock::now());
            else all = false;
        }
        if (all && secs(t0, SysClock::now()) > 8) break;
        std::this_thread::sleep_for(5ms);
    }
    stop = true;
    loop.join();
    if (scenario == "hang" || quiet) a.proc->signal(SIGCONT);

    double last_a = -1;
    int failed = 0, total = 0;
    for (auto& [t, who] : news) {
        if (t < t0) continue;
        ++total;
        if (who.empty()) ++failed;
        if (who == "a") last_a = std::max(last_a, secs(t0, t));
    }
    double max_close = -1;
    for (double c : closed_at) max_close = std::max(max_close, c);
    SysClock::time_point t_down;
    double down = log_time(k.output(), "msg=\"upstream down\" upstream=" + a.addr(), t0, t_down) ? secs(t0, t_down) : -1;
    printf("%-10s  down_after=%6.2fs  last_new_conn_on_it=%6.2fs  existing_closed_by=%6.2fs (%zu conns, %zu still open)"
           "  new_conns=%d failed=%d replayed=%ld\n",
           scenario.c_str(), down, last_a, max_close, on_a.size(),
           static_cast<size_t>(std::count(closed_at.begin(), closed_at.end(), -1.0)), total, failed,
           k.stat("replayed"));
    fflush(stdout);
    for (auto& c : held) c.close();
    SSL_CTX_free(cctx);
}

}  // namespace

int main(int argc, char** argv) {
    signal(SIGPIPE, SIG_IGN);
    srand(static_cast<unsigned>(time(nullptr)));
    std::string which = argc > 1 ? argv[1] : "all";
    int runs = argc > 2 ? std::atoi(argv[2]) : 1;
    printf("# kprism failover, defaults (interval 5s, timeout 3s, fall 2, rise 2, first-response 2s, close-spread 1s)\n");
    printf("# times in seconds after the fault (injected at a random phase of the check cycle); a new client\n"
           "# connection is attempted every ~50 ms with a 5 s handshake limit; 40 established connections\n");
    for (const std::string s : {"readyz500", "hang", "hang-quiet", "kill"}) {
        if (which != "all" && which != s) continue;
        for (int r = 0; r < runs; ++r) run_once(s);
    }
}
