// SPDX-License-Identifier: Apache-2.0
// The c-ares resolver on a libuv loop against a real local DNS server (tests/harness/dns_server.py):
// several addresses, NXDOMAIN, NODATA, SERVFAIL, a cap, a silent server, truncation and TCP, a name
// changing between resolutions, /etc/hosts, cancel and close freeing every handle.
#include "kprism/base/resolver.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kprism/base/address.h"

namespace kprism {
namespace {

// The DNS server as a child process on 127.0.0.N, its zone in a temporary file.
class DnsServer {
public:
    explicit DnsServer(const std::string& address = "127.0.0.1") {
        char dir[] = "/tmp/kprism-dns-XXXXXX";
        dir_ = mkdtemp(dir);
        zone_ = dir_ + "/zone.json";
        log_ = dir_ + "/log";
        set_zone("{}");
        pid_ = fork();
        if (pid_ == 0) {
            FILE* f = std::freopen(log_.c_str(), "w", stdout);
            (void)f;
            execl("/usr/bin/python3", "python3", "tests/harness/dns_server.py", address.c_str(), zone_.c_str(), nullptr);
            _exit(127);
        }
        for (int i = 0; i < 200 && servers_.empty(); ++i) {
            std::string out = log();
            auto at = out.find("dns: listening on ");
            if (at != std::string::npos && out.find('\n', at) != std::string::npos)
                servers_ = out.substr(at + 18, out.find('\n', at) - at - 18);
            else
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
    }
    ~DnsServer() {
        if (pid_ > 0) {
            kill(pid_, SIGKILL);
            waitpid(pid_, nullptr, 0);
        }
        std::remove(zone_.c_str());
        std::remove(log_.c_str());
        rmdir(dir_.c_str());
    }
    void set_zone(const std::string& json) {
        std::ofstream(zone_ + ".tmp") << json;
        std::rename((zone_ + ".tmp").c_str(), zone_.c_str());
    }
    std::string log() const {
        std::ifstream f(log_);
        std::stringstream ss;
        ss << f.rdbuf();
        return ss.str();
    }
    const std::string& servers() const { return servers_; }  // "127.0.0.1:PORT"; empty if it did not start

private:
    pid_t pid_ = -1;
    std::string dir_, zone_, log_, servers_;
};

std::vector<std::string> ips(const ResolveResult& r) {
    std::vector<std::string> out;
    for (auto ss : r.addresses) {
        std::string s = sockaddr_str(ss);  // "10.0.0.1:0" / "[fd00::1]:0"
        s = s.substr(0, s.rfind(':'));
        if (s.front() == '[') s = s.substr(1, s.size() - 2);
        out.push_back(s);
    }
    return out;
}

// One server for the suite (a Python start is slow); each test sets the zone it needs.
class ResolverTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() { server_ = new DnsServer; }
    static void TearDownTestSuite() {
        delete server_;
        server_ = nullptr;
    }
    void SetUp() override {
        uv_loop_init(&loop_);
        ASSERT_FALSE(dns_.servers().empty()) << "the DNS server did not start: " << dns_.log();
    }
    void TearDown() override {
        if (resolver_) resolver_->close();
        uv_run(&loop_, UV_RUN_DEFAULT);
        if (resolver_) {
            EXPECT_EQ(resolver_->allocated(), 0u) << "every resolution freed from its close callbacks";
        }
        resolver_.reset();
        EXPECT_EQ(uv_loop_close(&loop_), 0) << "no handle left on the loop";
    }
    Resolver& resolver(uint64_t timeout_ms = 3000, size_t max = 16) {
        resolver_ = std::make_unique<Resolver>(&loop_, Resolver::Options{timeout_ms, max, dns_.servers()});
        return *resolver_;
    }
    // Resolves `host` and runs the loop until every handle of the resolution has closed.
    ResolveResult resolve(const std::string& host, uint64_t* elapsed_ms = nullptr) {
        std::optional<ResolveResult> got;
        std::string err;
        const uint64_t t0 = uv_now(&loop_);
        uint64_t id = resolver_->resolve(host, [&](const ResolveResult& r) { got = r; }, err);
        EXPECT_NE(id, 0u) << err;
        uv_run(&loop_, UV_RUN_DEFAULT);
        if (elapsed_ms) *elapsed_ms = uv_now(&loop_) - t0;
        EXPECT_TRUE(got.has_value()) << "done was called";
        EXPECT_EQ(resolver_->allocated(), 0u);
        return got.value_or(ResolveResult{ResolveError::failed, "no callback", {}, 0});
    }

    static inline DnsServer* server_ = nullptr;
    DnsServer& dns_ = *server_;
    uv_loop_t loop_{};
    std::unique_ptr<Resolver> resolver_;
};

TEST_F(ResolverTest, EveryAddressOfBothFamiliesInOrder) {
    dns_.set_zone(R"({"api.kprism.test": {"A": ["10.0.0.2", "10.0.0.1", "10.0.0.2"], "AAAA": ["fd00::1"]}})");
    resolver();
    ResolveResult r = resolve("api.kprism.test");
    EXPECT_EQ(r.error, ResolveError::none) << r.detail;
    EXPECT_EQ(ips(r), (std::vector<std::string>{"10.0.0.1", "10.0.0.2", "fd00::1"}));
    EXPECT_EQ(r.total, 3u) << "duplicates counted once";
}

TEST_F(ResolverTest, NxdomainIsNoSuchName) {
    dns_.set_zone(R"({"gone.kprism.test": {"mode": "nxdomain"}})");
    resolver();
    ResolveResult r = resolve("gone.kprism.test");
    EXPECT_EQ(r.error, ResolveError::no_such_name) << r.detail;
    EXPECT_TRUE(r.addresses.empty());
    EXPECT_FALSE(r.detail.empty());
}

TEST_F(ResolverTest, NodataIsNoAddress) {
    dns_.set_zone(R"({"empty.kprism.test": {"mode": "nodata"}})");
    resolver();
    ResolveResult r = resolve("empty.kprism.test");
    // c-ares goes on to the search domains after NODATA; whatever they say, no address and an error.
    EXPECT_TRUE(r.error == ResolveError::no_address || r.error == ResolveError::no_such_name)
        << resolve_error_name(r.error) << ": " << r.detail;
    EXPECT_TRUE(r.addresses.empty());
}

TEST_F(ResolverTest, OnlyAaaaWhenThereIsNoA) {
    dns_.set_zone(R"({"v6.kprism.test": {"AAAA": ["fd00::2", "fd00::1"]}})");
    resolver();
    ResolveResult r = resolve("v6.kprism.test");
    EXPECT_EQ(r.error, ResolveError::none) << r.detail;
    EXPECT_EQ(ips(r), (std::vector<std::string>{"fd00::1", "fd00::2"}));
}

TEST_F(ResolverTest, ServfailIsFailed) {
    dns_.set_zone(R"({"broken.kprism.test": {"mode": "servfail"}})");
    resolver();
    ResolveResult r = resolve("broken.kprism.test");
    EXPECT_TRUE(r.addresses.empty());
    EXPECT_NE(r.error, ResolveError::none);
}

TEST_F(ResolverTest, ManyAddressesAreCappedInAddressOrderAfterTcp) {
    std::string a;
    for (int i = 40; i >= 1; --i) a += (a.empty() ? "\"10.0.1." : ", \"10.0.1.") + std::to_string(i) + "\"";
    dns_.set_zone(R"({"many.kprism.test": {"A": [)" + a + "]}}");
    resolver(3000, 16);
    ResolveResult r = resolve("many.kprism.test");
    EXPECT_EQ(r.error, ResolveError::none) << r.detail;
    EXPECT_EQ(r.total, 40u);
    ASSERT_EQ(r.addresses.size(), 16u);
    EXPECT_EQ(ips(r).front(), "10.0.1.1");
    EXPECT_EQ(ips(r).back(), "10.0.1.16");
    // 40 A records do not fit in 512 bytes: the server truncates, c-ares asks again over TCP.
    EXPECT_NE(dns_.log().find("dns: query many.kprism.test A tcp"), std::string::npos) << dns_.log();
}

TEST_F(ResolverTest, TruncatedReplyIsAskedAgainOverTcp) {
    dns_.set_zone(R"({"tc.kprism.test": {"A": ["10.0.0.7"], "mode": "truncate"}})");
    resolver();
    ResolveResult r = resolve("tc.kprism.test");
    EXPECT_EQ(r.error, ResolveError::none) << r.detail;
    EXPECT_EQ(ips(r), (std::vector<std::string>{"10.0.0.7"}));
    EXPECT_NE(dns_.log().find("dns: query tc.kprism.test A udp"), std::string::npos) << dns_.log();
    EXPECT_NE(dns_.log().find("dns: query tc.kprism.test A tcp"), std::string::npos) << dns_.log();
}

TEST_F(ResolverTest, SilentServerTimesOutWithinTheBound) {
    dns_.set_zone(R"({"silent.kprism.test": {"mode": "silent"}})");
    resolver(600);
    uint64_t elapsed = 0;
    ResolveResult r = resolve("silent.kprism.test", &elapsed);
    EXPECT_EQ(r.error, ResolveError::timeout) << r.detail;
    EXPECT_GE(elapsed, 550u);
    EXPECT_LE(elapsed, 1500u) << "the whole resolution is bounded, retries included";
}

TEST_F(ResolverTest, NameGainingAndLosingAnAddress) {
    resolver();
    dns_.set_zone(R"({"moving.kprism.test": {"A": ["10.0.0.1"]}})");
    EXPECT_EQ(ips(resolve("moving.kprism.test")), (std::vector<std::string>{"10.0.0.1"}));
    dns_.set_zone(R"({"moving.kprism.test": {"A": ["10.0.0.1", "10.0.0.2"]}})");
    EXPECT_EQ(ips(resolve("moving.kprism.test")), (std::vector<std::string>{"10.0.0.1", "10.0.0.2"}));
    dns_.set_zone(R"({"moving.kprism.test": {"A": ["10.0.0.2"]}})");
    EXPECT_EQ(ips(resolve("moving.kprism.test")), (std::vector<std::string>{"10.0.0.2"}));
}

TEST_F(ResolverTest, EtcHostsIsReadFirst) {
    resolver();
    ResolveResult r = resolve("localhost");  // /etc/hosts; the test server knows no such name
    EXPECT_EQ(r.error, ResolveError::none) << r.detail;
    ASSERT_FALSE(r.addresses.empty());
    EXPECT_TRUE(is_loopback(r.addresses.front()));
    EXPECT_EQ(dns_.log().find("dns: query localhost"), std::string::npos) << dns_.log();
}

TEST_F(ResolverTest, CancelledNeverCallsBackAndFreesItsHandles) {
    dns_.set_zone(R"({"silent.kprism.test": {"mode": "silent"}})");
    Resolver& res = resolver(2000);
    bool called = false;
    std::string err;
    uint64_t id = res.resolve("silent.kprism.test", [&](const ResolveResult&) { called = true; }, err);
    ASSERT_NE(id, 0u) << err;
    uv_run(&loop_, UV_RUN_NOWAIT);  // the query is out
    res.cancel(id);
    res.cancel(id);  // twice: harmless
    res.cancel(12345);
    uv_run(&loop_, UV_RUN_DEFAULT);
    EXPECT_FALSE(called);
    EXPECT_EQ(res.allocated(), 0u);
}

TEST_F(ResolverTest, CloseCancelsEverythingAndRefusesMore) {
    dns_.set_zone(R"({"silent.kprism.test": {"mode": "silent"}, "api.kprism.test": {"A": ["10.0.0.1"]}})");
    Resolver& res = resolver(2000);
    int called = 0;
    std::string err;
    EXPECT_NE(res.resolve("silent.kprism.test", [&](const ResolveResult&) { ++called; }, err), 0u);
    EXPECT_NE(res.resolve("api.kprism.test", [&](const ResolveResult&) { ++called; }, err), 0u);
    EXPECT_EQ(res.allocated(), 2u);
    res.close();
    res.close();
    EXPECT_EQ(res.resolve("api.kprism.test", [&](const ResolveResult&) { ++called; }, err), 0u);
    EXPECT_FALSE(err.empty());
    uv_run(&loop_, UV_RUN_DEFAULT);
    EXPECT_EQ(called, 0);
    EXPECT_EQ(res.allocated(), 0u);
}

TEST_F(ResolverTest, ResolvingAgainFromTheCallback) {
    dns_.set_zone(R"({"api.kprism.test": {"A": ["10.0.0.1"]}})");
    Resolver& res = resolver();
    int called = 0;
    std::string err;
    std::function<void(const ResolveResult&)> again = [&](const ResolveResult& r) {
        EXPECT_EQ(r.error, ResolveError::none);
        if (++called < 3) {
            EXPECT_NE(res.resolve("api.kprism.test", again, err), 0u) << err;
        }
    };
    ASSERT_NE(res.resolve("api.kprism.test", again, err), 0u) << err;
    uv_run(&loop_, UV_RUN_DEFAULT);
    EXPECT_EQ(called, 3);
    EXPECT_EQ(res.allocated(), 0u);
}

TEST_F(ResolverTest, MalformedServersFailToStart) {
    resolver_ = std::make_unique<Resolver>(&loop_, Resolver::Options{1000, 16, "not an address"});
    std::string err;
    EXPECT_EQ(resolver_->resolve("api.kprism.test", [](const ResolveResult&) {}, err), 0u);
    EXPECT_NE(err.find("DNS servers"), std::string::npos) << err;
}

}  // namespace
}  // namespace kprism
