// SPDX-License-Identifier: Apache-2.0
// Hostname endpoints through the real binary, resolved by a real DNS server (tests/harness/dns.h)
// in front of TLS stand-ins on 127.0.0.2 and 127.0.0.3 (one port): every address a checked upstream
// named by the hostname, the hostname as SNI and verified name, an address gained (checked before
// use) and lost (drained), a failed resolution that changes nothing, the cap, a silent server, a
// reload that removes and adds the name or an IP endpoint the name resolves to, refused ranges in
// an answer skipped, the limit counted on usable addresses, IPv4-mapped answers, the bound on
// addresses waiting to leave. (A restart's handover of a name's addresses: handover_test.cc.)
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "harness/apiserver.h"
#include "harness/dns.h"
#include "harness/harness.h"
#include "harness/pki.h"

using namespace it;

namespace {

const std::string kName = "api.kprism.test";

std::vector<std::string> tls_flags(const Pki& pki, std::vector<std::string> more = {}) {
    std::vector<std::string> a = {"--client-cert",    pki.client_pem, "--client-key",           pki.client_pem,
                                  "--ca-file",        pki.ca_cert,    "--health-interval",      "1s",
                                  "--health-timeout", "500ms",        "--health-fast-interval", "200ms",
                                  "--resolve-interval", "1s"};
    a.insert(a.end(), more.begin(), more.end());
    return a;
}

std::string zone(const std::vector<std::string>& a, const std::string& mode = "normal") {
    std::string list;
    for (const auto& x : a) list += (list.empty() ? "\"" : ", \"") + x + "\"";
    return R"({")" + kName + R"(": {"A": [)" + list + R"(], "mode": ")" + mode + R"("}})";
}

// The upstream name of an address of the hostname endpoint.
std::string label(const std::string& ip, int port) { return kName + "@" + ip + ":" + std::to_string(port); }

// n client connections through kprism, each opened and closed at once: each counts once in the
// connections_total of the upstream it was sent to.
void connect_and_close(int port, int n) {
    for (int i = 0; i < n; ++i) {
        int fd = connect_to(port);
        EXPECT_GE(fd, 0);
        if (fd >= 0) ::close(fd);
    }
}

long connections_total(int admin_port, const std::string& upstream) {
    std::string m = body_of(http_get(admin_port, "/metrics"));
    std::string key = "kprism_upstream_connections_total{upstream=\"" + upstream + "\"} ";
    size_t at = m.find(key);
    return at == std::string::npos ? -1 : std::stol(m.substr(at + key.size()));
}

// Where the tests of a name's changing answer start: the name resolves to 127.0.0.2 only, an
// apiserver listens there, kprism (drain_timeout 400ms) has it up and one client connection on it.
struct OneAddressWithAConnection {
    Pki pki;
    DnsServer dns;
    const int port = free_port();
    Apiserver a{pki, "a", false, "127.0.0.2", port};
    const std::string la = label("127.0.0.2", port), lb = label("127.0.0.3", port);
    std::optional<Kprism> k;
    int on_a = -1;

    void start() {
        dns.set_zone(zone({"127.0.0.2"}));
        k.emplace(std::vector<std::string>{kName + ":" + std::to_string(port)},
                  tls_flags(pki, {"--drain-timeout", "400ms"}), Spawn{{dns.dns_env()}, {}});
        ASSERT_TRUE(k->wait_output("msg=\"upstream up\" upstream=" + la)) << k->output();
        on_a = connect_to(k->port);
        ASSERT_GE(on_a, 0);
        ASSERT_TRUE(eventually([&] { return connections_total(k->admin_port, la) == 1; }));
    }
};

}  // namespace

// One name, two addresses: two upstreams, each checked (the probe's SNI is the name, and the
// certificate has no IP SAN for 127.0.0.2 or .3, so it was verified against the name), each
// taking client connections, named "NAME@ADDRESS:PORT" in the log, /status and /metrics.
TEST(Hostname, EveryAddressIsACheckedUpstreamNamedByTheName) {
    Pki pki;
    DnsServer dns;
    const int port = free_port();
    Apiserver a(pki, "a", false, "127.0.0.2", port), b(pki, "b", false, "127.0.0.3", port);
    dns.set_zone(zone({"127.0.0.3", "127.0.0.2"}));
    Kprism k({kName + ":" + std::to_string(port)}, tls_flags(pki), Spawn{{dns.dns_env()}, {}});
    for (const char* ip : {"127.0.0.2", "127.0.0.3"}) {
        EXPECT_TRUE(k.wait_output("msg=\"endpoint address added; checked before use\" upstream=" + label(ip, port)))
            << k.output();
        EXPECT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + label(ip, port))) << k.output();
    }
    EXPECT_TRUE(k.wait_output("msg=\"endpoint resolved\" upstream=" + kName + ":" + std::to_string(port) +
                              " addresses=127.0.0.2:" + std::to_string(port) + ",127.0.0.3:" + std::to_string(port)))
        << k.output();
    for (auto* s : {&a, &b}) {
        EXPECT_TRUE(s->proc->wait_output("peer=\"system:node:test\" sni=" + kName)) << s->proc->output();
        EXPECT_EQ(s->proc->count_output("handshake failed"), 0u) << s->proc->output();
    }
    std::string status = body_of(http_get(k.admin_port, "/status"));
    for (const char* ip : {"127.0.0.2", "127.0.0.3"})
        EXPECT_NE(status.find("\"address\":\"" + label(ip, port) + "\""), std::string::npos) << status;
    EXPECT_NE(status.find("\"ready\":true"), std::string::npos) << status;
    // Client connections go to both (random policy: all 24 on one has odds 2^-23).
    std::vector<int> held;
    for (int i = 0; i < 24; ++i) held.push_back(connect_to(k.port));
    EXPECT_TRUE(eventually([&] {
        return connections_total(k.admin_port, label("127.0.0.2", port)) > 0 &&
               connections_total(k.admin_port, label("127.0.0.3", port)) > 0;
    }))
        << body_of(http_get(k.admin_port, "/metrics"));
    for (int fd : held)
        if (fd >= 0) ::close(fd);
    Result st = run({kprism_bin(), "status", "--health-port", std::to_string(k.admin_port)});
    EXPECT_EQ(st.code, 0) << st.output;
    EXPECT_NE(st.output.find(label("127.0.0.2", port)), std::string::npos) << st.output;
    EXPECT_NE(st.output.find(label("127.0.0.3", port)), std::string::npos) << st.output;
}

// The verified name is the hostname: an apiserver whose certificate does not carry it fails its
// checks (tls_failed) while the one beside it that does is up.
TEST(Hostname, VerifiedNameIsTheHostname) {
    Pki pki;
    DnsServer dns;
    const int port = free_port();
    Apiserver good(pki, "good", false, "127.0.0.2", port), wrong(pki, "wrong", true, "127.0.0.3", port);
    dns.set_zone(zone({"127.0.0.2", "127.0.0.3"}));
    Kprism k({kName + ":" + std::to_string(port)}, tls_flags(pki), Spawn{{dns.dns_env()}, {}});
    EXPECT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + label("127.0.0.2", port))) << k.output();
    EXPECT_TRUE(k.wait_output("msg=\"upstream down\" upstream=" + label("127.0.0.3", port))) << k.output();
    EXPECT_TRUE(wrong.proc->wait_output("sni=" + kName)) << wrong.proc->output();
    std::string status = body_of(http_get(k.admin_port, "/status"));
    size_t at = status.find("\"address\":\"" + label("127.0.0.3", port) + "\"");
    ASSERT_NE(at, std::string::npos) << status;
    EXPECT_NE(status.find("\"last_result\":\"tls_failed\"", at), std::string::npos) << status;
}

// A name that gains an address: a new upstream, checked before it takes a connection. One that
// loses an address: that upstream leaves once the other is up, its connections drain
// (drain_timeout). A resolution that fails (SERVFAIL) or times out changes nothing.
TEST(Hostname, AnAddressGainedIsCheckedOneLostDrains) {
    OneAddressWithAConnection s;
    ASSERT_NO_FATAL_FAILURE(s.start());
    Apiserver b(s.pki, "b", false, "127.0.0.3", s.port);  // not in the answer yet
    Kprism& k = *s.k;
    DnsServer& dns = s.dns;
    const std::string &la = s.la, &lb = s.lb;
    const int on_a = s.on_a;

    // Failing answers keep what there is.
    dns.set_zone(zone({}, "servfail"));
    EXPECT_TRUE(k.wait_output("msg=\"cannot resolve endpoint; will retry\" upstream=" + kName + ":" +
                              std::to_string(s.port) + " error=failed"))
        << k.output();
    EXPECT_NE(k.output().find("addresses_kept=1"), std::string::npos) << k.output();
    EXPECT_TRUE(still_open(on_a));

    // Checked before use: while the new address fails its checks, no client connection goes there.
    b.set("500");
    dns.set_zone(zone({"127.0.0.2", "127.0.0.3"}));
    ASSERT_TRUE(k.wait_output("msg=\"endpoint address added; checked before use\" upstream=" + lb)) << k.output();
    connect_and_close(k.port, 12);
    EXPECT_TRUE(eventually([&] { return connections_total(k.admin_port, la) == 13; }));
    EXPECT_EQ(connections_total(k.admin_port, lb), 0);
    b.set("200");
    ASSERT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + lb)) << k.output();

    dns.set_zone(zone({"127.0.0.3"}));
    EXPECT_TRUE(k.wait_output("msg=\"endpoint address no longer resolved; its connections drain\" upstream=" + la))
        << k.output();
    int err = -1;
    recv_until_eof(on_a, &err, 3000ms);  // closed by the drain
    EXPECT_NE(err, ETIMEDOUT) << "the lost address's connection was not closed by its drain";
    ::close(on_a);
    std::string status = body_of(http_get(k.admin_port, "/status"));
    EXPECT_EQ(status.find("\"address\":\"" + la + "\""), std::string::npos) << status;
    EXPECT_NE(status.find("\"address\":\"" + lb + "\""), std::string::npos) << status;
    connect_and_close(k.port, 6);
    EXPECT_TRUE(eventually([&] { return connections_total(k.admin_port, lb) >= 6; }));
}

// A name whose every address is replaced at once: the old one stays, and its connections with
// it, until a new one is up, so kprism never has nothing to send to (discovery's removal rule).
TEST(Hostname, ReplacedAddressesLeaveOnceANewOneIsUp) {
    OneAddressWithAConnection s;
    ASSERT_NO_FATAL_FAILURE(s.start());
    Kprism& k = *s.k;
    DnsServer& dns = s.dns;
    const std::string &la = s.la, &lb = s.lb;
    const int on_a = s.on_a;
    dns.set_zone(zone({"127.0.0.3"}));  // nothing listens there yet
    EXPECT_TRUE(k.wait_output("msg=\"endpoint address no longer resolved; removal waits until an upstream that "
                              "stays is up\" upstream=" + la))
        << k.output();
    // Waiting: still listed, still taking connections, the one it has kept open. Two more
    // resolutions (resolve_interval 1s) give it two chances to be dropped wrongly.
    const size_t asked = dns.queries(kName, "udp");
    EXPECT_TRUE(eventually([&] { return dns.queries(kName, "udp") >= asked + 4; })) << dns.output();  // A and AAAA, twice
    std::string status = body_of(http_get(k.admin_port, "/status"));
    EXPECT_NE(status.find("\"address\":\"" + la + "\""), std::string::npos) << status;
    EXPECT_TRUE(still_open(on_a));
    EXPECT_EQ(k.count_output("its connections drain"), 0u) << k.output();
    int fd = connect_to(k.port);
    EXPECT_GE(fd, 0);
    EXPECT_TRUE(eventually([&] { return connections_total(k.admin_port, la) == 2; }))
        << body_of(http_get(k.admin_port, "/metrics"));
    if (fd >= 0) ::close(fd);
    Apiserver b(s.pki, "b", false, "127.0.0.3", s.port);
    EXPECT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + lb, 8000ms)) << k.output();
    EXPECT_TRUE(k.wait_output("msg=\"endpoint address no longer resolved; its connections drain\" upstream=" + la))
        << k.output();
    int err = -1;
    recv_until_eof(on_a, &err, 3000ms);  // closed by the drain (drain_timeout 400ms)
    EXPECT_NE(err, ETIMEDOUT) << "the lost address's connection was not closed by its drain";
    ::close(on_a);
}

// The many-address and timeout answers through the daemon: the cap, in address order, with one
// warning; a silent server is a timeout after which the addresses stay.
TEST(Hostname, ManyAddressesAreCappedAndASilentServerChangesNothing) {
    DnsServer dns;
    std::vector<std::string> many;
    for (int i = 40; i >= 1; --i) many.push_back("127.77.0." + std::to_string(i));  // nothing listens there
    dns.set_zone(zone(many));
    Kprism k({kName + ":6443"}, {"--resolve-interval", "1s"}, Spawn{{dns.dns_env()}, {}});
    EXPECT_TRUE(k.wait_output("msg=\"endpoint resolves to more usable addresses than the limit; keeping the first "
                              "in address order\" upstream=" + kName + ":6443 left_out=24 limit=16"))
        << k.output();
    EXPECT_TRUE(k.wait_output("upstream=" + kName + "@127.77.0.16:6443")) << k.output();
    EXPECT_EQ(k.output().find(kName + "@127.77.0.17:6443"), std::string::npos) << k.output();
    EXPECT_GE(dns.queries(kName, "tcp"), 1u) << "40 A records do not fit in 512 bytes: asked again over TCP";
    EXPECT_EQ(k.count_output("more usable addresses than the limit"), 1u);
    dns.set_zone(zone(many, "silent"));
    EXPECT_TRUE(k.wait_output("error=timeout", 12000ms)) << k.output();
    std::string status = body_of(http_get(k.admin_port, "/status"));
    EXPECT_NE(status.find("\"address\":\"" + kName + "@127.77.0.1:6443\""), std::string::npos) << status;
}

// A reload that replaces the name by one of its addresses keeps that address (now an IP endpoint
// of its own, renamed) and drains the other; one that brings the name back resolves it again.
TEST(Hostname, ReloadRemovesAndAddsAName) {
    Pki pki;
    DnsServer dns;
    const int port = free_port();
    Apiserver a(pki, "a", false, "127.0.0.2", port), b(pki, "b", false, "127.0.0.3", port);
    dns.set_zone(zone({"127.0.0.2", "127.0.0.3"}));
    char tmpl[] = "/tmp/kprism-hostname-XXXXXX";
    ::close(mkstemp(tmpl));
    const std::string cf = tmpl;
    auto write = [&](const std::string& endpoint) {
        std::ofstream(cf + ".tmp") << "endpoints = [\"" << endpoint << "\"]\ndrain_timeout = \"400ms\"\n";
        std::rename((cf + ".tmp").c_str(), cf.c_str());
    };
    const std::string name = kName + ":" + std::to_string(port), ip2 = "127.0.0.2:" + std::to_string(port);
    write(name);
    Kprism k({}, tls_flags(pki, {"--config", cf}), Spawn{{dns.dns_env()}, {}});
    ASSERT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + label("127.0.0.3", port))) << k.output();
    ASSERT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + label("127.0.0.2", port))) << k.output();
    write(ip2);
    k.signal(SIGHUP);
    EXPECT_TRUE(k.wait_output("msg=\"endpoint removed; its connections drain\" upstream=" + label("127.0.0.3", port)))
        << k.output();
    EXPECT_TRUE(k.wait_output("endpoint_removed=" + name)) << k.output();
    std::string status = body_of(http_get(k.admin_port, "/status"));
    EXPECT_NE(status.find("\"address\":\"" + ip2 + "\",\"zone\":\"\",\"source\":\"static\",\"state\":\"up\""),
              std::string::npos)
        << status;
    EXPECT_EQ(status.find(kName + "@"), std::string::npos) << status;
    write(name);
    k.signal(SIGHUP);
    EXPECT_TRUE(k.wait_output("endpoint_added=" + name)) << k.output();
    EXPECT_TRUE(k.wait_output("msg=\"endpoint removed; its connections drain\" upstream=" + ip2)) << k.output();
    EXPECT_TRUE(eventually([&] { return k.count_output("msg=\"upstream up\" upstream=" + label("127.0.0.2", port)) == 2; }))
        << k.output();
    ::unlink(cf.c_str());
}

// The other way round: an IP endpoint removed by a reload while a name that stays resolves to its
// address. The upstream becomes the name's address with its state and connections: no drain, no
// moment without an upstream, no check before use.
TEST(Hostname, RemovedIpEndpointStaysAsTheNamesAddress) {
    Pki pki;
    DnsServer dns;
    const int port = free_port();
    Apiserver a(pki, "a", false, "127.0.0.2", port);
    dns.set_zone(zone({"127.0.0.2"}));
    char tmpl[] = "/tmp/kprism-hostname-XXXXXX";
    ::close(mkstemp(tmpl));
    const std::string cf = tmpl;
    auto write = [&](const std::string& endpoints) {
        std::ofstream(cf + ".tmp") << "endpoints = [" << endpoints << "]\ndrain_timeout = \"300ms\"\n";
        std::rename((cf + ".tmp").c_str(), cf.c_str());
    };
    const std::string name = kName + ":" + std::to_string(port), ip2 = "127.0.0.2:" + std::to_string(port);
    // The stand-in's certificate names the hostname, not 127.0.0.2: the IP endpoint verifies the name.
    write("\"" + name + "\", { address = \"" + ip2 + "\", server_name = \"" + kName + "\" }");
    Kprism k({}, tls_flags(pki, {"--config", cf}), Spawn{{dns.dns_env()}, {}});
    ASSERT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + ip2)) << k.output();
    ASSERT_TRUE(k.wait_output("msg=\"endpoint resolved\" upstream=" + name + " addresses=" + ip2)) << k.output();
    const int fd = connect_to(k.port);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(eventually([&] { return connections_total(k.admin_port, ip2) == 1; }));
    write("\"" + name + "\"");
    k.signal(SIGHUP);
    EXPECT_TRUE(k.wait_output("msg=\"endpoint removed; its address stays as an address of a name that resolves to "
                              "it\" upstream=" + label("127.0.0.2", port) + " was=" + ip2 + " connections=1"))
        << k.output();
    std::string status = body_of(http_get(k.admin_port, "/status"));
    EXPECT_NE(status.find("\"address\":\"" + label("127.0.0.2", port) + "\""), std::string::npos) << status;
    EXPECT_NE(status.find("\"state\":\"up\""), std::string::npos) << status;
    // Past drain_timeout (300ms) the client connection is still open: nothing to read, no EOF.
    pollfd p{fd, POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 800), 0) << "the connection was closed: " << k.output();
    EXPECT_EQ(k.count_output("its connections drain"), 0u) << k.output();
    EXPECT_EQ(k.count_output("endpoint address added; checked before use"), 0u) << k.output();
    ::close(fd);
    ::unlink(cf.c_str());
}

// A name without an address is one row in /status, `kprism status` and /readyz?verbose (unknown,
// with why), and none in the metrics; once it resolves, its addresses take its place.
TEST(Hostname, UnresolvedNameIsShownWithWhy) {
    TcpServer up(TcpServer::echo);
    DnsServer dns;
    dns.set_zone(R"({")" + kName + R"(": {"mode": "nxdomain"}})");
    const std::string name = kName + ":" + std::to_string(up.port());
    Kprism k({name, up.endpoint()}, {"--resolve-interval", "1s"}, Spawn{{dns.dns_env()}, {}});
    ASSERT_TRUE(k.wait_output("msg=\"cannot resolve endpoint; will retry\" upstream=" + name + " error=no_such_name"))
        << k.output();
    std::string status = body_of(http_get(k.admin_port, "/status"));
    EXPECT_NE(status.find("{\"address\":\"" + name + "\",\"zone\":\"\",\"source\":\"static\",\"state\":\"unknown\""),
              std::string::npos)
        << status;
    EXPECT_NE(status.find("\"last_error\":\"not resolved: no_such_name: "), std::string::npos) << status;
    EXPECT_NE(body_of(http_get(k.admin_port, "/readyz?verbose")).find("[-]" + name + " unknown"), std::string::npos);
    EXPECT_EQ(body_of(http_get(k.admin_port, "/metrics")).find("upstream=\"" + name + "\""), std::string::npos);
    Result st = run({kprism_bin(), "status", "--health-port", std::to_string(k.admin_port)});
    EXPECT_NE(st.output.find(name), std::string::npos) << st.output;
    EXPECT_NE(st.output.find("not resolved: no_such_name"), std::string::npos) << st.output;
    dns.set_zone(zone({"127.0.0.2"}));
    ASSERT_TRUE(k.wait_output("msg=\"endpoint resolved\" upstream=" + name, 4000ms)) << k.output();
    status = body_of(http_get(k.admin_port, "/status"));
    EXPECT_EQ(status.find("{\"address\":\"" + name + "\""), std::string::npos) << status;
    EXPECT_NE(status.find("{\"address\":\"" + label("127.0.0.2", up.port()) + "\""), std::string::npos) << status;
    EXPECT_EQ(status.find("not resolved"), std::string::npos) << status;
}

// A name's answer goes through the address rules discovery uses, loopback aside: 0.0.0.0 (what a
// DNS sinkhole answers; Linux connects it to loopback) and a link-local address are
// skipped with one warning each, naming the name and the address, and not again on each
// resolution; the good address beside them is the one upstream.
TEST(Hostname, RefusedRangesInTheAnswerAreSkippedWithOneWarning) {
    const std::string link_local = "169.254.169.254";  // off-host: refused by the address rules, never connected
    Pki pki;
    DnsServer dns;
    const int port = free_port();
    Apiserver a(pki, "a", false, "127.0.0.2", port);
    dns.set_zone(zone({"0.0.0.0", link_local, "127.0.0.2"}));
    const std::string name = kName + ":" + std::to_string(port);
    Kprism k({name}, tls_flags(pki), Spawn{{dns.dns_env()}, {}});
    const std::string warn = "msg=\"endpoint resolves to an address in a refused range; skipping that address\" upstream=" + name;
    EXPECT_TRUE(k.wait_output(warn + " address=0.0.0.0:" + std::to_string(port) + " range=unspecified")) << k.output();
    EXPECT_TRUE(k.wait_output(warn + " address=" + link_local + ":" + std::to_string(port) + " range=link-local"))
        << k.output();
    ASSERT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + label("127.0.0.2", port))) << k.output();
    EXPECT_TRUE(k.wait_output("msg=\"endpoint resolved\" upstream=" + name + " addresses=127.0.0.2:" +
                              std::to_string(port)))
        << k.output();
    // Two more resolutions (resolve_interval 1s) with the same answer: no new warning.
    const size_t asked = dns.queries(kName, "udp");
    EXPECT_TRUE(eventually([&] { return dns.queries(kName, "udp") >= asked + 4; })) << dns.output();  // A and AAAA, twice
    EXPECT_EQ(k.count_output("in a refused range"), 2u) << k.output();
    std::string status = body_of(http_get(k.admin_port, "/status"));
    EXPECT_NE(status.find("\"address\":\"" + label("127.0.0.2", port) + "\""), std::string::npos) << status;
    EXPECT_EQ(status.find("0.0.0.0"), std::string::npos) << status;
    EXPECT_EQ(status.find(link_local), std::string::npos) << status;
    EXPECT_EQ(body_of(http_get(k.admin_port, "/metrics")).find(link_local), std::string::npos);
    // A changed answer that brings a refused address back after it was gone warns again.
    dns.set_zone(zone({"127.0.0.2"}));
    const size_t asked2 = dns.queries(kName, "udp");
    EXPECT_TRUE(eventually([&] { return dns.queries(kName, "udp") >= asked2 + 4; })) << dns.output();
    dns.set_zone(zone({"0.0.0.0", "127.0.0.2"}));
    EXPECT_TRUE(eventually([&] { return k.count_output("in a refused range") == 3u; })) << k.output();
}

// The limit of 16 addresses a name counts the usable ones: an answer that leads with 20 refused
// addresses (0.0.0.0/8 sorts first) still gives its one good address. And ::ffff:127.0.0.2 in the
// AAAA answer is 127.0.0.2 of the A answer: one upstream, not two to the same host.
TEST(Hostname, LimitCountsUsableAddressesAndMappedIPv6IsIPv4) {
    Pki pki;
    DnsServer dns;
    const int port = free_port();
    Apiserver a(pki, "a", false, "127.0.0.2", port);
    std::vector<std::string> v4;
    for (int i = 1; i <= 20; ++i) v4.push_back("0.0.0." + std::to_string(i));
    v4.push_back("127.0.0.2");
    std::string list;
    for (const auto& x : v4) list += (list.empty() ? "\"" : ", \"") + x + "\"";
    dns.set_zone(R"({")" + kName + R"(": {"A": [)" + list + R"(], "AAAA": ["::ffff:127.0.0.2"], "mode": "normal"}})");
    const std::string name = kName + ":" + std::to_string(port);
    Kprism k({name}, tls_flags(pki), Spawn{{dns.dns_env()}, {}});
    ASSERT_TRUE(k.wait_output("msg=\"upstream up\" upstream=" + label("127.0.0.2", port))) << k.output();
    EXPECT_TRUE(k.wait_output("msg=\"endpoint resolved\" upstream=" + name + " addresses=127.0.0.2:" +
                              std::to_string(port) + "\n"))
        << k.output();
    EXPECT_EQ(k.output().find("more usable addresses than the limit"), std::string::npos) << k.output();
    std::string status = body_of(http_get(k.admin_port, "/status"));
    EXPECT_EQ(status.find("ffff"), std::string::npos) << status;
    EXPECT_EQ(k.count_output("msg=\"endpoint address added; checked before use\""), 1u) << k.output();
}

// While no upstream is up, the addresses a name loses wait to leave; an answer that changes at
// every resolution holds at most kMaxNameAddresses (16) of them per name: past that the oldest
// leave at once. Three answers of 16 addresses each, nothing listening: after the third, the
// first answer's 16 are gone, the second's wait and the third's are checked (32 upstreams, not 48).
TEST(Hostname, AddressesWaitingToLeaveAreBoundedPerName) {
    DnsServer dns;
    const int port = free_port();  // nothing listens: no upstream comes up
    auto set = [](int third) {
        std::vector<std::string> a;
        for (int i = 1; i <= 16; ++i) a.push_back("127.0." + std::to_string(third) + "." + std::to_string(i));
        return a;
    };
    const std::string name = kName + ":" + std::to_string(port), p = ":" + std::to_string(port);
    dns.set_zone(zone(set(1)));
    Kprism k({name}, {"--resolve-interval", "1s"}, Spawn{{dns.dns_env()}, {}});
    for (int third : {1, 2, 3}) {
        if (third > 1) dns.set_zone(zone(set(third)));
        ASSERT_TRUE(k.wait_output("msg=\"endpoint resolved\" upstream=" + name + " addresses=127.0." +
                                      std::to_string(third) + ".1" + p + ",",
                                  6000ms))
            << k.output();
    }
    EXPECT_TRUE(eventually([&] { return k.count_output("removed at once: its name has too many addresses") == 16u; }))
        << k.output();
    for (int i = 1; i <= 16; ++i)
        EXPECT_NE(k.output().find("msg=\"endpoint address no longer resolved; removed at once: its name has too many "
                                  "addresses waiting to leave\" upstream=" + label("127.0.1." + std::to_string(i), port)),
                  std::string::npos)
            << i;
    std::string status = body_of(http_get(k.admin_port, "/status"));
    for (int third : {1, 2, 3})
        for (int i = 1; i <= 16; ++i) {
            const bool held = status.find("\"address\":\"" + label("127.0." + std::to_string(third) + "." +
                                                                   std::to_string(i), port) + "\"") != std::string::npos;
            EXPECT_EQ(held, third != 1) << third << "." << i << " " << status;
        }
    EXPECT_EQ(k.count_output("every slot is held"), 0u) << k.output();
}
