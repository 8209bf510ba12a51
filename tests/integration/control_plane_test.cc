// SPDX-License-Identifier: Apache-2.0
// Control-plane awareness through the real binary against TLS stand-ins: why an
// upstream is out (its /readyz failing checks in the log, /status, `kprism status` and
// /metrics), bad /readyz bodies, an upstream closing many connections at once (checked at once),
// and etcd lost on every apiserver at the same moment (one event, nothing closed).
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <thread>

#include "harness/apiserver.h"
#include "harness/harness.h"
#include "harness/pki.h"

using namespace it;

namespace {

std::vector<std::string> tls_flags(const Pki& pki, std::vector<std::string> more = {}) {
    std::vector<std::string> a = {"--client-cert",   pki.client_pem, "--client-key",      pki.client_pem,
                                  "--ca-file",       pki.ca_cert,    "--health-interval", "1s",
                                  "--health-timeout", "500ms",       "--health-fast-interval", "200ms"};
    a.insert(a.end(), more.begin(), more.end());
    return a;
}

const std::string kEtcdAndShutdown =
    "body 500\n[+]ping ok\n[+]log ok\n[-]etcd failed: reason withheld\n[+]etcd-readiness ok\n"
    "[-]shutdown failed: reason withheld\nreadyz check failed";
const std::string kEtcdLost =
    "body 500\n[+]ping ok\n[+]log ok\n[-]etcd failed: reason withheld\n[-]etcd-readiness failed: reason withheld\n"
    "[+]shutdown ok\nreadyz check failed";

// kube-apiserver's failing /readyz with `hooks` more post-start hooks: past 2048 bytes, so Go's
// net/http sends it chunked.
std::string etcd_lost_long(int hooks) {
    std::string b = "[+]ping ok\n[+]log ok\n[-]etcd failed: reason withheld\n[-]etcd-readiness failed: reason withheld\n";
    for (int i = 1; i <= hooks; ++i) b += "[+]poststarthook/extra-" + std::to_string(i) + " ok\n";
    return b + "[+]shutdown ok\nreadyz check failed\n";
}

}  // namespace

// A failing /readyz sent chunked (and after a 103 Early Hints) is read to its last chunk: the 500
// and its failing checks count, not the health timeout the unended body would run into.
TEST(ControlPlane, ChunkedFailuresAreReadAndDeclareNoEtcdQuorum) {
    Pki pki;
    Apiserver a(pki, "a"), b(pki, "b");
    Kprism k({a.addr(), b.addr()}, tls_flags(pki, {"--health-timeout", "900ms"}));
    for (auto* s : {&a, &b}) ASSERT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + s->addr()));
    const std::string body = etcd_lost_long(160);
    ASSERT_GT(body.size(), 4096u);  // more than one 2048-byte chunk
    a.set("body 500 chunked\n" + body);
    b.set("body 500 hints chunked\n" + body);
    ASSERT_TRUE(k.wait_output("msg=\"control plane has no etcd quorum", 8000ms)) << k.output();
    for (auto* s : {&a, &b})
        EXPECT_NE(k.output().find("msg=\"upstream down\" upstream=" + s->addr() +
                                  " was=up reason=\"not_ready: etcd,etcd-readiness\""),
                  std::string::npos)
            << k.output();
    std::string status = body_of(http_get(k.admin_port, "/status"));
    EXPECT_NE(status.find(R"("condition":"no-etcd-quorum")"), std::string::npos) << status;
    size_t at = 0;
    for (int n = 0; n < 2; ++n, ++at) {
        at = status.find(R"("last_result":"not_ready")", at);
        ASSERT_NE(at, std::string::npos) << status;
    }
    EXPECT_EQ(status.find(R"("last_result":"timeout")"), std::string::npos) << status;
    for (int n = 0; n < 2; ++n) {
        at = n == 0 ? status.find(R"("down_reason":"etcd")") : status.find(R"("down_reason":"etcd")", at + 1);
        ASSERT_NE(at, std::string::npos) << status;
    }
    std::string metrics = body_of(http_get(k.admin_port, "/metrics"));
    EXPECT_NE(metrics.find("\nkprism_etcd_quorum_lost 1\n"), std::string::npos) << metrics;
    for (auto* s : {&a, &b}) {
        EXPECT_NE(metrics.find("kprism_upstream_down_reason{upstream=\"" + s->addr() + "\",reason=\"etcd\"} 1\n"),
                  std::string::npos)
            << metrics;
        EXPECT_NE(metrics.find("kprism_health_checks_total{upstream=\"" + s->addr() + "\",result=\"timeout\"} 0\n"),
                  std::string::npos)
            << metrics;
    }
}

// The failing checks become the reason: in the "upstream down" line, /status, `kprism status`
// and the bounded down-reason metric.
TEST(ControlPlane, FailingChecksAreTheReason) {
    Pki pki;
    Apiserver a(pki, "a"), b(pki, "b");
    Kprism k({a.addr(), b.addr()}, tls_flags(pki));
    ASSERT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + a.addr()));
    ASSERT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + b.addr()));
    a.set(kEtcdAndShutdown);
    ASSERT_TRUE(k.wait_output("msg=\"upstream down\" upstream=" + a.addr() + " was=up reason=\"not_ready: etcd,shutdown\"",
                              8000ms))
        << k.output();
    std::string status = body_of(http_get(k.admin_port, "/status"));
    EXPECT_NE(status.find(R"("failing_checks":["etcd","shutdown"],"failing_checks_more":0,"down_reason":"shutdown")"),
              std::string::npos)
        << status;
    EXPECT_NE(status.find(R"("failing_checks":[],"failing_checks_more":0,"down_reason":null)"), std::string::npos)
        << "b is up: " << status;
    std::string metrics = body_of(http_get(k.admin_port, "/metrics"));
    EXPECT_NE(metrics.find("kprism_upstream_down_reason{upstream=\"" + a.addr() + "\",reason=\"shutdown\"} 1\n"),
              std::string::npos)
        << metrics;
    EXPECT_NE(metrics.find("kprism_upstream_down_reason{upstream=\"" + a.addr() + "\",reason=\"etcd\"} 0\n"),
              std::string::npos);
    EXPECT_NE(metrics.find("kprism_upstream_down_reason{upstream=\"" + b.addr() + "\",reason=\"shutdown\"} 0\n"),
              std::string::npos);
    auto st = run({kprism_bin(), "status", "--health-port", std::to_string(k.admin_port)});
    EXPECT_EQ(st.code, 0) << st.output;
    EXPECT_NE(st.output.find("CHECKS"), std::string::npos) << st.output;
    EXPECT_NE(st.output.find(" etcd,shutdown "), std::string::npos) << st.output;
    // A plain 503 without check lines: reason "other", no names.
    a.set("503");
    ASSERT_TRUE(eventually([&] {
        return body_of(http_get(k.admin_port, "/metrics"))
                   .find("kprism_upstream_down_reason{upstream=\"" + a.addr() + "\",reason=\"other\"} 1\n") !=
               std::string::npos;
    }));
    a.set("200");
    ASSERT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + a.addr() + " was=down", 8000ms));
    status = body_of(http_get(k.admin_port, "/status"));
    EXPECT_EQ(status.find("\"down_reason\":\""), std::string::npos) << "nothing down: " << status;
}

// Hostile /readyz bodies: a thousand check lines, binary garbage, 10 MiB. Each is read within its
// bounds (at most 8 names of the allowed form, the rest counted), and kprism carries on.
TEST(ControlPlane, BadReadyzBodiesStayBounded) {
    Pki pki;
    Apiserver a(pki, "a"), b(pki, "b");
    Kprism k({a.addr(), b.addr()}, tls_flags(pki));
    ASSERT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + a.addr()));
    std::string thousand = "body 500\n";
    for (int i = 0; i < 1000; ++i) thousand += "[-]check" + std::to_string(i) + " failed: reason withheld\n";
    a.set(thousand);
    ASSERT_TRUE(k.wait_output("reason=\"not_ready: check0,check1,check2,check3,check4,check5,check6,check7,+", 8000ms))
        << k.output();
    std::string status = body_of(http_get(k.admin_port, "/status"));
    EXPECT_NE(status.find(R"("failing_checks":["check0","check1","check2","check3","check4","check5","check6","check7"],)"),
              std::string::npos)
        << status;
    EXPECT_EQ(status.find("check8\""), std::string::npos);

    std::string garbage = "body 500\n";
    uint32_t x = 7;
    for (int i = 0; i < 4000; ++i) {
        x = x * 1103515245 + 12345;
        char c = static_cast<char>(x >> 24);
        garbage += c;
    }
    garbage += "\n[-]et\"c\\d\x01 failed\n[-]ok-name failed\n";
    a.set(garbage);
    ASSERT_TRUE(eventually([&] {
        return body_of(http_get(k.admin_port, "/status")).find(R"("failing_checks":["ok-name"])") != std::string::npos;
    }, 8000ms)) << body_of(http_get(k.admin_port, "/status"));

    a.set("huge500");  // 10 MiB of "[-]etcd failed" lines
    ASSERT_TRUE(eventually([&] {
        return body_of(http_get(k.admin_port, "/status")).find(R"("failing_checks":["etcd"])") != std::string::npos;
    }, 8000ms)) << body_of(http_get(k.admin_port, "/status"));
    EXPECT_TRUE(k.running());
    a.set("200");
    ASSERT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + a.addr() + " was=down", 8000ms));
}

namespace {

const std::string kBurstLine = "msg=\"upstream closed many connections at once: checking it now\"";

// Raw client connections through kprism that send nothing (the stand-in waits in its TLS
// handshake): established splices, none awaiting a replay.
std::vector<int> hold_clients(Kprism& k, int n) {
    long before = k.stat("connections_active");
    std::vector<int> fds;
    for (int i = 0; i < n; ++i) fds.push_back(connect_to(k.port));
    EXPECT_TRUE(eventually([&] { return k.stat("connections_active") == before + n; }));
    return fds;
}

size_t readyz_requests(const Apiserver& a) { return a.proc->count_output("request path=/readyz"); }

// One HTTPS request through kprism with the kubelet's certificate; the stand-in that served it.
std::string served_by(const Pki& pki, int port) {
    auto r = run({"/usr/bin/curl", "-sS", "--cacert", pki.ca_cert, "--cert", pki.client_pem, "--key", pki.client_pem,
                  "--connect-timeout", "5", "--max-time", "10", "https://127.0.0.1:" + std::to_string(port) + "/"},
                 15000ms);
    auto p = r.output.find("served by ");
    if (r.code != 0 || p == std::string::npos) return "";
    return r.output.substr(p + 10, r.output.find(' ', p + 10) - p - 10);
}

}  // namespace

// Clients closing their own connections, many at once, are no signal; the apiserver closing
// many of kprism's established connections within a second is: it is checked at once.
TEST(ControlPlane, UpstreamCloseBurstChecksAtOnce) {
    Pki pki;
    Apiserver a(pki, "a");
    // A long interval, so a check within a second of the burst is the burst's.
    Kprism k({a.addr()}, tls_flags(pki, {"--health-interval", "20s", "--health-fast-interval", "5s",
                                         "--health-timeout", "1s"}));
    ASSERT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + a.addr()));
    ASSERT_TRUE(eventually([&] { return readyz_requests(a) >= 1; }));

    std::vector<int> mine = hold_clients(k, 5);
    std::this_thread::sleep_for(1200ms);  // older than the minimum age
    size_t checks = readyz_requests(a);
    for (int fd : mine) ::close(fd);
    ASSERT_TRUE(eventually([&] { return k.stat("connections_active") == 0; }));
    std::this_thread::sleep_for(700ms);
    EXPECT_EQ(k.count_output(kBurstLine), 0u) << "client closes are no signal: " << k.output();
    EXPECT_EQ(readyz_requests(a), checks) << "no extra check";

    std::vector<int> held = hold_clients(k, 5);
    std::this_thread::sleep_for(1200ms);
    checks = readyz_requests(a);
    a.proc->signal(SIGUSR1);  // the stand-in ends every connection it serves at once
    ASSERT_TRUE(k.wait_output(kBurstLine + " upstream=" + a.addr(), 3000ms)) << k.output();
    EXPECT_TRUE(eventually([&] { return readyz_requests(a) > checks; }, 1000ms)) << "checked at once";
    EXPECT_EQ(k.count_output(kBurstLine), 1u) << "one check for one burst";
    std::string metrics = body_of(http_get(k.admin_port, "/metrics"));
    EXPECT_NE(metrics.find("kprism_upstream_close_bursts_total{upstream=\"" + a.addr() + "\"} 1\n"), std::string::npos)
        << metrics;
    for (int fd : held) ::close(fd);
}

// A connection moved to an apiserver after its first choice stayed silent is young there, however
// long ago the client connected: many such, closed by that apiserver after one request
// ("Connection: close"), are no burst (the faults suite's drop-replies saw one per run).
TEST(ControlPlane, ReplayedConnectionsClosedAfterOneRequestAreNoBurst) {
    Pki pki;
    Apiserver a(pki, "a"), b(pki, "b");
    char tmpl[] = "/tmp/kprism-burst-XXXXXX";
    int fd = mkstemp(tmpl);
    std::string toml = "endpoints = [ { address = \"" + a.addr() + "\", zone = \"z1\" }, { address = \"" +
                       b.addr() + "\", zone = \"z2\" } ]\nzone = \"z1\"\n";
    ASSERT_EQ(::write(fd, toml.data(), toml.size()), static_cast<ssize_t>(toml.size()));
    ::close(fd);
    // A long interval: a stays up while it is stopped, so every new connection picks it first.
    Kprism k({}, tls_flags(pki, {"--config", tmpl, "--health-interval", "30s", "--health-fast-interval", "10s",
                                 "--first-response-timeout", "1200ms"}));
    unlink(tmpl);
    ASSERT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + a.addr()));
    ASSERT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + b.addr()));
    a.proc->signal(SIGSTOP);  // accepts (the kernel does), never answers
    std::vector<std::string> by(6);
    std::vector<std::thread> clients;
    for (size_t i = 0; i < by.size(); ++i)
        clients.emplace_back([&, i] {
            auto r = run({"/usr/bin/curl", "-sS", "-H", "Connection: close", "--cacert", pki.ca_cert, "--cert",
                          pki.client_pem, "--key", pki.client_pem, "--max-time", "10",
                          "https://127.0.0.1:" + std::to_string(k.port) + "/"},
                         15000ms);
            by[i] = r.output;
        });
    for (auto& t : clients) t.join();
    a.proc->signal(SIGCONT);
    for (const auto& out : by) EXPECT_NE(out.find("served by b "), std::string::npos) << out;
    EXPECT_GE(k.stat("replayed"), 3) << k.output();
    ASSERT_TRUE(eventually([&] { return k.stat("connections_active") == 0; }));
    EXPECT_EQ(k.count_output(kBurstLine), 0u) << k.output();
}

// Scenario 3: etcd lost on all three apiservers at the same moment, then back. One quorum event
// and its end, no connection closed by kprism, fail-open meanwhile; the first ready apiserver
// gets new connections at once.
TEST(ControlPlane, EtcdLostEverywhereIsOneEventAndClosesNothing) {
    Pki pki;
    Apiserver a(pki, "a"), b(pki, "b"), c(pki, "c");
    Kprism k({a.addr(), b.addr(), c.addr()},
             tls_flags(pki, {"--policy", "least-connections", "--close-spread", "200ms"}));
    for (auto* s : {&a, &b, &c}) ASSERT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + s->addr()));
    std::vector<int> held = hold_clients(k, 9);

    for (auto* s : {&a, &b, &c}) s->set(kEtcdLost);
    ASSERT_TRUE(k.wait_output("msg=\"control plane has no etcd quorum", 8000ms)) << k.output();
    std::this_thread::sleep_for(1500ms);  // past every hold and close_spread
    EXPECT_EQ(k.count_output("msg=\"control plane has no etcd quorum"), 1u);
    for (auto* s : {&a, &b, &c})
        EXPECT_NE(k.output().find("msg=\"upstream down\" upstream=" + s->addr() +
                                  " was=up reason=\"not_ready: etcd,etcd-readiness\""),
                  std::string::npos);
    std::string metrics = body_of(http_get(k.admin_port, "/metrics"));
    EXPECT_NE(metrics.find("\nkprism_connections_closed_upstream_down_total 0\n"), std::string::npos) << metrics;
    EXPECT_NE(metrics.find("\nkprism_etcd_quorum_lost 1\n"), std::string::npos);
    EXPECT_NE(body_of(http_get(k.admin_port, "/status")).find(R"("condition":"no-etcd-quorum")"), std::string::npos);
    auto st = run({kprism_bin(), "status", "--health-port", std::to_string(k.admin_port)});
    EXPECT_NE(st.output.find(", no etcd quorum"), std::string::npos) << st.output;
    int open = 0;
    for (int fd : held) open += still_open(fd);
    EXPECT_EQ(open, 9) << "kprism closed nothing: " << k.output();
    EXPECT_NE(served_by(pki, k.port), "") << "fail-open: still served";

    a.set("200");
    b.set("200");
    c.set("200");
    ASSERT_TRUE(k.wait_output("msg=\"control plane has etcd quorum again: an apiserver is ready\"", 8000ms))
        << k.output();
    for (auto* s : {&a, &b, &c}) ASSERT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + s->addr() + " was=down", 8000ms));
    metrics = body_of(http_get(k.admin_port, "/metrics"));
    EXPECT_NE(metrics.find("\nkprism_etcd_quorum_lost 0\n"), std::string::npos);
    EXPECT_EQ(k.count_output("msg=\"control plane has no etcd quorum"), 1u);
    EXPECT_EQ(k.count_output("msg=\"control plane has etcd quorum again"), 1u);
    EXPECT_EQ(body_of(http_get(k.admin_port, "/status")).find("no-etcd-quorum"), std::string::npos);
    for (int fd : held) ::close(fd);
}

namespace {

// Established connections on `addr` as /status shows them; -1 if it is not listed.
long active_on(const Kprism& k, const std::string& addr) {
    std::string st = body_of(http_get(k.admin_port, "/status"));
    size_t at = st.find("\"address\":\"" + addr + "\"");
    if (at == std::string::npos) return -1;
    size_t end = st.find('}', at), from = st.rfind('{', at);
    size_t n = st.find("\"active_connections\":", from);
    if (n == std::string::npos || n > end) return -1;
    return std::strtol(st.c_str() + n + 21, nullptr, 10);
}

int count_open(const std::vector<int>& fds) {
    int open = 0;
    for (int fd : fds) open += still_open(fd);
    return open;
}

const std::string kPlain503 = "body 503\n[+]ping ok\n[-]poststarthook/rbac failed: reason withheld\nreadyz check failed";

// A is down; B, the last one up, takes 12 connections and goes down `b_down` (its closes held:
// nothing else is up); then A comes back while B stays down. B's connections must move within
// close_spread (500ms) of A being up, plus a margin for the checks and the loop.
void stranded_on_b(const std::string& b_down, const std::string& b_reason) {
    Pki pki;
    Apiserver a(pki, "a"), b(pki, "b");
    Kprism k({a.addr(), b.addr()}, tls_flags(pki, {"--close-spread", "500ms"}));
    for (auto* s : {&a, &b}) ASSERT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + s->addr()));
    a.set(kPlain503);
    ASSERT_TRUE(k.wait_output("msg=\"upstream down\" upstream=" + a.addr(), 8000ms)) << k.output();
    std::vector<int> held = hold_clients(k, 12);
    ASSERT_EQ(active_on(k, b.addr()), 12);
    b.set(b_down);
    ASSERT_TRUE(k.wait_output("msg=\"upstream down\" upstream=" + b.addr() + " was=up reason=\"" + b_reason, 8000ms))
        << k.output();
    EXPECT_TRUE(k.wait_output("msg=\"not closing connections of the down upstream\" upstream=" + b.addr() +
                              " connections=12 reason=\"no other upstream is up\"", 3000ms))
        << k.output();
    EXPECT_EQ(count_open(held), 12) << "held while nothing else is up";
    a.set("200");
    ASSERT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + a.addr() + " was=down", 8000ms)) << k.output();
    const auto up_at = Clock::now();
    EXPECT_TRUE(eventually([&] { return active_on(k, b.addr()) == 0; }, 500ms + 2500ms))
        << active_on(k, b.addr()) << " connections still on the down upstream B\n" << k.output();
    ::testing::Test::RecordProperty("moved_ms", static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                    Clock::now() - up_at).count()));
    EXPECT_TRUE(eventually([&] { return count_open(held) == 0; }, 1000ms));
    EXPECT_EQ(k.stat("closed_for_down"), 12);
    EXPECT_NE(k.output().find("msg=\"closing connections of the down upstream\" upstream=" + b.addr() + " connections=12"),
              std::string::npos)
        << k.output();
    for (int fd : held) ::close(fd);
}

}  // namespace

// The connections of an upstream that went down while it was the last one up are held (there
// was nowhere to go), and moved once another is up although it stays down: a 503, and etcd lost.
TEST(ControlPlane, StrandedOnDown503MoveOnceAnotherIsUp) { stranded_on_b(kPlain503, "not_ready: poststarthook/rbac"); }
TEST(ControlPlane, StrandedOnDownEtcdMoveOnceAnotherIsUp) { stranded_on_b(kEtcdLost, "not_ready: etcd,etcd-readiness"); }

// Two upstreams going down at about the same time are two batches of closes; together they keep
// the one pace of 100 closes a second (a close at least 10 ms after the one before), not 100 a
// second each.
TEST(ControlPlane, ClosesForDownKeepOnePaceAcrossBatches) {
    Pki pki;
    Apiserver a(pki, "a"), b(pki, "b"), c(pki, "c");
    Kprism k({a.addr(), b.addr(), c.addr()},
             tls_flags(pki, {"--policy", "least-connections", "--close-spread", "100ms", "--max-connections", "2000"}));
    for (auto* s : {&a, &b, &c}) ASSERT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + s->addr()));
    std::vector<int> held = hold_clients(k, 240);
    const long on_a = active_on(k, a.addr()), moving = active_on(k, b.addr()) + active_on(k, c.addr());
    ASSERT_GE(moving, 150) << on_a;
    b.set(kPlain503);
    c.set(kPlain503);
    ASSERT_TRUE(eventually([&] { return count_open(held) < 240; }, 8000ms)) << k.output();
    const auto first = Clock::now();
    ASSERT_TRUE(eventually([&] { return count_open(held) == on_a; }, 10000ms)) << k.output();
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - first).count();
    // At 10 ms apart, the last close comes (moving - 1) x 10 ms after the first, less the poll's slack.
    EXPECT_GE(took, (moving - 1) * 10 - 150) << moving << " closes\n" << k.output();
    EXPECT_EQ(k.count_output("msg=\"closing connections of the down upstream\""), 2u) << k.output();
    for (int fd : held) ::close(fd);
}

// No etcd quorum anywhere (nothing closed), then one apiserver is ready again while the others
// stay without etcd: the episode ends and the connections on the still-down ones move.
TEST(ControlPlane, QuorumBackMovesTheConnectionsOfTheStillDown) {
    Pki pki;
    Apiserver a(pki, "a"), b(pki, "b"), c(pki, "c");
    Kprism k({a.addr(), b.addr(), c.addr()},
             tls_flags(pki, {"--policy", "least-connections", "--close-spread", "500ms"}));
    for (auto* s : {&a, &b, &c}) ASSERT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + s->addr()));
    std::vector<int> held = hold_clients(k, 9);
    for (auto* s : {&a, &b, &c}) ASSERT_EQ(active_on(k, s->addr()), 3);
    for (auto* s : {&a, &b, &c}) s->set(kEtcdLost);
    ASSERT_TRUE(k.wait_output("msg=\"control plane has no etcd quorum", 8000ms)) << k.output();
    EXPECT_TRUE(k.wait_output("msg=\"not closing connections of the down upstream\" upstream=" + b.addr() +
                              " connections=3 reason=\"no etcd quorum\"", 3000ms))
        << k.output();
    EXPECT_EQ(count_open(held), 9);
    a.set("200");
    ASSERT_TRUE(k.wait_output("msg=\"control plane has etcd quorum again: an apiserver is ready\" upstream=" + a.addr(),
                              8000ms))
        << k.output();
    EXPECT_TRUE(eventually([&] { return active_on(k, b.addr()) == 0 && active_on(k, c.addr()) == 0; }, 3000ms))
        << "b " << active_on(k, b.addr()) << ", c " << active_on(k, c.addr()) << "\n" << k.output();
    EXPECT_TRUE(eventually([&] { return count_open(held) == 3; }, 1000ms));
    EXPECT_EQ(active_on(k, a.addr()), 3) << "the ready one's connections stay";
    EXPECT_EQ(k.stat("closed_for_down"), 6);
    EXPECT_EQ(k.count_output("msg=\"control plane has no etcd quorum"), 1u);
    for (int fd : held) ::close(fd);
}

// etcd lost on one apiserver only: the hold ends as soon as the others have answered, and its
// connections are closed as before (no quorum event).
TEST(ControlPlane, EtcdLostOnOneClosesItsConnections) {
    Pki pki;
    Apiserver a(pki, "a"), b(pki, "b");
    Kprism k({a.addr(), b.addr()}, tls_flags(pki, {"--policy", "least-connections", "--close-spread", "200ms"}));
    for (auto* s : {&a, &b}) ASSERT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + s->addr()));
    std::vector<int> held = hold_clients(k, 6);
    a.set(kEtcdLost);
    ASSERT_TRUE(k.wait_output("msg=\"closing connections of the down upstream\" upstream=" + a.addr(), 8000ms))
        << k.output();
    EXPECT_TRUE(eventually([&] { return k.stat("closed_for_down") == 3; }, 3000ms));
    EXPECT_EQ(k.count_output("no etcd quorum"), 0u);
    int open = 0;
    for (int fd : held) open += still_open(fd);
    EXPECT_EQ(open, 3);
    for (int fd : held) ::close(fd);
}
