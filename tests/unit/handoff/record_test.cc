// SPDX-License-Identifier: Apache-2.0
// The handover record: round trip, and every form of a bad record refused whole.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "kprism/handoff/record.h"

using namespace kprism;

namespace {

handover::Entry entry(int i) {
    handover::Entry e;
    e.client_local = "127.0.0.1:7445";
    e.client_peer = "127.0.0.1:" + std::to_string(40000 + i);
    e.upstream_local = "[::1]:" + std::to_string(50000 + i);
    e.upstream_peer = "[::1]:6443";
    e.upstream = i % 2 ? "apiserver-1.example:6443" : "[::1]:6443";
    e.client_eof = i & 1;
    e.client_shut = i & 2;
    e.upstream_eof = i & 4;
    e.upstream_shut = i & 8;
    e.age_ms = 1000u * static_cast<unsigned>(i);
    return e;
}

bool refused(const std::string& text, std::string* why = nullptr) {
    std::vector<handover::Entry> out{entry(1)};
    std::string error;
    bool ok = handover::parse(text, out, error);
    if (why) *why = error;
    return !ok && out.empty() && !error.empty();
}

}  // namespace

TEST(Handover, RoundTrip) {
    std::vector<handover::Entry> in;
    for (int i = 0; i < 16; ++i) in.push_back(entry(i));
    std::string text = handover::serialize(in);
    std::vector<handover::Entry> out;
    std::string error;
    ASSERT_TRUE(handover::parse(text, out, error)) << error << "\n" << text;
    ASSERT_EQ(out.size(), in.size());
    for (size_t i = 0; i < in.size(); ++i) {
        EXPECT_EQ(out[i].client_local, in[i].client_local);
        EXPECT_EQ(out[i].client_peer, in[i].client_peer);
        EXPECT_EQ(out[i].upstream_local, in[i].upstream_local);
        EXPECT_EQ(out[i].upstream_peer, in[i].upstream_peer);
        EXPECT_EQ(out[i].upstream, in[i].upstream);
        EXPECT_EQ(out[i].client_eof, in[i].client_eof);
        EXPECT_EQ(out[i].client_shut, in[i].client_shut);
        EXPECT_EQ(out[i].upstream_eof, in[i].upstream_eof);
        EXPECT_EQ(out[i].upstream_shut, in[i].upstream_shut);
        EXPECT_EQ(out[i].age_ms, in[i].age_ms);
    }
}

TEST(Handover, EmptyRecord) {
    std::vector<handover::Entry> out{entry(1)};
    std::string error;
    EXPECT_TRUE(handover::parse(handover::serialize({}), out, error)) << error;
    EXPECT_TRUE(out.empty());
}

// The crash copy's two generations: each connection once, the newer entries after the older
// ones; a record that does not parse is left out with its reason.
TEST(Handover, MergeTakesEachConnectionOnce) {
    std::string error;
    std::vector<handover::Entry> got =
        handover::merge({handover::serialize({entry(1), entry(2)}), handover::serialize({entry(2), entry(3)}),
                         "kprism-handover 1\nconn x"},
                        error);
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[0].client_peer, entry(1).client_peer);
    EXPECT_EQ(got[1].client_peer, entry(2).client_peer);
    EXPECT_EQ(got[2].client_peer, entry(3).client_peer);
    EXPECT_NE(error.find("truncated"), std::string::npos) << error;
    error.clear();
    EXPECT_TRUE(handover::merge({}, error).empty());
    EXPECT_EQ(error, "");
}

TEST(Handover, BadRecordsAreRefusedWhole) {
    std::string good = handover::serialize({entry(0), entry(1), entry(2)});
    std::string why;
    EXPECT_TRUE(refused("", &why));
    EXPECT_NE(why.find("not a version 1 record"), std::string::npos) << why;
    EXPECT_TRUE(refused("kprism-handover 2\nend 0\n", &why));  // another version
    EXPECT_NE(why.find("not a version 1 record"), std::string::npos) << why;
    EXPECT_TRUE(refused("\x01\xff garbage\n"));
    // Truncated anywhere: no end line, or a cut line.
    for (size_t n = 0; n < good.size(); ++n) EXPECT_TRUE(refused(good.substr(0, n))) << n;
    EXPECT_TRUE(refused(good.substr(0, good.rfind("end")), &why));
    EXPECT_NE(why.find("truncated"), std::string::npos) << why;
    // An end line that does not count the entries, bytes after it.
    std::string head = good.substr(0, good.rfind("end"));
    EXPECT_TRUE(refused(head + "end 2\n"));
    EXPECT_TRUE(refused(head + "end 4\n"));
    EXPECT_TRUE(refused(head + "end x\n"));
    EXPECT_TRUE(refused(good + "conn a b c d e 0 0\n"));
    // Bad conn lines: too few or too many fields, flags out of range, non-numbers, double spaces,
    // control characters, a field longer than the bound.
    const std::string h = "kprism-handover 1\n";
    EXPECT_TRUE(refused(h + "conn a b c d e 0\nend 1\n"));
    EXPECT_TRUE(refused(h + "conn a b c d e 0 0 0\nend 1\n"));
    EXPECT_TRUE(refused(h + "conn a b c d e 16 0\nend 1\n"));
    EXPECT_TRUE(refused(h + "conn a b c d e -1 0\nend 1\n"));
    EXPECT_TRUE(refused(h + "conn a b c d e 0 1e3\nend 1\n"));
    EXPECT_TRUE(refused(h + "conn a  b c d e 0 0\nend 1\n"));
    EXPECT_TRUE(refused(h + "conn a b\tc d e 0 0\nend 1\n"));
    EXPECT_TRUE(refused(h + "conn a b c d " + std::string(handover::kMaxTokenBytes + 1, 'x') + " 0 0\nend 1\n"));
    EXPECT_TRUE(refused(h + "link a b c d e 0 0\nend 1\n"));
    EXPECT_TRUE(refused(h + "conn a b c d e 0 0\r\nend 1\n"));
    // Over the size bound, however well formed.
    std::string big = h;
    while (big.size() <= handover::kMaxRecordBytes) big += "conn a b c d e 0 0\n";
    EXPECT_TRUE(refused(big + "end 1\n", &why));
    EXPECT_NE(why.find("larger than"), std::string::npos) << why;
}

TEST(Handover, MoreEntriesThanTheBoundAreRefused) {
    std::string t = "kprism-handover 1\n";
    for (size_t i = 0; i <= handover::kMaxEntries; ++i) t += "conn a b c d e 0 0\n";
    t += "end " + std::to_string(handover::kMaxEntries + 1) + "\n";
    ASSERT_LE(t.size(), handover::kMaxRecordBytes);
    std::string why;
    EXPECT_TRUE(refused(t, &why));
    EXPECT_NE(why.find("more than"), std::string::npos) << why;
}

TEST(Handover, NamesAndSocketAddresses) {
    EXPECT_TRUE(handover::is_handover_name("handover-data"));
    EXPECT_TRUE(handover::is_handover_name("handover-conn"));
    EXPECT_TRUE(handover::is_handover_name("handover-state"));
    EXPECT_TRUE(handover::is_handover_name("handover-health"));
    EXPECT_FALSE(handover::is_handover_name("data"));
    EXPECT_FALSE(handover::is_handover_name("handover-"));
    // The crash copy's (crash_copy.cc): two generations, the listeners and the health record.
    EXPECT_EQ(handover::crash_names(), (std::vector<std::string>{"crash-data", "crash-conn-0", "crash-conn-1",
                                                                 "crash-state-0", "crash-state-1", "crash-health"}));
    EXPECT_EQ(handover::crash_connection_name(2), "crash-conn-0");
    for (const std::string& n : handover::crash_names()) EXPECT_TRUE(handover::is_handover_name(n)) << n;

    int l = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(::listen(l, 1), 0);
    socklen_t len = sizeof a;
    ::getsockname(l, reinterpret_cast<sockaddr*>(&a), &len);
    int c = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_EQ(::connect(c, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    int s = ::accept(l, nullptr, nullptr);
    std::string port = std::to_string(ntohs(a.sin_port));
    EXPECT_EQ(handover::local_address(l), "127.0.0.1:" + port);
    EXPECT_EQ(handover::peer_address(l), "");  // a listener has no peer
    EXPECT_EQ(handover::peer_address(c), "127.0.0.1:" + port);
    EXPECT_EQ(handover::local_address(s), "127.0.0.1:" + port);
    EXPECT_EQ(handover::peer_address(s), handover::local_address(c));
    EXPECT_EQ(handover::local_address(-1), "");
    ::close(s);
    ::close(c);
    ::close(l);
}

// What a restart in place leaves in the new process's environment: three counts, the descriptors
// from 3 up; anything else is refused whole, and the variable never survives the call.
TEST(HandoverInherit, CountsAndDescriptors) {
    std::string err;
    ::unsetenv("KPRISM_HANDOVER");
    EXPECT_TRUE(handover::inherited_fds(&err).empty());
    EXPECT_EQ(err, "");
    EXPECT_EQ(handover::inherit_value(1, 2, 1), "1,2,1");
    for (const char* bad : {"", "1,2", "1,2,3,4", "a,1,1", "1,,1", "-1,0,1", "0,0,2", "2000,0,1", "0,200000,1", "1, 2,1"}) {
        ::setenv("KPRISM_HANDOVER", bad, 1);
        err.clear();
        EXPECT_TRUE(handover::inherited_fds(&err).empty()) << bad;
        EXPECT_NE(err, "") << bad;
        EXPECT_EQ(std::getenv("KPRISM_HANDOVER"), nullptr) << bad;
    }
    // Descriptors 3, 4 and 5 as a listener, a connection socket and the record, if this test
    // process has them free.
    for (int fd : {3, 4, 5})
        if (::fcntl(fd, F_GETFD) >= 0) GTEST_SKIP() << "descriptor " << fd << " is in use here";
    ::setenv("KPRISM_HANDOVER", "1,1,1", 1);
    err.clear();
    EXPECT_TRUE(handover::inherited_fds(&err).empty()) << "3, 4, 5 are not open yet";
    EXPECT_NE(err.find("descriptor 3 is not open"), std::string::npos) << err;
    for (int fd : {3, 4, 5}) ASSERT_EQ(::dup2(1, fd), fd);
    ::setenv("KPRISM_HANDOVER", "1,1,1", 1);
    err.clear();
    auto got = handover::inherited_fds(&err);
    EXPECT_EQ(err, "");
    ASSERT_EQ(got.size(), 3u);
    EXPECT_EQ(got[0].fd, 3);
    EXPECT_EQ(got[0].name, "handover-data");
    EXPECT_EQ(got[1].fd, 4);
    EXPECT_EQ(got[1].name, "handover-conn");
    EXPECT_EQ(got[2].fd, 5);
    EXPECT_EQ(got[2].name, "handover-state");
    for (int fd : {3, 4, 5}) {
        EXPECT_EQ(::fcntl(fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC) << fd;
        ::close(fd);
    }
}

// The connection sockets travel queued in one AF_UNIX socket: every one comes out, in order,
// as the same socket, also after the sending side is gone; an empty list is an empty queue.
TEST(HandoverCarrier, EverySocketOutInOrder) {
    std::vector<int> fds;
    for (int i = 0; i < 301; ++i) {  // 602 descriptors: three messages of 250, 250 and 102
        int sv[2];
        ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        fds.push_back(sv[0]);
        fds.push_back(sv[1]);
    }
    size_t sent = 0;
    std::string err;
    int carrier = handover::pack_fds(fds, sent, err);
    ASSERT_GE(carrier, 0) << err;
    EXPECT_EQ(sent, fds.size());
    EXPECT_EQ(err, "");
    std::vector<ino_t> inodes;
    for (int fd : fds) {
        struct stat st{};
        ::fstat(fd, &st);
        inodes.push_back(st.st_ino);
        ::close(fd);  // the queued copies keep the sockets open
    }
    bool truncated = true;
    std::vector<int> got = handover::unpack_fds(carrier, truncated);
    EXPECT_FALSE(truncated);
    ASSERT_EQ(got.size(), fds.size());
    for (size_t i = 0; i < got.size(); ++i) {
        struct stat st{};
        ASSERT_EQ(::fstat(got[i], &st), 0);
        EXPECT_EQ(st.st_ino, inodes[i]) << i;
        EXPECT_EQ(::fcntl(got[i], F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
    }
    // The pairs still work end to end: what one end writes the other reads.
    ASSERT_EQ(::write(got[0], "x", 1), 1);
    char c = 0;
    EXPECT_EQ(::read(got[1], &c, 1), 1);
    EXPECT_EQ(c, 'x');
    for (int fd : got) ::close(fd);
    EXPECT_TRUE(handover::unpack_fds(carrier, truncated).empty()) << "the queue is empty now";
    ::close(carrier);
    int udp = ::socket(AF_INET, SOCK_DGRAM, 0);
    EXPECT_TRUE(handover::unpack_fds(udp, truncated).empty()) << "not an AF_UNIX socket: not a carrier";
    ::close(udp);
    int empty = handover::pack_fds({}, sent, err);
    ASSERT_GE(empty, 0);
    EXPECT_EQ(sent, 0u);
    EXPECT_TRUE(handover::unpack_fds(empty, truncated).empty());
    ::close(empty);
}

// The health record a restart passes beside the handover record (ControlPlane::carry_health).
namespace {

handover::HealthRecord health_record() {
    handover::HealthRecord r;
    r.at_ms = 123456789;
    r.credentials = CredentialsState::rejected;
    r.failing_open = true;
    r.etcd_quorum_lost = false;
    handover::UpstreamHealth a;
    a.name = "127.0.0.1:6443";
    a.health = Health::up;
    a.has_result = true;
    a.last_result = CheckResult::ready;
    a.passed_check = true;
    a.result_age_ms = 800;
    a.last_change_unix = 1700000000;
    handover::UpstreamHealth b;
    b.name = "api.example.com@[fd00::1]:6443";
    b.health = Health::down;
    b.has_result = true;
    b.last_result = CheckResult::not_ready;
    b.rises = 1;
    b.falls = 0;
    b.down_reason = DownReason::etcd;
    b.close_held = true;
    b.result_age_ms = 12;
    b.failing_checks.names = {"etcd", "etcd-readiness"};
    b.failing_checks.more = 3;
    b.last_error = "HTTP 500: [-]etcd failed\n100% \"down\"\x01";
    handover::UpstreamHealth c;
    c.name = "[::1]:6443";  // never checked
    r.upstreams = {a, b, c};
    return r;
}

}  // namespace

TEST(HealthRecord, RoundTrip) {
    const handover::HealthRecord r = health_record();
    const std::string text = handover::serialize_health(r);
    EXPECT_EQ(text.rfind("kprism-health 1\nat 123456789\nnode rejected 1\n", 0), 0u) << text;
    EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 7) << "one line per upstream, the error on its own: " << text;
    handover::HealthRecord got;
    std::string error;
    ASSERT_TRUE(handover::parse_health(text, got, error)) << error << "\n" << text;
    EXPECT_EQ(error, "");
    EXPECT_EQ(got.at_ms, r.at_ms);
    EXPECT_EQ(got.credentials, CredentialsState::rejected);
    EXPECT_TRUE(got.failing_open);
    EXPECT_FALSE(got.etcd_quorum_lost);
    ASSERT_EQ(got.upstreams.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
        const auto &x = r.upstreams[i], &y = got.upstreams[i];
        SCOPED_TRACE(x.name);
        EXPECT_EQ(y.name, x.name);
        EXPECT_EQ(y.health, x.health);
        EXPECT_EQ(y.has_result, x.has_result);
        if (x.has_result) {
            EXPECT_EQ(y.last_result, x.last_result);
        }
        EXPECT_EQ(y.rises, x.rises);
        EXPECT_EQ(y.falls, x.falls);
        EXPECT_EQ(y.down_reason, x.down_reason);
        EXPECT_EQ(y.passed_check, x.passed_check);
        EXPECT_EQ(y.close_held, x.close_held);
        EXPECT_EQ(y.result_age_ms, x.result_age_ms);
        EXPECT_EQ(y.last_change_unix, x.last_change_unix);
        EXPECT_EQ(y.failing_checks, x.failing_checks);
        EXPECT_EQ(y.last_error, x.last_error);
    }
}

// Hostile or foreign input: a record without its header or end line is refused whole; a line of
// another kind, or one that does not parse, is ignored and the rest taken; bounds hold.
// The longest values an upstream can have: a name of a 253-byte hostname and an IPv6 address,
// every failing check kept (a starting apiserver fails many, with long names), the longest
// error. A line the writer writes, the reader takes.
TEST(HealthRecord, LongestValuesRoundTrip) {
    handover::HealthRecord r;
    r.at_ms = 1;
    handover::UpstreamHealth u;
    std::string host;
    while (host.size() + 64 < 253) host += std::string(63, 'h') + ".";
    host += std::string(253 - host.size(), 'h');
    u.name = host + "@[2001:db8:ffff:ffff:ffff:ffff:ffff:ffff]:65535";
    u.health = Health::down;
    u.has_result = true;
    u.last_result = CheckResult::not_ready;
    for (size_t i = 0; i < FailingChecks::kMaxNames; ++i)
        u.failing_checks.names.push_back("poststarthook/" + std::string(FailingChecks::kMaxNameLen - 16, 'a') +
                                         std::to_string(10 + i));
    u.failing_checks.more = 40;
    u.last_error = std::string(handover::kMaxErrorBytes, '\x01');
    r.upstreams.push_back(u);
    r.tls_content = std::string(64, 'a') + std::string(64, '0') + std::string(64, 'f');
    handover::HealthRecord got;
    std::string error;
    ASSERT_TRUE(handover::parse_health(handover::serialize_health(r), got, error)) << error;
    EXPECT_EQ(got.tls_content, r.tls_content);
    ASSERT_EQ(got.upstreams.size(), 1u) << error;
    EXPECT_EQ(got.upstreams[0].name, u.name);
    EXPECT_EQ(got.upstreams[0].failing_checks, u.failing_checks);
    EXPECT_EQ(got.upstreams[0].last_error, u.last_error);
}

TEST(HealthRecord, BadInput) {
    const std::string good = handover::serialize_health(health_record());
    handover::HealthRecord got;
    std::string error;
    for (const std::string& bad :
         {std::string(""), std::string("kprism-health 2\nat 1\nend 1\n"), good.substr(0, good.size() - 1),
          good.substr(0, good.size() / 2), good + "x", std::string("kprism-health 1\nend 0\n"),
          std::string("kprism-handover 1\nend 0\n"), std::string(8, '\xff'),
          std::string("kprism-health 1\nat 1\n") + std::string(handover::kMaxHealthBytes, 'x') + "\nend 2\n"}) {
        EXPECT_FALSE(handover::parse_health(bad, got, error)) << bad.substr(0, 80);
        EXPECT_TRUE(got.upstreams.empty());
    }
    // A torn rewrite: the beginning of one record over the end of another with as many lines.
    {
        handover::HealthRecord older = health_record();
        older.at_ms -= 250;  // the copy before
        older.upstreams[0].health = Health::down;
        const std::string a = handover::serialize_health(older);
        const std::string torn = good.substr(0, good.find("\nup ") + 1) + a.substr(a.find("\nup ") + 1);
        ASSERT_EQ(std::count(torn.begin(), torn.end(), '\n'), std::count(good.begin(), good.end(), '\n'));
        EXPECT_FALSE(handover::parse_health(torn, got, error)) << torn;
        EXPECT_NE(error.find("checksum"), std::string::npos) << error;
    }
    // Unknown and broken lines: ignored, counted; the end line counts every line.
    const std::string mixed = std::string() +
        "kprism-health 1\nat 5\nnode ok 0\nzone 127.0.0.1:1 a\n"
        "up 127.0.0.1:1 sideways ready 0 0 other 3 1 0 - 0 -\n"          // no such health
        "up 127.0.0.1:2 up ready 0 0 other 9 1 0 - 0 -\n"                // flags out of range
        "up 127.0.0.1:3 up ready 0 0 other 3 1 0 ETCD! 0 -\n"            // a check name of other characters
        "up 127.0.0.1:4 down timeout 0 0 timeout 1 1 0 - 0 a%ZZ\n"       // a bad escape
        "up 127.0.0.1:5 up ready 0 0 other 3 1 0 - 0 -\n"
        "up 127.0.0.1:5 down ready 0 0 other 3 1 0 - 0 -\n"              // the same name again
        "up 127.0.0.1:6 up ready 0 0 other 3 1 0 - 0 - extra\n";
    ASSERT_TRUE(handover::parse_health(mixed + fmt::format("end 10 {:016x}\n", handover::health_checksum(mixed)), got,
                                       error))
        << error;
    EXPECT_EQ(error, "7 lines ignored");
    ASSERT_EQ(got.upstreams.size(), 1u);
    EXPECT_EQ(got.upstreams[0].name, "127.0.0.1:5");
    EXPECT_EQ(got.upstreams[0].health, Health::up);
    EXPECT_EQ(got.credentials, CredentialsState::ok);
    // At most kMaxHealthEntries upstreams are written, and an error is cut at kMaxErrorBytes.
    handover::HealthRecord many;
    many.at_ms = 1;
    for (size_t i = 0; i < handover::kMaxHealthEntries + 5; ++i) {
        handover::UpstreamHealth u;
        u.name = "127.0.0." + std::to_string(i % 250 + 1) + ":" + std::to_string(1000 + i);
        u.last_error = std::string(5000, ' ');
        many.upstreams.push_back(u);
    }
    ASSERT_TRUE(handover::parse_health(handover::serialize_health(many), got, error)) << error;
    EXPECT_EQ(got.upstreams.size(), handover::kMaxHealthEntries);
    EXPECT_EQ(got.upstreams[0].last_error.size(), handover::kMaxErrorBytes);
}

// KPRISM_HANDOVER_HEALTH names the descriptor right after the others, or nothing is taken; the
// variable never survives the call.
TEST(HandoverInherit, TheHealthDescriptor) {
    for (int fd : {3, 4, 5, 6})
        if (::fcntl(fd, F_GETFD) >= 0) GTEST_SKIP() << "descriptor " << fd << " is in use here";
    for (int fd : {3, 4, 5, 6}) ASSERT_EQ(::dup2(1, fd), fd);
    for (const char* bad : {"5", "7", "x", "", "6 "}) {
        ::setenv("KPRISM_HANDOVER", "1,1,1", 1);
        ::setenv("KPRISM_HANDOVER_HEALTH", bad, 1);
        std::string err;
        auto got = handover::inherited_fds(&err);
        EXPECT_EQ(got.size(), 3u) << bad;
        EXPECT_EQ(std::getenv("KPRISM_HANDOVER_HEALTH"), nullptr);
    }
    ::setenv("KPRISM_HANDOVER", "1,1,1", 1);
    ::setenv("KPRISM_HANDOVER_HEALTH", "6", 1);
    std::string err;
    auto got = handover::inherited_fds(&err);
    ASSERT_EQ(got.size(), 4u) << err;
    EXPECT_EQ(got[3].fd, 6);
    EXPECT_EQ(got[3].name, "handover-health");
    EXPECT_TRUE(handover::is_handover_name(got[3].name));
    EXPECT_EQ(std::getenv("KPRISM_HANDOVER_HEALTH"), nullptr);
    // Without KPRISM_HANDOVER the health variable is removed too.
    ::setenv("KPRISM_HANDOVER_HEALTH", "6", 1);
    EXPECT_TRUE(handover::inherited_fds(&err).empty());
    EXPECT_EQ(std::getenv("KPRISM_HANDOVER_HEALTH"), nullptr);
    for (int fd : {3, 4, 5, 6}) ::close(fd);
}
