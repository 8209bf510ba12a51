// SPDX-License-Identifier: Apache-2.0
// Keep-alive readiness probes through the real binary against the TLS stand-in: one
// kept connection carries the probes, a new one is opened every health.new_connection_interval,
// after the apiserver ends the kept one, and after a certificate rotation; a hung apiserver on the
// kept connection is down at once, and 0 keeps the old way (a new connection each probe).
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>

#include "harness/apiserver.h"
#include "harness/harness.h"
#include "harness/pki.h"

using namespace it;

namespace {

std::vector<std::string> flags(const Pki& pki, std::vector<std::string> more = {}) {
    std::vector<std::string> a = {"--client-cert",    pki.client_pem, "--client-key",         pki.client_pem,
                                  "--ca-file",        pki.ca_cert,    "--health-interval",    "400ms",
                                  "--health-timeout", "350ms",        "--health-fast-interval", "100ms"};
    a.insert(a.end(), more.begin(), more.end());
    return a;
}

size_t handshakes(const Apiserver& a) { return a.proc->count_output("handshake resumed="); }
size_t readyz(const Apiserver& a) { return a.proc->count_output("request path=/readyz"); }

// The value of an unlabelled-but-for-upstream counter on /metrics.
long metric(const Kprism& k, const std::string& family, const std::string& upstream) {
    std::string m = body_of(http_get(k.admin_port, "/metrics"));
    std::string key = family + "{upstream=\"" + upstream + "\"} ";
    auto p = m.find(key);
    return p == std::string::npos ? -1 : std::strtol(m.c_str() + p + key.size(), nullptr, 10);
}

}  // namespace

TEST(ProbeKeepalive, ProbesReuseOneConnection) {
    Pki pki;
    Apiserver a(pki, "a");
    Kprism k({a.addr()}, flags(pki));
    ASSERT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + a.addr()));
    ASSERT_TRUE(eventually([&] { return readyz(a) >= 8; }, 10000ms));
    EXPECT_EQ(handshakes(a), 1u) << a.proc->output();
    EXPECT_GE(metric(k, "kprism_health_checks_reused_connection_total", a.addr()), 6);
    EXPECT_EQ(metric(k, "kprism_health_check_connections_ended_total", a.addr()), 0);
    std::string st = body_of(http_get(k.admin_port, "/status"));
    auto p = st.find("\"probe_local_port\":");
    ASSERT_NE(p, std::string::npos) << st;
    EXPECT_TRUE(isdigit(static_cast<unsigned char>(st[p + 19]))) << st;
}

// A failing /readyz sent chunked, as Go sends one past 2048 bytes, keeps the connection too: an
// outage costs a request per probe, not a TLS handshake.
TEST(ProbeKeepalive, ChunkedFailureKeepsTheConnection) {
    Pki pki;
    Apiserver a(pki, "a");
    Kprism k({a.addr()}, flags(pki, {"--health-fall", "1"}));
    ASSERT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + a.addr()));
    std::string body = "[+]ping ok\n[-]etcd failed: reason withheld\n";
    for (int i = 1; i <= 160; ++i) body += "[+]poststarthook/extra-" + std::to_string(i) + " ok\n";
    body += "readyz check failed\n";
    ASSERT_GT(body.size(), 4096u);  // several chunks
    a.set("body 500 chunked\n" + body);
    ASSERT_TRUE(k.wait_output("msg=\"upstream down\" upstream=" + a.addr(), 5000ms)) << k.output();
    const size_t n = readyz(a);
    const long reused = metric(k, "kprism_health_checks_reused_connection_total", a.addr());
    ASSERT_TRUE(eventually([&] { return readyz(a) >= n + 6; }, 10000ms)) << a.proc->output();
    EXPECT_EQ(handshakes(a), 1u) << a.proc->output();
    EXPECT_GE(metric(k, "kprism_health_checks_reused_connection_total", a.addr()), reused + 5);
}

TEST(ProbeKeepalive, NewConnectionEveryIntervalResumed) {
    Pki pki;
    Apiserver a(pki, "a");
    Kprism k({a.addr()}, flags(pki, {"--health-new-connection-interval", "1s"}));
    ASSERT_TRUE(eventually([&] { return handshakes(a) >= 4; }, 10000ms));
    // About 2.5 probes per connection: most probes ride a kept one, every new one is resumed.
    EXPECT_GE(readyz(a), 2 * handshakes(a) - 1) << a.proc->output();
    EXPECT_EQ(a.proc->count_output("handshake resumed=0"), 1u) << a.proc->output();
}

TEST(ProbeKeepalive, ZeroIsANewConnectionEachProbe) {
    Pki pki;
    Apiserver a(pki, "a");
    Kprism k({a.addr()}, flags(pki, {"--health-new-connection-interval", "0"}));
    ASSERT_TRUE(eventually([&] { return readyz(a) >= 5; }, 10000ms));
    EXPECT_GE(handshakes(a) + 1, readyz(a)) << a.proc->output();
    EXPECT_EQ(metric(k, "kprism_health_checks_reused_connection_total", a.addr()), 0);
    EXPECT_NE(body_of(http_get(k.admin_port, "/status")).find("\"probe_local_port\":null"), std::string::npos);
}

// The apiserver ending the kept connection (SIGUSR1: the stand-in ends every connection at once)
// is no failed check, and a probe on a new connection follows within fast_interval.
TEST(ProbeKeepalive, KeptConnectionEndedIsChecked) {
    Pki pki;
    Apiserver a(pki, "a");
    Kprism k({a.addr()}, flags(pki, {"--health-interval", "20s", "--health-timeout", "1s", "--health-fast-interval",
                                     "1s"}));
    ASSERT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + a.addr()));
    ASSERT_TRUE(eventually([&] { return readyz(a) >= 1; }));
    size_t n = readyz(a);
    a.proc->signal(SIGUSR1);
    ASSERT_TRUE(eventually([&] { return readyz(a) > n; }, 3000ms)) << "a new probe at once, not in 20 s";
    EXPECT_EQ(handshakes(a), 2u);
    EXPECT_EQ(metric(k, "kprism_health_check_connections_ended_total", a.addr()), 1);
    EXPECT_EQ(k.count_output("msg=\"health check failed\""), 0u) << k.output();
    EXPECT_EQ(k.count_output("msg=\"upstream down\""), 0u);
}

// Stopped (the kernel still acknowledges the request): down at the first unanswered probe, as a
// connect without a handshake is; back once it runs again.
TEST(ProbeKeepalive, HungOnTheKeptConnectionIsDownAtOnce) {
    Pki pki;
    Apiserver a(pki, "a");
    Kprism k({a.addr()}, flags(pki, {"--health-interval", "1s", "--health-timeout", "500ms", "--health-fast-interval",
                                     "200ms"}));
    ASSERT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + a.addr()));
    ASSERT_TRUE(eventually([&] { return readyz(a) >= 2; }, 5000ms));
    a.proc->signal(SIGSTOP);
    ASSERT_TRUE(k.wait_output("msg=\"upstream down\" upstream=" + a.addr() +
                                  " was=up reason=\"timeout: no response on the kept connection (request acknowledged)",
                              3000ms))
        << k.output();
    EXPECT_EQ(k.count_output("msg=\"health check failed\""), 0u) << "down at the first: " << k.output();
    a.proc->signal(SIGCONT);
    EXPECT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + a.addr() + " was=down", 5000ms)) << k.output();
}

// A rotated client certificate is presented from the next probe: the kept connection, made with
// the old one, is not reused.
TEST(ProbeKeepalive, RotationOpensANewConnection) {
    Pki pki;
    Apiserver a(pki, "a");
    std::string cert = pki.dir + "/rotating.pem";
    pki.issue_client(cert, "system:node:before");
    Kprism k({a.addr()}, {"--client-cert", cert, "--client-key", cert, "--ca-file", pki.ca_cert, "--health-interval",
                          "400ms", "--health-timeout", "350ms", "--health-fast-interval", "100ms"});
    ASSERT_TRUE(a.proc->wait_output("handshake resumed=0 peer=\"system:node:before\""));
    ASSERT_TRUE(eventually([&] { return readyz(a) >= 3; }));
    EXPECT_EQ(handshakes(a), 1u);
    pki.issue_client(cert, "system:node:after");
    EXPECT_TRUE(a.proc->wait_output("handshake resumed=0 peer=\"system:node:after\"", 5000ms)) << a.proc->output();
    size_t n = readyz(a);
    ASSERT_TRUE(eventually([&] { return readyz(a) >= n + 3; }));
    EXPECT_EQ(handshakes(a), 2u) << "the new connection is kept in turn: " << a.proc->output();
}

// The kept connection closing as a probe goes out, before a byte of the answer, is not the
// apiserver's answer: the probe moves to a new connection, once, and that one's result counts.
// The stand-in in "close" mode ends a kept connection when it reads the /readyz on it, and a new
// one right after its TLS handshake.
TEST(ProbeKeepalive, ClosedBeforeAnAnswerMovesToANewConnectionOnce) {
    Pki pki;
    Apiserver a(pki, "a");
    Kprism k({a.addr()}, flags(pki, {"--health-interval", "2s", "--health-timeout", "1s", "--health-fast-interval",
                                     "2s"}));
    ASSERT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + a.addr()));
    ASSERT_TRUE(eventually([&] { return readyz(a) >= 1; }, 5000ms));
    EXPECT_EQ(handshakes(a), 1u);
    a.set("close");
    // The new connection's reset (not_ready) or close without close_notify (tls_failed).
    ASSERT_TRUE(k.wait_output("msg=\"health check failed\" upstream=" + a.addr() + " result=", 5000ms))
        << k.output();
    EXPECT_EQ(a.proc->count_output("request path=/readyz status=close"), 1u) << "the kept one: " << a.proc->output();
    // The stand-in's lines are read from its pipe: allow them a moment (the next probe is 2 s away).
    EXPECT_TRUE(eventually([&] { return handshakes(a) == 2; }, 1000ms)) << "then one new one: " << a.proc->output();
    EXPECT_EQ(metric(k, "kprism_health_check_connections_ended_total", a.addr()), 1);
    EXPECT_EQ(k.count_output("msg=\"health check failed\""), 1u) << "one probe, one result";
    a.set("200");
}

// A probe that timed out after its handshake leaves the TLS session resumable: the next probe
// of a struggling apiserver costs it no full handshake.
TEST(ProbeKeepalive, TimeoutAfterTheHandshakeKeepsTheSession) {
    Pki pki;
    Apiserver a(pki, "a");
    Kprism k({a.addr()}, flags(pki, {"--health-interval", "1s", "--health-timeout", "300ms", "--health-fast-interval",
                                     "500ms", "--health-new-connection-interval", "0"}));
    ASSERT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + a.addr()));
    a.set("slow 600");
    ASSERT_TRUE(eventually([&] { return a.proc->count_output("handshake resumed=") >= 5; }, 10000ms));
    EXPECT_EQ(a.proc->count_output("handshake resumed=0"), 1u) << a.proc->output();
    EXPECT_TRUE(k.wait_output("msg=\"upstream down\" upstream=" + a.addr() + " was=up reason=\"timeout:"))
        << "the probes did time out: " << k.output();
}
