// SPDX-License-Identifier: Apache-2.0
// Readiness through the real binary: stand-in apiservers with real mTLS whose /readyz the tests
// switch, kprism checking them with a client certificate generated at test time.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <set>
#include <poll.h>

#include "harness/harness.h"
#include "harness/apiserver.h"
#include "harness/pki.h"

using namespace it;

namespace {


std::vector<std::string> tls_flags(const Pki& pki, const std::string& cert = "") {
    std::string c = cert.empty() ? pki.client_pem : cert;
    return {"--client-cert", c,   "--client-key", c, "--ca-file", pki.ca_cert, "--health-interval", "1s",
            "--health-timeout", "500ms", "--health-fast-interval", "200ms", "--first-response-timeout", "700ms"};
}

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& more) {
    a.insert(a.end(), more.begin(), more.end());
    return a;
}

// One HTTPS request through kprism with the kubelet's certificate; returns the body or "".
std::string get(const Pki& pki, int port, const std::string& path = "/") {
    auto r = run({"/usr/bin/curl", "-sS", "--cacert", pki.ca_cert, "--cert", pki.client_pem, "--key", pki.client_pem,
                  "--connect-timeout", "5", "--max-time", "10", "https://127.0.0.1:" + std::to_string(port) + path},
                 15000ms);
    return r.code == 0 ? r.output : "";
}

std::string served_by(const std::string& body) {
    auto p = body.find("served by ");
    if (p == std::string::npos) return "";
    return body.substr(p + 10, body.find(' ', p + 10) - p - 10);
}

// The newest "upstream stats" line kprism logged for `addr` (after asking for one), or "".
std::string upstream_stats_line(Kprism& k, const std::string& addr) {
    k.stat("connections_active");
    std::string o = k.output();
    size_t at = o.rfind("msg=\"upstream stats\" upstream=" + addr + " ");
    return at == std::string::npos ? "" : o.substr(at, o.find('\n', at) - at);
}

bool upstream_state(Kprism& k, const std::string& addr, const std::string& field, const std::string& value) {
    return eventually([&] { return upstream_stats_line(k, addr).find(" " + field + "=" + value) != std::string::npos; },
                      10000ms);
}

// The probe RTT of `addr` in kprism's newest stats line (ms), or -1.
double upstream_rtt(Kprism& k, const std::string& addr) {
    std::string line = upstream_stats_line(k, addr);
    size_t r = line.find(" rtt_ms=");
    return r == std::string::npos ? -1 : std::strtod(line.c_str() + r + 8, nullptr);
}

}  // namespace

TEST(Health, EveryResultClass) {
    Pki pki;
    Apiserver ready(pki, "ready"), unready(pki, "unready"), unauth(pki, "unauth"), hang(pki, "hang"),
        badname(pki, "badname", /*wrong_name=*/true);
    unready.set("500");
    unauth.set("401");
    hang.set("hang");
    std::string refused = "127.0.0.1:" + std::to_string(refused_port());
    Kprism k({ready.addr(), unready.addr(), unauth.addr(), hang.addr(), badname.addr(), refused}, tls_flags(pki));
    EXPECT_TRUE(upstream_state(k, ready.addr(), "last_result", "ready"));
    EXPECT_TRUE(upstream_state(k, ready.addr(), "health", "up"));
    EXPECT_TRUE(upstream_state(k, unready.addr(), "last_result", "not_ready"));
    EXPECT_TRUE(upstream_state(k, unauth.addr(), "last_result", "unauthorized"));
    EXPECT_TRUE(upstream_state(k, hang.addr(), "last_result", "timeout"));
    EXPECT_TRUE(upstream_state(k, badname.addr(), "last_result", "tls_failed"));
    EXPECT_TRUE(upstream_state(k, refused, "last_result", "connect_failed"));
    for (auto* a : {&unready, &unauth, &hang, &badname})
        EXPECT_TRUE(upstream_state(k, a->addr(), "health", "down")) << a->name;
    std::string out = k.output();
    EXPECT_NE(out.find("[-]etcd failed"), std::string::npos) << "the apiserver's reason is logged";
    EXPECT_NE(out.find("health check unauthorized"), std::string::npos);
    EXPECT_TRUE(out.find("no TLS handshake within") != std::string::npos ||
                out.find("no response within") != std::string::npos);
    // Only the ready one gets connections.
    for (int i = 0; i < 5; ++i) EXPECT_EQ(served_by(get(pki, k.port)), "ready");
}

TEST(Health, ClientCertRejectedByTlsIsUnauthorized) {
    Pki pki;
    Apiserver a(pki, "a");
    Kprism k({a.addr()}, tls_flags(pki, pki.untrusted_client_pem));
    EXPECT_TRUE(upstream_state(k, a.addr(), "last_result", "unauthorized"));
    EXPECT_TRUE(k.wait_output("apiserver rejected the client certificate"));
}

TEST(Health, ExpiredClientCertIsUnauthorized) {
    Pki pki;
    Apiserver a(pki, "a");
    Kprism k({a.addr()}, tls_flags(pki, pki.expired_client_pem));
    EXPECT_TRUE(upstream_state(k, a.addr(), "last_result", "unauthorized"));
}

TEST(Health, WrongCaIsTlsFailure) {
    Pki pki;
    Apiserver a(pki, "a");
    auto flags = tls_flags(pki);
    flags[5] = pki.other_ca_cert;  // --ca-file
    Kprism k({a.addr()}, flags);
    EXPECT_TRUE(upstream_state(k, a.addr(), "last_result", "tls_failed"));
    EXPECT_TRUE(k.wait_output("apiserver certificate not accepted"));
}

TEST(Health, MalformedAndOversizedResponses) {
    Pki pki;
    Apiserver garbage(pki, "garbage"), huge(pki, "huge"), closing(pki, "closing");
    garbage.set("garbage");
    huge.set("huge");
    closing.set("close");
    Kprism k({garbage.addr(), huge.addr(), closing.addr()}, tls_flags(pki));
    EXPECT_TRUE(upstream_state(k, garbage.addr(), "last_result", "not_ready"));
    EXPECT_TRUE(k.wait_output("bad response: not an HTTP response"));
    // A 200 with a 10 MiB body: the status decides; the body is not read.
    EXPECT_TRUE(upstream_state(k, huge.addr(), "health", "up"));
    EXPECT_TRUE(upstream_state(k, closing.addr(), "health", "down"));
}

// rise/fall: one 500 takes an up upstream down at once (the apiserver's own verdict); timeouts
// need `fall` in a row, re-checked at the fast interval; coming back needs `rise` successes.
// A new connection per check: a /readyz that hangs after the handshake is a timeout that counts
// towards fall (on the kept connection it is down at once, probe_keepalive_test.cc).
TEST(Health, RiseFallAndFastRecheck) {
    Pki pki;
    Apiserver a(pki, "a"), b(pki, "b");
    Kprism k({a.addr(), b.addr()},
             with(tls_flags(pki), {"--health-interval", "4s", "--health-timeout", "300ms", "--health-rise", "2",
                                   "--health-fall", "2", "--health-new-connection-interval", "0"}));
    ASSERT_TRUE(upstream_state(k, a.addr(), "health", "up"));
    a.set("hang");
    ASSERT_TRUE(k.wait_output("msg=\"health check failed\" upstream=" + a.addr(), 8000ms));
    auto t_first = Clock::now();
    ASSERT_TRUE(k.wait_output("msg=\"upstream down\" upstream=" + a.addr(), 8000ms));
    // The second check came at the fast interval (200 ms), not the 4 s interval.
    EXPECT_LT(Clock::now() - t_first, 2500ms);
    a.set("200");
    ASSERT_TRUE(k.wait_output("msg=\"health check passed\" upstream=" + a.addr(), 8000ms));
    ASSERT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + a.addr(), 8000ms));
    b.set("500");
    ASSERT_TRUE(k.wait_output("msg=\"upstream down\" upstream=" + b.addr(), 8000ms));
    // The stand-in's 500 names its failing check: that is the reason, its body the error beside it.
    EXPECT_NE(k.output().find("reason=\"not_ready: etcd\" error=\"HTTP 500: [+]ping ok [-]etcd failed"),
              std::string::npos)
        << k.output();
}

// A down upstream gets no new connections, and its established connections are closed; those
// on the healthy upstream stay.
TEST(Health, DownUpstreamLosesItsConnections) {
    Pki pki;
    Apiserver a(pki, "a"), b(pki, "b");
    Kprism k({a.addr(), b.addr()}, with(tls_flags(pki), {"--policy", "least-connections", "--close-spread", "300ms"}));
    ASSERT_TRUE(upstream_state(k, a.addr(), "health", "up"));
    ASSERT_TRUE(upstream_state(k, b.addr(), "health", "up"));
    std::vector<int> fds;
    for (int i = 0; i < 20; ++i) fds.push_back(connect_to(k.port));
    // Counted from the pick, least-connections splits a burst evenly.
    ASSERT_TRUE(upstream_state(k, a.addr(), "active", "10"));
    ASSERT_TRUE(upstream_state(k, b.addr(), "active", "10"));
    a.set("500");
    ASSERT_TRUE(k.wait_output("msg=\"upstream down\" upstream=" + a.addr()));
    EXPECT_TRUE(upstream_state(k, a.addr(), "active", "0"));
    EXPECT_EQ(k.stat("closed_for_down"), 10);
    int open = 0;
    for (int fd : fds) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 0) == 0) ++open;  // no EOF pending
        ::close(fd);
    }
    EXPECT_EQ(open, 10);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(served_by(get(pki, k.port)), "b");
}

TEST(Health, AllDownFailsOpenAndKeepsConnections) {
    Pki pki;
    Apiserver a(pki, "a"), b(pki, "b");
    Kprism k({a.addr(), b.addr()}, tls_flags(pki));
    ASSERT_TRUE(upstream_state(k, a.addr(), "health", "up"));
    ASSERT_TRUE(upstream_state(k, b.addr(), "health", "up"));
    b.set("500");
    ASSERT_TRUE(upstream_state(k, b.addr(), "health", "down"));
    int held = connect_to(k.port);  // lands on a, the last one up
    ASSERT_TRUE(upstream_state(k, a.addr(), "active", "1"));
    a.set("500");
    ASSERT_TRUE(k.wait_output("failing open"));
    ASSERT_TRUE(upstream_state(k, a.addr(), "health", "down"));
    ASSERT_TRUE(upstream_state(k, b.addr(), "health", "down"));
    EXPECT_NE(served_by(get(pki, k.port)), "") << "fail-open: the request is still served";
    EXPECT_EQ(k.stat("closed_for_down"), 0) << "never close when nothing else is ready";
    pollfd p{held, POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 0), 0);
    ::close(held);
    a.set("200");
    EXPECT_TRUE(k.wait_output("no-ready episode over"));
}

TEST(Health, AllDownFailClosedRefuses) {
    Pki pki;
    Apiserver a(pki, "a");
    a.set("500");
    Kprism k({a.addr()}, with(tls_flags(pki), {"--fail-mode", "fail-closed"}));
    ASSERT_TRUE(upstream_state(k, a.addr(), "health", "down"));
    EXPECT_EQ(get(pki, k.port), "");
    EXPECT_TRUE(k.wait_output("no upstream ready (fail-closed)"));
}

// kubelet rotates its certificate by re-pointing a symlink; kprism notices without a restart.
TEST(Health, CertificateRotationIsPickedUp) {
    Pki pki;
    Apiserver a(pki, "a");
    std::string link = pki.dir + "/kubelet-client-current.pem";
    std::string first = pki.dir + "/kubelet-client-1.pem", second = pki.dir + "/kubelet-client-2.pem",
                expired = pki.dir + "/kubelet-client-3.pem";
    pki.issue_client(first, "system:node:one");
    pki.issue_client(second, "system:node:two");
    pki.issue_client(expired, "system:node:three", -7200, -3600);
    auto repoint = [&](const std::string& target) {
        std::string tmp = link + ".tmp";
        unlink(tmp.c_str());
        ASSERT_EQ(symlink(target.c_str(), tmp.c_str()), 0);
        ASSERT_EQ(rename(tmp.c_str(), link.c_str()), 0);
    };
    repoint(first);
    Kprism k({a.addr()}, tls_flags(pki, link));
    ASSERT_TRUE(k.wait_output("CN=system:node:one"));
    ASSERT_TRUE(upstream_state(k, a.addr(), "health", "up"));
    repoint(expired);
    ASSERT_TRUE(k.wait_output("msg=\"client certificate rotated\""));
    EXPECT_TRUE(upstream_state(k, a.addr(), "last_result", "unauthorized"));
    repoint(second);
    ASSERT_TRUE(k.wait_output("CN=system:node:two"));
    EXPECT_TRUE(upstream_state(k, a.addr(), "health", "up"));
    EXPECT_TRUE(a.proc->wait_output("peer=\"system:node:two\""));
    EXPECT_EQ(k.output().find("PRIVATE KEY"), std::string::npos) << "no key material in logs";
}

// During kubelet TLS bootstrap there is no client certificate yet: traffic still flows (to
// every endpoint), and checks start once the file appears.
TEST(Health, BootstrapWithoutCertificateThenItAppears) {
    Pki pki;
    Apiserver a(pki, "a"), b(pki, "b");
    std::string path = pki.dir + "/not-yet.pem";
    Kprism k({a.addr(), b.addr()}, tls_flags(pki, path));
    ASSERT_TRUE(k.wait_output("health checks paused"));
    std::set<std::string> seen;
    ASSERT_TRUE(eventually([&] {
        seen.insert(served_by(get(pki, k.port)));
        return seen.count("a") && seen.count("b");
    }, 10000ms)) << "bootstrap traffic goes to every endpoint";
    pki.issue_client(path, "system:node:late");
    ASSERT_TRUE(k.wait_output("msg=\"client certificate loaded\""));
    EXPECT_TRUE(upstream_state(k, a.addr(), "health", "up"));
    EXPECT_TRUE(upstream_state(k, b.addr(), "health", "up"));
}

// Every probe on a new connection (health.new_connection_interval 0, the way before the kept connection):
// their TLS sessions are resumed.
TEST(Health, SessionsAreResumed) {
    Pki pki;
    Apiserver a(pki, "a");
    Kprism k({a.addr()}, with(tls_flags(pki), {"--health-interval", "200ms", "--health-timeout", "150ms",
                                               "--health-fast-interval", "100ms", "--health-new-connection-interval",
                                               "0"}));
    ASSERT_TRUE(eventually([&] { return a.proc->count_output("handshake resumed=1") >= 3; }, 10000ms));
    EXPECT_LE(a.proc->count_output("handshake resumed=0"), 2u);
}

// A hung apiserver (process stopped: the kernel still accepts TCP) costs no new connection:
// the first flight is replayed to a ready upstream.
TEST(Health, HungUpstreamCostsNoClientConnection) {
    Pki pki;
    Apiserver a(pki, "a"), b(pki, "b");
    Kprism k({a.addr(), b.addr()}, with(tls_flags(pki), {"--health-interval", "4s", "--health-timeout", "1s",
                                                         "--policy", "least-connections"}));
    ASSERT_TRUE(upstream_state(k, a.addr(), "health", "up"));
    ASSERT_TRUE(upstream_state(k, b.addr(), "health", "up"));
    a.proc->signal(SIGSTOP);
    int ok = 0;
    for (int i = 0; i < 6; ++i) ok += served_by(get(pki, k.port)) == "b";
    EXPECT_EQ(ok, 6);
    EXPECT_EQ(k.stat("client_failures"), 0);
    EXPECT_TRUE(upstream_state(k, a.addr(), "health", "down"));
    a.proc->signal(SIGCONT);
    EXPECT_TRUE(upstream_state(k, a.addr(), "health", "up"));
}

// A dead apiserver: the refused client connect counts at once and triggers a check.
TEST(Health, KilledUpstreamIsDownFast) {
    Pki pki;
    Apiserver a(pki, "a"), b(pki, "b");
    Kprism k({a.addr(), b.addr()}, with(tls_flags(pki), {"--health-interval", "4s", "--health-timeout", "1s"}));
    // Both checked: a retry past a refused connect goes only to an upstream that passed a check.
    for (auto* s : {&a, &b}) ASSERT_TRUE(upstream_state(k, s->addr(), "health", "up"));
    a.proc->signal(SIGKILL);
    a.proc->wait();
    int ok = 0;
    for (int i = 0; i < 6; ++i) ok += served_by(get(pki, k.port)) == "b";
    EXPECT_EQ(ok, 6);
    EXPECT_TRUE(upstream_state(k, a.addr(), "health", "down"));
    EXPECT_EQ(k.stat("client_failures"), 0);
}

TEST(Health, ZonePreference) {
    Pki pki;
    Apiserver a(pki, "a"), b(pki, "b"), c(pki, "c");
    char tmpl[] = "/tmp/kprism-zone-XXXXXX";
    int fd = mkstemp(tmpl);
    std::string toml = "endpoints = [ { address = \"" + a.addr() + "\", zone = \"z1\" }, { address = \"" + b.addr() +
                       "\", zone = \"z2\" }, { address = \"" + c.addr() + "\", zone = \"z1\" } ]\nzone = \"z2\"\n";
    ASSERT_EQ(::write(fd, toml.data(), toml.size()), static_cast<ssize_t>(toml.size()));
    ::close(fd);
    Kprism k({}, with(tls_flags(pki), {"--config", tmpl}));
    for (auto* s : {&a, &b, &c}) ASSERT_TRUE(upstream_state(k, s->addr(), "health", "up"));
    for (int i = 0; i < 6; ++i) EXPECT_EQ(served_by(get(pki, k.port)), "b");
    b.set("500");
    ASSERT_TRUE(upstream_state(k, b.addr(), "health", "down"));
    std::set<std::string> seen;  // every answer, until both of the other zone's have served
    EXPECT_TRUE(eventually([&] {
        seen.insert(served_by(get(pki, k.port)));
        return seen.count("a") && seen.count("c");
    }, 10000ms));
    EXPECT_EQ(seen, (std::set<std::string>{"a", "c"}));
    unlink(tmpl);
}

// The latency policy prefers the nearest ready tier: an upstream behind a relay that adds delay
// is not used while a near one is ready, and is used when the near one is not.
TEST(Health, LatencyPolicyPrefersNearestReady) {
    Pki pki;
    Apiserver near_(pki, "near"), far_(pki, "far");
    TcpServer relay([&](int client) {
        int up = connect_to(far_.port);
        if (up < 0) return;
        auto pump = [](int from, int to) {
            char buf[16384];
            for (;;) {
                ssize_t n = ::recv(from, buf, sizeof buf, 0);
                if (n <= 0) break;
                std::this_thread::sleep_for(50ms);  // a distant site
                if (!send_all(to, buf, static_cast<size_t>(n))) break;
            }
            ::shutdown(to, SHUT_WR);
        };
        std::thread t(pump, up, client);
        pump(client, up);
        t.join();
        ::close(up);
    });
    // A fresh probe crosses the relay in up to six legs (handshake, request, ticket, answer): 300 ms
    // here, so the check gets a timeout well above that, sanitizer builds included.
    Kprism k({near_.addr(), relay.endpoint()}, with(tls_flags(pki), {"--policy", "latency", "--health-timeout", "900ms"}));
    ASSERT_TRUE(upstream_state(k, near_.addr(), "health", "up"));
    ASSERT_TRUE(upstream_state(k, relay.endpoint(), "health", "up"));
    // On a loaded machine a first handshake can be slow even nearby: wait until the probes have
    // measured the relay as clearly slower, past the tier's hysteresis (2x + 1 ms).
    double near_ms = -1, far_ms = -1;
    ASSERT_TRUE(eventually([&] {
        near_ms = upstream_rtt(k, near_.addr());
        far_ms = upstream_rtt(k, relay.endpoint());
        return near_ms >= 0 && far_ms > 2 * near_ms + 1;
    }, 20000ms)) << "probe RTT near " << near_ms << " ms, behind the relay " << far_ms << " ms";
    for (int i = 0; i < 8; ++i) EXPECT_EQ(served_by(get(pki, k.port)), "near");
    near_.set("500");
    ASSERT_TRUE(upstream_state(k, near_.addr(), "health", "down"));
    EXPECT_EQ(served_by(get(pki, k.port)), "far") << "readiness first, speed second";
}

// A real client: kubectl, with the kubelet's certificate, TLS end to end through kprism.
TEST(Health, KubectlThroughKprism) {
    if (access("/usr/local/bin/kubectl", X_OK) != 0 && access("/usr/bin/kubectl", X_OK) != 0)
        GTEST_SKIP() << "kubectl is not installed";
    Pki pki;
    Apiserver a(pki, "a");
    Kprism k({a.addr()}, tls_flags(pki));
    ASSERT_TRUE(upstream_state(k, a.addr(), "health", "up"));
    std::string kubectl = access("/usr/local/bin/kubectl", X_OK) == 0 ? "/usr/local/bin/kubectl" : "/usr/bin/kubectl";
    auto r = run({kubectl, "--server", "https://127.0.0.1:" + std::to_string(k.port), "--certificate-authority",
                  pki.ca_cert, "--client-certificate", pki.client_pem, "--client-key", pki.client_pem, "get", "--raw",
                  "/version"},
                 20000ms);
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("served by a path /version"), std::string::npos) << r.output;
    EXPECT_TRUE(a.proc->wait_output("peer=\"system:node:test\"")) << "the client's own certificate reached the apiserver";
}

// server_name replaces the endpoint's IP as the verified name and is sent as SNI.
TEST(Health, ServerNameOverride) {
    Pki pki;
    Apiserver a(pki, "a", /*wrong_name=*/true);
    Kprism bad({a.addr()}, tls_flags(pki));
    EXPECT_TRUE(upstream_state(bad, a.addr(), "last_result", "tls_failed"));
    Kprism good({a.addr()}, with(tls_flags(pki), {"--server-name", "elsewhere.example"}));
    EXPECT_TRUE(upstream_state(good, a.addr(), "health", "up"));
}
