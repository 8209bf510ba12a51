// SPDX-License-Identifier: Apache-2.0
// Process lifecycle of the real binary: drain on SIGTERM, bad configuration, `check`.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

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
    if (fd < 0 || ::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size()))
        throw std::runtime_error("cannot write a temporary config file");
    ::close(fd);
    return tmpl;
}

// What a bad case passes besides its arguments.
enum class Extra {
    none,
    as_nobody,            // runs as uid/gid 65534 (via setpriv when the test runs as root)
    fd_not_listening,     // a bound, not listening TCP socket passed as systemd's "data" socket
    admin_not_listening,  // the same named "admin"
    fd_garbage_env,       // LISTEN_FDS that is not a number
};

struct BadCase {
    const char* name;
    // "@FILE": a file holding `toml`; "@DIR": a directory; "@FIFO": a named pipe; "@TAKEN": the
    // port of a listening socket. Every case gets --bind-port and --health-port (free ports) unless it sets them.
    std::vector<std::string> args;
    std::string toml;
    int code;  // 1: invalid command line or configuration; 2: valid, but cannot start
    const char* message;  // "@BIND" and "@ADMIN" stand for the --bind-port and --health-port values
    Extra extra = Extra::none;
};

const char* kEp = "--endpoints";

std::string many_endpoints(int n) {
    std::string s;
    for (int i = 1; i <= n; ++i) s += (i > 1 ? "," : "") + std::string("127.0.0.") + std::to_string(i) + ":6443";
    return s;
}
}  // namespace

// Bad command lines, configurations and start-ups against the real binary: each exits with its
// code and says what is wrong in words a user can act on, and nothing starts half-way. The
// configuration errors (1) are `check` errors too; a valid configuration that cannot start (2)
// passes `check`.
TEST(Lifecycle, BadConfigurationsExitOneWithMessage) {
    const std::string ep = "127.0.0.1:1";
    const std::string e = "endpoints = [\"127.0.0.1:1\"]\n";
    const std::string ep65 = many_endpoints(65);
    const std::vector<BadCase> cases = {
        // Flags.
        {"no endpoints", {}, "", 1, "no endpoints configured: pass --endpoints host:port,..."},
        {"empty --endpoints", {kEp, ""}, "", 1, "no endpoints configured"},
        {"unknown flag, near", {kEp, ep, "--endpoint", "x"}, "", 1,
         "unknown flag --endpoint (did you mean 'endpoints'?)"},
        {"unknown flag, far", {kEp, ep, "--frobnicate"}, "", 1, "unknown flag --frobnicate"},
        {"stray argument", {kEp, ep, "extra"}, "", 1,
         "unexpected argument 'extra' (commands: run, check, status, reload; see --help)"},
        {"single-dash flag", {kEp, ep, "-x"}, "", 1, "unexpected argument '-x'"},
        {"flag missing its value", {kEp, ep, "--health-interval"}, "", 1, "--health-interval: missing value"},
        {"--config missing its value", {kEp, ep, "--config"}, "", 1, "--config: missing value"},
        {"flag followed by a flag", {kEp, ep, "--health-interval", "--bind-port", "7000"}, "", 1,
         "--health-interval: missing value before --bind-port (a value that starts with -- goes after '=', as in "
         "--health-interval=VALUE)"},
        {"boolean flag with a separate value", {kEp, ep, "--close-on-down", "false"}, "", 1,
         "unexpected argument 'false': a boolean flag takes its value after '=', as in --close-on-down=false"},
        {"boolean flag, bad value", {kEp, ep, "--close-on-down=maybe"}, "", 1,
         "--close-on-down: invalid value \"maybe\" (want true or false)"},
        {"port not a number", {kEp, ep, "--bind-port", "abc"}, "", 1,
         "--bind-port: invalid value \"abc\" (want a whole number)"},
        {"port 70000", {kEp, ep, "--bind-port", "70000"}, "", 1, "--bind-port: 70000 out of range 1-65535"},
        {"port 0", {kEp, ep, "--health-port", "0"}, "", 1, "--health-port: 0 out of range 1-65535"},
        {"integer with 20 digits", {kEp, ep, "--max-connections", "99999999999999999999"}, "", 1,
         "--max-connections: 99999999999999999999 out of range 1-1000000"},
        {"rise 0", {kEp, ep, "--health-rise", "0"}, "", 1, "--health-rise: 0 out of range 1-100"},
        {"keepalive count 200", {kEp, ep, "--tcp-keepalive-count", "200"}, "", 1,
         "--tcp-keepalive-count: 200 out of range 1-127"},
        {"bad policy", {kEp, ep, "--policy", "fastest"}, "", 1,
         "--policy: invalid value \"fastest\" (want one of: random, least-connections, latency)"},
        {"bad fail mode", {kEp, ep, "--fail-mode", "open"}, "", 1,
         "--fail-mode: invalid value \"open\" (want one of: fail-open, fail-closed)"},
        {"bad log level", {kEp, ep, "--log-level", "verbose"}, "", 1,
         "--log-level: invalid value \"verbose\" (want one of: debug, info, warn, error)"},
        {"bad log format", {kEp, ep, "--log-format", "xml"}, "", 1,
         "--log-format: invalid value \"xml\" (want one of: logfmt, json)"},
        // Durations.
        {"duration without unit", {kEp, ep, "--health-interval", "5"}, "", 1,
         "--health-interval: missing unit in duration '5' (want e.g. 5s)"},
        {"duration, unknown unit", {kEp, ep, "--health-interval", "5x"}, "", 1,
         "--health-interval: unknown unit 'x' in duration '5x'"},
        {"duration empty", {kEp, ep, "--connect-timeout="}, "", 1, "--connect-timeout: empty duration"},
        {"duration negative", {kEp, ep, "--close-spread", "-1s"}, "", 1,
         "--close-spread: invalid duration '-1s' (want e.g. 500ms, 5s, 1m30s)"},
        {"duration too long", {kEp, ep, "--health-interval", "2h"}, "", 1,
         "--health-interval: \"2h\" out of range 100ms-1h"},
        {"duration zero where not allowed", {kEp, ep, "--connect-timeout", "0"}, "", 1,
         "--connect-timeout: \"0\" out of range 1ms-1m"},
        {"duration below a millisecond", {kEp, ep, "--drain-timeout", "250us"}, "", 1,
         "--drain-timeout: duration '250us' is not a whole number of milliseconds"},
        // 160127986751h in nanoseconds wraps an int64_t to 2m56.512s, inside drain_timeout's range.
        {"duration that would wrap", {kEp, ep, "--drain-timeout", "160127986751h"}, "", 1,
         "--drain-timeout: duration '160127986751h' is too large (at most 8760h)"},
        // Rules between keys.
        {"timeout = interval", {kEp, ep, "--health-timeout", "5s"}, "", 1,
         "health.timeout: 5s must be shorter than health.interval (5s) (the other value is from default)"},
        {"fast interval > interval", {kEp, ep, "--health-interval", "2s", "--health-fast-interval", "3s"}, "", 1,
         "health.fast_interval: 3s must not be longer than health.interval (2s) (the other value is from "
         "--health-interval)"},
        {"admin port = listen port", {kEp, ep, "--bind-port", "7000", "--health-port", "7000"}, "", 1,
         "health.port: 7000 is also the listen port bind_port (the other value is from --bind-port)"},
        {"health path without slash", {kEp, ep, "--health-path", "readyz"}, "", 1,
         "health.path: \"readyz\" must start with '/' and contain no spaces"},
        {"empty key path", {kEp, ep, "--client-key", ""}, "", 1, "--client-key: health.client_key: must not be empty"},
        {"empty CA path", {kEp, ep, "--ca-file="}, "", 1, "--ca-file: health.ca_file: must not be empty"},
        // Endpoints.
        // off-host: rejected before start, as are the next four entries: nothing is connected to
        {"IPv6 endpoint without brackets", {kEp, "fd00::1:6443"}, "", 1,
         "invalid address 'fd00::1:6443': IPv6 addresses need brackets, e.g. [fd00::1]:6443"},
        {"endpoint without port", {kEp, "127.0.0.9"}, "", 1,
         "invalid address '127.0.0.9': missing port (want host:port)"},
        // off-host: rejected before start
        {"IPv6 endpoint without port", {kEp, "[fd00::1]"}, "", 1,
         "invalid address '[fd00::1]': want [ipv6]:port"},
        {"endpoint port 0", {kEp, "127.0.0.1:0"}, "", 1, "port 0 out of range 1-65535"},
        {"endpoint without host", {kEp, ":6443"}, "", 1, "invalid address ':6443': missing host"},
        {"endpoint, bad IPv4", {kEp, "10.0.0.256:6443"}, "", 1,
         "'10.0.0.256' is not an IP address or hostname"},
        {"endpoint, bad hostname", {kEp, "a..b:6443"}, "", 1, "'a..b' is not an IP address or hostname"},
        {"duplicate endpoint", {kEp, "127.0.0.1:1,127.0.0.1:1"}, "", 1, "duplicate endpoint '127.0.0.1:1'"},
        // off-host: rejected before start
        {"duplicate IPv6 endpoint spelled differently", {kEp, "[fd00::1]:6443,[fd00:0::1]:6443"}, "", 1,
         "duplicate endpoint '[fd00:0::1]:6443'"},
        {"duplicate hostname endpoint in another case", {kEp, "API.example:6443,api.example:6443"}, "", 1,
         "duplicate endpoint 'api.example:6443'"},
        {"65 endpoints", {kEp, ep65}, "", 1, "65 endpoints configured; at most 64 are supported"},
        // Listen addresses.
        {"bind address is a hostname", {kEp, ep, "--bind-address", "localhost"}, "", 1,
         "bind_address: 'localhost' is not an IP address"},
        {"bind address empty", {kEp, ep, "--bind-address", ""}, "", 1, "bind_address: no listen address"},
        {"bind address 0.0.0.0", {kEp, ep, "--bind-address", "0.0.0.0"}, "", 1,
         "bind_address: '0.0.0.0' is not a loopback address; kprism must not expose the API port (set "
         "allow_non_loopback = true to do it anyway)"},
        {"bind address ::", {kEp, ep, "--bind-address", "::"}, "", 1, "'::' is not a loopback address"},
        {"bind address twice", {kEp, ep, "--bind-address", "127.0.0.1,127.0.0.1"}, "", 1,
         "bind_address: duplicate address '127.0.0.1'"},
        {"admin address 0.0.0.0", {kEp, ep, "--health-bind-address", "0.0.0.0"}, "", 1,
         "health.bind_address: '0.0.0.0' is not a loopback address (set allow_non_loopback = true to do it anyway)"},
        {"admin address is a hostname", {kEp, ep, "--health-bind-address", "localhost"}, "", 1,
         "health.bind_address: 'localhost' is not an IP address"},
        {"admin address empty", {kEp, ep, "--health-bind-address="}, "", 1,
         "health.bind_address: '' is not an IP address"},
        // The file.
        {"config file missing", {"--config", "/nonexistent/kprism.toml"}, "", 1,
         "/nonexistent/kprism.toml: cannot read config file: No such file or directory"},
        {"config file is a directory", {"--config", "@DIR"}, "", 1,
         "cannot read config file: not a regular file"},
        {"config file is a FIFO (no hang)", {"--config", "@FIFO"}, "", 1, "cannot read config file: not a regular file"},
        {"config file unreadable", {"--config", "@FILE"}, "endpoints = [\"127.0.0.1:1\"]\n", 1,
         "cannot read config file: Permission denied", Extra::as_nobody},
        {"empty file", {"--config", "@FILE"}, "", 1, "no endpoints configured"},
        {"invalid TOML", {"--config", "@FILE"}, "endpoints = [\"127.0.0.1:1\"\n", 1,
         ":1:28: invalid TOML: Error while parsing array: encountered end-of-file"},
        {"key given twice", {"--config", "@FILE"}, "endpoints = [\"127.0.0.1:1\"]\nbind_port = 1\nbind_port = 2\n", 1,
         ":3:13: invalid TOML: Error while parsing key-value pair: cannot redefine existing integer 'bind_port'"},
        {"invalid table header", {"--config", "@FILE"}, "endpoints = [\"127.0.0.1:1\"]\n[\n", 1,
         ":2:2: invalid TOML: invalid table header"},
        {"invalid UTF-8", {"--config", "@FILE"}, "\xff\xfe\n", 1, ":1:1: invalid TOML: Encountered invalid utf-8"},
        {"NUL byte", {"--config", "@FILE"}, e + std::string(1, '\0') + "\n", 1, ":2:1: invalid TOML"},
        {"integer beyond 64 bits", {"--config", "@FILE"}, "endpoints = [\"127.0.0.1:1\"]\nbind_port = 99999999999999999999\n",
         1, "is not representable in 64 bits"},
        {"unknown key", {"--config", "@FILE"}, "endpoints = [\"127.0.0.1:1\"]\nendpoint = 3\n", 1,
         ":2: unknown key 'endpoint' (did you mean 'endpoints'?)"},
        {"unknown key in a section", {"--config", "@FILE"}, "endpoints = [\"127.0.0.1:1\"]\n[health]\nintervl = \"1s\"\n",
         1, ":3: unknown key 'health.intervl' (did you mean 'health.interval'?)"},
        {"unknown section", {"--config", "@FILE"}, "endpoints = [\"127.0.0.1:1\"]\n[helth]\ninterval = \"1s\"\n", 1,
         ":2: unknown section [helth] (did you mean 'health'?)"},
        {"section as a value", {"--config", "@FILE"}, "endpoints = [\"127.0.0.1:1\"]\nhealth = 3\n", 1,
         ":2: 'health' is a section: write [health] and its keys under it"},
        {"array of tables", {"--config", "@FILE"}, "endpoints = [\"127.0.0.1:1\"]\n[[health]]\nport = 1\n", 1,
         ":2: 'health' is a section: write [health] and its keys under it, not a value or an array of tables"},
        {"table for a value", {"--config", "@FILE"}, "endpoints = [\"127.0.0.1:1\"]\n[policy]\nx = 1\n", 1,
         ":2: policy: want a string, not a table"},
        {"integer as a string", {"--config", "@FILE"}, "endpoints = [\"127.0.0.1:1\"]\nbind_port = \"x\"\n", 1,
         ":2: bind_port: want an integer"},
        {"float for an integer", {"--config", "@FILE"}, "endpoints = [\"127.0.0.1:1\"]\nbind_port = 1.5\n", 1,
         ":2: bind_port: want an integer"},
        {"negative port in the file", {"--config", "@FILE"}, "endpoints = [\"127.0.0.1:1\"]\nbind_port = -3\n", 1,
         ":2: bind_port: -3 out of range 1-65535"},
        {"duration as an integer", {"--config", "@FILE"}, "endpoints = [\"127.0.0.1:1\"]\n[health]\ninterval = 5\n", 1,
         ":3: health.interval: want a duration string such as \"5s\""},
        {"boolean as a string", {"--config", "@FILE"}, "endpoints = [\"127.0.0.1:1\"]\nallow_non_loopback = \"yes\"\n",
         1, ":2: allow_non_loopback: want true or false"},
        {"choice in the wrong case", {"--config", "@FILE"}, "endpoints = [\"127.0.0.1:1\"]\npolicy = \"Random\"\n", 1,
         ":2: policy: invalid value \"Random\" (want one of: random, least-connections, latency)"},
        {"endpoints with a number", {"--config", "@FILE"}, "endpoints = [\"127.0.0.1:1\", 2]\n", 1,
         ":1: endpoints: want an array of strings"},
        {"endpoint table, unknown field", {"--config", "@FILE"},
         "endpoints = [{ address = \"127.0.0.1:1\", weight = 2 }]\n", 1,
         ":1: endpoints: unknown endpoint field 'weight' (fields: address, zone, server_name)"},
        {"endpoint table without address", {"--config", "@FILE"}, "endpoints = [{ zone = \"a\" }]\n", 1,
         ":1: endpoints: endpoint table without address"},
        {"empty endpoint list", {"--config", "@FILE"}, "endpoints = []\n", 1, "no endpoints configured"},
        {"duration that would wrap, in the file", {"--config", "@FILE"},
         "endpoints = [\"127.0.0.1:1\"]\ndrain_timeout = \"160127986751h\"\n", 1,
         ":2: drain_timeout: duration '160127986751h' is too large (at most 8760h)"},
        {"timeout vs interval in the file", {"--config", "@FILE"},
         "endpoints = [\"127.0.0.1:1\"]\n[health]\ntimeout = \"3s\"\ninterval = \"2s\"\n", 1,
         ":3: health.timeout: 3s must be shorter than health.interval (2s) (the other value is from "},
        // off-host: a listen address, refused before start: nothing is connected to
        {"non-loopback in the file", {"--config", "@FILE"}, "endpoints = [\"127.0.0.1:1\"]\nbind_address = [\"10.0.0.5\"]\n",
         1, ":2: bind_address: '10.0.0.5' is not a loopback address"},
        {"file over the size limit", {"--config", "@FILE"}, std::string(64 * 1024 + 1, '#'), 1,
         "config file is 65537 bytes; the limit is 65536 bytes (64 KiB)"},
        // Valid, but cannot start: exit status 2.
        {"listen port in use", {kEp, ep, "--bind-port", "@TAKEN"}, "", 2,
         "cannot listen on 127.0.0.1:@BIND: address already in use"},
        {"admin port in use", {kEp, ep, "--health-port", "@TAKEN"}, "", 2,
         "cannot listen on the admin address 127.0.0.1:@ADMIN (health.bind_address, health.port): address already "
         "in use"},
        // off-host: listen addresses this host does not have (TEST-NET-1): bind fails, nothing is sent
        {"address not on this host", {kEp, ep, "--allow-non-loopback", "--bind-address", "192.0.2.1"}, "", 2,
         "cannot listen on 192.0.2.1:@BIND: address not available"},
        // off-host: as above
        {"admin address not on this host", {kEp, ep, "--allow-non-loopback", "--health-bind-address", "192.0.2.1"},
         "", 2, "cannot listen on the admin address 192.0.2.1:@ADMIN"},
        {"passed fd not listening", {kEp, ep}, "", 2, "is not listening", Extra::fd_not_listening},
        {"passed admin fd not listening", {kEp, ep}, "", 2, "is not listening", Extra::admin_not_listening},
        {"LISTEN_FDS not a number", {kEp, ep}, "", 2, "invalid LISTEN_PID, LISTEN_FDS or LISTEN_FDNAMES",
         Extra::fd_garbage_env},
    };
    EXPECT_GE(cases.size(), 40u);
    TcpServer taken(nullptr);
    char dir[] = "/tmp/kprism-confdir-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    for (const auto& c : cases) {
        SCOPED_TRACE(c.name);
        std::string file, bind_port, health_port;
        std::vector<std::string> args;
        for (auto a : c.args) {
            if (a == "@FILE") {
                a = file = write_file(c.toml);
                // Root reads any file: the case runs as nobody then, and the file stays 0600.
                if (c.extra == Extra::as_nobody) chmod(file.c_str(), geteuid() == 0 ? 0600 : 0);
            } else if (a == "@DIR") {
                a = dir;
            } else if (a == "@FIFO") {
                a = std::string(dir) + "/fifo";
                if (access(a.c_str(), F_OK) != 0) {
                    ASSERT_EQ(mkfifo(a.c_str(), 0600), 0);
                }
            } else if (a == "@TAKEN") {
                a = std::to_string(taken.port());
            }
            if (!args.empty() && args.back() == "--bind-port") bind_port = a;
            if (!args.empty() && args.back() == "--health-port") health_port = a;
            args.push_back(a);
        }
        // Before the case's own arguments, so that a flag missing its value at the end stays last.
        for (auto [flag, value] : {std::pair{"--bind-port", &bind_port}, std::pair{"--health-port", &health_port}}) {
            if (!value->empty()) continue;
            *value = std::to_string(free_port());
            args.insert(args.begin(), {flag, *value});
        }
        std::string message = c.message;
        for (auto [ph, value] : {std::pair{"@BIND", &bind_port}, std::pair{"@ADMIN", &health_port}})
            if (size_t at = message.find(ph); at != std::string::npos) message.replace(at, strlen(ph), *value);

        Spawn spawn;
        int passed = -1;
        if (c.extra == Extra::fd_not_listening || c.extra == Extra::admin_not_listening) {
            passed = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
            sockaddr_in a{};
            a.sin_family = AF_INET;
            a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            ASSERT_EQ(::bind(passed, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
            spawn = Spawn{{"LISTEN_FDS=1", "LISTEN_PID={pid}",
                           c.extra == Extra::fd_not_listening ? "LISTEN_FDNAMES=data" : "LISTEN_FDNAMES=admin"},
                          {passed}};
        } else if (c.extra == Extra::fd_garbage_env) {
            spawn = Spawn{{"LISTEN_FDS=one", "LISTEN_PID={pid}"}, {}};
        }
        std::vector<std::string> prefix;
        if (c.extra == Extra::as_nobody && geteuid() == 0)
            prefix = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"};
        auto run_kprism = [&](bool check) {
            std::vector<std::string> argv = prefix;
            argv.push_back(kprism_bin());
            if (check) argv.push_back("check");
            argv.insert(argv.end(), args.begin(), args.end());
            Process p(argv, spawn);
            int code = p.wait(10000ms);
            return Result{code, p.output()};
        };
        auto r = run_kprism(false);
        EXPECT_EQ(r.code, c.code) << r.output;
        EXPECT_NE(r.output.find(message), std::string::npos) << "want: " << message << "\ngot: " << r.output;
        EXPECT_EQ(r.output.find("msg=started"), std::string::npos) << "must not start half-way";
        if (c.code == 1) {
            EXPECT_EQ(r.output.find("listening"), std::string::npos) << "must not start half-way";
            EXPECT_EQ(r.output.find("kprism starting"), std::string::npos) << "rejected before starting";
        } else {
            EXPECT_NE(r.output.find("msg=\"startup failed\""), std::string::npos) << r.output;
        }
        // `check` agrees: the same error, or valid when only starting fails.
        auto ck = run_kprism(true);
        EXPECT_EQ(ck.code, c.code == 1 ? 1 : 0) << ck.output;
        if (c.code == 1) {
            EXPECT_NE(ck.output.find(message), std::string::npos) << ck.output;
        }
        if (passed >= 0) ::close(passed);
        if (!file.empty()) unlink(file.c_str());
    }
    unlink((std::string(dir) + "/fifo").c_str());
    rmdir(dir);
}

TEST(Lifecycle, CheckPrintsEffectiveConfig) {
    std::string file = write_file("endpoints = [\"127.0.0.9:6443\", \"[::1]:6443\"]\n[health]\ninterval = \"2s\"\n");
    auto r = run({kprism_bin(), "check", "--config", file, "--health-timeout", "1s"});
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("endpoints = [\"127.0.0.9:6443\", \"[::1]:6443\"]  # " + file + ":1"),
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

// --log-format json: every line is a JSON object whose numbers and booleans are JSON numbers and
// booleans ("pid":1119, "connections":0, "notified_systemd":false) and whose strings are strings.
TEST(Lifecycle, JsonLogLinesKeepValueTypes) {
    TcpServer up(TcpServer::echo);
    Process k({kprism_bin(), "--endpoints", up.endpoint(), "--bind-port", std::to_string(free_port()), "--health-port",
               std::to_string(free_port()), "--log-format", "json", "--drain-timeout", "200ms"});
    ASSERT_TRUE(k.wait_output("\"msg\":\"ready\"")) << k.output();
    k.signal(SIGTERM);
    ASSERT_EQ(k.wait(5000ms), 0) << k.output();
    std::string out = k.output();
    size_t lines = 0;
    bool saw_pid = false, saw_bool = false, saw_count = false;
    for (size_t at = 0, nl; (nl = out.find('\n', at)) != std::string::npos; at = nl + 1) {
        std::string line = out.substr(at, nl - at);
        nlohmann::json j;
        ASSERT_NO_THROW(j = nlohmann::json::parse(line)) << line;
        ASSERT_TRUE(j.is_object()) << line;
        ++lines;
        EXPECT_TRUE(j["ts"].is_string() && j["level"].is_string() && j["msg"].is_string()) << line;
        if (j["msg"] == "kprism starting") {
            ASSERT_TRUE(j["pid"].is_number_integer()) << line;
            EXPECT_EQ(j["pid"].get<int>(), k.pid());
            EXPECT_TRUE(j["version"].is_string()) << line;
            saw_pid = true;
        }
        if (j["msg"] == "ready") {
            ASSERT_TRUE(j["notified_systemd"].is_boolean()) << line;
            EXPECT_FALSE(j["notified_systemd"].get<bool>());
            EXPECT_TRUE(j["status"].is_string()) << line;
            saw_bool = true;
        }
        if (j["msg"] == "started") {
            EXPECT_TRUE(j["max_connections"].is_number_integer()) << line;
            EXPECT_TRUE(j["upstreams"].is_string()) << line;
            saw_count = true;
        }
    }
    EXPECT_GE(lines, 4u) << out;
    EXPECT_TRUE(saw_pid && saw_bool && saw_count) << out;
}
