// SPDX-License-Identifier: Apache-2.0
// The credentials condition through the real binary: stand-in apiservers that reject
// kprism's client certificate (expired, or from another CA) make one node-level condition: one
// line on entry, nothing down or closed, connections fail open; /status, `kprism status` and
// the gauges show it; a good certificate ends it with one line.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <vector>

#include "harness/apiserver.h"
#include "harness/harness.h"
#include "harness/pki.h"

using namespace it;

namespace {

const char* const kEntered = "msg=\"client certificate rejected by every apiserver";
const char* const kLeft = "msg=\"client certificate no longer rejected";

std::vector<std::string> flags(const Pki& pki, const std::string& cert, std::vector<std::string> more = {}) {
    std::vector<std::string> f = {"--client-cert", cert, "--client-key", cert, "--ca-file", pki.ca_cert,
                                  "--health-interval", "1s", "--health-timeout", "500ms", "--health-fast-interval",
                                  "200ms", "--close-spread", "100ms"};
    f.insert(f.end(), more.begin(), more.end());
    return f;
}

// A request through kprism with a certificate the stand-ins accept (kubelet's, renewed).
std::string through(const Pki& pki, int port) {
    auto r = run({"/usr/bin/curl", "-sS", "--cacert", pki.ca_cert, "--cert", pki.client_pem, "--key", pki.client_pem,
                  "--connect-timeout", "5", "--max-time", "10", "https://127.0.0.1:" + std::to_string(port) + "/"},
                 15000ms);
    if (r.code != 0) ADD_FAILURE() << "curl: " << r.output;
    return r.code == 0 ? r.output : "";
}

// The value of an unlabelled sample in /metrics, or "" if absent.
std::string sample(int admin_port, const std::string& name) {
    std::string m = body_of(http_get(admin_port, "/metrics"));
    size_t at = m.find("\n" + name + " ");
    if (at == std::string::npos) return "";
    at += name.size() + 2;
    return m.substr(at, m.find('\n', at) - at);
}

long unauthorized_checks(int admin_port, const std::string& upstream) {
    std::string v = sample(admin_port, "kprism_health_checks_total{upstream=\"" + upstream + "\",result=\"unauthorized\"}");
    return v.empty() ? -1 : std::stol(v);
}

}  // namespace

// Scenario 5: the kubelet client certificate runs out and is not renewed.
TEST(Credentials, ExpiryIsOneConditionFailingOpenAndClosingNothing) {
    Pki pki;
    Apiserver a(pki, "a"), b(pki, "b"), c(pki, "c");
    std::string cert = pki.dir + "/node-client.pem";  // not client_pem: curl presents that one
    pki.issue_client(cert, "system:node:soon", -3600, 4);  // runs out in 4 s
    // The C++ stand-in (OpenSSL) resumes a session whose client certificate has since expired,
    // and verifies the certificate at the handshake only; kube-apiserver (Go crypto/tls, and its
    // x509 authenticator on every request) does neither. So here: a full handshake on a new
    // connection for every check, as the real one would judge each (make scenarios, 5, runs this
    // against the Go stand-in with the defaults).
    Kprism k({a.addr(), b.addr(), c.addr()},
             flags(pki, cert, {"--health-tls-resumption=false", "--health-new-connection-interval", "0"}));
    ASSERT_TRUE(eventually([&] { return k.count_output("msg=\"upstream up\"") == 3; }, 5000ms)) << k.output();
    std::vector<int> held;
    for (int i = 0; i < 6; ++i) held.push_back(connect_to(k.port));
    ASSERT_TRUE(eventually([&] { return sample(k.admin_port, "kprism_connections_active") == "6"; }));

    ASSERT_TRUE(k.wait_output(kEntered, 10000ms)) << k.output();
    std::this_thread::sleep_for(3s);  // several more rounds of checks, all rejected
    std::string out = k.output();
    EXPECT_EQ(k.count_output(kEntered), 1u) << out;
    size_t line_at = out.rfind('\n', out.find(kEntered)) + 1;
    std::string line = out.substr(line_at, out.find('\n', line_at) - line_at);
    EXPECT_NE(line.find("CN=system:node:soon"), std::string::npos) << line;
    EXPECT_NE(line.find("expired=true"), std::string::npos) << line;
    EXPECT_NE(line.find("client_cert=" + cert), std::string::npos) << line;
    EXPECT_NE(line.find("not_after="), std::string::npos) << line;
    EXPECT_NE(line.find("upstreams=3"), std::string::npos) << line;
    EXPECT_NE(line.find("level=error"), std::string::npos) << line;
    // Nothing per upstream: no down, no unauthorized line, no no-ready episode.
    EXPECT_EQ(k.count_output("msg=\"upstream down\""), 0u) << out;
    EXPECT_EQ(k.count_output("health check unauthorized"), 0u) << out;
    EXPECT_EQ(k.count_output("health check failed"), 0u) << out;
    EXPECT_EQ(k.count_output("no upstream ready"), 0u) << out;

    // Gauges, /status, `kprism status`.
    EXPECT_EQ(sample(k.admin_port, "kprism_client_certificate_rejected"), "1");
    std::string remaining = sample(k.admin_port, "kprism_client_certificate_remaining_seconds");
    ASSERT_FALSE(remaining.empty());
    EXPECT_LE(std::stol(remaining), 0) << "expired";
    EXPECT_EQ(sample(k.admin_port, "kprism_connections_closed_upstream_down_total"), "0");
    std::string status = body_of(http_get(k.admin_port, "/status"));
    EXPECT_NE(status.find(R"("credentials":{"state":"rejected","client_cert":")" + cert + R"(","subject":")"),
              std::string::npos)
        << status;
    auto st = run({kprism_bin(), "status", "--health-port", std::to_string(k.admin_port)});
    EXPECT_NE(st.output.find("client certificate"), std::string::npos) << st.output;
    EXPECT_NE(st.output.find("rejected by every apiserver, expired"), std::string::npos) << st.output;

    // Failing open: new connections are served, established ones stay.
    for (int i = 0; i < 3; ++i) EXPECT_NE(through(pki, k.port), "") << "fail-open";
    for (int fd : held) EXPECT_TRUE(still_open(fd));
    EXPECT_EQ(sample(k.admin_port, "kprism_connections_closed_upstream_down_total"), "0");

    // kubelet finally renews it: one line, and the checks pass again.
    pki.issue_client(cert, "system:node:renewed");
    ASSERT_TRUE(k.wait_output(kLeft, 10000ms)) << k.output();
    ASSERT_TRUE(eventually([&] { return sample(k.admin_port, "kprism_client_certificate_rejected") == "0"; }));
    std::this_thread::sleep_for(1500ms);
    EXPECT_EQ(k.count_output(kLeft), 1u) << k.output();
    EXPECT_EQ(k.count_output(kEntered), 1u) << k.output();
    EXPECT_NE(body_of(http_get(k.admin_port, "/status")).find(R"("state":"ok")"), std::string::npos);
    EXPECT_GT(std::stol(sample(k.admin_port, "kprism_client_certificate_remaining_seconds")), 86400);
    EXPECT_EQ(k.count_output("msg=\"upstream down\""), 0u) << k.output();
    for (int fd : held) {
        EXPECT_TRUE(still_open(fd));
        ::close(fd);
    }
    EXPECT_EQ(sample(k.admin_port, "kprism_connections_closed_upstream_down_total"), "0");
}

// A certificate from another CA from the start: the upstreams stay unknown, kprism says why once
// and passes connections on, even with fail_mode = "fail-closed" (the checks cannot judge).
TEST(Credentials, UntrustedFromTheStartFailsOpenEvenFailClosed) {
    Pki pki;
    Apiserver a(pki, "a"), b(pki, "b");
    Kprism k({a.addr(), b.addr()}, flags(pki, pki.untrusted_client_pem, {"--fail-mode", "fail-closed"}));
    ASSERT_TRUE(k.wait_output(kEntered, 10000ms)) << k.output();
    EXPECT_TRUE(k.wait_output("msg=ready reason=\"first health round done\"")) << k.output();
    EXPECT_NE(through(pki, k.port), "") << "connections go to every endpoint";
    long before = unauthorized_checks(k.admin_port, a.addr());
    std::this_thread::sleep_for(3s);
    long during = unauthorized_checks(k.admin_port, a.addr()) - before;
    EXPECT_GE(during, 2) << "still checked";
    EXPECT_LE(during, 5) << "at health.interval (1s), not health.fast_interval (200ms), though still unknown";
    EXPECT_EQ(k.count_output(kEntered), 1u) << k.output();
    EXPECT_EQ(k.count_output("msg=\"upstream down\""), 0u) << k.output();
    EXPECT_NE(k.output().find("expired=false"), std::string::npos);
    EXPECT_EQ(sample(k.admin_port, "kprism_client_certificate_rejected"), "1");
    EXPECT_GT(std::stol(sample(k.admin_port, "kprism_client_certificate_remaining_seconds")), 86400);
    // A good one replaces it: new content at the path, picked up by the checks.
    ASSERT_EQ(::unlink(pki.untrusted_client_pem.c_str()), 0);
    ASSERT_EQ(::link(pki.client_pem.c_str(), pki.untrusted_client_pem.c_str()), 0);
    ASSERT_TRUE(k.wait_output(kLeft, 10000ms)) << k.output();
    EXPECT_TRUE(eventually([&] { return k.count_output("msg=\"upstream up\"") == 2; }, 5000ms)) << k.output();
    EXPECT_EQ(k.count_output(kLeft), 1u);
}

// One apiserver rejects the certificate, the other accepts it: that one is misconfigured, goes
// down (closing nothing) with one line about it, and there is no node-level condition.
TEST(Credentials, TheOddOneOutIsDownNotTheNode) {
    Pki pki;
    Apiserver good(pki, "good"), odd(pki, "odd");
    Kprism k({good.addr(), odd.addr()}, flags(pki, pki.client_pem, {"--policy", "least-connections"}));
    ASSERT_TRUE(eventually([&] { return k.count_output("msg=\"upstream up\"") == 2; }, 5000ms)) << k.output();
    std::vector<int> held;
    for (int i = 0; i < 4; ++i) held.push_back(connect_to(k.port));
    ASSERT_TRUE(eventually([&] { return sample(k.admin_port, "kprism_connections_active") == "4"; }));
    odd.set("401");
    ASSERT_TRUE(k.wait_output("msg=\"upstream down\" upstream=" + odd.addr(), 10000ms)) << k.output();
    std::this_thread::sleep_for(3s);
    EXPECT_EQ(k.count_output("health check unauthorized"), 1u) << k.output();
    EXPECT_EQ(k.count_output(kEntered), 0u) << k.output();
    EXPECT_EQ(sample(k.admin_port, "kprism_client_certificate_rejected"), "0");
    EXPECT_EQ(sample(k.admin_port, "kprism_connections_closed_upstream_down_total"), "0")
        << "a rejected certificate says nothing about kubelet's connections there";
    for (int fd : held) {
        EXPECT_TRUE(still_open(fd));
        ::close(fd);
    }
    for (int i = 0; i < 4; ++i) EXPECT_NE(through(pki, k.port).find("served by good"), std::string::npos);
    odd.set("200");
    EXPECT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + odd.addr() + " was=down", 10000ms)) << k.output();
}

// A reload that changes nothing TLS-related is no rotation: the condition stays, with no line
// that it ended, and the rejections go on being noted rather than counted.
TEST(Credentials, ConditionSurvivesReloadsThatChangeNothing) {
    Pki pki;
    Apiserver a(pki, "a"), b(pki, "b");
    Kprism k({a.addr(), b.addr()}, flags(pki, pki.untrusted_client_pem));
    ASSERT_TRUE(k.wait_output(kEntered, 10000ms)) << k.output();
    for (int i = 1; i <= 3; ++i) {
        k.signal(SIGHUP);
        ASSERT_TRUE(eventually([&] { return k.count_output("msg=\"configuration reloaded\"") == static_cast<size_t>(i); }))
            << k.output();
    }
    long before = unauthorized_checks(k.admin_port, a.addr());
    ASSERT_TRUE(eventually([&] { return unauthorized_checks(k.admin_port, a.addr()) >= before + 2; }, 5000ms))
        << "checked again since: " << k.output();
    EXPECT_EQ(k.count_output(kLeft), 0u) << k.output();
    EXPECT_EQ(k.count_output(kEntered), 1u) << k.output();
    EXPECT_EQ(sample(k.admin_port, "kprism_client_certificate_rejected"), "1");
    EXPECT_NE(body_of(http_get(k.admin_port, "/status")).find(R"("credentials":{"state":"rejected")"), std::string::npos);
    EXPECT_EQ(k.count_output("msg=\"upstream down\""), 0u) << k.output();
}
