// SPDX-License-Identifier: Apache-2.0
// The failing check names of a /readyz body: kube-apiserver's forms, the bounds, hostile bodies,
// and a 10 MiB body through the probe's own response parser.
#include <gtest/gtest.h>

#include <cstring>

#include "kprism/upstreams/health_check.h"
#include "kprism/upstreams/http_response.h"
#include "kprism/upstreams/readyz_body.h"

using namespace kprism;

namespace {
std::vector<std::string> names(std::string_view body) { return parse_readyz_body(body).names; }
}  // namespace

TEST(ReadyzBody, KubeApiserverFailingBody) {
    // k8s.io/apiserver pkg/server/healthz/healthz.go, verbose output of a failing /readyz.
    FailingChecks c = parse_readyz_body(
        "[+]ping ok\n[+]log ok\n[-]etcd failed: reason withheld\n[+]etcd-readiness ok\n"
        "[+]informer-sync ok\n[+]poststarthook/start-apiextensions-informers ok\n"
        "[-]shutdown failed: reason withheld\nreadyz check failed\n");
    EXPECT_EQ(c.names, (std::vector<std::string>{"etcd", "shutdown"}));
    EXPECT_EQ(c.more, 0u);
    EXPECT_TRUE(c.etcd());
    EXPECT_EQ(c.str(), "etcd,shutdown");
    EXPECT_EQ(down_reason_of_checks(c), DownReason::shutdown) << "shutdown wins over etcd";
}

TEST(ReadyzBody, PassingExcludedAndOtherLinesNameNothing) {
    EXPECT_TRUE(parse_readyz_body("[+]ping ok\n[+]log ok\n[+]etcd ok\nok\n").empty());
    EXPECT_TRUE(parse_readyz_body("[+]etcd excluded: ok\n[+]shutdown excluded: ok\nok\n").empty());
    EXPECT_TRUE(parse_readyz_body("").empty());
    EXPECT_TRUE(parse_readyz_body("readyz status 503\n").empty());
    EXPECT_TRUE(parse_readyz_body("{\"kind\":\"Status\",\"message\":\"[-]etcd\"}").empty()) << "not at a line start";
    EXPECT_EQ(down_reason_of_checks(parse_readyz_body("")), DownReason::other);
}

TEST(ReadyzBody, CrLfNamesWithSlashesAndNoReason) {
    EXPECT_EQ(names("[-]poststarthook/rbac/bootstrap-roles failed: x\r\n[-]etcd-readiness\r\n[-]informer-sync"),
              (std::vector<std::string>{"poststarthook/rbac/bootstrap-roles", "etcd-readiness", "informer-sync"}));
    FailingChecks c = parse_readyz_body("[-]etcd-readiness failed\n");
    EXPECT_TRUE(c.etcd());
    EXPECT_EQ(down_reason_of_checks(c), DownReason::etcd);
    EXPECT_EQ(down_reason_of_checks(parse_readyz_body("[-]informer-sync failed\n")), DownReason::other);
}

TEST(ReadyzBody, ThousandCheckLinesKeepEightAndCountTheRest) {
    std::string body;
    for (int i = 0; i < 1000; ++i) body += "[-]check" + std::to_string(i) + " failed: reason withheld\n";
    ASSERT_GT(body.size(), kReadyzBodyMax);
    FailingChecks c = parse_readyz_body(body);
    ASSERT_EQ(c.names.size(), FailingChecks::kMaxNames);
    EXPECT_EQ(c.names[0], "check0");
    EXPECT_EQ(c.names[7], "check7");
    // Only the first kReadyzBodyMax bytes are looked at: the lines that start within them.
    size_t lines_within = 0;
    for (size_t at = 0; at < kReadyzBodyMax; at = body.find('\n', at) + 1) ++lines_within;
    EXPECT_EQ(c.more, lines_within - FailingChecks::kMaxNames);
    EXPECT_EQ(c.str(), "check0,check1,check2,check3,check4,check5,check6,check7,+" + std::to_string(c.more) + " more");
}

TEST(ReadyzBody, RepeatsCountOnce) {
    FailingChecks c = parse_readyz_body("[-]etcd failed\n[-]etcd failed\n[-]etcd failed\n");
    EXPECT_EQ(c.names, (std::vector<std::string>{"etcd"}));
    EXPECT_EQ(c.more, 0u);
}

TEST(ReadyzBody, BadNamesAreCountedNotKept) {
    std::string long_name(FailingChecks::kMaxNameLen + 1, 'a');
    std::string max_name(FailingChecks::kMaxNameLen, 'b');
    FailingChecks c = parse_readyz_body("[-]" + long_name + " failed\n[-]" + max_name + " failed\n[-]et\"cd failed\n" +
                                        "[-]x=y failed\n[-] failed\n[-]\n[-]caf\xc3\xa9 failed\n");
    EXPECT_EQ(c.names, (std::vector<std::string>{max_name}));
    EXPECT_EQ(c.more, 6u);
    EXPECT_EQ(c.str(), max_name + ",+6 more");
    EXPECT_EQ(parse_readyz_body("[-]" + long_name).str(), "+1 more");
}

TEST(ReadyzBody, BinaryGarbage) {
    std::string junk;
    uint32_t x = 12345;
    for (int i = 0; i < 20000; ++i) {
        x = x * 1103515245 + 12345;
        junk += static_cast<char>(x >> 24);
    }
    junk += std::string("\n[-]\0\xff\x01 failed\n", 14);
    FailingChecks c = parse_readyz_body(junk);
    EXPECT_LE(c.names.size(), FailingChecks::kMaxNames);
    for (const auto& n : c.names) {
        EXPECT_LE(n.size(), FailingChecks::kMaxNameLen);
        for (char ch : n) EXPECT_TRUE(isalnum(static_cast<unsigned char>(ch)) || strchr("/_.-", ch)) << n;
    }
    std::string nul_name("[-]et\0cd failed\n", 16);
    EXPECT_EQ(parse_readyz_body(nul_name).str(), "+1 more");
}

// The probe's parser stops after kReadyzBodyMax body bytes of a 10 MiB body: never buffered.
TEST(ReadyzBody, TenMebibyteBodyThroughTheProbeParser) {
    HttpResponseParser p(kProbeResponseMax, kReadyzBodyMax);
    constexpr size_t kTen = 10u << 20;
    std::string head = "HTTP/1.1 500 Internal Server Error\r\nContent-Length: " + std::to_string(kTen) + "\r\n\r\n";
    ASSERT_EQ(p.feed(head.data(), head.size()), HttpResponseParser::State::need_more);
    std::string chunk;
    chunk += "[-]etcd failed: reason withheld\n[-]shutdown failed: reason withheld\n";
    while (chunk.size() < 16384) chunk += "[-]etcd failed: reason withheld\n";
    size_t fed = 0;
    HttpResponseParser::State st = HttpResponseParser::State::need_more;
    while (fed < kTen && st == HttpResponseParser::State::need_more) {
        st = p.feed(chunk.data(), chunk.size());
        fed += chunk.size();
    }
    EXPECT_EQ(st, HttpResponseParser::State::done);
    EXPECT_LE(fed, 2 * chunk.size()) << "done long before the end of the body";
    EXPECT_LE(p.buffered(), kProbeResponseMax);
    FailingChecks c = parse_readyz_body(p.body());
    EXPECT_EQ(c.names, (std::vector<std::string>{"etcd", "shutdown"}));
    EXPECT_LE(c.more, 1u) << "at most the line cut at the bound";
}
