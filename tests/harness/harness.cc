// SPDX-License-Identifier: Apache-2.0
// Integration-test harness implementation (processes, loopback servers, socket helpers).
#include "harness/harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>

namespace it {

std::chrono::milliseconds scaled(std::chrono::milliseconds timeout) {
    static const long scale = [] {
        const char* v = getenv("KPRISM_TEST_TIME_SCALE");
        long n = v ? std::strtol(v, nullptr, 10) : 1;
        return n >= 1 && n <= 100 ? n : 1;
    }();
    return timeout * scale;
}

bool eventually(const std::function<bool()>& cond, std::chrono::milliseconds timeout) {
    auto deadline = Clock::now() + scaled(timeout);
    for (;;) {
        if (cond()) return true;
        if (Clock::now() >= deadline) return false;
        std::this_thread::sleep_for(5ms);
    }
}

// The lowest port of the kernel's ephemeral range (ip_local_port_range), or 0 if unreadable.
static int ephemeral_low() {
    std::ifstream f("/proc/sys/net/ipv4/ip_local_port_range");
    int low = 0;
    return f >> low ? low : 0;
}

// A TCP socket bound to 127.0.0.1:port (not listening), or -1.
static int bound_socket(int port) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
    ::close(fd);
    return -1;
}

static bool binds(int port) {
    int fd = bound_socket(port);
    if (fd >= 0) ::close(fd);
    return fd >= 0;
}

int free_port() {
    // Below the ephemeral range when there is room: a port bind(0) hands out can be taken, before
    // the server meant to listen on it binds, by the local end of any connect() on the machine
    // (kprism's probes, a client's next connection). Never the same port twice in one binary.
    static std::set<int> given;
    static std::mt19937 rng{std::random_device{}()};
    const int low = ephemeral_low();
    for (int i = 0; low > 12000 && i < 500; ++i) {
        int port = std::uniform_int_distribution<int>(10000, low - 1)(rng);
        if (!given.contains(port) && binds(port)) {
            given.insert(port);
            return port;
        }
    }
    for (;;) {
        int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
        socklen_t len = sizeof a;
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
        ::close(fd);
        int port = ntohs(a.sin_port);
        if (given.insert(port).second) return port;
    }
}

int refused_port() {
    for (;;)
        if (int port = free_port(); bound_socket(port) >= 0) return port;  // the socket is kept open
}

static std::string env_or(const char* name, const char* def) {
    const char* v = getenv(name);
    return v && *v ? v : def;
}
std::string kprism_bin() { return env_or("KPRISM_BIN", "build/kprism"); }
std::string standin_bin() { return env_or("KPRISM_STANDIN", "build/kprism-standin"); }

// The environment for execve, with spawn.env over the inherited one. systemd's variables are never
// inherited (a test run under systemd must not notify it from a child).
static std::vector<std::string> child_environment(const std::vector<std::string>& extra) {
    auto name = [](std::string_view kv) { return kv.substr(0, kv.find('=')); };
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
        std::string_view kv(*e);
        bool drop = name(kv) == "NOTIFY_SOCKET" || name(kv).starts_with("LISTEN_") || name(kv).starts_with("WATCHDOG_");
        for (const auto& x : extra) drop = drop || name(x) == name(kv);
        if (!drop) env.emplace_back(kv);
    }
    for (const auto& x : extra) env.push_back(x);
    return env;
}

// "{pid}" in `tmpl` replaced by `pid`, written into `out` (room for tmpl plus 20 digits per
// "{pid}"). Runs in the forked child, so it only touches memory allocated before the fork.
static void put_pid(const std::string& tmpl, pid_t pid, char* out) {
    char digits[24];
    int n = 0;
    for (long v = pid; n == 0 || v > 0; v /= 10) digits[n++] = static_cast<char>('0' + v % 10);
    for (size_t i = 0; i < tmpl.size();) {
        if (tmpl.compare(i, 5, "{pid}") == 0) {
            for (int k = n - 1; k >= 0; --k) *out++ = digits[k];
            i += 5;
        } else {
            *out++ = tmpl[i++];
        }
    }
    *out = '\0';
}

Process::Process(std::vector<std::string> argv, Spawn spawn) {
    char tmpl[] = "/tmp/kprism-it-XXXXXX";
    int fd = mkstemp(tmpl);
    if (fd < 0) throw std::runtime_error("mkstemp");
    out_path_ = tmpl;
    // Everything the child needs is built here: between fork and exec the child may only make
    // async-signal-safe calls. Another thread of the test (a server's, or the sanitizer's own)
    // can hold the allocator's lock at the fork, and a child that then allocates never execs.
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    std::vector<std::string> env = child_environment(spawn.env);
    std::vector<std::vector<char>> with_pid;  // room for the entries naming {pid}
    std::vector<std::pair<const std::string*, char*>> fill;
    std::vector<char*> envp;
    for (auto& e : env) {
        if (e.find("{pid}") == std::string::npos) {
            envp.push_back(e.data());
            continue;
        }
        with_pid.emplace_back(e.size() + 20 * (e.size() / 5) + 1);
        fill.emplace_back(&e, with_pid.back().data());
        envp.push_back(with_pid.back().data());
    }
    envp.push_back(nullptr);
    const int n = static_cast<int>(spawn.fds.size());
    std::vector<int> high(spawn.fds.size());
    pid_ = fork();
    if (pid_ == 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        int devnull = open("/dev/null", O_RDONLY);
        dup2(devnull, 0);
        // Passed fds go to 3, 4, ...: first copied above that range so that none is overwritten.
        for (int i = 0; i < n; ++i) high[static_cast<size_t>(i)] = fcntl(spawn.fds[static_cast<size_t>(i)], F_DUPFD, 3 + n);
        for (int i = 0; i < n; ++i) dup2(high[static_cast<size_t>(i)], 3 + i);  // without FD_CLOEXEC
        closefrom(3 + n);  // the child must not inherit the test's listening sockets
        prctl(PR_SET_PDEATHSIG, SIGKILL);  // and must not outlive a crashed test binary
        for (auto& [t, out] : fill) put_pid(*t, getpid(), out);
        execve(args[0], args.data(), envp.data());
        _exit(127);
    }
    ::close(fd);
}

Process::~Process() {
    if (pid_ > 0 && status_ == -1) {
        ::kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
    }
    if (!out_path_.empty() && !getenv("KPRISM_KEEP_LOGS")) unlink(out_path_.c_str());
}

Process::Process(Process&& o) noexcept { *this = std::move(o); }
Process& Process::operator=(Process&& o) noexcept {
    std::swap(pid_, o.pid_);
    std::swap(out_path_, o.out_path_);
    std::swap(status_, o.status_);
    return *this;
}

std::string Process::output() const {
    std::ifstream f(out_path_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

bool Process::wait_output(const std::string& needle, std::chrono::milliseconds timeout) const {
    return eventually([&] { return output().find(needle) != std::string::npos; }, timeout);
}

size_t Process::count_output(const std::string& needle) const {
    std::string o = output();
    size_t n = 0;
    for (size_t p = o.find(needle); p != std::string::npos; p = o.find(needle, p + 1)) ++n;
    return n;
}

void Process::signal(int sig) const {
    if (pid_ > 0) ::kill(pid_, sig);
}

int Process::wait(std::chrono::milliseconds timeout) {
    if (status_ != -1) return status_;
    int st = 0;
    bool done = eventually([&] { return waitpid(pid_, &st, WNOHANG) == pid_; }, timeout);
    if (!done) return -1;
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return status_;
}

bool Process::running() {
    if (status_ != -1) return false;
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) == pid_) {
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return false;
    }
    return true;
}

Result run(std::vector<std::string> argv, std::chrono::milliseconds timeout) {
    Process p(std::move(argv));
    int code = p.wait(timeout);
    return {code, p.output()};
}

static std::vector<std::string> kprism_args(const std::vector<std::string>& endpoints, std::vector<std::string> extra,
                                            int port, int admin) {
    std::string eps;
    for (auto& e : endpoints) eps += (eps.empty() ? "" : ",") + e;
    std::vector<std::string> a = {kprism_bin(), "--bind-port", std::to_string(port), "--health-port",
                                  std::to_string(admin)};
    if (!endpoints.empty()) {
        a.push_back("--endpoints");
        a.push_back(eps);
    }
    for (auto& e : extra) a.push_back(e);
    return a;
}

void block_sigpipe() {
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &s, nullptr);
}

ConfigFile::ConfigFile() {
    char tmpl[] = "/tmp/kprism-config-XXXXXX";
    int fd = mkstemp(tmpl);
    if (fd >= 0) ::close(fd);
    path = tmpl;
}

ConfigFile::~ConfigFile() { unlink(path.c_str()); }

void ConfigFile::write(const std::string& text) {
    std::ofstream(path + ".tmp") << text;
    std::rename((path + ".tmp").c_str(), path.c_str());
}

Kprism::Kprism(const std::vector<std::string>& endpoints, std::vector<std::string> extra, Spawn spawn, int p,
               int admin)
    : Process(kprism_args(endpoints, std::move(extra), p, admin), std::move(spawn)), port(p), admin_port(admin) {
    if (!wait_output("msg=started", 5000ms))
        throw std::runtime_error("kprism did not start: " + output());
}

long Kprism::stat(const std::string& key) {
    size_t before = count_output("msg=stats ");
    signal(SIGUSR1);
    if (!eventually([&] { return count_output("msg=stats ") > before; }, 5000ms)) return -1;
    std::string o = output();
    size_t line = o.rfind("msg=stats ");
    size_t k = o.find(" " + key + "=", line);
    if (k == std::string::npos) return -1;
    return std::strtol(o.c_str() + k + key.size() + 2, nullptr, 10);
}

// 127.0.0.1:port or [::1]:port; returns the address length.
static socklen_t loopback(int port, bool ipv6, sockaddr_storage& ss) {
    ss = {};
    if (ipv6) {
        auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
        a->sin6_family = AF_INET6;
        a->sin6_addr = in6addr_loopback;
        a->sin6_port = htons(static_cast<uint16_t>(port));
        return sizeof *a;
    }
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a->sin_port = htons(static_cast<uint16_t>(port));
    return sizeof *a;
}

TcpServer::TcpServer(Handler h, bool ipv6, int backlog) : ipv6_(ipv6), handler_(std::move(h)) {
    listen_fd_ = ::socket(ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_storage ss;
    socklen_t len = loopback(0, ipv6, ss);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(listen_fd_, backlog) != 0)
        throw std::runtime_error("TcpServer bind/listen failed");
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len);
    port_ = ipv6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                 : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    if (handler_) thread_ = std::thread([this] { loop(); });
}

std::string TcpServer::endpoint() const {
    return (ipv6_ ? std::string("[::1]:") : std::string("127.0.0.1:")) + std::to_string(port_);
}

void TcpServer::loop() {
    while (!stopping_) {
        pollfd p{listen_fd_, POLLIN, 0};
        if (::poll(&p, 1, 50) <= 0) continue;
        int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) continue;
        ++accepted_;
        std::lock_guard<std::mutex> g(mu_);
        fds_.push_back(fd);
        workers_.emplace_back([this, fd] {
            handler_(fd);
            ::shutdown(fd, SHUT_RDWR);
        });
    }
}

void TcpServer::stop() {
    if (stopping_.exchange(true)) return;
    if (thread_.joinable()) thread_.join();
    ::close(listen_fd_);
}

TcpServer::~TcpServer() {
    stop();
    std::vector<std::thread> ws;
    {
        std::lock_guard<std::mutex> g(mu_);
        for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);  // unblock handlers
        ws.swap(workers_);
    }
    for (auto& w : ws) w.join();
    for (int fd : fds_) ::close(fd);
}

void TcpServer::echo(int fd) {
    char buf[65536];
    for (;;) {
        ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        if (!send_all(fd, buf, static_cast<size_t>(n))) break;
    }
}

int connect_to(int port, bool ipv6) {
    int fd = ::socket(ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_storage ss;
    socklen_t len = loopback(port, ipv6, ss);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
        int err = errno;  // the caller reads why
        ::close(fd);
        errno = err;
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

bool send_all(int fd, const void* p, size_t n) {
    auto* c = static_cast<const char*>(p);
    while (n > 0) {
        ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
        if (w <= 0) return false;
        c += w;
        n -= static_cast<size_t>(w);
    }
    return true;
}

static bool wait_readable(int fd, Clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, static_cast<int>(left)) > 0;
}

size_t recv_exact(int fd, void* p, size_t n, std::chrono::milliseconds timeout) {
    auto deadline = Clock::now() + scaled(timeout);
    size_t got = 0;
    auto* c = static_cast<char*>(p);
    while (got < n) {
        if (!wait_readable(fd, deadline)) break;
        ssize_t r = ::recv(fd, c + got, n - got, 0);
        if (r <= 0) break;
        got += static_cast<size_t>(r);
    }
    return got;
}

std::string recv_until_eof(int fd, int* err, std::chrono::milliseconds timeout) {
    auto deadline = Clock::now() + scaled(timeout);
    std::string out;
    char buf[65536];
    if (err) *err = ETIMEDOUT;
    for (;;) {
        if (!wait_readable(fd, deadline)) return out;
        ssize_t r = ::recv(fd, buf, sizeof buf, 0);
        if (r == 0) {
            if (err) *err = 0;
            return out;
        }
        if (r < 0) {
            if (err) *err = errno;
            return out;
        }
        out.append(buf, static_cast<size_t>(r));
    }
}

std::string body_of(const std::string& reply) {
    size_t at = reply.find("\r\n\r\n");
    return at == std::string::npos ? "" : reply.substr(at + 4);
}

long rss_kib(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    for (std::string line; std::getline(f, line);)
        if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
    return -1;
}

bool still_open(int fd) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) == 0;
}

bool echo_ok(int port) {
    int fd = connect_to(port);
    if (fd < 0) return false;
    bool ok = send_all(fd, "ping", 4);
    char b[4];
    ok = ok && recv_exact(fd, b, 4, 5000ms) == 4 && memcmp(b, "ping", 4) == 0;
    ::close(fd);
    return ok;
}

std::string http_get(int port, const std::string& path) {
    int fd = connect_to(port);
    if (fd < 0) return "";
    std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    send_all(fd, req.data(), req.size());
    std::string resp = recv_until_eof(fd, nullptr, 5000ms);
    ::close(fd);
    return resp;
}

void fill_pattern(uint64_t seed, uint64_t offset, unsigned char* p, size_t n) {
    // Byte i of the stream is a hash of (seed, i / 8); cheap and position-addressable.
    for (size_t i = 0; i < n; ++i) {
        uint64_t pos = offset + i;
        uint64_t x = (pos >> 3) * 0x9e3779b97f4a7c15ULL ^ seed;
        x ^= x >> 31;
        x *= 0xbf58476d1ce4e5b9ULL;
        x ^= x >> 29;
        p[i] = static_cast<unsigned char>(x >> ((pos & 7) * 8));
    }
}

}  // namespace it
