// SPDX-License-Identifier: Apache-2.0
// /metrics rendering: every family of kMetricFamilies once, in order, with HELP and TYPE (and
// tests/monitoring/metric-families.txt the same list), label escaping, cumulative histogram
// buckets, omitted samples; and the heartbeat verdict behind /healthz.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <fstream>
#include <set>
#include <sstream>

#include "kprism/admin/metric_families.h"
#include "kprism/admin/metrics.h"
#include "kprism/daemon/heartbeat.h"

using namespace kprism;

namespace {

Upstream make_upstream(const std::string& name) {
    Upstream u;
    u.name = name;
    return u;
}

StateView view_of(const std::vector<const Upstream*>& ups) {
    StateView s;
    s.version = "1.2.3";
    s.upstreams = ups;
    return s;
}

std::vector<std::string> lines(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
}

bool has_line(const std::string& text, const std::string& line) {
    for (const auto& l : lines(text))
        if (l == line) return true;
    return false;
}

}  // namespace

// /metrics is kMetricFamilies: each row's HELP and TYPE lines once, in the table's order, and
// no other family (FamiliesAreContiguous: every sample belongs to the family above it).
TEST(Metrics, EveryFamilyOfTheTableOnceInOrder) {
    Upstream a = make_upstream("10.0.0.1:6443");
    for (bool enabled : {false, true}) {
        StateView s = view_of({&a});
        s.discovery.enabled = enabled;
        std::string out = render_metrics(s);
        std::vector<std::string> headers, want;
        for (const auto& l : lines(out))
            if (l.rfind("#", 0) == 0) headers.push_back(l);
        for (const MetricFamily& f : kMetricFamilies) {
            want.push_back(fmt::format("# HELP {} {}", f.name, f.help));
            want.push_back(fmt::format("# TYPE {} {}", f.name, f.type));
        }
        EXPECT_EQ(headers, want) << out;
        EXPECT_EQ(out.back(), '\n');
    }
}

// The list the monitoring rules are tested against (tests/monitoring/run.sh reads it) is the
// table's: "name type" per family, in its order.
TEST(Metrics, MatchesTheMonitoringFamilyList) {
    std::ifstream f("tests/monitoring/metric-families.txt");
    if (!f) GTEST_SKIP() << "run from the source tree to compare with tests/monitoring/metric-families.txt";
    std::vector<std::string> listed, want;
    for (std::string l; std::getline(f, l);)
        if (!l.empty() && l[0] != '#') listed.push_back(l);
    for (const MetricFamily& fam : kMetricFamilies) want.push_back(fmt::format("{} {}", fam.name, fam.type));
    EXPECT_EQ(listed, want);
}

TEST(Metrics, FamiliesAreContiguous) {
    Upstream a = make_upstream("a:1"), b = make_upstream("b:1");
    a.rtt_ms = 1.5;
    StateView all = view_of({&a, &b});  // a sample in every family
    all.crash_copy_connections = 2;
    all.client_cert_not_after = 1900000000;
    all.discovery.enabled = true;
    all.snapshot.written_unix = 1800000000;
    for (const StateView& s : {view_of({&a, &b}), all}) {
        std::string out = render_metrics(s);
        // Every sample line belongs to the family of the last TYPE line (histograms add suffixes).
        std::string family, type;
        std::set<std::string> seen;
        for (const auto& l : lines(out)) {
            if (l.rfind("# TYPE ", 0) == 0) {
                family = l.substr(7, l.rfind(' ') - 7);
                type = l.substr(l.rfind(' ') + 1);
                EXPECT_TRUE(seen.insert(family).second) << "family repeated: " << family;
                continue;
            }
            if (l[0] == '#') continue;
            std::string name = l.substr(0, l.find_first_of("{ "));
            if (type == "histogram") {
                EXPECT_TRUE(name == family + "_bucket" || name == family + "_sum" || name == family + "_count") << l;
            } else {
                EXPECT_EQ(name, family) << l;
            }
        }
        EXPECT_EQ(seen.size(), kMetricFamilyCount);
    }
}

TEST(Metrics, LabelValuesAreEscaped) {
    EXPECT_EQ(escape_label_value(R"(a\b"c)" "\n" "d"), R"(a\\b\"c\nd)");
    EXPECT_EQ(escape_label_value("plain:6443"), "plain:6443");
    Upstream u = make_upstream("we\"ird\\host\nname:1");
    StateView s = view_of({&u});
    s.version = "v\"1";
    std::string out = render_metrics(s);
    EXPECT_TRUE(has_line(out, R"(kprism_build_info{version="v\"1"} 1)")) << out;
    EXPECT_TRUE(has_line(out, R"(kprism_upstream_connections_total{upstream="we\"ird\\host\nname:1"} 0)")) << out;
    for (const auto& l : lines(out)) EXPECT_EQ(l.find("ird\\host\n"), std::string::npos);
}

TEST(Metrics, CountersAndGauges) {
    Upstream u = make_upstream("10.0.0.1:6443");
    u.health = Health::down;
    u.active = 3;
    u.total = 40;
    u.bytes_to_upstream = 1000;
    u.bytes_from_upstream = 2000;
    u.connect_errors[static_cast<size_t>(ConnectError::refused)] = 2;
    u.connect_errors[static_cast<size_t>(ConnectError::no_response)] = 1;
    u.went_up = 1;
    u.went_down = 2;
    u.checks[static_cast<int>(CheckResult::ready)] = 5;
    u.checks[static_cast<int>(CheckResult::not_ready)] = 1;
    u.full_handshakes = 1;
    u.resumed_handshakes = 4;
    u.rtt_ms = 1.5;
    StateView s = view_of({&u});
    s.stats.accepted = 41;
    s.stats.resumed = 12;
    s.stats.rejected = 1;
    s.stats.client_failures = 2;
    s.stats.replayed = 3;
    s.stats.accept_errors = 4;
    s.stats.closed_for_down = 5;
    s.stats.fail_open_episodes = 6;
    s.stats.reloads_ok = 7;
    s.stats.reloads_failed = 8;
    s.connections_active = 9;
    s.fail_open = true;
    s.client_cert_not_after = 1900000000;
    s.now_unix = 1900000000 - 86400 * 3;
    s.credentials = "rejected";
    s.heartbeat_age_seconds = 0.25;
    std::string out = render_metrics(s);
    const std::string up = R"(upstream="10.0.0.1:6443")";
    for (const std::string& l : {
             std::string("kprism_build_info{version=\"1.2.3\"} 1"),
             std::string("kprism_connections_active 9"),
             std::string("kprism_connections_accepted_total 41"),
             std::string("kprism_connections_resumed_total 12"),
             std::string("kprism_connections_rejected_total 1"),
             std::string("kprism_client_failures_total 2"),
             std::string("kprism_connections_replayed_total 3"),
             std::string("kprism_accept_errors_total 4"),
             "kprism_upstream_connections_active{" + up + "} 3",
             "kprism_upstream_connections_total{" + up + "} 40",
             "kprism_upstream_connect_errors_total{" + up + ",reason=\"refused\"} 2",
             "kprism_upstream_connect_errors_total{" + up + ",reason=\"timeout\"} 0",
             "kprism_upstream_connect_errors_total{" + up + ",reason=\"no_response\"} 1",
             "kprism_upstream_connect_errors_total{" + up + ",reason=\"other\"} 0",
             "kprism_upstream_bytes_total{" + up + ",direction=\"to_upstream\"} 1000",
             "kprism_upstream_bytes_total{" + up + ",direction=\"from_upstream\"} 2000",
             "kprism_upstream_state{" + up + ",state=\"up\"} 0",
             "kprism_upstream_state{" + up + ",state=\"down\"} 1",
             "kprism_upstream_state{" + up + ",state=\"unknown\"} 0",
             "kprism_upstream_transitions_total{" + up + ",to=\"up\"} 1",
             "kprism_upstream_transitions_total{" + up + ",to=\"down\"} 2",
             "kprism_health_checks_total{" + up + ",result=\"ready\"} 5",
             "kprism_health_checks_total{" + up + ",result=\"not_ready\"} 1",
             "kprism_health_checks_total{" + up + ",result=\"unauthorized\"} 0",
             "kprism_upstream_probe_rtt_seconds{" + up + "} 0.0015",
             "kprism_tls_handshakes_total{" + up + ",resumed=\"true\"} 4",
             "kprism_tls_handshakes_total{" + up + ",resumed=\"false\"} 1",
             std::string("kprism_connections_closed_upstream_down_total 5"),
             std::string("kprism_fail_open_active 1"),
             std::string("kprism_fail_open_episodes_total 6"),
             std::string("kprism_config_reloads_total{result=\"success\"} 7"),
             std::string("kprism_config_reloads_total{result=\"failure\"} 8"),
             std::string("kprism_client_certificate_expiry_timestamp_seconds 1900000000"),
             std::string("kprism_client_certificate_remaining_seconds 259200"),
             std::string("kprism_client_certificate_rejected 1"),
             std::string("kprism_heartbeat_age_seconds 0.25"),
         })
        EXPECT_TRUE(has_line(out, l)) << "missing: " << l << "\n" << out;
}

TEST(Metrics, UnknownValuesAreOmittedNotFaked) {
    Upstream u = make_upstream("a:1");  // rtt_ms < 0: never measured
    StateView s = view_of({&u});     // no client certificate
    std::string out = render_metrics(s);
    EXPECT_NE(out.find("# TYPE kprism_upstream_probe_rtt_seconds gauge"), std::string::npos);
    EXPECT_EQ(out.find("kprism_upstream_probe_rtt_seconds{"), std::string::npos);
    EXPECT_NE(out.find("# TYPE kprism_client_certificate_expiry_timestamp_seconds gauge"), std::string::npos);
    EXPECT_FALSE(has_line(out, "kprism_client_certificate_expiry_timestamp_seconds 0"));
    EXPECT_NE(out.find("# TYPE kprism_client_certificate_remaining_seconds gauge"), std::string::npos);
    EXPECT_EQ(out.find("\nkprism_client_certificate_remaining_seconds "), std::string::npos) << "absent without a certificate";
    EXPECT_TRUE(has_line(out, "kprism_client_certificate_rejected 0"));
    EXPECT_TRUE(has_line(out, "kprism_upstream_state{upstream=\"a:1\",state=\"unknown\"} 1"));
}

TEST(Metrics, RemainingValidityIsNegativeOnceExpired) {
    Upstream u = make_upstream("a:1");
    StateView s = view_of({&u});
    s.client_cert_not_after = 1700000000;
    s.now_unix = 1700000600;
    std::string out = render_metrics(s);
    EXPECT_TRUE(has_line(out, "kprism_client_certificate_remaining_seconds -600")) << out;
    EXPECT_TRUE(has_line(out, "kprism_client_certificate_rejected 0"));
}

TEST(Metrics, HistogramBucketsAreCumulative) {
    Upstream u = make_upstream("a:1");
    for (double v : {0.001, 0.005, 0.007, 0.3, 0.3, 4.0, 9.0}) u.check_duration.observe(v);
    std::string out = render_metrics(view_of({&u}));
    const std::string b = "kprism_health_check_duration_seconds_bucket{upstream=\"a:1\",le=";
    for (const std::string& l : {
             b + "\"0.005\"} 2",  // le is inclusive
             b + "\"0.01\"} 3", b + "\"0.025\"} 3", b + "\"0.05\"} 3", b + "\"0.1\"} 3",
             b + "\"0.25\"} 3", b + "\"0.5\"} 5", b + "\"1\"} 5", b + "\"2.5\"} 5", b + "\"5\"} 6",
             b + "\"+Inf\"} 7",
             std::string("kprism_health_check_duration_seconds_count{upstream=\"a:1\"} 7"),
         })
        EXPECT_TRUE(has_line(out, l)) << "missing: " << l << "\n" << out;
    size_t at = out.find("kprism_health_check_duration_seconds_sum{upstream=\"a:1\"} ");
    ASSERT_NE(at, std::string::npos);
    EXPECT_NEAR(std::stod(out.substr(out.find("} ", at) + 2)), 13.613, 1e-9);
    // Buckets never decrease, and +Inf equals _count.
    uint64_t prev = 0;
    for (const auto& l : lines(out)) {
        if (l.rfind(b, 0) != 0) continue;
        uint64_t v = std::stoull(l.substr(l.rfind(' ') + 1));
        EXPECT_GE(v, prev) << l;
        prev = v;
    }
    EXPECT_EQ(prev, 7u);
}

// Each reason a failure travels with is pinned to its metric label and check result class: the
// log wording around it cannot move a metric.
TEST(Metrics, ConnectFailureReasonsPinnedToLabels) {
    struct Row {
        ConnectFailure why;
        const char* name;
        const char* label;
        CheckResult result;
    };
    const Row rows[] = {
        {ConnectFailure::refused, "refused", "refused", CheckResult::connect_failed},
        {ConnectFailure::timeout, "timeout", "timeout", CheckResult::timeout},
        {ConnectFailure::unreachable, "unreachable", "other", CheckResult::connect_failed},
        {ConnectFailure::reset, "reset", "other", CheckResult::connect_failed},
        {ConnectFailure::no_response, "no_response", "no_response", CheckResult::timeout},
        {ConnectFailure::hung_up, "hung_up", "no_response", CheckResult::connect_failed},
        {ConnectFailure::other, "other", "other", CheckResult::connect_failed},
    };
    for (const Row& r : rows) {
        EXPECT_STREQ(connect_failure_name(r.why), r.name);
        EXPECT_STREQ(connect_error_name(connect_error_of(r.why)), r.label) << r.name;
        EXPECT_EQ(check_result_of(r.why), r.result) << r.name;
    }
    EXPECT_EQ(connect_failure_from_uv(UV_ECONNREFUSED), ConnectFailure::refused);
    EXPECT_EQ(connect_failure_from_uv(UV_ETIMEDOUT), ConnectFailure::timeout);
    EXPECT_EQ(connect_failure_from_uv(UV_EHOSTUNREACH), ConnectFailure::unreachable);
    EXPECT_EQ(connect_failure_from_uv(UV_ENETUNREACH), ConnectFailure::unreachable);
    EXPECT_EQ(connect_failure_from_uv(UV_ECONNRESET), ConnectFailure::reset);
    EXPECT_EQ(connect_failure_from_uv(UV_EPIPE), ConnectFailure::other);
}

TEST(Metrics, CheckResultsPinnedToLabels) {
    const std::pair<CheckResult, const char*> rows[] = {
        {CheckResult::ready, "ready"},         {CheckResult::not_ready, "not_ready"},
        {CheckResult::timeout, "timeout"},     {CheckResult::connect_failed, "connect_failed"},
        {CheckResult::tls_failed, "tls_failed"}, {CheckResult::unauthorized, "unauthorized"},
    };
    for (const auto& [r, label] : rows) EXPECT_STREQ(result_name(r), label);
}

TEST(Metrics, PassiveFailuresAndTransitionsAreCounted) {
    UpstreamPool pool;
    HostPort hp;
    ASSERT_TRUE(parse_host_port("10.0.0.1:6443", hp, nullptr));
    pool.add(hp);
    Upstream& u = pool[0];
    pool.connect_failed(u, ConnectFailure::refused, "connection refused", 1000);
    pool.connect_failed(u, ConnectFailure::refused, "connection refused", 1001);  // in backoff: still counted
    pool.connect_failed(u, ConnectFailure::no_response, "no response", 5000);
    EXPECT_EQ(u.connect_errors[static_cast<size_t>(ConnectError::refused)], 2u);
    EXPECT_EQ(u.connect_errors[static_cast<size_t>(ConnectError::no_response)], 1u);
    EXPECT_EQ(u.last_change_unix, 0);
    pool.record(u, CheckResult::ready, "", false, 6000);
    EXPECT_EQ(u.went_up, 1u);
    EXPECT_GT(u.last_change_unix, 1600000000);
    pool.record(u, CheckResult::not_ready, "HTTP 500", true, 7000);
    EXPECT_EQ(u.went_down, 1u);
}

TEST(Heartbeat, FreshStaleAndRecentStall) {
    constexpr uint64_t s = 1'000'000'000;
    HeartbeatClock c;
    std::string why;
    EXPECT_FALSE(c.healthy(100 * s, &why)) << "no tick yet";
    c.tick(100 * s);
    EXPECT_TRUE(c.healthy(100 * s + s / 2));
    EXPECT_DOUBLE_EQ(c.age_seconds(101 * s), 1.0);
    for (uint64_t t = 101; t <= 104; ++t) c.tick(t * s);
    EXPECT_TRUE(c.healthy(109 * s - 1)) << "up to 5 s without a tick";
    EXPECT_FALSE(c.healthy(109 * s + 1, &why)) << "asked during a stall (before the timer ran)";
    EXPECT_NE(why.find("heartbeat stale"), std::string::npos) << why;
    // The stall ends: the timer ticks before the waiting request is read. Still unhealthy.
    c.tick(111 * s);
    EXPECT_FALSE(c.healthy(111 * s + 1000, &why));
    EXPECT_NE(why.find("stalled for 7.0s"), std::string::npos) << why;
    for (uint64_t t = 112; t <= 121; ++t) c.tick(t * s);
    EXPECT_FALSE(c.healthy(121 * s - 1)) << "within 10 s of the stall's end";
    EXPECT_TRUE(c.healthy(121 * s + 1));
    // A slow but steady loop (4 s between ticks) is not a stall.
    HeartbeatClock d;
    for (uint64_t t = 0; t <= 40; t += 4) d.tick((t + 1) * s);
    EXPECT_TRUE(d.healthy(41 * s + s / 2));
}

// One series per upstream and reason, a fixed set; 1 only on the reason of a down upstream.
TEST(Metrics, DownReasonIsABoundedStateSet) {
    Upstream a = make_upstream("10.0.0.1:6443");
    Upstream b = make_upstream("10.0.0.2:6443");
    a.health = Health::up;
    a.down_reason = DownReason::timeout;  // left from an earlier outage: not shown while up
    b.health = Health::down;
    b.down_reason = DownReason::etcd;
    std::string out = render_metrics(view_of({&a, &b}));
    size_t series = 0, ones = 0;
    for (const auto& l : lines(out)) {
        if (l.rfind("kprism_upstream_down_reason{", 0) != 0) continue;
        ++series;
        if (l.back() == '1') ++ones;
    }
    EXPECT_EQ(series, 2 * kDownReasons);
    EXPECT_EQ(ones, 1u);
    EXPECT_NE(out.find("kprism_upstream_down_reason{upstream=\"10.0.0.2:6443\",reason=\"etcd\"} 1\n"), std::string::npos);
    EXPECT_NE(out.find("kprism_upstream_down_reason{upstream=\"10.0.0.1:6443\",reason=\"timeout\"} 0\n"), std::string::npos);
}

// The result classes, down reasons and connect error reasons are each one table: the labels are
// the ones kprism always had, every array indexed by them is sized by it, and the metrics have a
// series per row.
TEST(Metrics, ResultAndReasonTablesGiveTheLabels) {
    std::vector<std::string> results, reasons, connect_errors;
    for (const auto& c : kCheckResultTable) results.push_back(c.name);
    for (const auto& d : kDownReasonTable) reasons.push_back(d.name);
    for (const auto& e : kConnectErrorTable) connect_errors.push_back(e.name);
    EXPECT_EQ(results, (std::vector<std::string>{"ready", "not_ready", "timeout", "connect_failed", "tls_failed",
                                                 "unauthorized"}));
    EXPECT_EQ(reasons, (std::vector<std::string>{"shutdown", "etcd", "other", "unauthorized", "connect", "timeout",
                                                 "tls"}));
    EXPECT_EQ(connect_errors, (std::vector<std::string>{"refused", "timeout", "no_response", "other"}));
    static_assert(std::size(Upstream{}.checks) == kCheckResults);
    static_assert(std::size(Upstream{}.connect_errors) == kConnectErrors);
    EXPECT_EQ(result_name(CheckResult::tls_failed), std::string("tls_failed"));
    EXPECT_EQ(down_reason_name(DownReason::connect), std::string("connect"));
    EXPECT_EQ(down_reason_of(CheckResult::connect_failed, {}), DownReason::connect);
    EXPECT_EQ(down_reason_of(CheckResult::unauthorized, {}), DownReason::unauthorized);
    EXPECT_EQ(down_reason_of(CheckResult::ready, {}), DownReason::other);
    FailingChecks etcd;
    etcd.names = {"etcd"};
    EXPECT_EQ(down_reason_of(CheckResult::not_ready, etcd), DownReason::etcd);

    Upstream u = make_upstream("10.0.0.1:6443");
    for (size_t i = 0; i < kCheckResults; ++i) u.checks[i] = 10 + i;
    std::string out = render_metrics(view_of({&u}));
    for (const auto& c : kCheckResultTable)
        EXPECT_NE(out.find(fmt::format("kprism_health_checks_total{{upstream=\"10.0.0.1:6443\",result=\"{}\"}} {}\n", c.name,
                                       10 + static_cast<size_t>(c.result))),
                  std::string::npos)
            << c.name << "\n" << out;
    for (size_t i = 0; i < kConnectErrors; ++i) u.connect_errors[i] = 20 + i;
    out = render_metrics(view_of({&u}));
    for (const auto& e : kConnectErrorTable)
        EXPECT_NE(out.find(fmt::format("kprism_upstream_connect_errors_total{{upstream=\"10.0.0.1:6443\",reason=\"{}\"}} {}\n",
                                       e.name, 20 + static_cast<size_t>(e.error))),
                  std::string::npos)
            << e.name << "\n" << out;
}
