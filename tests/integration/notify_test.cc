// SPDX-License-Identifier: Apache-2.0
// systemd integration of the real binary: READY/STATUS/STOPPING on a NOTIFY_SOCKET the test owns,
// watchdog pings, and socket activation (fds passed by the harness or by systemd-socket-activate).
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "harness/harness.h"
#include "harness/apiserver.h"
#include "harness/pki.h"

using namespace it;

namespace {

// An AF_UNIX datagram socket standing in for systemd's notification socket: a path in a temp dir,
// or an abstract name.
class NotifySocket {
public:
    explicit NotifySocket(bool abstract = false) {
        fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        sockaddr_un sa{};
        sa.sun_family = AF_UNIX;
        static int serial = 0;
        if (abstract) {
            addr_ = "@kprism-it-notify-" + std::to_string(getpid()) + "-" + std::to_string(++serial);
        } else {
            char tmpl[] = "/tmp/kprism-notify-XXXXXX";
            dir_ = mkdtemp(tmpl);
            addr_ = dir_ + "/notify";
        }
        std::memcpy(sa.sun_path, addr_.data(), addr_.size());
        if (abstract) sa.sun_path[0] = '\0';
        auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + addr_.size());
        if (::bind(fd_, reinterpret_cast<sockaddr*>(&sa), len) != 0) throw std::runtime_error("bind notify socket");
    }
    ~NotifySocket() {
        ::close(fd_);
        if (!dir_.empty()) std::filesystem::remove_all(dir_);
    }
    std::string env() const { return "NOTIFY_SOCKET=" + addr_; }

    // Every datagram received so far, in order.
    const std::vector<std::string>& messages() {
        char buf[4096];
        for (ssize_t n; (n = ::recv(fd_, buf, sizeof buf, 0)) >= 0;) msgs_.emplace_back(buf, static_cast<size_t>(n));
        return msgs_;
    }
    // Datagrams from index `from` on that contain `line` as one of their lines.
    size_t count(const std::string& line, size_t from = 0) {
        const auto& m = messages();
        size_t n = 0;
        for (size_t i = from; i < m.size(); ++i) n += has_line(m[i], line);
        return n;
    }
    bool wait_for(const std::string& line, std::chrono::milliseconds timeout = 5000ms, size_t from = 0) {
        return eventually([&] { return count(line, from) > 0; }, timeout);
    }
    // Index of the first datagram with `line`, or -1.
    long index_of(const std::string& line) {
        const auto& m = messages();
        for (size_t i = 0; i < m.size(); ++i)
            if (has_line(m[i], line)) return static_cast<long>(i);
        return -1;
    }
    std::string dump() {
        std::string s;
        for (const auto& m : messages()) s += "[" + m + "] ";
        return s;
    }

    static bool has_line(const std::string& msg, const std::string& line) {
        std::istringstream in(msg);
        for (std::string l; std::getline(in, l);)
            if (l == line) return true;
        return false;
    }

private:
    int fd_ = -1;
    std::string dir_, addr_;
    std::vector<std::string> msgs_;
};

// Without a client certificate the checks are paused, so READY needs no health round.
std::vector<std::string> no_cert() {
    return {"--client-cert", "/nonexistent/kubelet-client.pem", "--client-key", "/nonexistent/kubelet-client.pem"};
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& more) {
    a.insert(a.end(), more.begin(), more.end());
    return a;
}


std::vector<std::string> tls_flags(const Pki& pki) {
    return {"--client-cert",   pki.client_pem, "--client-key",    pki.client_pem, "--ca-file", pki.ca_cert,
            "--health-interval", "1s",         "--health-timeout", "500ms",       "--health-fast-interval", "200ms"};
}

// A listening TCP socket as a socket unit would pass it; closed when the test is done with it.
struct PassedSocket {
    explicit PassedSocket(const char* ip = "127.0.0.1", int type = SOCK_STREAM, bool listening = true) {
        fd = ::socket(AF_INET, type | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        inet_pton(AF_INET, ip, &a.sin_addr);
        if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw std::runtime_error("bind");
        if (listening && ::listen(fd, 128) != 0) throw std::runtime_error("listen");
        socklen_t len = sizeof a;
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
        port = ntohs(a.sin_port);
    }
    ~PassedSocket() { ::close(fd); }
    int fd;
    int port;
};

bool echoes(int port, const std::string& what) {
    int fd = connect_to(port);
    if (fd < 0) return false;
    std::string got(what.size(), '\0');
    bool ok = send_all(fd, what.data(), what.size()) && recv_exact(fd, got.data(), got.size(), 5000ms) == what.size();
    ::close(fd);
    return ok && got == what;
}

}  // namespace

TEST(Notify, ReadyStatusAndStoppingWithoutClientCert) {
    TcpServer up(TcpServer::echo);
    NotifySocket ns;
    Kprism k({up.endpoint()}, no_cert(), Spawn{{ns.env()}, {}});
    ASSERT_TRUE(ns.wait_for("READY=1")) << ns.dump() << k.output();
    EXPECT_EQ(ns.count("STATUS=0/1 upstreams ready (fail-open)"), 1u) << ns.dump();
    EXPECT_LT(ns.index_of("STATUS=0/1 upstreams ready (fail-open)"), ns.index_of("READY=1"));
    EXPECT_EQ(ns.count("READY=1"), 1u);
    EXPECT_TRUE(k.wait_output("msg=ready reason=\"health checks paused\""));
    EXPECT_TRUE(echoes(k.port, "through"));  // listeners were bound before READY
    EXPECT_EQ(ns.count("STOPPING=1"), 0u);
    k.signal(SIGTERM);
    EXPECT_TRUE(ns.wait_for("STOPPING=1")) << ns.dump();
    EXPECT_EQ(k.wait(5000ms), 0);
    EXPECT_EQ(ns.count("READY=1"), 1u);
}

TEST(Notify, AbstractNotifySocket) {
    TcpServer up(TcpServer::echo);
    NotifySocket ns(/*abstract=*/true);
    Kprism k({up.endpoint()}, no_cert(), Spawn{{ns.env()}, {}});
    EXPECT_TRUE(ns.wait_for("READY=1")) << ns.dump() << k.output();
    EXPECT_TRUE(k.wait_output("notified_systemd=true"));
}

TEST(Notify, WithoutNotifySocketNothingIsSent) {
    TcpServer up(TcpServer::echo);
    Kprism k({up.endpoint()}, no_cert());
    EXPECT_TRUE(k.wait_output("msg=ready"));
    EXPECT_TRUE(k.wait_output("notified_systemd=false"));
    EXPECT_EQ(k.output().find("cannot notify systemd"), std::string::npos) << k.output();
}

// READY waits for the first health round: every upstream has its first result.
TEST(Notify, ReadyAfterFirstRoundAndStatusFollowsHealth) {
    Pki pki;
    Apiserver a(pki, "a");
    std::string refused = "127.0.0.1:" + std::to_string(refused_port());
    NotifySocket ns;
    Kprism k({a.addr(), refused}, tls_flags(pki), Spawn{{ns.env()}, {}});
    ASSERT_TRUE(ns.wait_for("READY=1")) << ns.dump() << k.output();
    long ready = ns.index_of("READY=1");
    ASSERT_GT(ready, 0);
    EXPECT_EQ(ns.messages()[static_cast<size_t>(ready) - 1], "STATUS=1/2 upstreams ready") << ns.dump();
    EXPECT_TRUE(k.wait_output("msg=ready reason=\"first health round done\""));
    // (The refused one's first result may have sent a 0/2 status before READY.)
    a.set("500");
    size_t after = ns.messages().size();
    EXPECT_TRUE(ns.wait_for("STATUS=0/2 upstreams ready (fail-open)", 5000ms, after)) << ns.dump() << k.output();
    after = ns.messages().size();
    a.set("200");
    EXPECT_TRUE(ns.wait_for("STATUS=1/2 upstreams ready", 5000ms, after)) << ns.dump() << k.output();
    EXPECT_EQ(ns.count("READY=1"), 1u);
}

TEST(Notify, StatusSaysFailClosed) {
    Pki pki;
    std::string refused = "127.0.0.1:" + std::to_string(refused_port());
    NotifySocket ns;
    Kprism k({refused}, with(tls_flags(pki), {"--fail-mode", "fail-closed"}), Spawn{{ns.env()}, {}});
    ASSERT_TRUE(ns.wait_for("READY=1")) << ns.dump() << k.output();
    EXPECT_EQ(ns.count("STATUS=0/1 upstreams ready (fail-closed)"), 1u) << ns.dump();
}

// An upstream that never gets a result (its name does not resolve) delays READY by at most
// health.timeout + 1 s.
TEST(Notify, ReadyAtTheLatestAfterHealthTimeoutPlusOneSecond) {
    Pki pki;
    NotifySocket ns;
    auto start = Clock::now();
    Kprism k({"no-such-host.invalid:6443"}, tls_flags(pki), Spawn{{ns.env()}, {}});
    ASSERT_TRUE(ns.wait_for("READY=1", 5000ms)) << ns.dump() << k.output();
    auto took = Clock::now() - start;
    EXPECT_GE(took, 1400ms);
    EXPECT_LT(took, 3500ms);
    EXPECT_TRUE(k.wait_output("msg=ready reason=\"first health round timed out\"")) << k.output();
    EXPECT_EQ(ns.count("STATUS=0/1 upstreams ready (fail-open)"), 1u) << ns.dump();
}

TEST(Notify, WatchdogPingsAtHalfTheInterval) {
    TcpServer up(TcpServer::echo);
    NotifySocket ns;
    Kprism k({up.endpoint()}, no_cert(), Spawn{{ns.env(), "WATCHDOG_USEC=200000", "WATCHDOG_PID={pid}"}, {}});
    ASSERT_TRUE(ns.wait_for("READY=1")) << ns.dump() << k.output();
    EXPECT_TRUE(k.wait_output("msg=\"systemd watchdog enabled\" timeout=200000us ping_every=100ms")) << k.output();
    size_t before = ns.count("WATCHDOG=1");
    std::this_thread::sleep_for(1000ms);
    size_t pings = ns.count("WATCHDOG=1") - before;
    EXPECT_GE(pings, 3u) << ns.dump();
    EXPECT_LE(pings, 25u) << ns.dump();
    // A stopped loop stops pinging: that is what lets systemd restart a wedged kprism.
    k.signal(SIGSTOP);
    std::this_thread::sleep_for(100ms);
    before = ns.count("WATCHDOG=1");
    std::this_thread::sleep_for(400ms);
    EXPECT_EQ(ns.count("WATCHDOG=1"), before);
    k.signal(SIGCONT);
    EXPECT_TRUE(eventually([&] { return ns.count("WATCHDOG=1") > before; }, 2000ms));
}

TEST(Notify, WatchdogForAnotherProcessIsIgnored) {
    TcpServer up(TcpServer::echo);
    NotifySocket ns;
    Kprism k({up.endpoint()}, no_cert(), Spawn{{ns.env(), "WATCHDOG_USEC=200000", "WATCHDOG_PID=1"}, {}});
    ASSERT_TRUE(ns.wait_for("READY=1")) << ns.dump() << k.output();
    std::this_thread::sleep_for(500ms);
    EXPECT_EQ(ns.count("WATCHDOG=1"), 0u) << ns.dump();
    EXPECT_EQ(k.output().find("watchdog enabled"), std::string::npos);
}

TEST(Notify, SocketActivationServesOnThePassedSocket) {
    TcpServer up(TcpServer::echo);
    PassedSocket data, admin;
    NotifySocket ns;
    Kprism k({up.endpoint()}, no_cert(),
             Spawn{{ns.env(), "LISTEN_FDS=2", "LISTEN_PID={pid}", "LISTEN_FDNAMES=data:admin"}, {data.fd, admin.fd}});
    std::string data_addr = "127.0.0.1:" + std::to_string(data.port);
    EXPECT_TRUE(k.wait_output("msg=\"listening on sockets passed by systemd; bind_address and bind_port are ignored\" "
                              "addresses=" + data_addr + " ignored=127.0.0.1:" + std::to_string(k.port)))
        << k.output();
    EXPECT_TRUE(k.wait_output("msg=\"admin socket passed by systemd\" address=127.0.0.1:" +
                              std::to_string(admin.port) + " fd=4"))
        << k.output();
    EXPECT_TRUE(echoes(data.port, "activated")) << k.output();
    EXPECT_EQ(http_get(admin.port, "/healthz").rfind("HTTP/1.1 ", 0), 0u) << "the admin endpoint serves on it";
    int fd = connect_to(k.port);  // the configured port is not bound
    EXPECT_LT(fd, 0);
    if (fd >= 0) ::close(fd);
    ASSERT_TRUE(ns.wait_for("READY=1")) << ns.dump();
    k.signal(SIGTERM);
    EXPECT_EQ(k.wait(5000ms), 0);
}

// kprism never connects to a socket it listens on, also one systemd passed at an address the
// configuration does not name: an IP endpoint there is never used, and each client connection is
// accepted once (none came back into kprism through an upstream).
static void expect_never_upstream(const std::string& endpoint, const std::string& expected_line, PassedSocket& data) {
    TcpServer up(TcpServer::echo);
    Kprism k({endpoint, up.endpoint()}, no_cert(),
             Spawn{{"LISTEN_FDS=1", "LISTEN_PID={pid}", "LISTEN_FDNAMES=data"}, {data.fd}});
    EXPECT_TRUE(k.wait_output(expected_line)) << k.output();
    constexpr long kClients = 12;
    for (long i = 0; i < kClients; ++i) EXPECT_TRUE(echoes(data.port, "only up")) << k.output();
    EXPECT_TRUE(eventually([&] { return k.stat("connections_active") == 0; })) << k.output();
    EXPECT_EQ(k.stat("connections_total"), kClients) << k.output();
    EXPECT_EQ(k.output().find("msg=\"endpoint resolved\" upstream=" + endpoint), std::string::npos) << k.output();
}

TEST(Notify, SocketActivationPassedAddressIsNeverAnUpstream) {
    PassedSocket data;
    const std::string self = "127.0.0.1:" + std::to_string(data.port);
    expect_never_upstream(self,
                          "msg=\"endpoint is an address kprism listens on; kprism never connects to itself\" "
                          "upstream=" + self + " address=" + self,
                          data);
}

// The same for a name that resolves there (not in the static build, which refuses names).
TEST(Notify, SocketActivationPassedAddressIsNeverUsedByName) {
    PassedSocket data;
    const std::string self = "127.0.0.1:" + std::to_string(data.port);
    const std::string named = "localhost:" + std::to_string(data.port);
    expect_never_upstream(named,
                          "msg=\"endpoint resolves to an address kprism listens on; skipping that address\" "
                          "upstream=" + named + " address=" + self,
                          data);
}

TEST(Notify, SocketActivationUnnamedSocketIsData) {
    TcpServer up(TcpServer::echo);
    PassedSocket data;
    Kprism k({up.endpoint()}, no_cert(), Spawn{{"LISTEN_FDS=1", "LISTEN_PID={pid}"}, {data.fd}});
    EXPECT_TRUE(echoes(data.port, "unnamed")) << k.output();
}

// Without FileDescriptorName= systemd names a socket after its unit.
TEST(Notify, SocketActivationUnitNamedSocketIsDataOtherNamesAreIgnored) {
    TcpServer up(TcpServer::echo);
    PassedSocket data, other;
    Kprism k({up.endpoint()}, no_cert(),
             Spawn{{"LISTEN_FDS=2", "LISTEN_PID={pid}", "LISTEN_FDNAMES=kprism.socket:metrics"}, {data.fd, other.fd}});
    EXPECT_TRUE(echoes(data.port, "unit name")) << k.output();
    EXPECT_TRUE(k.wait_output("msg=\"ignoring a socket passed by systemd: unknown FileDescriptorName (use data or "
                              "admin)\" fd=4 name=metrics"))
        << k.output();
}

TEST(Notify, SocketActivationForAnotherProcessBindsAsConfigured) {
    TcpServer up(TcpServer::echo);
    PassedSocket data;
    Kprism k({up.endpoint()}, no_cert(), Spawn{{"LISTEN_FDS=1", "LISTEN_PID=1", "LISTEN_FDNAMES=data"}, {data.fd}});
    EXPECT_TRUE(echoes(k.port, "configured")) << k.output();
    EXPECT_EQ(k.output().find("passed by systemd"), std::string::npos) << k.output();
}

TEST(Notify, SocketActivationRefusesWhatIsNotAListeningTcpSocket) {
    struct Case {
        const char* what;
        std::unique_ptr<PassedSocket> sock;
        std::vector<std::string> env;
        std::string error;
    };
    std::vector<Case> cases;
    cases.push_back({"not listening", std::make_unique<PassedSocket>("127.0.0.1", SOCK_STREAM, false),
                     {"LISTEN_FDNAMES=data"}, "is not listening"});
    cases.push_back({"udp", std::make_unique<PassedSocket>("127.0.0.1", SOCK_DGRAM, false), {"LISTEN_FDNAMES=data"},
                     "is not a TCP socket"});
    cases.push_back({"admin not listening", std::make_unique<PassedSocket>("127.0.0.1", SOCK_STREAM, false),
                     {"LISTEN_FDNAMES=admin"}, "is not listening"});
    cases.push_back({"names do not match", std::make_unique<PassedSocket>(), {"LISTEN_FDNAMES=data:admin"},
                     "invalid LISTEN_PID, LISTEN_FDS or LISTEN_FDNAMES"});
    for (auto& c : cases) {
        std::vector<std::string> env = c.env;
        env.push_back("LISTEN_FDS=1");
        env.push_back("LISTEN_PID={pid}");
        Process p({kprism_bin(), "--endpoints", "127.0.0.1:6443", "--bind-port", std::to_string(free_port()),
                   "--health-port", std::to_string(free_port())},
                  Spawn{env, {c.sock->fd}});
        EXPECT_EQ(p.wait(5000ms), 2) << c.what << ": " << p.output();
        EXPECT_NE(p.output().find(c.error), std::string::npos) << c.what << ": " << p.output();
    }
}

// A socket unit listening beyond loopback needs allow_non_loopback, like bind_address. The test
// socket on 0.0.0.0 only exists for the moment kprism takes to refuse it, and nothing is sent.
TEST(Notify, SocketActivationRefusesNonLoopbackSocket) {
    PassedSocket any("0.0.0.0");
    Process p({kprism_bin(), "--endpoints", "127.0.0.1:6443", "--bind-port", std::to_string(free_port()),
               "--health-port", std::to_string(free_port())},
              Spawn{{"LISTEN_FDS=1", "LISTEN_PID={pid}", "LISTEN_FDNAMES=data"}, {any.fd}});
    EXPECT_EQ(p.wait(5000ms), 2) << p.output();
    EXPECT_NE(p.output().find("is bound to 0.0.0.0:" + std::to_string(any.port) +
                              ", not a loopback address (set allow_non_loopback = true to do it anyway)"),
              std::string::npos)
        << p.output();
}

// The real thing: systemd-socket-activate listens, and on the first connection execs kprism with
// LISTEN_FDS; that connection is served by kprism.
TEST(Notify, SystemdSocketActivate) {
    const std::string tool = "/usr/bin/systemd-socket-activate";
    if (access(tool.c_str(), X_OK) != 0) GTEST_SKIP() << tool << " not installed";
    TcpServer up(TcpServer::echo);
    int port = free_port();
    NotifySocket ns;
    Process p({tool, "--listen", "127.0.0.1:" + std::to_string(port), "--fdname=data", "-E", ns.env(), kprism_bin(),
               "--endpoints", up.endpoint(), "--bind-port", std::to_string(free_port()), "--health-port",
               std::to_string(free_port()), "--client-cert", "/nonexistent/kubelet-client.pem", "--client-key",
               "/nonexistent/kubelet-client.pem"});
    ASSERT_TRUE(p.wait_output("Listening on 127.0.0.1:" + std::to_string(port))) << p.output();
    EXPECT_TRUE(echoes(port, "first connection")) << p.output();
    EXPECT_TRUE(ns.wait_for("READY=1")) << ns.dump() << p.output();
    EXPECT_TRUE(p.wait_output("addresses=127.0.0.1:" + std::to_string(port))) << p.output();
    EXPECT_TRUE(echoes(port, "second connection")) << p.output();
    p.signal(SIGTERM);
    EXPECT_TRUE(ns.wait_for("STOPPING=1"));
    EXPECT_EQ(p.wait(5000ms), 0) << p.output();
}

// SIGHUP: RELOADING=1 (with MONOTONIC_USEC) then READY=1, for a good and for a bad reload.
TEST(Notify, ReloadingThenReady) {
    TcpServer up(TcpServer::echo);
    char tmpl[] = "/tmp/kprism-notify-conf-XXXXXX";
    int fd = mkstemp(tmpl);
    std::string toml = "endpoints = [\"" + up.endpoint() + "\"]\n";
    ASSERT_EQ(::write(fd, toml.data(), toml.size()), static_cast<ssize_t>(toml.size()));
    ::close(fd);
    NotifySocket ns;
    Kprism k({}, with(no_cert(), {"--config", tmpl}), Spawn{{ns.env()}, {}});
    ASSERT_TRUE(ns.wait_for("READY=1")) << ns.dump() << k.output();
    for (bool good : {true, false}) {
        size_t from = ns.messages().size();
        if (!good) std::ofstream(tmpl) << "endpoints = [\n";
        k.signal(SIGHUP);
        ASSERT_TRUE(ns.wait_for("RELOADING=1", 5000ms, from)) << ns.dump();
        ASSERT_TRUE(ns.wait_for("READY=1", 5000ms, from)) << ns.dump();
        const auto& m = ns.messages();
        bool monotonic = false;
        for (size_t i = from; i < m.size(); ++i) monotonic = monotonic || m[i].find("MONOTONIC_USEC=") != std::string::npos;
        EXPECT_TRUE(monotonic) << ns.dump();
        EXPECT_TRUE(k.wait_output(good ? "msg=\"configuration reloaded\"" : "reload failed; keeping the old configuration"));
    }
    EXPECT_TRUE(echoes(k.port, "still"));
    unlink(tmpl);
}
