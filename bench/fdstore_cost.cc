// SPDX-License-Identifier: Apache-2.0
// What it costs to keep every connection in systemd's fd store from the moment it is established.
//
// For crash survival kprism could store each connection's two sockets when it accepts it, so
// that a SIGKILLed kprism's idle connections survive too. This program does what kprism would do
// for that, and nothing else: for each of --count connections (made to itself over loopback, so
// that no other process is involved) it accepts the client socket, connects an upstream socket and,
// with --store, sends both to the store in one notify::fdstore message named c<N> (kprism's own
// code); then it closes them one by one, sending FDSTOREREMOVE for each first. Run as a service
// under systemd (tests/systemd/reload.sh with FDSTORE_COST=1); it reads systemd's CPU time and
// memory from /proc/1 (its PID namespace's init is the systemd being measured) around each phase:
//   fdstore-cost phase=open store=1 n=N seconds=S per_conn_us=U pid1_cpu_ms=C pid1_rss_kib=R->R
//   fdstore-cost phase=close ...
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "kprism/base/sd_notify.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Pid1 {
    double cpu_ms = 0;
    long rss_kib = 0;
};

Pid1 pid1() {
    Pid1 p;
    std::ifstream stat("/proc/1/stat");
    std::string s((std::istreambuf_iterator<char>(stat)), {});
    size_t rp = s.rfind(')');
    if (rp != std::string::npos) {
        // Fields after the command: state(3) ... utime(14) stime(15).
        std::vector<std::string> f;
        size_t at = rp + 2;
        while (at < s.size()) {
            size_t sp = s.find(' ', at);
            f.push_back(s.substr(at, sp - at));
            if (sp == std::string::npos) break;
            at = sp + 1;
        }
        if (f.size() > 12) p.cpu_ms = (std::stod(f[11]) + std::stod(f[12])) * 1000.0 / sysconf(_SC_CLK_TCK);
    }
    std::ifstream status("/proc/1/status");
    for (std::string line; std::getline(status, line);)
        if (line.rfind("VmRSS:", 0) == 0) p.rss_kib = std::strtol(line.c_str() + 6, nullptr, 10);
    return p;
}

int listener(sockaddr_in& a) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 4096) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
        std::perror("fdstore-cost: listen");
        std::exit(2);
    }
    return fd;
}

int connect_to(const sockaddr_in& a) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
        std::perror("fdstore-cost: connect");
        std::exit(2);
    }
    return fd;
}

void report(const char* phase, bool store, size_t n, Clock::time_point t0, const Pid1& before) {
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    Pid1 after = pid1();
    std::printf("fdstore-cost phase=%s store=%d n=%zu seconds=%.3f per_conn_us=%.1f pid1_cpu_ms=%.0f "
                "pid1_rss_kib=%ld->%ld\n",
                phase, store ? 1 : 0, n, s, s * 1e6 / static_cast<double>(n), after.cpu_ms - before.cpu_ms,
                before.rss_kib, after.rss_kib);
    std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
    size_t n = 1000;
    bool store = false;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--store") store = true;
        else if (a == "--count" && i + 1 < argc) n = std::strtoul(argv[++i], nullptr, 10);
        else {
            std::fprintf(stderr, "usage: fdstore_cost [--count N] [--store]\n");
            return 2;
        }
    }
    if (store && kprism::notify::fdstore_max() < 2 * n) {
        std::fprintf(stderr, "fdstore-cost: $FDSTORE is %zu, below 2 x %zu\n", kprism::notify::fdstore_max(), n);
        return 2;
    }
    sockaddr_in front{}, back{};
    int lf = listener(front), lb = listener(back);
    struct Conn {
        int client_end, accepted, upstream, upstream_end;
    };
    std::vector<Conn> conns(n);
    Pid1 before = pid1();
    auto t0 = Clock::now();
    for (size_t i = 0; i < n; ++i) {
        Conn& c = conns[i];
        c.client_end = connect_to(front);                // the client (kubelet)
        c.accepted = ::accept4(lf, nullptr, nullptr, SOCK_CLOEXEC);
        c.upstream = connect_to(back);                   // kprism's upstream socket
        c.upstream_end = ::accept4(lb, nullptr, nullptr, SOCK_CLOEXEC);  // the apiserver's end
        if (c.accepted < 0 || c.upstream_end < 0) {
            std::perror("fdstore-cost: accept");
            return 2;
        }
        if (store) {
            int fds[2] = {c.accepted, c.upstream};
            if (!kprism::notify::fdstore("c" + std::to_string(i), fds, 2)) {
                std::fprintf(stderr, "fdstore-cost: FDSTORE=1 not sent (NOTIFY_SOCKET?)\n");
                return 2;
            }
        }
    }
    if (store) kprism::notify::barrier(30000);  // until systemd has taken every one
    report("open", store, n, t0, before);

    before = pid1();
    t0 = Clock::now();
    for (size_t i = 0; i < n; ++i) {
        Conn& c = conns[i];
        if (store) kprism::notify::fdstore_remove("c" + std::to_string(i));
        for (int fd : {c.accepted, c.upstream, c.client_end, c.upstream_end}) ::close(fd);
    }
    if (store) kprism::notify::barrier(30000);
    report("close", store, n, t0, before);
    return 0;
}
