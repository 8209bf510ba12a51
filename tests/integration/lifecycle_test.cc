// Process lifecycle of the real binary: drain on SIGTERM, bad configuration, `check`.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>

#include "harness/harness.h"

using namespace it;

TEST(Lifecycle, SigtermDrainsThenExitsZero) {
    TcpServer up(TcpServer::echo);
    Kprism k({up.endpoint()});
    int fd = connect_to(k.port);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_all(fd, "a", 1));
    char c;
    ASSERT_EQ(recv_exact(fd, &c, 1), 1u);
    k.signal(SIGTERM);
    ASSERT_TRUE(k.wait_output("msg=\"shutting down\""));
    // No new connections, but the established one still carries data.
    EXPECT_TRUE(eventually([&] {
        int n = connect_to(k.port);
        if (n >= 0) ::close(n);
        return n < 0;
    }));
    ASSERT_TRUE(send_all(fd, "b", 1));
    ASSERT_EQ(recv_exact(fd, &c, 1), 1u);
    EXPECT_EQ(c, 'b');
    EXPECT_TRUE(k.running());
    ::close(fd);
    EXPECT_EQ(k.wait(5000ms), 0);
    EXPECT_NE(k.output().find("msg=stopped"), std::string::npos);
}

TEST(Lifecycle, DrainTimeoutClosesLeftovers) {
    TcpServer up(TcpServer::echo);
    Kprism k({up.endpoint()}, {"--drain-timeout", "300ms"});
    int fd = connect_to(k.port);
    ASSERT_TRUE(send_all(fd, "a", 1));
    char c;
    ASSERT_EQ(recv_exact(fd, &c, 1), 1u);
    k.signal(SIGTERM);
    EXPECT_EQ(k.wait(5000ms), 0);
    EXPECT_NE(k.output().find("drain timeout"), std::string::npos);
    int err = -1;
    recv_until_eof(fd, &err, 2000ms);
    EXPECT_NE(err, ETIMEDOUT);
    ::close(fd);
}

TEST(Lifecycle, SecondSignalClosesAtOnce) {
    TcpServer up(TcpServer::echo);
    Kprism k({up.endpoint()});
    int fd = connect_to(k.port);
    ASSERT_TRUE(send_all(fd, "a", 1));
    char c;
    ASSERT_EQ(recv_exact(fd, &c, 1), 1u);
    k.signal(SIGTERM);
    ASSERT_TRUE(k.wait_output("msg=\"shutting down\""));
    k.signal(SIGINT);
    EXPECT_EQ(k.wait(5000ms), 0);
    ::close(fd);
}

TEST(Lifecycle, BindFailureExitsTwo) {
    TcpServer taken(nullptr);
    auto r = run({kprism_bin(), "--endpoints", "127.0.0.1:6443", "--bind-port", std::to_string(taken.port()),
                  "--health-port", std::to_string(free_port())});
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.output.find("cannot listen on 127.0.0.1:" + std::to_string(taken.port())), std::string::npos)
        << r.output;
}

namespace {
std::string write_file(const std::string& text) {
    char tmpl[] = "/tmp/kprism-conf-XXXXXX";
    int fd = mkstemp(tmpl);
    ::write(fd, text.data(), text.size());
    ::close(fd);
    return tmpl;
}

struct BadCase {
    const char* name;
    std::vector<std::string> args;  // "@FILE" is replaced by a file holding `toml`
    const char* toml;
    const char* message;
};
}  // namespace

TEST(Lifecycle, BadConfigurationsExitOneWithMessage) {
    const std::vector<BadCase> cases = {
        {"no endpoints", {}, nullptr, "no endpoints configured"},
        {"unknown flag", {"--endpoints", "127.0.0.1:1", "--endpoint", "x"}, nullptr, "unknown flag --endpoint"},
        {"port 0", {"--endpoints", "127.0.0.1:0"}, nullptr, "port 0 out of range"},
        {"port 70000", {"--endpoints", "127.0.0.1:1", "--bind-port", "70000"}, nullptr, "--bind-port: 70000 out of range"},
        {"duplicate", {"--endpoints", "127.0.0.1:1,127.0.0.1:1"}, nullptr, "duplicate endpoint '127.0.0.1:1'"},
        {"timeout >= interval", {"--endpoints", "127.0.0.1:1", "--health-timeout", "5s"}, nullptr,
         "must be shorter than health.interval"},
        {"bad duration", {"--endpoints", "127.0.0.1:1", "--health-interval", "5"}, nullptr, "missing unit"},
        {"non-loopback", {"--endpoints", "127.0.0.1:1", "--bind-address", "0.0.0.0"}, nullptr, "not a loopback"},
        {"unknown key", {"--config", "@FILE"}, "endpoints = [\"127.0.0.1:1\"]\nendpoint = 3\n",
         ":2: unknown key 'endpoint' (did you mean 'endpoints'?)"},
        {"invalid toml", {"--config", "@FILE"}, "endpoints = [\"127.0.0.1:1\"\n", "invalid TOML"},
        {"wrong type", {"--config", "@FILE"}, "endpoints = [\"127.0.0.1:1\"]\nbind_port = \"x\"\n",
         ":2: bind_port: want an integer"},
        {"unreadable", {"--config", "/nonexistent/kprism.toml"}, nullptr, "cannot read config file"},
        {"empty list", {"--config", "@FILE"}, "endpoints = []\n", "no endpoints configured"},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.name);
        std::vector<std::string> argv = {kprism_bin()};
        std::string file;
        for (auto a : c.args) {
            if (a == "@FILE") a = file = write_file(c.toml);
            argv.push_back(a);
        }
        auto r = run(argv);
        EXPECT_EQ(r.code, 1) << r.output;
        EXPECT_NE(r.output.find(c.message), std::string::npos) << r.output;
        EXPECT_EQ(r.output.find("listening"), std::string::npos) << "must not start half-way";
        // `check` agrees with the daemon.
        argv.insert(argv.begin() + 1, "check");
        EXPECT_EQ(run(argv).code, 1);
        if (!file.empty()) unlink(file.c_str());
    }
}

TEST(Lifecycle, CheckPrintsEffectiveConfig) {
    std::string file = write_file("endpoints = [\"10.0.0.1:6443\", \"[fd00::1]:6443\"]\n[health]\ninterval = \"2s\"\n");
    auto r = run({kprism_bin(), "check", "--config", file, "--health-timeout", "1s"});
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("endpoints = [\"10.0.0.1:6443\", \"[fd00::1]:6443\"]  # " + file + ":1"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("interval = \"2s\"  # " + file + ":3"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("timeout = \"1s\"  # --health-timeout"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("configuration is valid"), std::string::npos);
    unlink(file.c_str());
}

TEST(Lifecycle, VersionAndHelp) {
    auto v = run({kprism_bin(), "--version"});
    EXPECT_EQ(v.code, 0);
    EXPECT_EQ(v.output.rfind("kprism ", 0), 0u);
    auto h = run({kprism_bin(), "--help"});
    EXPECT_EQ(h.code, 0);
    EXPECT_NE(h.output.find("--endpoints"), std::string::npos);
}
