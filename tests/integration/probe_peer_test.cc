// SPDX-License-Identifier: Apache-2.0
// The readiness probe against a hostile apiserver (tests/harness/probe_peer.h): real TLS with a
// client certificate required, and answers scripted record by record and write by write: extra
// answers after the real one (in its record, in records of their own, in part of one), a
// close_notify or a FIN with or after it, 1xx first, `Connection: close`, HTTP/1.0, an answer
// split into many records or dripping a byte at a time, a 200 after a 500 on one connection.
// For every check, I8: the result kprism records is the class of the answer the peer gave to that
// request (the peer logs each; kprism's debug "health check" lines say what it recorded).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "harness/apiserver.h"
#include "harness/harness.h"
#include "harness/pki.h"
#include "harness/probe_peer.h"

using namespace it;

namespace {

std::vector<std::string> flags(const Pki& pki, std::vector<std::string> more = {}) {
    std::vector<std::string> a = {"--client-cert",      pki.client_pem, "--client-key",          pki.client_pem,
                                  "--ca-file",          pki.ca_cert,    "--health-interval",     "1s",
                                  "--health-timeout",   "800ms",        "--health-fast-interval", "100ms",
                                  "--log-level",        "debug"};
    a.insert(a.end(), more.begin(), more.end());
    return a;
}

long metric(const Kprism& k, const std::string& family, const std::string& labels) {
    std::string m = body_of(http_get(k.admin_port, "/metrics"));
    std::string key = family + "{" + labels + "} ";
    auto p = m.find(key);
    return p == std::string::npos ? -1 : std::strtol(m.c_str() + p + key.size(), nullptr, 10);
}

long protocol_errors(const Kprism& k, const ProbePeer& p) {
    return metric(k, "kprism_health_check_protocol_errors_total", "upstream=\"" + p.addr() + "\"");
}

long connections_ended(const Kprism& k, const ProbePeer& p) {
    return metric(k, "kprism_health_check_connections_ended_total", "upstream=\"" + p.addr() + "\"");
}

std::string describe(const std::vector<Observed>& seen, const std::vector<PeerAnswer>& want) {
    std::string s = "\n  kprism recorded:";
    for (const auto& o : seen) s += " " + o.result + (o.seq ? "(" + std::to_string(o.seq) + ")" : "");
    s += "\n  the peer answered:";
    for (const auto& a : want)
        s += " " + a.result + "(" + std::to_string(a.req.seq) + " c" + std::to_string(a.req.conn) + "#" +
             std::to_string(a.req.nth) + ")";
    return s;
}

// I8 for every check so far, once kprism has recorded at least `at_least`: its results, in order,
// are the classes of the peer's answers in order (requests that get no result of their own left
// out), and each failed one quotes the sequence number of the answer it was.
::testing::AssertionResult i8_holds(const ProbePeer& p, const Kprism& k, size_t at_least) {
    std::vector<Observed> seen;
    bool enough = eventually([&] { return (seen = observed_checks(k, p.addr())).size() >= at_least; }, 20000ms);
    std::vector<PeerAnswer> want;
    for (const auto& a : p.answers())
        if (!a.result.empty()) want.push_back(a);
    if (!enough)
        return ::testing::AssertionFailure() << "only " << seen.size() << " checks recorded" << describe(seen, want);
    // The peer logs an answer before it sends it: it may be ahead of kprism, never behind.
    if (want.size() < seen.size())
        return ::testing::AssertionFailure() << "more results than answers" << describe(seen, want);
    for (size_t i = 0; i < seen.size(); ++i)
        if (seen[i].result != want[i].result || (seen[i].seq != 0 && seen[i].seq != want[i].req.seq))
            return ::testing::AssertionFailure() << "check " << i + 1 << " is not the answer to its request"
                                                 << describe(seen, want);
    return ::testing::AssertionSuccess();
}

const std::string kUp = "msg=\"upstream up\" upstream=";
const std::string kDown = "msg=\"upstream down\" upstream=";

}  // namespace

// The issue's reproduction: six extra 200s after one answer, then 500 for every request. The
// upstream goes down at the first check answered 500, not six checks later.
TEST(ProbePeer, SixExtraReadyAnswersThenFailuresForever) {
    Pki pki;
    std::atomic<bool> arm{false};
    std::atomic<int> armed_at{0};
    ProbePeer p(pki, [&](const PeerRequest& r) {
        if (armed_at != 0) return answer(500, r.seq);
        if (!arm) return answer(200, r.seq);
        armed_at = r.seq;
        Script s;
        for (int i = 0; i < 7; ++i) s.record(http_answer(200, r.seq));  // the answer, then six more
        return s.send().expect(200);
    });
    Kprism k({p.addr()}, flags(pki));
    ASSERT_TRUE(k.wait_output(kUp + p.addr())) << k.output();
    arm = true;
    ASSERT_TRUE(k.wait_output(kDown + p.addr(), 10000ms)) << k.output();
    ASSERT_NE(armed_at.load(), 0);
    // Down at the check answered by the next request, whatever its connection.
    std::string o = k.output();
    std::string down = o.substr(o.find(kDown + p.addr()));
    down = down.substr(0, down.find('\n'));
    EXPECT_NE(down.find("(answer " + std::to_string(armed_at + 1) + ")"), std::string::npos)
        << down << describe(observed_checks(k, p.addr()), p.answers());
    EXPECT_TRUE(i8_holds(p, k, static_cast<size_t>(armed_at) + 3));
    EXPECT_GE(protocol_errors(k, p), 1);
    EXPECT_TRUE(k.wait_output("msg=\"probe connection closed on a protocol error\" upstream=" + p.addr() +
                              " reason=\"data after the answer\" answer=ready"))
        << k.output();
}

// Extra 500s after every 200, in records of their own in the same write: a ready apiserver stays
// up, every check is its answer, and each such connection is closed and counted.
TEST(ProbePeer, ExtraFailuresAfterEachReadyAnswerInTheirOwnRecords) {
    Pki pki;
    ProbePeer p(pki, [](const PeerRequest& r) {
        return Script()
            .record(http_answer(200, r.seq))
            .record(http_answer(500, r.seq))
            .record(http_answer(500, r.seq))
            .record(http_answer(500, r.seq))
            .send()
            .expect(200);
    });
    Kprism k({p.addr()}, flags(pki));
    ASSERT_TRUE(k.wait_output(kUp + p.addr())) << k.output();
    EXPECT_TRUE(i8_holds(p, k, 8));
    EXPECT_EQ(k.count_output(kDown), 0u) << k.output();
    EXPECT_EQ(k.count_output("msg=\"health check failed\""), 0u) << k.output();
    const auto seen = observed_checks(k, p.addr()).size();
    EXPECT_GE(protocol_errors(k, p), static_cast<long>(seen) - 1);
    EXPECT_GE(p.handshakes(), static_cast<int>(seen)) << "never reused";
    // One line a second at most, however many errors.
    EXPECT_LE(k.count_output("msg=\"probe connection closed on a protocol error\""), seen);
}

// The same with the extra answer inside the answer's own record (the parser sees it).
TEST(ProbePeer, ExtraAnswerInTheAnswersRecord) {
    Pki pki;
    ProbePeer p(pki, [](const PeerRequest& r) {
        return Script().record(http_answer(200, r.seq) + http_answer(500, r.seq)).send().expect(200);
    });
    Kprism k({p.addr()}, flags(pki));
    ASSERT_TRUE(k.wait_output(kUp + p.addr())) << k.output();
    EXPECT_TRUE(i8_holds(p, k, 6));
    EXPECT_EQ(k.count_output(kDown), 0u) << k.output();
    EXPECT_GE(protocol_errors(k, p), 5);
}

// An extra record of which only the first bytes arrive with the answer; the rest comes with the
// next answer on that connection. Reading on would take the extra for the next check's answer.
TEST(ProbePeer, PartOfAnExtraRecordAfterTheAnswer) {
    Pki pki;
    ProbePeer p(pki, [](const PeerRequest& r) {
        if (r.nth > 1) return answer(200, r.seq);
        return Script().record(http_answer(200, r.seq)).record(http_answer(500, r.seq)).send_all_but(20).expect(200);
    });
    Kprism k({p.addr()}, flags(pki));
    ASSERT_TRUE(k.wait_output(kUp + p.addr())) << k.output();
    EXPECT_TRUE(i8_holds(p, k, 6));
    EXPECT_EQ(k.count_output(kDown), 0u) << k.output();
    EXPECT_TRUE(k.wait_output("reason=\"part of a TLS record after the answer\"")) << k.output();
}

// A close_notify in the same write as the answer, the FIN held back until kprism closes: the
// answer counts, the connection is closed (gracefully: the next handshake resumes), no request
// goes to it again and no check fails.
TEST(ProbePeer, CloseNotifyWithTheAnswerFailsNoCheck) {
    Pki pki;
    ProbePeer p(pki, [](const PeerRequest& r) {
        return Script().record(http_answer(200, r.seq)).close_notify().send().hold().expect(200);
    });
    Kprism k({p.addr()}, flags(pki));
    ASSERT_TRUE(k.wait_output(kUp + p.addr())) << k.output();
    EXPECT_TRUE(i8_holds(p, k, 8));
    EXPECT_EQ(p.unanswered(), 0) << "a request sent after the close_notify" << describe(observed_checks(k, p.addr()), p.answers());
    EXPECT_EQ(k.count_output(kDown), 0u) << k.output();
    EXPECT_EQ(k.count_output("msg=\"health check failed\""), 0u) << k.output();
    EXPECT_GE(connections_ended(k, p), 6);
    EXPECT_EQ(protocol_errors(k, p), 0);
    EXPECT_GE(metric(k, "kprism_tls_handshakes_total", "upstream=\"" + p.addr() + "\",resumed=\"true\""), 6);
}

// A close_notify in a write of its own after the answer, while kprism is idle: the same.
TEST(ProbePeer, CloseNotifyAfterTheAnswerFailsNoCheck) {
    Pki pki;
    ProbePeer p(pki, [](const PeerRequest& r) {
        return Script().record(http_answer(200, r.seq)).send().sleep(50ms).close_notify().send().hold().expect(200);
    });
    Kprism k({p.addr()}, flags(pki));
    ASSERT_TRUE(k.wait_output(kUp + p.addr())) << k.output();
    EXPECT_TRUE(i8_holds(p, k, 6));
    EXPECT_EQ(p.unanswered(), 0);
    EXPECT_EQ(k.count_output(kDown), 0u) << k.output();
    EXPECT_EQ(k.count_output("msg=\"health check failed\""), 0u) << k.output();
}

// A FIN right after the answer (odd connections) or 150 ms after it (even ones): no check fails.
TEST(ProbePeer, FinWithOrAfterTheAnswerFailsNoCheck) {
    Pki pki;
    ProbePeer p(pki, [](const PeerRequest& r) {
        Script s = Script().record(http_answer(200, r.seq));
        if (r.conn % 2 == 0) s.send().sleep(150ms);
        return s.fin().expect(200);
    });
    Kprism k({p.addr()}, flags(pki));
    ASSERT_TRUE(k.wait_output(kUp + p.addr())) << k.output();
    EXPECT_TRUE(i8_holds(p, k, 6));
    EXPECT_EQ(p.unanswered(), 0);
    EXPECT_EQ(k.count_output(kDown), 0u) << k.output();
    EXPECT_EQ(k.count_output("msg=\"health check failed\""), 0u) << k.output();
}

// A FIN instead of an answer on a kept connection: not the apiserver's answer; the check moves to
// a new connection once, and that one's answer is its result.
TEST(ProbePeer, FinInsteadOfAnAnswerMovesTheCheck) {
    Pki pki;
    ProbePeer p(pki, [](const PeerRequest& r) {
        if (r.nth == 3) return Script().fin().expect_class("");
        return answer(r.seq % 2 ? 200 : 500, r.seq);
    });
    Kprism k({p.addr()}, flags(pki, {"--health-fall", "5"}));
    EXPECT_TRUE(i8_holds(p, k, 10));
    EXPECT_GE(connections_ended(k, p), 2);
}

// A 200 after a 500 on the same connection and the reverse: the kept connection carries each
// answer to its own check.
TEST(ProbePeer, AlternatingAnswersOnOneConnection) {
    Pki pki;
    ProbePeer p(pki, [](const PeerRequest& r) { return answer(r.nth % 2 ? 500 : 200, r.seq); });
    Kprism k({p.addr()}, flags(pki));
    EXPECT_TRUE(i8_holds(p, k, 8));
    EXPECT_EQ(p.handshakes(), 1);
    EXPECT_EQ(protocol_errors(k, p), 0);
}

// An answer in records of 5 bytes, in one write or a write each: read whole, the connection kept.
TEST(ProbePeer, AnswerSplitAcrossManyRecords) {
    Pki pki;
    ProbePeer p(pki, [](const PeerRequest& r) {
        int code = r.nth % 3 == 0 ? 500 : 200;
        Script s;
        if (r.nth % 2) s.records(http_answer(code, r.seq), 5).send();
        else
            for (size_t i = 0; i < http_answer(code, r.seq).size(); i += 5)
                s.record(http_answer(code, r.seq).substr(i, 5)).send();
        return s.expect(code);
    });
    Kprism k({p.addr()}, flags(pki, {"--health-fall", "5"}));
    EXPECT_TRUE(i8_holds(p, k, 8));
    EXPECT_EQ(p.handshakes(), 1);
    EXPECT_EQ(protocol_errors(k, p), 0);
}

// 100 Continue and 103 Early Hints before the final answer are skipped (HTTP/1.1 asks a client
// to), in the answer's write; one after the final answer is a byte too many.
TEST(ProbePeer, InterimAnswers) {
    Pki pki;
    ProbePeer p(pki, [](const PeerRequest& r) {
        int code = r.nth % 2 ? 200 : 500;
        Script s;
        s.record("HTTP/1.1 100 Continue\r\n\r\n").record("HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n");
        s.record(http_answer(code, r.seq));
        if (r.nth == 5) s.record("HTTP/1.1 103 Early Hints\r\n\r\n");
        return s.send().expect(code);
    });
    Kprism k({p.addr()}, flags(pki, {"--health-fall", "5"}));
    EXPECT_TRUE(i8_holds(p, k, 8));
    EXPECT_EQ(p.handshakes(), 2) << "kept until the 1xx after an answer";
    EXPECT_EQ(protocol_errors(k, p), 1);
}

// `Connection: close` (then closed) and HTTP/1.0 (left open by the peer): neither connection
// carries another check.
TEST(ProbePeer, ConnectionCloseAndHttp10AreNotReused) {
    Pki pki;
    ProbePeer p(pki, [](const PeerRequest& r) {
        if (r.conn % 2) return Script().record(http_answer(200, r.seq, "Connection: close\r\n")).close().expect(200);
        return Script().record(http_answer(200, r.seq, "", "HTTP/1.0")).send().hold().expect(200);
    });
    Kprism k({p.addr()}, flags(pki));
    EXPECT_TRUE(i8_holds(p, k, 6));
    EXPECT_EQ(p.unanswered(), 0);
    EXPECT_EQ(protocol_errors(k, p), 0);
    EXPECT_EQ(k.count_output("msg=\"health check failed\""), 0u) << k.output();
}

// An answer dripping a byte per record and write: read as it comes, within health.timeout (a
// check whose drip outlasts it is a timeout, its connection closed).
TEST(ProbePeer, DrippingAnswer) {
    Pki pki;
    ProbePeer p(pki, [](const PeerRequest& r) {
        if (r.seq == 4) return Script().drip(http_answer(200, r.seq), 30ms).expect_class("timeout");
        return Script().drip(http_answer(r.seq % 2 ? 200 : 500, r.seq), 1ms).expect(r.seq % 2 ? 200 : 500);
    });
    Kprism k({p.addr()}, flags(pki, {"--health-interval", "1500ms", "--health-timeout", "1s", "--health-fall", "5"}));
    EXPECT_TRUE(i8_holds(p, k, 7));
    EXPECT_EQ(protocol_errors(k, p), 0);
}

// Data nobody asked for between checks (an answer before the request), or garbage that is no TLS
// record after the answer: the connection is closed before a check could read it.
TEST(ProbePeer, EarlyAnswerAndGarbage) {
    Pki pki;
    ProbePeer p(pki, [](const PeerRequest& r) {
        if (r.conn % 2) return answer(200, r.seq).sleep(100ms).record(http_answer(500, r.seq)).send();
        return Script().record(http_answer(200, r.seq)).raw(std::string("\x17\x03\x03\x00\x20", 5) + std::string(32, 'g')).send().expect(200);
    });
    Kprism k({p.addr()}, flags(pki));
    EXPECT_TRUE(i8_holds(p, k, 6));
    EXPECT_EQ(k.count_output(kDown), 0u) << k.output();
    // Each connection carries one check and ends on its protocol error: the garbage one too, or
    // the next check there would read it for its answer and I8 would fail above. (Which reasons
    // the log names depends on timing: it says at most one a second per upstream.)
    EXPECT_GE(protocol_errors(k, p), 4);
    EXPECT_TRUE(k.wait_output("msg=\"probe connection closed on a protocol error\"")) << k.output();
}

// The C++ stand-in's hostile modes, which `make chaos` gives c4: "rawrecords" (each answer a
// record of its own, corked into one write) and "rawnotify" (a close_notify with the answer, no
// FIN). Every check is the first answer after its request.
TEST(ProbePeer, StandinHostileModes) {
    Pki pki;
    Apiserver a(pki, "a");
    const std::string ok = http_answer(200, 0), bad = http_answer(500, 0);
    // As the file is, without the newline Apiserver::set adds (a byte after the last answer).
    auto set = [&](const std::string& content) {
        std::ofstream(a.readyz + ".tmp", std::ios::binary) << content;
        std::rename((a.readyz + ".tmp").c_str(), a.readyz.c_str());
    };
    set("rawrecords\n" + ok + "\f" + bad + "\f" + bad + "\f" + bad);
    Kprism k({a.addr()}, flags(pki));
    ASSERT_TRUE(k.wait_output(kUp + a.addr())) << k.output();
    ASSERT_TRUE(eventually([&] { return a.proc->count_output("status=rawrecords") >= 5; }, 10000ms));
    EXPECT_EQ(k.count_output("msg=\"health check\" upstream=" + a.addr() + " result=not_ready"), 0u) << k.output();
    set("rawnotify\n" + ok);
    ASSERT_TRUE(eventually([&] { return a.proc->count_output("status=rawnotify") >= 5; }, 10000ms));
    EXPECT_EQ(k.count_output("msg=\"health check\" upstream=" + a.addr() + " result=timeout"), 0u) << k.output();
    EXPECT_EQ(k.count_output(kDown), 0u) << k.output();
}
